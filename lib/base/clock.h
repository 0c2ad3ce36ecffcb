// A cheap monotonic clock for the datapath. On x86-64 with an invariant TSC it
// is the TSC, calibrated once against CLOCK_MONOTONIC: now_ticks() costs a few
// ns. Elsewhere (other architectures, a TSC that is not invariant or whose
// calibration fails, or TERN_CLOCK=monotonic in the environment) ticks are
// CLOCK_MONOTONIC nanoseconds (~20 ns a read through the vDSO). Either way,
// convert with ns_from_ticks() and never compare ticks across processes.
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
  kMonotonic,  // clock_gettime(CLOCK_MONOTONIC) in ns, tick_hz() = 1e9
  kVirtual,    // a simulation's clock (set_virtual_clock), in ns, tick_hz() = 1e9
};

namespace detail {
extern std::atomic<ClockSource> clock_source;
uint64_t now_ticks_slow();
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
// The decision, apart from the machine so that tests can drive it: `forced` is
// TERN_CLOCK ("tsc", "monotonic", or null/empty/"auto"), `invariant_tsc` what
// CPUID says, `calibrated_hz` the measured TSC rate (0 when not measured).
// The TSC is used only if invariant (or forced) and its rate is plausible.
ClockSource choose_clock_source(const char* forced, bool invariant_tsc, double calibrated_hz);
}  // namespace detail

}  // namespace tern
