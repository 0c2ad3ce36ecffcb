// What needs no EAL: the argument vector and thread pinning.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "mem/arena.h"
#include "runtime/eal.h"

namespace tern::runtime {
namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The argument after `opt`, or "" when opt is absent or last.
std::string after(const std::vector<std::string>& v, const std::string& opt) {
  auto it = std::find(v.begin(), v.end(), opt);
  return it == v.end() || it + 1 == v.end() ? "" : *(it + 1);
}

TEST(EalArgs, HugeOff) {
  EalOptions o;
  o.lcores = "0-1";
  o.huge = HugeMode::kOff;
  o.memory_mb = 96;
  auto a = eal_args(o, "prog");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a[0], "prog");
  EXPECT_EQ(after(a, "-l"), "0-1");
  EXPECT_TRUE(has(a, "--no-huge"));
  EXPECT_EQ(after(a, "-m"), "96");
  EXPECT_TRUE(has(a, "--no-pci"));
  EXPECT_TRUE(has(a, "--no-telemetry"));
  EXPECT_TRUE(has(a, "--no-shconf"));
  EXPECT_TRUE(has(a, "--log-level=lib.eal:warning"));
  EXPECT_FALSE(has(a, "--in-memory")) << "EAL rejects --in-memory with --no-huge";
}

TEST(EalArgs, FilePrefixReplacesNoShconf) {
  EalOptions o;
  o.huge = HugeMode::kOff;
  o.file_prefix = "tern-a";
  auto a = eal_args(o);
  EXPECT_EQ(a[0], "tern");
  EXPECT_TRUE(has(a, "--file-prefix=tern-a"));
  EXPECT_FALSE(has(a, "--no-shconf"));
}

TEST(EalArgs, HugeOnUsesInMemory) {
  EalOptions o;
  o.huge = HugeMode::kOn;
  auto a = eal_args(o);
  EXPECT_TRUE(has(a, "--in-memory"));
  EXPECT_FALSE(has(a, "--no-huge"));
  EXPECT_FALSE(has(a, "-m"));
}

TEST(EalArgs, HugeAutoFollowsFreeHugepages) {
  EalOptions o;
  o.huge = HugeMode::kAuto;
  auto a = eal_args(o);
  if (mem::free_hugepages_2m() > 0) {
    EXPECT_TRUE(has(a, "--in-memory"));
    EXPECT_FALSE(has(a, "--no-huge"));
  } else {
    EXPECT_TRUE(has(a, "--no-huge"));
    EXPECT_FALSE(has(a, "--in-memory"));
  }
}

TEST(EalArgs, LogLevelAndExtraArgs) {
  EalOptions o;
  o.huge = HugeMode::kOff;
  o.log_level = "";
  o.extra_args = {"--vdev", "net_null0", "-v"};
  auto a = eal_args(o);
  for (const auto& s : a) EXPECT_EQ(s.rfind("--log-level", 0), std::string::npos) << s;
  ASSERT_GE(a.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(a.end() - 3, a.end()), o.extra_args) << "extra args go last, in order";
}

// Pinning changes the thread's affinity; this restores it.
class Pin : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_), 0); }
  void TearDown() override { pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_); }
  cpu_set_t saved_;
};

TEST_F(Pin, PinsToEachAllowedCpu) {
  int checked = 0;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &saved_)) continue;
    Status s = pin_current_thread(cpu);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    // The kernel migrates the calling thread before the affinity call returns.
    EXPECT_EQ(sched_getcpu(), static_cast<int>(cpu));
    cpu_set_t now;
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &now));
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

TEST_F(Pin, BadCpuFails) {
  Status s = pin_current_thread(CPU_SETSIZE + 3);
  EXPECT_EQ(s.code(), Errc::kInvalidArgument);
  EXPECT_NE(s.message().find("CPU_SETSIZE"), std::string::npos) << s.message();

  // A cpu that does not exist on this machine: the kernel refuses.
  unsigned absent = CPU_SETSIZE - 1;
  ASSERT_GT(absent, static_cast<unsigned>(sysconf(_SC_NPROCESSORS_CONF)));
  s = pin_current_thread(absent);
  EXPECT_EQ(s.code(), Errc::kInvalidArgument);
  EXPECT_EQ(s.sys_errno(), EINVAL);
  EXPECT_NE(s.to_string().find("cpu " + std::to_string(absent)), std::string::npos) << s.to_string();

  cpu_set_t now;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof now, &now), 0);
  EXPECT_TRUE(CPU_EQUAL(&now, &saved_)) << "a failed pin changed the affinity";
}

// An unknown TERN_LOG_LEVEL makes Runtime::start fail before it touches EAL
// (in a child process: the variable is read once per process).
TEST(RuntimeLogLevel, UnknownLevelFailsStart) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TERN_LOG_LEVEL", "chatty", 1);
        EalOptions o;
        o.huge = HugeMode::kOff;
        auto rt = Runtime::start(o);
        bool ok = !rt.is_ok() && rt.status().code() == Errc::kInvalidArgument &&
                  rt.status().message().find("TERN_LOG_LEVEL='chatty'") != std::string::npos;
        std::_Exit(ok ? 0 : 1);
      },
      // The error is Runtime::start's to return (the host says it), not
      // also printed by the library.
      ::testing::ExitedWithCode(0), "^$");
}

}  // namespace
}  // namespace tern::runtime
