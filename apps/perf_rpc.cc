// tern-perf's RPC modes (--rpc): a server that serves tern-perf's echo-style
// ONC RPC program from one or more engines, and a client that measures the
// latency or throughput of calls to it, inline or with bulk data in chunks.
//
// The program (RFC 5531 user-defined range; arguments and results are XDR):
//   0 NULL  ()                               -> ()
//   1 ECHO  hdr, pad to --size               -> the same bytes
//   2 PUT   hdr, pad; read chunk of len      -> res: what the server found in the data it pulled
//   3 GET   hdr, pad; write chunk of len     -> res; the server filled the write chunk
//   hdr = { unsigned hyper id; unsigned len; unsigned flags }                        16 bytes
//   res = { unsigned status; unsigned len; unsigned hyper id; unsigned hyper detail } 24 bytes
//
// Data checks: a broken engine must not produce pretty numbers. An echo's
// results are compared with its arguments on every call; every result names
// its call's id and length. A bulk buffer carries its call's id in its first
// 8 bytes and ~id in its last 8 ("stamps"), which the receiving side checks on
// every call, and the sender poisons (a write chunk) or rewrites (a read
// chunk) them before each call, so stale data cannot pass. Every warm-up call
// and every --check-every'th call has kFlagFull: the sending side fills every
// byte with a pattern derived from the id, and the receiving side checks every
// byte. Any mismatch ends the run with exit status 1 and names the call and
// byte. Full checks cost the server time inside the round trip, so in bulk
// modes those calls are left out of the latency percentiles.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/stats.h"
#include "engine/engine.h"
#include "perf_common.h"
#include "perf_report.h"
#include "perf_stats.h"
#include "xdr/xdr.h"

namespace tern::apps {

using namespace tern::rpc;

namespace {

// --trace FILE: the engine's sampled calls (FILE.<engine> when there are several).
void write_trace_file(const Engine& eng, const std::string& file, uint32_t engines, uint32_t index) {
  std::string path = engines > 1 ? file + "." + std::to_string(index) : file;
  Status st = eng.write_trace(path);
  if (st.is_ok())
    std::fprintf(stderr, "tern-perf: engine %u: call trace in %s (chrome://tracing, ui.perfetto.dev)\n", index,
                 path.c_str());
  else
    std::fprintf(stderr, "tern-perf: engine %u: %s\n", index, st.to_string().c_str());
}

// --breakdown: where the round trip goes, one line per stage, with each
// stage's share of the mean round trip (the stages tile it; send_done on the
// client and pull on the server are not on every call's path).
void print_breakdown(FILE* out, const char* who, const std::vector<std::pair<const char*, LatencySummary>>& bd) {
  if (bd.empty()) return;
  double total = 0;  // all calls' round trips, summed (ns)
  for (const auto& [name, l] : bd)
    if (std::strcmp(name, "total") == 0) total = static_cast<double>(l.mean) * static_cast<double>(l.count);
  std::fprintf(out, "%s: where the round trip goes (ns)\n", who);
  std::fprintf(out, "  %-11s %12s %9s %9s %9s %9s  %s\n", "stage", "count", "mean", "p50", "p99", "p99.9",
               "share of the total");
  for (const auto& [name, l] : bd) {
    char share[16] = "";
    if (total > 0 && std::strcmp(name, "total") != 0 && std::strcmp(name, "send_done") != 0)
      std::snprintf(share, sizeof share, "%5.1f%%",
                    100.0 * static_cast<double>(l.mean) * static_cast<double>(l.count) / total);
    std::fprintf(out, "  %-11s %12llu %9llu %9llu %9llu %9llu  %s\n", name, static_cast<unsigned long long>(l.count),
                 static_cast<unsigned long long>(l.mean), static_cast<unsigned long long>(l.p50),
                 static_cast<unsigned long long>(l.p99), static_cast<unsigned long long>(l.p999), share);
  }
}

// ---------------------------------------------------------------- the program

constexpr uint32_t kPerfProg = 0x2054504d;  // "TPM" in 0x20000000-0x3fffffff (RFC 5531 §7.3)
constexpr uint32_t kPerfVers = 1;
enum : uint32_t { kProcNull = 0, kProcEcho = 1, kProcPut = 2, kProcGet = 3 };
constexpr uint32_t kFlagFull = 1;  // pattern in every byte, checked in every byte
constexpr size_t kHdrLen = 16, kResLen = 24;
enum : uint32_t { kResOk = 0, kResBadLength = 1, kResBadStamp = 2, kResBadData = 3, kResTooLarge = 4 };

const char* res_status_name(uint32_t s) {
  switch (s) {
    case kResOk: return "ok";
    case kResBadLength: return "a wrong length";
    case kResBadStamp: return "wrong stamps (data of another call, or none)";
    case kResBadData: return "wrong data";
    case kResTooLarge: return "a length over what it can serve";
  }
  return "an unknown status";
}

struct Hdr {
  uint64_t id = 0;
  uint32_t len = 0;
  uint32_t flags = 0;
};
struct Res {
  uint32_t status = kResOk;
  uint32_t len = 0;
  uint64_t id = 0;
  uint64_t detail = 0;  // the first wrong byte, or the largest length served
};

void encode_hdr(uint8_t* p, const Hdr& h) {
  xdr::XdrWriter w(std::span<uint8_t>(p, kHdrLen));
  w.put_u64(h.id);
  w.put_u32(h.len);
  w.put_u32(h.flags);
}
bool decode_hdr(std::span<const uint8_t> args, Hdr* h) {
  if (args.size() < kHdrLen) return false;
  xdr::XdrReader r(args.first(kHdrLen));
  h->id = r.get_u64();
  h->len = r.get_u32();
  h->flags = r.get_u32();
  return r.ok();
}
void encode_res(uint8_t* p, const Res& s) {
  xdr::XdrWriter w(std::span<uint8_t>(p, kResLen));
  w.put_u32(s.status);
  w.put_u32(s.len);
  w.put_u64(s.id);
  w.put_u64(s.detail);
}
bool decode_res(std::span<const uint8_t> results, Res* s) {
  if (results.size() != kResLen) return false;
  xdr::XdrReader r(results);
  s->status = r.get_u32();
  s->len = r.get_u32();
  s->id = r.get_u64();
  s->detail = r.get_u64();
  return r.ok();
}

// ---------------------------------------------------------------- patterns and stamps

// Little-endian byte order on the wire whatever the host's, so that two hosts
// agree on every byte.
inline uint64_t to_le(uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
  return v;
}
inline uint64_t pattern_word(uint64_t seed, uint64_t k) {
  uint64_t x = ((seed + 1) * 0x9E3779B97F4A7C15ull) ^ ((k + 1) * 0xC2B2AE3D27D4EB4Full);
  return x ^ (x >> 31);
}
inline uint8_t pattern_byte(uint64_t seed, size_t i) {
  return static_cast<uint8_t>(pattern_word(seed, i / 8) >> (8 * (i % 8)));
}
void fill_pattern(uint8_t* p, size_t len, uint64_t seed) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = to_le(pattern_word(seed, i / 8));
    std::memcpy(p + i, &w, 8);
  }
  for (; i < len; ++i) p[i] = pattern_byte(seed, i);
}
// The first byte in [from, to) that is not the pattern, or -1. Word compares
// keep a full check of 1 MiB well under the transfer's own time.
long long find_mismatch(const uint8_t* p, size_t from, size_t to, uint64_t seed) {
  size_t i = from;
  for (; i < to && i % 8 != 0; ++i)
    if (p[i] != pattern_byte(seed, i)) return static_cast<long long>(i);
  for (; i + 8 <= to; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != to_le(pattern_word(seed, i / 8))) break;  // the byte loop below finds which
  }
  for (; i < to; ++i)
    if (p[i] != pattern_byte(seed, i)) return static_cast<long long>(i);
  return -1;
}

void put_stamps(uint8_t* p, size_t len, uint64_t id) {
  uint64_t head = to_le(id), tail = to_le(~id);
  std::memcpy(p, &head, 8);
  std::memcpy(p + len - 8, &tail, 8);
}
bool stamps_ok(const uint8_t* p, size_t len, uint64_t id) {
  uint64_t head, tail;
  std::memcpy(&head, p, 8);
  std::memcpy(&tail, p + len - 8, 8);
  return head == to_le(id) && tail == to_le(~id);
}
// The whole buffer: stamps and the pattern between them.
long long full_mismatch(const uint8_t* p, size_t len, uint64_t id) {
  uint64_t head, tail;
  std::memcpy(&head, p, 8);
  std::memcpy(&tail, p + len - 8, 8);
  if (head != to_le(id)) return 0;
  long long bad = find_mismatch(p, 8, len - 8, id);
  if (bad >= 0) return bad;
  if (tail != to_le(~id)) return static_cast<long long>(len - 8);
  return -1;
}

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

void on_signal(int) { g_stop.store(true); }  // lock-free atomic store: async-signal-safe
void install_signals() {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void sleep_ms(unsigned ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// The states an engine thread reports to the monitor.
enum EngineState : int { kStarting, kConnecting, kRunning, kMeasuring, kDone, kFailed };

// ================================================================ server


// --wait: the engine found nothing to do, so sleep in its wait mode until it
// has (at most 50 ms, so that stop flags and stall timers are still seen). A
// device without wait mode says so once and the loop goes back to spinning.
void idle_wait(Engine* eng, bool* wait) {
  auto r = eng->wait(50);
  if (!r) {
    std::fprintf(stderr, "tern-perf: --wait: %s; busy-polling instead\n", r.status().to_string().c_str());
    *wait = false;
  }
}

struct ServerEngine {
  const Options* o = nullptr;
  bool wait = false;  // --wait, until the device says it cannot
  uint32_t index = 0;
  std::string spec;
  std::unique_ptr<Engine> eng;
  // Replies the engine could not take yet (no free send context or no
  // send-queue room: Errc::kNoResources); retried after every poll.
  struct Deferred {
    ServerCall* call;
    AcceptStat error;  // kSuccess: reply with the results below
    bool echo;         // the results are the call's own arguments
    uint32_t res_len;
    uint8_t res[kResLen];
    std::span<const uint8_t> bulk;
  };
  std::vector<Deferred> deferred;
  uint64_t calls = 0, bad_data = 0;
  std::atomic<int> state{kStarting};
  std::atomic<uint64_t> heartbeat{0};
  std::string error;  // set before state becomes kFailed
};

// Answers a call now, or keeps the answer for after the next poll when the
// engine is out of send contexts or send-queue room.
void answer(ServerEngine* se, const ServerEngine::Deferred& d) {
  ServerCall* c = d.call;
  Status st = d.error != AcceptStat::kSuccess
                  ? c->reply_error(d.error)
                  : c->reply(d.echo ? c->args() : std::span<const uint8_t>(d.res, d.res_len), d.bulk);
  if (st) return;
  if (st.code() == Errc::kNoResources) {
    se->deferred.push_back(d);
    return;
  }
  if (st.code() == Errc::kDisconnected) return;  // the client left; the engine let go of the call
  // Anything else is a reply the engine refused and left with us: answer
  // SYSTEM_ERR so that the call is not stranded, and say so.
  std::fprintf(stderr, "tern-perf server: engine %u: reply to call %u refused: %s\n", se->index, c->xid(),
               st.to_string().c_str());
  if (d.error != AcceptStat::kSystemErr)
    answer(se, ServerEngine::Deferred{c, AcceptStat::kSystemErr, false, 0, {}, {}});
}

void reply_or_defer(ServerEngine* se, ServerCall* c, bool echo, const uint8_t* res, uint32_t res_len,
                    std::span<const uint8_t> bulk) {
  ServerEngine::Deferred d{c, AcceptStat::kSuccess, echo, res_len, {}, bulk};
  if (res_len != 0) std::memcpy(d.res, res, res_len);
  answer(se, d);
}

void reply_error_or_defer(ServerEngine* se, ServerCall* c, AcceptStat why) {
  answer(se, ServerEngine::Deferred{c, why, false, 0, {}, {}});
}

void retry_deferred(ServerEngine* se) {
  std::vector<ServerEngine::Deferred> pending;
  pending.swap(se->deferred);
  for (const auto& d : pending) answer(se, d);
}

void h_null(void* ctx, ServerCall* c) {
  auto* se = static_cast<ServerEngine*>(ctx);
  ++se->calls;
  reply_or_defer(se, c, false, nullptr, 0, {});
}

void h_echo(void* ctx, ServerCall* c) {
  auto* se = static_cast<ServerEngine*>(ctx);
  ++se->calls;
  reply_or_defer(se, c, true, nullptr, 0, {});
}

void reply_res(ServerEngine* se, ServerCall* c, const Res& r, std::span<const uint8_t> bulk) {
  if (r.status != kResOk) ++se->bad_data;
  uint8_t buf[kResLen];
  encode_res(buf, r);
  reply_or_defer(se, c, false, buf, kResLen, bulk);
}

// PUT: the engine has pulled the read chunk before the handler runs.
void h_put(void* ctx, ServerCall* c) {
  auto* se = static_cast<ServerEngine*>(ctx);
  ++se->calls;
  Hdr h;
  if (!decode_hdr(c->args(), &h)) {
    reply_error_or_defer(se, c, AcceptStat::kGarbageArgs);
    return;
  }
  std::span<const uint8_t> b = c->bulk();
  Res r;
  r.id = h.id;
  r.len = static_cast<uint32_t>(b.size());
  if (b.size() != h.len || b.size() < 16) {
    r.status = kResBadLength;
  } else if ((h.flags & kFlagFull) != 0) {
    if (long long bad = full_mismatch(b.data(), b.size(), h.id); bad >= 0) {
      bool stamp = bad == 0 || static_cast<size_t>(bad) == b.size() - 8;
      r.status = stamp ? kResBadStamp : kResBadData;
      r.detail = static_cast<uint64_t>(bad);
    }
  } else if (!stamps_ok(b.data(), b.size(), h.id)) {
    r.status = kResBadStamp;
  }
  reply_res(se, c, r, {});
}

// GET: fill `len` bytes of the engine's bulk buffer and push them into the
// client's write chunk with the reply.
void h_get(void* ctx, ServerCall* c) {
  auto* se = static_cast<ServerEngine*>(ctx);
  ++se->calls;
  Hdr h;
  if (!decode_hdr(c->args(), &h)) {
    reply_error_or_defer(se, c, AcceptStat::kGarbageArgs);
    return;
  }
  Res r;
  r.id = h.id;
  if (h.len < 16) {
    r.status = kResBadLength;
    reply_res(se, c, r, {});
    return;
  }
  uint32_t limit = std::min(se->o->max_bulk, c->bulk_capacity());
  if (h.len > limit) {
    r.status = kResTooLarge;
    r.detail = limit;
    reply_res(se, c, r, {});
    return;
  }
  std::span<uint8_t> b = c->bulk_buffer(h.len);
  if ((h.flags & kFlagFull) != 0) fill_pattern(b.data(), b.size(), h.id);
  put_stamps(b.data(), b.size(), h.id);
  r.len = h.len;
  reply_res(se, c, r, b);
}

// A connection's counters, the driver's QP counters among them (pmd/shm's
// exec_batch_* say how deep the batches its polls found were), as
// name=value with the zeros left out: --engine-stats prints them, for the
// connection is gone by the time the engine's own are printed.
std::string conn_counters(const ConnectionStats& s) {
  std::string out;
  for (const auto& [name, v] : s.counters) {
    if (v == 0) continue;
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += std::to_string(v);
  }
  return out;
}

int server_body(ServerEngine* se) {
  const Options& o = *se->o;
  auto fail = [se](std::string msg) {
    se->error = std::move(msg);
    se->state.store(kFailed);
    return 1;
  };
  EngineOptions eo;
  eo.credits = o.credits;
  eo.max_bulk = o.max_bulk;
  eo.breakdown = o.breakdown;
  eo.trace_every = o.trace.empty() ? 0 : 64;
  // Connections no longer carve memory of their own: receive and send
  // buffers and bulk memory are the engine's shared pools. The bulk pool
  // must hold a block of max_bulk (a power of two) and, for throughput, a
  // few calls' worth at once; --clients connections share it.
  size_t block = 4096;
  while (block < eo.max_bulk || block < eo.max_reply + 256u) block <<= 1;
  eo.bulk_pool_bytes = std::max<size_t>(64u << 20, block * std::max<size_t>(8, o.clients * 2));
  eo.arena_bytes = eo.bulk_pool_bytes + (64u << 20);
  auto e = Engine::create(eo);
  if (!e) return fail("cannot create an engine: " + e.status().to_string());
  se->eng = std::move(e).value();
  se->eng->handle(kPerfProg, kPerfVers, kProcNull, h_null, se);
  se->eng->handle(kPerfProg, kPerfVers, kProcEcho, h_echo, se);
  se->eng->handle(kPerfProg, kPerfVers, kProcPut, h_put, se);
  se->eng->handle(kPerfProg, kPerfVers, kProcGet, h_get, se);
  if (Status st = se->eng->listen(se->spec); !st) return fail("cannot listen on " + se->spec + ": " + st.to_string());
  se->state.store(kRunning);

  uint64_t polls = 0, seen_disconnects = 0, calls_before = 0;
  uint64_t leave_at = 0;  // --once: when to stop, once the client's teardown had time to finish
  // --engine-stats: the connections' counters, looked at now and then while
  // they live (a connection's are gone once its client leaves).
  std::vector<ConnectionStats> conns_seen;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (se->eng->poll() == 0 && se->wait) idle_wait(se->eng.get(), &se->wait);
    if (!se->deferred.empty()) retry_deferred(se);
    if ((++polls & 1023) != 0) continue;
    se->heartbeat.store(polls, std::memory_order_relaxed);
    if (o.engine_stats && (polls & 0xffff) == 0)
      if (auto now = se->eng->connection_stats(); !now.empty()) conns_seen = std::move(now);
    uint64_t d = se->eng->stats().disconnects.get();
    if (d != seen_disconnects) {
      seen_disconnects = d;
      if (!o.quiet) {
        std::fprintf(stderr, "tern-perf server: engine %u: a client left after %" PRIu64 " calls", se->index,
                     se->calls - calls_before);
        if (se->bad_data != 0) std::fprintf(stderr, " (%" PRIu64 " with bad data so far)", se->bad_data);
        std::fprintf(stderr, "\n");
      }
      calls_before = se->calls;
      if (o.once && leave_at == 0) leave_at = now_ticks() + static_cast<uint64_t>(0.1 * tick_hz());
    }
    if (leave_at != 0 && now_ticks() > leave_at) break;
  }
  if (o.engine_stats) {
    std::fprintf(stderr, "tern-perf server: engine %u: %s\n", se->index, se->eng->stats_json().c_str());
    for (const ConnectionStats& c : conns_seen)
      std::fprintf(stderr, "tern-perf server: engine %u: connection %" PRIu64 " (last looked at): %s\n", se->index,
                   c.id, conn_counters(c).c_str());
  }
  if (o.breakdown) {
    char who[64];
    std::snprintf(who, sizeof who, "tern-perf server: engine %u", se->index);
    print_breakdown(stderr, who, se->eng->breakdown(true));
  }
  if (!o.trace.empty()) write_trace_file(*se->eng, o.trace, o.engines, se->index);
  // The engine goes in run_engines' teardown, after o.at_end.
  se->state.store(kDone);
  return 0;
}

}  // namespace

int run_rpc_server(const Options& o) {
  install_signals();
  std::vector<std::unique_ptr<ServerEngine>> ses;
  for (uint32_t i = 0; i < o.engines; ++i) {
    auto spec = engine_spec(o.dev, i);
    if (!spec) {
      std::fprintf(stderr, "tern-perf server: %s\n", spec.status().message().c_str());
      return 2;
    }
    auto se = std::make_unique<ServerEngine>();
    se->o = &o;
    se->wait = o.wait;
    se->index = i;
    se->spec = *spec;
    ses.push_back(std::move(se));
  }
  std::vector<std::function<int()>> bodies;
  std::vector<std::function<void()>> teardowns;
  for (auto& se : ses) {
    bodies.push_back([p = se.get()] { return server_body(p); });
    teardowns.push_back([p = se.get()] { p->eng.reset(); });  // closes connections and the listener (and its socket)
  }

  auto monitor = [&]() -> int {
    // Every engine listening (or failed): engine creation populates its
    // arena, which takes a moment; 30 s is far beyond that.
    uint64_t t0 = monotonic_ns();
    for (;;) {
      bool all = true, failed = false;
      for (auto& se : ses) {
        int s = se->state.load();
        all = all && s != kStarting;
        failed = failed || s == kFailed;
      }
      if (failed || g_stop.load()) {
        g_stop.store(true);
        return 1;
      }
      if (all) break;
      if (monotonic_ns() - t0 > 30'000'000'000ull) {
        std::fprintf(stderr, "tern-perf server: the engines did not start listening within 30 s\n");
        std::_Exit(1);  // an engine thread is stuck: nothing to join
      }
      sleep_ms(10);
    }
    if (!o.quiet) {
      std::fprintf(stderr, "tern-perf server: rpc, %u engine%s listening on %s", o.engines, o.engines > 1 ? "s" : "",
                   ses[0]->spec.c_str());
      if (o.engines > 1) std::fprintf(stderr, " .. %s", ses.back()->spec.c_str());
      std::fprintf(stderr, " (credits %u, max bulk %u, %u client%s at once per engine)\n", o.credits, o.max_bulk, o.clients,
                   o.clients > 1 ? "s" : "");
    }
    // Until every engine is done (--once) or a signal. An engine that stops
    // coming back from poll() is a hang inside the engine: say so and exit
    // rather than hang too.
    std::vector<uint64_t> last(ses.size(), 0), since(ses.size(), monotonic_ns());
    constexpr uint64_t kStuckNs = 30'000'000'000ull;
    for (;;) {
      bool all_done = true;
      uint64_t now = monotonic_ns();
      for (size_t i = 0; i < ses.size(); ++i) {
        int s = ses[i]->state.load();
        if (s == kRunning) {
          all_done = false;
          uint64_t hb = ses[i]->heartbeat.load(std::memory_order_relaxed);
          if (hb != last[i]) last[i] = hb, since[i] = now;
          else if (now - since[i] > kStuckNs) {
            std::fprintf(stderr, "tern-perf server: engine %zu has not come back from poll() or a handler for 30 s\n",
                         i);
            std::_Exit(1);
          }
        }
      }
      if (all_done) return 0;
      sleep_ms(50);
    }
  };
  int rc = run_engines(o, std::move(bodies), std::move(teardowns), monitor);
  for (auto& se : ses)
    if (!se->error.empty()) std::fprintf(stderr, "tern-perf server: engine %u: %s\n", se->index, se->error.c_str());
  return rc;
}

// ================================================================ client

namespace {

struct ClientEngine;

// One call slot: --qd of them per engine, each reissued when its call completes.
struct Slot {
  ClientEngine* ce = nullptr;
  uint64_t id = 0;
  uint64_t t_issue = 0;
  bool full = false;
  uint8_t* bulk = nullptr;    // registered (Engine::alloc), the largest --bulk of the run
  std::vector<uint8_t> args;  // the largest --size of the run: hdr, then a fixed pattern
};

// What one engine measured in one run (one size of a sweep).
struct StepResult {
  uint32_t size = 0, bulk = 0;
  uint64_t measured = 0;
  double seconds = 0;
  uint64_t echo_checks = 0, stamp_checks = 0, full_checks = 0;
  // The warm-up before the measurement: calls and seconds (--warmup).
  uint64_t warm_calls = 0;
  double warm_seconds = 0;
  LatencyHistogram lat;
  CpuMeter cpu;
  std::vector<std::pair<std::string, uint64_t>> stats;  // the engine's counters over the run
};

struct ClientEngine {
  const Options* o = nullptr;
  uint32_t index = 0;
  int cpu = -1;
  std::string spec;

  // Read by the monitor on another thread.
  std::atomic<int> state{kStarting};
  std::atomic<uint64_t> measured_now{0}, done_now{0}, heartbeat{0};
  std::atomic<uint32_t> size_now{0};

  // Results: written by the engine thread, read after it has been joined.
  std::string error;
  std::vector<StepResult> steps;
  ConnectionInfo info{};

  // Engine-thread state.
  std::unique_ptr<Engine> eng;
  Connection* conn = nullptr;
  std::vector<Slot> slots;
  std::vector<Slot*> ready;  // completed in the last poll(), to reissue
  bool failed = false;
  // The run under way.
  StepResult* step = nullptr;
  uint32_t size = 0, bulk = 0;
  uint64_t next_id = 0;  // over the connection's life: a late reply cannot pass for a new call
  uint64_t issued = 0, done = 0, measured = 0, total = UINT64_MAX;  // this run's calls
  uint32_t outstanding = 0;
  uint64_t t_start = 0, t_end = 0, t_last = 0, deadline = UINT64_MAX, warm_until = UINT64_MAX, warm_t0 = 0;
  bool warming = false, stop_issuing = false;

  int run();
  bool connect();
  bool measure(uint32_t size, uint32_t bulk);
  void start_measuring(uint64_t now);
  void issue(Slot* s);
  void complete(Slot* s, const CallReply& r, uint64_t t1);
  void fail(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  static void on_done(void* ctx, const CallReply& r) {
    uint64_t t1 = now_ticks();  // first: the round trip ends here
    auto* s = static_cast<Slot*>(ctx);
    s->ce->complete(s, r, t1);
  }
};

void ClientEngine::fail(const char* fmt, ...) {
  if (failed) return;
  failed = true;
  char b[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  error = b;
  g_stop.store(true);  // the other engines stop too: the run has failed
}

// A connection's error without the error-code prefix the call status already
// names ("disconnected: disconnected: ..." otherwise).
std::string reason(const Status& st) {
  std::string s = st.message();
  if (st.sys_errno() != 0) s += std::string(" (") + std::strerror(st.sys_errno()) + ")";
  return s;
}

bool ClientEngine::connect() {
  auto c = eng->connect(spec);
  if (!c) {
    fail("cannot connect to %s: %s", spec.c_str(), c.status().to_string().c_str());
    return false;
  }
  conn = *c;
  state.store(kConnecting);
  uint64_t limit = now_ticks() + static_cast<uint64_t>(o->timeout * tick_hz());
  uint64_t polls = 0;
  while (!conn->ready() && !conn->failed()) {
    eng->poll();
    if ((++polls & 255) == 0) {
      heartbeat.store(polls, std::memory_order_relaxed);
      if (g_stop.load(std::memory_order_relaxed)) return false;
      if (now_ticks() > limit) {
        fail("no answer from %s within %.1f s", spec.c_str(), o->timeout);
        return false;
      }
    }
  }
  if (conn->failed()) {
    std::string why = conn->error().to_string();
    bool rejected = why.find("rejected") != std::string::npos;
    fail("%s: %s%s", spec.c_str(), why.c_str(),
         rejected ? " (see the server's output: a server without --rpc rejects RPC clients, and a --rpc server "
                    "rejects clients beyond its --clients at once)"
                  : "");
    return false;
  }
  return true;
}

void ClientEngine::issue(Slot* s) {
  const Options& op = *o;
  s->id = next_id++;
  ++issued;
  s->full = warming || s->id % op.check_every == 0;
  encode_hdr(s->args.data(), Hdr{s->id, bulk, s->full ? kFlagFull : 0u});
  Call c;
  c.prog = kPerfProg;
  c.vers = kPerfVers;
  c.args = std::span<const uint8_t>(s->args.data(), size);
  c.done = on_done;
  c.ctx = s;
  if (bulk == 0) {
    c.proc = kProcEcho;
    c.max_results = size;
  } else if (op.bulk_dir == BulkDir::kRead) {
    c.proc = kProcPut;
    if (s->full) fill_pattern(s->bulk, bulk, s->id);
    put_stamps(s->bulk, bulk, s->id);
    c.bulk_send = std::span<const uint8_t>(s->bulk, bulk);
    c.max_results = kResLen;
  } else {
    c.proc = kProcGet;
    // Stamps of another id: a reply that does not bring this call's data
    // cannot pass the check.
    put_stamps(s->bulk, bulk, ~s->id);
    c.bulk_recv = std::span<uint8_t>(s->bulk, bulk);
    c.max_results = kResLen;
  }
  s->t_issue = now_ticks();
  int rc = conn->call(c);
  if (rc == 0) {
    ++outstanding;
    return;
  }
  switch (rc) {
    case EINVAL:
      fail("call() refused call %" PRIu64 " (EINVAL): --size %u does not fit the negotiated inline threshold (%u "
           "bytes, headers included)",
           s->id, size, conn->info().inline_send);
      break;
    case EMSGSIZE:
      fail("call() refused call %" PRIu64 " (EMSGSIZE): --bulk %u is over the engine's max_bulk", s->id, bulk);
      break;
    case ENOTCONN: fail("the connection to %s is lost: %s", spec.c_str(), reason(conn->error()).c_str()); break;
    default: fail("call() refused call %" PRIu64 ": %s", s->id, std::strerror(rc)); break;
  }
}

void ClientEngine::start_measuring(uint64_t now) {
  const Options& op = *o;
  if (warming) {
    step->warm_calls = done;
    step->warm_seconds = ns_from_ticks(now - warm_t0) / 1e9;
  }
  warming = false;
  t_start = t_end = now;
  if (op.iters != 0) total = std::max(issued, done + op.iters);
  else deadline = now + static_cast<uint64_t>(op.seconds * tick_hz());
  step->cpu.start();
  state.store(kMeasuring);
}

void ClientEngine::complete(Slot* s, const CallReply& r, uint64_t t1) {
  const Options& op = *o;
  --outstanding;
  t_last = t1;
  if (failed) return;
  if (r.status != CallStatus::kOk) {
    const char* hint = "";
    if (r.status == CallStatus::kProgUnavail || r.status == CallStatus::kProcUnavail ||
        r.status == CallStatus::kProgMismatch)
      hint = " (the server does not serve tern-perf's program: is it a tern-perf --rpc server?)";
    else if (r.status == CallStatus::kRdmaError)
      hint = " (the server refused a chunk: is --bulk over its --max-bulk?)";
    fail("call %" PRIu64 " failed: %s%s%s%s", s->id, call_status_name(r.status), hint,
         r.status == CallStatus::kDisconnected ? ": " : "",
         r.status == CallStatus::kDisconnected ? reason(conn->error()).c_str() : "");
    return;
  }
  StepResult& st = *step;
  if (bulk == 0) {
    if (r.results.size() != size || std::memcmp(r.results.data(), s->args.data(), size) != 0) {
      size_t at = 0;
      while (at < std::min<size_t>(r.results.size(), size) && r.results[at] == s->args[at]) ++at;
      fail("call %" PRIu64 ": the echo (%zu bytes) differs from the arguments (%u bytes) at byte %zu", s->id,
           r.results.size(), size, at);
      return;
    }
    ++st.echo_checks;
  } else {
    Res res;
    if (!decode_res(r.results, &res)) {
      fail("call %" PRIu64 ": %zu bytes of results, not a tern-perf result (%zu bytes)", s->id, r.results.size(),
           kResLen);
      return;
    }
    if (res.id != s->id) {
      fail("call %" PRIu64 ": the results are for call %" PRIu64, s->id, res.id);
      return;
    }
    if (res.status != kResOk) {
      fail("call %" PRIu64 ": the server found %s in the %s (len %u, detail %" PRIu64 ")", s->id,
           res_status_name(res.status), op.bulk_dir == BulkDir::kRead ? "read chunk it pulled" : "call", res.len,
           res.detail);
      return;
    }
    if (res.len != bulk) {
      fail("call %" PRIu64 ": the server moved %u bytes, not %u", s->id, res.len, bulk);
      return;
    }
    if (op.bulk_dir == BulkDir::kWrite) {
      if (r.bulk_recv_len != bulk) {
        fail("call %" PRIu64 ": the reply says %u bytes were written into the write chunk, not %u", s->id,
             r.bulk_recv_len, bulk);
        return;
      }
      if (s->full) {
        if (long long bad = full_mismatch(s->bulk, bulk, s->id); bad >= 0) {
          fail("call %" PRIu64 ": byte %lld of the %u the server wrote into the write chunk is wrong", s->id, bad,
               bulk);
          return;
        }
      } else if (!stamps_ok(s->bulk, bulk, s->id)) {
        fail("call %" PRIu64 ": the write chunk does not hold this call's data (its stamps are wrong)", s->id);
        return;
      }
    }
    ++st.stamp_checks;
    if (s->full) ++st.full_checks;
  }
  ++done;
  done_now.store(done, std::memory_order_relaxed);
  if (!warming) {
    ++measured;
    measured_now.store(measured, std::memory_order_relaxed);
    t_end = t1;
    // A full check in a bulk mode includes the server's pass over every byte:
    // left out of the percentiles, unless every call is checked that way.
    if (bulk == 0 || !s->full || op.check_every == 1) st.lat.add(ns_from_ticks(t1 - s->t_issue));
  } else if (done >= op.warmup || t1 >= warm_until) {
    start_measuring(t1);
  }
  ready.push_back(s);
}

std::vector<std::pair<std::string, uint64_t>> counters(Engine& e) {
  std::vector<std::pair<std::string, uint64_t>> v;
  for (const StatEntry& s : e.stats_view()) v.emplace_back(s.name, s.counter->get());
  return v;
}

// One run of calls with `size_` argument bytes and `bulk_` bulk bytes over
// the connection: warm-up, then --iters calls or --seconds of them.
bool ClientEngine::measure(uint32_t size_, uint32_t bulk_) {
  const Options& op = *o;
  steps.emplace_back();
  step = &steps.back();
  step->size = size = size_;
  step->bulk = bulk = bulk_;
  size_now.store(bulk != 0 ? bulk : size);
  auto before = counters(*eng);
  issued = done = measured = 0;
  total = UINT64_MAX, deadline = UINT64_MAX, warm_until = UINT64_MAX;
  t_start = t_end = 0;
  stop_issuing = false;
  measured_now.store(0), done_now.store(0);
  t_last = warm_t0 = now_ticks();
  warming = op.warmup > 0;
  if (warming) {
    if (op.warmup_s > 0) warm_until = t_last + static_cast<uint64_t>(op.warmup_s * tick_hz());
    state.store(kRunning);
  } else {
    start_measuring(t_last);
  }
  ready.reserve(op.qd);
  for (Slot& s : slots)
    if (!failed && issued < total) issue(&s);
  const uint64_t stall = static_cast<uint64_t>(op.timeout * tick_hz());
  uint64_t polls = 0;
  bool waiting = op.wait;
  while (!failed) {
    if (eng->poll() == 0 && waiting) idle_wait(eng.get(), &waiting);
    if (!ready.empty()) {
      for (Slot* s : ready)
        if (!stop_issuing && issued < total && !failed) issue(s);
      ready.clear();
    }
    if (outstanding == 0 && (stop_issuing || issued >= total)) break;
    if ((++polls & 255) != 0) continue;
    uint64_t now = now_ticks();
    heartbeat.store(polls, std::memory_order_relaxed);
    if (g_stop.load(std::memory_order_relaxed)) return false;  // another engine failed, or a signal
    if (now >= deadline) stop_issuing = true;
    if (outstanding > 0 && now - t_last > stall) {
      fail("no call completed for %.1f s with %u outstanding (%" PRIu64 " completed); connection %s; engine: %s",
           op.timeout, outstanding, done, conn->failed() ? reason(conn->error()).c_str() : "up",
           format_stats(eng->stats_view()).c_str());
    }
  }
  if (failed) return false;
  step->cpu.stop();
  step->measured = measured;
  step->seconds = t_end > t_start ? ns_from_ticks(t_end - t_start) / 1e9 : 0;
  auto after = counters(*eng);
  for (size_t k = 0; k < after.size(); ++k)
    step->stats.emplace_back(after[k].first, after[k].second - (k < before.size() ? before[k].second : 0));
  return true;
}

int ClientEngine::run() {
  const Options& op = *o;
  // Every run of a sweep goes over one connection, with buffers for the largest.
  const std::vector<uint32_t> sizes = op.bulk == 0 ? sweep_sizes(op, 16, op.size) : std::vector<uint32_t>{op.size};
  const std::vector<uint32_t> bulks = op.bulk == 0 ? std::vector<uint32_t>{0} : sweep_sizes(op, 16, op.bulk);
  const uint32_t max_size = sizes.back(), max_bulk = bulks.back();
  EngineOptions eo;
  eo.credits = op.qd;
  eo.backlog = op.qd;  // never more than qd calls exist at once
  // A benchmark measures one connection: a loss ends the run with its
  // reason instead of reconnecting and mixing two connections' figures.
  eo.reconnect = false;
  eo.breakdown = op.breakdown;
  eo.trace_every = op.trace.empty() ? 0 : 64;
  eo.max_bulk = std::max<uint32_t>(eo.max_bulk, max_bulk);
  // Our bulk buffers (Engine::alloc), plus the engine's pools: message
  // buffers, and a bulk pool for reply-chunk staging (a block per call in
  // flight once results may not fit inline) and long calls.
  size_t block = 4096;
  while (block < eo.max_bulk || block < eo.max_reply + 256u) block <<= 1;
  eo.bulk_pool_bytes = std::max<size_t>(8u << 20, block * 2);
  if (max_size + 128 > 1024) eo.bulk_pool_bytes += static_cast<size_t>(op.qd) * round_up(eo.max_reply + 256, 4096) * 2;
  eo.recv_buffers = std::max<uint32_t>(64, op.qd * 2);
  eo.send_buffers = eo.recv_buffers + 64;
  eo.arena_bytes = eo.bulk_pool_bytes + op.qd * round_up(max_bulk, 4096) +
                   size_t{eo.recv_buffers} * eo.inline_recv + size_t{eo.send_buffers} * eo.inline_send + (4u << 20);
  auto e = Engine::create(eo);
  if (!e) {
    fail("cannot create an engine: %s", e.status().to_string().c_str());
    state.store(kFailed);
    return 1;
  }
  eng = std::move(e).value();
  int rc = 1;
  if (connect()) {
    slots.resize(op.qd);
    for (uint32_t i = 0; i < op.qd; ++i) {
      Slot& s = slots[i];
      s.ce = this;
      s.args.resize(max_size);
      fill_pattern(s.args.data(), max_size, 0x5107000000ull + i);
      if (max_bulk != 0) {
        s.bulk = static_cast<uint8_t*>(eng->alloc(max_bulk, 4096));
        if (s.bulk == nullptr) {
          fail("the engine's arena has no room for %u x %u bulk bytes", op.qd, max_bulk);
          break;
        }
      }
    }
    bool ok = !failed;
    for (uint32_t sz : sizes)
      for (uint32_t bk : bulks)
        if (ok) ok = measure(sz, bk);
    if (ok) {
      info = conn->info();  // now: the credits are the server's last grant
      if (op.engine_stats) std::fprintf(stderr, "tern-perf client: connection: %s\n", conn_counters(conn->stats()).c_str());
      // Let the server see us leave; the engine's destructor does the rest.
      conn->close();
      uint64_t until = now_ticks() + static_cast<uint64_t>(0.05 * tick_hz());
      while (now_ticks() < until) eng->poll();
      rc = 0;
    }
  }
  if (op.engine_stats) std::fprintf(stderr, "tern-perf client: %s\n", eng->stats_json().c_str());
  if (op.breakdown && rc == 0) {
    char who[64];
    std::snprintf(who, sizeof who, "tern-perf client: engine %u", index);
    print_breakdown(stderr, who, eng->breakdown(false));
  }
  if (!op.trace.empty()) write_trace_file(*eng, op.trace, op.engines, index);
  // The engine goes in run_engines' teardown, after o.at_end.
  state.store(rc == 0 ? kDone : kFailed);
  return rc;
}

}  // namespace

int run_rpc_client(const Options& o) {
  install_signals();
  std::vector<std::unique_ptr<ClientEngine>> ces;
  for (uint32_t i = 0; i < o.engines; ++i) {
    auto spec = engine_spec(o.dev, i);
    if (!spec) {
      std::fprintf(stderr, "tern-perf client: %s\n", spec.status().message().c_str());
      return 2;
    }
    auto ce = std::make_unique<ClientEngine>();
    ce->o = &o;
    ce->index = i;
    ce->cpu = engine_cpu(o, i);
    ce->spec = *spec;
    ces.push_back(std::move(ce));
  }
  std::vector<std::function<int()>> bodies;
  std::vector<std::function<void()>> teardowns;
  for (auto& ce : ces) {
    bodies.push_back([p = ce.get()] { return p->run(); });
    teardowns.push_back([p = ce.get()] { p->eng.reset(); });
  }

  // The monitor: progress once a second (the warm-up's too: a warm-up of
  // large calls can take long), and a guard against an engine thread that
  // never comes back from poll() (a hang inside the engine), which no
  // deadline in the engine loop could catch.
  auto monitor = [&]() -> int {
    const uint64_t stuck_ns = static_cast<uint64_t>((o.timeout + 10) * 1e9);
    std::vector<uint64_t> last(ces.size(), 0), since(ces.size(), monotonic_ns());
    uint64_t next_print = 0, prev_measured = 0, prev_t = 0, first_t = 0;
    bool was_measuring = false;
    for (;;) {
      uint64_t now = monotonic_ns();
      bool all_done = true, all_measuring = true, any_warming = false;
      uint64_t sum = 0, warm_done = 0;
      for (size_t i = 0; i < ces.size(); ++i) {
        int s = ces[i]->state.load();
        if (s != kDone && s != kFailed) all_done = false;
        if (s != kMeasuring) all_measuring = false;
        if (s == kRunning) any_warming = true, warm_done += ces[i]->done_now.load(std::memory_order_relaxed);
        sum += ces[i]->measured_now.load(std::memory_order_relaxed);
        if (s == kConnecting || s == kRunning || s == kMeasuring) {
          uint64_t hb = ces[i]->heartbeat.load(std::memory_order_relaxed);
          if (hb != last[i]) {
            last[i] = hb, since[i] = now;
          } else if (now - since[i] > stuck_ns) {
            std::fprintf(stderr, "tern-perf client: engine %zu has not come back from poll() for %.0f s: a hang in the "
                         "engine\n", i, static_cast<double>(now - since[i]) / 1e9);
            std::_Exit(1);
          }
        }
      }
      if (all_done) return 0;
      if (all_measuring != was_measuring) next_print = 0, was_measuring = all_measuring;  // a new phase
      if ((all_measuring || any_warming) && !o.quiet) {
        uint32_t sz = ces[0]->size_now.load();
        if (next_print == 0) {
          first_t = prev_t = now;
          prev_measured = sum;
          next_print = now + 1'000'000'000ull;
        } else if (now >= next_print) {
          double dt = static_cast<double>(now - prev_t) / 1e9;
          double el = static_cast<double>(now - first_t) / 1e9;
          if (!all_measuring) {
            std::fprintf(stderr, "  warm-up %5.1f s  %10" PRIu64 " calls\n", el, warm_done);
          } else {
            double rate = static_cast<double>(sum - prev_measured) / dt;
            std::fprintf(stderr, "  %5.1f s  %12.0f RPC/s  %9.3f Gb/s\n", el, rate, rate * sz * 8 / 1e9);
          }
          prev_t = now, prev_measured = sum;
          next_print += 1'000'000'000ull;
        }
      }
      sleep_ms(20);
    }
  };
  int rc = run_engines(o, std::move(bodies), std::move(teardowns), monitor);
  if (rc != 0) {
    bool said = false;
    for (auto& ce : ces) {
      if (ce->error.empty()) continue;
      std::fprintf(stderr, "tern-perf client: engine %u: %s\n", ce->index, ce->error.c_str());
      said = true;
    }
    if (!said) std::fprintf(stderr, "tern-perf client: stopped (signal)\n");
    return 1;
  }

  // ---- the report: one per run (one per size of a sweep), over every engine
  Reporter rep(o);
  FILE* out = rep.out();
  const char* mode = o.mode == "bw" ? "rpc/bw" : "rpc/lat";
  const char* dir = o.bulk == 0 ? "none" : o.bulk_dir == BulkDir::kRead ? "read" : "write";
  const ConnectionInfo& ci = ces[0]->info;
  for (size_t k = 0; k < ces[0]->steps.size(); ++k) {
    RunReport r;
    uint64_t echo_checks = 0, stamp_checks = 0, full_checks = 0, warm_calls = 0;
    double warm_seconds = 0;
    std::vector<std::pair<std::string, uint64_t>> stats;
    const uint32_t size = ces[0]->steps[k].size, bulk = ces[0]->steps[k].bulk;
    const uint32_t payload = bulk != 0 ? bulk : size;
    for (auto& ce : ces) {
      const StepResult& st = ce->steps[k];
      r.requests += st.measured;
      if (st.seconds > 0) r.rps += static_cast<double>(st.measured) / st.seconds;
      r.seconds = std::max(r.seconds, st.seconds);
      echo_checks += st.echo_checks, stamp_checks += st.stamp_checks, full_checks += st.full_checks;
      warm_calls += st.warm_calls;
      warm_seconds = std::max(warm_seconds, st.warm_seconds);
      r.lat.merge(st.lat);
      if (st.cpu.share >= 0) r.cpu_share = r.cpu_share < 0 ? st.cpu.share : std::min(r.cpu_share, st.cpu.share);
      r.preempted += st.cpu.preempted;
      r.busy = r.busy || st.cpu.busy();
      r.busy_judged = r.busy_judged || st.cpu.judged();
      for (size_t i = 0; i < st.stats.size(); ++i) {
        if (i >= stats.size()) stats.push_back({st.stats[i].first, 0});
        stats[i].second += st.stats[i].second;
      }
    }
    r.mode = mode;
    r.transport = "rpc";
    r.dev = o.dev;
    r.size = size, r.qd = o.qd, r.bulk = bulk, r.engines = o.engines, r.bulk_dir = dir;
    r.gbps = r.rps * payload * 8 / 1e9;
    double gbytes = r.rps * payload / 1e9;

    if (!o.sweep) {
      std::fprintf(out, "tern-perf  mode=%s  dev=%s  engines=%u  size=%u  qd=%u  bulk=%u (%s)\n", mode, o.dev.c_str(),
                   o.engines, size, o.qd, bulk, bulk == 0 ? "inline echo" : o.bulk_dir == BulkDir::kRead
                                                                        ? "read chunk, client -> server"
                                                                        : "write chunk, server -> client");
      std::fprintf(out, "  calls         %12" PRIu64 "   in %.2f s\n", r.requests, r.seconds);
      std::fprintf(out, "  throughput    %12.0f RPC/s   %.3f Gb/s   %.3f GB/s   (payload %u B per call%s)\n", r.rps,
                   r.gbps, gbytes, payload, bulk == 0 ? ", each way" : "");
      std::fprintf(out, "  latency (per call; %" PRIu64 " samples%s%s)\n", r.lat.count(),
                   bulk != 0 && o.check_every > 1 ? ", fully checked calls left out" : "",
                   o.qd > 1 ? ", under load: --qd in flight" : "");
      rep.print_latency(r);
      if (o.engines > 1)
        for (auto& ce : ces)
          std::fprintf(out, "  engine %-2u     cpu %-3d %12" PRIu64 " calls   %12.0f RPC/s   %s\n", ce->index, ce->cpu,
                       ce->steps[k].measured,
                       ce->steps[k].seconds > 0 ? static_cast<double>(ce->steps[k].measured) / ce->steps[k].seconds : 0.0,
                       ce->spec.c_str());
      if (bulk == 0)
        std::fprintf(out, "  checked       %" PRIu64 " echoes byte for byte\n", echo_checks);
      else
        std::fprintf(out, "  checked       %" PRIu64 " calls' ids, lengths and stamps; %" PRIu64 " of them byte for byte\n",
                     stamp_checks, full_checks);
      std::fprintf(out, "  connection    inline send %u / recv %u, remote invalidation %s, credits %u (the server's "
                   "grant, capped by --qd)\n",
                   ci.inline_send, ci.inline_recv, ci.remote_invalidation ? "on" : "off", ci.credits);
      std::string s;
      for (auto& [name, v] : stats)
        if (v != 0) s += (s.empty() ? "" : " ") + name + "=" + std::to_string(v);
      std::fprintf(out, "  client engine %s\n", s.c_str());
      if (r.cpu_share >= 0)
        std::fprintf(out, "  cpu           the client engine%s had a CPU %.0f%% of the run (%" PRIu64 " preemptions)%s\n",
                     o.engines > 1 ? "s (the least)" : "", 100 * r.cpu_share, r.preempted,
                     r.busy ? ": the machine was busy, figures are low" : "");
    } else if (!o.quiet) {
      std::fprintf(stderr, "  size %9u: %10.0f RPC/s  rtt p50 %8.0f ns\n", payload, r.rps, r.lat.percentile(0.5));
    }

    char b[512];
    std::string x;
    std::snprintf(b, sizeof b, ",\"gbytes_per_s\":%.9g", gbytes);
    x += b;
    std::snprintf(b, sizeof b, ",\"checks\":{\"echo\":%" PRIu64 ",\"stamps\":%" PRIu64 ",\"full\":%" PRIu64 ",\"every\":%u}",
                  echo_checks, stamp_checks, full_checks, o.check_every);
    x += b;
    std::snprintf(b, sizeof b, ",\"warmup\":{\"calls\":%" PRIu64 ",\"seconds\":%.6f}", warm_calls, warm_seconds);
    x += b;
    std::snprintf(b, sizeof b,
                  ",\"connection\":{\"inline_send\":%u,\"inline_recv\":%u,\"remote_invalidation\":%s,\"credits\":%u}",
                  ci.inline_send, ci.inline_recv, ci.remote_invalidation ? "true" : "false", ci.credits);
    x += b;
    x += ",\"per_engine\":[";
    for (size_t i = 0; i < ces.size(); ++i) {
      const ClientEngine& ce = *ces[i];
      const StepResult& st = ce.steps[k];
      std::snprintf(b, sizeof b,
                    "%s{\"engine\":%u,\"cpu\":%d,\"dev\":\"%s\",\"requests\":%" PRIu64 ",\"seconds\":%.6f,"
                    "\"requests_per_s\":%.1f}",
                    i ? "," : "", ce.index, ce.cpu, json_escape(ce.spec).c_str(), st.measured, st.seconds,
                    st.seconds > 0 ? static_cast<double>(st.measured) / st.seconds : 0.0);
      x += b;
    }
    x += "],\"engine_stats\":{";
    for (size_t i = 0; i < stats.size(); ++i) {
      std::snprintf(b, sizeof b, "%s\"%s\":%" PRIu64, i ? "," : "", json_escape(stats[i].first).c_str(),
                    stats[i].second);
      x += b;
    }
    x += "}";
    r.extra_json = std::move(x);
    rep.add(std::move(r));
  }
  return rep.finish();
}

}  // namespace tern::apps
