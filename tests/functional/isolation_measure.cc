// tern-isolation-measure: a well-behaved client's 64 KiB GET and PUT and
// its echo latency, solo and then with an attacker, in one run
// (docs/performance.md, "Many peers: fairness and isolation"); the bulk
// pool attack is tern-bulk-isolation-measure's.
//
// One server engine (default options unless told) and the good client's
// engine are polled by this thread, as in tern-bulk-isolation-measure. The
// attackers are child processes (other peers to the server), forked before
// the server exists so that they hold none of its descriptors:
//   - the connection table: one process opens connections until the server
//     refuses (max_connections, less the good client's) and leaves them
//     idle; then a newcomer, another process, must still connect and be
//     answered (the server reaps an idle connection of the peer holding
//     more than its share once they are idle_reap_ms old);
//   - the duplicate request cache: another process makes non-idempotent
//     calls through the server's cache (4,096 entries) with distinct ids,
//     16 in flight, all through the phase, which lasts until it made twice
//     as many calls as the cache holds. Before it starts, the good peer's own non-idempotent call ran
//     and its reply was lost with its connection; that peer (another engine
//     of the good process, not polled meanwhile) reconnects afterwards and
//     sends it again: it must be answered from the cache, having run once.
// Before them, the same client beside a process that is no peer at all --
// one spinning in registers, one walking 32 MiB at random -- so that what
// the machine alone does to its figures (a neighbour on the other core) is
// measured in the same run as what the attackers do (--hogs 0: not).
// Each phase runs --seconds of calls one at a time: GET, PUT, echo in turn;
// each echo's time is also split between the server's passes and the good
// client's polls.
//
//   tern-isolation-measure [--seconds 3] [--idle-reap-ms 1000] [--max-connections 1024]
//                          [--per-peer N] [--hogs 0|1] [--table 0|1] [--json FILE]
//                          [--alternate N [--phase-seconds 0.2]] [--echo-only 0|1]
// --per-peer sets EngineOptions::max_connections_per_peer (0, the default:
// no limit, so the hoarder fills the table).
// --alternate N: the cache flood measured as N pairs of short solo and
// flood phases instead of one long phase each (the flooder, connected once,
// paused between its phases), because one pair's echo p99 ratio moves more
// from run to run on this machine than the 2x it is judged by; prints each
// pair's ratio, their median and spread, and the server's passes (calls
// and ns per pass, ns per flood call in a pass) in each kind of phase.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "chunk_handlers.h"
#include "engine/duplicate_cache.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "raw_peer.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::rpc;
using namespace tern::test;

namespace {

constexpr uint32_t kProg = 0x20000068, kVers = 1;
constexpr uint32_t kPut = 1, kGet = 2, kEcho = 3;
constexpr uint32_t kAdd = 4;  // args: u64 id; results: u32 how many times that (peer, id) ran
constexpr uint32_t kSize = 64u << 10;
constexpr uint64_t kFloodIds = 1000000;  // the flooder's call ids start here

double secs_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void wait_go(int fd) {
  char c;
  if (read(fd, &c, 1) != 1) _exit(0);  // the parent is gone, or done with us
}

// Waits for the server's socket (it listens after the fork).
bool wait_socket(const std::string& spec) {
  const std::string file = spec.substr(9);
  for (int i = 0; i < 1000; ++i) {
    if (access(file.c_str(), F_OK) == 0) return true;
    usleep(10000);
  }
  return false;
}

// The connection-table attacker: connections until refused, in batches (a
// server reads only so many hellos at once), then idle -- it polls (its
// connections stay up) but calls nothing.
[[noreturn]] void hoard(const std::string& spec, uint32_t want, int go_fd, int ready_fd) {
  wait_go(go_fd);
  if (!wait_socket(spec)) _exit(3);
  EngineOptions co;
  co.max_connections = want + 8;
  co.reconnect = false;
  auto e = Engine::create(co).value();
  std::vector<Connection*> cs;
  uint32_t up = 0, refused = 0;
  while (up + refused < want && refused == 0) {
    size_t first = cs.size();
    for (uint32_t k = 0; k < 32 && cs.size() < want; ++k) {
      auto c = e->connect(spec);
      if (!c) break;
      cs.push_back(*c);
    }
    if (cs.size() == first) break;
    (void)poll_until([&] { e->poll(); },
                     [&] {
                       for (size_t i = first; i < cs.size(); ++i)
                         if (!cs[i]->ready() && !cs[i]->failed()) return false;
                       return true;
                     },
                     20000);
    for (size_t i = first; i < cs.size(); ++i) cs[i]->ready() ? ++up : ++refused;
  }
  uint32_t msg[2] = {up, refused};
  if (write(ready_fd, msg, sizeof msg) != sizeof msg) _exit(6);
  fcntl(go_fd, F_SETFL, O_NONBLOCK);
  for (;;) {
    e->poll();
    (void)e->wait(5);
    char c;
    if (read(go_fd, &c, 1) == 0) _exit(0);  // nonblocking; EOF: done
  }
}

// The newcomer: connects, makes one echo call; reports its status and the
// time it took (ms).
[[noreturn]] void newcomer(const std::string& spec, int go_fd, int ready_fd) {
  wait_go(go_fd);
  const auto t0 = std::chrono::steady_clock::now();
  EngineOptions co;
  co.reconnect_give_up_ms = 60000;
  auto e = Engine::create(co).value();
  Connection* c = e->connect(spec).value();
  Done d;
  uint8_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  Call k{kProg, kVers, kEcho};
  k.args = a;
  k.done = on_done, k.ctx = &d;
  struct {
    int32_t status = -1, ms = 0;
    char why[200] = {};
  } msg;
  // Connected (or refused) first: a call before then is ENOTCONN.
  const bool up = poll_until([&] { e->poll(); }, [&] { return c->ready() || c->failed(); }, 60000) && c->ready();
  if (up && c->call(k) == 0 && poll_until([&] { e->poll(); }, [&] { return d.done; }, 60000))
    msg.status = d.r.status == CallStatus::kOk && d.results.size() == 8 ? 0 : static_cast<int32_t>(d.r.status) + 1;
  msg.ms = static_cast<int32_t>(secs_since(t0) * 1000);
  if (msg.status != 0)
    std::snprintf(msg.why, sizeof msg.why, "(status %d, %zu bytes of results; %s) ", static_cast<int>(d.r.status),
                  d.results.size(), c->error().to_string().c_str());
  (void)!write(ready_fd, &msg, sizeof msg);
  _exit(0);
}

// The cache flooder: kAdd calls with distinct ids, 16 in flight, until told
// to stop; reports how many were answered ok and how many failed. 'P' on its
// pipe pauses it ('p' back once its calls are answered), 'G' resumes it ('g').
[[noreturn]] void flood(const std::string& spec, int go_fd, int ready_fd) {
  wait_go(go_fd);
  auto e = Engine::create({}).value();
  Connection* c = e->connect(spec).value();
  if (!poll_until([&] { e->poll(); }, [&] { return c->ready() || c->failed(); }, 10000) || !c->ready()) _exit(3);
  if (write(ready_fd, "U", 1) != 1) _exit(6);
  fcntl(go_fd, F_SETFL, O_NONBLOCK);
  struct Ctx {
    uint64_t done = 0, bad = 0;
  } ctx;
  std::vector<uint64_t> ids(16);
  uint64_t sent = 0;
  bool paused = false;
  auto cb = [](void* p, const CallReply& r) {
    auto* x = static_cast<Ctx*>(p);
    ++x->done;
    if (r.status != CallStatus::kOk) ++x->bad;
  };
  for (;;) {
    while (sent - ctx.done < 16 && !paused) {
      uint64_t& id = ids[sent % 16];
      id = kFloodIds + sent;
      Call k{kProg, kVers, kAdd};
      k.args = std::span(reinterpret_cast<const uint8_t*>(&id), 8);
      k.done = cb, k.ctx = &ctx;
      if (c->call(k) != 0) break;
      ++sent;
    }
    e->poll();
    if (paused && ctx.done == sent) {
      // Paused and drained (--alternate's solo phase): say so, then sleep
      // until told to go on, so that the solo phase has neither this
      // process's calls nor its CPU, and no connect cost lands in a phase.
      if (write(ready_fd, "p", 1) != 1) _exit(6);
      fcntl(go_fd, F_SETFL, 0);
      char ch;
      const ssize_t r = read(go_fd, &ch, 1);
      fcntl(go_fd, F_SETFL, O_NONBLOCK);
      if (r != 1 || ch != 'G') break;
      paused = false;
      if (write(ready_fd, "g", 1) != 1) _exit(6);
      continue;
    }
    char ch;
    const ssize_t r = read(go_fd, &ch, 1);
    if (r == 1 && ch == 'P') {
      paused = true;  // no new calls; the ones in flight finish first
      continue;
    }
    if (r >= 0 || (errno != EAGAIN && errno != EINTR)) break;  // told to stop, or the parent is gone
  }
  (void)poll_until([&] { e->poll(); }, [&] { return ctx.done == sent; }, 10000);
  uint64_t msg[2] = {ctx.done, ctx.bad + (sent - ctx.done)};
  (void)!write(ready_fd, msg, sizeof msg);
  _exit(0);
}

// The flooder runs as this program again (exec'd by the forked child): under
// valgrind (callgrind of the server's passes, docs/performance.md) a child
// that only forked is as slow as the server, keeps no queue, and the
// echo's counted pass would not meet the flood it meets natively; an exec'd
// child runs natively (valgrind follows no exec unless told).
const char* g_self = nullptr;
[[noreturn]] void flood_exec(const std::string& spec, int go_fd, int ready_fd) {
  const std::string go = std::to_string(go_fd), ready = std::to_string(ready_fd);
  execl(g_self, g_self, "--flood-child", spec.c_str(), go.c_str(), ready.c_str(), static_cast<char*>(nullptr));
  _exit(127);
}

// A plain process next to the server, no Tern at all: what the shared
// machine alone does to the good client's figures, to set against what the
// flooder does. kind 0 spins in registers (a busy neighbour vCPU); kind 1
// walks 32 MiB at random, four chases at once with a write per step (a
// neighbour that also takes the shared cache and the memory bus).
// Reports how many steps it made (that it ran).
template <int kind>
[[noreturn]] void hog(const std::string&, int go_fd, int ready_fd) {
  wait_go(go_fd);
  fcntl(go_fd, F_SETFL, O_NONBLOCK);
  const size_t n = kind == 1 ? (32u << 20) / 8 : 8;
  std::vector<uint64_t> next(n);
  for (size_t i = 0; i < n; ++i) next[i] = i;
  uint64_t x = 88172645463325252ull;
  auto rnd = [&] {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return x;
  };
  // One cycle through every entry (Sattolo), so the chases never settle.
  for (size_t i = n - 1; i > 0; --i) std::swap(next[i], next[rnd() % i]);
  if (write(ready_fd, "U", 1) != 1) _exit(6);
  uint64_t steps = 0, a = 0, b = n / 4, c = n / 2, d = 3 * n / 4;
  for (;;) {
    for (int k = 0; k < 4096; ++k) {
      if constexpr (kind == 1) {
        a = next[a], b = next[b], c = next[c], d = next[d];
        volatile uint64_t& w = next[(a + b) % n];  // a store into a line the chases hold
        w = w;
      } else {
        a = a * 6364136223846793005ull + 1442695040888963407ull;
      }
    }
    steps += 4096;
    char ch;
    const ssize_t r = read(go_fd, &ch, 1);
    if (r >= 0 || (errno != EAGAIN && errno != EINTR)) break;
  }
  steps += (a + b + c + d) & 1;  // keeps the work
  (void)!write(ready_fd, &steps, sizeof steps);
  _exit(0);
}

struct Child {
  pid_t pid = -1;
  int go = -1, ready = -1;
};
std::vector<int> parent_fds;  // the parent's ends of every child's pipes
Child spawn(void (*fn)(const std::string&, int, int), const std::string& spec) {
  int g[2], r[2];
  if (pipe(g) != 0 || pipe(r) != 0) std::exit(1);
  Child ch;
  ch.pid = fork();
  if (ch.pid == 0) {
    // Not the earlier children's ends: closing its `go` end must be an EOF
    // to that child.
    for (int fd : parent_fds) close(fd);
    close(g[1]);
    close(r[0]);
    fn(spec, g[0], r[1]);
  }
  parent_fds.push_back(g[1]);
  parent_fds.push_back(r[0]);
  close(g[0]);
  close(r[1]);
  fcntl(r[0], F_SETFL, O_NONBLOCK);
  ch.go = g[1], ch.ready = r[0];
  return ch;
}

struct Server {
  DuplicateCache drc{4096};
  std::map<std::pair<std::string, uint64_t>, uint32_t> runs;
  uint64_t flood_runs = 0;
  static inline bool full_map = false;
  Connection* drop_after = nullptr;  // the good peer's victim connection, lost before its reply
  static void add(void* ctx, ServerCall* c) {
    auto* s = static_cast<Server*>(ctx);
    std::vector<uint8_t> cached;
    switch (s->drc.begin(c, &cached)) {
      case DuplicateCache::Found::kDone:
        (void)c->reply(cached);
        return;
      case DuplicateCache::Found::kInProgress:
        return;
      case DuplicateCache::Found::kNew:
        break;
    }
    uint64_t id = 0;
    std::memcpy(&id, c->args().data(), std::min<size_t>(8, c->args().size()));
    // Only the good peer's own ids (below the flooder's) are kept: that is
    // what the retransmission check reads. A map entry for each of the
    // flooder's distinct ids -- ~250 K a second, a string key each -- made
    // a flood call ~3 us (the map's depth in cache misses, page faults for
    // its growth) and evicted the good client's lines from this thread's
    // cache: the harness's cost, not the engine's (--full-map: keep them).
    const uint32_t n = id < kFloodIds || full_map ? ++s->runs[{std::string(c->peer_id()), id}] : (++s->flood_runs, 1u);
    std::span<const uint8_t> res(reinterpret_cast<const uint8_t*>(&n), 4);
    s->drc.done(*c, res);
    if (s->drop_after != nullptr) {
      (void)testing::inject_fault(s->drop_after, rdma::Fault{rdma::Fault::Kind::kDropConnection});
      s->drop_after = nullptr;
    }
    (void)c->reply(res);
  }
};

// Server pass lengths by the flood calls served in them (0..16, more
// counted as 16), in 20-ns buckets up to 200 us, of the passes that served
// no call of the good client: made and touched once, so
// that recording a pass -- which happens inside an echo's timed loop --
// allocates nothing and takes no page fault.
struct PassHist {
  static constexpr uint32_t kFlood = 17, kBuckets = 10000, kNs = 20;
  std::vector<uint64_t> n = std::vector<uint64_t>(kFlood * kBuckets);
  void add(uint64_t flood, uint64_t ns) {
    n[std::min<uint64_t>(flood, kFlood - 1) * kBuckets + std::min<uint64_t>(ns / kNs, kBuckets - 1)]++;
  }
  uint64_t count(uint32_t f) const {
    uint64_t t = 0;
    for (uint32_t b = 0; b < kBuckets; ++b) t += n[f * kBuckets + b];
    return t;
  }
  // The p-quantile of the passes with f flood calls (all passes: f = kFlood), ns.
  uint64_t pct(uint32_t f, double p) const {
    std::vector<uint64_t> h(kBuckets);
    for (uint32_t k = 0; k < kFlood; ++k)
      if (f == kFlood || f == k)
        for (uint32_t b = 0; b < kBuckets; ++b) h[b] += n[k * kBuckets + b];
    uint64_t tot = 0;
    for (uint64_t x : h) tot += x;
    if (tot == 0) return 0;
    const auto want = static_cast<uint64_t>(p * static_cast<double>(tot - 1));
    uint64_t seen = 0;
    for (uint32_t b = 0; b < kBuckets; ++b)
      if ((seen += h[b]) > want) return b * kNs + kNs / 2;
    return kBuckets * kNs;
  }
};

struct Lat {
  std::vector<uint64_t> get, put, echo;
  uint64_t failed = 0;
  // Where each echo waited, by order (not time): the server's poll passes
  // from its call to its reply, and the flood calls the server ran in that
  // time before its handler and after it (those after it in its own pass
  // are paid for too: this thread polls the good client only after the
  // server's whole pass).
  std::vector<uint64_t> echo_passes, flood_before, flood_after;
  // Where each echo's time went: in the server's passes while it was out,
  // and in the good client's polls (ns).
  std::vector<uint64_t> echo_server_ns, echo_client_ns;
  std::vector<uint64_t> echo_call_ns;  // --alternate: in the good client's call() itself
  // --alternate: every server pass of the phase (its ns, the calls it
  // served, how many of them were the flooder's), each echo's longest
  // single step (one server pass or one client poll: a stall -- the
  // thread preempted, an interrupt, a page fault -- shows as one long
  // step, the flood as many slower ones), and what the kernel did to this
  // thread in the phase.
  uint64_t passes = 0, pass_calls = 0, pass_flood = 0, passes_with_call = 0, max_flood = 0;
  uint64_t long_passes = 0;             // passes of 3 us or more
  std::vector<uint64_t> long_pass_ns;   // their ns (reserved: no allocation in a pass)
  std::vector<uint64_t> echo_max_step;
  long nivcsw = 0, nvcsw = 0, minflt = 0;
  uint64_t flood_calls = 0;
  double secs = 0;
  double line_ns = 0;  // the cache-line round trip taken before the phase (cacheline_ns)
};

// What the server did while one echo was out (the order trace).
struct EchoTrace {
  bool out = false, ran = false;
  uint64_t passes = 0, before = 0, after = 0;
  const DuplicateCache* drc = nullptr;
  uint64_t misses0 = 0, at_run = 0;
  void begin(const DuplicateCache* d) {
    *this = EchoTrace{};
    out = true, drc = d, misses0 = at_run = d->misses();
  }
  void handled() {
    if (!out || ran) return;
    ran = true;
    at_run = drc->misses();
    before = at_run - misses0;
  }
};
EchoTrace g_trace;

void traced_echo(void* ctx, ServerCall* c) {
  g_trace.handled();
  echo_handler(ctx, c);
}

// The server's pass while an echo is out, as a function of its own so that
// callgrind counts its instructions apart (solo and under the flood).
// Each counts its own passes: two identical bodies would be folded into one
// symbol by the linker (identical code folding), and callgrind would add
// them up.
uint64_t g_solo_passes = 0, g_flood_passes = 0;
[[gnu::noinline]] void server_pass_echo_solo(Engine* e) {
  ++g_solo_passes;
  e->poll();
}
[[gnu::noinline]] void server_pass_echo_flood(Engine* e) {
  ++g_flood_passes;
  e->poll();
}

// --pass-counters: the server engine's counters around each of the echo's
// passes under the flood, to tell a slow pass that did more work (a send
// completion batch, a timer visit, a flood call) from one that did the same
// work more slowly (the flooder's traffic on the machine's caches).
struct PassCounters {
  std::vector<std::string> names;
  std::vector<uint64_t> at;
  std::vector<std::pair<uint64_t, std::vector<uint64_t>>> passes;  // (ns, counter deltas)
  void before(const Engine& e) {
    at.clear();
    for (const StatEntry& s : e.stats_view()) at.push_back(s.counter->get());
    if (names.empty())
      for (const StatEntry& s : e.stats_view()) names.push_back(s.name);
  }
  void after(const Engine& e, uint64_t ns) {
    std::vector<uint64_t> d;
    size_t i = 0;
    for (const StatEntry& s : e.stats_view()) d.push_back(s.counter->get() - at[i++]);
    passes.emplace_back(ns, std::move(d));
  }
  void print() const {
    if (passes.empty()) return;
    std::vector<uint64_t> ns;
    for (const auto& p : passes) ns.push_back(p.first);
    std::sort(ns.begin(), ns.end());
    const uint64_t cut = ns[ns.size() * 98 / 100];
    std::vector<double> slow(names.size()), rest(names.size());
    size_t nslow = 0, nrest = 0;
    for (const auto& p : passes) {
      const bool sl = p.first >= cut;
      ++(sl ? nslow : nrest);
      for (size_t i = 0; i < names.size(); ++i) (sl ? slow : rest)[i] += static_cast<double>(p.second[i]);
    }
    std::printf("pass counters: %zu echo passes; the slowest 2%% (>= %.2f us, %zu) against the rest "
                "(%zu), per pass:\n",
                passes.size(), static_cast<double>(cut) / 1000.0, nslow, nrest);
    for (size_t i = 0; i < names.size(); ++i) {
      const double a = slow[i] / static_cast<double>(std::max<size_t>(nslow, 1));
      const double b = rest[i] / static_cast<double>(std::max<size_t>(nrest, 1));
      // Gauges (bulk_pool_in_use) go down as well as up: only counters.
      if ((a > 0.005 || b > 0.005) && a < 1e9 && b < 1e9)
        std::printf("  %-28s slowest %8.3f  rest %8.3f\n", names[i].c_str(), a, b);
    }
    // The passes by the receives they posted (a batch of buffers given back
    // goes out in one post): how long each kind took.
    const auto it = std::find(names.begin(), names.end(), std::string("recvs_posted"));
    if (it == names.end()) return;
    const size_t ri = static_cast<size_t>(it - names.begin());
    std::map<uint64_t, std::vector<uint64_t>> by;
    for (const auto& p : passes) by[std::min<uint64_t>(p.second[ri], 16)].push_back(p.first);
    std::printf("  passes by receives posted in them (posted: passes, ns p50 / p99):");
    for (auto& [k, v] : by) {
      std::sort(v.begin(), v.end());
      std::printf(" %llu: %zu, %llu / %llu", static_cast<unsigned long long>(k), v.size(),
                  static_cast<unsigned long long>(v[v.size() / 2]),
                  static_cast<unsigned long long>(v[std::min(v.size() - 1, v.size() * 99 / 100)]));
    }
    std::printf("\n");
  }
};

uint64_t pct(std::vector<uint64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Echoes at or above their phase's p99, and how many of them had one step
// (a server pass or a client poll) of at least 5 us: a stall of the thread,
// not the flood's slower passes.
struct SlowEchoes {
  size_t n = 0, stalled = 0;
  std::vector<uint64_t> max_step;
  void add(const Lat& l) {
    const uint64_t p99 = pct(l.echo, 0.99);
    for (size_t i = 0; i < l.echo.size() && i < l.echo_max_step.size(); ++i) {
      if (l.echo[i] < p99) continue;
      ++n;
      stalled += l.echo_max_step[i] >= 5000;
      max_step.push_back(l.echo_max_step[i]);
    }
  }
};

// The server's passes of a set of phases: how many, the calls they served,
// their length, and their length by the number of flood calls in them (so
// what a flood call costs a pass).
void print_passes(const char* name, const std::vector<Lat>& ph, const PassHist& h, const PassHist& solo) {
  uint64_t passes = 0, calls = 0, flood = 0, with_calls = 0, max_flood = 0;
  for (const Lat& l : ph) {
    passes += l.passes, calls += l.pass_calls, flood += l.pass_flood, with_calls += l.passes_with_call;
    max_flood = std::max(max_flood, l.max_flood);
  }
  const double n = static_cast<double>(std::max<uint64_t>(passes, 1));
  std::printf("%-6s server passes %llu: calls per pass %.3f (flood %.3f, max %llu), passes with a call %.1f%%; those "
              "with no call of the good client: ns per pass p50 %llu p99 %llu p99.9 %llu\n",
              name, static_cast<unsigned long long>(passes), static_cast<double>(calls) / n,
              static_cast<double>(flood) / n, static_cast<unsigned long long>(max_flood),
              100.0 * static_cast<double>(with_calls) / n, static_cast<unsigned long long>(h.pct(PassHist::kFlood, 0.5)),
              static_cast<unsigned long long>(h.pct(PassHist::kFlood, 0.99)),
              static_cast<unsigned long long>(h.pct(PassHist::kFlood, 0.999)));
  // Long passes of every kind, and how many a second: the engine's
  // once-a-millisecond control tick (pmd/shm's connection events, read with
  // system calls) lands in a pass of its own choosing, ~1,000 a second.
  {
    uint64_t nlong = 0;
    double secs = 0;
    for (const Lat& l : ph) nlong += l.long_passes, secs += l.secs;
    std::vector<uint64_t> all;
    for (const Lat& l : ph) all.insert(all.end(), l.long_pass_ns.begin(), l.long_pass_ns.end());
    std::printf("%-6s passes of 3 us or more: %llu, %.0f a second, p50 %llu ns (every pass: the good client's calls' "
                "too)\n",
                name, static_cast<unsigned long long>(nlong), static_cast<double>(nlong) / std::max(secs, 1e-9),
                static_cast<unsigned long long>(pct(all, 0.5)));
  }
  if (flood == 0) return;
  std::printf("%-6s passes that served no call of the good client, by flood calls in them (flood calls: passes, ns "
              "p50):",
              name);
  for (uint32_t k = 0; k < PassHist::kFlood; ++k) {
    const uint64_t c = h.count(k);
    if (c != 0)
      std::printf(" %u: %llu, %llu", k, static_cast<unsigned long long>(c), static_cast<unsigned long long>(h.pct(k, 0.5)));
  }
  std::printf("\n");
  // A flood call's share of a pass: a full batch (16: all of the flooder's
  // calls) against the solo phases' passes that served no call -- with
  // GET/PUT those are the passes that move their 64 KiB, and so are most
  // passes that find a full batch (the flooder's calls pile up while one
  // does) -- and a pass that served one flood call and nothing else.
  const uint64_t full = h.count(PassHist::kFlood - 1), none = solo.count(0);
  if (full >= 20 && none >= 20)
    std::printf("%-6s ns per flood call in a pass of 16: %.0f (p50 %llu against the solo phases' no-call passes' %llu)\n",
                name,
                (static_cast<double>(h.pct(PassHist::kFlood - 1, 0.5)) - static_cast<double>(solo.pct(0, 0.5))) / 16.0,
                static_cast<unsigned long long>(h.pct(PassHist::kFlood - 1, 0.5)),
                static_cast<unsigned long long>(solo.pct(0, 0.5)));
  if (h.count(1) >= 20)
    std::printf("%-6s a pass that served one flood call and nothing else: p50 %llu ns\n", name,
                static_cast<unsigned long long>(h.pct(1, 0.5)));
}

// The machine's cross-core cache-line round trip right now (ns, the median
// of 20 batches of 100): this VM flips between a fast mode (~100-160 ns)
// and a slow one (~500 ns) within a run (docs/performance.md, "Tern next to
// UCX, mode by mode"), and every latency here moves with it, so each phase
// is tagged with it. A helper thread pinned to a CPU other than this
// thread's bounces a line with this thread; taken with the flooder paused
// (else it measures whom the scheduler runs there).
double cacheline_ns() {
  struct alignas(128) Line {
    std::atomic<uint64_t> v{0};
  };
  Line ping, pong;
  std::atomic<bool> stop{false};
  constexpr uint64_t kBatch = 100, kSamples = 20, kWarm = 200;
  const int here = sched_getcpu();
  std::thread peer([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    const int n = static_cast<int>(std::thread::hardware_concurrency());
    for (int c = 0; c < std::max(n, 2); ++c)
      if (c != here) CPU_SET(c, &set);
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    for (uint64_t seq = 1; seq <= kWarm + kBatch * kSamples; ++seq) {
      while (ping.v.load(std::memory_order_acquire) != seq)
        if (stop.load(std::memory_order_relaxed)) return;
      pong.v.store(seq, std::memory_order_release);
    }
  });
  // On a loaded machine the helper may not run for a scheduler tick at a
  // time: give up after 20 ms (the figure is then the scheduler's: -1).
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  uint64_t seq = 0;
  auto bounce = [&] {
    ping.v.store(++seq, std::memory_order_release);
    while (pong.v.load(std::memory_order_acquire) != seq)
      if (std::chrono::steady_clock::now() > end) return false;
    return true;
  };
  bool ok = true;
  for (uint64_t i = 0; i < kWarm && ok; ++i) ok = bounce();
  std::vector<double> ns;
  for (uint64_t k = 0; k < kSamples && ok; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < kBatch && ok; ++i) ok = bounce();
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kBatch);
  }
  stop.store(true, std::memory_order_relaxed);
  peer.join();
  return ok ? median(ns) : -1;
}

// --alternate: `pairs` pairs of a solo phase (the flooder paused: its calls
// drained, the process asleep) and a flood phase, solo first in even pairs
// and flood first in odd ones, each `secs` long; per pair the echo p99
// flood / solo, and over all pairs its median and spread.
template <typename Pump, typename Phase>
bool alternate_phases(uint32_t pairs, double secs, const Child& flooder, const Pump& pump, const Phase& phase,
                      bool& record, const PassHist& hist_solo, const PassHist& hist_flood, std::string& js) {
  bool flooding = true;
  auto set_flood = [&](bool on) {
    if (on == flooding) return true;
    if (write(flooder.go, on ? "G" : "P", 1) != 1) return false;
    char a = 0;
    if (!poll_until(pump, [&] { return read(flooder.ready, &a, 1) == 1; }, 30000)) return false;
    flooding = on;
    return a == (on ? 'g' : 'p');
  };
  record = true;
  std::vector<Lat> solo, fl;
  for (uint32_t i = 0; i < pairs; ++i)
    for (int j = 0; j < 2; ++j) {
      const bool f = (j == 0) == (i % 2 == 1);
      if (!set_flood(false)) return false;
      const double line = cacheline_ns();
      if (!set_flood(f)) {
        std::fprintf(stderr, "the flooder did not %s\n", f ? "resume" : "pause");
        return false;
      }
      (f ? fl : solo).push_back(phase(secs, nullptr, f));
      (f ? fl : solo).back().line_ns = line;
    }
  record = false;
  if (!set_flood(true)) return false;
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  std::vector<double> r50, r99, r999;
  uint64_t flood_calls = 0;
  double flood_secs = 0;
  std::vector<uint64_t> all_solo, all_fl;
  for (uint32_t i = 0; i < pairs; ++i)
    for (const Lat* l : {&solo[i], &fl[i]}) {
      const bool f = l == &fl[i];
      SlowEchoes se;
      se.add(*l);
      std::printf("pair %3u %-5s line %4.0f ns | echo n %5zu p50 %5.2f p99 %6.2f p99.9 %6.2f us | passes %7zu | ctx switches "
                  "invol %ld vol %ld, minor faults %ld | echoes >= p99 with a step >= 5 us: %zu of %zu",
                  i, f ? "flood" : "solo", l->line_ns, l->echo.size(), us(pct(l->echo, 0.5)), us(pct(l->echo, 0.99)),
                  us(pct(l->echo, 0.999)), static_cast<size_t>(l->passes), l->nivcsw, l->nvcsw, l->minflt, se.stalled, se.n);
      if (f) {
        const auto ratio = [&](double p) {
          return static_cast<double>(pct(fl[i].echo, p)) / static_cast<double>(std::max<uint64_t>(pct(solo[i].echo, p), 1));
        };
        r50.push_back(ratio(0.5)), r99.push_back(ratio(0.99)), r999.push_back(ratio(0.999));
        flood_calls += l->flood_calls, flood_secs += l->secs;
        std::printf(" | flood %.0f K calls/s | p99 flood/solo %.2fx", static_cast<double>(l->flood_calls) / l->secs / 1e3,
                    r99.back());
      }
      std::printf("\n");
      (f ? all_fl : all_solo).insert((f ? all_fl : all_solo).end(), l->echo.begin(), l->echo.end());
    }
  auto spread = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    char b[160];
    std::snprintf(b, sizeof b, "median %.2fx (min %.2fx, quartiles %.2fx-%.2fx, max %.2fx)", median(v), v[0],
                  v[n / 4], v[(3 * n) / 4 - (n >= 4 ? 1 : 0)], v[n - 1]);
    return std::string(b);
  };
  std::printf("echo flood/solo over %u pairs of %.2f s: p99 %s\n", pairs, secs, spread(r99).c_str());
  std::printf("                          p50 %s\n", spread(r50).c_str());
  std::printf("                          p99.9 %s\n", spread(r999).c_str());
  // The same by the machine's mode: pairs whose two phases both began in
  // the fast mode (line < 300 ns), both in the slow one, or one of each
  // (or not measured: the helper did not get the other CPU).
  {
    std::vector<double> by[3];
    for (uint32_t i = 0; i < pairs; ++i) {
      auto mode = [](double ns) { return ns < 0 ? 2 : ns < 300 ? 0 : 1; };
      const int a = mode(solo[i].line_ns), b = mode(fl[i].line_ns);
      by[a == b ? a : 2].push_back(r99[i]);
    }
    const char* mode[3] = {"both fast (line < 300 ns)", "both slow", "mixed or not measured (-1)"};
    for (int m = 0; m < 3; ++m)
      if (!by[m].empty())
        std::printf("  pairs %s: %zu, p99 flood/solo %s\n", mode[m], by[m].size(), spread(by[m]).c_str());
  }
  std::printf("pooled echo: solo p50 %.2f p99 %.2f p99.9 %.2f us | flood p50 %.2f p99 %.2f p99.9 %.2f us (p99 %.2fx)\n",
              us(pct(all_solo, 0.5)), us(pct(all_solo, 0.99)), us(pct(all_solo, 0.999)), us(pct(all_fl, 0.5)),
              us(pct(all_fl, 0.99)), us(pct(all_fl, 0.999)),
              static_cast<double>(pct(all_fl, 0.99)) / static_cast<double>(std::max<uint64_t>(pct(all_solo, 0.99), 1)));
  std::printf("flooder: %.0f K calls/s over the flood phases\n",
              static_cast<double>(flood_calls) / std::max(flood_secs, 1e-9) / 1e3);
  for (const auto* set : {&solo, &fl}) {
    const bool f = set == &fl;
    const char* name = f ? "flood" : "solo";
    print_passes(name, *set, f ? hist_flood : hist_solo, hist_solo);
    std::vector<uint64_t> sns, cns, kns, passes, before, after;
    SlowEchoes se;
    long inv = 0, flt = 0;
    for (const Lat& l : *set) {
      sns.insert(sns.end(), l.echo_server_ns.begin(), l.echo_server_ns.end());
      cns.insert(cns.end(), l.echo_client_ns.begin(), l.echo_client_ns.end());
      kns.insert(kns.end(), l.echo_call_ns.begin(), l.echo_call_ns.end());
      passes.insert(passes.end(), l.echo_passes.begin(), l.echo_passes.end());
      before.insert(before.end(), l.flood_before.begin(), l.flood_before.end());
      after.insert(after.end(), l.flood_after.begin(), l.flood_after.end());
      se.add(l);
      inv += l.nivcsw, flt += l.minflt;
    }
    auto mean = [](const std::vector<uint64_t>& v) {
      double t = 0;
      for (uint64_t x : v) t += static_cast<double>(x);
      return v.empty() ? 0.0 : t / static_cast<double>(v.size());
    };
    std::printf("%-6s echo: in its call() p50 %.2f p99 %.2f us, in the server's passes p50 %.2f p99 %.2f us, in the "
                "client's polls p50 %.2f p99 %.2f us; server passes per echo p50 %llu p99 %llu; flood calls run before "
                "its handler mean %.3f, after it in its pass mean %.3f\n",
                name, us(pct(kns, 0.5)), us(pct(kns, 0.99)), us(pct(sns, 0.5)), us(pct(sns, 0.99)), us(pct(cns, 0.5)),
                us(pct(cns, 0.99)),
                static_cast<unsigned long long>(pct(passes, 0.5)), static_cast<unsigned long long>(pct(passes, 0.99)),
                mean(before), mean(after));
    std::printf("%-6s echoes at or above their phase's p99: %zu, %zu of them with one step >= 5 us (longest step "
                "p50 %.2f us); involuntary context switches %ld, minor faults %ld in all\n",
                name, se.n, se.stalled, us(pct(se.max_step, 0.5)), inv, flt);
  }
  char b[200];
  std::snprintf(b, sizeof b, ",\"alternate\":{\"pairs\":%u,\"phase_seconds\":%.3f,\"echo_p99_x_median\":%.3f,\"echo_p99_x\":[",
                pairs, secs, median(r99));
  js += b;
  for (size_t i = 0; i < r99.size(); ++i) {
    std::snprintf(b, sizeof b, "%s%.3f", i ? "," : "", r99[i]);
    js += b;
  }
  js += "]}";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  g_self = argv[0];
  if (argc == 5 && std::strcmp(argv[1], "--flood-child") == 0) flood(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  double seconds = 3;
  uint32_t reap_ms = 1000;
  static uint32_t max_conns = EngineOptions{}.max_connections;
  uint32_t per_peer = 0;
  std::string json;
  uint32_t rounds_ignored = 0;
  uint32_t hogs = 1, table = 1, pass_counters = 0, alternate = 0, echo_only = 0;
  double phase_secs = 0.2;
  tern::apps::OptionParser cli("tern-isolation-measure", "[options]");
  cli.duration("seconds", "S", "each phase's length (default 3)", 1e6, &seconds);
  cli.integer("idle-reap-ms", "MS", "the server's idle_reap_ms (default 1000)", 0, 86400000, &reap_ms);
  cli.integer("max-connections", "N", "the server's max_connections (default: the engine's)", 1, 1 << 20, &max_conns);
  cli.integer("per-peer", "N", "the server's max_connections_per_peer (default 0: none of its own)", 0, 1 << 20,
              &per_peer);
  cli.text("json", "FILE", "also write the results as JSON", &json);
  // One round per run: the script repeats runs.
  cli.integer("rounds", "N", "accepted and ignored (scripts/measure-fairness.sh repeats runs)", 0, 1 << 20,
              &rounds_ignored);
  cli.integer("hogs", "0|1", "also measure beside a plain CPU hog and a memory hog (default 1)", 0, 1, &hogs);
  cli.integer("table", "0|1", "measure the connection-table attack (default 1)", 0, 1, &table);
  cli.integer("pass-counters", "0|1|2",
              "the server's counters per echo pass, the slowest 2% against the rest: 1 under the DRC flood, 2 in the "
              "solo phases (default 0: neither)",
              0, 2, &pass_counters);
  cli.integer("alternate", "N",
              "N pairs of short solo and flood phases (the flooder paused, not gone, in the solo ones): per-pair echo "
              "p99 ratios, their median and spread, and every server pass's length; leaves out the hogs and the "
              "table (default 0: one long phase each)",
              0, 100000, &alternate);
  cli.duration("phase-seconds", "S", "with --alternate, each phase's length (default 0.2)", 1e6, &phase_secs);
  uint32_t full_map = 0;
  cli.integer("full-map", "0|1",
              "the flood handler also records each flood id's runs in a map, as before (default 0: only the good "
              "peer's ids)",
              0, 1, &full_map);
  cli.integer("echo-only", "0|1", "the good client makes only echoes, no GET/PUT (default 0)", 0, 1, &echo_only);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  if (alternate) hogs = 0, table = 0;
  Server::full_map = full_map != 0;
  const std::string spec = fresh_spec("isolation-measure");
  EngineOptions so;
  so.idle_reap_ms = reap_ms;
  so.max_connections = max_conns;
  so.max_connections_per_peer = per_peer;
  auto hoard_fn = [](const std::string& s, int g, int r) { hoard(s, max_conns, g, r); };
  Child hoarder = spawn(hoard_fn, spec);
  Child comer = spawn(newcomer, spec);
  Child flooder = spawn(flood_exec, spec);
  Child spinner = spawn(hog<0>, spec);
  Child walker = spawn(hog<1>, spec);

  auto srv = Engine::create(so).value();
  Server sv;
  srv->handle(kProg, kVers, kPut, sum_handler, nullptr);
  srv->handle(kProg, kVers, kGet, fill_handler, nullptr);
  srv->handle(kProg, kVers, kEcho, traced_echo, nullptr);
  srv->handle(kProg, kVers, kAdd, &Server::add, &sv);
  if (!srv->listen(spec).is_ok()) return 1;
  auto good = Engine::create({}).value();
  Connection* conn = good->connect(spec).value();
  // The good peer's victim connection: its own engine in the same process
  // (the same peer to the server), polled only when the test says.
  EngineOptions vo;
  vo.reconnect_min_ms = 5;
  vo.reconnect_max_ms = 50;
  auto victim = Engine::create(vo).value();
  Connection* vconn = victim->connect(spec).value();
  auto pump = [&] {
    srv->poll();
    good->poll();
  };
  if (!poll_until([&] { pump(), victim->poll(); }, [&] { return conn->ready() && vconn->ready(); }, 5000)) return 1;
  auto* in = static_cast<uint8_t*>(good->alloc(kSize));
  auto* out = static_cast<uint8_t*>(good->alloc(kSize));
  for (uint32_t i = 0; i < kSize; ++i) in[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  uint32_t want = 0;
  for (uint32_t i = 0; i < kSize; ++i) want += in[i];

  PassCounters pc;
  // One phase: `secs` of calls, and on until `more` says enough (at most 60 s).
  // flooded: the echo's server passes are counted as under the flood.
  // record: keep every server pass's figures (Lat::pass_ns...).
  bool record = false;
  PassHist hist_solo, hist_flood;
  std::fill(hist_solo.n.begin(), hist_solo.n.end(), 0);
  std::fill(hist_flood.n.begin(), hist_flood.n.end(), 0);
  auto phase = [&](double secs, const std::function<bool()>& more = nullptr, bool flooded = false) {
    Lat l;
    if (record) l.long_pass_ns.reserve(static_cast<size_t>(secs * 20000) + 1000);
    const uint64_t flood0 = sv.drc.misses();
    rusage ru0{};
    getrusage(RUSAGE_THREAD, &ru0);
    // One server pass, its figures kept when recording; returns its ns.
    auto server_pass = [&](bool echo_out) -> uint64_t {
      const uint64_t c0 = record ? srv->stats().calls.get() : 0, f0 = record ? sv.drc.misses() : 0;
      const auto p0 = std::chrono::steady_clock::now();
      if (!echo_out) {
        srv->poll();
      } else {
        flooded ? server_pass_echo_flood(srv.get()) : server_pass_echo_solo(srv.get());
      }
      const auto ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - p0).count());
      if (record) {
        const uint64_t calls = srv->stats().calls.get() - c0, fl = sv.drc.misses() - f0;
        ++l.passes, l.pass_calls += calls, l.pass_flood += fl, l.passes_with_call += calls > 0;
        l.max_flood = std::max(l.max_flood, fl);
        // By flood calls, only the passes that served no call of the good
        // client: its call's own cost would be counted as the flood's.
        if (calls == fl) (flooded ? hist_flood : hist_solo).add(fl, ns);
        if (ns >= 3000 && ++l.long_passes <= l.long_pass_ns.capacity()) l.long_pass_ns.push_back(ns);
      }
      return ns;
    };
    auto pump_timed = [&] {
      (void)server_pass(false);
      good->poll();
    };
    const auto t0 = std::chrono::steady_clock::now();
    const auto end = t0 + std::chrono::duration<double>(secs);
    for (int k = 0; std::chrono::steady_clock::now() < end || (more && more() && secs_since(t0) < 60); ++k) {
      Done d;
      const int kind = echo_only ? 2 : k % 3;  // GET, PUT, echo
      uint32_t n = kSize;
      uint8_t args[32];
      for (int i = 0; i < 32; ++i) args[i] = static_cast<uint8_t>(k + i);
      Call c{kProg, kVers, kind == 0 ? kGet : kind == 1 ? kPut : kEcho};
      if (kind == 0) {
        c.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
        c.bulk_recv = std::span<uint8_t>(out, kSize);
      } else if (kind == 1) {
        c.bulk_send = std::span<const uint8_t>(in, kSize);
      } else {
        c.args = args;
      }
      c.done = on_done, c.ctx = &d;
      const auto t0 = std::chrono::steady_clock::now();
      if (conn->call(c) != 0) {
        ++l.failed;
        continue;
      }
      if (kind == 2) {
        if (record)
          l.echo_call_ns.push_back(static_cast<uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()));
        g_trace.begin(&sv.drc);
        uint64_t srv_ns = 0, cli_ns = 0, max_step = 0;
        while (!d.done) {
          const bool ran = g_trace.ran;
          const bool count = pass_counters == (flooded ? 1u : 2u);
          if (count) pc.before(*srv);
          const uint64_t pass_ns = server_pass(true);
          const auto p1 = std::chrono::steady_clock::now();
          if (count) pc.after(*srv, pass_ns);
          ++g_trace.passes;
          // Flood calls after the echo's handler in the pass it ran in.
          if (!ran && g_trace.ran) g_trace.after = sv.drc.misses() - g_trace.at_run;
          good->poll();
          const auto p2 = std::chrono::steady_clock::now();
          const auto poll_ns =
              static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(p2 - p1).count());
          srv_ns += pass_ns;
          cli_ns += poll_ns;
          max_step = std::max({max_step, pass_ns, poll_ns});
        }
        l.echo_server_ns.push_back(srv_ns);
        l.echo_client_ns.push_back(cli_ns);
        l.echo_max_step.push_back(max_step);
        g_trace.out = false;
        l.echo_passes.push_back(g_trace.passes);
        l.flood_before.push_back(g_trace.before);
        l.flood_after.push_back(g_trace.after);
      }
      while (!d.done) pump_timed();
      const auto ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      uint32_t sum = 0;
      if (d.results.size() >= 4) std::memcpy(&sum, d.results.data(), 4);
      const bool ok = d.r.status == CallStatus::kOk &&
                      (kind == 0   ? d.r.bulk_recv_len == kSize && out[kSize - 1] == 0xA5
                       : kind == 1 ? sum == want
                                   : d.results.size() == 32 && std::memcmp(d.results.data(), args, 32) == 0);
      if (!ok) ++l.failed;
      (kind == 0 ? l.get : kind == 1 ? l.put : l.echo).push_back(ns);
      if (kind == 0) out[kSize - 1] = 0;
    }
    rusage ru1{};
    getrusage(RUSAGE_THREAD, &ru1);
    l.nivcsw = ru1.ru_nivcsw - ru0.ru_nivcsw;
    l.nvcsw = ru1.ru_nvcsw - ru0.ru_nvcsw;
    l.minflt = ru1.ru_minflt - ru0.ru_minflt;
    l.flood_calls = sv.drc.misses() - flood0;
    l.secs = secs_since(t0);
    return l;
  };
  std::string js = "{\"seconds\":" + std::to_string(seconds) + ",\"idle_reap_ms\":" + std::to_string(reap_ms);
  auto report = [&](const char* name, const Lat& l, const Lat* solo) {
    auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
    auto x = [&](const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
      return static_cast<double>(pct(a, 0.99)) / static_cast<double>(std::max<uint64_t>(pct(b, 0.99), 1));
    };
    std::printf("%-10s GET p50 %7.1f p99 %7.1f us | PUT p50 %7.1f p99 %7.1f us | echo p50 %6.1f p99 %6.1f us | "
                "calls %zu failed %llu",
                name, us(pct(l.get, 0.5)), us(pct(l.get, 0.99)), us(pct(l.put, 0.5)), us(pct(l.put, 0.99)),
                us(pct(l.echo, 0.5)), us(pct(l.echo, 0.99)), l.get.size() + l.put.size() + l.echo.size(),
                static_cast<unsigned long long>(l.failed));
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  ",\"%s\":{\"get_p99_ns\":%llu,\"put_p99_ns\":%llu,\"echo_p99_ns\":%llu,\"calls\":%zu,\"failed\":%llu",
                  name, static_cast<unsigned long long>(pct(l.get, 0.99)),
                  static_cast<unsigned long long>(pct(l.put, 0.99)), static_cast<unsigned long long>(pct(l.echo, 0.99)),
                  l.get.size() + l.put.size() + l.echo.size(), static_cast<unsigned long long>(l.failed));
    js += buf;
    if (solo != nullptr) {
      std::printf(" | p99 x solo: GET %.2fx PUT %.2fx echo %.2fx", x(l.get, solo->get), x(l.put, solo->put),
                  x(l.echo, solo->echo));
      std::snprintf(buf, sizeof buf, ",\"get_x\":%.3f,\"put_x\":%.3f,\"echo_x\":%.3f", x(l.get, solo->get),
                    x(l.put, solo->put), x(l.echo, solo->echo));
      js += buf;
    }
    js += "}";
    std::printf("\n");
    auto mean = [](const std::vector<uint64_t>& v) {
      double t = 0;
      for (uint64_t x : v) t += static_cast<double>(x);
      return v.empty() ? 0.0 : t / static_cast<double>(v.size());
    };
    std::printf("%-10s echo order: server passes p50 %llu p99 %llu max %llu | flood calls run before its handler "
                "mean %.2f p99 %llu, after it in its pass mean %.2f p99 %llu\n",
                name, static_cast<unsigned long long>(pct(l.echo_passes, 0.5)),
                static_cast<unsigned long long>(pct(l.echo_passes, 0.99)),
                static_cast<unsigned long long>(pct(l.echo_passes, 1.0)), mean(l.flood_before),
                static_cast<unsigned long long>(pct(l.flood_before, 0.99)), mean(l.flood_after),
                static_cast<unsigned long long>(pct(l.flood_after, 0.99)));
    uint64_t passes = 0;
    for (uint64_t p : l.echo_passes) passes += p;
    std::printf("%-10s echo time: in the server's passes p50 %.2f p99 %.2f us, in the client's polls p50 %.2f p99 "
                "%.2f us (%llu echoes, %llu server passes)\n",
                name, us(pct(l.echo_server_ns, 0.5)), us(pct(l.echo_server_ns, 0.99)), us(pct(l.echo_client_ns, 0.5)),
                us(pct(l.echo_client_ns, 0.99)), static_cast<unsigned long long>(l.echo.size()),
                static_cast<unsigned long long>(passes));
  };
  bool good_result = true;
  (void)phase(0.3);  // warm-up
  Lat solo = phase(alternate ? phase_secs : seconds);
  report("solo", solo, nullptr);
  good_result &= solo.failed == 0;

  // The machine alone: a process that is not a peer at all runs beside the
  // server, as the flooder's will (what a flood adds beyond that is the
  // server's).
  for (auto [ch, name] : {std::pair{spinner, "hog-spin"}, std::pair{walker, "hog-mem"}}) {
    if (!hogs) break;
    if (write(ch.go, "G", 1) != 1) return 1;
    char u = 0;
    if (!poll_until(pump, [&] { return read(ch.ready, &u, 1) == 1; }, 30000)) return 1;
    Lat h = phase(seconds);
    close(ch.go);
    uint64_t steps = 0;
    (void)poll_until(pump, [&] { return read(ch.ready, &steps, sizeof steps) == sizeof steps; }, 10000);
    report(name, h, &solo);
    std::printf("%-10s the hog made %.1f M steps\n", name, static_cast<double>(steps) / 1e6);
    good_result &= h.failed == 0;
  }

  if (table) {
    // (a) The connection table.
    if (write(hoarder.go, "G", 1) != 1) return 1;
    uint32_t hmsg[2] = {0, 0};
    if (!poll_until([&] { pump(), victim->poll(); },
                    [&] { return read(hoarder.ready, hmsg, sizeof hmsg) == sizeof hmsg; }, 120000)) {
      std::fprintf(stderr, "the hoarder did not report\n");
      return 1;
    }
    std::printf("connection table: the hoarder holds %u connections (refused %u); server holds %llu of %u\n", hmsg[0],
                hmsg[1], static_cast<unsigned long long>(srv->stats().connections.get()), so.max_connections);
    // Its connections age past idle_reap_ms while the good client measures.
    Lat held = phase(seconds);
    report("conn-table", held, &solo);
    good_result &= held.failed == 0;
    if (write(comer.go, "G", 1) != 1) return 1;
    struct {
      int32_t status = -1, ms = 0;
      char why[200] = {};
    } cm;
    int32_t* cmsg = &cm.status;
    const bool came = poll_until([&] { pump(), victim->poll(); },
                                 [&] { return read(comer.ready, &cm, sizeof cm) == sizeof cm; }, 90000);
    cmsg[1] = cm.ms;
    std::printf("newcomer: %s in %d ms %s(connections reaped %llu, refused %llu)\n",
                came && cmsg[0] == 0 ? "connected and answered" : "FAILED", cmsg[1], cm.why,
                static_cast<unsigned long long>(srv->stats().connections_reaped.get()),
                static_cast<unsigned long long>(srv->stats().connections_refused.get()));
    js += ",\"hoarded\":" + std::to_string(hmsg[0]) + ",\"newcomer_ok\":" + (came && cmsg[0] == 0 ? "true" : "false") +
          ",\"newcomer_ms\":" + std::to_string(cmsg[1]);
    good_result &= came && cmsg[0] == 0;
    close(hoarder.go);  // the hoarder exits, its connections go
    const auto t_gone = std::chrono::steady_clock::now();
    const bool gone = poll_until([&] { pump(), victim->poll(); },
                                 [&] { return srv->stats().connections.get() <= 3; }, 30000);
    std::printf("the hoarder's connections %s in %.1f s (server holds %llu)\n", gone ? "gone" : "NOT gone",
                secs_since(t_gone), static_cast<unsigned long long>(srv->stats().connections.get()));
  }

  // (b) The duplicate request cache. The good peer's own non-idempotent
  // call runs and its reply is lost with its connection first.
  Done vd;
  const uint64_t vid = 7;
  Call v{kProg, kVers, kAdd};
  v.args = std::span(reinterpret_cast<const uint8_t*>(&vid), 8);
  v.done = on_done, v.ctx = &vd;
  sv.drop_after = vconn;
  if (vconn->call(v) != 0) return 1;
  if (!poll_until([&] { pump(), victim->poll(); }, [&] { return sv.drop_after == nullptr; }, 5000)) return 1;
  if (write(flooder.go, "G", 1) != 1) return 1;
  char ch = 0;
  if (!poll_until(pump, [&] { return read(flooder.ready, &ch, 1) == 1; }, 30000)) return 1;
  const uint64_t misses0 = sv.drc.misses();
  if (alternate) {
    if (!alternate_phases(alternate, phase_secs, flooder, pump, phase, record, hist_solo, hist_flood, js)) return 1;
  }
  // Until the flood has been through the whole cache twice over.
  Lat drc = phase(alternate ? 0.0 : seconds, [&] { return sv.drc.misses() - misses0 < 2 * sv.drc.max_entries(); }, true);
  const uint64_t flood_calls = sv.drc.misses() - misses0;
  if (!alternate) report("drc-flood", drc, &solo);  // --alternate: its pairs said it
  good_result &= drc.failed == 0;
  close(flooder.go);  // stop (EOF), then report
  uint64_t fmsg[2] = {0, 0};
  (void)poll_until(pump, [&] { return read(flooder.ready, fmsg, sizeof fmsg) == sizeof fmsg; }, 30000);
  // The victim reconnects and sends its call again.
  const uint64_t hits0 = sv.drc.hits();
  const bool answered = poll_until([&] { pump(), victim->poll(); }, [&] { return vd.done; }, 10000);
  uint32_t n = 0;
  if (vd.results.size() == 4) std::memcpy(&n, vd.results.data(), 4);
  uint32_t vruns = 0;
  for (auto& [k, r] : sv.runs)
    if (k.second == vid) vruns += r;
  const bool from_cache = answered && vd.r.status == CallStatus::kOk && vd.r.retransmits >= 1 && n == 1 &&
                          vruns == 1 && sv.drc.hits() > hits0;
  std::printf("drc flood: %llu calls from the flooder during the phase (%llu answered ok in all, %llu failed; cache "
              "%zu entries); the good peer's retransmission %s (ran %u time%s, cache hits %llu)\n",
              static_cast<unsigned long long>(flood_calls), static_cast<unsigned long long>(fmsg[0]),
              static_cast<unsigned long long>(fmsg[1]), sv.drc.max_entries(),
              from_cache ? "answered from the cache" : "NOT answered from the cache", vruns, vruns == 1 ? "" : "s",
              static_cast<unsigned long long>(sv.drc.hits() - hits0));
  pc.print();
  js += ",\"flood_calls\":" + std::to_string(flood_calls) + ",\"retransmission_from_cache\":" +
        (from_cache ? "true" : "false") + "}\n";
  good_result &= from_cache && fmsg[1] == 0;
  if (!json.empty())
    if (FILE* f = std::fopen(json.c_str(), "w")) {
      std::fputs(js.c_str(), f);
      std::fclose(f);
    }
  for (Child c : {hoarder, comer, flooder, spinner, walker}) {
    kill(c.pid, SIGKILL);
    waitpid(c.pid, nullptr, 0);
  }
  victim.reset();
  good.reset();
  srv.reset();
  remove_spec(spec);
  return good_result ? 0 : 1;
}
