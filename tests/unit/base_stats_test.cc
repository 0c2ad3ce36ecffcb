#include <gtest/gtest.h>

#include "base/stats.h"

namespace tern {
namespace {

TEST(Stats, CounterAddGetReset) {
  Counter c;
  EXPECT_EQ(c.get(), 0u);
  c.add();
  c.add(41);
  EXPECT_EQ(c.get(), 42u);
  c.reset();
  EXPECT_EQ(c.get(), 0u);
}

TEST(Stats, FormatSkipsZerosAndKeepsOrder) {
  Counter tx, rx, drops;
  tx.add(5);
  drops.add(1);
  StatsView v = {{"tx", &tx}, {"rx", &rx}, {"drops", &drops}};
  EXPECT_EQ(format_stats(v), "tx=5 drops=1");
  EXPECT_EQ(format_stats(v, true), "tx=5 rx=0 drops=1");
}

TEST(Stats, FormatEmpty) {
  Counter a;
  EXPECT_EQ(format_stats({}), "");
  EXPECT_EQ(format_stats({{"a", &a}}), "");
  EXPECT_EQ(format_stats({{"a", &a}}, true), "a=0");
}

TEST(Stats, FormatLargeValue) {
  Counter a;
  a.add(UINT64_MAX);
  EXPECT_EQ(format_stats({{"a", &a}}), "a=18446744073709551615");
}

}  // namespace
}  // namespace tern
