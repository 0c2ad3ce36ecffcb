// Histogram: bucket layout, percentiles within the stated ~3%, merge, reset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "base/histogram.h"

namespace tern {
namespace {

TEST(Histogram, EmptyIsZero) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0u);
  EXPECT_EQ(h.percentile(0.5), 0u);
}

TEST(Histogram, BucketsCoverEveryValueOnceInOrder) {
  // Every bucket's top is the value just below the next bucket's first.
  for (uint32_t i = 0; i + 1 < Histogram::kBuckets; ++i) {
    uint64_t top = Histogram::bucket_top(i);
    ASSERT_EQ(Histogram::bucket_of(top), i) << i;
    ASSERT_EQ(Histogram::bucket_of(top + 1), i + 1) << i;
  }
  EXPECT_EQ(Histogram::bucket_of(UINT64_MAX), Histogram::kBuckets - 1);
}

TEST(Histogram, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 0; v < 32; ++v) h.record(v);
  EXPECT_EQ(h.percentile(0.5), 15u);
  EXPECT_EQ(h.percentile(1.0), 31u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 31u);
}

TEST(Histogram, PercentilesWithinThreePercentOfExact) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> d(9.0, 1.0);  // ~8 us median, long tail
  Histogram h;
  std::vector<uint64_t> v;
  for (int i = 0; i < 200000; ++i) {
    auto x = static_cast<uint64_t>(d(rng));
    v.push_back(x);
    h.record(x);
  }
  std::sort(v.begin(), v.end());
  for (double p : {0.5, 0.9, 0.99, 0.999}) {
    uint64_t exact = v[static_cast<size_t>(p * static_cast<double>(v.size())) - 1];
    uint64_t got = h.percentile(p);
    EXPECT_GE(got, exact) << p;  // the bucket's top: never below
    EXPECT_LE(static_cast<double>(got), static_cast<double>(exact) * 1.0313 + 1) << p;
  }
  EXPECT_EQ(h.max(), v.back());
  EXPECT_EQ(h.min(), v.front());
  EXPECT_EQ(h.count(), v.size());
}

TEST(Histogram, MergeAddsAndResetEmpties) {
  Histogram a, b;
  for (int i = 0; i < 100; ++i) a.record(1000);
  for (int i = 0; i < 100; ++i) b.record(100000);
  a.merge(b);
  EXPECT_EQ(a.count(), 200u);
  EXPECT_EQ(a.min(), 1000u);
  EXPECT_EQ(a.max(), 100000u);
  EXPECT_LE(a.percentile(0.5), 1031u);
  EXPECT_GE(a.percentile(0.75), 100000u - 3200u);
  a.reset();
  EXPECT_EQ(a.count(), 0u);
  EXPECT_EQ(a.percentile(0.5), 0u);
}

}  // namespace
}  // namespace tern
