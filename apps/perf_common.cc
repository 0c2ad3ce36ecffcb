// tern-perf: device specs per engine, CPU choice, and the engine launcher.
#include "perf_common.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

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

int run_engines(const Options& o, std::vector<std::function<int()>> bodies, const std::function<int()>& monitor) {
  const size_t n = bodies.size();
  std::vector<int> rcs(n, 0);
  if (!o.use_eal) {
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      threads.emplace_back([&o, &bodies, &rcs, i] {
        int cpu = engine_cpu(o, static_cast<uint32_t>(i));
        if (cpu >= 0) {
          if (Status st = runtime::pin_current_thread(static_cast<unsigned>(cpu)); !st)
            std::fprintf(stderr, "tern-perf: engine %zu: %s (running unpinned)\n", i, st.to_string().c_str());
        }
        rcs[i] = bodies[i]();
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
  auto rt = runtime::Runtime::start(eo);
  if (!rt) {
    std::fprintf(stderr, "tern-perf: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (Status st = (*rt)->launch(lcs[i], bodies[i]); !st) {
      std::fprintf(stderr, "tern-perf: engine %zu: %s\n", i, st.to_string().c_str());
      // The engines already launched wind down through g_stop.
      rcs[i] = 1;
      g_stop.store(true);
      break;
    }
  }
  int mrc = monitor();
  int wrc = (*rt)->wait_all();
  for (int rc : rcs)
    if (rc != 0) return rc;
  return wrc != 0 ? wrc : mrc;
}

FILE* open_json(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) std::fprintf(stderr, "tern-perf: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
  return f;
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace tern::apps
