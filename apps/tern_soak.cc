// tern-soak: the seeded fault soak of recovery (docs/reliability.md).
//
// A supervisor forks one server process and several client processes that
// talk ONC RPC over RPC-over-RDMA through pmd/shm. Every client runs one or
// more engines with one or more connections each and keeps a window of
// calls in flight on every connection: inline calls (some long enough to go
// as RDMA_NOMSG), calls with a read chunk, with a write chunk, with a reply
// chunk, and non-idempotent calls the server runs through a DuplicateCache.
// Every payload is derived from (seed, client, seq) and checked by the
// server and again in the reply.
//
// Faults, all drawn from seeded generators:
//   in each client (engine_testing.h's inject_fault on a random
//   connection): the QP dropped as a dead peer would (kDropConnection), a QP
//   error after a few more WRs (kFailAfterWrs), Send completions held back
//   (kDelayCompletions), the connection closed by the host and made anew,
//   a call cancelled;
//   by the supervisor: SIGKILL of a client (restarted), SIGKILL of the
//   server (restarted: clients reconnect and retransmit), the server
//   stopped (SIGSTOP) past the clients' keepalive, then continued;
//   with --flap-netdev, the RDMA port taken down and up again (`ip link
//   set NETDEV down`, up again after --flap-down-ms), --flaps times, each
//   followed by a check that every client completes calls again.
//
// At the end every client stops calling, waits for its calls, closes its
// connections, checks that each engine is idle (testing::accounting) and
// destroys it; the server does the same once the clients are gone. The
// report's invariants must all be 0, or the exit status is 1.
//
// Every process writes its counters into one shared mapping as it goes, so
// the figures of a process killed by the soak are kept up to its death.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/json.h"
#include "base/log.h"
#include "base/version.h"
#include "cli_args.h"
#include "engine/duplicate_cache.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "rdmadev/rdmadev.h"

using namespace tern;
using namespace tern::rpc;

namespace {

// ---------------------------------------------------------------- counters

// Every counter a process reports, with its name in the report.
#define SOAK_COUNTERS(X)                                                                        \
  /* client calls */                                                                            \
  X(calls, "calls issued")                                                                      \
  X(call_refused, "call() refused (EAGAIN/ENOTCONN), not counted as calls")                     \
  X(completed, "calls completed")                                                               \
  X(ok, "completed ok, payload verified")                                                       \
  X(timed_out_allowed, "kTimedOut of calls with a deadline")                                    \
  X(cancelled_allowed, "kCancelled of calls the soak cancelled")                                \
  X(disc_no_retry, "kDisconnected of no_retry calls")                                           \
  X(disc_host_closed, "kDisconnected of calls on a connection the soak closed")                 \
  X(inflight_at_kill, "calls in flight when their client was SIGKILLed")                        \
  X(with_deadline, "calls with a deadline")                                                     \
  X(no_retry_calls, "calls marked no_retry")                                                    \
  X(retransmitted_calls, "calls completed after being sent again (CallReply::retransmits > 0)") \
  X(p_echo, "inline/long echo calls")                                                           \
  X(p_read, "read-chunk calls")                                                                 \
  X(p_write, "write-chunk calls")                                                               \
  X(p_big, "reply-chunk calls")                                                                 \
  X(p_add, "non-idempotent calls (DuplicateCache)")                                             \
  X(bytes_checked, "payload bytes verified by the clients")                                     \
  X(host_conns, "connections made by the hosts")                                                \
  /* client faults */                                                                           \
  X(f_drop, "fault: QP dropped (kDropConnection)")                                              \
  X(f_qp_error, "fault: QP error (kFailAfterWrs)")                                              \
  X(f_delay, "fault: completions delayed (kDelayCompletions)")                                  \
  X(f_close, "fault: connection closed by the host")                                            \
  X(f_cancel, "fault: call cancelled")                                                          \
  X(f_skipped, "faults drawn on a connection not up (not injected)")                            \
  /* supervisor faults */                                                                       \
  X(f_kill_client, "fault: client SIGKILLed")                                                   \
  X(f_kill_server, "fault: server SIGKILLed")                                                   \
  X(f_stop_server, "fault: server SIGSTOPped past the keepalive")                               \
  X(f_port_flap, "fault: port down, then up (--flap-netdev)")                                   \
  X(server_restarts, "server restarts")                                                         \
  X(client_restarts, "client restarts")                                                         \
  /* engine counters (clients), as last seen */                                                 \
  X(e_reconnects, "engine: reconnects")                                                         \
  X(e_reconnect_attempts, "engine: reconnect attempts")                                         \
  X(e_retransmits, "engine: retransmits")                                                       \
  X(e_late_replies, "engine: late replies dropped")                                             \
  X(e_keepalive_probes, "engine: keepalive probes")                                             \
  X(e_keepalive_failures, "engine: keepalive failures")                                         \
  X(e_declared_dead, "engine: connections declared dead")                                       \
  X(e_cancels, "engine: cancels")                                                               \
  X(e_disconnects, "engine: disconnects")                                                       \
  /* server */                                                                                  \
  X(s_calls, "server: calls handled")                                                           \
  X(s_deferred, "server: calls answered from a later poll")                                     \
  X(s_execs, "server: non-idempotent executions")                                               \
  X(s_drc_hits, "server: retransmissions answered from the DuplicateCache")                     \
  X(s_drc_in_progress, "server: retransmissions held while their first copy ran")               \
  X(s_reply_failed, "server: replies refused (connection gone)")                                \
  /* invariants: all must be 0 */                                                               \
  X(inv_leaks, "INVARIANT leaks: engines not idle at teardown")                                 \
  X(inv_double_release, "INVARIANT double releases (an engine pool check fired)")               \
  X(inv_corrupt, "INVARIANT corrupted payloads (client or server side)")                        \
  X(inv_wrong_reply, "INVARIANT replies carrying another call's header")                        \
  X(inv_twice, "INVARIANT calls completed twice")                                               \
  X(inv_never, "INVARIANT calls never completed (engine destroyed)")                            \
  X(inv_stuck, "INVARIANT calls still outstanding after the final drain")                       \
  X(inv_bad_status, "INVARIANT calls failed against the rules (see --help)")                    \
  X(inv_exec_twice, "INVARIANT non-idempotent calls executed twice by one server")              \
  X(inv_conn_failed, "INVARIANT connections failed for good after being up")                    \
  X(inv_crashes, "INVARIANT processes that died unasked (signal or exit status)")               \
  X(inv_hung, "INVARIANT processes that did not finish in time")                                \
  X(inv_flap_stuck, "INVARIANT port flaps after which a client completed no call within 30 s")

enum Ctr : int {
#define X(n, d) k_##n,
  SOAK_COUNTERS(X)
#undef X
      kNumCtr
};
const char* const kCtrName[] = {
#define X(n, d) #n,
    SOAK_COUNTERS(X)
#undef X
};
const char* const kCtrDesc[] = {
#define X(n, d) d,
    SOAK_COUNTERS(X)
#undef X
};
constexpr int kFirstInvariant = k_inv_leaks;
constexpr int kNumStatus = 16;

// One process incarnation's counters in the shared mapping (one writer each).
struct Slot {
  std::atomic<uint64_t> c[kNumCtr];
  std::atomic<uint64_t> status[kNumStatus];  // client completions by CallStatus
  std::atomic<uint64_t> outstanding;         // client calls in flight now
  std::atomic<uint32_t> finished;            // the process ended its teardown
  std::atomic<uint32_t> held;                // waiting in honour_hold()
};

constexpr int kMaxSlots = 8192;
struct Shared {
  std::atomic<uint32_t> stop_clients, stop_server;
  std::atomic<uint32_t> hold;  // the supervisor holds every process between polls (a port flap)
  Slot slots[kMaxSlots];
};
Shared* g_sh = nullptr;

// Between two polls, where no engine is half-way through sending a CM
// message, a process waits while the supervisor holds it (port flaps).
void honour_hold(Slot* s) {
  if (g_sh->hold.load(std::memory_order_acquire) == 0) return;
  s->held.store(1);
  while (g_sh->hold.load(std::memory_order_acquire) != 0) {
    timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  s->held.store(0);
}

inline void add(Slot* s, Ctr c, uint64_t n = 1) { s->c[c].fetch_add(n, std::memory_order_relaxed); }
inline void set(Slot* s, Ctr c, uint64_t v) { s->c[c].store(v, std::memory_order_relaxed); }

// ---------------------------------------------------------------- payloads

constexpr uint32_t kProg = 0x20000a10, kVers = 1;
enum Proc : uint32_t { kNull = 0, kEcho = 1, kRead = 2, kWrite = 3, kBig = 4, kAdd = 5 };
constexpr uint32_t kMagic = 0x534f414b;  // "SOAK"

// Leads every call's arguments and every reply's results.
struct Hdr {
  uint32_t magic, proc;
  uint64_t client, seq;
  uint32_t len, extra;
};
static_assert(sizeof(Hdr) == 32);

uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t g_seed = 1;
// The bytes of (client, seq), for one use (salt): what both ends compute.
uint64_t key_of(uint64_t client, uint64_t seq, uint32_t salt) {
  return splitmix(g_seed ^ splitmix(client * 0x100000001B3ull + seq) ^ (uint64_t{salt} << 56));
}
void fill(uint8_t* p, size_t n, uint64_t key) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = splitmix(key + i);
    std::memcpy(p + i, &w, 8);
  }
  if (i < n) {
    uint64_t w = splitmix(key + i);
    std::memcpy(p + i, &w, n - i);
  }
}
bool check(const uint8_t* p, size_t n, uint64_t key) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = splitmix(key + i);
    if (std::memcmp(p + i, &w, 8) != 0) return false;
  }
  if (i < n) {
    uint64_t w = splitmix(key + i);
    if (std::memcmp(p + i, &w, n - i) != 0) return false;
  }
  return true;
}
// Where `p` first differs from the pattern, and what it holds there (for
// the log line of a corrupted payload).
std::string describe_bad(const uint8_t* p, size_t n, uint64_t key) {
  std::vector<uint8_t> want(n);
  fill(want.data(), n, key);
  size_t i = 0;
  while (i < n && p[i] == want[i]) ++i;
  size_t j = n;
  while (j > i && p[j - 1] == want[j - 1]) --j;
  char buf[160];
  std::snprintf(buf, sizeof buf, "bytes [%zu, %zu) of %zu differ; at %zu: got %02x %02x %02x %02x, want %02x %02x %02x %02x",
                i, j, n, i, i < n ? p[i] : 0, i + 1 < n ? p[i + 1] : 0, i + 2 < n ? p[i + 2] : 0,
                i + 3 < n ? p[i + 3] : 0, i < n ? want[i] : 0, i + 1 < n ? want[i + 1] : 0,
                i + 2 < n ? want[i + 2] : 0, i + 3 < n ? want[i + 3] : 0);
  return buf;
}

enum Salt : uint32_t { kSaltArgs = 1, kSaltRead = 2, kSaltWrite = 3, kSaltBig = 4 };

uint64_t fnv(std::span<const uint8_t> d) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : d) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// ---------------------------------------------------------------- options

struct Opts {
  uint64_t seed = 0;
  bool seed_given = false;
  double seconds = 0;          // 0: until the targets
  uint64_t target_calls = 0, target_faults = 0;
  double max_seconds = 0;      // a bound on a targets run (0: none)
  uint32_t clients = 3, engines = 2, conns = 2, window = 8;
  uint32_t fault_ms = 60;      // mean interval between faults in each client
  uint32_t proc_fault_ms = 4000;  // mean interval between process faults
  uint32_t keepalive_ms = 300, keepalive_timeout_ms = 300;
  std::string path, json_path, logdir;
  // A device spec other than pmd/shm's (verbs over rxe in the VM stage):
  // then no driver faults (inject_fault is pmd/shm's), the others stay.
  std::string device;
  bool driver_faults = true;
  bool keep_logs = false, verbose = false;
  bool proc_faults = true;
  // Port flaps: `ip link set flap_netdev down`, up again flap_down_ms later.
  std::string flap_netdev;
  uint32_t flaps = 2, flap_down_ms = 2000;
};
Opts g_o;

// ---------------------------------------------------------------- client

uint64_t now_ms() { return monotonic_ns() / 1'000'000; }

void sleep_us(long us) {
  timespec ts{us / 1'000'000, (us % 1'000'000) * 1000};
  nanosleep(&ts, nullptr);
}

EngineOptions client_engine_options() {
  EngineOptions o;
  o.arena_bytes = 48u << 20;
  o.reconnect = true;
  o.reconnect_min_ms = 5;
  o.reconnect_max_ms = 200;
  o.reconnect_give_up_ms = 0;  // the server always comes back
  o.connect_timeout_ms = 1000;
  o.keepalive_ms = g_o.keepalive_ms;
  o.keepalive_timeout_ms = g_o.keepalive_timeout_ms;
  o.keepalive_idle_ms = 1000;
  o.max_reply = 64u << 10;
  return o;
}

constexpr uint32_t kBulkSlot = 64u << 10;

class Client {
 public:
  Client(Slot* slot, uint64_t id) : slot_(slot), id_(id), rng_(splitmix(g_seed ^ (id * 0xA24BAED4963EE407ull))) {}
  int run();

 private:
  struct ConnSlot {
    Connection* c = nullptr;
    uint32_t out = 0;
    uint64_t retry_at = 0;
    bool ever_ready = false;
  };
  struct Box {
    std::unique_ptr<Engine> e;
    uint8_t* bulk = nullptr;
    std::vector<uint32_t> free_bulk;
    std::vector<ConnSlot> conns;
  };
  struct Rec {
    uint32_t eng, conn;
    uint32_t proc, len;
    uint64_t seq;
    int32_t bulk = -1;
    uint32_t xid = 0;
    bool deadline = false, no_retry = false, cancelled = false, host_closed = false;
  };

  static void on_done(void* ctx, const CallReply& r);
  void done(uint64_t id, const CallReply& r);
  bool verify(const Rec& rec, const CallReply& r);
  bool issue(uint32_t e, uint32_t k);
  void tend_connections(uint64_t now);
  void fault(uint64_t now);
  void close_conn(uint32_t e, uint32_t k);
  void snapshot_engines();
  uint64_t rnd(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  Slot* slot_;
  uint64_t id_;
  std::mt19937_64 rng_;
  std::vector<Box> boxes_;
  std::unordered_map<uint64_t, Rec> recs_;  // outstanding calls by call id
  uint64_t next_call_ = 1, next_seq_ = 1;
  bool stopping_ = false;
  std::string spec_;
  // Engine counters of engines already destroyed (their last figures).
  uint64_t gone_[9] = {};
};

Client* g_client = nullptr;

void Client::on_done(void* ctx, const CallReply& r) { g_client->done(reinterpret_cast<uintptr_t>(ctx), r); }

bool Client::verify(const Rec& rec, const CallReply& r) {
  auto res = r.results;
  if (res.size() < sizeof(Hdr)) return add(slot_, k_inv_corrupt), false;
  Hdr h;
  std::memcpy(&h, res.data(), sizeof h);
  if (h.magic != kMagic || h.client != id_ || h.seq != rec.seq || h.proc != rec.proc)
    return add(slot_, k_inv_wrong_reply), false;
  auto body = res.subspan(sizeof(Hdr));
  bool good = true;
  uint64_t bytes = 0;
  switch (rec.proc) {
    case kEcho:
      good = h.len == rec.len && body.size() == rec.len && check(body.data(), rec.len, key_of(id_, rec.seq, kSaltArgs));
      bytes = rec.len;
      break;
    case kRead: {
      std::vector<uint8_t> want(rec.len);
      fill(want.data(), rec.len, key_of(id_, rec.seq, kSaltRead));
      uint64_t d = fnv(want);
      good = body.size() == 8 && std::memcmp(body.data(), &d, 8) == 0;
      bytes = rec.len;
      break;
    }
    case kWrite: {
      Box& b = boxes_[rec.eng];
      const uint8_t* p = b.bulk + size_t{static_cast<uint32_t>(rec.bulk)} * kBulkSlot;
      good = r.bulk_recv_len == rec.len && check(p, rec.len, key_of(id_, rec.seq, kSaltWrite));
      bytes = rec.len;
      break;
    }
    case kBig:
      good = body.size() == rec.len && check(body.data(), rec.len, key_of(id_, rec.seq, kSaltBig));
      bytes = rec.len;
      break;
    case kAdd: {
      uint32_t execs = 0;
      good = body.size() == 8;
      if (good) std::memcpy(&execs, body.data(), 4);
      if (good && execs != 1) {
        add(slot_, k_inv_exec_twice);
        std::fprintf(stderr, "tern-soak: client %" PRIu64 " seq %" PRIu64 ": executed %u times by one server\n", id_,
                     rec.seq, execs);
      }
      break;
    }
  }
  if (!good) {
    add(slot_, k_inv_corrupt);
    std::fprintf(stderr, "tern-soak: client %" PRIu64 " seq %" PRIu64 " proc %u len %u: corrupted reply\n", id_,
                 rec.seq, rec.proc, rec.len);
    return false;
  }
  add(slot_, k_bytes_checked, bytes);
  return true;
}

void Client::done(uint64_t id, const CallReply& r) {
  auto it = recs_.find(id);
  if (it == recs_.end()) {
    add(slot_, id < next_call_ ? k_inv_twice : k_inv_wrong_reply);
    std::fprintf(stderr, "tern-soak: client %" PRIu64 ": call %" PRIu64 " completed again (%s)\n", id_, id,
                 call_status_name(r.status));
    return;
  }
  Rec rec = it->second;
  recs_.erase(it);
  add(slot_, k_completed);
  slot_->outstanding.fetch_sub(1, std::memory_order_relaxed);
  slot_->status[static_cast<int>(r.status) % kNumStatus].fetch_add(1, std::memory_order_relaxed);
  if (r.retransmits > 0) add(slot_, k_retransmitted_calls);
  Box& b = boxes_[rec.eng];
  --b.conns[rec.conn].out;
  bool ok_by_rule = false;
  switch (r.status) {
    case CallStatus::kOk:
      if (verify(rec, r)) add(slot_, k_ok);
      ok_by_rule = true;  // a bad payload is counted as such, not twice
      break;
    case CallStatus::kTimedOut:
      ok_by_rule = rec.deadline;
      if (ok_by_rule) add(slot_, k_timed_out_allowed);
      break;
    case CallStatus::kCancelled:
      ok_by_rule = rec.cancelled;
      if (ok_by_rule) add(slot_, k_cancelled_allowed);
      break;
    case CallStatus::kDisconnected:
      if (rec.host_closed) ok_by_rule = true, add(slot_, k_disc_host_closed);
      else if (rec.no_retry) ok_by_rule = true, add(slot_, k_disc_no_retry);
      break;
    default:
      break;
  }
  if (!ok_by_rule) {
    add(slot_, k_inv_bad_status);
    std::fprintf(stderr,
                 "tern-soak: client %" PRIu64 " seq %" PRIu64 " proc %u: %s against the rules (deadline %d, "
                 "no_retry %d, cancelled %d, closed %d)\n",
                 id_, rec.seq, rec.proc, call_status_name(r.status), rec.deadline, rec.no_retry, rec.cancelled,
                 rec.host_closed);
  }
  if (rec.bulk >= 0) b.free_bulk.push_back(static_cast<uint32_t>(rec.bulk));
}

bool Client::issue(uint32_t e, uint32_t k) {
  Box& b = boxes_[e];
  ConnSlot& cs = b.conns[k];
  Rec rec{e, k, 0, 0, next_seq_};
  const uint64_t pick = rnd(100);
  rec.proc = pick < 30 ? kEcho : pick < 50 ? kRead : pick < 70 ? kWrite : pick < 85 ? kBig : kAdd;
  switch (rec.proc) {
    case kEcho:
      rec.len = rnd(10) == 0 ? 4 * static_cast<uint32_t>(1 + rnd(4096)) : 4 * static_cast<uint32_t>(rnd(1000));
      break;
    case kRead:
    case kWrite:
      rec.len = 4 * static_cast<uint32_t>(1 + rnd(kBulkSlot / 4));
      break;
    case kBig:
      rec.len = 4 * static_cast<uint32_t>(1024 + rnd(12288 - 1024));
      break;
    case kAdd:
      rec.len = 4 * static_cast<uint32_t>(1 + rnd(64));
      break;
  }
  if ((rec.proc == kRead || rec.proc == kWrite) && b.free_bulk.empty()) return false;
  rec.deadline = rnd(100) < 3;
  rec.no_retry = rnd(100) < 3;
  Hdr h{kMagic, rec.proc, id_, rec.seq, rec.len, 0};
  std::vector<uint8_t> args(sizeof h);
  std::memcpy(args.data(), &h, sizeof h);
  Call c{kProg, kVers, rec.proc};
  c.max_results = sizeof(Hdr) + 64;
  if (rec.proc == kEcho || rec.proc == kAdd) {
    args.resize(sizeof h + rec.len);
    fill(args.data() + sizeof h, rec.len, key_of(id_, rec.seq, kSaltArgs));
    if (rec.proc == kEcho) c.max_results = sizeof(Hdr) + rec.len;
  }
  if (rec.proc == kBig) c.max_results = sizeof(Hdr) + rec.len;
  if (rec.proc == kRead || rec.proc == kWrite) {
    rec.bulk = static_cast<int32_t>(b.free_bulk.back());
    b.free_bulk.pop_back();
    uint8_t* p = b.bulk + size_t{static_cast<uint32_t>(rec.bulk)} * kBulkSlot;
    if (rec.proc == kRead) {
      fill(p, rec.len, key_of(id_, rec.seq, kSaltRead));
      c.bulk_send = std::span<const uint8_t>(p, rec.len);
    } else {
      std::memset(p, 0xee, rec.len);
      c.bulk_recv = std::span<uint8_t>(p, rec.len);
    }
  }
  c.args = args;
  c.done = &Client::on_done;
  const uint64_t id = next_call_;
  c.ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(id));
  if (rec.deadline) c.timeout_ns = (20 + rnd(480)) * 1'000'000ull;
  c.no_retry = rec.no_retry;
  // The record exists before call(): a completion may come from inside it.
  recs_.emplace(id, rec);
  ++next_call_;
  slot_->outstanding.fetch_add(1, std::memory_order_relaxed);
  ++cs.out;
  uint32_t xid = 0;
  int rc = cs.c->call(c, &xid);
  if (rc != 0) {
    recs_.erase(id);
    slot_->outstanding.fetch_sub(1, std::memory_order_relaxed);
    --cs.out;
    if (rec.bulk >= 0) b.free_bulk.push_back(static_cast<uint32_t>(rec.bulk));
    add(slot_, k_call_refused);
    return false;
  }
  auto it = recs_.find(id);
  if (it != recs_.end()) it->second.xid = xid;
  ++next_seq_;
  add(slot_, k_calls);
  add(slot_, static_cast<Ctr>(k_p_echo + (rec.proc - kEcho)));
  if (rec.deadline) add(slot_, k_with_deadline);
  if (rec.no_retry) add(slot_, k_no_retry_calls);
  return true;
}

// The host's part: a connection's first connect can fail (the server is
// down or stopped while a client starts); it is closed and made anew. A
// connection that was up never fails for good (no give-up deadline): that
// is counted.
void Client::tend_connections(uint64_t now) {
  for (uint32_t e = 0; e < boxes_.size(); ++e) {
    Box& b = boxes_[e];
    for (uint32_t k = 0; k < b.conns.size(); ++k) {
      ConnSlot& cs = b.conns[k];
      if (cs.c == nullptr) {
        if (stopping_ || now < cs.retry_at) continue;
        auto r = b.e->connect(spec_);
        if (!r.is_ok()) {
          cs.retry_at = now + 50;
          continue;
        }
        cs.c = r.value();
        cs.ever_ready = false;
        add(slot_, k_host_conns);
        continue;
      }
      ConnState st = cs.c->state();
      if (st == ConnState::kReady) cs.ever_ready = true;
      if (st == ConnState::kFailed) {
        if (cs.ever_ready) {
          add(slot_, k_inv_conn_failed);
          std::fprintf(stderr, "tern-soak: client %" PRIu64 ": a connection that was up failed: %s\n", id_,
                       cs.c->error().to_string().c_str());
        }
        close_conn(e, k);
        cs.retry_at = now + 20 + rnd(80);
      }
    }
  }
}

void Client::close_conn(uint32_t e, uint32_t k) {
  ConnSlot& cs = boxes_[e].conns[k];
  for (auto& [id, rec] : recs_)
    if (rec.eng == e && rec.conn == k) rec.host_closed = true;
  Connection* c = cs.c;
  cs.c = nullptr;
  c->close();
}

void Client::fault(uint64_t now) {
  uint32_t e = static_cast<uint32_t>(rnd(boxes_.size()));
  uint32_t k = static_cast<uint32_t>(rnd(boxes_[e].conns.size()));
  ConnSlot& cs = boxes_[e].conns[k];
  const uint64_t pick = rnd(100);
  if (cs.c == nullptr || cs.c->state() != ConnState::kReady) {
    add(slot_, k_f_skipped);
    return;
  }
  rdma::Fault f{rdma::Fault::Kind::kDropConnection};
  Ctr what = k_f_drop;
  if (!g_o.driver_faults && pick < 75) {
    // No fault injection in this driver: the host closes the connection.
    close_conn(e, k);
    cs.retry_at = now + rnd(20);
    add(slot_, k_f_close);
    return;
  }
  if (pick < 30) {
  } else if (pick < 55) {
    f.kind = rdma::Fault::Kind::kFailAfterWrs;
    f.count = rnd(24);
    what = k_f_qp_error;
  } else if (pick < 75) {
    f.kind = rdma::Fault::Kind::kDelayCompletions;
    f.delay_ns = (1 + rnd(30)) * 1'000'000ull;
    what = k_f_delay;
  } else if (pick < 85) {
    close_conn(e, k);
    cs.retry_at = now + rnd(20);
    add(slot_, k_f_close);
    return;
  } else {
    // Cancel one of this connection's calls, if it has any.
    std::vector<uint64_t> mine;
    for (auto& [id, rec] : recs_)
      if (rec.eng == e && rec.conn == k && !rec.cancelled) mine.push_back(id);
    if (mine.empty()) {
      add(slot_, k_f_skipped);
      return;
    }
    std::sort(mine.begin(), mine.end());  // the draw must not depend on hash order
    Rec& rec = recs_[mine[rnd(mine.size())]];
    rec.cancelled = true;
    if (cs.c->cancel(rec.xid) != 0) {
      rec.cancelled = false;  // finished meanwhile: it completes as it will
      add(slot_, k_f_skipped);
      return;
    }
    add(slot_, k_f_cancel);
    return;
  }
  Status s = testing::inject_fault(cs.c, f);
  add(slot_, s.is_ok() ? what : k_f_skipped);
}

void Client::snapshot_engines() {
  uint64_t v[9];
  std::copy(std::begin(gone_), std::end(gone_), v);
  for (Box& b : boxes_) {
    if (!b.e) continue;
    const EngineStats& s = b.e->stats();
    const Counter* cs[9] = {&s.reconnects,         &s.reconnect_attempts, &s.retransmits,
                            &s.late_replies,       &s.keepalive_probes,   &s.keepalive_failures,
                            &s.declared_dead,      &s.cancels,            &s.disconnects};
    for (int i = 0; i < 9; ++i) v[i] += cs[i]->get();
  }
  for (int i = 0; i < 9; ++i) set(slot_, static_cast<Ctr>(k_e_reconnects + i), v[i]);
}

int Client::run() {
  g_client = this;
  spec_ = g_o.device.empty() ? "shm:path=" + g_o.path : g_o.device;
  boxes_.resize(g_o.engines);
  for (Box& b : boxes_) {
    auto r = Engine::create(client_engine_options());
    if (!r.is_ok()) {
      std::fprintf(stderr, "tern-soak: client engine: %s\n", r.status().to_string().c_str());
      return 2;
    }
    b.e = std::move(r.value());
    const uint32_t nbulk = g_o.conns * g_o.window;
    b.bulk = static_cast<uint8_t*>(b.e->alloc(size_t{nbulk} * kBulkSlot));
    if (b.bulk == nullptr) {
      std::fprintf(stderr, "tern-soak: client: no bulk memory\n");
      return 2;
    }
    for (uint32_t i = nbulk; i-- > 0;) b.free_bulk.push_back(i);
    b.conns.resize(g_o.conns);
  }
  std::exponential_distribution<double> gap(1.0 / std::max<uint32_t>(g_o.fault_ms, 1));
  uint64_t next_fault = now_ms() + static_cast<uint64_t>(gap(rng_));
  uint64_t last_tend = 0, last_snap = 0;
  while (g_sh->stop_clients.load(std::memory_order_relaxed) == 0) {
    honour_hold(slot_);
    int work = 0;
    for (Box& b : boxes_) work += b.e->poll();
    const uint64_t now = now_ms();
    if (now != last_tend) {
      last_tend = now;
      tend_connections(now);
      for (uint32_t e = 0; e < boxes_.size(); ++e)
        for (uint32_t k = 0; k < boxes_[e].conns.size(); ++k) {
          ConnSlot& cs = boxes_[e].conns[k];
          while (cs.c != nullptr && cs.out < g_o.window &&
                 (cs.c->state() == ConnState::kReady || cs.c->state() == ConnState::kReconnecting)) {
            if (!issue(e, k)) break;  // no bulk slot free, or refused
          }
        }
      if (g_o.fault_ms != 0 && now >= next_fault) {
        fault(now);
        next_fault = now + 1 + static_cast<uint64_t>(gap(rng_));
      }
    }
    if (now - last_snap >= 100) {
      last_snap = now;
      snapshot_engines();
    }
    if (work == 0) sleep_us(50);
  }

  // The end: no more calls or faults; every call completes (the supervisor
  // keeps the server up now), then each engine is closed, drained, audited
  // and destroyed.
  stopping_ = true;
  const uint64_t drain_until = now_ms() + 90'000;
  while (!recs_.empty() && now_ms() < drain_until) {
    int work = 0;
    for (Box& b : boxes_) work += b.e->poll();
    tend_connections(now_ms());
    if (work == 0) sleep_us(100);
  }
  if (!recs_.empty()) {
    add(slot_, k_inv_stuck, recs_.size());
    std::fprintf(stderr, "tern-soak: client %" PRIu64 ": %zu calls still outstanding after 90 s\n", id_,
                 recs_.size());
    for (auto& [id, rec] : recs_) rec.host_closed = true;  // counted as stuck, not again
  }
  for (uint32_t e = 0; e < boxes_.size(); ++e) {
    Box& b = boxes_[e];
    for (uint32_t k = 0; k < b.conns.size(); ++k)
      if (b.conns[k].c != nullptr) close_conn(e, k);
    const uint64_t until = now_ms() + 10'000;
    bool idle = false;
    while (!(idle = testing::accounting(*b.e).idle()) && now_ms() < until) {
      if (b.e->poll() == 0) sleep_us(100);
    }
    if (!idle) {
      add(slot_, k_inv_leaks);
      std::fprintf(stderr, "tern-soak: client %" PRIu64 " engine %u not idle at teardown: %s\n", id_, e,
                   testing::accounting(*b.e).to_string().c_str());
    }
    snapshot_engines();
    const EngineStats& s = b.e->stats();
    const Counter* cs[9] = {&s.reconnects,    &s.reconnect_attempts, &s.retransmits,
                            &s.late_replies,  &s.keepalive_probes,   &s.keepalive_failures,
                            &s.declared_dead, &s.cancels,            &s.disconnects};
    for (int i = 0; i < 9; ++i) gone_[i] += cs[i]->get();
    b.e.reset();  // completes whatever is left, exactly once
    uint64_t never = 0;
    for (auto it = recs_.begin(); it != recs_.end();) {
      if (it->second.eng == e) {
        ++never;
        it = recs_.erase(it);
      } else {
        ++it;
      }
    }
    if (never != 0) {
      add(slot_, k_inv_never, never);
      std::fprintf(stderr, "tern-soak: client %" PRIu64 " engine %u: %" PRIu64 " calls never completed\n", id_, e,
                   never);
    }
  }
  snapshot_engines();
  slot_->finished.store(1);
  return 0;
}

// ---------------------------------------------------------------- server

class Server {
 public:
  Server(Slot* slot, uint32_t incarnation)
      : slot_(slot), inc_(incarnation), rng_(splitmix(g_seed ^ 0x5e7e7ull ^ (uint64_t{incarnation} << 32))) {}
  int run();

 private:
  static void handler(void* ctx, ServerCall* c) { static_cast<Server*>(ctx)->handle(c); }
  static void null_handler(void*, ServerCall* c) { (void)c->reply({}); }
  void handle(ServerCall* c);
  void answer(ServerCall* c);
  void reply(ServerCall*, Status s) {
    if (!s.is_ok()) add(slot_, k_s_reply_failed);
  }
  bool parse(ServerCall* c, Hdr* h);

  Slot* slot_;
  uint32_t inc_;
  std::mt19937_64 rng_;
  std::unique_ptr<Engine> e_;
  std::unique_ptr<DuplicateCache> drc_;
  std::multimap<uint64_t, ServerCall*> later_;  // by when they are answered
  // Non-idempotent executions by (client, seq), in this incarnation.
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, uint32_t>> execs_;
};

bool Server::parse(ServerCall* c, Hdr* h) {
  auto a = c->args();
  if (a.size() < sizeof(Hdr)) return false;
  std::memcpy(h, a.data(), sizeof *h);
  return h->magic == kMagic && h->proc == c->proc();
}

void Server::handle(ServerCall* c) {
  add(slot_, k_s_calls);
  Hdr h;
  if (!parse(c, &h)) {
    add(slot_, k_inv_corrupt);
    auto a = c->args();
    uint32_t w[4] = {};
    std::memcpy(w, a.data(), std::min<size_t>(a.size(), sizeof w));
    std::fprintf(stderr, "tern-soak: server: call %u proc %u with a bad header (%zu bytes: %08x %08x %08x %08x)\n",
                 c->xid(), c->proc(), a.size(), w[0], w[1], w[2], w[3]);
    reply(c, c->reply_error(AcceptStat::kGarbageArgs));
    return;
  }
  if (c->proc() == kAdd) {
    std::vector<uint8_t> cached;
    switch (drc_->begin(c, &cached)) {
      case DuplicateCache::Found::kDone:
        add(slot_, k_s_drc_hits);
        reply(c, c->reply(cached));
        return;
      case DuplicateCache::Found::kInProgress:
        add(slot_, k_s_drc_in_progress);
        return;
      case DuplicateCache::Found::kNew:
        break;
    }
  }
  if (rng_() % 10 == 0) {
    // Answered later: mostly within 3 ms; one in twenty after 20-150 ms,
    // long enough for a retransmission (after a fault meanwhile) to meet
    // its first copy still in progress in the DuplicateCache.
    add(slot_, k_s_deferred);
    const uint64_t us = rng_() % 20 == 0 ? 20'000 + rng_() % 130'000 : rng_() % 3000;
    later_.emplace(monotonic_ns() + us * 1000, c);
    return;
  }
  answer(c);
}

void Server::answer(ServerCall* c) {
  Hdr h;
  (void)parse(c, &h);
  auto a = c->args();
  auto bad = [&](const char* what, std::string detail = {}) {
    add(slot_, k_inv_corrupt);
    std::fprintf(stderr, "tern-soak: server: client %" PRIu64 " seq %" PRIu64 " proc %u len %u xid %u: %s %s\n",
                 h.client, h.seq, h.proc, h.len, c->xid(), what, detail.c_str());
    if (c->proc() == kAdd) drc_->forget(*c);
    reply(c, c->reply_error(AcceptStat::kGarbageArgs));
  };
  switch (c->proc()) {
    case kEcho:
      if (a.size() != sizeof(Hdr) + h.len || !check(a.data() + sizeof(Hdr), h.len, key_of(h.client, h.seq, kSaltArgs)))
        return bad("corrupted arguments", a.size() != sizeof(Hdr) + h.len
                                              ? "size " + std::to_string(a.size())
                                              : describe_bad(a.data() + sizeof(Hdr), h.len,
                                                             key_of(h.client, h.seq, kSaltArgs)));
      reply(c, c->reply(a));
      return;
    case kRead: {
      auto d = c->bulk();
      if (d.size() != h.len || !check(d.data(), h.len, key_of(h.client, h.seq, kSaltRead)))
        return bad("corrupted read chunk", d.size() != h.len ? "size " + std::to_string(d.size())
                                                             : describe_bad(d.data(), h.len,
                                                                            key_of(h.client, h.seq, kSaltRead)));
      uint8_t out[sizeof(Hdr) + 8];
      std::memcpy(out, &h, sizeof h);
      uint64_t dig = fnv(d);
      std::memcpy(out + sizeof h, &dig, 8);
      reply(c, c->reply(out));
      return;
    }
    case kWrite: {
      if (c->write_chunk_count() < 1 || c->bulk_capacity() < h.len) return bad("write chunk missing or short");
      auto b = c->bulk_buffer(h.len);
      if (b.size() < h.len) return bad("no bulk buffer");
      fill(b.data(), h.len, key_of(h.client, h.seq, kSaltWrite));
      reply(c, c->reply(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&h), sizeof h), b.first(h.len)));
      return;
    }
    case kBig: {
      std::vector<uint8_t> out(sizeof h + h.len);
      std::memcpy(out.data(), &h, sizeof h);
      fill(out.data() + sizeof h, h.len, key_of(h.client, h.seq, kSaltBig));
      reply(c, c->reply(out));
      return;
    }
    case kAdd: {
      if (a.size() != sizeof(Hdr) + h.len || !check(a.data() + sizeof(Hdr), h.len, key_of(h.client, h.seq, kSaltArgs)))
        return bad("corrupted arguments", a.size() != sizeof(Hdr) + h.len
                                              ? "size " + std::to_string(a.size())
                                              : describe_bad(a.data() + sizeof(Hdr), h.len,
                                                             key_of(h.client, h.seq, kSaltArgs)));
      uint32_t n = ++execs_[h.client][h.seq];
      add(slot_, k_s_execs);
      if (n > 1) add(slot_, k_inv_exec_twice);
      uint8_t out[sizeof(Hdr) + 8];
      std::memcpy(out, &h, sizeof h);
      std::memcpy(out + sizeof h, &n, 4);
      std::memcpy(out + sizeof h + 4, &inc_, 4);
      drc_->done(*c, out);  // before reply(): reply() ends c
      reply(c, c->reply(out));
      return;
    }
  }
  bad("unknown procedure");
}

int Server::run() {
  EngineOptions o;
  o.arena_bytes = 128u << 20;
  o.max_reply = 64u << 10;
  auto r = Engine::create(o);
  if (!r.is_ok()) {
    std::fprintf(stderr, "tern-soak: server engine: %s\n", r.status().to_string().c_str());
    return 2;
  }
  e_ = std::move(r.value());
  drc_ = std::make_unique<DuplicateCache>(1u << 16);
  e_->handle(kProg, kVers, kNull, &Server::null_handler, this);
  for (uint32_t p : {kEcho, kRead, kWrite, kBig, kAdd}) e_->handle(kProg, kVers, p, &Server::handler, this);
  Status s = e_->listen(g_o.device.empty() ? "shm:path=" + g_o.path : g_o.device);
  if (!s.is_ok()) {
    std::fprintf(stderr, "tern-soak: server listen: %s\n", s.to_string().c_str());
    return 2;
  }
  auto serve_later = [&](bool all) {
    const uint64_t now = monotonic_ns();
    int n = 0;
    while (!later_.empty() && (all || later_.begin()->first <= now)) {
      ServerCall* c = later_.begin()->second;
      later_.erase(later_.begin());
      answer(c);
      ++n;
    }
    return n;
  };
  while (g_sh->stop_server.load(std::memory_order_relaxed) == 0) {
    honour_hold(slot_);
    int work = e_->poll();
    work += serve_later(false);
    if (work == 0) sleep_us(30);
  }
  serve_later(true);
  // The clients are gone: their connections end, and then everything is
  // back in its pool.
  const uint64_t until = now_ms() + 10'000;
  bool idle = false;
  while (!(idle = testing::accounting(*e_).idle() && e_->stats().connections.get() == 0) && now_ms() < until)
    if (e_->poll() == 0) sleep_us(100);
  if (!idle) {
    add(slot_, k_inv_leaks);
    std::fprintf(stderr, "tern-soak: server not idle at teardown (%" PRIu64 " connections): %s\n",
                 e_->stats().connections.get(), testing::accounting(*e_).to_string().c_str());
  }
  drc_.reset();
  e_.reset();
  slot_->finished.store(1);
  return 0;
}

// ---------------------------------------------------------------- supervisor

struct Child {
  pid_t pid = -1;
  int slot = -1;
  bool killed = false;  // by the soak: its death is expected
  bool stopped = false;
  uint64_t restart_at = 0;  // ms; 0: not waiting to restart
};

int g_next_slot = 1;  // slot 0: the supervisor's own counters
std::vector<std::string> g_logs;

std::string log_path(const char* role, int slot) {
  return g_o.logdir + "/" + role + "-" + std::to_string(slot) + ".log";
}

pid_t spawn(bool server, int slot, uint32_t incarnation) {
  std::string lp = log_path(server ? "server" : "client", slot);
  g_logs.push_back(lp);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(lp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    dup2(fd, 2);
    close(fd);
  }
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_DFL);
  int rc = server ? Server(&g_sh->slots[slot], incarnation).run() : Client(&g_sh->slots[slot], slot).run();
  std::fflush(nullptr);
  std::exit(rc);
}

volatile sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

uint64_t total(Ctr c) {
  uint64_t s = 0;
  for (int i = 0; i < g_next_slot; ++i) s += g_sh->slots[i].c[c].load();
  return s;
}
uint64_t total_faults() {
  uint64_t s = 0;
  for (Ctr c : {k_f_drop, k_f_qp_error, k_f_delay, k_f_close, k_f_cancel, k_f_kill_client, k_f_kill_server,
                k_f_stop_server, k_f_port_flap})
    s += total(c);
  return s;
}

std::string tail_of(const std::string& path, int lines) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return {};
  std::string all;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) all.append(buf, n);
  std::fclose(f);
  // The last `lines` lines.
  size_t start = all.size();
  for (int i = 0; i <= lines && start > 0;) {
    --start;
    if (all[start] == '\n' && ++i > lines) {
      ++start;
      break;
    }
  }
  return all.substr(start);
}

bool log_has(const std::string& path, const char* needle) {
  std::string t = tail_of(path, 1 << 20);
  return t.find(needle) != std::string::npos;
}

std::string g_command;

int supervise() {
  const uint64_t t0 = now_ms();
  Slot* me = &g_sh->slots[0];
  std::mt19937_64 rng(splitmix(g_seed ^ 0x50ull));
  auto rnd = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  std::exponential_distribution<double> gap(1.0 / std::max<uint32_t>(g_o.proc_fault_ms, 1));

  uint32_t server_inc = 0;
  Child server;
  server.slot = g_next_slot++;
  server.pid = spawn(true, server.slot, server_inc++);
  std::vector<Child> clients(g_o.clients);
  for (Child& c : clients) {
    c.slot = g_next_slot++;
    c.pid = spawn(false, c.slot, 0);
  }
  uint64_t next_proc_fault = now_ms() + 500 + static_cast<uint64_t>(gap(rng));
  uint64_t continue_at = 0;

  // Port flaps (--flap-netdev), evenly spread over a --seconds run. The
  // port goes down with every process of the soak held between two polls
  // for a moment: rxe (Linux 6.1) breaks its CM for good when a CM message
  // is still on its way out as the port goes down -- already in rxe's send
  // path, or between the driver's look at the port and its send
  // (docs/reliability.md) -- and what the engines send while the port is
  // down is theirs to hold back (nothing). So the flap meets calls in
  // flight, QPs with work queued and everything the engines do while the
  // port is down and after it is up, but no CM message on its way out at
  // the instant of the transition. (SIGSTOP would not do: it can stop a
  // process between the look and the send.)
  std::vector<uint64_t> flap_at;
  if (!g_o.flap_netdev.empty() && g_o.seconds > 0)
    for (uint32_t k = 0; k < g_o.flaps; ++k)
      flap_at.push_back(t0 + static_cast<uint64_t>(g_o.seconds * 1000 * (k + 1) / (g_o.flaps + 1)));
  size_t next_flap = 0;
  uint64_t flap_up_due = 0;   // the port is down; up again then
  uint64_t flap_up_at = 0;    // the port came up then: watching every client complete calls again
  uint64_t flap_down_at = 0;
  std::vector<std::pair<int, uint64_t>> ok_at_up;  // per client: its slot and k_ok when the port came up
  auto link = [&](const char* updown) {
    const std::string cmd = "ip link set " + g_o.flap_netdev + " " + updown;
    int rc = std::system(cmd.c_str());
    if (rc != 0) {
      std::fprintf(stderr, "tern-soak: `%s` failed (status %d)\n", cmd.c_str(), rc);
      add(me, k_inv_flap_stuck);
    }
  };
  uint64_t last_report = now_ms();
  auto crash = [&](Child& c, int status, const char* role) {
    add(me, k_inv_crashes);
    std::string lp = log_path(role, c.slot);
    if (log_has(lp, "given back twice")) add(me, k_inv_double_release);
    std::fprintf(stderr, "tern-soak: %s (slot %d, pid %d) died unasked: %s %d; the end of %s:\n%s\n", role, c.slot,
                 c.pid, WIFSIGNALED(status) ? "signal" : "exit status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), lp.c_str(), tail_of(lp, 30).c_str());
  };
  auto reap = [&](bool stopping) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      Child* c = pid == server.pid ? &server : nullptr;
      bool is_server = c != nullptr;
      for (Child& k : clients)
        if (k.pid == pid) c = &k;
      if (c == nullptr) continue;
      const bool asked = c->killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      const bool clean_end = stopping && WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!asked && !clean_end) crash(*c, status, is_server ? "server" : "client");
      if (!is_server && !clean_end) {
        // What it had in flight died with it.
        add(me, k_inflight_at_kill, g_sh->slots[c->slot].outstanding.load());
      }
      c->pid = -1;
      c->killed = c->stopped = false;
      if (!stopping) c->restart_at = now_ms() + (is_server ? rnd(300) : rnd(200));
    }
  };
  auto done_yet = [&](uint64_t now) {
    if (g_interrupted) return true;
    if (flap_up_due != 0 || flap_up_at != 0) return false;  // a flap's end is part of the run
    if (next_flap < flap_at.size() && now - t0 < static_cast<uint64_t>(g_o.seconds * 1000) + 60'000)
      return false;  // a flap put off (a process did not stop): up to a minute more for it
    if (g_o.seconds > 0) return now - t0 >= static_cast<uint64_t>(g_o.seconds * 1000);
    if (g_o.max_seconds > 0 && now - t0 >= static_cast<uint64_t>(g_o.max_seconds * 1000)) return true;
    return total(k_calls) >= g_o.target_calls && total_faults() >= g_o.target_faults;
  };

  for (;;) {
    sleep_us(5000);
    reap(false);
    uint64_t now = now_ms();
    if (done_yet(now)) break;
    if (server.pid < 0 && server.restart_at != 0 && now >= server.restart_at) {
      server.slot = g_next_slot++;
      server.pid = spawn(true, server.slot, server_inc++);
      add(me, k_server_restarts);
    }
    for (Child& c : clients)
      if (c.pid < 0 && c.restart_at != 0 && now >= c.restart_at) {
        c.slot = g_next_slot++;
        c.pid = spawn(false, c.slot, 0);
        add(me, k_client_restarts);
      }
    if (g_next_slot >= kMaxSlots - 2 * static_cast<int>(g_o.clients) - 4) {
      std::fprintf(stderr, "tern-soak: out of report slots; ending the run\n");
      break;
    }
    if (continue_at != 0 && now >= continue_at) {
      if (server.pid > 0) kill(server.pid, SIGCONT);
      server.stopped = false;
      continue_at = 0;
      next_proc_fault = now + static_cast<uint64_t>(gap(rng));
    }
    if (g_o.proc_faults && continue_at == 0 && now >= next_proc_fault) {
      next_proc_fault = now + static_cast<uint64_t>(gap(rng));
      const uint64_t pick = rnd(100);
      const uint32_t which = static_cast<uint32_t>(rnd(clients.size()));
      if (pick < 45) {
        Child& c = clients[which];
        if (c.pid > 0) {
          c.killed = true;
          kill(c.pid, SIGKILL);
          add(me, k_f_kill_client);
        }
      } else if (pick < 75) {
        if (server.pid > 0) {
          server.killed = true;
          kill(server.pid, SIGKILL);
          add(me, k_f_kill_server);
        }
      } else if (server.pid > 0) {
        kill(server.pid, SIGSTOP);
        server.stopped = true;
        add(me, k_f_stop_server);
        continue_at = now + g_o.keepalive_ms + g_o.keepalive_timeout_ms + 200 + rnd(1000);
      }
    }
    if (flap_up_due != 0 && now >= flap_up_due) {
      link("up");
      flap_up_due = 0;
      flap_up_at = now_ms();
      ok_at_up.clear();
      for (Child& c : clients) ok_at_up.emplace_back(c.slot, g_sh->slots[c.slot].c[k_ok].load());
      std::fprintf(stderr, "tern-soak: %.1f s: port flap %zu: %s up again after %.1f s down\n", (flap_up_at - t0) / 1000.0,
                   next_flap, g_o.flap_netdev.c_str(), (flap_up_at - flap_down_at) / 1000.0);
    } else if (flap_up_at != 0) {
      // Calls complete again in every client (a restarted client: any call).
      bool all = true;
      for (size_t i = 0; i < clients.size(); ++i)
        all &= g_sh->slots[clients[i].slot].c[k_ok].load() >
               (clients[i].slot == ok_at_up[i].first ? ok_at_up[i].second : 0);
      if (all) {
        std::fprintf(stderr, "tern-soak: %.1f s: port flap %zu: every client completes calls again, %.2f s after up\n",
                     (now - t0) / 1000.0, next_flap, (now - flap_up_at) / 1000.0);
        flap_up_at = 0;
      } else if (now - flap_up_at >= 30'000) {
        std::fprintf(stderr, "tern-soak: port flap %zu: a client completed no call within 30 s of the port coming up\n",
                     next_flap);
        add(me, k_inv_flap_stuck);
        flap_up_at = 0;
      }
    } else if (next_flap < flap_at.size() && now >= flap_at[next_flap]) {
      // Everyone waits between two polls (a server a SIGSTOP fault holds
      // is not waited for: with process faults a flap may still meet a CM
      // message half sent); what rxe has queued for the wire goes; the
      // port goes down; everyone goes on.
      std::vector<int> slots;
      if (server.pid > 0 && !server.stopped) slots.push_back(server.slot);
      for (Child& c : clients)
        if (c.pid > 0) slots.push_back(c.slot);
      // A process that does not come to a stop (one inside a long call:
      // rxe's QP destruction can take seconds) is given another chance a
      // second later; the run is extended for it (done_yet).
      g_sh->hold.store(1, std::memory_order_release);
      const uint64_t give_up = now_ms() + 2000;
      int busy = -1;
      for (;;) {
        busy = -1;
        for (int sl : slots)
          if (g_sh->slots[sl].held.load() == 0) busy = sl;
        if (busy < 0 || now_ms() >= give_up) break;
        sleep_us(1000);
      }
      if (busy >= 0) {
        g_sh->hold.store(0, std::memory_order_release);
        std::fprintf(stderr, "tern-soak: port flap %zu: slot %d did not stop between polls within 2 s; again in 1 s\n",
                     next_flap + 1, busy);
        flap_at[next_flap] = now_ms() + 1000;
        continue;
      }
      ++next_flap;
      add(me, k_f_port_flap);
      sleep_us(100'000);
      flap_down_at = now_ms();
      link("down");
      g_sh->hold.store(0, std::memory_order_release);
      flap_up_due = flap_down_at + g_o.flap_down_ms;
      std::fprintf(stderr, "tern-soak: %.1f s: port flap %zu: %s down\n", (flap_down_at - t0) / 1000.0, next_flap,
                   g_o.flap_netdev.c_str());
    }
    if (now - last_report >= 10'000) {
      last_report = now;
      std::fprintf(stderr, "tern-soak: %.0f s: %" PRIu64 " calls, %" PRIu64 " ok, %" PRIu64 " faults\n",
                   (now - t0) / 1000.0, total(k_calls), total(k_ok), total_faults());
    }
  }

  // The end: the server runs (continued, or restarted), every client
  // finishes its calls and tears down, then the server does.
  if (flap_up_due != 0) link("up");  // interrupted during a flap
  if (next_flap < flap_at.size() && !g_interrupted) {
    std::fprintf(stderr, "tern-soak: %zu of %zu port flaps could not be made (a process never stopped between polls)\n",
                 flap_at.size() - next_flap, flap_at.size());
    add(me, k_inv_flap_stuck);
  }
  std::fprintf(stderr, "tern-soak: stopping after %.1f s\n", (now_ms() - t0) / 1000.0);
  if (server.pid > 0 && server.stopped) kill(server.pid, SIGCONT);
  server.stopped = false;
  reap(false);
  if (server.pid < 0) {
    server.slot = g_next_slot++;
    server.pid = spawn(true, server.slot, server_inc++);
    add(me, k_server_restarts);
  }
  for (Child& c : clients)
    if (c.pid < 0) {  // killed just before the end: restarted so its slot ends cleanly
      c.slot = g_next_slot++;
      c.pid = spawn(false, c.slot, 0);
      add(me, k_client_restarts);
    }
  g_sh->stop_clients.store(1);
  auto wait_for = [&](std::vector<Child*> kids, uint64_t ms) {
    const uint64_t until = now_ms() + ms;
    for (;;) {
      reap(true);
      bool any = false;
      for (Child* k : kids) any |= k->pid > 0;
      if (!any) return;
      if (now_ms() >= until) break;
      sleep_us(10'000);
    }
    for (Child* k : kids)
      if (k->pid > 0) {
        add(me, k_inv_hung);
        std::fprintf(stderr, "tern-soak: pid %d (slot %d) did not finish; killing it\n", k->pid, k->slot);
        k->killed = true;
        kill(k->pid, SIGKILL);
      }
    const uint64_t grace = now_ms() + 5000;
    while (now_ms() < grace) {
      reap(true);
      bool any = false;
      for (Child* k : kids) any |= k->pid > 0;
      if (!any) break;
      sleep_us(10'000);
    }
  };
  std::vector<Child*> ckids;
  for (Child& c : clients) ckids.push_back(&c);
  wait_for(ckids, 150'000);
  g_sh->stop_server.store(1);
  wait_for({&server}, 30'000);
  for (const std::string& l : g_logs)
    if (log_has(l, "given back twice") && me->c[k_inv_double_release].load() == 0) add(me, k_inv_double_release);
  return 0;
}

// The human report; stderr when the JSON goes to stdout (as tern-perf does).
FILE* g_human = stdout;

void report(double secs) {
  FILE* out = g_human;
  std::fprintf(out, "\ntern-soak report (seed %" PRIu64 ", %.1f s)\n", g_seed, secs);
  std::fprintf(out, "reproduce: %s\n\n", g_command.c_str());
  auto row = [&](Ctr c) { std::fprintf(out, "  %-78s %12" PRIu64 "\n", kCtrDesc[c], total(c)); };
  std::fprintf(out, "calls\n");
  for (int c = k_calls; c <= k_host_conns; ++c) row(static_cast<Ctr>(c));
  std::fprintf(out, "completions by status\n");
  for (int s = 0; s < kNumStatus; ++s) {
    uint64_t n = 0;
    for (int i = 0; i < g_next_slot; ++i) n += g_sh->slots[i].status[s].load();
    if (n != 0) std::fprintf(out, "  %-78s %12" PRIu64 "\n", call_status_name(static_cast<CallStatus>(s)), n);
  }
  std::fprintf(out, "faults (%" PRIu64 " in all)\n", total_faults());
  for (int c = k_f_drop; c <= k_client_restarts; ++c) row(static_cast<Ctr>(c));
  std::fprintf(out, "recovery (engine counters)\n");
  for (int c = k_e_reconnects; c <= k_e_disconnects; ++c) row(static_cast<Ctr>(c));
  std::fprintf(out, "server\n");
  for (int c = k_s_calls; c <= k_s_reply_failed; ++c) row(static_cast<Ctr>(c));
  std::fprintf(out, "invariants (all must be 0)\n");
  uint64_t bad = 0;
  for (int c = kFirstInvariant; c < kNumCtr; ++c) {
    row(static_cast<Ctr>(c));
    bad += total(static_cast<Ctr>(c));
  }
  if (total(k_ok) == 0) std::fprintf(out, "  no call completed ok: the soak did nothing\n");
  std::fprintf(out, "%s\n", bad == 0 && total(k_ok) > 0 ? "PASS" : "FAIL");
  if (!g_o.json_path.empty()) {
    FILE* j = g_o.json_path == "-" ? stdout : std::fopen(g_o.json_path.c_str(), "w");
    if (j == nullptr) {
      std::fprintf(stderr, "tern-soak: cannot write %s\n", g_o.json_path.c_str());
      return;
    }
    std::fprintf(j, "{\"seed\":%" PRIu64 ",\"seconds\":%.1f,\"command\":%s", g_seed, secs,
                 json_quote(g_command).c_str());
    std::fprintf(j, ",\"pass\":%s,\"faults\":%" PRIu64, bad == 0 && total(k_ok) > 0 ? "true" : "false",
                 total_faults());
    for (int c = 0; c < kNumCtr; ++c) std::fprintf(j, ",\"%s\":%" PRIu64, kCtrName[c], total(static_cast<Ctr>(c)));
    std::fprintf(j, ",\"status\":{");
    bool first = true;
    for (int s = 0; s < kNumStatus; ++s) {
      uint64_t n = 0;
      for (int i = 0; i < g_next_slot; ++i) n += g_sh->slots[i].status[s].load();
      if (n == 0) continue;
      std::fprintf(j, "%s\"%s\":%" PRIu64, first ? "" : ",", call_status_name(static_cast<CallStatus>(s)), n);
      first = false;
    }
    std::fprintf(j, "}}\n");
    if (j != stdout) std::fclose(j);
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_command = "tern-soak";
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--seed" && i + 1 < argc) {
      ++i;
      continue;
    }
    if (std::string_view(argv[i]).starts_with("--seed=")) continue;
    g_command += ' ';
    g_command += argv[i];
  }
  // The command line, as one table (apps/option_parser.h) that parses it
  // and prints --help.
  apps::OptionParser p("tern-soak", "[options]");
  p.version(std::string("tern-soak ") + tern::version());
  p.heading(
      "\n"
      "The fault soak (docs/reliability.md): a server and client processes over pmd/shm,\n"
      "calls of every shape with their payloads checked, faults drawn from a seeded\n"
      "generator. Prints a report; exits 1 if an invariant is violated.\n");
  p.count("seed", "N", "the seed (default: from the clock; printed either way)", 0, UINT64_MAX, &g_o.seed);
  p.duration("seconds", "S", "run for S seconds of faults, then drain and check", 1e7, &g_o.seconds);
  p.count("calls", "N", "... or until N calls were issued and", 0, 1ull << 40, &g_o.target_calls);
  p.count("faults", "N", "N faults injected (both: whichever is later)", 0, 1ull << 40, &g_o.target_faults);
  p.duration("max-seconds", "S", "end a --calls/--faults run after S seconds anyway", 1e7, &g_o.max_seconds);
  p.flag("ci", "the CI preset: --seconds 100 (about 2 minutes under ASan)", [] { g_o.seconds = 100; });
  p.count("clients", "N", "client processes (3)", 1, 32, &g_o.clients);
  p.count("engines", "N", "engines per client (2)", 1, 16, &g_o.engines);
  p.count("conns", "N", "connections per engine (2)", 1, 64, &g_o.conns);
  p.count("window", "N", "calls in flight per connection (8)", 1, 256, &g_o.window);
  p.count("fault-ms", "N", "mean interval between faults in each client (60; 0: none)", 0, 1u << 30, &g_o.fault_ms);
  p.count("proc-fault-ms", "N", "mean interval between process faults (4000)", 0, 1u << 30, &g_o.proc_fault_ms);
  p.flag("no-proc-faults", "no SIGKILL/SIGSTOP", &g_o.proc_faults, false);
  p.count("keepalive-ms", "N", "clients' keepalive_ms and keepalive_timeout_ms (300)", 0, 1u << 20, &g_o.keepalive_ms);
  p.text("path", "P", "the server's socket (default /tmp/tern-soak-PID.sock)", &g_o.path);
  p.text("device", "SPEC",
         "another device, e.g. verbs:dev=rxe0,addr=169.254.77.1,port=20998:\n"
         "no driver faults there (closes instead); the others stay",
         &g_o.device);
  p.flag("no-driver-faults", "closes instead of dropped QPs, QP errors and delays", &g_o.driver_faults, false);
  p.text("flap-netdev", "NAME",
         "port flaps: `ip link set NAME down`, then up (root; the rxe\n"
         "VM's dum0), spread over a --seconds run; after each, every\n"
         "client must complete calls again within 30 s",
         &g_o.flap_netdev);
  p.count("flaps", "N", "how many (2)", 0, 100, &g_o.flaps);
  p.count("flap-down-ms", "N", "how long the port stays down (2000)", 0, 600'000, &g_o.flap_down_ms);
  p.text("logdir", "D", "each process's stderr (default /tmp/tern-soak-PID.d; removed on a pass)", &g_o.logdir);
  p.flag("keep-logs", "keep the log directory after a pass", &g_o.keep_logs);
  p.text("json", "FILE", "also write the report as JSON (- for stdout)", &g_o.json_path);
  p.flag("verbose", "engine warnings in the logs (default: errors only)", &g_o.verbose);
  p.epilogue(
      "\n"
      "Rules: every call completes exactly once. kOk needs its payload verified. A\n"
      "call may fail only with kTimedOut if it carried a deadline, kCancelled if the\n"
      "soak cancelled it, kDisconnected if it was no_retry or its connection was closed\n"
      "by the soak. Anything else is an invariant violation.\n"
      "Exit: 0 every invariant held, 1 one was violated, 2 bad usage.");
  if (int rc = p.run(argc, argv); rc >= 0) return rc;
  g_o.seed_given = p.given("seed");
  if (p.given("keepalive-ms")) g_o.keepalive_timeout_ms = g_o.keepalive_ms;
  if (g_o.seconds == 0 && g_o.target_calls == 0 && g_o.target_faults == 0) g_o.seconds = 30;
  if (!g_o.device.empty() && !g_o.device.starts_with("shm:")) g_o.driver_faults = false;
  if (!g_o.flap_netdev.empty() && (g_o.seconds <= 0 || g_o.device.empty() || g_o.device.starts_with("shm:"))) {
    std::fprintf(stderr, "tern-soak: --flap-netdev needs --seconds and an RDMA --device on that netdev\n");
    return 2;
  }
  if (g_o.keepalive_ms == 0) {
    std::fprintf(stderr, "tern-soak: --keepalive-ms 0 would leave a stopped server undetected\n");
    return 2;
  }
  g_seed = g_o.seed_given ? g_o.seed : splitmix(monotonic_ns() ^ (uint64_t{static_cast<uint32_t>(getpid())} << 32));
  g_command += " --seed " + std::to_string(g_seed);
  if (g_o.path.empty()) g_o.path = "/tmp/tern-soak-" + std::to_string(getpid()) + ".sock";
  if (g_o.logdir.empty()) g_o.logdir = "/tmp/tern-soak-" + std::to_string(getpid()) + ".d";
  if (mkdir(g_o.logdir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "tern-soak: cannot make %s: %s\n", g_o.logdir.c_str(), std::strerror(errno));
    return 2;
  }
  set_log_level(g_o.verbose ? LogLevel::kWarn : LogLevel::kError);
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "tern-soak: mmap: %s\n", std::strerror(errno));
    return 2;
  }
  g_sh = new (m) Shared();
  if (g_o.json_path == "-") g_human = stderr;
  std::fprintf(g_human, "tern-soak: seed %" PRIu64 "; reproduce with: %s\n", g_seed, g_command.c_str());
  std::fprintf(g_human, "tern-soak: %u clients x %u engines x %u connections, window %u, over %s%s, logs in %s\n",
              g_o.clients, g_o.engines, g_o.conns, g_o.window,
              g_o.device.empty() ? ("shm:path=" + g_o.path).c_str() : g_o.device.c_str(),
              g_o.driver_faults ? "" : " (no driver faults)", g_o.logdir.c_str());
  std::fflush(g_human);
  signal(SIGINT, on_sigint);
  signal(SIGTERM, on_sigint);
  signal(SIGPIPE, SIG_IGN);
  const uint64_t t0 = now_ms();
  supervise();
  report((now_ms() - t0) / 1000.0);
  uint64_t bad = 0;
  for (int c = kFirstInvariant; c < kNumCtr; ++c) bad += total(static_cast<Ctr>(c));
  const bool pass = bad == 0 && total(k_ok) > 0;
  if (g_o.device.empty()) unlink(g_o.path.c_str());
  if (pass && !g_o.keep_logs) {
    for (const std::string& l : g_logs) unlink(l.c_str());
    rmdir(g_o.logdir.c_str());
  } else {
    std::fprintf(g_human, "logs: %s\n", g_o.logdir.c_str());
  }
  munmap(m, sizeof(Shared));
  return pass ? 0 : 1;
}
