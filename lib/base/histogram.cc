#include "base/histogram.h"

namespace tern {

uint64_t Histogram::percentile(double p) const {
  uint64_t n = count();
  if (n == 0) return 0;
  if (p <= 0) return min();
  // The rank of the value asked for, 1-based: ceil(p * n).
  auto want = static_cast<uint64_t>(p * static_cast<double>(n));
  if (static_cast<double>(want) < p * static_cast<double>(n)) ++want;
  if (want == 0) want = 1;
  uint64_t seen = 0;
  for (uint32_t i = 0; i < kBuckets; ++i) {
    seen += load(&b_[i]);
    if (seen >= want) {
      uint64_t top = bucket_top(i);
      return top < max() ? top : max();
    }
  }
  return max();  // a reader raced the writer's count
}

void Histogram::merge(const Histogram& o) {
  for (uint32_t i = 0; i < kBuckets; ++i) store(&b_[i], load(&b_[i]) + o.load(&o.b_[i]));
  store(&count_, load(&count_) + o.count());
  store(&sum_, load(&sum_) + o.load(&o.sum_));
  if (o.count() != 0) {
    if (o.max() > load(&max_)) store(&max_, o.max());
    if (o.load(&o.min_) < load(&min_)) store(&min_, o.load(&o.min_));
  }
}

void Histogram::reset() {
  for (uint32_t i = 0; i < kBuckets; ++i) store(&b_[i], 0);
  store(&count_, 0);
  store(&sum_, 0);
  store(&max_, 0);
  store(&min_, UINT64_MAX);
}

}  // namespace tern
