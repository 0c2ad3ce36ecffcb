// A fixed-memory latency histogram (log-linear, in the manner of HdrHistogram):
// every power-of-two range of nanoseconds is split into kSubBuckets equal
// sub-buckets, so a bucket is at most 1/kSubBuckets (3.1%) of its values wide
// and a percentile reported as the bucket's midpoint is within
// kRelativeError (1.6%) of the true sample. Values below kSubBuckets ns are
// exact. 8 KiB, no allocation, record() is a few instructions: cheap enough
// for one per connection and one per procedure.
//
// Threads: like Counter (stats.h), one writer — record(), reset() and
// merge() into it run on the thread that owns the histogram — and any number
// of readers on other threads (telemetry). Every word is read and written
// with relaxed atomics, so a reader sees each bucket whole but the buckets
// together only approximately at one instant (count() may differ from the
// bucket sum by the samples recorded while it read).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tern {

class Histogram {
 public:
  static constexpr int kSubBucketBits = 5;
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBucketBits;  // 32 per power of two
  // Values at or above 2^kMaxBits ns (68.7 s) are counted in the top bucket
  // (their exact maximum is still kept by max()).
  static constexpr int kMaxBits = 36;
  static constexpr size_t kBuckets = (kMaxBits - kSubBucketBits + 1) * kSubBuckets;  // 1024
  // Worst-case |reported - true| / true for a percentile of values >= kSubBuckets.
  static constexpr double kRelativeError = 1.0 / (2 * kSubBuckets);

  void record(uint64_t ns) { record(ns, bucket_of(ns)); }
  // With its bucket already found (i == bucket_of(ns)): one sample recorded
  // in two histograms finds it once.
  void record(uint64_t ns, size_t i) {
    store(&buckets_[i], load(&buckets_[i]) + 1);
    store(&count_, load(&count_) + 1);
    store(&sum_, load(&sum_) + ns);
    if (ns < load(&min_)) store(&min_, ns);
    if (ns > load(&max_)) store(&max_, ns);
  }
  // Adds another histogram's samples (the other may be written concurrently
  // by its owner: what it held at about this moment is added).
  void merge(const Histogram& other);
  void reset();

  uint64_t count() const { return load(&count_); }
  uint64_t sum() const { return load(&sum_); }  // of every sample, ns (Prometheus' _sum)
  uint64_t min() const;  // 0 when empty
  uint64_t max() const { return load(&max_); }
  double mean() const;   // exact (from the sum of the samples)
  double stdev() const;  // population standard deviation, from the bucket midpoints
  // The value at or below which p percent of the samples lie (p in [0, 100]):
  // the midpoint of that sample's bucket, kept inside [min(), max()] (max()
  // for the unbounded top bucket). 0 when empty; p <= 0 gives min() and
  // p >= 100 gives max().
  uint64_t percentile(double p) const;

  // Bucket geometry, for exporters and tests.
  // Group g = shift + 1 covers [2^msb, 2^(msb+1)) in kSubBuckets steps of
  // 2^shift (shift = msb - kSubBucketBits), its buckets starting at
  // g * kSubBuckets: bucket shift * kSubBuckets + (ns >> shift). The values
  // below 2 * kSubBuckets take that formula with shift 0 (the exact values
  // and group 1 alike), so setting the kSubBuckets bit before finding the
  // top bit serves them without a branch of their own; values past the range
  // land above the last bucket and are clamped to it. One test, no jumps,
  // for every round trip recorded (~10 instructions fewer than a branch per
  // case; tests/unit/base_histogram_test.cc checks it against that form).
  static size_t bucket_of(uint64_t ns) {
    const int shift = 63 - __builtin_clzll(ns | kSubBuckets) - kSubBucketBits;
    const uint64_t i = static_cast<uint64_t>(shift) * kSubBuckets + (ns >> shift);
    return static_cast<size_t>(i < kBuckets ? i : kBuckets - 1);
  }
  static uint64_t bucket_low(size_t i);   // smallest value in bucket i
  static uint64_t bucket_high(size_t i);  // largest value in bucket i
  uint64_t bucket_count(size_t i) const { return load(&buckets_[i]); }

 private:
  friend class LazyHistogram;  // merge_into(): its buckets into ours
  static uint64_t load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
  static void store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  uint64_t buckets_[kBuckets] = {};
};

static_assert(sizeof(Histogram) <= 8 * 1024 + 64, "a histogram is a few KiB, fixed");

}  // namespace tern
