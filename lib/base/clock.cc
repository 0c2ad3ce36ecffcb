#include "base/clock.h"

#include <time.h>

#include <atomic>

namespace tern {

uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {
double calibrate() {
#if defined(__x86_64__)
  // 10 ms is enough for ~0.1% accuracy; this VM has no MSR access, so the TSC
  // frequency cannot be read directly (DPDK spends 100 ms on the same problem).
  uint64_t t0 = monotonic_ns();
  uint64_t c0 = now_ticks();
  while (monotonic_ns() - t0 < 10'000'000) {
  }
  uint64_t t1 = monotonic_ns();
  uint64_t c1 = now_ticks();
  return static_cast<double>(c1 - c0) * 1e9 / static_cast<double>(t1 - t0);
#else
  return 1e9;
#endif
}
}  // namespace

double tick_hz() {
  static const double hz = calibrate();
  return hz;
}

}  // namespace tern
