// tern-sim: a client and a server engine in one thread over pmd/sim, stepped
// by the simulator in virtual time (docs/sim.md). Each schedule runs ~100
// calls of mixed shapes (inline, read chunk, write chunk, reply chunk) with
// faults the seed draws (a QP to error with its WRs flushed, a server that
// stops progressing, a disconnect, a time jump past deadlines), then checks:
//  - every call completed exactly once, with a status it may have, and a
//    successful one with the right results;
//  - nothing leaked at idle (testing::accounting of both engines);
//  - every fast registration ended exactly once (the world's counters), no
//    CQ overrun.
//   tern-sim --seed=N [--trace]        one schedule (the trace printed with --trace)
//   tern-sim --seeds=N [--from=S] [--jobs=J]  N schedules (CI and nightly modes)
//   tern-sim --determinism[=S]         seed S in a child, then twice here, another
//                                      between: the same trace hash each time
//   tern-sim --seed=N --shrink         reduce a failing schedule (faults, calls,
//                                      the scheduler's decisions); writes a replay file
//   tern-sim --replay=FILE [--trace]   run a reduced schedule again
// A failing seed prints the one command that replays it and the end of its trace.
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "engine/duplicate_cache.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "oncrpc/oncrpc.h"
#include "sim/sim_world.h"

using namespace tern;
using namespace tern::rpc;

namespace {

constexpr uint32_t kProg = 0x20057000, kVers = 1;
enum Proc : uint32_t { kEcho = 1, kSum = 2, kFill = 3, kBig = 4, kAppend = 5 };
// Fault kinds a schedule draws from (run()'s switch).
constexpr uint32_t kFaultKinds = 13;
constexpr uint32_t kCalls = 100;
constexpr uint32_t kWindow = 8;
constexpr uint64_t kMaxIterations = 4'000'000;
// --wait-mode: the engines sleep when idle (engine.h's wait mode) in no
// schedule (0, the default), a third of them (1) or all (2).
uint64_t g_wait_mode = 0;
constexpr uint32_t kMaxChunk = 16384;   // a read or write chunk's bytes (sum, fill)
constexpr uint32_t kMaxResults = 32768;  // a big reply's bytes
constexpr uint32_t kRegCacheEntries = 6;  // a registration cache's (device without fast registration): it evicts
// Bulk buffers the client's calls take and give back (a call that finds
// none waits for one): a buffer is reused by a later call as soon as its
// call has completed, so a device or peer that still wrote into it
// afterwards would corrupt that later call's data, which the checks see.
constexpr uint32_t kBulkBuffers = kWindow;

// Bugs a test puts in on purpose (--inject-bug), to show the checks and the
// shrinker find them. None in a normal run.
enum class Bug : uint8_t {
  kNone,
  // The fill handler writes its last byte wrong once a fault that drops the
  // connection (a QP to error, a disconnect, a lost server: kinds 0, 2, 7, 10, 12) has struck: a bug that needs
  // one fault out of the seed's several and one call shape after it.
  kFillAfterLoss,
  // The same condition, and the process dies (SIGSEGV), as a null pointer
  // would kill it: the shrinker must cope with candidates that crash.
  kCrashAfterLoss,
};

// The payload of call `call`: byte i is kPattern[(call * 131 + i) % 256 + i
// / 256 * 256] -- a 256-byte period shifted per call, so that one call's
// bytes in another's buffer show, and the bytes are one memcpy/memcmp away.
struct Pattern {
  uint8_t b[256 + kMaxResults];
  uint64_t prefix[256 + kMaxResults + 1];  // sums, for a read chunk's expected sum
  Pattern() {
    prefix[0] = 0;
    for (uint32_t j = 0; j < sizeof b; ++j) {
      b[j] = static_cast<uint8_t>((j & 255) * 7 + 1);
      prefix[j + 1] = prefix[j] + b[j];
    }
  }
  static uint32_t off(uint32_t call) { return (call * 131) & 255; }
  const uint8_t* of(uint32_t call) const { return b + off(call); }
  uint32_t sum(uint32_t call, uint32_t n) const {
    return static_cast<uint32_t>(prefix[off(call) + n] - prefix[off(call)]);
  }
};
const Pattern kPattern;

// Byte sum eight at a time (the server's sum of a read chunk; a byte loop
// was a large part of a schedule's instructions).
uint32_t byte_sum(std::span<const uint8_t> d) {
  uint64_t total = 0;
  size_t i = 0;
  constexpr uint64_t kLanes = 0x00FF00FF00FF00FFull;
  while (d.size() - i >= 8) {
    uint64_t acc = 0;  // four 16-bit lanes, each at most 2 * 255 per word
    for (size_t k = 0; k < 64 && d.size() - i >= 8; ++k, i += 8) {
      uint64_t w;
      std::memcpy(&w, d.data() + i, 8);
      acc += (w & kLanes) + ((w >> 8) & kLanes);
    }
    for (int l = 0; l < 4; ++l) total += (acc >> (16 * l)) & 0xFFFF;
  }
  for (; i < d.size(); ++i) total += d[i];
  return static_cast<uint32_t>(total);
}

// A schedule: the seed and what a shrinker may have pinned down.
struct PlannedFault {
  uint32_t at = 0;     // when the calls issued reach this count
  uint32_t kind = 0;   // see the switch in run()
  uint32_t delay = 0;  // and this many iterations more
};
struct Schedule {
  uint64_t seed = 1;
  uint32_t calls = kCalls;
  bool faults_given = false;  // else drawn from the seed
  std::vector<PlannedFault> faults;
  bool tape_given = false;  // the scheduler's decisions (World::replay_decisions)
  std::vector<uint64_t> tape;
  Bug bug = Bug::kNone;
};

// What a run in a child process leaves where its parent reads it even when
// the child dies (a crash, an engine check's abort, a sanitizer's report):
// the shrinker runs each candidate so, and a crash is one more way to fail.
struct Progress {
  static constexpr uint64_t kMaxDecisions = 8u << 20;
  uint64_t events, iterations, ndec;
  uint32_t nfaults;
  PlannedFault faults[8];
  uint64_t dec[kMaxDecisions];
};

struct RunOptions {
  bool keep_trace = false;
  size_t trace_lines = 300;  // 0: all
  std::vector<uint64_t>* record = nullptr;  // the decisions taken
  uint64_t max_iterations = kMaxIterations;
  Progress* progress = nullptr;  // kept up to date after every iteration (needs record)
};

struct Outcome {
  bool ok = true;
  std::string why;
  uint64_t hash = 0;
  uint64_t events = 0;
  uint64_t iterations = 0;
  std::vector<PlannedFault> faults;  // the plan the schedule ran with
  std::vector<std::string> trace;
};

// ---------------------------------------------------------------- server

// args: u32 call -> u32 call, u32 executions of it by this server. Not
// idempotent (an append): the DuplicateCache must answer a retransmission
// from its first reply, so that one server executes each call at most once.
// A server that is destroyed and made again starts with an empty cache (and
// an empty count): a call may run once per server.
struct AppendServer {
  std::unique_ptr<DuplicateCache> drc;
  std::vector<uint32_t> execs;  // per call index, by this server
  std::string error;            // the first call executed twice
};

// A batching server (a quarter of the seeds): it holds every call until it
// holds `size` of them, or until the oldest has waited kBatchBound, and then
// answers them all. A grant travels only in a reply, so such a server needs
// a client that asks for more credits than it uses now: one that asks for no
// more gets stuck with the calls it has, each batch let go by the bound
// alone. A bound release while the client had `size` calls unfinished is a
// starved batch; more than kMaxStarved in a row (no full batch between)
// fails the schedule -- the first on a new connection is due (it starts
// with one credit), and faults may cost a few more; a QP that went to error
// (a lost connection, whose successor starts again from one credit) ends the
// row.
constexpr uint64_t kBatchBound = 50'000'000;
constexpr uint32_t kMaxStarved = 4;
struct Batch {
  uint32_t size = 0;  // 0: the server does not batch
  std::vector<ServerCall*> calls;
  uint64_t since = 0;    // when the oldest held call arrived
  uint32_t starved = 0;  // bound releases in a row with `size` calls unfinished at the client
  uint64_t qp_errors = 0;  // the world's QP errors when `starved` last counted
  const uint32_t* issued = nullptr;
  const uint32_t* done = nullptr;
};

struct ServerCtx {
  AppendServer* app = nullptr;
  Batch batch;
  bool destroying = false;  // the server engine's destructor is running
  std::string error;        // the first thing the server side did wrong
  Bug bug = Bug::kNone;
  const bool* lost = nullptr;  // a connection-dropping fault has struck
  sim::World* w = nullptr;
  // Calls answered later, by due time (then arrival): from the loop, not
  // from the handler, as a server that hands calls to other work does.
  std::multimap<uint64_t, ServerCall*> later;
  // A third of the seeds: the server brings its own memory (host_memory()):
  // a Placer puts the sum's read chunk there, and the fill's bulk goes out
  // from there, so that the engine reports it to the reclaim check when it
  // is done with it rather than through its pools.
  bool own_memory = false;
};

// The server host's own registered memory, in slots of kMaxChunk: each
// placement and each fill takes the next slot, none reused within a
// schedule (the host is never told when the engine is done with a reply's
// bulk, and a retransmission is another call), so two calls never share
// one. When they run out, the engine's memory serves. Made once per
// process, its pages touched only where used.
constexpr uint32_t kHostSlots = 256;
std::span<uint8_t> host_memory() {
  static uint8_t* const mem = new uint8_t[kHostSlots * kMaxChunk];
  return {mem, kHostSlots * kMaxChunk};
}
uint32_t g_host_slots_used = 0;  // this schedule's
uint8_t* host_slot() {
  return g_host_slots_used < kHostSlots ? host_memory().data() + g_host_slots_used++ * kMaxChunk : nullptr;
}

std::span<uint8_t> place(void*, ServerCall*, uint32_t, uint32_t len) {
  uint8_t* p = len <= kMaxChunk ? host_slot() : nullptr;
  return p != nullptr ? std::span<uint8_t>(p, len) : std::span<uint8_t>{};  // empty: the pool's
}

void echo(ServerCall* c) { (void)c->reply(c->args()); }

void sum(ServerCall* c) {
  uint32_t s = byte_sum(c->bulk());
  (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(&s), 4));
}

// args: u32 call, u32 n -> n pattern bytes into the write chunk.
void fill(ServerCtx* sc, ServerCall* c) {
  uint32_t a[2] = {};
  if (c->args().size() >= 8) std::memcpy(a, c->args().data(), 8);
  uint32_t n = std::min({a[1], c->bulk_capacity(), kMaxChunk});
  uint8_t* own = sc->own_memory ? host_slot() : nullptr;
  auto b = own != nullptr ? std::span<uint8_t>(own, n) : c->bulk_buffer(n);
  std::memcpy(b.data(), kPattern.of(a[0]), b.size());
  if (sc->bug == Bug::kFillAfterLoss && *sc->lost && !b.empty()) b[b.size() - 1] ^= 1;
  if (sc->bug == Bug::kCrashAfterLoss && *sc->lost) raise(SIGSEGV);
  (void)c->reply({}, b);
}

// args: u32 call, u32 n -> n pattern bytes of results (a reply chunk when large).
void big(ServerCall* c) {
  uint32_t a[2] = {};
  if (c->args().size() >= 8) std::memcpy(a, c->args().data(), 8);
  (void)c->reply(std::span(kPattern.of(a[0]), std::min(a[1], kMaxResults)));
}

// Executes an append the duplicate cache let through (append_begin).
void append(AppendServer* st, ServerCall* c) {
  uint32_t r[2] = {};
  if (c->args().size() >= 4) std::memcpy(r, c->args().data(), 4);
  if (r[0] < st->execs.size()) {
    r[1] = ++st->execs[r[0]];
    if (r[1] > 1 && st->error.empty())
      st->error = "call " + std::to_string(r[0]) + " (not idempotent) executed " + std::to_string(r[1]) +
                  " times by one server";
  }
  std::span<const uint8_t> res(reinterpret_cast<const uint8_t*>(r), 8);
  st->drc->done(*c, res);
  (void)c->reply(res);
}

// On arrival, before the call may be held: a retransmission of a call
// already answered is answered from the cache, one still in progress is
// dropped (its first copy answers). False when the call is done with.
bool append_begin(AppendServer* st, ServerCall* c) {
  std::vector<uint8_t> cached;
  switch (st->drc->begin(c, &cached)) {
    case DuplicateCache::Found::kDone:
      (void)c->reply(cached);
      return false;
    case DuplicateCache::Found::kInProgress:
      return false;
    case DuplicateCache::Found::kNew:
      break;
  }
  return true;
}

void answer(ServerCtx* sc, ServerCall* c) {
  switch (c->proc()) {
    case kEcho: return echo(c);
    case kSum: return sum(c);
    case kFill: return fill(sc, c);
    case kAppend: return append(sc->app, c);
    default: return big(c);
  }
}

// A call's AUTH_SYS credentials, made from a number so that the server can
// tell them from garbage: every field follows from the stamp.
void make_cred(AuthSys* a, uint32_t n) {
  a->stamp = n;
  a->uid = 1000 + n;
  a->gid = (1000 + n) ^ 0x5a5a;
  a->ngids = n % 17;
  for (uint32_t k = 0; k < a->ngids; ++k) a->gids[k] = a->uid + k;
  a->machine = "client-" + std::to_string(n);
}

// What the caller's credential storage holds once call() has returned:
// reused, here for something that is no credential (an empty machine name
// would be AUTH_NONE, which the server could not tell from none).
void spoil_cred(AuthSys* a) {
  a->stamp = 0xdeadbeef;
  a->uid = 0, a->gid = 1, a->ngids = 16;
  for (uint32_t& g : a->gids) g = 0xdeadbeef;
  a->machine.assign(200, 'x');
}

// The server's check: a call carries no credential, or one as make_cred made it.
void check_cred(ServerCtx* sc, ServerCall* c) {
  oncrpc::CallHeader h;
  if (oncrpc::decode_call(c->rpc_header(), &h).status != oncrpc::CallDecodeStatus::kOk) {
    if (sc->error.empty()) sc->error = "a call's RPC header does not decode at the server";
    return;
  }
  if (h.cred.flavor != oncrpc::AuthFlavor::kSys) return;
  AuthSys want;
  make_cred(&want, h.sys.stamp);
  bool ok = h.sys.uid == want.uid && h.sys.gid == want.gid && h.sys.ngids == want.ngids &&
            h.sys.machinename == want.machine;
  for (uint32_t k = 0; ok && k < want.ngids; ++k) ok = h.sys.gids[k] == want.gids[k];
  if (!ok && sc->error.empty())
    sc->error = "call xid " + std::to_string(c->xid()) + ": AUTH_SYS credentials garbled on the way (stamp " +
                std::to_string(h.sys.stamp) + ", machine of " + std::to_string(h.sys.machinename.size()) + " bytes)";
}

void answer(ServerCtx* sc, ServerCall* c);

// Answers every call the batch holds.
void release_batch(ServerCtx* sc) {
  std::vector<ServerCall*> held;
  held.swap(sc->batch.calls);
  for (ServerCall* c : held) answer(sc, c);
}

// One call in ten is answered later: mostly within 3 ms, one in twenty of
// those after 20-150 ms, so that a loss, a reconnect and a retransmission
// can happen while the server still holds the first copy (as tern-soak's
// server does). A decision of 0 answers at once.
void serve(void* ctx, ServerCall* c) {
  auto* sc = static_cast<ServerCtx*>(ctx);
  sim::World& w = *sc->w;
  // An engine's destructor must not call handlers: the application may
  // already have freed what they use (here the duplicate cache).
  if (sc->destroying) {
    if (sc->error.empty()) sc->error = "a handler ran inside its engine's destructor";
    return;
  }
  check_cred(sc, c);
  if (c->proc() == kAppend && !append_begin(sc->app, c)) return;
  if (Batch& b = sc->batch; b.size != 0) {
    if (b.calls.empty()) b.since = w.now_ns();
    b.calls.push_back(c);
    w.event("server-batches", "xid", c->xid(), "held", b.calls.size());
    if (b.calls.size() >= b.size) {
      b.starved = 0;
      release_batch(sc);
    }
    return;
  }
  if (w.draw_below(10) == 9) {
    const uint64_t ns = w.draw_below(20) == 19 ? 20'000'000 + w.draw_below(130'000'000) : w.draw_below(3'000'000);
    w.event("server-holds", "xid", c->xid(), "ns", ns);
    sc->later.emplace(w.now_ns() + ns, c);
    return;
  }
  answer(sc, c);
}

// Answers the held calls that are due.
void answer_due(ServerCtx* sc) {
  while (!sc->later.empty() && sc->later.begin()->first <= sc->w->now_ns()) {
    ServerCall* c = sc->later.begin()->second;
    sc->later.erase(sc->later.begin());
    answer(sc, c);
  }
  Batch& b = sc->batch;
  if (b.calls.empty() || sc->w->now_ns() < b.since + kBatchBound) return;
  const uint32_t unfinished = *b.issued - *b.done;
  sc->w->event("server-batch-bound", "held", static_cast<uint32_t>(b.calls.size()), "unfinished", unfinished);
  if (const uint64_t errors = sc->w->counters().qp_errors; errors != b.qp_errors) {
    b.qp_errors = errors;
    b.starved = 0;
  }
  if (unfinished >= b.size && ++b.starved > kMaxStarved && sc->error.empty())
    sc->error = "a batching server let " + std::to_string(b.starved) +
                " batches in a row go by the bound while the client had " + std::to_string(unfinished) +
                " calls unfinished (a batch is " + std::to_string(b.size) + "): the client's credits never grew";
  release_batch(sc);
}

// ---------------------------------------------------------------- client

struct RunCtx;

struct CallState {
  uint32_t index = 0;
  Proc proc = kEcho;
  uint32_t len = 0;
  std::vector<uint8_t> args;
  uint8_t* buf = nullptr;  // bulk memory (engine-registered), from RunCtx::free_bufs
  uint32_t done = 0;
  CallStatus status = CallStatus::kOk;
  bool issued = false;
  RunCtx* run = nullptr;
};

struct RunCtx {
  sim::World* world = nullptr;
  Outcome* out = nullptr;
  uint32_t done_once = 0;  // calls completed at least once (or refused at call())
  std::vector<uint8_t*> free_bufs;
  void fail(std::string why) {
    if (out->ok) out->ok = false, out->why = std::move(why);
  }
};

void on_done(void* ctx, const CallReply& r) {
  auto* s = static_cast<CallState*>(ctx);
  RunCtx& rc = *s->run;
  if (++s->done > 1) {
    rc.fail("call " + std::to_string(s->index) + " completed " + std::to_string(s->done) + " times");
    return;
  }
  ++rc.done_once;
  s->status = r.status;
  rc.world->trace_event("call-done", s->index, call_status_name(r.status), 0);
  // The call is complete: its bulk memory is the caller's again, and the
  // next call may reuse it.
  auto give_back = [&] {
    if (s->buf != nullptr) rc.free_bufs.push_back(s->buf);
  };
  if (r.status != CallStatus::kOk) {
    if (r.status != CallStatus::kDisconnected && r.status != CallStatus::kTimedOut)
      rc.fail("call " + std::to_string(s->index) + ": unexpected status " + call_status_name(r.status));
    give_back();
    return;
  }
  auto bad = [&](const char* what) { rc.fail("call " + std::to_string(s->index) + ": " + what); };
  switch (s->proc) {
    case kEcho:
      if (r.results.size() != s->args.size() || std::memcmp(r.results.data(), s->args.data(), s->args.size()) != 0)
        bad("echo results differ from the arguments");
      break;
    case kSum: {
      uint32_t got = 0;
      if (r.results.size() != 4) {
        bad("sum: results not 4 bytes");
        break;
      }
      std::memcpy(&got, r.results.data(), 4);
      if (got != kPattern.sum(s->index, s->len)) bad("sum: the server pulled other bytes than the read chunk's");
      break;
    }
    case kFill:
      if (r.bulk_recv_len != s->len) bad("fill: write chunk length differs");
      else if (std::memcmp(s->buf, kPattern.of(s->index), s->len) != 0) bad("fill: write chunk bytes differ");
      break;
    case kBig:
      if (r.results.size() != s->len) bad("big: results length differs");
      else if (std::memcmp(r.results.data(), kPattern.of(s->index), s->len) != 0) bad("big: results bytes differ");
      break;
    case kAppend: {
      uint32_t got[2] = {};
      if (r.results.size() != 8) {
        bad("append: results not 8 bytes");
        break;
      }
      std::memcpy(got, r.results.data(), 8);
      if (got[0] != s->index || got[1] == 0) bad("append: results of another call");
      break;
    }
  }
  give_back();
}

EngineOptions options(bool server) {
  EngineOptions o;
  // Small arenas and pools: the kernel zeroes and maps every page of an
  // arena when it is made, which was most of a schedule's cost, and small
  // pools make calls wait for memory, a path worth the scheduler's
  // attention. RFC 8797's default inline threshold (1 KiB): replies of a
  // few hundred bytes go inline and larger ones through reply chunks, so
  // both come up. One bulk block is 64 KiB here (the largest of max_bulk,
  // max_reply + header room and max_long_call, rounded up).
  o.inline_send = 1024;
  o.inline_recv = 1024;
  o.credits = 8;
  o.max_bulk = kMaxChunk;
  o.max_reply = kMaxResults;
  o.max_long_call = 16u << 10;
  o.max_mrs = 64;
  o.frwr_depth = 32;
  o.recv_buffers = 32;
  o.send_buffers = 32;
  o.max_connections = 16;
  o.max_calls = 1024;
  o.bulk_pool_bytes = server ? 128u << 10 : 64u << 10;
  // 32 KiB of receive and 32 KiB of send buffers, the bulk pool, and on the
  // client the calls' bulk buffers; a little over, for alignment.
  o.arena_bytes = (64u << 10) + o.bulk_pool_bytes + (server ? 0 : kBulkBuffers * kMaxChunk) + (16u << 10);
  return o;
}

// A payload size in [1, max], each power of two as likely as another: the
// edges (a byte, a page, the inline threshold, the largest) all come up,
// and a schedule moves a fraction of the bytes a uniform draw moved (the
// copies were most of its instructions). A decision of 0 is 1 or 2 bytes.
uint32_t draw_size(sim::World& w, uint32_t max) {
  const uint32_t bits = 1 + static_cast<uint32_t>(w.draw_below(std::bit_width(max)));
  return 1 + static_cast<uint32_t>(w.draw_below(std::min<uint64_t>(max, uint64_t{1} << bits)));
}

bool log_to_stderr() {
  static const bool on = std::getenv("TERN_SIM_LOG") != nullptr;
  return on;
}

// splitmix64's finalizer: a seed's own choices that draw nothing.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Outcome run(const Schedule& sched, const RunOptions& ro) {
  uint32_t sctx_batch_size = 0;
  Outcome out;
  RunCtx rc;
  rc.out = &out;
  const std::string wname = "tern-sim-" + std::to_string(sched.seed);
  auto world = sim::World::open(wname, sched.seed);
  sim::World& w = *world;
  rc.world = &w;
  w.keep_trace(ro.keep_trace, ro.trace_lines);
  if (sched.tape_given) w.replay_decisions(&sched.tape);
  w.record_decisions(ro.record);
  w.install_clock();
  // What the engines say goes into the schedule's trace (and its hash): a
  // decision they make differently in a replay -- a backoff, a deadline --
  // shows there even when the events around it look the same.
  struct Sink {
    static void log(void* ctx, const LogRecord& r) {
      auto* w = static_cast<sim::World*>(ctx);
      char head[64];
      std::snprintf(head, sizeof head, "log %s: ", r.subsystem);
      w->note(head, r.message);
      if (log_to_stderr()) std::fprintf(stderr, "%s: %s\n", r.subsystem, r.message);
    }
  };
  set_log_sink(Sink::log, &w);
  // However the schedule ends (an early return too), the sink and the
  // clock go before the world does.
  struct Cleanup {
    sim::World& w;
    ~Cleanup() {
      set_log_sink(nullptr, nullptr);
      w.record_decisions(nullptr);
      w.replay_decisions(nullptr);
      w.uninstall_clock();
    }
  } cleanup{w};
  auto fail = [&](std::string why) { rc.fail(std::move(why)); };
  // The device's shape: a third of the schedules without a shared receive
  // queue (the engine then posts receives per connection, the other way
  // credits work), a third with QP-bound registrations (the engine then
  // keeps one PD for all connections instead of one each).
  const bool srq = w.draw_below(3) != 0;
  const bool qp_bound = w.draw_below(3) == 0;
  // Half of the seeds reuse QP numbers (the lowest free one, as devices
  // do): a completion a destroyed QP left in a shared CQ then names a QP of
  // a later connection. From the seed, not drawn (the other draws stay).
  const bool recycle = mix64(sched.seed ^ 0x9b17) % 2 == 0;
  w.recycle_qp_numbers(recycle);
  // One seed in six (a hash, not a draw: the other seeds stay as they
  // were): a device without fast registration, as some are; the client
  // then registers its chunks through its registration cache (trusted
  // peers), kept small so that it evicts, and each eviction is checked
  // against the WRs still in flight (the reclaim check).
  const bool reg_cache = mix64(sched.seed ^ 0xca5e) % 6 == 0;
  const std::string spec = "sim:world=" + wname + ",addr=srv" + (srq ? "" : ",srq=0") +
                           (qp_bound ? ",qp_bound=1" : "") + (reg_cache ? ",fast_reg=0" : "");
  w.note("device ", spec);
  if (recycle) w.note("qp numbers recycled");
  // Half of the seeds (another hash): a QP of the SRQ destroyed while it
  // held one of its receives completes it after the destroy, half the time
  // (World::late_receives), under its number -- recycled, a later
  // connection's. The engine must give the buffer back (the accounting at
  // idle sees a lost one) and leave that connection alone.
  if (mix64(sched.seed ^ 0x1a7e) % 2 == 0) w.late_receives(500);
  // With --wait-mode, both engines of a schedule (a third of them, or all)
  // run in wait mode: an engine that finds nothing to do arms
  // (prepare_wait) and sleeps until its wait fd is readable or virtual time
  // moves on (its timers: engine.h's protocol, the loop playing the clock).
  // From the seed, not drawn.
  const bool wait_mode = g_wait_mode >= 2 || (g_wait_mode == 1 && mix64(sched.seed ^ 0x5eed) % 3 == 0);
  if (wait_mode) w.note("wait mode");
  // A quarter of the seeds have a batching server: half of those wait for
  // as many calls as the client keeps (kWindow), which needs the client's
  // whole window granted, the others for 2 to 7. Taken from the seed, not
  // drawn, so that the other seeds' schedules stay as they were.
  if (const uint64_t m = mix64(sched.seed ^ 0xba7c4); m % 4 == 0) {
    sctx_batch_size = (m >> 8) % 2 == 0 ? kWindow : 2 + static_cast<uint32_t>((m >> 9) % 6);
    w.event("server-batch-size", "calls", sctx_batch_size, "", 0);
  }
  const uint32_t ncalls = std::min(sched.calls, kCalls);
  std::vector<CallState> calls(ncalls);
  bool lost = false;  // a connection-dropping fault struck (Bug::kFillAfterLoss)
  AppendServer app;
  ServerCtx sctx;
  sctx.app = &app, sctx.bug = sched.bug, sctx.lost = &lost, sctx.w = &w;
  sctx.batch.size = sctx_batch_size;
  // From the seed, not drawn: the other seeds' schedules stay as they were.
  sctx.own_memory = mix64(sched.seed ^ 0x40571) % 3 == 0;
  g_host_slots_used = 0;
  if (sctx.own_memory) w.note("server's own memory");
  {
    std::unique_ptr<Engine> server;
    bool client_asleep = false, server_asleep = false;  // wait mode: armed and sleeping
    // The server engine, made again after a fault destroyed it (a server
    // restarted: a fresh duplicate cache, which must go before its engine,
    // and no held calls: they went with it).
    auto make_server = [&]() -> bool {
      auto sr = Engine::create(options(true));
      if (!sr) {
        fail("server engine create failed: " + sr.status().message());
        return false;
      }
      server = std::move(*sr);
      server_asleep = false;
      app.drc = std::make_unique<DuplicateCache>(1024);
      app.execs.assign(ncalls, 0);
      for (Proc p : {kEcho, kSum, kFill, kBig, kAppend})
        server->handle(kProg, kVers, p, serve, &sctx, sctx.own_memory && p == kSum ? place : nullptr);
      if (sctx.own_memory)
        if (Status s = server->register_memory(host_memory().data(), host_memory().size()); !s) {
          fail("register_memory: " + s.message());
          return false;
        }
      if (Status s = server->listen(spec); !s) {
        fail("listen: " + s.message());
        return false;
      }
      return true;
    };
    auto destroy_server = [&]() {
      sctx.later.clear();
      sctx.batch.calls.clear();
      app.drc.reset();
      sctx.destroying = true;
      w.stale_suspect = 0;  // its shutdown disconnects every QP it has, for no completion
      server.reset();
      sctx.destroying = false;
    };
    EngineOptions copt = options(false);
    // One schedule in four without remote invalidation (from the seed, not
    // a draw, so the other schedules stay as they were): the client then
    // ends every registration with its own LOCAL_INV chain, a path the
    // server's Send With Invalidate otherwise leaves unused.
    copt.remote_invalidation = sched.seed % 4 != 0;
    if (reg_cache) copt.trusted_peers = true, copt.max_mrs = kRegCacheEntries;
    auto cr = Engine::create(copt);
    if (!cr) {
      fail("engine create failed");
      return out;
    }
    std::unique_ptr<Engine> client = std::move(*cr);
    for (uint32_t i = 0; i < kBulkBuffers; ++i) {
      auto* b = static_cast<uint8_t*>(client->alloc(kMaxChunk));
      if (b == nullptr) {
        fail("client alloc failed");
        return out;
      }
      rc.free_bufs.push_back(b);
    }
    // Taken from the back: the buffer given back last is reused first.
    std::reverse(rc.free_bufs.begin(), rc.free_bufs.end());
    if (!make_server()) {
      destroy_server();
      return out;
    }
    auto conn_r = client->connect(spec);
    if (!conn_r) {
      fail("connect: " + conn_r.status().message());
      return out;
    }
    Connection* conn = *conn_r;

    // The faults of this schedule: up to three, each when the calls issued
    // reach a count the seed picks (and a few iterations more). They are
    // drawn even when given, so that the rest of the schedule draws the same.
    struct Planned {
      PlannedFault f;
      bool fired = false;
    };
    std::vector<Planned> plan;
    const uint32_t nfaults = static_cast<uint32_t>(w.draw_below(4));
    for (uint32_t i = 0; i < nfaults; ++i) {
      PlannedFault f;
      f.at = static_cast<uint32_t>(5 + w.draw_below(90));
      f.kind = static_cast<uint32_t>(w.draw_below(kFaultKinds));
      f.delay = static_cast<uint32_t>(w.draw_below(50));
      plan.push_back({f});
    }
    if (sched.faults_given) {
      plan.clear();
      for (const auto& f : sched.faults) plan.push_back({f});
    }
    for (const auto& p : plan) out.faults.push_back(p.f);
    // A child's progress, for its parent if it dies (Progress).
    auto sync = [&](uint64_t iterations) {
      Progress* pr = ro.progress;
      if (pr == nullptr) return;
      const auto& rec = *ro.record;
      for (uint64_t i = pr->ndec; i < rec.size() && i < Progress::kMaxDecisions; ++i) pr->dec[i] = rec[i];
      pr->ndec = std::min<uint64_t>(rec.size(), Progress::kMaxDecisions);
      pr->events = w.counters().events;
      pr->iterations = iterations;
    };
    if (ro.progress != nullptr) {
      ro.progress->nfaults = static_cast<uint32_t>(std::min<size_t>(out.faults.size(), 8));
      for (uint32_t i = 0; i < ro.progress->nfaults; ++i) ro.progress->faults[i] = out.faults[i];
    }

    uint32_t next = 0;
    sctx.batch.issued = &next, sctx.batch.done = &rc.done_once;
    // The caller's credential storage: filled for a call, handed to call(),
    // and spoiled as soon as call() returns (the engine must have copied it).
    AuthSys cred;
    uint64_t server_stalled_until = 0;
    uint64_t server_down_until = 0;  // destroyed by a fault; made again then
    uint32_t idle_rounds = 0;
    // One turn of an engine in the host loop: a sleeping engine is polled
    // only once its wait fd says so; an idle one arms and goes to sleep.
    // *quiet: the world's wakeups() when the sleeper's fd was last seen
    // quiet; while the count has not moved, no device made it readable
    // since (the engine's timerfd is not armed under the virtual clock), so
    // the kernel is not asked again.
    uint64_t client_quiet = UINT64_MAX, server_quiet = UINT64_MAX;
    auto drive = [&](Engine* e, bool* asleep, uint64_t* quiet, const char* who) -> int {
      if (!wait_mode) return e->poll();
      if (*asleep) {
        if (*quiet == w.wakeups()) return 0;
        pollfd p{e->wait_fd(), POLLIN, 0};
        if (::poll(&p, 1, 0) <= 0) {
          *quiet = w.wakeups();
          return 0;
        }
        *asleep = false;
        w.note("woken ", who);
      }
      const int n = e->poll();
      if (n == 0) {
        // prepare_wait drains the fd before it arms; a device that made it
        // readable again while arming moved the count, and then the kernel
        // is asked.
        const uint64_t before = w.wakeups();
        auto idle = e->prepare_wait();
        if (!idle) fail(std::string("prepare_wait: ") + idle.status().message());
        else if (*idle) *asleep = true, *quiet = w.wakeups() == before ? before : UINT64_MAX;
      }
      return n;
    };
    bool client_gone = false;  // the client engine was destroyed mid-flight (a fault)
    auto issue = [&]() {
      if (client_gone) return;
      // The first connect must finish before calls are accepted; after a
      // loss they are accepted while the connection re-establishes itself.
      const ConnState cs = conn->state();
      if (cs != ConnState::kReady && cs != ConnState::kReconnecting) return;
      // A batching server's client keeps at most kWindow calls unfinished,
      // as an application with a fixed number of requests does: a backlog
      // of them all would make any client ask for its whole window.
      const bool windowed = sctx.batch.size != 0;
      while (next < ncalls && conn->outstanding() < kWindow && (!windowed || next - rc.done_once < kWindow) &&
             !conn->failed()) {
        CallState& s = calls[next];
        s.index = next;
        s.run = &rc;
        s.proc = static_cast<Proc>(1 + w.draw_below(5));
        s.buf = nullptr;
        Call c;
        c.prog = kProg, c.vers = kVers, c.proc = s.proc;
        c.done = on_done;
        c.ctx = &s;
        if ((s.proc == kSum || s.proc == kFill) && rc.free_bufs.empty()) return;  // when a call gives one back
        switch (s.proc) {
          case kEcho:
            s.len = 4 * static_cast<uint32_t>(1 + w.draw_below(100));
            s.args.assign(kPattern.of(next), kPattern.of(next) + s.len);
            c.max_results = s.len;
            break;
          case kSum:
            s.len = draw_size(w, kMaxChunk);
            s.buf = rc.free_bufs.back();
            rc.free_bufs.pop_back();
            std::memcpy(s.buf, kPattern.of(next), s.len);
            c.bulk_send = std::span<const uint8_t>(s.buf, s.len);
            c.max_results = 4;
            break;
          case kAppend: {
            s.len = 4;
            const uint32_t a = next;
            s.args.assign(reinterpret_cast<const uint8_t*>(&a), reinterpret_cast<const uint8_t*>(&a) + 4);
            c.max_results = 8;
            break;
          }
          case kFill:
          case kBig: {
            s.len = draw_size(w, s.proc == kFill ? kMaxChunk : kMaxResults);
            uint32_t a[2] = {next, s.len};
            s.args.assign(reinterpret_cast<uint8_t*>(a), reinterpret_cast<uint8_t*>(a) + 8);
            if (s.proc == kFill) {
              s.buf = rc.free_bufs.back();
              rc.free_bufs.pop_back();
              std::memset(s.buf, 0, s.len);
              c.bulk_recv = std::span<uint8_t>(s.buf, s.len);
            } else {
              c.max_results = s.len;
            }
            break;
          }
        }
        c.args = s.args;
        // 15% with a deadline (a decision of 0, a shrinker's simplest, is none).
        if (w.draw_below(1000) >= 850) c.timeout_ns = 1'000'000 + w.draw_below(2'000'000'000);
        // Every other call carries AUTH_SYS credentials.
        if (next % 2 == 0) {
          make_cred(&cred, next);
          c.auth = &cred;
        }
        int r = conn->call(c);
        spoil_cred(&cred);
        w.event("call", "call", next, s.proc == kEcho ? "echo" : s.proc == kSum ? "sum" : s.proc == kFill ? "fill" : s.proc == kBig ? "big" : "append",
                      s.len);
        if (r != 0) {
          w.event("call-refused", "call", next, "rc", static_cast<uint64_t>(r));
          if (s.buf != nullptr) rc.free_bufs.push_back(s.buf), s.buf = nullptr;
          if (r == EAGAIN) return;  // try again later
          s.done = 1;  // refused at call(): no callback is owed
          s.status = CallStatus::kDisconnected;
          ++rc.done_once;
        }
        s.issued = true;
        ++next;
      }
    };

    auto all_done = [&]() {
      if (client_gone) return true;  // its calls were completed by its destruction (checked at the end)
      if (next < ncalls && !conn->failed()) return false;
      return rc.done_once == next;
    };

    uint64_t destroy_client_at = UINT64_MAX;
    auto destroy_client = [&] {
      if (client_gone) return;
      w.note("fault destroy-client-engine");
      w.stale_suspect = 0;  // its shutdown disconnects every QP it has, for no completion
      client.reset();
      conn = nullptr;
      client_gone = true;
    };

    uint64_t it = 0;
    for (; it < ro.max_iterations && !all_done(); ++it) {
      const uint32_t issued_before = next;
      issue();
      if (next != issued_before) client_asleep = false;  // calling is the host at work in the engine
      // pmd/sim checks every buffer an engine gives back to a pool.
      if (w.counters().reclaimed_reachable != 0) rc.fail(w.first_reclaim_violation());
      if (!out.ok) break;  // the first wrong result or double completion ends the schedule
      for (auto& p : plan) {
        PlannedFault& f = p.f;
        if (p.fired || next < f.at) continue;
        if (f.delay > 0) {
          --f.delay;
          continue;
        }
        p.fired = true;
        switch (f.kind) {
          case 0:
            if (sim::SimQp* q = w.pick_connected_qp()) w.fail_qp(q), lost = true;
            break;
          case 1: {
            uint64_t d = 10'000'000 + w.draw_below(12'000'000'000ull);
            server_stalled_until = w.now_ns() + d;
            w.event("fault-stall-server", "for", 0, "ms", d / 1'000'000);
            break;
          }
          case 2:
            if (sim::SimQp* q = w.pick_connected_qp()) w.disconnect_qp(q), lost = true;
            break;
          case 3: {
            uint64_t d = 1'000'000'000 + w.draw_below(6'000'000'000ull);
            w.event("fault-time-jump", "by", 0, "ms", d / 1'000'000);
            w.advance(d);
            client_asleep = server_asleep = false;
            break;
          }
          case 5:
            if (sim::SimQp* q = w.pick_connected_qp()) w.fail_qp_after(q, w.draw_below(12));
            break;
          case 6:
            if (sim::SimQp* q = w.pick_connected_qp()) w.corrupt_next_key(q);
            break;
          case 4:
            // The client's process goes away mid-flight: its engine is
            // destroyed with calls outstanding, each of which must still
            // complete once; the server must let go of the connection.
            destroy_client();
            break;
          case 7:
            // A loss, then the client's process goes away 0-399 iterations
            // later: often while it reconnects, so that its connection
            // request can reach the server and find nobody to accept.
            if (sim::SimQp* q = w.pick_connected_qp()) w.disconnect_qp(q), lost = true;
            destroy_client_at = it + w.draw_below(400);
            w.event("fault-destroy-client-later", "in", static_cast<uint32_t>(destroy_client_at - it), "", 0);
            break;
          case 8:
            // Executed by the server, failed at the client: the call is
            // sent again on the next connection (the duplicate cache's case).
            if (sim::SimQp* q = w.pick_connected_qp()) w.lose_next_ack(q);
            break;
          case 9:
            // A port goes down for 1 us to 3 s and comes back.
            if (sim::SimQp* q = w.pick_connected_qp()) w.link_down(q, 1'000 + w.draw_below(3'000'000'000ull));
            break;
          case 10:
            // A QP fails and its kDisconnected comes twice, the copy late.
            if (sim::SimQp* q = w.pick_connected_qp()) {
              w.duplicate_next_disconnect(q);
              w.fail_qp(q), lost = true;
            }
            break;
          case 11:
            // Finite RNR retries (0-7, 10 us - 10 ms apart): a SEND that
            // finds no receive fails after them. Credits kept, none does.
            if (sim::SimQp* q = w.pick_connected_qp())
              w.rnr_retry(q, static_cast<uint32_t>(w.draw_below(8)), 10'000 + w.draw_below(10'000'000));
            break;
          case 12: {
            // The server's process goes away mid-flight and is started
            // again 0.1-3 s later: its calls in progress (held ones too)
            // are lost with it; the client reconnects and sends them again.
            if (server == nullptr) break;
            const uint64_t d = 100'000'000 + w.draw_below(2'900'000'000ull);
            w.event("fault-destroy-server-engine", "back-in-ms", static_cast<uint32_t>(d / 1'000'000), "", 0);
            destroy_server();
            lost = true;
            server_down_until = w.now_ns() + d;
            break;
          }
        }
      }
      if (server == nullptr && w.now_ns() >= server_down_until) {
        w.note("server engine made again");
        if (!make_server()) break;
      }
      if (it == destroy_client_at) destroy_client();
      sync(it);
      int work = 0;
      if (w.draw_below(2) == 0) {
        if (!client_gone) work += drive(client.get(), &client_asleep, &client_quiet, "client");
      } else if (w.now_ns() >= server_stalled_until && server != nullptr) {
        work += drive(server.get(), &server_asleep, &server_quiet, "server");
        const size_t held = sctx.later.size() + sctx.batch.calls.size();
        answer_due(&sctx);
        // Answering is the host at work in the engine: it is awake.
        if (sctx.later.size() + sctx.batch.calls.size() != held) server_asleep = false;
      }
      if (!out.ok) break;
      // Nobody awake to poll (asleep, stalled or gone) while the device has
      // work: it goes on by itself, as hardware does while its hosts sleep
      // (an armed device also runs in its own calls, but a fault the loop
      // injects reaches it from outside them).
      if (wait_mode && work == 0 && (client_gone || client_asleep) &&
          (server == nullptr || server_asleep || w.now_ns() < server_stalled_until))
        (void)w.step();  // nothing when nothing is runnable (it draws nothing then)
      // Nothing runnable and nobody busy: time passes until a timer is due.
      if (work == 0 && !w.runnable()) {
        if (++idle_rounds > 8) {
          // Before time moves on: a sleeping engine whose fd stayed quiet
          // must have nothing to do. Its device has run what it could
          // while armed, so work found now is a wake-up lost.
          const auto lost_wakeup = [&](Engine* e, bool* asleep, uint64_t* quiet, const char* who) {
            if (!*asleep) return;
            if (*quiet != w.wakeups()) {  // else quiet still (drive())
              pollfd p{e->wait_fd(), POLLIN, 0};
              if (::poll(&p, 1, 0) > 0) return;
            }
            *asleep = false;
            if (const int n = e->poll(); n > 0)
              fail(std::string("the ") + who + " engine slept with work to do (" + std::to_string(n) +
                   "): a wake-up lost");
          };
          if (!client_gone) lost_wakeup(client.get(), &client_asleep, &client_quiet, "client");
          if (server != nullptr && w.now_ns() >= server_stalled_until)
            lost_wakeup(server.get(), &server_asleep, &server_quiet, "server");
          if (!out.ok) break;
          // 0.1 ms to ~100 ms, small ones as often as large ones: timers
          // are reached both exactly and overshot.
          w.advance((100'000 << w.draw_below(11)) + w.draw_below(100'000));
          client_asleep = server_asleep = false;  // a timer of theirs may be due now
          idle_rounds = 0;
        }
      } else {
        idle_rounds = 0;
      }
    }
    out.iterations = it;
    if (out.ok && it >= ro.max_iterations) fail("the calls did not all complete within the iteration budget");
    if (server == nullptr) {
      // Destroyed by a fault and not yet made again: it comes back now, so
      // that the close and the accounting below have a server.
      if (w.now_ns() < server_down_until) w.advance(server_down_until - w.now_ns());
      w.note("server engine made again");
      if (!make_server()) {
        client.reset();
        destroy_server();
        return out;
      }
    }

    // Idle: the server gives everything back once the calls are done and
    // the device has completed what it was doing; the client once its
    // connection is closed (its last unsignaled Sends wait for a signaled
    // completion that an idle connection never has: the send-context ring).
    auto settle = [&](auto&& idle, const char* what) {
      for (uint64_t k = 0; k < 200'000 && !idle(); ++k) {
        sync(it + k);
        if (w.draw_below(2) == 0) {
          if (!client_gone) (void)client->poll();
        } else {
          (void)server->poll();
          answer_due(&sctx);
        }
        if (k % 64 == 63) w.advance(1'000'000);
      }
      if (!idle())
        fail(std::string("not idle ") + what + ": client " +
             (client_gone ? std::string("destroyed") : testing::accounting(*client).to_string()) + "; server " +
             testing::accounting(*server).to_string() + ", " + std::to_string(server->stats().connections.get()) +
             " connections");
    };
    // The client holds nothing outside its pools; a registration cache
    // keeps its entries (up to its size) registered until the engine ends.
    auto client_idle = [&] {
      testing::Accounting a = testing::accounting(*client);
      if (reg_cache && a.mrs_registered <= kRegCacheEntries) a.mrs_registered = 0;
      return a.idle();
    };
    // No call will come any more: a batching server answers what it holds
    // (copies of calls sent again, calls whose callers gave up) at once
    // rather than at the bound, which the settling would poll its way to.
    if (!sctx.batch.calls.empty()) release_batch(&sctx);
    if (out.ok) settle([&] { return !w.runnable() && testing::accounting(*server).idle(); }, "after the calls");
    // No call is left, so no peer may reach any memory: every registration
    // a call made has ended (the device's own view, not the engine's).
    if (out.ok && w.counters().live_regs() != 0)
      fail(std::to_string(w.counters().live_regs()) + " fast registrations still valid with no call left");
    w.note("closing");
    w.stale_suspect = 0;  // the close disconnects for no completion
    if (out.ok && !client_gone) conn->close();
    if (out.ok)
      settle(
          [&] {
            return !w.runnable() && (client_gone || client_idle()) &&
                   testing::accounting(*server).idle() && server->stats().connections.get() == 0;
          },
          "after the close");
    client.reset();
    destroy_server();
  }
  if (!app.error.empty()) fail(app.error);
  if (!sctx.error.empty()) fail(sctx.error);
  // The end of the schedule.
  for (uint32_t i = 0; i < ncalls; ++i) {
    const CallState& s = calls[i];
    if (s.issued && s.done == 0) fail("call " + std::to_string(i) + " never completed");
  }
  const sim::WorldCounters& c = w.counters();
  if (c.live_regs() != 0)
    fail("fast registrations never ended: " + std::to_string(c.fast_regs) + " made, " + std::to_string(c.local_invs) +
         " local inv, " + std::to_string(c.remote_invs) + " remote inv, " + std::to_string(c.destroyed_valid) +
         " destroyed registered");
  if (c.inv_of_invalid != 0) fail(std::to_string(c.inv_of_invalid) + " invalidations of registrations already ended");
  // A driver that must re-key an MR a peer invalidated (rxe's windows) did
  // not get the chance: the engine reused it without FastMr::retire().
  if (c.reg_unretired != 0)
    fail(std::to_string(c.reg_unretired) + " REG_MRs of an MR a remote invalidation ended, not retired since");
  if (c.cq_overruns != 0) fail(std::to_string(c.cq_overruns) + " CQ overruns");
  if (c.reclaimed_reachable != 0) fail(w.first_reclaim_violation());
  // A late completion of a destroyed QP (World::late_receives) is that QP's:
  // a live connection whose QP has its number since must not be dropped
  // for it.
  if (c.stale_acted_on != 0)
    fail(std::to_string(c.stale_acted_on) + " live QPs disconnected by their host on a completion of a destroyed QP "
         "that had their number");
  // Credits kept: a peer sends only what the other side's posted receives
  // back (its grant, or the replies its calls await), so no SEND ever waits
  // for a receive.
  if (c.rnr_waits != 0)
    fail("credits not backed by receives: " + std::to_string(c.rnr_waits) + " SENDs found no receive posted (RNR)");
  char sum_line[300];
  std::snprintf(sum_line, sizeof sum_line,
                "end events=%" PRIu64 " regs=%" PRIu64 " linv=%" PRIu64 " rinv=%" PRIu64 " destroyed=%" PRIu64
                " qp_errors=%" PRIu64 " flushed=%" PRIu64 " faults=%" PRIu64 " rnr_waits=%" PRIu64
                " rnr_naks=%" PRIu64 " acks_lost=%" PRIu64 " link_failures=%" PRIu64 " stale_cqes=%" PRIu64
                " on_recycled=%" PRIu64 " late_recvs=%" PRIu64,
                c.events, c.fast_regs, c.local_invs, c.remote_invs, c.destroyed_valid, c.qp_errors, c.flushed, c.faults,
                c.rnr_waits, c.rnr_naks, c.acks_lost, c.link_failures, c.stale_completions, c.stale_on_recycled, c.late_recvs);
  w.note(sum_line);
  out.hash = w.trace_hash();
  out.events = c.events;
  if (ro.keep_trace) out.trace = w.trace();
  return out;
}

// ---------------------------------------------------------------- schedules as text

const char* bug_name(Bug b) {
  return b == Bug::kFillAfterLoss ? "fill-after-loss" : b == Bug::kCrashAfterLoss ? "crash-after-loss" : "none";
}
bool bug_from(const std::string& s, Bug* b) {
  if (s == "none") *b = Bug::kNone;
  else if (s == "fill-after-loss") *b = Bug::kFillAfterLoss;
  else if (s == "crash-after-loss") *b = Bug::kCrashAfterLoss;
  else return false;
  return true;
}

// "kind@at+delay,..." (the plan's faults).
std::string faults_text(const std::vector<PlannedFault>& fs) {
  std::string t;
  for (const auto& f : fs) {
    if (!t.empty()) t += ',';
    t += std::to_string(f.kind) + '@' + std::to_string(f.at) + '+' + std::to_string(f.delay);
  }
  return t.empty() ? "none" : t;
}
bool faults_from(const std::string& s, std::vector<PlannedFault>* fs) {
  fs->clear();
  if (s == "none" || s.empty()) return true;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    PlannedFault f;
    if (std::sscanf(item.c_str(), "%u@%u+%u", &f.kind, &f.at, &f.delay) != 3 || f.kind >= kFaultKinds) return false;
    fs->push_back(f);
  }
  return true;
}

// A replay file: the schedule, and the decisions run-length coded ("v*n").
bool write_replay(const std::string& path, const Schedule& s) {
  std::ofstream f(path);
  f << "tern-sim-replay 1\nseed " << s.seed << "\ncalls " << s.calls << "\nbug " << bug_name(s.bug) << "\nfaults "
    << (s.faults_given ? faults_text(s.faults) : "drawn") << "\ndecisions " << (s.tape_given ? s.tape.size() : 0)
    << "\n";
  size_t tokens = 0;
  if (s.tape_given)
    for (size_t i = 0; i < s.tape.size();) {
      size_t j = i;
      while (j < s.tape.size() && s.tape[j] == s.tape[i]) ++j;
      f << s.tape[i];
      if (j - i > 1) f << '*' << (j - i);
      f << (++tokens % 16 == 0 ? '\n' : ' ');
      i = j;
    }
  return static_cast<bool>(f);
}

bool read_replay(const std::string& path, Schedule* s) {
  std::ifstream f(path);
  std::string magic, key, val;
  int version = 0;
  if (!(f >> magic >> version) || magic != "tern-sim-replay" || version != 1) return false;
  size_t n = 0;
  for (int i = 0; i < 5; ++i) {
    if (!(f >> key >> val)) return false;
    if (key == "seed") s->seed = std::strtoull(val.c_str(), nullptr, 0);
    else if (key == "calls") s->calls = static_cast<uint32_t>(std::strtoul(val.c_str(), nullptr, 0));
    else if (key == "bug") { if (!bug_from(val, &s->bug)) return false; }
    else if (key == "faults") {
      s->faults_given = val != "drawn";
      if (s->faults_given && !faults_from(val, &s->faults)) return false;
    } else if (key == "decisions") n = std::strtoull(val.c_str(), nullptr, 0);
    else return false;
  }
  s->tape.clear();
  s->tape_given = n > 0;
  std::string tok;
  while (s->tape.size() < n && f >> tok) {
    uint64_t v = std::strtoull(tok.c_str(), nullptr, 0), k = 1;
    if (auto star = tok.find('*'); star != std::string::npos) k = std::strtoull(tok.c_str() + star + 1, nullptr, 0);
    s->tape.insert(s->tape.end(), k, v);
  }
  return s->tape.size() == n;
}

// ---------------------------------------------------------------- reporting

std::string g_argv0 = "tern-sim";

std::string replay_command(const Schedule& s) {
  std::string c = g_argv0 + " --seed=" + std::to_string(s.seed);
  if (s.calls != kCalls) c += " --calls=" + std::to_string(s.calls);
  if (s.faults_given) c += " --faults=" + faults_text(s.faults);
  if (s.bug != Bug::kNone) c += std::string(" --inject-bug=") + bug_name(s.bug);
  if (g_wait_mode != 0) c += " --wait-mode=" + std::to_string(g_wait_mode);
  return c + " --trace";
}

void report_failure(const Schedule& s, const Outcome& o) {
  std::printf("FAIL seed %" PRIu64 ": %s\n", s.seed, o.why.c_str());
  std::printf("replay: %s\n", replay_command(s).c_str());
  // The run kept no trace (formatting it was a large part of its cost):
  // the same schedule again, with it.
  RunOptions ro;
  ro.keep_trace = true;
  Outcome t = run(s, ro);
  if (t.hash != o.hash)
    std::printf("(the second run of the schedule differed: trace hash %016" PRIx64 " then %016" PRIx64 ")\n", o.hash,
                t.hash);
  std::printf("last %zu trace lines:\n", t.trace.size());
  for (const auto& l : t.trace) std::printf("  %s\n", l.c_str());
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
double wall_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---------------------------------------------------------------- shrinking

// What kind of failure: its message without numbers (the call, the counts),
// so that a reduced schedule must fail the same way, not any way.
std::string signature(const std::string& why) {
  std::string s;
  for (char ch : why)
    if (ch < '0' || ch > '9') s += ch;
  return s;
}

// Runs a schedule in a child process and reads its outcome, or, when the
// child dies, what its Progress says: a crash fails as "crashed (signal N)"
// (or "died (exit N)": a sanitizer's report) with the events, iterations,
// faults and decisions up to its last iteration. *rec gets the decisions.
Outcome run_isolated(const Schedule& s, RunOptions ro, std::vector<uint64_t>* rec) {
  static Progress* pr = [] {
    void* p = mmap(nullptr, sizeof(Progress), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<Progress*>(p);
  }();
  Outcome o;
  int fd[2];
  if (pr == nullptr || pipe(fd) != 0) {
    o.ok = false, o.why = "cannot run a child";
    return o;
  }
  pr->events = pr->iterations = pr->ndec = 0;
  pr->nfaults = 0;
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, SIG_DFL);
    std::vector<uint64_t> local;
    ro.record = &local;
    ro.progress = pr;
    Outcome c = run(s, ro);
    for (uint64_t i = pr->ndec; i < local.size() && i < Progress::kMaxDecisions; ++i) pr->dec[i] = local[i];
    pr->ndec = std::min<uint64_t>(local.size(), Progress::kMaxDecisions);
    pr->events = c.events, pr->iterations = c.iterations;
    std::string m = std::string(c.ok ? "1 " : "0 ") + std::to_string(c.hash) + " " + c.why;
    (void)!write(fd[1], m.data(), m.size());
    std::fflush(stdout);
    _exit(0);
  }
  close(fd[1]);
  std::string m;
  char buf[4096];
  for (ssize_t n; (n = read(fd[0], buf, sizeof buf)) > 0;) m.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  int st = 0;
  (void)waitpid(pid, &st, 0);
  o.events = pr->events, o.iterations = pr->iterations;
  o.faults.assign(pr->faults, pr->faults + pr->nfaults);
  rec->assign(pr->dec, pr->dec + pr->ndec);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && m.size() >= 2) {
    o.ok = m[0] == '1';
    const size_t sp = m.find(' ', 2);
    o.hash = std::strtoull(m.c_str() + 2, nullptr, 10);
    o.why = sp == std::string::npos ? std::string() : m.substr(sp + 1);
  } else {
    o.ok = false;
    o.why = WIFSIGNALED(st) ? "crashed (signal " + std::to_string(WTERMSIG(st)) + ")"
                            : "died (exit " + std::to_string(WIFEXITED(st) ? WEXITSTATUS(st) : -1) + ")";
  }
  return o;
}

// Reduces a failing schedule to fewer faults, fewer calls and the simplest
// scheduler decisions (each 0: the first runnable event, no extra progress,
// the shortest time step, the first shape) that still fail the same way,
// never with more events. Each candidate runs with an iteration budget a
// little above the failing run's, so that one that merely hangs is
// rejected quickly.
class Shrinker {
 public:
  Shrinker(Schedule s, uint64_t max_runs, double max_seconds)
      : best_(std::move(s)), max_runs_(max_runs), deadline_(wall_seconds() + max_seconds) {}

  bool start() {
    // The first run in a child: if it crashes, so do candidates, and every
    // one runs in a child (a fork each, ~10x slower); otherwise in this
    // process (a candidate that crashes ends the shrink).
    best_out_ = run_isolated(best_, RunOptions{}, &best_tape_);
    isolate_ = best_out_.why.rfind("crashed", 0) == 0 || best_out_.why.rfind("died", 0) == 0;
    ++runs_;
    if (best_out_.ok) return false;
    sig_ = signature(best_out_.why);
    first_tape_size_ = best_tape_.size();
    first_tape_nonzero_ = static_cast<size_t>(
        std::count_if(best_tape_.begin(), best_tape_.end(), [](uint64_t x) { return x != 0; }));
    first_ = best_out_;
    first_sched_ = best_;
    // From here on the faults are explicit: a candidate drops one.
    best_.faults = best_out_.faults;
    best_.faults_given = true;
    return true;
  }

  void shrink() {
    for (int round = 0; round < 3; ++round) {
      bool progress = shrink_faults();
      progress |= shrink_calls();
      if (!progress) break;
    }
    // Then the decisions, with the schedule's own as the start.
    best_.tape = best_tape_;
    best_.tape_given = true;
    shrink_tape();
  }

  const Schedule& best() const { return best_; }
  const Outcome& best_outcome() const { return best_out_; }
  const Outcome& first() const { return first_; }
  const Schedule& first_schedule() const { return first_sched_; }
  uint64_t runs() const { return runs_; }
  size_t first_tape_size() const { return first_tape_size_; }
  size_t first_tape_nonzero() const { return first_tape_nonzero_; }

 private:
  bool budget() const { return runs_ < max_runs_ && wall_seconds() < deadline_; }

  bool attempt(const Schedule& cand) {
    if (!budget()) return false;
    ++runs_;
    std::vector<uint64_t> rec;
    RunOptions ro;
    ro.max_iterations = best_out_.iterations * 2 + 20'000;
    Outcome o;
    if (isolate_) {
      o = run_isolated(cand, ro, &rec);
    } else {
      ro.record = &rec;
      o = run(cand, ro);
    }
    if (o.ok || signature(o.why) != sig_ || o.events > best_out_.events) return false;
    best_ = cand;
    best_out_ = std::move(o);
    best_tape_ = std::move(rec);
    if (best_.tape_given) best_.tape = best_tape_;  // exactly the decisions it took
    return true;
  }

  bool shrink_faults() {
    bool progress = false;
    for (size_t i = best_.faults.size(); i-- > 0;) {
      Schedule c = best_;
      c.faults.erase(c.faults.begin() + static_cast<std::ptrdiff_t>(i));
      progress |= attempt(c);
    }
    // Each that stays strikes as early as it still does its harm: no
    // delay, then after fewer calls (halving), so that fewer calls are needed.
    for (size_t i = 0; i < best_.faults.size(); ++i) {
      if (best_.faults[i].delay != 0) {
        Schedule c = best_;
        c.faults[i].delay = 0;
        progress |= attempt(c);
      }
      for (uint32_t at = best_.faults[i].at / 2; at > 0 && at < best_.faults[i].at; at /= 2) {
        Schedule c = best_;
        c.faults[i].at = at;
        if (!attempt(c)) break;
        progress = true;
      }
    }
    return progress;
  }

  bool shrink_calls() {
    // The first count that still fails, from one call up: few enough runs
    // for a budget, and the smallest wins.
    static const uint32_t kTry[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 80};
    for (uint32_t n : kTry) {
      if (n >= best_.calls) break;
      Schedule c = best_;
      c.calls = n;
      if (attempt(c)) return true;
    }
    return false;
  }

  void shrink_tape() {
    // ddmin's chunks, halving: each chunk of decisions is set to 0 (the
    // simplest choice) when the schedule still fails the same way without
    // more events.
    size_t chunk = std::max<size_t>(best_.tape.size() / 2, 1);
    while (budget()) {
      for (size_t at = 0; at < best_.tape.size() && budget(); at += chunk) {
        const size_t end = std::min(at + chunk, best_.tape.size());
        if (std::all_of(best_.tape.begin() + static_cast<std::ptrdiff_t>(at),
                        best_.tape.begin() + static_cast<std::ptrdiff_t>(end), [](uint64_t v) { return v == 0; }))
          continue;
        Schedule c = best_;
        std::fill(c.tape.begin() + static_cast<std::ptrdiff_t>(at), c.tape.begin() + static_cast<std::ptrdiff_t>(end),
                  0);
        (void)attempt(c);
      }
      if (chunk == 1) break;
      chunk = std::max<size_t>(chunk / 2, 1);
    }
  }

  Schedule best_;
  Outcome best_out_, first_;
  Schedule first_sched_;
  std::vector<uint64_t> best_tape_;
  std::string sig_;
  size_t first_tape_size_ = 0, first_tape_nonzero_ = 0;
  bool isolate_ = false;
  uint64_t runs_ = 0, max_runs_;
  double deadline_;
};

size_t nonzero(const std::vector<uint64_t>& v) {
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](uint64_t x) { return x != 0; }));
}

// Shrinks a failing schedule, writes the replay file, checks that it
// replays the failure. 0: reduced and checked; 1: it did not fail; 2: the
// replay did not fail the same way.
int shrink_and_report(const Schedule& s, uint64_t max_runs, double max_seconds, const std::string& out_path,
                      bool quiet) {
  const double t0 = wall_seconds();
  Shrinker sh(s, max_runs, max_seconds);
  if (!sh.start()) {
    std::printf("seed %" PRIu64 " does not fail: nothing to shrink\n", s.seed);
    return 1;
  }
  sh.shrink();
  const Schedule& b = sh.best();
  const Outcome& o = sh.best_outcome();
  const Outcome& f = sh.first();
  const std::string path = out_path.empty() ? "tern-sim-" + std::to_string(s.seed) + ".replay" : out_path;
  if (!write_replay(path, b)) {
    std::printf("cannot write %s\n", path.c_str());
    return 2;
  }
  std::printf("shrunk seed %" PRIu64 " in %" PRIu64 " runs, %.1f s: %s\n", s.seed, sh.runs(), wall_seconds() - t0,
              o.why.c_str());
  std::printf("  faults %zu -> %zu (%s), calls %u -> %u, events %" PRIu64 " -> %" PRIu64
              ", decisions other than the simplest %zu of %zu -> %zu of %zu\n",
              f.faults.size(), b.faults.size(), faults_text(b.faults).c_str(), sh.first_schedule().calls, b.calls,
              f.events, o.events, sh.first_tape_nonzero(), sh.first_tape_size(), nonzero(b.tape), b.tape.size());
  std::printf("replay: %s --replay=%s --trace\n", g_argv0.c_str(), path.c_str());
  // The test hook's bug needs exactly one fault that drops the connection:
  // a shrinker that leaves more has not done its work.
  const auto drops = [](const PlannedFault& f) { return f.kind == 0 || f.kind == 2 || f.kind == 7 || f.kind == 10 || f.kind == 12; };
  if (s.bug != Bug::kNone && (b.faults.size() != 1 || !drops(b.faults[0]))) {
    std::printf("FAIL: the injected bug needs one connection-dropping fault; the reduced schedule has %s\n",
                faults_text(b.faults).c_str());
    return 3;
  }
  // The file alone must give the same failure, byte for byte.
  Schedule again;
  if (!read_replay(path, &again)) {
    std::printf("FAIL: cannot read back %s\n", path.c_str());
    return 2;
  }
  std::vector<uint64_t> ignored;
  const bool crash = o.why.rfind("crashed", 0) == 0 || o.why.rfind("died", 0) == 0;
  Outcome r = run_isolated(again, RunOptions{}, &ignored);
  if (r.ok || signature(r.why) != signature(o.why) || (!crash && r.hash != o.hash)) {
    std::printf("FAIL: the replay file gave %s (trace hash %016" PRIx64 ", the reduced run's %016" PRIx64 ")\n",
                r.ok ? "no failure" : r.why.c_str(), r.hash, o.hash);
    return 2;
  }
  if (!quiet && !crash) {
    RunOptions ro;
    ro.keep_trace = true;
    Outcome t = run(again, ro);
    std::printf("its trace (%zu lines):\n", t.trace.size());
    for (const auto& l : t.trace) std::printf("  %s\n", l.c_str());
  }
  return 0;
}

// ---------------------------------------------------------------- batches

// A crash (a SIGSEGV, an engine check's abort) in the middle of a batch
// still names its schedule: the handler prints the seed and the replay
// command with write(2) only, then lets the signal kill the process.
volatile uint64_t g_current_seed = 0;
char g_crash_cmd[512];

void put_u64(char* buf, size_t* n, uint64_t v) {
  char d[24];
  int k = 0;
  do d[k++] = static_cast<char>('0' + v % 10), v /= 10;
  while (v != 0);
  while (k > 0) buf[(*n)++] = d[--k];
}

void on_crash(int sig) {
  char buf[700];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s != 0 && n < sizeof buf - 1) buf[n++] = *s++;
  };
  put(sig == 0 ? "CRASH (a sanitizer's report" : "CRASH (signal ");
  if (sig != 0) put_u64(buf, &n, static_cast<uint64_t>(sig));
  put(") in seed ");
  put_u64(buf, &n, g_current_seed);
  put("\nreplay: ");
  put(g_crash_cmd);
  put(" --seed=");
  put_u64(buf, &n, g_current_seed);
  put(" --trace\n");
  (void)!write(1, buf, n);
  if (sig == 0) return;  // a sanitizer's death: it exits by itself
  signal(sig, SIG_DFL);
  raise(sig);
}

// A sanitizer's report ends the process through its own exit, not a
// signal: it calls this first (when the program runs under one).
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));
void on_sanitizer_death() { on_crash(0); }

void catch_crashes(const Schedule& base) {
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(on_sanitizer_death);
  std::snprintf(g_crash_cmd, sizeof g_crash_cmd, "%s%s%s", g_argv0.c_str(),
                base.bug != Bug::kNone ? " --inject-bug=" : "", base.bug != Bug::kNone ? bug_name(base.bug) : "");
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, on_crash);
}

struct BatchResult {
  uint64_t schedules = 0, failed = 0, events = 0;
  uint64_t first_failed = 0;
};

BatchResult run_batch(uint64_t from, uint64_t count, uint64_t stride, uint64_t offset, Bug bug, uint32_t report_max) {
  BatchResult r;
  for (uint64_t k = offset; k < count; k += stride) {
    Schedule s;
    s.seed = from + k;
    s.bug = bug;
    g_current_seed = s.seed;
    std::fflush(stdout);
    Outcome o = run(s, RunOptions{});
    ++r.schedules;
    r.events += o.events;
    if (!o.ok) {
      if (r.failed == 0) r.first_failed = s.seed;
      if (++r.failed <= report_max) report_failure(s, o);
    }
  }
  return r;
}

bool arg_u64(const char* a, const char* name, uint64_t* v) {
  size_t n = std::strlen(name);
  if (std::strncmp(a, name, n) != 0 || a[n] != '=') return false;
  *v = std::strtoull(a + n + 1, nullptr, 0);
  return true;
}
bool arg_str(const char* a, const char* name, std::string* v) {
  size_t n = std::strlen(name);
  if (std::strncmp(a, name, n) != 0 || a[n] != '=') return false;
  *v = a + n + 1;
  return true;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --seed=N [--trace] [--shrink] | --seeds=N [--from=S] [--jobs=J] [--shrink]\n"
               "          | --determinism[=S] | --replay=FILE [--trace]\n"
               "  schedule: [--calls=N] [--faults=kind@at+delay,...|none] [--inject-bug=fill-after-loss|crash-after-loss]\n"
               "            [--wait-mode=0|1|2] (engines sleep when idle: never, a third of the schedules, all)\n"
               "  shrink:   [--shrink-runs=N] [--shrink-seconds=S] [--out=FILE] [--expect-fail]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  g_argv0 = argv[0];
  uint64_t seed = 0, seeds = 0, from = 1, det = 0, jobs = 1, calls = kCalls, shrink_runs = 4000, shrink_s = 120;
  bool one = false, trace = false, determinism = false, shrink = false, expect_fail = false;
  std::string replay, faults, bug = "none", out;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (arg_u64(a, "--seed", &seed)) one = true;
    else if (arg_u64(a, "--seeds", &seeds)) {}
    else if (arg_u64(a, "--from", &from)) {}
    else if (arg_u64(a, "--jobs", &jobs)) {}
    else if (arg_u64(a, "--calls", &calls)) {}
    else if (arg_u64(a, "--wait-mode", &g_wait_mode)) {}
    else if (arg_str(a, "--faults", &faults)) {}
    else if (arg_str(a, "--inject-bug", &bug)) {}
    else if (arg_str(a, "--replay", &replay)) {}
    else if (arg_str(a, "--out", &out)) {}
    else if (arg_u64(a, "--shrink-runs", &shrink_runs)) {}
    else if (arg_u64(a, "--shrink-seconds", &shrink_s)) {}
    else if (std::strcmp(a, "--shrink") == 0) shrink = true;
    else if (std::strcmp(a, "--expect-fail") == 0) expect_fail = true;
    else if (std::strcmp(a, "--trace") == 0) trace = true;
    else if (std::strcmp(a, "--determinism") == 0) determinism = true, det = 7;
    else if (arg_u64(a, "--determinism", &det)) determinism = true;
    else return usage(argv[0]);
  }
  Schedule base;
  if (!bug_from(bug, &base.bug)) return usage(argv[0]);
  base.calls = static_cast<uint32_t>(std::clamp<uint64_t>(calls, 1, kCalls));
  if (!faults.empty()) {
    base.faults_given = true;
    if (!faults_from(faults, &base.faults)) return usage(argv[0]);
  }
  if (jobs == 0 || jobs > 256) return usage(argv[0]);
  set_log_level(LogLevel::kInfo);  // into the trace (TERN_SIM_LOG: and to stderr)

  if (one || !replay.empty()) {
    Schedule s = base;
    if (!replay.empty() && !read_replay(replay, &s)) {
      std::fprintf(stderr, "%s: not a replay file\n", replay.c_str());
      return 2;
    }
    if (one) s.seed = seed;
    if (shrink) {
      int rc = shrink_and_report(s, shrink_runs, static_cast<double>(shrink_s), out, false);
      return expect_fail ? (rc == 0 ? 0 : 1) : (rc == 1 ? 0 : 1);
    }
    RunOptions ro;
    ro.keep_trace = trace;
    ro.trace_lines = 0;
    Outcome o = run(s, ro);
    if (trace)
      for (const auto& l : o.trace) std::printf("%s\n", l.c_str());
    if (!o.ok) {
      std::printf("FAIL seed %" PRIu64 ": %s\n", s.seed, o.why.c_str());
      std::printf("replay: %s\n",
                  replay.empty() ? replay_command(s).c_str() : (g_argv0 + " --replay=" + replay + " --trace").c_str());
      return expect_fail ? 0 : 1;
    }
    std::printf("seed %" PRIu64 ": ok, %" PRIu64 " events, trace hash %016" PRIx64 "\n", s.seed, o.events, o.hash);
    return expect_fail ? 1 : 0;
  }

  if (determinism) {
    Schedule s = base;
    s.seed = det;
    Schedule t = s;
    t.seed = det + 1;
    RunOptions traced;
    traced.keep_trace = true;
    // First in a child, before this process has run anything, as the
    // shrinker's first run: whatever a process sets up once (a hash key, a
    // counter) must not reach the schedule.
    std::vector<uint64_t> tape;
    Outcome k = run_isolated(s, RunOptions{}, &tape);
    Outcome a = run(s, RunOptions{}), b = run(t, RunOptions{}), c = run(s, traced);
    std::printf("seed %" PRIu64 ": trace hash %016" PRIx64 " then %016" PRIx64 " with the trace kept, %016" PRIx64
                " in a child (seed %" PRIu64 " between: %016" PRIx64 ")\n",
                det, a.hash, c.hash, k.hash, det + 1, b.hash);
    if (!a.ok) report_failure(s, a);
    if (a.hash != c.hash || a.hash != k.hash || a.hash == b.hash) {
      std::printf("FAIL: the same seed gave different schedules (or two seeds the same)\n");
      return 1;
    }
    return a.ok && b.ok && c.ok ? 0 : 1;
  }

  if (seeds == 0) seeds = 20;
  catch_crashes(base);
  const double c0 = cpu_seconds(), w0 = wall_seconds();
  BatchResult total;
  if (jobs == 1) {
    total = run_batch(from, seeds, 1, 0, base.bug, 3);
  } else {
    // Processes, not threads: the virtual clock is process-wide. Job k runs
    // seeds from+k, from+k+J, ...; each prints its own failures.
    std::vector<pid_t> kids;
    std::vector<int> pipes;
    std::fflush(stdout);
    for (uint64_t k = 0; k < jobs; ++k) {
      int fd[2];
      if (pipe(fd) != 0) return 2;
      pid_t p = fork();
      if (p == 0) {
        close(fd[0]);
        BatchResult r = run_batch(from, seeds, jobs, k, base.bug, 3);
        std::fflush(stdout);
        (void)!write(fd[1], &r, sizeof r);
        _exit(0);
      }
      close(fd[1]);
      kids.push_back(p);
      pipes.push_back(fd[0]);
    }
    for (size_t k = 0; k < kids.size(); ++k) {
      BatchResult r;
      int st = 0;
      bool got = read(pipes[k], &r, sizeof r) == static_cast<ssize_t>(sizeof r);
      close(pipes[k]);
      (void)waitpid(kids[k], &st, 0);
      if (!got || !WIFEXITED(st)) {
        std::printf("job %zu died\n", k);
        ++total.failed;
        continue;
      }
      total.schedules += r.schedules, total.events += r.events;
      if (r.failed != 0 && (total.failed == 0 || r.first_failed < total.first_failed)) total.first_failed = r.first_failed;
      total.failed += r.failed;
    }
  }
  // CPU time (user and system) of this process, or of the jobs: what a
  // schedule costs a core, less sensitive than wall time to a loaded machine.
  double cpu = cpu_seconds() - c0;
  if (jobs > 1) {
    rusage ru{};
    getrusage(RUSAGE_CHILDREN, &ru);
    cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
          static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  }
  const double wall = wall_seconds() - w0;
  std::printf("%" PRIu64 " schedules, %" PRIu64 " failed, %" PRIu64
              " events; %.2f s wall, %.2f s CPU in %" PRIu64 " job%s, %.0f schedules per CPU second\n",
              total.schedules, total.failed, total.events, wall, cpu, jobs, jobs == 1 ? "" : "s",
              static_cast<double>(total.schedules) / std::max(cpu, 1e-9));
  if (shrink && total.failed != 0) {
    Schedule s = base;
    s.seed = total.first_failed;
    int rc = shrink_and_report(s, shrink_runs, static_cast<double>(shrink_s), out, true);
    if (expect_fail) return rc == 0 ? 0 : 1;
  }
  if (expect_fail) return total.failed != 0 ? 0 : 1;
  return total.failed == 0 ? 0 : 1;
}
