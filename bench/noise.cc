// tern-noise: how often this machine takes a CPU away from a busy-polling
// thread, and for how long -- the floor under every tail-latency figure
// measured here (docs/performance.md, "The machine's noise floor";
// scripts/compare-ucx.sh). One thread per CPU, pinned, reads the clock in a
// tight loop; a gap of at least 1 us between two readings is time the
// thread did not run (an interrupt, the hypervisor, another task). Prints
// per CPU the gaps per second by length and the share of time lost.
//
// A round trip between two polling threads is delayed by every gap on
// either CPU while it is in flight. When round trips follow each other back
// to back, a gap delays about one of them, so at R round trips per second
// the share of round trips delayed by at least L is about
// (gaps >= L per second, both CPUs) / R: once that passes 0.1%, no
// transport's p99.9 on this machine can be under L.
//   tern-noise [--cpus A,B] [--seconds S] [--json]
#include <pthread.h>
#include <sched.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "option_parser.h"

namespace {

// Gap lengths, lower bounds in ns; the last bucket is open. Fine enough
// (steps of 1.5-2x) that the stall floor read off them (compare-ucx-modes.sh)
// is not a bucket's width away from where the share crosses 0.1%.
constexpr std::array<uint64_t, 13> kBounds = {1000,  1500,  2000,  3000,   5000,   7000,   10000,
                                              15000, 20000, 30000, 50000, 100000, 1000000};

struct Result {
  std::array<uint64_t, kBounds.size()> gaps{};
  double lost_ns = 0;
  double seconds = 0;
  bool pinned = false;
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

void spin(int cpu, double seconds, Result* r) {
  using Clock = std::chrono::steady_clock;
  r->pinned = pin(cpu);
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  auto last = t0;
  for (;;) {
    const auto now = Clock::now();
    if (now >= end) break;
    const auto gap = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now - last).count());
    last = now;
    if (gap < kBounds[0]) continue;
    size_t b = 0;
    while (b + 1 < kBounds.size() && gap >= kBounds[b + 1]) ++b;
    ++r->gaps[b];
    r->lost_ns += static_cast<double>(gap);
  }
  r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string label(size_t b) {
  auto us = [](uint64_t ns) {
    std::string s = std::to_string(ns / 1000);
    return ns % 1000 ? s + "." + std::to_string(ns % 1000 / 100) : s;
  };
  if (b + 1 == kBounds.size()) return ">=" + us(kBounds[b]) + "us";
  return us(kBounds[b]) + "-" + us(kBounds[b + 1]) + "us";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> cpus = {0, 1};
  double seconds = 2;
  bool json = false;
  tern::apps::OptionParser cli("tern-noise", "[options]");
  cli.integers("cpus", "A,B", "the two CPUs to spin on (default 0,1)", 0, 4095, 2, 2, &cpus);
  cli.duration("seconds", "S", "how long (default 2, at most 600)", 600, &seconds);
  cli.flag("json", "print the result as JSON", &json);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  Result r[2];
  std::thread other(spin, cpus[1], seconds, &r[1]);
  spin(cpus[0], seconds, &r[0]);
  other.join();
  for (int k = 0; k < 2; ++k)
    if (!r[k].pinned) std::fprintf(stderr, "tern-noise: cannot pin to CPU %d\n", cpus[k]);
  if (json) {
    std::printf("{\"seconds\": %.3f, \"bounds_ns\": [", r[0].seconds);
    for (size_t b = 0; b < kBounds.size(); ++b) std::printf("%s%llu", b ? ", " : "", static_cast<unsigned long long>(kBounds[b]));
    std::printf("], \"cpus\": [");
    for (int k = 0; k < 2; ++k) {
      std::printf("%s{\"cpu\": %d, \"gaps_per_s\": [", k ? ", " : "", cpus[k]);
      for (size_t b = 0; b < kBounds.size(); ++b)
        std::printf("%s%.1f", b ? ", " : "", static_cast<double>(r[k].gaps[b]) / r[k].seconds);
      std::printf("], \"lost_pct\": %.3f}", 100 * r[k].lost_ns / (r[k].seconds * 1e9));
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("time a busy-polling thread did not run, gaps per second by length (%.1f s):\n", r[0].seconds);
  std::printf("%-6s", "CPU");
  for (size_t b = 0; b < kBounds.size(); ++b) std::printf(" %10s", label(b).c_str());
  std::printf(" %10s\n", "time lost");
  for (int k = 0; k < 2; ++k) {
    std::printf("%-6d", cpus[k]);
    for (size_t b = 0; b < kBounds.size(); ++b) std::printf(" %10.0f", static_cast<double>(r[k].gaps[b]) / r[k].seconds);
    std::printf(" %9.2f%%\n", 100 * r[k].lost_ns / (r[k].seconds * 1e9));
  }
  return 0;
}
