// A cheap monotonic clock for the datapath: the TSC, calibrated once against
// CLOCK_MONOTONIC. now_ticks() costs a few ns; convert with ns_from_ticks().
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace tern {

inline uint64_t now_ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;  // see monotonic_ns(); non-x86 builds use the fallback in clock.cc
#endif
}

// Nanoseconds from CLOCK_MONOTONIC (a vDSO call, ~20 ns).
uint64_t monotonic_ns();

// Ticks per second, measured on first use (~10 ms, once per process).
double tick_hz();
inline double ns_from_ticks(uint64_t ticks) { return static_cast<double>(ticks) * 1e9 / tick_hz(); }
inline uint64_t ticks_from_ns(uint64_t ns) {
  return static_cast<uint64_t>(static_cast<double>(ns) * tick_hz() / 1e9);
}

}  // namespace tern
