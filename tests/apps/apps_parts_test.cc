// The pieces tern-perf and tern-nfs-read share: command-line values
// (cli_args.h) and the fixed-memory latency histogram (perf_stats.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cli_args.h"
#include "perf_stats.h"

namespace tern::apps {
namespace {

TEST(ParseCount, SuffixesAndJunk) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_count("8", 64, &v));
  EXPECT_EQ(v, 8u);
  EXPECT_TRUE(parse_count("64K", 1u << 20, &v));
  EXPECT_EQ(v, 64u << 10);
  EXPECT_TRUE(parse_count("1m", 1u << 20, &v));
  EXPECT_EQ(v, 1u << 20);
  EXPECT_FALSE(parse_count("8x", 64, &v));  // tern-nfs-read took this as 8
  EXPECT_FALSE(parse_count("", 64, &v));
  EXPECT_FALSE(parse_count("-1", 64, &v));
  EXPECT_FALSE(parse_count("0x10", 64, &v));
  EXPECT_FALSE(parse_count("65", 64, &v));
  EXPECT_FALSE(parse_count("2M", 1u << 20, &v));
  EXPECT_FALSE(parse_count("99999999999999999999999", UINT64_MAX, &v));
}

TEST(ParseDuration, SecondsByDefaultUnitsAccepted) {
  double s = 0;
  EXPECT_TRUE(parse_duration("2", 10, &s));
  EXPECT_DOUBLE_EQ(s, 2);
  EXPECT_TRUE(parse_duration("0.5s", 10, &s));
  EXPECT_DOUBLE_EQ(s, 0.5);
  EXPECT_TRUE(parse_duration("500ms", 10, &s));
  EXPECT_DOUBLE_EQ(s, 0.5);
  EXPECT_TRUE(parse_duration("250us", 10, &s));
  EXPECT_DOUBLE_EQ(s, 250e-6);
  // tern-nfs-read turned these into a timeout of 0 ms.
  EXPECT_FALSE(parse_duration("abc", 10, &s));
  EXPECT_FALSE(parse_duration("0", 10, &s));
  EXPECT_FALSE(parse_duration("-1", 10, &s));
  EXPECT_FALSE(parse_duration("nan", 10, &s));
  EXPECT_FALSE(parse_duration("inf", 1e300, &s));
  EXPECT_FALSE(parse_duration("2h", 1e6, &s));
  EXPECT_FALSE(parse_duration("11", 10, &s));
}

TEST(JsonEscape, QuotesBackslashesControls) {
  // A file named q"x made tern-nfs-read's JSON invalid.
  EXPECT_EQ(json_escape("q\"x"), "q\\\"x");
  EXPECT_EQ(json_escape("a\\b"), "a\\\\b");
  EXPECT_EQ(json_escape("t\tn\n"), "t\\tn\\n");
  EXPECT_EQ(json_escape(std::string_view("\x01\x7f", 2)), "\\u0001\\u007f");
  EXPECT_EQ(json_escape("/dir/file"), "/dir/file");
}

TEST(HostPort, Ipv4Ipv6AndNames) {
  std::string h;
  uint16_t p = 20049;
  EXPECT_TRUE(parse_host_port("192.0.2.1", &h, &p));
  EXPECT_EQ(h, "192.0.2.1");
  EXPECT_EQ(p, 20049);
  EXPECT_TRUE(parse_host_port("192.0.2.1:2049", &h, &p));
  EXPECT_EQ(h, "192.0.2.1");
  EXPECT_EQ(p, 2049);
  p = 20049;
  EXPECT_TRUE(parse_host_port("[fe80::1]:2050", &h, &p));
  EXPECT_EQ(h, "fe80::1");
  EXPECT_EQ(p, 2050);
  p = 20049;
  EXPECT_TRUE(parse_host_port("fe80::1", &h, &p));  // was split at its last colon
  EXPECT_EQ(h, "fe80::1");
  EXPECT_EQ(p, 20049);
  EXPECT_TRUE(parse_host_port("[::1]", &h, &p));
  EXPECT_EQ(h, "::1");
  EXPECT_FALSE(parse_host_port("", &h, &p));
  EXPECT_FALSE(parse_host_port("[::1", &h, &p));
  EXPECT_FALSE(parse_host_port("[::1]x", &h, &p));
  EXPECT_FALSE(parse_host_port("[::1]:", &h, &p));
  EXPECT_FALSE(parse_host_port("host:", &h, &p));
  EXPECT_FALSE(parse_host_port(":2049", &h, &p));
  EXPECT_FALSE(parse_host_port("host:0", &h, &p));
  EXPECT_FALSE(parse_host_port("host:65536", &h, &p));
  EXPECT_FALSE(parse_host_port("host:20k", &h, &p));
}

TEST(LatencyHistogram, BucketsCoverEveryValueInOrder) {
  for (unsigned b = 0; b + 1 < LatencyHistogram::kBuckets; ++b) {
    ASSERT_LT(LatencyHistogram::lower(b), LatencyHistogram::upper(b)) << b;
    ASSERT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::lower(b)), b) << b;
    ASSERT_EQ(LatencyHistogram::bucket_of(LatencyHistogram::upper(b) - 1), b) << b;
    // At most 1/64 of its values wide.
    ASSERT_LE((LatencyHistogram::upper(b) - LatencyHistogram::lower(b)) * 64, std::max<uint64_t>(64, LatencyHistogram::upper(b)))
        << b;
  }
  EXPECT_EQ(LatencyHistogram::bucket_of(UINT64_MAX), LatencyHistogram::kBuckets - 1);
}

TEST(LatencyHistogram, PercentilesWithinOnePercentOfExact) {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> d(std::log(3000.0), 0.6);
  LatencyHistogram h;
  std::vector<double> v;
  for (int i = 0; i < 200000; ++i) {
    double x = std::floor(d(rng));
    v.push_back(x);
    h.add(x);
  }
  std::sort(v.begin(), v.end());
  auto exact = [&](double q) { return v[static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1]; };
  for (double q : {0.5, 0.9, 0.99, 0.999}) EXPECT_NEAR(h.percentile(q), exact(q), exact(q) * 0.01) << q;
  EXPECT_EQ(h.min(), v.front());
  EXPECT_EQ(h.max(), v.back());
  EXPECT_EQ(h.percentile(0), v.front());
  EXPECT_EQ(h.percentile(1), v.back());
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  EXPECT_NEAR(h.mean(), mean, 1e-6 * mean);
  EXPECT_NEAR(h.stdev(), std::sqrt(var / static_cast<double>(v.size())), 1e-3 * mean);
  EXPECT_EQ(h.count(), v.size());
}

TEST(LatencyHistogram, MemoryDoesNotGrowWithTheCount) {
  // tern-perf kept every sample: --iters 8G asked for 64 GiB up front.
  EXPECT_LT(sizeof(LatencyHistogram), 20u << 10);
  LatencyHistogram a, b;
  for (int i = 1; i <= 1000; ++i) a.add(i), b.add(i * 1000.0);
  a.merge(b);
  EXPECT_EQ(a.count(), 2000u);
  EXPECT_EQ(a.min(), 1);
  EXPECT_EQ(a.max(), 1e6);
  EXPECT_NEAR(a.percentile(0.5), 1000, 1000 * 0.01);
}

TEST(LatencyHistogram, EmptyIsZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.percentile(0.5), 0);
  EXPECT_EQ(h.min(), 0);
  EXPECT_EQ(h.max(), 0);
  EXPECT_EQ(h.stdev(), 0);
}

}  // namespace
}  // namespace tern::apps
