// Latency statistics for tern-perf in fixed memory, however long the run: a
// log-linear histogram (the HDR histogram's layout) instead of every sample.
//
// Values (ns) below 64 have a bucket each; above, every power-of-two range
// [2^k, 2^(k+1)) is split into 64 equal sub-buckets, so a bucket is at most
// 1/64 (1.6%) of its values wide, and a percentile read from it is within
// 0.8% of the true one (the bucket's midpoint, clamped to the exact min and
// max). 2^40 ns (18 minutes) and above share the last bucket. 2,240 buckets:
// 18 KiB per histogram, whatever --iters says. Mean and standard deviation
// come from exact running sums, not from the buckets.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace tern::apps {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 6;  // 64 sub-buckets per power of two
  static constexpr unsigned kSub = 1u << kSubBits;
  static constexpr unsigned kMaxBits = 40;  // values from 2^40 ns share the last bucket
  static constexpr unsigned kBuckets = kSub + (kMaxBits - kSubBits) * kSub;

  static unsigned bucket_of(uint64_t ns) {
    if (ns < kSub) return static_cast<unsigned>(ns);
    unsigned k = 63 - static_cast<unsigned>(std::countl_zero(ns));  // 2^k <= ns < 2^(k+1)
    if (k >= kMaxBits) return kBuckets - 1;
    unsigned sub = static_cast<unsigned>(ns >> (k - kSubBits)) & (kSub - 1);
    return kSub + (k - kSubBits) * kSub + sub;
  }
  // The values bucket b holds: [lower(b), upper(b)).
  static uint64_t lower(unsigned b) {
    if (b < kSub) return b;
    unsigned k = (b - kSub) / kSub + kSubBits, sub = (b - kSub) % kSub;
    return (uint64_t{1} << k) + (uint64_t{sub} << (k - kSubBits));
  }
  static uint64_t upper(unsigned b) { return b + 1 < kBuckets ? lower(b + 1) : UINT64_MAX; }

  void add(double ns) {
    uint64_t v = ns <= 0 ? 0 : ns >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(ns);
    ++counts_[bucket_of(v)];
    ++count_;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
    double d = static_cast<double>(v);
    sum_ += d;
    sum_sq_ += d * d;
  }
  void merge(const LatencyHistogram& o) {
    for (unsigned b = 0; b < kBuckets; ++b) counts_[b] += o.counts_[b];
    count_ += o.count_;
    min_ = std::min(min_, o.min_);
    max_ = std::max(max_, o.max_);
    sum_ += o.sum_;
    sum_sq_ += o.sum_sq_;
  }

  uint64_t count() const { return count_; }
  uint64_t bucket_count(unsigned b) const { return counts_[b]; }
  double min() const { return count_ ? static_cast<double>(min_) : 0; }
  double max() const { return count_ ? static_cast<double>(max_) : 0; }
  double mean() const { return count_ ? sum_ / static_cast<double>(count_) : 0; }
  // Population standard deviation.
  double stdev() const {
    if (count_ < 2) return 0;
    double m = mean();
    return std::sqrt(std::max(0.0, sum_sq_ / static_cast<double>(count_) - m * m));
  }
  // Nearest-rank percentile, q in [0, 1].
  double percentile(double q) const {
    if (count_ == 0) return 0;
    if (q <= 0) return min();
    if (q >= 1) return max();
    uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (unsigned b = 0; b < kBuckets; ++b) {
      seen += counts_[b];
      if (seen >= rank) {
        double mid = b < kSub ? static_cast<double>(b)
                              : (static_cast<double>(lower(b)) + static_cast<double>(upper(b)) - 1) / 2;
        return std::clamp(mid, min(), max());
      }
    }
    return max();
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0, min_ = UINT64_MAX, max_ = 0;
  double sum_ = 0, sum_sq_ = 0;
};

struct Percentiles {
  double min_ns = 0, p50_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0, mean_ns = 0, stdev_ns = 0;
  uint64_t count = 0;
};

inline Percentiles percentiles(const LatencyHistogram& h) {
  Percentiles p;
  p.count = h.count();
  p.min_ns = h.min();
  p.p50_ns = h.percentile(0.50);
  p.p99_ns = h.percentile(0.99);
  p.p999_ns = h.percentile(0.999);
  p.max_ns = h.max();
  p.mean_ns = h.mean();
  p.stdev_ns = h.stdev();
  return p;
}

}  // namespace tern::apps
