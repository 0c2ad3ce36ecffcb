#include <gtest/gtest.h>
#include <time.h>

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

TEST(Clock, TicksNsRoundTrip) {
  uint64_t ticks = ticks_from_ns(1'000'000);
  EXPECT_GT(ticks, 0u);
  EXPECT_NEAR(ns_from_ticks(ticks), 1e6, 1e3);
}

}  // namespace
}  // namespace tern
