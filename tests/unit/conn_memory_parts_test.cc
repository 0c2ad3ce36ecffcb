// The pieces that keep an idle connection cheap: LazyHistogram
// (buckets allocated as samples land), RingFifo (no memory until used) and
// SendCtxRing's storage growing under chains in flight. Each must behave as
// what it replaced: the same percentiles, the same order, the same wr_id
// indices across a growth.
#include <cstdint>
#include <deque>
#include <vector>

#include <gtest/gtest.h>

#include "base/histogram.h"
#include "base/lazy_histogram.h"
#include "base/ring_fifo.h"
#include "engine/send_ctx_ring.h"

namespace tern {
namespace {

TEST(LazyHistogram, MergesIntoTheSameHistogramAsRecordingDirectly) {
  Histogram want, got;
  LazyHistogram lazy;
  EXPECT_EQ(lazy.group_bytes(), 0u) << "no memory before a sample";
  uint64_t x = 1;
  for (int i = 0; i < 5000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t ns = (x >> 20) % (i % 3 == 0 ? 100'000'000 : 20'000);
    want.record(ns);
    lazy.record(ns);
  }
  lazy.merge_into(&got);
  EXPECT_EQ(got.count(), want.count());
  EXPECT_EQ(got.min(), want.min());
  EXPECT_EQ(got.max(), want.max());
  EXPECT_DOUBLE_EQ(got.mean(), want.mean());
  for (size_t i = 0; i < Histogram::kBuckets; ++i) ASSERT_EQ(got.bucket_count(i), want.bucket_count(i)) << i;
  for (double p : {0.0, 50.0, 99.0, 99.9, 100.0}) EXPECT_EQ(got.percentile(p), want.percentile(p)) << p;
}

TEST(LazyHistogram, HoldsOnlyTheGroupsItsSamplesFellIn) {
  LazyHistogram h;
  for (int i = 0; i < 1000; ++i) h.record(40'000 + i);  // one power of two: [32768, 65536)
  EXPECT_EQ(h.group_bytes(), LazyHistogram::kGroup * sizeof(uint64_t));
  h.record(5);            // exact buckets: group 0
  h.record(1ull << 40);   // the top bucket
  EXPECT_EQ(h.group_bytes(), 3 * LazyHistogram::kGroup * sizeof(uint64_t));
  Histogram out;
  h.merge_into(&out);
  EXPECT_EQ(out.count(), 1002u);
  EXPECT_EQ(out.max(), 1ull << 40);
  EXPECT_EQ(out.min(), 5u);
}

TEST(RingFifo, BehavesAsADequeThroughGrowthAndWrap) {
  RingFifo<int> f;
  std::deque<int> d;
  EXPECT_TRUE(f.empty());
  int v = 0;
  for (int round = 0; round < 200; ++round) {
    for (int k = 0; k < round % 13; ++k) {
      if ((round + k) % 5 == 0) f.push_front(v), d.push_front(v);
      else f.push_back(v), d.push_back(v);
      ++v;
    }
    for (int k = 0; k < round % 7 && !d.empty(); ++k) {
      ASSERT_EQ(f.front(), d.front());
      if (k % 3 == 2) {
        ASSERT_EQ(f.back(), d.back());
        f.pop_back(), d.pop_back();
      } else {
        f.pop_front(), d.pop_front();
      }
    }
    ASSERT_EQ(f.size(), d.size());
    for (size_t i = 0; i < d.size(); ++i) ASSERT_EQ(f[i], d[i]);
  }
  f.clear();
  EXPECT_TRUE(f.empty());
}

TEST(SendCtxRing, StorageGrowsUnderChainsInFlightKeepingTheirIndices) {
  using rpc::SendCtx;
  using rpc::SendCtxKind;
  using rpc::SendCtxRing;
  SendCtxRing ring(64, 16);
  EXPECT_EQ(ring.capacity(), SendCtxRing::kInitial);
  // Indices past a wrap of the small storage first.
  bool sig = false;
  for (uint32_t i = 0; i < 5; ++i) {
    uint32_t idx = ring.acquire(SendCtxKind::kCallSend, i, i, &sig);
    ring.complete_through(idx, [](const SendCtx&, bool) {});
  }
  std::vector<uint32_t> idx;
  for (uint32_t i = 0; i < 64; ++i) idx.push_back(ring.acquire(SendCtxKind::kCallSend, 100 + i, 100 + i, &sig));
  EXPECT_TRUE(ring.full());
  EXPECT_EQ(ring.capacity(), 64u);
  // Every context comes back once, in order, with what it was given.
  uint32_t next = 100;
  ring.complete_through(idx[40], [&](const SendCtx& c, bool) { EXPECT_EQ(c.obj, next++); });
  EXPECT_EQ(next, 141u);
  ring.release_all([&](const SendCtx& c) { EXPECT_EQ(c.obj, next++); });
  EXPECT_EQ(next, 164u);
  EXPECT_EQ(ring.in_use(), 0u);
}

}  // namespace
}  // namespace tern
