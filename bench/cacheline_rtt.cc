// tern-cacheline: the cache-line round trip between two CPUs -- the scale
// every shared-memory transport is measured against (docs/performance.md,
// scripts/compare-ucx.sh). Two threads, pinned; each owns one cache line.
// The first stores a sequence number in its line, the second spins until it
// sees it and stores it in its own line, the first spins until it sees that:
// one round trip. Prints the median, p99 and mean of ROUNDS samples, each
// the mean of BATCH round trips (the clock is read once per batch, so its
// cost is not in the figure).
//   tern-cacheline [--cpus A,B] [--samples N] [--batch N] [--json]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "option_parser.h"

namespace {

struct alignas(128) Line {
  std::atomic<uint64_t> v{0};
};

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> cpus = {0, 1};
  long samples = 2000, batch = 200;
  bool json = false;
  tern::apps::OptionParser cli("tern-cacheline", "[options]");
  cli.integers("cpus", "A,B", "the two CPUs the line bounces between (default 0,1)", 0, 4095, 2, 2, &cpus);
  cli.integer("samples", "N", "samples (default 2000)", 1, 1l << 30, &samples);
  cli.integer("batch", "N", "round trips per sample (default 200)", 1, 1l << 30, &batch);
  cli.flag("json", "print the result as JSON", &json);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  const int cpu_a = cpus[0], cpu_b = cpus[1];
  Line ping, pong;
  const uint64_t total = static_cast<uint64_t>(samples) * static_cast<uint64_t>(batch) + 1000;
  std::thread peer([&] {
    if (!pin(cpu_b)) std::fprintf(stderr, "tern-cacheline: cannot pin to CPU %d\n", cpu_b);
    for (uint64_t seq = 1; seq <= total; ++seq) {
      while (ping.v.load(std::memory_order_acquire) != seq) {
      }
      pong.v.store(seq, std::memory_order_release);
    }
  });
  if (!pin(cpu_a)) std::fprintf(stderr, "tern-cacheline: cannot pin to CPU %d\n", cpu_a);
  uint64_t seq = 0;
  auto bounce = [&] {
    ++seq;
    ping.v.store(seq, std::memory_order_release);
    while (pong.v.load(std::memory_order_acquire) != seq) {
    }
  };
  for (int i = 0; i < 1000; ++i) bounce();  // warm-up
  std::vector<double> ns(static_cast<size_t>(samples));
  for (auto& s : ns) {
    auto t0 = std::chrono::steady_clock::now();
    for (long k = 0; k < batch; ++k) bounce();
    auto t1 = std::chrono::steady_clock::now();
    s = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(batch);
  }
  peer.join();
  double mean = 0;
  for (double s : ns) mean += s;
  mean /= static_cast<double>(ns.size());
  std::sort(ns.begin(), ns.end());
  const double p50 = ns[ns.size() / 2], p99 = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)];
  if (json)
    std::printf("{\"cpus\": [%d, %d], \"samples\": %ld, \"batch\": %ld, \"rtt_ns\": {\"p50\": %.1f, \"p99\": %.1f, "
                "\"mean\": %.1f}}\n",
                cpu_a, cpu_b, samples, batch, p50, p99, mean);
  else
    std::printf("cache-line round trip, CPU %d <-> %d: p50 %.1f ns, p99 %.1f ns, mean %.1f ns (%ld samples of %ld)\n",
                cpu_a, cpu_b, p50, p99, mean, samples, batch);
  return 0;
}
