#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string>

#include "base/result.h"

namespace tern {
namespace {

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_TRUE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), Errc::kOk);
  EXPECT_EQ(s.sys_errno(), 0);
  EXPECT_EQ(s.to_string(), "ok");
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(Status, CodeMessageAndErrno) {
  Status s = make_error(Errc::kNotFound, "device '%s' has %d ports", "rxe0", 2);
  EXPECT_FALSE(s.is_ok());
  EXPECT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), Errc::kNotFound);
  EXPECT_EQ(s.sys_errno(), 0);
  EXPECT_EQ(s.message(), "device 'rxe0' has 2 ports");
  EXPECT_EQ(s.to_string(), "not found: device 'rxe0' has 2 ports");
}

// With an errno, the line is named by it (the reason), not by the Errc (what
// the caller does next), which code() still gives.
TEST(Status, ToStringIsNamedByTheErrno) {
  Status s = make_sys_error(Errc::kNoResources, ENOMEM, "mmap(%d)", 4096);
  EXPECT_EQ(s.code(), Errc::kNoResources);
  EXPECT_EQ(s.sys_errno(), ENOMEM);
  EXPECT_EQ(s.to_string(), "out of memory: mmap(4096) (ENOMEM)");
  EXPECT_EQ(make_sys_error(Errc::kBadState, EADDRINUSE, "cannot listen on %s", "127.0.0.1:9464").to_string(),
            "address in use: cannot listen on 127.0.0.1:9464 (EADDRINUSE)");
  EXPECT_EQ(make_sys_error(Errc::kInvalidArgument, EACCES, "cannot open %s", "/run/x.pid").to_string(),
            "permission denied: cannot open /run/x.pid (EACCES)");
  // Any other errno: strerror's words, lower case.
  EXPECT_EQ(make_sys_error(Errc::kNotFound, ENOSYS, "verbs").to_string(), "function not implemented: verbs (ENOSYS)");
}

TEST(Status, EveryCodeHasADistinctName) {
  std::set<std::string> names;
  for (int c = static_cast<int>(Errc::kOk); c <= static_cast<int>(Errc::kInternal); ++c)
    names.insert(errc_name(static_cast<Errc>(c)));
  EXPECT_EQ(names.size(), static_cast<size_t>(Errc::kInternal) + 1);
  EXPECT_STREQ(errc_name(Errc::kBadState), "bad state");
  EXPECT_STREQ(errc_name(Errc::kInvalidArgument), "invalid argument");
}

TEST(Result, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  EXPECT_TRUE(r.status().is_ok());
}

TEST(Result, HoldsError) {
  Result<int> r = make_sys_error(Errc::kTimedOut, ETIMEDOUT, "no reply");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kTimedOut);
  EXPECT_EQ(r.status().sys_errno(), ETIMEDOUT);
  Status taken = std::move(r).take_status();
  EXPECT_EQ(taken.message(), "no reply");
}

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(**r, 7);
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<int> r = make_error(Errc::kInternal, "broken on purpose");
  EXPECT_DEATH((void)r.value(), "REQUIRE failed.*broken on purpose");
}

TEST(ResultDeathTest, ConstructingFromOkStatusAsserts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Result<int> r{Status::ok()};
        (void)r;
      },
      "ASSERT failed");
}

// TERN_TRY: each helper records how far it got, so that the tests can tell
// that propagation returned early rather than just passing the error along.
Status step(bool fail, int* calls) {
  ++*calls;
  if (fail) return make_sys_error(Errc::kDisconnected, ECONNRESET, "peer went away");
  return Status::ok();
}

Status two_steps(bool fail_first, int* calls, bool* reached_end) {
  TERN_TRY(step(fail_first, calls));
  TERN_TRY(step(false, calls));
  *reached_end = true;
  return Status::ok();
}

Result<int> parse_port(bool fail) {
  if (fail) return make_error(Errc::kInvalidArgument, "bad port");
  return 4791;
}

Result<std::string> describe(bool fail, bool* reached_end) {
  TERN_TRY(parse_port(fail));
  *reached_end = true;
  return std::string("port ok");
}

Status status_from_result(bool fail, bool* reached_end) {
  TERN_TRY(parse_port(fail));
  *reached_end = true;
  return Status::ok();
}

TEST(TernTry, StatusPropagatesAndStops) {
  int calls = 0;
  bool end = false;
  Status s = two_steps(true, &calls, &end);
  EXPECT_EQ(s.code(), Errc::kDisconnected);
  EXPECT_EQ(s.sys_errno(), ECONNRESET);
  EXPECT_EQ(s.message(), "peer went away");
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(end);
}

TEST(TernTry, StatusOkContinues) {
  int calls = 0;
  bool end = false;
  EXPECT_TRUE(two_steps(false, &calls, &end).is_ok());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(end);
}

TEST(TernTry, ResultPropagatesIntoResult) {
  bool end = false;
  Result<std::string> r = describe(true, &end);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "bad port");
  EXPECT_FALSE(end);

  Result<std::string> ok = describe(false, &end);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, "port ok");
  EXPECT_TRUE(end);
}

TEST(TernTry, ResultPropagatesIntoStatus) {
  bool end = false;
  Status s = status_from_result(true, &end);
  EXPECT_EQ(s.code(), Errc::kInvalidArgument);
  EXPECT_FALSE(end);
  EXPECT_TRUE(status_from_result(false, &end).is_ok());
  EXPECT_TRUE(end);
}

TEST(TernTry, EvaluatesExpressionOnce) {
  int calls = 0;
  auto f = [&]() -> Status {
    TERN_TRY(step(false, &calls));
    return Status::ok();
  };
  EXPECT_TRUE(f().is_ok());
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace tern
