#include "base/clock.h"

#include <time.h>

#include <cmath>
#include <cstdio>
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

ClockForce parse_clock_force(const char* value, bool* known) {
  if (known != nullptr) *known = true;
  if (value == nullptr || value[0] == '\0' || std::strcmp(value, "auto") == 0) return ClockForce::kAuto;
  if (std::strcmp(value, "tsc") == 0) return ClockForce::kTsc;
  if (std::strcmp(value, "tsc-guarded") == 0) return ClockForce::kTscGuarded;
  if (std::strcmp(value, "monotonic") == 0) return ClockForce::kMonotonic;
  if (known != nullptr) *known = false;
  return ClockForce::kAuto;
}

ClockSource choose_clock_source(ClockForce forced, bool invariant_tsc, double calibrated_hz,
                                bool kernel_clock_syscall, double recheck_hz) {
  if (forced == ClockForce::kMonotonic) return ClockSource::kMonotonic;
  // A rate outside 100 MHz-100 GHz (or NaN) means the measurement failed:
  // the TSC did not advance, or went backwards, or the clock stalled.
  auto plausible = [](double hz) { return hz >= 1e8 && hz <= 1e11; };
  if (!plausible(calibrated_hz)) return ClockSource::kMonotonic;
  if (forced == ClockForce::kTscGuarded) return ClockSource::kTscGuarded;
  if (invariant_tsc || forced == ClockForce::kTsc) return ClockSource::kTsc;
  // Not flagged invariant, but the kernel's clock costs a system call (a
  // microsecond and more in an emulated guest, against a few ns): the TSC
  // is worth its risk if its rate held over two calibrations. It then only
  // needs to measure timeouts of milliseconds and more to a few percent.
  if (kernel_clock_syscall && plausible(recheck_hz) &&
      std::abs(recheck_hz - calibrated_hz) <= 0.01 * calibrated_hz)
    return ClockSource::kTscGuarded;
  return ClockSource::kMonotonic;
}

bool kernel_clock_is_syscall(const char* clocksource) {
  if (clocksource == nullptr || clocksource[0] == '\0') return false;  // unknown: assume the cheap clock
  for (const char* fast : {"tsc", "kvm-clock", "hyperv_clocksource_tsc_page", "arch_sys_counter"})
    if (std::strcmp(clocksource, fast) == 0) return false;
  return true;
}

namespace {
struct ClockPair {
  uint64_t ns = 0, tsc = 0, spread = UINT64_MAX;  // spread: TSC ticks between the bracketing reads
};
ClockPair read_pair(uint64_t (*now_ns)(), uint64_t (*read_tsc)()) {
  ClockPair best;
  for (int i = 0; i < 8; ++i) {
    const uint64_t a = read_tsc();
    const uint64_t t = now_ns();
    const uint64_t b = read_tsc();
    if (b >= a && b - a < best.spread) best = ClockPair{t, a + (b - a) / 2, b - a};
  }
  return best;
}
}  // namespace

double calibrate_tsc_with(uint64_t (*now_ns)(), uint64_t (*read_tsc)(), uint64_t window_ns) {
  const ClockPair p0 = read_pair(now_ns, read_tsc);
  while (now_ns() - p0.ns < window_ns) {
  }
  const ClockPair p1 = read_pair(now_ns, read_tsc);
  if (p0.spread == UINT64_MAX || p1.spread == UINT64_MAX || p1.tsc <= p0.tsc || p1.ns <= p0.ns) return 0;
  return static_cast<double>(p1.tsc - p0.tsc) * 1e9 / static_cast<double>(p1.ns - p0.ns);
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

uint64_t read_tsc() { return __rdtsc(); }

// 10 ms is enough for ~0.1% accuracy; this VM has no MSR access, so the TSC
// frequency cannot be read directly (DPDK spends 100 ms on the same problem).
double calibrate_tsc() { return detail::calibrate_tsc_with(monotonic_ns, read_tsc, 10'000'000); }

// The kernel's current clocksource, "" if unknown.
void kernel_clocksource(char* out, size_t size) {
  out[0] = '\0';
  FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (f == nullptr) return;
  if (std::fgets(out, static_cast<int>(size), f) == nullptr) out[0] = '\0';
  std::fclose(f);
  out[std::strcspn(out, "\n")] = '\0';
}
#endif

double g_tsc_hz = 0;  // written once, before clock_source leaves kUndecided (release)

void decide() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("TERN_CLOCK");
    bool known = true;
    const detail::ClockForce forced = detail::parse_clock_force(env, &known);
    if (!known) TERN_LOG(kWarn, "clock", "TERN_CLOCK=%s is not auto, tsc, tsc-guarded or monotonic; using auto", env);
    bool invariant = false, syscall_clock = false;
    double hz = 0, recheck = 0;
    char kernel[64] = "";
#if defined(__x86_64__)
    invariant = invariant_tsc();
    if (forced != detail::ClockForce::kMonotonic) hz = calibrate_tsc();
    kernel_clocksource(kernel, sizeof kernel);
    syscall_clock = detail::kernel_clock_is_syscall(kernel);
    // Only where it could decide: a second 10 ms, once per process.
    if (!invariant && syscall_clock && hz != 0 && forced != detail::ClockForce::kTsc)
      recheck = calibrate_tsc();
#endif
    ClockSource s = detail::choose_clock_source(forced, invariant, hz, syscall_clock, recheck);
    g_tsc_hz = hz;
    if (s != ClockSource::kTsc)
      TERN_LOG(kDebug, "clock", "ticks are %s (TERN_CLOCK=%s, invariant TSC %s, TSC %.0f / %.0f Hz, kernel clock %s)",
               s == ClockSource::kTscGuarded ? "the TSC, guarded" : "CLOCK_MONOTONIC ns",
               env != nullptr ? env : "auto", invariant ? "yes" : "no", hz, recheck, kernel);
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
  if (s == ClockSource::kTscGuarded) {
    // A TSC nobody promised to be synchronised across CPUs: a thread moved
    // to one that lags must not see time go back (an engine subtracts
    // ticks unsigned). It stands still until the new CPU catches up.
    static thread_local uint64_t last = 0;
    return never_back(__rdtsc(), last);
  }
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
    case ClockSource::kTscGuarded: return "tsc-guarded";
    case ClockSource::kMonotonic: return "monotonic";
    case ClockSource::kVirtual: return "virtual";
  }
  return "?";
}

double tick_hz() {
  const ClockSource s = decided();
  return s == ClockSource::kTsc || s == ClockSource::kTscGuarded ? g_tsc_hz : 1e9;
}

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
