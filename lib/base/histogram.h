// Histogram: a fixed-memory, log-linear distribution of non-negative values
// (latencies in nanoseconds), as HdrHistogram lays it out: values below 32
// have a bucket each; above, every power of two is split into 32 buckets, so
// a bucket's width is at most 1/32 of its values (percentiles within ~3%).
// Up to 2^40 (18 minutes in ns); larger values land in the last bucket.
//
// One writer (the engine's thread) and any number of readers: buckets are
// plain words updated with relaxed atomic stores, as Counter does, so a
// reader on another thread sees a consistent-enough snapshot without a lock
// and the writer pays no locked instruction. 9.5 KiB each.
#pragma once

#include <cstdint>

namespace tern {

class Histogram {
 public:
  static constexpr int kSubBits = 5;
  static constexpr uint32_t kSub = 1u << kSubBits;  // 32
  static constexpr int kMaxExp = 40;
  static constexpr uint32_t kBuckets = kSub + (kMaxExp - kSubBits + 1) * kSub;

  void record(uint64_t v) {
    uint32_t i = bucket_of(v);
    store(&b_[i], load(&b_[i]) + 1);
    store(&count_, load(&count_) + 1);
    store(&sum_, load(&sum_) + v);
    if (v > load(&max_)) store(&max_, v);
    if (v < load(&min_)) store(&min_, v);
  }
  uint64_t count() const { return load(&count_); }
  uint64_t min() const { return count() == 0 ? 0 : load(&min_); }
  uint64_t max() const { return load(&max_); }
  uint64_t mean() const {
    uint64_t n = count();
    return n == 0 ? 0 : load(&sum_) / n;
  }
  // The value at or below which a fraction p (0..1] of the values lie: the
  // upper edge of the bucket that holds it, capped at max(). 0 when empty.
  uint64_t percentile(double p) const;
  // Adds another histogram's values (readers merging per-connection ones).
  void merge(const Histogram& o);
  void reset();

  static uint32_t bucket_of(uint64_t v) {
    if (v < kSub) return static_cast<uint32_t>(v);
    int e = 63 - __builtin_clzll(v);  // >= kSubBits
    if (e > kMaxExp) return kBuckets - 1;
    return kSub + static_cast<uint32_t>(e - kSubBits) * kSub +
           static_cast<uint32_t>((v >> (e - kSubBits)) & (kSub - 1));
  }
  // The largest value bucket i holds.
  static uint64_t bucket_top(uint32_t i) {
    if (i < kSub) return i;
    uint32_t e = (i - kSub) / kSub + kSubBits, sub = (i - kSub) % kSub;
    uint64_t width = 1ull << (e - kSubBits);
    return (1ull << e) + (sub + 1) * width - 1;
  }

 private:
  static uint64_t load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
  static void store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
  uint64_t b_[kBuckets] = {};
  uint64_t count_ = 0, sum_ = 0, max_ = 0, min_ = UINT64_MAX;
};

}  // namespace tern
