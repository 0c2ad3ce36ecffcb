#include <gtest/gtest.h>
#include <time.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/clock.h"

namespace tern {
namespace {

// This VM is noisy: the bounds below only catch a broken clock (wrong unit,
// wrong direction, uncalibrated), never a slow one.

TEST(Clock, TickHzPlausible) {
  double hz = tick_hz();
  EXPECT_GT(hz, 1e8);
  EXPECT_LT(hz, 1e11);
  EXPECT_EQ(tick_hz(), hz) << "calibrated more than once";
}

TEST(Clock, Monotonic) {
  uint64_t ns = monotonic_ns(), t = now_ticks();
  for (int i = 0; i < 100000; ++i) {
    uint64_t ns2 = monotonic_ns(), t2 = now_ticks();
    ASSERT_GE(ns2, ns);
    ASSERT_GE(t2, t);
    ns = ns2, t = t2;
  }
}

TEST(Clock, TicksAgreeWithMonotonic) {
  uint64_t ns0 = monotonic_ns(), t0 = now_ticks();
  timespec req{0, 20'000'000};
  nanosleep(&req, nullptr);
  uint64_t ns1 = monotonic_ns(), t1 = now_ticks();
  double by_ticks = ns_from_ticks(t1 - t0);
  double by_clock = static_cast<double>(ns1 - ns0);
  EXPECT_GE(by_clock, 20e6);
  EXPECT_GT(by_ticks, by_clock * 0.5);
  EXPECT_LT(by_ticks, by_clock * 2.0);
}

// Which source the machine's facts lead to (the decision without the machine).
TEST(Clock, ChooseSource) {
  // TERN_CLOCK as the process reads it, then the decision.
  auto choose_clock_source = [](const char* forced, bool invariant, double hz, bool syscall_clock = false,
                                double recheck = 0) {
    return detail::choose_clock_source(detail::parse_clock_force(forced), invariant, hz, syscall_clock, recheck);
  };
  EXPECT_EQ(choose_clock_source(nullptr, true, 2.5e9), ClockSource::kTsc);
  EXPECT_EQ(choose_clock_source("auto", true, 2.5e9), ClockSource::kTsc);
  EXPECT_EQ(choose_clock_source("", true, 2.5e9), ClockSource::kTsc);
  // A TSC that is not invariant does not measure time.
  EXPECT_EQ(choose_clock_source(nullptr, false, 2.5e9), ClockSource::kMonotonic);
  // Calibration failed: the TSC stood still, ran backwards, or gave nonsense.
  EXPECT_EQ(choose_clock_source(nullptr, true, 0), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source(nullptr, true, 1e3), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source(nullptr, true, 1e13), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source(nullptr, true, std::nan("")), ClockSource::kMonotonic);
  // Forced either way; forcing the TSC still needs a usable calibration.
  EXPECT_EQ(choose_clock_source("monotonic", true, 2.5e9), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source("tsc", false, 2.5e9), ClockSource::kTsc);
  EXPECT_EQ(choose_clock_source("tsc", false, 0), ClockSource::kMonotonic);
  // Not invariant, but the kernel's clock is a system call: the TSC, guarded,
  // if a second calibration agrees within 1%.
  EXPECT_EQ(choose_clock_source(nullptr, false, 2.5e9, true, 2.51e9), ClockSource::kTscGuarded);
  EXPECT_EQ(choose_clock_source("auto", false, 2.5e9, true, 2.49e9), ClockSource::kTscGuarded);
  EXPECT_EQ(choose_clock_source(nullptr, false, 2.5e9, true, 2.6e9), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source(nullptr, false, 2.5e9, true, 0), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source(nullptr, false, 0, true, 0), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source(nullptr, false, 2.5e9, false, 2.5e9), ClockSource::kMonotonic);
  EXPECT_EQ(choose_clock_source("monotonic", false, 2.5e9, true, 2.5e9), ClockSource::kMonotonic);
  // An invariant TSC needs no guard; forcing the guarded TSC needs a calibration.
  EXPECT_EQ(choose_clock_source(nullptr, true, 2.5e9, true, 2.5e9), ClockSource::kTsc);
  EXPECT_EQ(choose_clock_source("tsc-guarded", false, 2.5e9), ClockSource::kTscGuarded);
  EXPECT_EQ(choose_clock_source("tsc-guarded", true, 2.5e9), ClockSource::kTscGuarded);
  EXPECT_EQ(choose_clock_source("tsc-guarded", false, 0), ClockSource::kMonotonic);
}

// TERN_CLOCK's values, and anything else read as auto and flagged unknown
// (for the warning).
TEST(Clock, ParseForce) {
  using detail::ClockForce;
  using detail::parse_clock_force;
  bool known = false;
  for (const char* automatic : {static_cast<const char*>(nullptr), "", "auto"}) {
    EXPECT_EQ(parse_clock_force(automatic, &known), ClockForce::kAuto);
    EXPECT_TRUE(known);
  }
  EXPECT_EQ(parse_clock_force("tsc"), ClockForce::kTsc);
  EXPECT_EQ(parse_clock_force("tsc-guarded"), ClockForce::kTscGuarded);
  EXPECT_EQ(parse_clock_force("monotonic"), ClockForce::kMonotonic);
  for (const char* bad : {"TSC", "tsc-", "mono", "hpet"}) {
    EXPECT_EQ(parse_clock_force(bad, &known), ClockForce::kAuto) << bad;
    EXPECT_FALSE(known) << bad;
  }
}

// Which kernel clocks cost a system call per read (no vDSO read on x86).
TEST(Clock, KernelClockIsSyscall) {
  using detail::kernel_clock_is_syscall;
  EXPECT_TRUE(kernel_clock_is_syscall("hpet"));
  EXPECT_TRUE(kernel_clock_is_syscall("acpi_pm"));
  EXPECT_TRUE(kernel_clock_is_syscall("jiffies"));
  EXPECT_FALSE(kernel_clock_is_syscall("tsc"));
  EXPECT_FALSE(kernel_clock_is_syscall("kvm-clock"));
  EXPECT_FALSE(kernel_clock_is_syscall("hyperv_clocksource_tsc_page"));
  EXPECT_FALSE(kernel_clock_is_syscall(""));
  EXPECT_FALSE(kernel_clock_is_syscall(nullptr));
}

// The guard: a reading behind the thread's last (a lagging CPU's TSC)
// returns the last one, and the clock goes on from where it catches up.
TEST(Clock, GuardedTscNeverGoesBack) {
  uint64_t last = 0;
  EXPECT_EQ(detail::never_back(1000, last), 1000u);
  EXPECT_EQ(detail::never_back(1500, last), 1500u);
  EXPECT_EQ(detail::never_back(1200, last), 1500u);
  EXPECT_EQ(detail::never_back(1499, last), 1500u);
  EXPECT_EQ(detail::never_back(1600, last), 1600u);
  EXPECT_EQ(last, 1600u);
}

TEST(Clock, SourceMatchesMachineAndEnvironment) {
  const char* forced = std::getenv("TERN_CLOCK");
  ClockSource s = clock_source();
  EXPECT_NE(s, ClockSource::kUndecided);
  if (forced != nullptr && std::strcmp(forced, "monotonic") == 0) {
    EXPECT_EQ(s, ClockSource::kMonotonic);
  }
  if (forced != nullptr && std::strcmp(forced, "tsc-guarded") == 0) {
    EXPECT_EQ(s, ClockSource::kTscGuarded);
  }
#if !defined(__x86_64__)
  EXPECT_EQ(s, ClockSource::kMonotonic);
#endif
  std::printf("clock source: %s, %.0f ticks/s\n", clock_source_name(s), tick_hz());
}

// Test 'clock_fallback' (tests/unit/meson.build) runs this file with
// TERN_CLOCK=monotonic: the path every non-x86 machine takes.
TEST(Clock, FallbackTicksAreMonotonicNs) {
  if (clock_source() != ClockSource::kMonotonic) GTEST_SKIP() << "TSC in use; run with TERN_CLOCK=monotonic";
  EXPECT_EQ(tick_hz(), 1e9);
  for (int i = 0; i < 1000; ++i) {
    uint64_t before = monotonic_ns();
    uint64_t t = now_ticks();
    uint64_t after = monotonic_ns();
    ASSERT_GE(t, before);
    ASSERT_LE(t, after);
  }
  EXPECT_EQ(ns_from_ticks(1234567), 1234567.0);
  EXPECT_EQ(ticks_from_ns(7'000'000'000ull), 7'000'000'000ull);
}

TEST(Clock, TicksNsRoundTrip) {
  uint64_t ticks = ticks_from_ns(1'000'000);
  EXPECT_GT(ticks, 0u);
  EXPECT_NEAR(ns_from_ticks(ticks), 1e6, 1e3);
}

}  // namespace
}  // namespace tern

namespace tern {
namespace {

// The TSC's calibration on a loaded machine: a thread descheduled between
// any two of the calibration's clock reads must not skew the rate. A fake
// pair of clocks (the TSC at exactly 2 GHz) where one read, at each
// position in turn, first "loses the CPU" for 5 ms: the rate must stay
// within 0.1% (a pair read a time slice apart was off by up to 50% of a
// 10 ms window, and every tick-paced deadline of the process with it).
namespace fake_clock {
uint64_t ns = 0;
int reads = 0, stall_at = -1;
void step() {
  if (reads++ == stall_at) ns += 5'000'000;
  ns += 25;  // a read takes some time
}
uint64_t now_ns() {
  step();
  return ns;
}
uint64_t tsc() {
  step();
  return ns * 2;
}
}  // namespace fake_clock

TEST(Clock, CalibrationSurvivesADescheduledRead) {
  using namespace fake_clock;
  // The reads of the two pairs (the first 24 and the window's end): the
  // window's own polls in between are nearly 400,000 and need no stall.
  for (int at = 0; at < 24; ++at) {
    for (int end_pair : {0, 1}) {
      ns = 1'000'000'000, reads = 0;
      stall_at = end_pair == 0 ? at : -1;
      if (end_pair == 1) {
        // Count the reads of a clean run to place the stall in the second pair.
        (void)detail::calibrate_tsc_with(now_ns, tsc, 10'000'000);
        const int total = reads;
        ns = 1'000'000'000, reads = 0;
        stall_at = total - 24 + at;
      }
      const double hz = detail::calibrate_tsc_with(now_ns, tsc, 10'000'000);
      EXPECT_NEAR(hz, 2e9, 2e6) << "a 5 ms stall at read " << stall_at << (end_pair ? " (the end's pair)" : "");
    }
  }
}

}  // namespace
}  // namespace tern
