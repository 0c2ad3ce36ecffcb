// tern-memcpy: a plain memcpy's throughput, the yardstick for bulk transfers
// through read and write chunks (their goal: at least 80% of a memcpy of
// the same size, measured in the same run; scripts/compare-ucx.sh).
// One thread, pinned, copies SIZE bytes from one buffer to another, round
// robin over BUFS source and BUFS destination buffers (as tern-perf --bulk
// with --qd BUFS keeps BUFS buffers in flight on each side), for SECONDS.
// Prints GB/s (10^9 bytes of payload per second, as tern-perf does).
//   tern-memcpy [--size BYTES] [--bufs N] [--seconds S] [--cpu C] [--json]
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "option_parser.h"

namespace {

}  // namespace

int main(int argc, char** argv) {
  size_t size = 64 << 10;
  long bufs = 1, cpu = -1;
  double seconds = 1;
  bool json = false;
  tern::apps::OptionParser cli("tern-memcpy", "[options]");
  cli.count("size", "BYTES", "bytes per copy (default 64K)", 1, size_t{1} << 30, &size);
  cli.integer("bufs", "N", "buffers copied in turn (default 1)", 1, 1024, &bufs);
  cli.duration("seconds", "S", "how long (default 1)", 3600, &seconds);
  cli.integer("cpu", "C", "pin to this CPU (default -1: unpinned)", -1, 4095, &cpu);
  cli.flag("json", "print the result as JSON", &json);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<int>(cpu), &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
      std::fprintf(stderr, "tern-memcpy: cannot pin to CPU %ld\n", cpu);
  }
  // Page-aligned, populated, as the engine's arena is.
  const size_t stride = (size + 4095) & ~size_t{4095};
  const size_t total = stride * static_cast<size_t>(bufs);
  void* m = mmap(nullptr, 2 * total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (m == MAP_FAILED) {
    std::perror("tern-memcpy: mmap");
    return 1;
  }
  auto* src = static_cast<uint8_t*>(m);
  uint8_t* dst = src + total;
  std::memset(src, 0x5a, total);
  std::memset(dst, 0, total);
  using Clock = std::chrono::steady_clock;
  // Warm-up: one pass over every buffer.
  for (long b = 0; b < bufs; ++b) std::memcpy(dst + b * stride, src + b * stride, size);
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  uint64_t copies = 0;
  for (;;) {
    for (long b = 0; b < bufs; ++b, ++copies) std::memcpy(dst + b * stride, src + b * stride, size);
    if (Clock::now() >= end) break;
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Keep the copies: one byte of the result decides the exit status' twin.
  volatile uint8_t sink = dst[size - 1];
  (void)sink;
  const double gbps = static_cast<double>(copies) * static_cast<double>(size) / s / 1e9;
  if (json)
    std::printf("{\"size\": %zu, \"bufs\": %ld, \"seconds\": %.3f, \"copies\": %llu, \"gbytes_per_s\": %.3f}\n", size,
                bufs, s, static_cast<unsigned long long>(copies), gbps);
  else
    std::printf("memcpy of %zu bytes, %ld buffers each way: %.2f GB/s (%llu copies in %.2f s)\n", size, bufs, gbps,
                static_cast<unsigned long long>(copies), s);
  munmap(m, 2 * total);
  return 0;
}
