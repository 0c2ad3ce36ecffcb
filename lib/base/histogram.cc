#include "base/histogram.h"

#include <cmath>

namespace tern {

uint64_t Histogram::bucket_low(size_t i) {
  if (i < kSubBuckets) return i;
  uint64_t group = i / kSubBuckets;  // >= 1
  uint64_t sub = i % kSubBuckets;
  int shift = static_cast<int>(group) - 1;
  return (kSubBuckets + sub) << shift;
}

uint64_t Histogram::bucket_high(size_t i) {
  if (i == kBuckets - 1) return UINT64_MAX;  // the top bucket also takes everything above the range
  return bucket_low(i + 1) - 1;
}

void Histogram::merge(const Histogram& other) {
  uint64_t n = other.count();
  if (n == 0) return;
  for (size_t i = 0; i < kBuckets; ++i) {
    uint64_t c = other.bucket_count(i);
    if (c != 0) store(&buckets_[i], load(&buckets_[i]) + c);
  }
  store(&count_, load(&count_) + n);
  store(&sum_, load(&sum_) + load(&other.sum_));
  uint64_t omin = load(&other.min_);
  uint64_t omax = load(&other.max_);
  if (omin < load(&min_)) store(&min_, omin);
  if (omax > load(&max_)) store(&max_, omax);
}

void Histogram::reset() {
  for (auto& b : buckets_) store(&b, 0);
  store(&count_, 0);
  store(&sum_, 0);
  store(&min_, UINT64_MAX);
  store(&max_, 0);
}

uint64_t Histogram::min() const {
  uint64_t m = load(&min_);
  return m == UINT64_MAX ? 0 : m;
}

double Histogram::mean() const {
  uint64_t n = count();
  return n == 0 ? 0.0 : static_cast<double>(load(&sum_)) / static_cast<double>(n);
}

double Histogram::stdev() const {
  // From the buckets, not from a running sum of squares: squares of
  // nanosecond latencies overflow 64 bits after a few million samples, and
  // the buckets already bound the error.
  double mu = mean();
  double acc = 0;
  uint64_t n = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    uint64_t c = bucket_count(i);
    if (c == 0) continue;
    double lo = static_cast<double>(bucket_low(i));
    double hi = i == kBuckets - 1 ? lo : static_cast<double>(bucket_high(i));
    double mid = (lo + hi) / 2;
    acc += static_cast<double>(c) * (mid - mu) * (mid - mu);
    n += c;
  }
  return n == 0 ? 0.0 : std::sqrt(acc / static_cast<double>(n));
}

uint64_t Histogram::percentile(double p) const {
  uint64_t n = count();
  if (n == 0) return 0;
  if (p <= 0) return min();
  if (p >= 100) return max();
  // The rank of the sample asked for, 1-based: the smallest rank with at
  // least p percent of the samples at or below it.
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  uint64_t lo_clamp = min(), hi_clamp = max();
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += bucket_count(i);
    if (seen < rank) continue;
    // The top bucket has no upper bound (it takes everything past the
    // range): its samples are reported as the largest one seen.
    if (i == kBuckets - 1) return hi_clamp;
    uint64_t lo = bucket_low(i);
    uint64_t v = lo + (bucket_high(i) - lo) / 2;
    if (v < lo_clamp) v = lo_clamp;
    if (v > hi_clamp) v = hi_clamp;
    return v;
  }
  return hi_clamp;  // a writer added samples while we read: the answer is the top
}

}  // namespace tern
