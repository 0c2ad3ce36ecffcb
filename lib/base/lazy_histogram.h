// LazyHistogram: Histogram's buckets (histogram.h: same geometry, same
// percentiles), with memory only for the ranges its samples fell in.
//
// A Histogram is 8 KiB whether it saw one sample or a billion. One per
// connection was the largest part of what an idle connection cost its
// server (10,000 connections on one engine, at most 16 KiB each),
// and a connection's round trips land in a few powers of two. Here the
// buckets come in groups of Histogram::kSubBuckets (one power of two, 256
// bytes), allocated the first time a sample lands in the group: a
// connection that made a few calls holds ~300 bytes, a busy one a few
// groups; the record() path costs one pointer load and test more.
//
// Threads: as Histogram's. One writer (record() on the owning thread), any
// number of readers (merge_into() from telemetry): a group is zeroed before
// its pointer is published (release), a reader acquires the pointer, and
// groups live until the histogram is destroyed (after its readers are gone,
// as for any Histogram).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "base/histogram.h"

namespace tern {

class LazyHistogram {
 public:
  static constexpr size_t kGroup = Histogram::kSubBuckets;
  static constexpr size_t kGroups = Histogram::kBuckets / kGroup;  // 32

  LazyHistogram() = default;
  ~LazyHistogram();
  LazyHistogram(const LazyHistogram&) = delete;
  LazyHistogram& operator=(const LazyHistogram&) = delete;

  void record(uint64_t ns) { record(ns, Histogram::bucket_of(ns)); }
  // With its bucket already found (i == Histogram::bucket_of(ns)): one
  // sample recorded in two histograms finds it once.
  void record(uint64_t ns, size_t i) {
    uint64_t* g = __atomic_load_n(&groups_[i / kGroup], __ATOMIC_RELAXED);  // we are its only writer
    if (TERN_UNLIKELY(g == nullptr)) g = add_group(i / kGroup);
    uint64_t* b = &g[i % kGroup];
    store(b, load(b) + 1);
    store(&count_, load(&count_) + 1);
    store(&sum_, load(&sum_) + ns);
    if (ns < load(&min_)) store(&min_, ns);
    if (ns > load(&max_)) store(&max_, ns);
  }
  uint64_t count() const { return load(&count_); }
  // Adds what it holds (about now, when recorded concurrently) to `h`.
  void merge_into(Histogram* h) const;
  // Bytes it holds beyond its own object: the groups allocated.
  size_t group_bytes() const;

 private:
  static uint64_t load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
  static void store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
  uint64_t* add_group(size_t g);

  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
  uint64_t* groups_[kGroups] = {};
};

}  // namespace tern
