#include "base/lazy_histogram.h"

namespace tern {

LazyHistogram::~LazyHistogram() {
  for (uint64_t* g : groups_) delete[] g;
}

uint64_t* LazyHistogram::add_group(size_t g) {
  // new (not std::vector): no exceptions in lib/, and a failed allocation
  // here is as fatal as anywhere else in the process.
  auto* p = new uint64_t[kGroup]();
  __atomic_store_n(&groups_[g], p, __ATOMIC_RELEASE);
  return p;
}

void LazyHistogram::merge_into(Histogram* h) const {
  const uint64_t n = count();
  if (n == 0) return;
  for (size_t g = 0; g < kGroups; ++g) {
    const uint64_t* p = __atomic_load_n(&groups_[g], __ATOMIC_ACQUIRE);
    if (p == nullptr) continue;
    for (size_t k = 0; k < kGroup; ++k) {
      const uint64_t c = load(&p[k]);
      if (c != 0) Histogram::store(&h->buckets_[g * kGroup + k], Histogram::load(&h->buckets_[g * kGroup + k]) + c);
    }
  }
  Histogram::store(&h->count_, Histogram::load(&h->count_) + n);
  Histogram::store(&h->sum_, Histogram::load(&h->sum_) + load(&sum_));
  const uint64_t mn = load(&min_), mx = load(&max_);
  if (mn < Histogram::load(&h->min_)) Histogram::store(&h->min_, mn);
  if (mx > Histogram::load(&h->max_)) Histogram::store(&h->max_, mx);
}

size_t LazyHistogram::group_bytes() const {
  size_t n = 0;
  for (uint64_t* g : groups_) n += g != nullptr ? kGroup * sizeof(uint64_t) : 0;
  return n;
}

}  // namespace tern
