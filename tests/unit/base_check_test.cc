#include <gtest/gtest.h>

#include "base/check.h"

namespace tern {
namespace {

class CheckDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CheckDeathTest, RequireAbortsWithMessage) {
  int depth = 3;
  EXPECT_DEATH(TERN_REQUIRE(depth > 8, "depth %d is below the minimum %d", depth, 8),
               "REQUIRE failed at .*base_check_test.cc:[0-9]+: depth > 8: depth 3 is below the minimum 8");
}

TEST_F(CheckDeathTest, RequireWithoutMessage) {
  EXPECT_DEATH(TERN_REQUIRE(1 + 1 == 3), "REQUIRE failed at .*: 1 \\+ 1 == 3");
}

TEST_F(CheckDeathTest, CheckAborts) {
  EXPECT_DEATH(TERN_CHECK(false, "never silent"), "CHECK failed.*never silent");
}

TEST_F(CheckDeathTest, AssertIsOnInTests) {
  EXPECT_DEATH(TERN_ASSERT(2 < 1, "invariant"), "ASSERT failed.*invariant");
}

TEST(Check, PassingChecksDoNothingAndEvaluateOnce) {
  int n = 0;
  TERN_REQUIRE(++n == 1);
  TERN_CHECK(++n == 2);
  TERN_ASSERT(++n == 3);
  EXPECT_EQ(n, 3);
}

}  // namespace
}  // namespace tern
