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
//   tern-sim --seed=N [--trace]     one schedule (the trace printed with --trace)
//   tern-sim --seeds=N [--from=S]   N schedules (CI mode)
//   tern-sim --determinism[=S]      seed S twice, another between: same trace hash
// A failing seed prints the one command that replays it and the end of its trace.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "engine/duplicate_cache.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "sim/sim_world.h"

using namespace tern;
using namespace tern::rpc;

namespace {

constexpr uint32_t kProg = 0x20057000, kVers = 1;
enum Proc : uint32_t { kEcho = 1, kSum = 2, kFill = 3, kBig = 4, kAppend = 5 };
constexpr uint32_t kCalls = 100;
constexpr uint32_t kWindow = 8;
constexpr uint64_t kMaxIterations = 4'000'000;
constexpr uint32_t kFaultKinds = 12;

uint8_t pattern(uint32_t call, uint32_t i) { return static_cast<uint8_t>(call * 131 + i * 7 + 1); }

// ---------------------------------------------------------------- server

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }

void sum(void*, ServerCall* c) {
  uint32_t s = 0;
  for (uint8_t b : c->bulk()) s += b;
  (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(&s), 4));
}

// args: u32 call, u32 n -> n pattern bytes into the write chunk.
void fill(void*, ServerCall* c) {
  uint32_t a[2] = {};
  if (c->args().size() >= 8) std::memcpy(a, c->args().data(), 8);
  uint32_t n = std::min(a[1], c->bulk_capacity());
  auto b = c->bulk_buffer(n);
  for (uint32_t i = 0; i < b.size(); ++i) b[i] = pattern(a[0], i);
  (void)c->reply({}, b);
}

// args: u32 call, u32 n -> n pattern bytes of results (a reply chunk when large).
void big(void*, ServerCall* c) {
  uint32_t a[2] = {};
  if (c->args().size() >= 8) std::memcpy(a, c->args().data(), 8);
  std::vector<uint8_t> r(a[1]);
  for (uint32_t i = 0; i < r.size(); ++i) r[i] = pattern(a[0], i);
  (void)c->reply(r);
}

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

void append(void* ctx, ServerCall* c) {
  auto* st = static_cast<AppendServer*>(ctx);
  std::vector<uint8_t> cached;
  switch (st->drc->begin(c, &cached)) {
    case DuplicateCache::Found::kDone:
      (void)c->reply(cached);
      return;
    case DuplicateCache::Found::kInProgress:
      return;
    case DuplicateCache::Found::kNew:
      break;
  }
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

// ---------------------------------------------------------------- client

struct CallState {
  uint32_t index = 0;
  Proc proc = kEcho;
  uint32_t len = 0;
  std::vector<uint8_t> args;
  uint8_t* buf = nullptr;  // bulk memory (engine-registered)
  uint32_t done = 0;
  CallStatus status = CallStatus::kOk;
  std::string error;  // a wrong result
  sim::World* world = nullptr;
};

void on_done(void* ctx, const CallReply& r) {
  auto* s = static_cast<CallState*>(ctx);
  ++s->done;
  s->status = r.status;
  s->world->note("call " + std::to_string(s->index) + " done " + call_status_name(r.status));
  if (r.status != CallStatus::kOk) {
    if (r.status != CallStatus::kDisconnected && r.status != CallStatus::kTimedOut)
      s->error = std::string("unexpected status ") + call_status_name(r.status);
    return;
  }
  auto bad = [&](const char* what) { s->error = what; };
  switch (s->proc) {
    case kEcho:
      if (r.results.size() != s->args.size() || std::memcmp(r.results.data(), s->args.data(), s->args.size()) != 0)
        bad("echo results differ from the arguments");
      break;
    case kSum: {
      uint32_t want = 0, got = 0;
      for (uint32_t i = 0; i < s->len; ++i) want += s->buf[i];
      if (r.results.size() != 4) return bad("sum: results not 4 bytes");
      std::memcpy(&got, r.results.data(), 4);
      if (got != want) bad("sum: the server pulled other bytes than the read chunk's");
      break;
    }
    case kFill:
      if (r.bulk_recv_len != s->len) return bad("fill: write chunk length differs");
      for (uint32_t i = 0; i < s->len; ++i)
        if (s->buf[i] != pattern(s->index, i)) return bad("fill: write chunk bytes differ");
      break;
    case kBig:
      if (r.results.size() != s->len) return bad("big: results length differs");
      for (uint32_t i = 0; i < s->len; ++i)
        if (r.results[i] != pattern(s->index, i)) return bad("big: results bytes differ");
      break;
    case kAppend: {
      uint32_t got[2] = {};
      if (r.results.size() != 8) return bad("append: results not 8 bytes");
      std::memcpy(got, r.results.data(), 8);
      if (got[0] != s->index || got[1] == 0) bad("append: results of another call");
      break;
    }
  }
}

struct Outcome {
  bool ok = true;
  std::string why;
  uint64_t hash = 0;
  uint64_t events = 0;
  std::vector<std::string> trace;
};

EngineOptions options(bool server) {
  EngineOptions o;
  // Small arenas: mapping and touching them is most of a schedule's cost.
  // The client's also holds every call's bulk buffers (Engine::alloc).
  o.arena_bytes = server ? 4u << 20 : 8u << 20;
  o.credits = 8;
  o.max_bulk = 64u << 10;
  o.max_reply = 64u << 10;
  o.max_mrs = 64;
  o.frwr_depth = 32;
  o.recv_buffers = 64;
  o.send_buffers = 64;
  o.max_connections = 16;
  return o;
}

Outcome run(uint64_t seed, bool keep_all_trace) {
  Outcome out;
  const std::string wname = "tern-sim-" + std::to_string(seed);
  auto world = sim::World::open(wname, seed);
  sim::World& w = *world;
  w.keep_trace(true, keep_all_trace ? 0 : 300);
  w.install_clock();
  // What the engines say goes into the schedule's trace (and its hash): a
  // decision they make differently in a replay -- a backoff, a deadline --
  // shows there even when the events around it look the same.
  struct Sink {
    static void log(void* ctx, const LogRecord& r) {
      static_cast<sim::World*>(ctx)->note(std::string("log ") + r.subsystem + ": " + r.message);
      if (std::getenv("TERN_SIM_LOG") != nullptr) std::fprintf(stderr, "%s: %s\n", r.subsystem, r.message);
    }
  };
  set_log_sink(Sink::log, &w);
  auto fail = [&](std::string why) {
    if (out.ok) out.ok = false, out.why = std::move(why);
  };
  // The device's shape: a third of the schedules without a shared receive
  // queue (the engine then posts receives per connection, the other way
  // credits work), a third with QP-bound registrations (the engine then
  // keeps one PD for all connections instead of one each).
  const bool srq = w.draw_below(3) != 0;
  const bool qp_bound = w.draw_below(3) == 0;
  const std::string spec =
      "sim:world=" + wname + ",addr=srv" + (srq ? "" : ",srq=0") + (qp_bound ? ",qp_bound=1" : "");
  w.note("device " + spec);
  std::vector<CallState> calls(kCalls);
  AppendServer app;
  app.execs.assign(kCalls, 0);
  {
    std::unique_ptr<Engine> server;
    // The server engine, made again after a fault destroyed it (a server
    // restarted: a fresh duplicate cache, which must go before its engine).
    auto make_server = [&]() -> bool {
      auto sr = Engine::create(options(true));
      if (!sr) {
        fail("server engine create failed: " + sr.status().message());
        return false;
      }
      server = std::move(*sr);
      app.drc = std::make_unique<DuplicateCache>(1024);
      app.execs.assign(kCalls, 0);
      server->handle(kProg, kVers, kEcho, echo, nullptr);
      server->handle(kProg, kVers, kSum, sum, nullptr);
      server->handle(kProg, kVers, kFill, fill, nullptr);
      server->handle(kProg, kVers, kBig, big, nullptr);
      server->handle(kProg, kVers, kAppend, append, &app);
      if (Status s = server->listen(spec); !s) {
        fail("listen: " + s.message());
        return false;
      }
      return true;
    };
    auto destroy_server = [&]() {
      app.drc.reset();
      server.reset();
    };
    auto cr = Engine::create(options(false));
    if (!make_server() || !cr) {
      fail("engine create failed");
      destroy_server();
      return out;
    }
    std::unique_ptr<Engine> client = std::move(*cr);
    auto conn_r = client->connect(spec);
    if (!conn_r) {
      fail("connect: " + conn_r.status().message());
      return out;
    }
    Connection* conn = *conn_r;

    // The faults of this schedule: up to three, each when the calls issued
    // reach a count the seed picks (and a few iterations more).
    struct PlannedFault {
      uint64_t at;
      uint32_t kind;
      uint32_t delay;
      bool fired = false;
    };
    std::vector<PlannedFault> plan;
    const uint32_t nfaults = static_cast<uint32_t>(w.draw_below(4));
    for (uint32_t i = 0; i < nfaults; ++i)
      plan.push_back({5 + w.draw_below(90), static_cast<uint32_t>(w.draw_below(kFaultKinds)),
                      static_cast<uint32_t>(w.draw_below(50))});

    uint32_t next = 0, outstanding_issued = 0;
    uint64_t server_stalled_until = 0;
    uint64_t server_down_until = 0;  // destroyed by a fault; made again then
    uint32_t idle_rounds = 0;
    bool client_gone = false;  // the client engine was destroyed mid-flight (a fault)
    auto issue = [&]() {
      if (client_gone) return;
      // The first connect must finish before calls are accepted; after a
      // loss they are accepted while the connection re-establishes itself.
      const ConnState cs = conn->state();
      if (cs != ConnState::kReady && cs != ConnState::kReconnecting) return;
      while (next < kCalls && conn->outstanding() < kWindow && !conn->failed()) {
        CallState& s = calls[next];
        s.index = next;
        s.world = &w;
        s.proc = static_cast<Proc>(1 + w.draw_below(5));
        Call c;
        c.prog = kProg, c.vers = kVers, c.proc = s.proc;
        c.done = on_done;
        c.ctx = &s;
        switch (s.proc) {
          case kEcho:
            s.len = 4 * static_cast<uint32_t>(1 + w.draw_below(100));
            s.args.resize(s.len);
            for (uint32_t i = 0; i < s.len; ++i) s.args[i] = pattern(next, i);
            c.max_results = s.len;
            break;
          case kSum:
            s.len = static_cast<uint32_t>(1 + w.draw_below(16384));
            s.buf = static_cast<uint8_t*>(client->alloc(s.len));
            for (uint32_t i = 0; i < s.len; ++i) s.buf[i] = pattern(next, i);
            c.bulk_send = std::span<const uint8_t>(s.buf, s.len);
            c.max_results = 4;
            break;
          case kAppend: {
            s.len = 4;
            uint32_t a = next;
            s.args.assign(reinterpret_cast<uint8_t*>(&a), reinterpret_cast<uint8_t*>(&a) + 4);
            c.max_results = 8;
            break;
          }
          case kFill:
          case kBig: {
            s.len = static_cast<uint32_t>(1 + w.draw_below(s.proc == kFill ? 16384 : 32768));
            uint32_t a[2] = {next, s.len};
            s.args.assign(reinterpret_cast<uint8_t*>(a), reinterpret_cast<uint8_t*>(a) + 8);
            if (s.proc == kFill) {
              s.buf = static_cast<uint8_t*>(client->alloc(s.len));
              std::memset(s.buf, 0, s.len);
              c.bulk_recv = std::span<uint8_t>(s.buf, s.len);
            } else {
              c.max_results = s.len;
            }
            break;
          }
        }
        c.args = s.args;
        if (w.chance(150)) c.timeout_ns = 1'000'000 + w.draw_below(2'000'000'000);
        if (s.buf == nullptr && (s.proc == kSum || s.proc == kFill)) {
          fail("client alloc failed");
          return;
        }
        int rc = conn->call(c);
        w.note("call " + std::to_string(next) + " proc " + std::to_string(s.proc) + " len " + std::to_string(s.len) +
               " rc " + std::to_string(rc));
        if (rc != 0) {
          if (rc == EAGAIN) return;  // try again later
          s.done = 1;  // refused at call(): no callback is owed
          s.status = CallStatus::kDisconnected;
        } else {
          ++outstanding_issued;
        }
        ++next;
      }
    };

    auto all_done = [&]() {
      if (client_gone) return true;  // its calls were completed by its destruction (checked at the end)
      if (next < kCalls && !conn->failed()) return false;
      for (uint32_t i = 0; i < next; ++i)
        if (calls[i].done == 0) return false;
      return true;
    };

    uint64_t it = 0;
    for (; it < kMaxIterations && !all_done(); ++it) {
      issue();
      if (!out.ok) break;
      for (auto& f : plan) {
        if (f.fired || next < f.at || f.delay-- > 0) continue;
        f.fired = true;
        switch (f.kind) {
          case 0:
            if (sim::SimQp* q = w.pick_connected_qp()) w.fail_qp(q);
            break;
          case 1: {
            uint64_t d = 10'000'000 + w.draw_below(12'000'000'000ull);
            server_stalled_until = w.now_ns() + d;
            w.note("fault stall-server " + std::to_string(d / 1'000'000) + " ms");
            break;
          }
          case 2:
            if (sim::SimQp* q = w.pick_connected_qp()) w.disconnect_qp(q);
            break;
          case 3: {
            uint64_t d = 1'000'000'000 + w.draw_below(6'000'000'000ull);
            w.note("fault time-jump " + std::to_string(d / 1'000'000) + " ms");
            w.advance(d);
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
            if (client_gone) break;
            w.note("fault destroy-client-engine");
            client.reset();
            conn = nullptr;
            client_gone = true;
            break;
          case 7:
            // Executed by the server, failed at the client: the call is
            // sent again on the next connection (the duplicate cache's case).
            if (sim::SimQp* q = w.pick_connected_qp()) w.lose_next_ack(q);
            break;
          case 8:
            // A port goes down for 1 us to 3 s and comes back.
            if (sim::SimQp* q = w.pick_connected_qp()) w.link_down(q, 1'000 + w.draw_below(3'000'000'000ull));
            break;
          case 9:
            // A QP fails and its kDisconnected comes twice, the copy late.
            if (sim::SimQp* q = w.pick_connected_qp()) {
              w.duplicate_next_disconnect(q);
              w.fail_qp(q);
            }
            break;
          case 10:
            // Finite RNR retries (0-7, 10 us - 10 ms apart): a SEND that
            // finds no receive fails after them. Credits kept, none does.
            if (sim::SimQp* q = w.pick_connected_qp())
              w.rnr_retry(q, static_cast<uint32_t>(w.draw_below(8)), 10'000 + w.draw_below(10'000'000));
            break;
          case 11: {
            // The server's process goes away mid-flight and is started
            // again 0.1-3 s later: its calls in progress are lost with it,
            // the client reconnects and sends them again.
            if (server == nullptr) break;
            const uint64_t d = 100'000'000 + w.draw_below(2'900'000'000ull);
            w.note("fault destroy-server-engine, back in " + std::to_string(d / 1'000'000) + " ms");
            destroy_server();
            server_down_until = w.now_ns() + d;
            break;
          }
        }
      }
      if (server == nullptr && w.now_ns() >= server_down_until) {
        w.note("server engine made again");
        if (!make_server()) break;
      }
      int work = 0;
      if (w.draw_below(2) == 0) {
        if (!client_gone) work += client->poll();
      } else if (w.now_ns() >= server_stalled_until && server != nullptr) {
        work += server->poll();
      }
      // Nothing runnable and nobody busy: time passes until a timer is due.
      if (work == 0 && !w.runnable()) {
        if (++idle_rounds > 8) {
          // 0.1 ms to ~100 ms, small ones as often as large ones: timers
          // are reached both exactly and overshot.
          w.advance((100'000 << w.draw_below(11)) + w.draw_below(100'000));
          idle_rounds = 0;
        }
      } else {
        idle_rounds = 0;
      }
    }
    if (out.ok && it >= kMaxIterations) fail("the calls did not all complete within the iteration budget");
    if (server == nullptr) {
      // Destroyed by a fault and not yet made again: it comes back now, so
      // that the close and the accounting below have a server.
      if (w.now_ns() < server_down_until) w.advance(server_down_until - w.now_ns());
      w.note("server engine made again");
      if (!make_server()) fail("the server engine could not be made again");
    }

    // Idle: the server gives everything back once the calls are done and
    // the device has completed what it was doing; the client once its
    // connection is closed (its last unsignaled Sends wait for a signaled
    // completion that an idle connection never has: the send-context ring).
    auto settle = [&](auto&& idle, const char* what) {
      for (uint64_t k = 0; k < 200'000 && !idle(); ++k) {
        if (w.draw_below(2) == 0) {
          if (!client_gone) (void)client->poll();
        } else {
          (void)server->poll();
        }
        if (k % 64 == 63) w.advance(1'000'000);
      }
      if (!idle())
        fail(std::string("not idle ") + what + ": client " +
             (client_gone ? std::string("destroyed") : testing::accounting(*client).to_string()) + "; server " +
             testing::accounting(*server).to_string());
    };
    if (out.ok) settle([&] { return testing::accounting(*server).idle() && !w.runnable(); }, "after the calls");
    // No call is left, so no peer may reach any memory: every registration
    // a call made has ended (the device's own view, not the engine's).
    if (out.ok && w.counters().live_regs() != 0)
      fail(std::to_string(w.counters().live_regs()) + " fast registrations still valid with no call left");
    w.note("closing");
    if (!client_gone) conn->close();
    if (out.ok)
      settle(
          [&] {
            return (client_gone || testing::accounting(*client).idle()) && testing::accounting(*server).idle() &&
                   !w.runnable();
          },
          "after the close");
    client.reset();
    destroy_server();
  }
  if (!app.error.empty()) fail(app.error);
  // The end of the schedule.
  for (uint32_t i = 0; i < kCalls; ++i) {
    const CallState& s = calls[i];
    if (i < kCalls && s.done > 1) fail("call " + std::to_string(i) + " completed " + std::to_string(s.done) + " times");
    if (s.index == i && s.world != nullptr && s.done == 0) fail("call " + std::to_string(i) + " never completed");
    if (!s.error.empty()) fail("call " + std::to_string(i) + ": " + s.error);
  }
  const sim::WorldCounters& c = w.counters();
  if (c.live_regs() != 0)
    fail("fast registrations never ended: " + std::to_string(c.fast_regs) + " made, " + std::to_string(c.local_invs) +
         " local inv, " + std::to_string(c.remote_invs) + " remote inv, " + std::to_string(c.destroyed_valid) +
         " destroyed registered");
  if (c.inv_of_invalid != 0) fail(std::to_string(c.inv_of_invalid) + " invalidations of registrations already ended");
  if (c.cq_overruns != 0) fail(std::to_string(c.cq_overruns) + " CQ overruns");
  // Credits kept: a peer sends only what the other side's posted receives
  // back (its grant, or the replies its calls await), so no SEND ever waits
  // for a receive.
  if (c.rnr_waits != 0)
    fail("credits not backed by receives: " + std::to_string(c.rnr_waits) + " SENDs found no receive posted (RNR)");
  char sum_line[300];
  std::snprintf(sum_line, sizeof sum_line,
                "end events=%" PRIu64 " regs=%" PRIu64 " linv=%" PRIu64 " rinv=%" PRIu64 " destroyed=%" PRIu64
                " qp_errors=%" PRIu64 " flushed=%" PRIu64 " faults=%" PRIu64 " rnr_waits=%" PRIu64
                " rnr_naks=%" PRIu64 " acks_lost=%" PRIu64 " link_failures=%" PRIu64,
                c.events, c.fast_regs, c.local_invs, c.remote_invs, c.destroyed_valid, c.qp_errors, c.flushed, c.faults,
                c.rnr_waits, c.rnr_naks, c.acks_lost, c.link_failures);
  w.note(sum_line);
  out.hash = w.trace_hash();
  out.events = c.events;
  out.trace = w.trace();
  set_log_sink(nullptr, nullptr);
  w.uninstall_clock();
  return out;
}

void report_failure(const char* argv0, uint64_t seed, const Outcome& o) {
  std::printf("FAIL seed %" PRIu64 ": %s\n", seed, o.why.c_str());
  std::printf("replay: %s --seed=%" PRIu64 " --trace\n", argv0, seed);
  std::printf("last %zu trace lines:\n", o.trace.size());
  for (const auto& l : o.trace) std::printf("  %s\n", l.c_str());
}

bool arg_u64(const char* a, const char* name, uint64_t* v) {
  size_t n = std::strlen(name);
  if (std::strncmp(a, name, n) != 0 || a[n] != '=') return false;
  *v = std::strtoull(a + n + 1, nullptr, 0);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 0, seeds = 0, from = 1, det = 0;
  bool one = false, trace = false, determinism = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (arg_u64(a, "--seed", &seed)) one = true;
    else if (arg_u64(a, "--seeds", &seeds)) {}
    else if (arg_u64(a, "--from", &from)) {}
    else if (std::strcmp(a, "--trace") == 0) trace = true;
    else if (std::strcmp(a, "--determinism") == 0) determinism = true, det = 7;
    else if (arg_u64(a, "--determinism", &det)) determinism = true;
    else {
      std::fprintf(stderr, "usage: %s --seed=N [--trace] | --seeds=N [--from=S] | --determinism[=S]\n", argv[0]);
      return 2;
    }
  }
  set_log_level(LogLevel::kInfo);  // into the trace (TERN_SIM_LOG: and to stderr)
  if (one) {
    Outcome o = run(seed, trace);
    if (trace)
      for (const auto& l : o.trace) std::printf("%s\n", l.c_str());
    if (!o.ok) {
      report_failure(argv[0], seed, o);
      return 1;
    }
    std::printf("seed %" PRIu64 ": ok, %" PRIu64 " events, trace hash %016" PRIx64 "\n", seed, o.events, o.hash);
    return 0;
  }
  if (determinism) {
    Outcome a = run(det, false), b = run(det + 1, false), c = run(det, false);
    std::printf("seed %" PRIu64 ": trace hash %016" PRIx64 " then %016" PRIx64 " (seed %" PRIu64 " between: %016" PRIx64 ")\n",
                det, a.hash, c.hash, det + 1, b.hash);
    if (!a.ok) report_failure(argv[0], det, a);
    if (a.hash != c.hash || a.hash == b.hash) {
      std::printf("FAIL: the same seed gave different schedules (or two seeds the same)\n");
      return 1;
    }
    return a.ok && b.ok && c.ok ? 0 : 1;
  }
  if (seeds == 0) seeds = 20;
  uint32_t failed = 0;
  uint64_t events = 0;
  for (uint64_t s = from; s < from + seeds; ++s) {
    Outcome o = run(s, false);
    events += o.events;
    if (!o.ok) {
      ++failed;
      if (failed <= 3) report_failure(argv[0], s, o);
    }
  }
  std::printf("%" PRIu64 " schedules, %u failed, %" PRIu64 " events\n", seeds, failed, events);
  return failed == 0 ? 0 : 1;
}
