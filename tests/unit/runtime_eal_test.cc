// The EAL success path. EAL initialises once per process, so the suites below
// run in the order they are defined (gtest's default; do not shuffle): before
// start, with EAL running, after cleanup.
#include <gtest/gtest.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "exit_guard.h"
#include "mem/arena.h"
#include "runtime/eal.h"

namespace tern::runtime {
namespace {

EalOptions test_options() {
  EalOptions o;
  o.lcores = "0-1";
  o.huge = HugeMode::kOff;
  return o;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST(EalBeforeStart, AttachFailsWithoutEal) {
  auto r = Runtime::attach();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kBadState);
  EXPECT_TRUE(contains(r.status().message(), "not initialised")) << r.status().message();
}

// These must be refused before rte_eal_init sees them: EAL would print help and
// exit(), and a refused start must leave the one init attempt unused (the
// fixture below then starts EAL).
TEST(EalBeforeStart, ArgsThatExitAreRefused) {
  for (const char* bad : {"-h", "--help", "--hel", "-vh", "--log-level=help"}) {
    EalOptions o = test_options();
    o.extra_args = {bad};
    auto r = Runtime::start(o);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), Errc::kInvalidArgument) << bad;
    EXPECT_TRUE(contains(r.status().message(), bad)) << r.status().message();
  }
  EalOptions o = test_options();
  o.extra_args = {"--log-level", "help"};
  EXPECT_EQ(Runtime::start(o).status().code(), Errc::kInvalidArgument);
  o = test_options();
  o.log_level = "help";
  EXPECT_EQ(Runtime::start(o).status().code(), Errc::kInvalidArgument);
}

TEST(EalBeforeStart, HugeOnNeedsFreeHugepages) {
  if (mem::free_hugepages_2m() > 0) {
    // Starting here would use up the process's EAL; the argument choice is
    // what can be checked.
    EalOptions o = test_options();
    o.huge = HugeMode::kOn;
    auto a = eal_args(o);
    EXPECT_NE(std::find(a.begin(), a.end(), "--in-memory"), a.end());
    return;
  }
  EalOptions o = test_options();
  o.huge = HugeMode::kOn;
  auto r = Runtime::start(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kNoResources);
  EXPECT_TRUE(contains(r.status().message(), "hugepages")) << r.status().message();
}

TEST(EalBeforeStart, EmptyLcoresRefused) {
  EalOptions o = test_options();
  o.lcores = "";
  EXPECT_EQ(Runtime::start(o).status().code(), Errc::kInvalidArgument);
}

class EalRuntime : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto r = Runtime::start(test_options());
    start_status_ = new Status(r.status());
    if (r.is_ok()) rt_ = std::move(r).value().release();
  }
  static void TearDownTestSuite() {
    delete rt_;  // rte_eal_cleanup
    rt_ = nullptr;
    delete start_status_;
  }
  void SetUp() override {
    ASSERT_NE(rt_, nullptr) << "Runtime::start failed: " << start_status_->to_string();
  }

  static Runtime* rt_;
  static Status* start_status_;
};
Runtime* EalRuntime::rt_ = nullptr;
Status* EalRuntime::start_status_ = nullptr;

TEST_F(EalRuntime, Lcores) {
  EXPECT_TRUE(rt_->owns_eal());
  EXPECT_EQ(rt_->main_lcore(), 0u);
  EXPECT_EQ(rt_->worker_lcores(), std::vector<unsigned>{1});
  EXPECT_EQ(rte_lcore_id(), 0u) << "start() makes the calling thread the main lcore";
  EXPECT_FALSE(rt_->stop_requested());
}

TEST_F(EalRuntime, LaunchRunsPinnedOnWorker) {
  std::atomic<int> cpu{-1};
  std::atomic<unsigned> lcore{RTE_MAX_LCORE};
  ASSERT_TRUE(rt_->launch(1,
                          [&] {
                            cpu = sched_getcpu();
                            lcore = rte_lcore_id();
                            return 0;
                          })
                  .is_ok());
  EXPECT_EQ(rt_->wait_all(), 0);
  EXPECT_EQ(cpu.load(), 1);
  EXPECT_EQ(lcore.load(), 1u);
}

TEST_F(EalRuntime, WaitAllReturnsFunctionResult) {
  ASSERT_TRUE(rt_->launch(1, [] { return 3; }).is_ok());
  EXPECT_EQ(rt_->wait_all(), 3);
  EXPECT_EQ(rt_->wait_all(), 0) << "results are collected once";
}

// EAL keeps one result per lcore; a second launch onto the idle lcore before
// wait_all must not lose the first function's result.
TEST_F(EalRuntime, RelaunchBeforeWaitKeepsFirstResult) {
  std::atomic<bool> first_done{false};
  std::atomic<bool> second_ran{false};
  ASSERT_TRUE(rt_->launch(1,
                          [&] {
                            first_done = true;
                            return 5;
                          })
                  .is_ok());
  while (!first_done.load() || rte_eal_get_lcore_state(1) != WAIT) std::this_thread::yield();
  ASSERT_TRUE(rt_->launch(1,
                          [&] {
                            second_ran = true;
                            return 0;
                          })
                  .is_ok());
  EXPECT_EQ(rt_->wait_all(), 5);
  EXPECT_TRUE(second_ran.load());
}

TEST_F(EalRuntime, BadLcoresRefused) {
  auto fn = [] { return 0; };
  Status s = rt_->launch(0, fn);
  EXPECT_EQ(s.code(), Errc::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "main lcore")) << s.message();

  s = rt_->launch(5, fn);
  EXPECT_EQ(s.code(), Errc::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "not an EAL lcore")) << s.message();
  EXPECT_TRUE(contains(s.message(), "0,1")) << s.message();

  EXPECT_EQ(rt_->launch(RTE_MAX_LCORE, fn).code(), Errc::kInvalidArgument);
  EXPECT_EQ(rt_->launch(~0u, fn).code(), Errc::kInvalidArgument);
  EXPECT_EQ(rt_->launch(1, std::function<int()>()).code(), Errc::kInvalidArgument);
  EXPECT_EQ(rt_->wait_all(), 0) << "refused launches must not be waited for";
}

TEST_F(EalRuntime, BusyLcoreRefused) {
  std::atomic<bool> release{false};
  std::atomic<bool> started{false};
  ASSERT_TRUE(rt_->launch(1,
                          [&] {
                            started = true;
                            while (!release.load()) std::this_thread::yield();
                            return 0;
                          })
                  .is_ok());
  while (!started.load()) std::this_thread::yield();
  Status s = rt_->launch(1, [] { return 9; });
  EXPECT_EQ(s.code(), Errc::kBadState);
  EXPECT_TRUE(contains(s.message(), "busy")) << s.message();
  release = true;
  EXPECT_EQ(rt_->wait_all(), 0) << "the refused function's result leaked in";
}

TEST_F(EalRuntime, SecondStartFails) {
  auto r = Runtime::start(test_options());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kBadState);
  EXPECT_TRUE(contains(r.status().message(), "attach")) << r.status().message();
}

TEST_F(EalRuntime, AttachSharesLcoresAndStopsOnDestruction) {
  auto r = Runtime::attach();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  std::unique_ptr<Runtime> a = std::move(r).value();
  EXPECT_FALSE(a->owns_eal());
  EXPECT_EQ(a->main_lcore(), rt_->main_lcore());
  EXPECT_EQ(a->worker_lcores(), rt_->worker_lcores());

  std::atomic<bool> loop_exited{false};
  ASSERT_TRUE(a->launch(1, [&, ar = a.get()] {
                 while (!ar->stop_requested()) std::this_thread::yield();
                 loop_exited = true;
                 return 0;
               }).is_ok());
  EXPECT_EQ(rt_->launch(1, [] { return 0; }).code(), Errc::kBadState)
      << "lcore is in use by the attached runtime";
  a.reset();  // requests stop and waits
  EXPECT_TRUE(loop_exited.load());
  EXPECT_FALSE(rt_->stop_requested()) << "stop is per Runtime";
  EXPECT_EQ(rte_eal_get_lcore_state(1), WAIT);

  // EAL survives the attached Runtime.
  ASSERT_TRUE(rt_->launch(1, [] { return 0; }).is_ok());
  EXPECT_EQ(rt_->wait_all(), 0);
}

// Runs in a child process (threadsafe style re-executes the binary with only
// this test), so it gets an EAL of its own.
TEST(EalDeathTest, OwnerMustOutliveAttached) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto owner = Runtime::start(test_options());
        if (!owner.is_ok()) {
          std::fprintf(stderr, "start failed: %s\n", owner.status().to_string().c_str());
          std::_Exit(0);
        }
        auto attached = Runtime::attach();
        std::unique_ptr<Runtime> o = std::move(owner).value();
        o.reset();
      },
      "destroyed while 1 attached Runtime");
}

TEST(EalAfterCleanup, StartAndAttachFail) {
  auto s = Runtime::start(test_options());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), Errc::kBadState);
  EXPECT_TRUE(contains(s.status().message(), "cleaned up")) << s.status().message();
  auto a = Runtime::attach();
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), Errc::kBadState);
  EXPECT_TRUE(contains(a.status().message(), "cleaned up")) << a.status().message();
}

}  // namespace
}  // namespace tern::runtime
