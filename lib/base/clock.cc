#include "base/clock.h"

#include <time.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/log.h"

namespace tern {

namespace {
// set_virtual_clock's. Atomic (relaxed: a plain load on x86) because any
// thread may read the clock while a simulation sets it; the simulation
// itself, which advances *ns, is one thread.
std::atomic<const uint64_t*> g_virtual_ns{nullptr};
ClockSource g_before_virtual = ClockSource::kUndecided;
}  // namespace

uint64_t monotonic_ns() {
  if (const uint64_t* v = g_virtual_ns.load(std::memory_order_relaxed); __builtin_expect(v != nullptr, 0)) return *v;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

namespace detail {

std::atomic<ClockSource> clock_source{ClockSource::kUndecided};

ClockSource choose_clock_source(const char* forced, bool invariant_tsc, double calibrated_hz) {
  if (forced != nullptr && std::strcmp(forced, "monotonic") == 0) return ClockSource::kMonotonic;
  // A rate outside 100 MHz-100 GHz (or NaN) means the measurement failed:
  // the TSC did not advance, or went backwards, or the clock stalled.
  bool plausible = calibrated_hz >= 1e8 && calibrated_hz <= 1e11;
  bool want_tsc = invariant_tsc || (forced != nullptr && std::strcmp(forced, "tsc") == 0);
  return want_tsc && plausible ? ClockSource::kTsc : ClockSource::kMonotonic;
}

}  // namespace detail

namespace {

#if defined(__x86_64__)
// CPUID.80000007H:EDX[8]: the TSC runs at a constant rate in every P-, C- and
// T-state (Linux shows it as constant_tsc + nonstop_tsc). Without it a tick
// is not a fixed amount of time.
bool invariant_tsc() {
  unsigned a, b, c, d;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) return false;
  return (d & (1u << 8)) != 0;
}

// 10 ms is enough for ~0.1% accuracy; this VM has no MSR access, so the TSC
// frequency cannot be read directly (DPDK spends 100 ms on the same problem).
double calibrate_tsc() {
  uint64_t t0 = monotonic_ns();
  uint64_t c0 = __rdtsc();
  while (monotonic_ns() - t0 < 10'000'000) {
  }
  uint64_t t1 = monotonic_ns();
  uint64_t c1 = __rdtsc();
  if (c1 <= c0) return 0;
  return static_cast<double>(c1 - c0) * 1e9 / static_cast<double>(t1 - t0);
}
#endif

double g_tsc_hz = 0;  // written once, before clock_source leaves kUndecided (release)

void decide() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* forced = std::getenv("TERN_CLOCK");
    if (forced != nullptr && forced[0] != '\0' && std::strcmp(forced, "auto") != 0 &&
        std::strcmp(forced, "tsc") != 0 && std::strcmp(forced, "monotonic") != 0)
      TERN_LOG(kWarn, "clock", "TERN_CLOCK=%s is not auto, tsc or monotonic; using auto", forced);
    bool invariant = false;
    double hz = 0;
#if defined(__x86_64__)
    invariant = invariant_tsc();
    if (forced == nullptr || std::strcmp(forced, "monotonic") != 0) hz = calibrate_tsc();
#endif
    ClockSource s = detail::choose_clock_source(forced, invariant, hz);
    g_tsc_hz = hz;
    if (s == ClockSource::kMonotonic)
      TERN_LOG(kDebug, "clock", "ticks are CLOCK_MONOTONIC ns (TERN_CLOCK=%s, invariant TSC %s, TSC %.0f Hz)",
               forced != nullptr ? forced : "auto", invariant ? "yes" : "no", hz);
    detail::clock_source.store(s, std::memory_order_release);
  });
}

ClockSource decided() {
  ClockSource s = detail::clock_source.load(std::memory_order_acquire);
  if (s != ClockSource::kUndecided) return s;
  decide();
  return detail::clock_source.load(std::memory_order_acquire);
}

}  // namespace

namespace detail {
uint64_t now_ticks_slow() {
  const ClockSource s = decided();
#if defined(__x86_64__)
  if (s == ClockSource::kTsc) return __rdtsc();
#endif
  if (s == ClockSource::kVirtual)
    if (const uint64_t* v = g_virtual_ns.load(std::memory_order_relaxed)) return *v;
  return monotonic_ns();
}
}  // namespace detail

ClockSource clock_source() { return decided(); }

const char* clock_source_name(ClockSource s) {
  switch (s) {
    case ClockSource::kUndecided: return "undecided";
    case ClockSource::kTsc: return "tsc";
    case ClockSource::kMonotonic: return "monotonic";
    case ClockSource::kVirtual: return "virtual";
  }
  return "?";
}

double tick_hz() { return decided() == ClockSource::kTsc ? g_tsc_hz : 1e9; }

void set_virtual_clock(const uint64_t* ns) {
  const ClockSource s = decided();  // the machine's source, decided once, comes back after
  if (ns != nullptr) {
    if (s != ClockSource::kVirtual) g_before_virtual = s;
    g_virtual_ns.store(ns, std::memory_order_relaxed);
    detail::clock_source.store(ClockSource::kVirtual, std::memory_order_release);
  } else if (g_virtual_ns.load(std::memory_order_relaxed) != nullptr) {
    detail::clock_source.store(g_before_virtual, std::memory_order_release);
    g_virtual_ns.store(nullptr, std::memory_order_relaxed);
  }
}

}  // namespace tern
