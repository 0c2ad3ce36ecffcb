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

int usage() {
  std::fprintf(stderr, "usage: tern-cacheline [--cpus A,B] [--samples N] [--batch N] [--json]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int cpu_a = 0, cpu_b = 1;
  long samples = 2000, batch = 200;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cpus") == 0 && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b) != 2) return usage();
    } else if (std::strcmp(argv[i], "--samples") == 0 && i + 1 < argc) {
      samples = std::strtol(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
      batch = std::strtol(argv[++i], nullptr, 10);
    } else if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      return usage();
    }
  }
  if (samples < 1 || batch < 1 || cpu_a < 0 || cpu_b < 0) return usage();
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
