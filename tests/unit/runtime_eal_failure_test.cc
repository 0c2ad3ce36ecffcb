// A failed rte_eal_init must come back as a Status, not exit(), and uses up
// the process's one attempt: DPDK 22.11 cannot retry it.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "exit_guard.h"
#include "runtime/eal.h"

namespace tern::runtime {
namespace {

EalOptions options() {
  EalOptions o;
  o.lcores = "0-1";
  o.huge = HugeMode::kOff;
  return o;
}

TEST(EalFailure, BadArgumentFailsThenNoRetry) {
  EalOptions o = options();
  o.extra_args = {"--no-such-eal-option"};
  auto r = Runtime::start(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArgument);
  EXPECT_EQ(r.status().sys_errno(), EINVAL);
  EXPECT_NE(r.status().message().find("--no-such-eal-option"), std::string::npos) << r.status().message();

  auto again = Runtime::start(options());
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), Errc::kBadState);
  EXPECT_NE(again.status().message().find("failed"), std::string::npos) << again.status().message();

  auto a = Runtime::attach();
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), Errc::kBadState);
}

}  // namespace
}  // namespace tern::runtime
