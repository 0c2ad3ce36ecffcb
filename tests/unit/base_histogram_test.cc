#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "base/histogram.h"

namespace tern {
namespace {

// The exact percentile by the histogram's own definition of rank.
uint64_t exact_percentile(const std::vector<uint64_t>& sorted, double p) {
  if (p <= 0) return sorted.front();
  if (p >= 100) return sorted.back();
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  if (rank == 0) rank = 1;
  return sorted[rank - 1];
}

// Records `v`, then checks count, min, max, mean exactly, stdev within the
// bucket error, and every percentile in a fine grid within kRelativeError.
void check_against_exact(std::vector<uint64_t> v, const char* what) {
  Histogram h;
  for (uint64_t x : v) h.record(x);
  std::sort(v.begin(), v.end());
  ASSERT_EQ(h.count(), v.size()) << what;
  EXPECT_EQ(h.min(), v.front()) << what;
  EXPECT_EQ(h.max(), v.back()) << what;
  long double sum = 0;
  for (uint64_t x : v) sum += x;
  double mean = static_cast<double>(sum / v.size());
  EXPECT_NEAR(h.mean(), mean, mean * 1e-9) << what;
  long double sq = 0;
  for (uint64_t x : v) sq += (x - mean) * (x - mean);
  double sd = std::sqrt(static_cast<double>(sq / v.size()));
  // Each sample moves by at most kRelativeError of itself.
  EXPECT_NEAR(h.stdev(), sd, 2 * Histogram::kRelativeError * (mean + sd) + 1) << what;
  for (double p : {0.0, 0.1, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 99.99, 100.0}) {
    uint64_t want = exact_percentile(v, p);
    uint64_t got = h.percentile(p);
    double tol = want < Histogram::kSubBuckets ? 0.0 : static_cast<double>(want) * Histogram::kRelativeError;
    EXPECT_LE(std::fabs(static_cast<double>(got) - static_cast<double>(want)), tol)
        << what << ": p" << p << " got " << got << " want " << want;
  }
}

TEST(Histogram, EmptyReportsZeros) {
  Histogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.mean(), 0.0);
  EXPECT_EQ(h.stdev(), 0.0);
  EXPECT_EQ(h.percentile(50), 0u);
}

TEST(Histogram, SmallValuesAreExact) {
  Histogram h;
  for (uint64_t v = 0; v < Histogram::kSubBuckets; ++v) h.record(v);
  for (uint64_t v = 0; v < Histogram::kSubBuckets; ++v) {
    EXPECT_EQ(Histogram::bucket_of(v), v);
    EXPECT_EQ(h.bucket_count(v), 1u);
  }
  EXPECT_EQ(h.percentile(50), 15u);  // rank 16 of 0..31
}

TEST(Histogram, BucketsTileTheRangeWithBoundedWidth) {
  // Every bucket's bounds map back to it, consecutive buckets touch, and a
  // bucket is never wider than 1/kSubBuckets of its smallest value.
  for (size_t i = 0; i + 1 < Histogram::kBuckets; ++i) {
    uint64_t lo = Histogram::bucket_low(i), hi = Histogram::bucket_high(i);
    ASSERT_LE(lo, hi) << i;
    ASSERT_EQ(Histogram::bucket_of(lo), i) << i;
    ASSERT_EQ(Histogram::bucket_of(hi), i) << i;
    ASSERT_EQ(Histogram::bucket_low(i + 1), hi + 1) << i;
    if (lo >= Histogram::kSubBuckets) {
      ASSERT_LE((hi - lo + 1) * Histogram::kSubBuckets, lo) << i;
    }
  }
  EXPECT_EQ(Histogram::bucket_low(Histogram::kBuckets - 1),
            (uint64_t{1} << Histogram::kMaxBits) - (uint64_t{1} << (Histogram::kMaxBits - 1 - Histogram::kSubBucketBits)));
}

// bucket_of's branch-free form against the form with a branch for the exact
// values and one for values past the range, which it replaced: every value
// must land in the same bucket. Checked at every bucket's bounds and their
// neighbours, every power of two and its neighbours, past the range up to
// UINT64_MAX, and on random values of every magnitude.
size_t bucket_with_branches(uint64_t ns) {
  if (ns < Histogram::kSubBuckets) return static_cast<size_t>(ns);
  int msb = 63 - __builtin_clzll(ns);
  if (msb >= Histogram::kMaxBits) return Histogram::kBuckets - 1;
  int shift = msb - Histogram::kSubBucketBits;
  return static_cast<size_t>((shift + 1) * Histogram::kSubBuckets + ((ns >> shift) - Histogram::kSubBuckets));
}

TEST(Histogram, BucketOfMatchesTheFormWithBranches) {
  auto same = [](uint64_t v) {
    ASSERT_EQ(Histogram::bucket_of(v), bucket_with_branches(v)) << v;
  };
  for (uint64_t v = 0; v < 4 * Histogram::kSubBuckets; ++v) same(v);
  for (size_t i = 0; i < Histogram::kBuckets; ++i) {
    const uint64_t lo = Histogram::bucket_low(i);
    for (uint64_t v : {lo - 1, lo, lo + 1}) same(v);
    if (i + 1 < Histogram::kBuckets) same(Histogram::bucket_high(i) + 1);
  }
  for (int b = 0; b < 64; ++b) {
    const uint64_t p = uint64_t{1} << b;
    for (uint64_t v : {p - 1, p, p + 1}) same(v);
  }
  same(UINT64_MAX);
  std::mt19937_64 rng(7);
  for (int k = 0; k < 200000; ++k) same(rng() >> (rng() % 64));
}

TEST(Histogram, UniformDistribution) {
  std::vector<uint64_t> v;
  for (uint64_t x = 1; x <= 200000; ++x) v.push_back(x * 5);  // 5 ns .. 1 ms
  check_against_exact(std::move(v), "uniform");
}

TEST(Histogram, ExponentialDistribution) {
  std::mt19937_64 rng(42);
  std::exponential_distribution<double> d(1.0 / 20000.0);  // mean 20 us
  std::vector<uint64_t> v;
  for (int i = 0; i < 100000; ++i) v.push_back(static_cast<uint64_t>(d(rng)));
  check_against_exact(std::move(v), "exponential");
}

TEST(Histogram, LogNormalWithLongTail) {
  // RPC latencies: a mode near 10 us and a tail into tens of milliseconds.
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> d(std::log(10000.0), 1.2);
  std::vector<uint64_t> v;
  for (int i = 0; i < 100000; ++i) v.push_back(static_cast<uint64_t>(d(rng)));
  check_against_exact(std::move(v), "lognormal");
}

TEST(Histogram, BimodalPercentilesLandInTheRightMode) {
  Histogram h;
  for (int i = 0; i < 900; ++i) h.record(2000);
  for (int i = 0; i < 100; ++i) h.record(1000000);
  EXPECT_NEAR(static_cast<double>(h.percentile(50)), 2000, 2000 * Histogram::kRelativeError);
  EXPECT_NEAR(static_cast<double>(h.percentile(90)), 2000, 2000 * Histogram::kRelativeError);
  EXPECT_NEAR(static_cast<double>(h.percentile(90.1)), 1000000, 1000000 * Histogram::kRelativeError);
  EXPECT_EQ(h.percentile(100), 1000000u);
}

TEST(Histogram, ValuesAboveTheRangeKeepAnExactMax) {
  Histogram h;
  uint64_t huge = uint64_t{1} << 40;
  h.record(100);
  h.record(huge);
  EXPECT_EQ(Histogram::bucket_of(huge), Histogram::kBuckets - 1);
  EXPECT_EQ(h.max(), huge);
  EXPECT_EQ(h.percentile(99), huge);  // top bucket, clamped to the true max
  EXPECT_EQ(h.percentile(100), huge);
  EXPECT_EQ(h.count(), 2u);
}

TEST(Histogram, MergeEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint64_t> d(1, 5000000);
  Histogram a, b, all;
  for (int i = 0; i < 20000; ++i) {
    uint64_t x = d(rng);
    (i % 3 == 0 ? a : b).record(x);
    all.record(x);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
  EXPECT_EQ(a.max(), all.max());
  EXPECT_DOUBLE_EQ(a.mean(), all.mean());
  for (size_t i = 0; i < Histogram::kBuckets; ++i) ASSERT_EQ(a.bucket_count(i), all.bucket_count(i)) << i;
  for (double p : {1.0, 50.0, 99.0, 99.9}) EXPECT_EQ(a.percentile(p), all.percentile(p));

  Histogram empty;
  a.merge(empty);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.min(), all.min());
}

TEST(Histogram, ResetForgetsEverything) {
  Histogram h;
  for (uint64_t x = 1; x < 1000; ++x) h.record(x * 1000);
  h.reset();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.percentile(99), 0u);
  for (size_t i = 0; i < Histogram::kBuckets; ++i) ASSERT_EQ(h.bucket_count(i), 0u);
  h.record(77);
  EXPECT_EQ(h.min(), 77u);
  EXPECT_EQ(h.percentile(50), 77u);
}

}  // namespace
}  // namespace tern
