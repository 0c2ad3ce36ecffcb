// A cheap monotonic clock for the datapath. On x86-64 with an invariant TSC it
// is the TSC, calibrated once against CLOCK_MONOTONIC: now_ticks() costs a few
// ns. A TSC the CPU does not call invariant is used too where the kernel's
// own clock is a system call (its clocksource has no vDSO read: hpet,
// acpi_pm, as in a TCG guest, where each such read costs microseconds), if
// two calibrations agree; each thread's readings are then kept from going
// backwards (docs/tuning.md, "The engine's clock"). Elsewhere (other
// architectures, a TSC that is not invariant while the kernel's clock is
// cheap, a failed calibration, or TERN_CLOCK=monotonic in the environment)
// ticks are CLOCK_MONOTONIC nanoseconds (~20 ns a read through the vDSO).
// Either way, convert with ns_from_ticks() and never compare ticks across
// processes.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace tern {

enum class ClockSource : uint8_t {
  kUndecided,  // before the first use of the clock in this process
  kTsc,        // rdtsc, tick_hz() from a 10 ms calibration
  kTscGuarded,  // rdtsc not flagged invariant, the kernel's clock a system call: per thread never backwards
  kMonotonic,  // clock_gettime(CLOCK_MONOTONIC) in ns, tick_hz() = 1e9
  kVirtual,    // a simulation's clock (set_virtual_clock), in ns, tick_hz() = 1e9
};

namespace detail {
extern std::atomic<ClockSource> clock_source;
uint64_t now_ticks_slow();
// kTscGuarded's reading: `t`, or the thread's `last` reading if `t` is
// behind it (a CPU whose TSC lags the previous one's).
inline uint64_t never_back(uint64_t t, uint64_t& last) {
  if (t < last) return last;
  last = t;
  return t;
}
}  // namespace detail

inline uint64_t now_ticks() {
#if defined(__x86_64__)
  // Relaxed: the source is decided once, before any tick is handed out, and
  // never changes; a thread that sees kUndecided takes the slow path, which
  // waits for the decision.
  if (__builtin_expect(detail::clock_source.load(std::memory_order_relaxed) == ClockSource::kTsc, 1))
    return __rdtsc();
#endif
  return detail::now_ticks_slow();
}

// Nanoseconds from CLOCK_MONOTONIC (a vDSO call, ~20 ns); the virtual clock's
// nanoseconds while one is set.
uint64_t monotonic_ns();

// A deterministic simulation (pmd/sim) runs engines in simulated time: while
// `ns` is set, now_ticks() and monotonic_ns() read *ns (nanoseconds, which
// the simulator advances) and tick_hz() is 1e9; nullptr goes back to the
// machine's clock. Process-wide, for a single-threaded simulation: set it
// before creating the engines that are to run in simulated time (an engine
// converts its timeouts to ticks when created) and unset it after they are
// gone. The TSC fast path of now_ticks() is unchanged: a virtual clock costs
// the datapath nothing.
void set_virtual_clock(const uint64_t* ns);

// The source now_ticks() reads; the first call decides it (~10 ms on x86-64,
// once per process: the TSC calibration).
ClockSource clock_source();
const char* clock_source_name(ClockSource s);

// Ticks per second: calibrated for the TSC, 1e9 for the fallback.
double tick_hz();
inline double ns_from_ticks(uint64_t ticks) { return static_cast<double>(ticks) * 1e9 / tick_hz(); }
inline uint64_t ticks_from_ns(uint64_t ns) {
  return static_cast<uint64_t>(static_cast<double>(ns) * tick_hz() / 1e9);
}

namespace detail {
// What TERN_CLOCK asks for, read once: "tsc", "tsc-guarded", "monotonic";
// kAuto for null, empty, "auto", and anything else (then *known is false,
// for the caller to warn).
enum class ClockForce : uint8_t { kAuto, kTsc, kTscGuarded, kMonotonic };
ClockForce parse_clock_force(const char* value, bool* known = nullptr);
// The decision, apart from the machine so that tests can drive it: `forced`
// is TERN_CLOCK's, `invariant_tsc` what CPUID says, `calibrated_hz` the
// measured TSC rate (0 when not measured).
// The TSC is used only if invariant (or forced) and its rate is plausible;
// or, guarded, if `kernel_clock_syscall` (kernel_clock_is_syscall) and a
// second calibration, `recheck_hz`, agrees with the first within 1%.
ClockSource choose_clock_source(ClockForce forced, bool invariant_tsc, double calibrated_hz,
                                bool kernel_clock_syscall = false, double recheck_hz = 0);
// Whether a kernel clocksource (sysfs' current_clocksource) makes
// clock_gettime a system call: all but those the x86 vDSO reads in user space.
bool kernel_clock_is_syscall(const char* clocksource);
// The TSC's rate from two (ns, TSC) pairs `window_ns` apart, the clocks
// given so that tests can preempt the caller between two reads. Each pair
// brackets the clock's reading by two TSC reads and keeps the tightest of
// a few tries: a thread descheduled between a clock read and a TSC read
// would otherwise pair readings a time slice apart (milliseconds on a
// loaded machine) and get a rate off by that much against a 10 ms window,
// and every tick-paced deadline of the process with it. 0 if the TSC did
// not advance.
double calibrate_tsc_with(uint64_t (*now_ns)(), uint64_t (*read_tsc)(), uint64_t window_ns);
}  // namespace detail

}  // namespace tern
