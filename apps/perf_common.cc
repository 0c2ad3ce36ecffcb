// tern-perf: device specs per engine, CPU choice, and the engine launcher.
#include "perf_common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "base/clock.h"
#include "runtime/eal.h"

namespace tern::apps {

std::atomic<bool> g_stop{false};

Result<std::string> engine_spec(const std::string& spec, uint32_t i) {
  if (i == 0) return spec;
  // "driver:key=value,key=value": find the value of path=.
  size_t colon = spec.find(':');
  size_t pos = colon == std::string::npos ? std::string::npos : colon + 1;
  while (pos != std::string::npos && pos < spec.size()) {
    size_t comma = spec.find(',', pos);
    size_t end = comma == std::string::npos ? spec.size() : comma;
    if (spec.compare(pos, 5, "path=") == 0 && end > pos + 5)
      return spec.substr(0, end) + "." + std::to_string(i) + spec.substr(end);
    pos = comma == std::string::npos ? comma : comma + 1;
  }
  return make_error(Errc::kInvalidArgument,
                    "--engines %u needs a path= in --dev to give each engine its own address (got '%s')", i + 1,
                    spec.c_str());
}

int engine_cpu(const Options& o, uint32_t i) {
  if (o.lcores.empty()) return -1;
  if (o.lcores.size() > 1) return static_cast<int>(o.lcores[i]);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return static_cast<int>((o.lcores[0] + i) % static_cast<unsigned>(n));
}

void eal_telemetry(const Options& o, runtime::EalOptions* eo) {
  eo->telemetry = true;
  eo->file_prefix = "tern-perf-" + std::to_string(getpid());
  // The prefix only names the telemetry socket's directory: still no shared
  // config files, so that several tern-perfs share nothing, as without it.
  eo->extra_args.push_back("--no-shconf");
  if (!o.quiet)
    std::fprintf(stderr, "tern-perf: rte_telemetry on: dpdk-telemetry.py -f %s\n", eo->file_prefix.c_str());
}

int run_engines(const Options& o, std::vector<std::function<int()>> bodies,
                std::vector<std::function<void()>> teardowns, const std::function<int()>& monitor) {
  const size_t n = bodies.size();
  std::vector<int> rcs(n, 0);
  // Every engine's thread waits here after its body, so that o.at_end sees
  // all the engines, none destroyed yet. An engine done polling has nothing
  // left to do for its peers but go, so the wait costs them nothing.
  auto at_end = [&o]() noexcept {
    if (o.at_end) o.at_end();
  };
  std::barrier end(static_cast<std::ptrdiff_t>(n), at_end);
  auto whole = [&](size_t i) {
    int rc = bodies[i]();
    end.arrive_and_wait();
    teardowns[i]();
    return rc;
  };
  if (!o.use_eal) {
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&o, &whole, &rcs, i] {
        int cpu = engine_cpu(o, static_cast<uint32_t>(i));
        if (cpu >= 0) {
          if (Status st = runtime::pin_current_thread(static_cast<unsigned>(cpu)); !st)
            std::fprintf(stderr, "tern-perf: engine %zu: %s (running unpinned)\n", i, st.to_string().c_str());
        }
        rcs[i] = whole(i);
      });
    }
    int mrc = monitor();
    for (auto& t : threads) t.join();
    for (int rc : rcs)
      if (rc != 0) return rc;
    return mrc;
  }
  // EAL: engine i on lcore engine_cpu(i) (default i + 1), the main lcore on
  // the lowest CPU left over; it only runs the monitor, which mostly sleeps.
  std::vector<unsigned> lcs;
  for (size_t i = 0; i < n; ++i) {
    int cpu = engine_cpu(o, static_cast<uint32_t>(i));
    lcs.push_back(cpu >= 0 ? static_cast<unsigned>(cpu) : static_cast<unsigned>(i + 1));
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int main_lc = -1;
  for (long c = 0; c < ncpu && main_lc < 0; ++c) {
    bool used = false;
    for (unsigned l : lcs) used = used || l == static_cast<unsigned>(c);
    if (!used) main_lc = static_cast<int>(c);
  }
  if (main_lc < 0) {
    std::fprintf(stderr, "tern-perf: --eal: no CPU left for the EAL main lcore; use fewer --engines than CPUs (%ld)\n",
                 ncpu);
    return 1;
  }
  runtime::EalOptions eo;
  eo.lcores = std::to_string(main_lc);
  for (unsigned l : lcs) {
    eo.lcores += ',';
    eo.lcores += std::to_string(l);
  }
  // EAL would make the lowest lcore the main one; the engines want theirs.
  eo.extra_args = {"--main-lcore", std::to_string(main_lc)};
  eal_telemetry(o, &eo);
  auto rt = runtime::Runtime::start(eo);
  if (!rt) {
    std::fprintf(stderr, "tern-perf: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (Status st = (*rt)->launch(lcs[i], [&whole, i] { return whole(i); }); !st) {
      std::fprintf(stderr, "tern-perf: engine %zu: %s\n", i, st.to_string().c_str());
      // The engines already launched wind down through g_stop; the ones
      // never launched will not arrive at the end.
      rcs[i] = 1;
      g_stop.store(true);
      for (size_t j = i; j < n; ++j) end.arrive_and_drop();
      break;
    }
  }
  int mrc = monitor();
  int wrc = (*rt)->wait_all();
  for (int rc : rcs)
    if (rc != 0) return rc;
  return wrc != 0 ? wrc : mrc;
}

std::vector<uint32_t> sweep_sizes(const Options& o, uint32_t smallest, uint32_t top) {
  if (!o.sweep) return {top};
  std::vector<uint32_t> v;
  for (uint64_t s = smallest; s <= top; s *= 2) v.push_back(static_cast<uint32_t>(s));
  if (v.empty() || v.back() != top) v.push_back(top);
  return v;
}

namespace {
uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}
uint64_t involuntary_switches() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return static_cast<uint64_t>(ru.ru_nivcsw);
}
}  // namespace

void CpuMeter::start() {
  wall0 = monotonic_ns();
  cpu0 = thread_cpu_ns();
  invol0 = involuntary_switches();
}

void CpuMeter::stop() {
  uint64_t wall = monotonic_ns() - wall0, cpu = thread_cpu_ns() - cpu0;
  share = wall > 0 ? std::min(1.0, static_cast<double>(cpu) / static_cast<double>(wall)) : -1;
  preempted = involuntary_switches() - invol0;
  seconds = static_cast<double>(wall) / 1e9;
}

}  // namespace tern::apps
