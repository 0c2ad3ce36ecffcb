// tern-scale: one server engine (default options, its own process, pinned
// to one core) serving N concurrent client connections from one client
// engine (another process, the other core), every connection making calls
// the whole time -- inline echoes, and every K-th call a 64 KiB read or
// write chunk -- with every reply checked. Reports the rate, the latency
// percentiles, failures (must be 0), and what an idle connection costs the
// server in memory (its resident set with N idle connections, less the
// same server's with none, per connection).
//
//   tern-scale [--conns N] [--seconds S] [--bulk-every K] [--bulk BYTES]
//              [--dev SPEC] [--server-cpu C] [--client-cpu C] [--json FILE]
//
// scripts/measure-scale.sh runs it for 1, 16, 256 and 1,024 connections;
// docs/performance.md has the figures. Exit status: 0 when every call
// completed ok with its data checked, 1 otherwise, 2 for bad arguments.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/histogram.h"
#include "engine/engine.h"

using namespace tern;
using namespace tern::rpc;

namespace {

constexpr uint32_t kProg = 0x2000abcd, kVers = 1;
constexpr uint32_t kEcho = 1;  // results = args
constexpr uint32_t kFill = 2;  // args: u32 n, u32 seed -> n bytes of pattern(seed) into the write chunk
constexpr uint32_t kSum = 3;   // read chunk -> u32 sum, u32 length

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 9)); }

struct Opts {
  uint32_t conns = 16;
  double seconds = 3;
  uint32_t bulk_every = 8;
  uint32_t bulk = 64 << 10;
  std::string dev;
  int server_cpu = 1, client_cpu = 0;
  std::string json;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "tern-scale: %s\nusage: tern-scale [--conns N] [--seconds S] [--bulk-every K] [--bulk BYTES] "
               "[--dev SPEC] [--server-cpu C] [--client-cpu C] [--json FILE]\n", why);
  std::exit(2);
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

// Each connection brings a socket and memfds: lift the soft limit on open
// files to the hard one.
void raise_nofile() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
  }
}

// A process's resident memory from /proc/<pid>/status, in KiB: "VmRSS",
// "RssAnon" (its heap and private mappings) or "RssShmem" (shared memory it
// touched: the arena, and the shm connection areas it maps).
uint64_t status_kib(pid_t pid, const char* field) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') {
      kib = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  std::fclose(f);
  return kib;
}
uint64_t rss_kib(pid_t pid) { return status_kib(pid, "VmRSS"); }

// Resident KiB of a process's mappings whose name contains `name`
// (/proc/<pid>/smaps): pmd/shm's connection areas are "tern-shm-conn".
uint64_t mapped_kib(pid_t pid, const char* name) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/smaps", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char line[512];
  bool in = false;
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long a, b;
    if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2 && std::strchr(line, ' ') != nullptr &&
        std::strncmp(line, "Rss:", 4) != 0 && line[0] != ' ') {
      in = std::strstr(line, name) != nullptr;
      continue;
    }
    uint64_t v = 0;
    if (in && std::sscanf(line, "Rss: %" SCNu64, &v) == 1) kib += v;
  }
  std::fclose(f);
  return kib;
}

// ---------------------------------------------------------------- the server

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }
void fill(void*, ServerCall* c) {
  uint32_t a[2] = {0, 0};
  if (c->args().size() == 8) std::memcpy(a, c->args().data(), 8);
  uint32_t n = std::min(a[0], c->bulk_capacity());
  auto b = c->bulk_buffer(n);
  for (uint32_t i = 0; i < n; ++i) b[i] = pat(a[1], i);
  (void)c->reply({}, b);
}
void sum(void*, ServerCall* c) {
  uint32_t out[2] = {0, static_cast<uint32_t>(c->bulk().size())};
  for (uint8_t v : c->bulk()) out[0] += v;
  (void)c->reply({reinterpret_cast<const uint8_t*>(out), 8});
}

[[noreturn]] void serve(const std::string& spec, int ready_fd, int cpu, uint32_t conns) {
  pin(cpu);
  raise_nofile();
  EngineOptions o;  // the defaults: the gateway as it ships
  if (conns > o.max_connections) o.max_connections = conns;
  auto eng = Engine::create(o);
  if (!eng) {
    std::fprintf(stderr, "tern-scale server: %s\n", eng.status().to_string().c_str());
    std::_Exit(1);
  }
  auto& e = *eng;
  e->handle(kProg, kVers, kEcho, &echo, nullptr);
  e->handle(kProg, kVers, kFill, &fill, nullptr);
  e->handle(kProg, kVers, kSum, &sum, nullptr);
  if (Status s = e->listen(spec); !s) {
    std::fprintf(stderr, "tern-scale server: %s\n", s.to_string().c_str());
    std::_Exit(1);
  }
  // Warm: the engine's pools are carved as first used; let the process
  // settle before its memory is read as "no connections".
  for (int i = 0; i < 1000; ++i) e->poll();
  const char ok = 1;
  (void)!write(ready_fd, &ok, 1);
  close(ready_fd);
  for (;;) e->poll();  // until the client kills us
}

// ---------------------------------------------------------------- the client

struct Slot {
  Connection* conn = nullptr;
  uint32_t n = 0;        // calls made on this connection
  bool busy = false;
  uint32_t kind = 0;     // what the call in flight was
  uint64_t t0 = 0;
  uint32_t seed = 0;
  uint8_t* bulk = nullptr;
  struct Run* run = nullptr;
};

struct Run {
  Histogram lat;
  uint64_t ok = 0, failed = 0, corrupt = 0, bulk_calls = 0;
  double ns_per_tick = 1;
  uint32_t bulk_len = 0;
  char first_error[200] = {};
};

void note_error(Run* r, const char* fmt, uint64_t a, uint64_t b) {
  if (r->first_error[0] == 0) std::snprintf(r->first_error, sizeof r->first_error, fmt, a, b);
}

void on_done(void* ctx, const CallReply& rep) {
  auto* s = static_cast<Slot*>(ctx);
  Run* r = s->run;
  s->busy = false;
  r->lat.record(static_cast<uint64_t>(static_cast<double>(now_ticks() - s->t0) * r->ns_per_tick));
  if (rep.status != CallStatus::kOk) {
    ++r->failed;
    note_error(r, "call failed: status %" PRIu64 " (call %" PRIu64 ")", static_cast<uint64_t>(rep.status), s->n);
    return;
  }
  bool good = true;
  switch (s->kind) {
    case kEcho: {
      uint8_t want[32];
      for (uint32_t i = 0; i < 32; ++i) want[i] = pat(s->seed, i);
      good = rep.results.size() == 32 && std::memcmp(rep.results.data(), want, 32) == 0;
      break;
    }
    case kFill:
      good = rep.bulk_recv_len == r->bulk_len;
      for (uint32_t i = 0; good && i < r->bulk_len; ++i) good = s->bulk[i] == pat(s->seed, i);
      break;
    case kSum: {
      uint32_t want = 0, got[2] = {0, 0};
      for (uint32_t i = 0; i < r->bulk_len; ++i) want += pat(s->seed, i);
      if (rep.results.size() == 8) std::memcpy(got, rep.results.data(), 8);
      good = got[0] == want && got[1] == r->bulk_len;
      break;
    }
  }
  if (good) ++r->ok;
  else {
    ++r->corrupt;
    note_error(r, "reply %" PRIu64 " of kind %" PRIu64 " did not check", s->n, s->kind);
  }
}

bool issue(Slot& s, const Opts& o) {
  Call c{kProg, kVers, kEcho};
  c.done = on_done;
  c.ctx = &s;
  s.seed = s.n * 2654435761u + reinterpret_cast<uintptr_t>(&s);
  uint8_t args[32];
  uint32_t fa[2] = {o.bulk, s.seed};
  const bool bulk = o.bulk_every > 0 && s.n % o.bulk_every == o.bulk_every - 1;
  if (!bulk) {
    for (uint32_t i = 0; i < 32; ++i) args[i] = pat(s.seed, i);
    c.args = args;
    s.kind = kEcho;
  } else if ((s.n / o.bulk_every) % 2 == 0) {
    // A write chunk the server fills.
    std::memset(s.bulk, 0, o.bulk);
    c.proc = kFill;
    c.args = {reinterpret_cast<const uint8_t*>(fa), 8};
    c.bulk_recv = {s.bulk, o.bulk};
    s.kind = kFill;
  } else {
    // A read chunk the server pulls.
    for (uint32_t i = 0; i < o.bulk; ++i) s.bulk[i] = pat(s.seed, i);
    c.proc = kSum;
    c.bulk_send = {s.bulk, o.bulk};
    s.kind = kSum;
  }
  s.t0 = now_ticks();
  int rc = s.conn->call(c);
  if (rc != 0) return false;
  if (bulk) ++s.run->bulk_calls;
  s.busy = true;
  ++s.n;
  return true;
}

int client(const Opts& o, const std::string& spec, pid_t server) {
  pin(o.client_cpu);
  raise_nofile();
  EngineOptions co;
  co.max_connections = o.conns + 1;
  // Room for every connection's bulk buffer and the calls in flight.
  co.arena_bytes = std::max<size_t>(128u << 20, size_t{o.conns} * o.bulk + (96u << 20));
  co.recv_buffers = std::max<uint32_t>(4096, o.conns * 2);
  co.send_buffers = co.recv_buffers + 1024;
  co.bulk_pool_bytes = 8u << 20;
  auto eng = Engine::create(co);
  if (!eng) {
    std::fprintf(stderr, "tern-scale: %s\n", eng.status().to_string().c_str());
    return 1;
  }
  Engine& e = **eng;
  Run run;
  run.ns_per_tick = 1e9 / tick_hz();
  run.bulk_len = o.bulk;
  const uint64_t rss0 = rss_kib(server);
  const uint64_t anon0 = status_kib(server, "RssAnon"), area0 = mapped_kib(server, "tern-shm-conn");
  std::vector<Slot> slots(o.conns);
  for (Slot& s : slots) {
    auto c = e.connect(spec);
    if (!c) {
      std::fprintf(stderr, "tern-scale: connect %zu: %s\n", &s - slots.data(), c.status().to_string().c_str());
      return 1;
    }
    s.conn = *c;
    s.run = &run;
    s.bulk = static_cast<uint8_t*>(e.alloc(o.bulk));
    if (s.bulk == nullptr) {
      std::fprintf(stderr, "tern-scale: client arena full\n");
      return 1;
    }
    // Connect a batch at a time, each up before the next: a server takes
    // only so many sockets still waiting for their hello (pmd/shm's
    // max_pending), and reads hellos from its poll loop.
    const size_t k = static_cast<size_t>(&s - slots.data());
    if (k % 32 == 31 || k + 1 == slots.size()) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      for (bool waiting = true; waiting && std::chrono::steady_clock::now() < until;) {
        e.poll();
        waiting = false;
        for (size_t j = k - k % 32; j <= k; ++j)
          waiting |= !slots[j].conn->ready() && !slots[j].conn->failed();
      }
    }
  }
  auto t_end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t up = 0;
  while (up < slots.size() && std::chrono::steady_clock::now() < t_end) {
    e.poll();
    up = 0;
    for (Slot& s : slots) {
      if (s.conn->failed()) {
        std::fprintf(stderr, "tern-scale: connection %zu failed: %s\n", &s - slots.data(),
                     s.conn->error().to_string().c_str());
        return 1;
      }
      up += s.conn->ready();
    }
  }
  if (up < slots.size()) {
    std::fprintf(stderr, "tern-scale: only %zu of %u connections came up\n", up, o.conns);
    return 1;
  }
  // One call on each, then idle: what does an idle connection cost the server?
  for (Slot& s : slots) (void)issue(s, Opts{.conns = o.conns, .bulk_every = 0, .bulk = o.bulk});
  for (bool any = true; any;) {
    e.poll();
    any = false;
    for (Slot& s : slots) any |= s.busy;
  }
  // Idle for 1.5 s: pmd/shm trims a connection idle for a second (its send
  // queue array, its ring's pages), as a gateway's idle peers would be.
  for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
       std::chrono::steady_clock::now() < until;)
    e.poll();
  const uint64_t rss_idle = rss_kib(server);
  const uint64_t anon_idle = status_kib(server, "RssAnon"), area_idle = mapped_kib(server, "tern-shm-conn");
  if (const char* dump = std::getenv("TERN_SCALE_SMAPS")) {
    // For looking into where an idle connection's memory is.
    std::string cmd = "cp /proc/" + std::to_string(server) + "/smaps " + dump;
    (void)!std::system(cmd.c_str());
  }
  // What an idle connection costs the server: its private memory (heap) and
  // the pages of its connection's shared area it holds. Its resident set
  // grows by more -- every connection maps the client's arena and the
  // kernel faults a few neighbouring pages in (fault-around) -- but those
  // pages are the client's, resident anyway: no memory is spent on them.
  const double heap_kib = static_cast<double>(anon_idle - std::min(anon0, anon_idle)) / o.conns;
  const double area_kib = static_cast<double>(area_idle - std::min(area0, area_idle)) / o.conns;
  const double per_conn_kib = heap_kib + area_kib;
  const double rss_per_conn = static_cast<double>(rss_idle - std::min(rss0, rss_idle)) / o.conns;
  run.lat.reset();
  run.ok = run.failed = run.corrupt = run.bulk_calls = 0;
  for (Slot& s : slots) s.n = 0;
  // Load: every connection keeps one call in flight.
  const uint64_t t0 = monotonic_ns();
  const uint64_t t_stop = t0 + static_cast<uint64_t>(o.seconds * 1e9);
  uint64_t calls = 0;
  while (monotonic_ns() < t_stop) {
    e.poll();
    for (Slot& s : slots)
      if (!s.busy && issue(s, o)) ++calls;
  }
  // Drain: every call completes.
  t_end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (bool any = true; any && std::chrono::steady_clock::now() < t_end;) {
    e.poll();
    any = false;
    for (Slot& s : slots) any |= s.busy;
  }
  const double secs = static_cast<double>(monotonic_ns() - t0) / 1e9;
  uint64_t lost = 0;
  for (Slot& s : slots) lost += s.busy;
  const double rate = static_cast<double>(run.ok) / secs;
  std::printf("%6u conns  %9" PRIu64 " calls  %10.0f calls/s  p50 %7" PRIu64 " ns  p99 %8" PRIu64
              " ns  p99.9 %8" PRIu64 " ns  bulk %7" PRIu64 "  failed %" PRIu64 "  corrupt %" PRIu64
              "  never %" PRIu64 "  server idle %.1f KiB/conn (heap %.1f + area %.1f; RSS %.1f KiB/conn)\n",
              o.conns, calls, rate, run.lat.percentile(50), run.lat.percentile(99), run.lat.percentile(99.9),
              run.bulk_calls, run.failed, run.corrupt, lost, per_conn_kib, heap_kib, area_kib, rss_per_conn);
  if (run.first_error[0] != 0) std::printf("first error: %s\n", run.first_error);
  if (!o.json.empty()) {
    FILE* f = o.json == "-" ? stdout : std::fopen(o.json.c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f,
                   "{\"conns\":%u,\"seconds\":%.3f,\"calls\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"rate\":%.0f,"
                   "\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 ",\"p999_ns\":%" PRIu64 ",\"bulk_calls\":%" PRIu64
                   ",\"failed\":%" PRIu64 ",\"corrupt\":%" PRIu64 ",\"never_completed\":%" PRIu64
                   ",\"server_rss_kib_before\":%" PRIu64 ",\"server_rss_kib_idle\":%" PRIu64
                   ",\"server_idle_kib_per_conn\":%.1f,\"heap_kib_per_conn\":%.1f,\"area_kib_per_conn\":%.1f,"
                   "\"rss_kib_per_conn\":%.1f}\n",
                   o.conns, secs, calls, run.ok, rate, run.lat.percentile(50), run.lat.percentile(99),
                   run.lat.percentile(99.9), run.bulk_calls, run.failed, run.corrupt, lost, rss0, rss_idle,
                   per_conn_kib, heap_kib, area_kib, rss_per_conn);
      if (f != stdout) std::fclose(f);
    }
  }
  for (Slot& s : slots) s.conn->close();
  for (int i = 0; i < 1000; ++i) e.poll();
  return run.failed == 0 && run.corrupt == 0 && lost == 0 && run.ok > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    auto num = [&](const char* v) {
      char* end = nullptr;
      double d = std::strtod(v, &end);
      if (end == v || *end != 0 || d < 0) usage(("bad number for " + a).c_str());
      return d;
    };
    if (a == "--conns") o.conns = static_cast<uint32_t>(num(val()));
    else if (a == "--seconds") o.seconds = num(val());
    else if (a == "--bulk-every") o.bulk_every = static_cast<uint32_t>(num(val()));
    else if (a == "--bulk") o.bulk = static_cast<uint32_t>(num(val()));
    else if (a == "--dev") o.dev = val();
    else if (a == "--server-cpu") o.server_cpu = static_cast<int>(num(val()));
    else if (a == "--client-cpu") o.client_cpu = static_cast<int>(num(val()));
    else if (a == "--json") o.json = val();
    else usage(("unknown option " + a).c_str());
  }
  if (o.conns == 0 || o.conns > 65536) usage("--conns must be in [1, 65536]");
  if (o.bulk < 8 || o.bulk > (1u << 20)) usage("--bulk must be in [8, 1 MiB]");
  std::string spec = o.dev.empty() ? "shm:path=/tmp/tern-scale-" + std::to_string(getpid()) + ".sock" : o.dev;
  int p[2];
  if (pipe(p) != 0) return 1;
  pid_t srv = fork();
  if (srv == 0) {
    close(p[0]);
    serve(spec, p[1], o.server_cpu, o.conns);
  }
  close(p[1]);
  char ok = 0;
  if (read(p[0], &ok, 1) != 1) {
    std::fprintf(stderr, "tern-scale: the server did not start\n");
    return 1;
  }
  int rc = client(o, spec, srv);
  kill(srv, SIGKILL);
  waitpid(srv, nullptr, 0);
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
  return rc;
}
