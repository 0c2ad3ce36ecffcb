// tern-scale: one server engine (default options, its own process, pinned
// to one core) serving N concurrent client connections from client engines
// (one process per 2,000 connections, all on the other core), every
// connection making calls the whole time -- inline echoes, and every K-th
// call a 64 KiB read or write chunk -- with every reply checked. Reports
// the rate, the latency percentiles, failures (must be 0), and what an idle
// connection costs the server in memory (its heap in use and its connection
// areas' resident pages with N idle connections, less the same with none,
// per connection; its anonymous and total resident memory for information).
//
//   tern-scale [--conns N] [--seconds S] [--bulk-every K] [--bulk BYTES]
//              [--dev SPEC] [--server-cpu C] [--client-cpu C] [--json FILE]
//              [--client-procs P]
//
// Past 4,096 connections the server's receive pool (one credit each, at
// least) and its arena are sized for N; every other option is the default.
// scripts/measure-scale.sh runs it for 1, 16, 256, 1,024 and 10,000 connections;
// docs/performance.md has the figures. Exit status: 0 when every call
// completed ok with its data checked, 1 otherwise, 2 for bad arguments.
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/histogram.h"
#include "engine/engine.h"
#include "option_parser.h"

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
  uint32_t client_procs = 0;  // 0: one per 2,000 connections
};

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

// The server's heap as glibc accounts it (bytes in use), asked for through
// a pipe: its resident anonymous memory also counts memory freed and kept
// by the allocator for the next allocations, which no connection holds.
uint64_t heap_in_use() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}
int g_ask_fd = -1, g_answer_fd = -1;  // the parent's ends
uint64_t server_heap() {
  uint64_t v = 0;
  const char m = 'm';
  if (write(g_ask_fd, &m, 1) != 1 || read(g_answer_fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) return 0;
  return v;
}

[[noreturn]] void serve(const std::string& spec, int ready_fd, int ask_fd, int cpu, uint32_t conns) {
  pin(cpu);
  raise_nofile();
  EngineOptions o;  // the defaults: the gateway as it ships
  if (conns > o.max_connections) o.max_connections = conns;
  // Every connection holds at least one credit, so at least one receive
  // buffer: past the default pool (4,096 of 4 KiB) the pool, the send
  // buffers and the arena grow with N (the arena's pages are touched only
  // as buffers are used).
  if (conns + 64 > 4096) {
    o.recv_buffers = conns + conns / 4;
    o.send_buffers = o.recv_buffers + 1024;
    o.bulk_pool_bytes = 64u << 20;
    o.arena_bytes = size_t{o.recv_buffers + o.send_buffers} * 4096 + o.bulk_pool_bytes + (16u << 20);
  }
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
  (void)fcntl(ask_fd, F_SETFL, O_NONBLOCK);
  for (;;) {  // until the client kills us
    for (int i = 0; i < 256; ++i) e->poll();
    char c = 0;
    const ssize_t r = read(ask_fd, &c, 1);
    if (r == 1) {
      const uint64_t h = heap_in_use();
      (void)!write(ready_fd, &h, sizeof h);
    } else if (r == 0) {
      std::_Exit(0);  // the client closed its end: done (a profiler writes its counts on exit)
    }
  }
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

// One client process's figures (sent whole up a pipe to the parent).
struct Run {
  Histogram lat;
  uint64_t ok = 0, failed = 0, corrupt = 0, bulk_calls = 0, calls = 0, lost = 0;
  double secs = 0;
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

// The client side is one or more processes (--client-procs; by default one
// per 2,000 connections): one process holds ~20,000 descriptors at most
// (RLIMIT_NOFILE's usual hard limit) and one engine's poll over 10,000
// connections would measure the client, not the server. Each child runs a
// client engine with its share of the connections and follows the
// parent's steps through a pipe: connect (one child at a time, so that the
// server's max_pending sockets waiting for a hello are never exceeded),
// one call on each connection then idle (the parent reads the server's
// memory), load for --seconds, then its Run back up the pipe.
enum Step : char { kConnect = 'c', kIdleCall = 'i', kLoad = 'l', kQuit = 'q' };

// What a child sends back after each step: 1 = done, 0 = failed (its
// error on stderr).
bool tell(int fd, char v) { return write(fd, &v, 1) == 1; }

bool read_full(int fd, void* p, size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    b += r, n -= static_cast<size_t>(r);
  }
  return true;
}

// Polls `e` until the parent sends a step (or the pipe closes: kQuit).
char next_step(Engine& e, int down) {
  for (;;) {
    for (int i = 0; i < 64; ++i) e.poll();
    char c = 0;
    ssize_t r = read(down, &c, 1);
    if (r == 1) return c;
    if (r == 0) return kQuit;
  }
}

[[noreturn]] void client_child(const Opts& o, const std::string& spec, uint32_t nconns, int up, int down) {
  pin(o.client_cpu);
  raise_nofile();
  (void)fcntl(down, F_SETFL, O_NONBLOCK);
  EngineOptions co;
  co.max_connections = nconns + 1;
  // Room for every connection's bulk buffer and the calls in flight.
  co.arena_bytes = std::max<size_t>(128u << 20, size_t{nconns} * o.bulk + (96u << 20));
  co.recv_buffers = std::max<uint32_t>(4096, nconns * 2);
  co.send_buffers = co.recv_buffers + 1024;
  co.bulk_pool_bytes = 8u << 20;
  // A server taking thousands of connections on a loaded machine answers
  // each handshake late: give it time (the bench measures calls, not connects).
  co.connect_timeout_ms = 120000;
  // One server core behind thousands of connections (on a machine others
  // load too) keeps a call waiting longer than a keepalive's patience
  // (keepalive_ms + keepalive_timeout_ms): probes would declare the slow
  // connections dead and turn queueing into reconnect storms. The bench
  // measures the server answering every call, so the client waits.
  co.keepalive_ms = 0;
  auto eng = Engine::create(co);
  if (!eng) {
    std::fprintf(stderr, "tern-scale: %s\n", eng.status().to_string().c_str());
    std::_Exit(1);
  }
  Engine& e = **eng;
  auto run = std::make_unique<Run>();
  run->ns_per_tick = 1e9 / tick_hz();
  run->bulk_len = o.bulk;
  std::vector<Slot> slots(nconns);
  auto fail = [&](const char* fmt, size_t k, const std::string& why) {
    std::fprintf(stderr, fmt, k, why.c_str());
    (void)tell(up, 0);
    std::_Exit(1);
  };
  if (next_step(e, down) != kConnect) std::_Exit(1);
  for (Slot& s : slots) {
    const size_t k = static_cast<size_t>(&s - slots.data());
    auto c = e.connect(spec);
    if (!c) fail("tern-scale: connect %zu: %s\n", k, c.status().to_string());
    s.conn = *c;
    s.run = run.get();
    s.bulk = static_cast<uint8_t*>(e.alloc(o.bulk));
    if (s.bulk == nullptr) fail("tern-scale: client arena full at connection %zu%s\n", k, "");
    // Connect a batch at a time, each up before the next: a server takes
    // only so many sockets still waiting for their hello (pmd/shm's
    // max_pending), and reads hellos from its poll loop.
    if (k % 32 == 31 || k + 1 == slots.size()) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      for (bool waiting = true; waiting && std::chrono::steady_clock::now() < until;) {
        e.poll();
        waiting = false;
        for (size_t j = k - k % 32; j <= k; ++j)
          waiting |= !slots[j].conn->ready() && !slots[j].conn->failed();
      }
    }
  }
  auto t_end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  size_t up_n = 0;
  while (up_n < slots.size() && std::chrono::steady_clock::now() < t_end) {
    e.poll();
    up_n = 0;
    for (Slot& s : slots) {
      if (s.conn->failed())
        fail("tern-scale: connection %zu failed: %s\n", static_cast<size_t>(&s - slots.data()),
             s.conn->error().to_string());
      up_n += s.conn->ready();
    }
  }
  if (up_n < slots.size()) fail("tern-scale: only %zu connections came up%s\n", up_n, "");
  (void)tell(up, 1);
  if (next_step(e, down) != kIdleCall) std::_Exit(1);
  // One call on each, then idle: what does an idle connection cost the server?
  for (Slot& s : slots) (void)issue(s, Opts{.conns = nconns, .bulk_every = 0, .bulk = o.bulk});
  for (bool any = true; any;) {
    e.poll();
    any = false;
    for (Slot& s : slots) any |= s.busy;
  }
  (void)tell(up, 1);
  if (next_step(e, down) != kLoad) std::_Exit(1);
  run->lat.reset();
  run->ok = run->failed = run->corrupt = run->bulk_calls = 0;
  for (Slot& s : slots) s.n = 0;
  // Load: every connection keeps one call in flight.
  const uint64_t t0 = monotonic_ns();
  const uint64_t t_stop = t0 + static_cast<uint64_t>(o.seconds * 1e9);
  while (monotonic_ns() < t_stop) {
    e.poll();
    for (Slot& s : slots)
      if (!s.busy && issue(s, o)) ++run->calls;
  }
  // Drain: every call completes.
  t_end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (bool any = true; any && std::chrono::steady_clock::now() < t_end;) {
    e.poll();
    any = false;
    for (Slot& s : slots) any |= s.busy;
  }
  run->secs = static_cast<double>(monotonic_ns() - t0) / 1e9;
  for (Slot& s : slots) run->lost += s.busy;
  (void)tell(up, 1);
  if (write(up, run.get(), sizeof *run) != static_cast<ssize_t>(sizeof *run)) std::_Exit(1);
  (void)next_step(e, down);  // kQuit (or the pipe closed)
  for (Slot& s : slots) s.conn->close();
  for (int i = 0; i < 1000; ++i) e.poll();
  std::_Exit(0);
}

struct Child {
  pid_t pid = -1;
  int up = -1, down = -1;
};

// Sends `step` to every child (or only `only`) and waits for each's answer.
bool step_all(std::vector<Child>& kids, char step) {
  for (Child& k : kids)
    if (!tell(k.down, step)) return false;
  for (Child& k : kids) {
    char v = 0;
    if (!read_full(k.up, &v, 1) || v != 1) return false;
  }
  return true;
}

int client(const Opts& o, const std::string& spec, pid_t server) {
  raise_nofile();
  const uint32_t procs = std::min(o.conns, o.client_procs != 0 ? o.client_procs : (o.conns + 1999) / 2000);
  std::vector<Child> kids(procs);
  for (uint32_t i = 0; i < procs; ++i) {
    int u[2], d[2];
    if (pipe(u) != 0 || pipe(d) != 0) return 1;
    const uint32_t n = o.conns / procs + (i < o.conns % procs ? 1 : 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(u[0]);
      close(d[1]);
      for (uint32_t j = 0; j < i; ++j) close(kids[j].up), close(kids[j].down);
      client_child(o, spec, n, u[1], d[0]);
    }
    close(u[1]);
    close(d[0]);
    kids[i] = Child{pid, u[0], d[1]};
  }
  auto reap = [&](int rc) {
    for (Child& k : kids) close(k.down);
    for (Child& k : kids) {
      if (rc != 0) kill(k.pid, SIGKILL);
      waitpid(k.pid, nullptr, 0);
      close(k.up);
    }
    return rc;
  };
  const uint64_t rss0 = rss_kib(server), heap0 = server_heap();
  const uint64_t anon0 = status_kib(server, "RssAnon"), area0 = mapped_kib(server, "tern-shm-conn");
  // Connect: one child at a time.
  for (Child& k : kids) {
    char v = 0;
    if (!tell(k.down, kConnect) || !read_full(k.up, &v, 1) || v != 1) return reap(1);
  }
  if (!step_all(kids, kIdleCall)) return reap(1);
  // Idle for 1.5 s: pmd/shm trims a connection idle for a second (its send
  // queue array, its ring's pages), as a gateway's idle peers would be.
  usleep(1'500'000);
  const uint64_t rss_idle = rss_kib(server), heap_idle = server_heap();
  const uint64_t anon_idle = status_kib(server, "RssAnon"), area_idle = mapped_kib(server, "tern-shm-conn");
  if (const char* dump = std::getenv("TERN_SCALE_SMAPS")) {
    // For looking into where an idle connection's memory is.
    std::string cmd = "cp /proc/" + std::to_string(server) + "/smaps " + dump;
    (void)!std::system(cmd.c_str());
  }
  // What an idle connection costs the server: its heap (glibc's bytes in
  // use) and the pages of its connection's shared area it holds. Its
  // anonymous resident memory grows by more (anon below: also the memory
  // the allocator keeps after frees, e.g. the send queue arrays idle QPs
  // gave back), and its resident set by more again -- every connection maps
  // the client's arena and the kernel faults a few neighbouring pages in
  // (fault-around) -- but those pages are the client's, resident anyway.
  const double heap_kib = static_cast<double>(heap_idle - std::min(heap0, heap_idle)) / 1024.0 / o.conns;
  const double anon_kib = static_cast<double>(anon_idle - std::min(anon0, anon_idle)) / o.conns;
  const double area_kib = static_cast<double>(area_idle - std::min(area0, area_idle)) / o.conns;
  const double per_conn_kib = heap_kib + area_kib;
  const double rss_per_conn = static_cast<double>(rss_idle - std::min(rss0, rss_idle)) / o.conns;
  if (!step_all(kids, kLoad)) return reap(1);
  Run run;
  double secs = 0;
  uint64_t calls = 0, lost = 0;
  for (Child& k : kids) {
    auto r = std::make_unique<Run>();
    if (!read_full(k.up, r.get(), sizeof *r)) return reap(1);
    run.lat.merge(r->lat);
    run.ok += r->ok, run.failed += r->failed, run.corrupt += r->corrupt, run.bulk_calls += r->bulk_calls;
    calls += r->calls, lost += r->lost;
    secs = std::max(secs, r->secs);
    if (run.first_error[0] == 0) std::memcpy(run.first_error, r->first_error, sizeof run.first_error);
  }
  const double rate = static_cast<double>(run.ok) / secs;
  std::printf("%6u conns  %9" PRIu64 " calls  %10.0f calls/s  p50 %7" PRIu64 " ns  p99 %8" PRIu64
              " ns  p99.9 %8" PRIu64 " ns  bulk %7" PRIu64 "  failed %" PRIu64 "  corrupt %" PRIu64
              "  never %" PRIu64 "  server idle %.1f KiB/conn (heap %.1f + area %.1f; anon %.1f, RSS %.1f KiB/conn)"
              "  client procs %u\n",
              o.conns, calls, rate, run.lat.percentile(50), run.lat.percentile(99), run.lat.percentile(99.9),
              run.bulk_calls, run.failed, run.corrupt, lost, per_conn_kib, heap_kib, area_kib, anon_kib, rss_per_conn,
              procs);
  if (run.first_error[0] != 0) std::printf("first error: %s\n", run.first_error);
  if (!o.json.empty()) {
    FILE* f = o.json == "-" ? stdout : std::fopen(o.json.c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f,
                   "{\"conns\":%u,\"client_procs\":%u,\"seconds\":%.3f,\"calls\":%" PRIu64 ",\"ok\":%" PRIu64
                   ",\"rate\":%.0f,"
                   "\"p50_ns\":%" PRIu64 ",\"p99_ns\":%" PRIu64 ",\"p999_ns\":%" PRIu64 ",\"bulk_calls\":%" PRIu64
                   ",\"failed\":%" PRIu64 ",\"corrupt\":%" PRIu64 ",\"never_completed\":%" PRIu64
                   ",\"server_rss_kib_before\":%" PRIu64 ",\"server_rss_kib_idle\":%" PRIu64
                   ",\"server_idle_kib_per_conn\":%.1f,\"heap_kib_per_conn\":%.1f,\"area_kib_per_conn\":%.1f,"
                   "\"anon_kib_per_conn\":%.1f,\"rss_kib_per_conn\":%.1f}\n",
                   o.conns, procs, secs, calls, run.ok, rate, run.lat.percentile(50), run.lat.percentile(99),
                   run.lat.percentile(99.9), run.bulk_calls, run.failed, run.corrupt, lost, rss0, rss_idle,
                   per_conn_kib, heap_kib, area_kib, anon_kib, rss_per_conn);
      if (f != stdout) std::fclose(f);
    }
  }
  return reap(run.failed == 0 && run.corrupt == 0 && lost == 0 && run.ok > 0 ? 0 : 1);
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  apps::OptionParser cli("tern-scale", "[options]");
  cli.integer("conns", "N", "concurrent client connections (default 16)", 1, 65536, &o.conns);
  cli.duration("seconds", "S", "how long they call (default 3)", 1e6, &o.seconds);
  cli.integer("bulk-every", "K", "every K-th call moves --bulk bytes through a chunk (default 8;\n0: none)", 0, 1u << 20,
              &o.bulk_every);
  cli.count("bulk", "BYTES", "the chunk's size (default 64K)", 8, 1u << 20, &o.bulk);
  cli.text("dev", "SPEC", "the server's device (default: shm at /tmp/tern-scale-PID.sock)", &o.dev);
  cli.integer("server-cpu", "C", "the server's CPU (default 1)", 0, 4095, &o.server_cpu);
  cli.integer("client-cpu", "C", "the clients' CPU (default 0)", 0, 4095, &o.client_cpu);
  cli.text("json", "FILE", "also write the results as JSON", &o.json);
  cli.integer("client-procs", "P", "client processes (default 0: one per 2,000 connections)", 0, 65536,
              &o.client_procs);
  cli.epilogue("Exit: 0 every call completed ok with its data checked, 1 otherwise, 2 bad usage.");
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  std::string spec = o.dev.empty() ? "shm:path=/tmp/tern-scale-" + std::to_string(getpid()) + ".sock" : o.dev;
  int p[2], q[2];
  if (pipe(p) != 0 || pipe(q) != 0) return 1;
  pid_t srv = fork();
  if (srv == 0) {
    close(p[0]);
    close(q[1]);
    serve(spec, p[1], q[0], o.server_cpu, o.conns);
  }
  close(p[1]);
  close(q[0]);
  g_answer_fd = p[0], g_ask_fd = q[1];
  char ok = 0;
  if (read(p[0], &ok, 1) != 1) {
    std::fprintf(stderr, "tern-scale: the server did not start\n");
    return 1;
  }
  int rc = client(o, spec, srv);
  // Told to go by its pipe's end first, so that it exits (under callgrind,
  // with its counts written); killed if it has not within 10 s.
  close(g_ask_fd);
  bool gone = false;
  for (int i = 0; i < 1000 && !gone; ++i) {
    gone = waitpid(srv, nullptr, WNOHANG) == srv;
    if (!gone) usleep(10000);
  }
  if (!gone) {
    kill(srv, SIGKILL);
    waitpid(srv, nullptr, 0);
  }
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
  return rc;
}
