// Client and server engines, both driven from the test thread: inline calls,
// read/write/reply chunks with data checked byte for byte, remote
// invalidation on and off, credits, many calls in flight, connection loss.
// Over pmd/shm by default; TERN_RPC_DEVICE names another device spec without
// a port (the VM stage of scripts/test.sh: "verbs:dev=rxe0,addr=169.254.77.1"),
// to which each test adds a port of its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "oncrpc/oncrpc.h"
#include "refusing_driver.h"
#include "rpc_fixture.h"
#include "telemetry/registry.h"

namespace tern::test {
TERN_REGISTER_DRIVER(RefusingDriver)
}  // namespace tern::test

namespace tern::rpc {
namespace {

TEST(Rpc, InlineEcho) {
  Fixture f;
  std::vector<uint8_t> args(32);
  for (size_t i = 0; i < args.size(); ++i) args[i] = pat(1, i);
  Call c;
  c.proc = kEcho;
  c.args = args;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk);
  EXPECT_EQ(p.results, args);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 0u) << "an inline call registers nothing";
}

TEST(Rpc, ReadChunkIsPulledByTheServer) {
  Fixture f;
  for (uint32_t len : {4096u, 65536u, 1u << 20}) {
    auto* bulk = static_cast<uint8_t*>(f.cli->alloc(len));
    ASSERT_NE(bulk, nullptr);
    uint32_t want = 0;
    for (uint32_t i = 0; i < len; ++i) want += (bulk[i] = pat(len, i));
    Call c;
    c.proc = kSum;
    c.bulk_send = std::span<const uint8_t>(bulk, len);
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    ASSERT_EQ(p.results.size(), 8u);
    uint32_t got[2];
    std::memcpy(got, p.results.data(), 8);
    EXPECT_EQ(got[0], want) << len;
    EXPECT_EQ(got[1], len);
  }
  EXPECT_GE(f.srv->stats().rdma_reads.get(), 3u);
}

TEST(Rpc, WriteChunkIsFilledByTheServer) {
  Fixture f;
  for (uint32_t len : {4096u, 65536u, 1u << 20}) {
    auto* bulk = static_cast<uint8_t*>(f.cli->alloc(len));
    ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, len, 9));
  }
}

TEST(Rpc, ReplyChunkCarriesLargeResults) {
  Fixture f;
  uint32_t n = 40000;
  Call c;
  c.proc = kBig;
  c.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
  c.max_results = n;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  ASSERT_EQ(p.results.size(), n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(p.results[i], pat(7, i)) << i;
  EXPECT_EQ(f.cli->stats().reply_chunks.get(), 1u);
}


// One registered chunk per call: with remote invalidation the server's Send
// With Invalidate retires the MR and the client posts no LOCAL_INV.
TEST(Rpc, RemoteInvalidationSkipsLocalInv) {
  Fixture f;
  ASSERT_TRUE(f.conn->info().remote_invalidation);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  for (int k = 0; k < 20; ++k) ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, 8192, static_cast<uint8_t>(k)));
  EXPECT_EQ(f.cli->stats().remote_invalidations.get(), 20u);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 0u);
}

// A server call that carried one rkey is reused by the next call: an
// inline call after it (no chunk lists, the plain path) must go back as a
// plain Send, not invalidate the rkey of the call before it.
TEST(Rpc, InlineCallAfterAChunkedOneInvalidatesNothing) {
  Fixture f;
  ASSERT_TRUE(f.conn->info().remote_invalidation);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  std::vector<uint8_t> args(32, 0x42);
  for (int k = 0; k < 10; ++k) {
    ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, 8192, static_cast<uint8_t>(k)));
    Call c;
    c.proc = kEcho;
    c.args = args;
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    EXPECT_EQ(p.results, args);
  }
  EXPECT_EQ(f.srv->stats().remote_invalidations.get(), 10u);
  EXPECT_EQ(f.cli->stats().remote_invalidations.get(), 10u);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 0u);
}

TEST(Rpc, WithoutRemoteInvalidationTheClientInvalidatesLocally) {
  EngineOptions so, co;
  co.remote_invalidation = false;  // the client does not offer it: not negotiated
  Fixture f(so, co);
  ASSERT_FALSE(f.conn->info().remote_invalidation);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  for (int k = 0; k < 20; ++k) ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, 8192, static_cast<uint8_t>(k)));
  EXPECT_EQ(f.cli->stats().remote_invalidations.get(), 0u);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 20u);
  EXPECT_EQ(f.srv->stats().remote_invalidations.get(), 0u);
}

// The Linux server's arrangement: it does not offer I (it never receives
// Send With Invalidate) but sends it to a client that did. The client still
// counts each as a remote invalidation and posts no LOCAL_INV.
TEST(Rpc, ServerWithoutTheFlagStillInvalidatesAClientThatOffered) {
  EngineOptions so, co;
  so.remote_invalidation = false;
  Fixture f(so, co);
  ASSERT_TRUE(f.conn->info().remote_invalidation);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  for (int k = 0; k < 20; ++k) ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, 8192, static_cast<uint8_t>(k)));
  EXPECT_EQ(f.srv->stats().remote_invalidations.get(), 20u);
  EXPECT_EQ(f.cli->stats().remote_invalidations.get(), 20u);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 0u);
}

// Without fast registration (forced here; automatic on a device that lacks
// it, e.g. verbs with mw=off) chunks go through the registration cache: the
// data still moves byte for byte through read, write and reply chunks, a
// reused buffer hits the cache, nothing is invalidated, and remote
// invalidation is not offered.
uint64_t stat(const Engine& e, const char* name) {
  for (const StatEntry& s : e.stats_view())
    if (s.name == std::string_view(name)) return s.counter->get();
  return UINT64_MAX;
}

TEST(Rpc, RegistrationCacheServesEveryChunkKind) {
  EngineOptions so, co;
  co.registration = EngineOptions::Registration::kRegCache;
  co.trusted_peers = true;
  Fixture f(so, co);
  ASSERT_FALSE(f.conn->info().remote_invalidation) << "a cached registration cannot be invalidated by the peer";
  auto* in = static_cast<uint8_t*>(f.cli->alloc(64 * 1024));
  auto* out = static_cast<uint8_t*>(f.cli->alloc(64 * 1024));
  for (int k = 0; k < 10; ++k) {
    ASSERT_NO_FATAL_FAILURE(f.fill_and_check(out, 64 * 1024, static_cast<uint8_t>(k)));  // write chunk
    for (int i = 0; i < 64 * 1024; ++i) in[i] = pat(k + 50, i);
    Call c;  // read chunk: the server sums what it pulled
    c.proc = kSum;
    c.bulk_send = std::span<const uint8_t>(in, 64 * 1024);
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    uint32_t want = 0;
    for (int i = 0; i < 64 * 1024; ++i) want += in[i];
    uint32_t got[2];
    ASSERT_EQ(p.results.size(), 8u);
    std::memcpy(got, p.results.data(), 8);
    EXPECT_EQ(got[0], want);
    EXPECT_EQ(got[1], 64u * 1024);
  }
  uint32_t n = 20000;  // reply chunk
  Call c;
  c.proc = kBig;
  c.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
  c.max_results = n;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk);
  ASSERT_EQ(p.results.size(), n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(p.results[i], pat(7, i)) << i;

  EXPECT_EQ(stat(*f.cli, "reg_cache_misses"), 3u) << "one registration per buffer (out, in, the reply buffer)";
  EXPECT_EQ(stat(*f.cli, "reg_cache_hits"), 18u) << "every later use of a buffer hits";
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 0u);
  EXPECT_EQ(f.cli->stats().remote_invalidations.get(), 0u);
  EXPECT_EQ(f.srv->stats().remote_invalidations.get(), 0u);
}

// The registration cache cannot register a call's memory (the device is out
// of locked memory or MRs): the call completes once with kNoRegistration from
// the next poll, never hangs in the backlog, nothing is sent, and the
// connection and other calls go on. A shm device with a refusing reg_mr.
TEST(Rpc, CallWhoseMemoryCannotBeRegisteredFailsAlone) {
  EngineOptions so, co;
  co.registration = EngineOptions::Registration::kRegCache;
  co.trusted_peers = true;
  co.credits = 1;  // the second refused call waits behind a call in flight
  so.arena_bytes = co.arena_bytes = kTestArenaBytes;
  auto srv = Engine::create(so).value();
  auto cli = Engine::create(co).value();
  srv->handle(kProg, kVers, kEcho, &Fixture::echo, nullptr);
  srv->handle(kProg, kVers, kFill, &Fixture::fill, nullptr);
  std::string sock = "/tmp/tern-rpc-refuse-" + std::to_string(getpid()) + ".sock";
  ASSERT_OK(srv->listen("shm:path=" + sock));
  Connection* c = cli->connect("refusereg:path=" + sock).value();
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [&] { return c->ready() || c->failed(); }));
  ASSERT_TRUE(c->ready()) << c->error().to_string();

  auto* bad = static_cast<uint8_t*>(cli->alloc(8192));
  auto* good = static_cast<uint8_t*>(cli->alloc(8192));
  test::g_refused = {reinterpret_cast<uint64_t>(bad), 8192};
  uint8_t fill_args[5] = {0, 16, 0, 0, 5};  // n = 4096 (little endian), seed 5
  Pending p1, p2, p3;
  auto fill_into = [&](uint8_t* buf, Pending* p) {
    Call call;
    call.prog = kProg, call.vers = kVers, call.proc = kFill, call.args = fill_args;
    call.bulk_recv = std::span<uint8_t>(buf, 4096);
    call.done = on_done, call.ctx = p;
    return c->call(call);
  };
  ASSERT_EQ(fill_into(bad, &p1), 0) << "accepted: its failure comes through done";
  EXPECT_FALSE(p1.done) << "completions come only from poll()";
  ASSERT_EQ(fill_into(good, &p2), 0);
  ASSERT_EQ(fill_into(bad, &p3), 0);  // backlogged behind p2 (one credit), then refused
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [&] { return p1.done && p2.done && p3.done; }))
      << "a refused call must not hang";
  EXPECT_EQ(p1.reply.status, CallStatus::kNoRegistration) << call_status_name(p1.reply.status);
  EXPECT_EQ(p3.reply.status, CallStatus::kNoRegistration) << call_status_name(p3.reply.status);
  ASSERT_EQ(p2.reply.status, CallStatus::kOk) << call_status_name(p2.reply.status);
  EXPECT_EQ(p2.reply.bulk_recv_len, 4096u);
  for (uint32_t i = 0; i < 4096; ++i) ASSERT_EQ(good[i], pat(5, i)) << i;
  EXPECT_EQ(srv->stats().replies.get(), 1u) << "refused calls never reach the server";
  EXPECT_EQ(cli->stats().sends.get(), 1u) << "nothing of a refused call is sent";
  EXPECT_EQ(c->outstanding(), 0u);
  EXPECT_TRUE(c->ready());
  test::g_refused = {};
  c->close();
  poll_until({srv.get(), cli.get()}, [] { return false; }, 50);
  unlink(sock.c_str());
}

// A driver may report a connection event that names no QP (an id whose QP
// is gone or never was): both engines drop it -- no crash, no connection of
// theirs touched -- and calls go on before and after.
TEST(Rpc, ConnectionEventsWithoutAQpAreDropped) {
  EngineOptions so, co;
  so.arena_bytes = co.arena_bytes = kTestArenaBytes;
  auto srv = Engine::create(so).value();
  auto cli = Engine::create(co).value();
  srv->handle(kProg, kVers, kEcho, &Fixture::echo, nullptr);
  std::string sock = "/tmp/tern-rpc-nullqp-" + std::to_string(getpid()) + ".sock";
  ASSERT_OK(srv->listen("refusereg:path=" + sock));
  test::g_null_qp_events = 8;  // two of each type, to whichever engine polls first
  Connection* c = cli->connect("refusereg:path=" + sock).value();
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [&] { return c->ready() || c->failed(); }));
  ASSERT_TRUE(c->ready()) << c->error().to_string();
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [] { return test::g_null_qp_events == 0; }))
      << "connection events are polled once a millisecond";
  auto echo = [&] {
    std::vector<uint8_t> args(32, 7);
    Pending p;
    Call call;
    call.prog = kProg, call.vers = kVers, call.proc = kEcho, call.args = args;
    call.done = on_done, call.ctx = &p;
    if (c->call(call) != 0) return false;
    return poll_until({srv.get(), cli.get()}, [&] { return p.done; }) && p.reply.status == CallStatus::kOk &&
           p.results == args;
  };
  ASSERT_TRUE(echo());
  test::g_null_qp_events = 8;  // now on an established connection
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [] { return test::g_null_qp_events == 0; }));
  ASSERT_TRUE(echo());
  EXPECT_TRUE(c->ready());
  EXPECT_EQ(srv->stats().connections.get(), 1u);
  c->close();
  poll_until({srv.get(), cli.get()}, [] { return false; }, 50);
  unlink(sock.c_str());
}

// Two chunks (read + write) carry two rkeys: the server cannot invalidate
// both, so it sends a plain Send and the client invalidates both locally.
TEST(Rpc, TwoChunksAreInvalidatedLocally) {
  Fixture f;
  auto* in = static_cast<uint8_t*>(f.cli->alloc(4096));
  auto* out = static_cast<uint8_t*>(f.cli->alloc(4096));
  for (int i = 0; i < 4096; ++i) in[i] = pat(3, i);
  Call c;
  c.proc = kEcho;
  c.bulk_send = std::span<const uint8_t>(in, 4096);
  c.bulk_recv = std::span<uint8_t>(out, 4096);
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk);
  ASSERT_EQ(p.reply.bulk_recv_len, 4096u);
  EXPECT_EQ(std::memcmp(in, out, 4096), 0);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 1u);
  EXPECT_EQ(f.cli->stats().remote_invalidations.get(), 0u);
}

TEST(Rpc, UnknownProgramVersionAndProcedureGetTheirAnswers) {
  Fixture f;
  Call c;
  c.proc = 77;
  Pending p = f.call(c);
  EXPECT_EQ(p.reply.status, CallStatus::kProcUnavail);

  Pending q;
  Call d;
  d.prog = kProg, d.vers = 9, d.proc = kEcho, d.done = on_done, d.ctx = &q;
  ASSERT_EQ(f.conn->call(d), 0);
  ASSERT_TRUE(f.wait([&] { return q.done; }));
  EXPECT_EQ(q.reply.status, CallStatus::kProgMismatch);

  Pending r;
  Call e;
  e.prog = 12345, e.vers = 1, e.proc = 1, e.done = on_done, e.ctx = &r;
  ASSERT_EQ(f.conn->call(e), 0);
  ASSERT_TRUE(f.wait([&] { return r.done; }));
  EXPECT_EQ(r.reply.status, CallStatus::kProgUnavail);
}

// A handler reads the call's credential from rpc_header(): AUTH_SYS as the
// client sent it (uid, gid, groups, machine name), AUTH_NONE when it sent
// none, and the same for a long call, whose header came through the
// position-zero read chunk.
TEST(Rpc, HandlersSeeTheCallersCredential) {
  Fixture f;
  struct Seen {
    bool decoded = false;
    oncrpc::CallHeader h;
    std::string machine;
  } seen;
  f.srv->handle(kProg, kVers, 9, [](void* ctx, ServerCall* c) {
    auto* s = static_cast<Seen*>(ctx);
    oncrpc::CallDecodeResult d = oncrpc::decode_call(c->rpc_header(), &s->h);
    s->decoded = d.status == oncrpc::CallDecodeStatus::kOk && d.header_len == c->rpc_header().size() &&
                 s->h.xid == c->xid() && s->h.proc == c->proc();
    s->machine = std::string(s->h.sys.machinename);
    ASSERT_OK(c->reply({}));
  }, &seen);
  AuthSys a;
  a.machine = "client7";
  a.uid = 1234, a.gid = 99, a.ngids = 2, a.gids[0] = 5, a.gids[1] = 6;
  for (size_t args_len : {size_t{16}, size_t{12000}}) {
    std::vector<uint8_t> args(args_len);
    Call c;
    c.proc = 9;
    c.args = args;
    c.auth = &a;
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    ASSERT_TRUE(seen.decoded) << args_len << "-byte arguments";
    EXPECT_EQ(seen.h.cred.flavor, oncrpc::AuthFlavor::kSys);
    EXPECT_EQ(seen.h.sys.uid, 1234u);
    EXPECT_EQ(seen.h.sys.gid, 99u);
    ASSERT_EQ(seen.h.sys.ngids, 2u);
    EXPECT_EQ(seen.h.sys.gids[1], 6u);
    EXPECT_EQ(seen.machine, "client7");
    c.auth = nullptr;
    p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk);
    ASSERT_TRUE(seen.decoded);
    EXPECT_EQ(seen.h.cred.flavor, oncrpc::AuthFlavor::kNone);
  }
  EXPECT_EQ(f.cli->stats().long_calls.get(), 2u);
}

TEST(Rpc, HandlerMayReplyLater) {
  Fixture f;
  Pending p;
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kLater, c.done = on_done, c.ctx = &p;
  uint8_t a[4] = {1, 2, 3, 4};
  c.args = a;
  ASSERT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return !f.later.empty(); }));
  f.wait([] { return false; }, 20);
  EXPECT_FALSE(p.done) << "completed before the handler replied";
  ServerCall* sc = f.later.front();
  ASSERT_OK(sc->reply(sc->args()));
  ASSERT_TRUE(f.wait([&] { return p.done; }));
  EXPECT_EQ(p.reply.status, CallStatus::kOk);
  EXPECT_EQ(p.results, std::vector<uint8_t>(a, a + 4));
}

// More calls than credits: the client holds the rest back (never more
// outstanding than granted) and sends them as replies return credits. Each
// call asks for the client's whole window, and the first reply grants it,
// capped at the server's maximum and never beyond; with receive buffers to
// spare the server keeps the grant as the queue drains.
TEST(Rpc, CreditExhaustionAndRecovery) {
  EngineOptions so, co;
  so.credits = 4;   // the server grants at most 4
  co.credits = 64;  // the client would like more
  Fixture f(so, co);
  EXPECT_EQ(f.conn->info().credits, 1u) << "RFC 8166: one credit until the first reply";

  constexpr int kCalls = 40;
  std::vector<Pending> ps(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    Call c;
    c.prog = kProg, c.vers = kVers, c.proc = kLater, c.done = on_done, c.ctx = &ps[i];
    ASSERT_EQ(f.conn->call(c), 0);
  }
  f.wait([] { return false; }, 30);
  EXPECT_EQ(f.later.size(), 1u) << "the server saw more calls than it granted credits for";
  EXPECT_GT(f.cli->stats().credit_waits.get(), 0u);
  int replied = 0;
  size_t most = 0;
  std::vector<uint32_t> grants;
  while (replied < kCalls) {
    ASSERT_TRUE(f.wait([&] { return !f.later.empty(); })) << "stuck after " << replied << " replies";
    // Let every call the grant allows arrive before answering.
    f.wait([] { return false; }, 20);
    EXPECT_LE(f.later.size(), 4u) << "more outstanding than the largest grant";
    EXPECT_LE(f.conn->outstanding(), f.conn->info().credits);
    most = std::max(most, f.later.size());
    std::vector<ServerCall*> batch;
    batch.swap(f.later);
    for (ServerCall* sc : batch) {
      ASSERT_OK(sc->reply({}));
      ++replied;
    }
    f.wait([] { return false; }, 5);
    grants.push_back(f.conn->info().credits);
  }
  ASSERT_TRUE(f.wait([&] {
    for (auto& p : ps)
      if (!p.done) return false;
    return true;
  }));
  for (auto& p : ps) EXPECT_EQ(p.reply.status, CallStatus::kOk);
  EXPECT_EQ(most, 4u) << "a client with 40 calls waiting is granted the server's maximum";
  ASSERT_GE(grants.size(), 3u);
  for (uint32_t g : grants) EXPECT_EQ(g, 4u) << "granted what it asked for, capped at the server's maximum";
}

// Every credit is a posted receive (RFC 8166 section 3.3.1): a client that
// sends all its grant allows at once -- as Linux's does, the moment a reply
// comes -- never meets an empty receive queue. The grant grows to every
// buffer of the server's shared queue (64 of 64), and the replies leave
// outside the server's poll() (a handler answering later), before the pass
// that would post their buffers again; the client's next calls arrive before
// that pass. Before the fix they found the queue empty: the device counted
// RNR waits (on pmd/shm a SEND waits; on rxe it is an RNR NAK, which broke
// the Linux client's connection: docs/nfs-gateway.md).
TEST(Rpc, EveryGrantedCallFindsAPostedReceive) {
  EngineOptions so, co;
  so.credits = co.credits = 64;
  Fixture f(so, co);
  constexpr int kCalls = 1500;
  std::vector<Pending> ps(kCalls);
  int issued = 0, replied = 0;
  auto issue = [&] {
    while (issued < kCalls && f.conn->outstanding() < 64) {
      Call c;
      c.prog = kProg, c.vers = kVers, c.proc = kLater, c.done = on_done, c.ctx = &ps[issued];
      const int rc = f.conn->call(c);
      if (rc == EAGAIN) break;  // the client's own limit on calls in hand: the next pass
      ASSERT_EQ(rc, 0);
      ++issued;
    }
  };
  uint32_t most = 0;
  while (replied < kCalls) {
    issue();
    f.srv->poll();
    // Answered outside the server's poll(), all at once.
    std::vector<ServerCall*> batch;
    batch.swap(f.later);
    for (ServerCall* sc : batch) {
      ASSERT_OK(sc->reply({}));
      ++replied;
    }
    most = std::max(most, f.conn->info().credits);
    f.cli->poll();
    ASSERT_FALSE(f.conn->failed());
  }
  ASSERT_TRUE(f.wait([&] { return ps[kCalls - 1].done; }));
  EXPECT_EQ(most, 64u) << "the grant grew to the client's whole window";
  uint64_t rnr = 0;
  for (const ConnectionStats& cs : f.srv->connection_stats())
    for (const auto& [name, v] : cs.counters)
      if (std::string_view(name).ends_with("rnr_waits")) rnr += v;
  EXPECT_EQ(rnr, 0u) << "granted calls found no receive posted";
}

// A server may hold calls (answer later): a grant travels only in a reply,
// so the client asks for its whole window from its first call on, and the
// one reply it gets lets every later call reach a server that holds them
// all (a client asking only for what it had in flight would be stuck at one).
TEST(Rpc, AServerHoldingCallsStillReceivesTheClientsWindow) {
  EngineOptions so, co;
  so.credits = co.credits = 8;
  Fixture f(so, co);
  {
    Pending p;
    Call c{kProg, kVers, kEcho};
    c.done = on_done, c.ctx = &p;
    ASSERT_EQ(f.conn->call(c), 0);
    ASSERT_TRUE(f.wait([&] { return p.done; }));
  }
  EXPECT_EQ(f.conn->info().credits, 8u);
  std::vector<Pending> ps(8);
  for (auto& p : ps) {
    Call c{kProg, kVers, kLater};
    c.done = on_done, c.ctx = &p;
    ASSERT_EQ(f.conn->call(c), 0);
  }
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 8; })) << f.later.size() << " of 8 held calls arrived";
  for (ServerCall* sc : f.later) ASSERT_OK(sc->reply({}));
  f.later.clear();
  ASSERT_TRUE(f.wait([&] {
    for (auto& p : ps)
      if (!p.done) return false;
    return true;
  }));
}

TEST(Rpc, ManyCallsInFlightAllComplete) {
  EngineOptions so, co;
  so.credits = 32;
  co.credits = 32;
  Fixture f(so, co);
  constexpr int kCalls = 2000;
  std::vector<Pending> ps(kCalls);
  std::vector<std::array<uint8_t, 16>> args(kCalls);
  int issued = 0;
  auto done_count = [&] {
    int n = 0;
    for (auto& p : ps) n += p.done;
    return n;
  };
  while (issued < kCalls) {
    for (int k = 0; k < 64 && issued < kCalls; ++k, ++issued) {
      for (int i = 0; i < 16; ++i) args[issued][i] = pat(issued, i);
      Call c;
      c.prog = kProg, c.vers = kVers, c.proc = kEcho, c.done = on_done, c.ctx = &ps[issued];
      c.args = args[issued];
      int rc = f.conn->call(c);
      if (rc == EAGAIN) break;  // backlog full: poll and retry
      ASSERT_EQ(rc, 0);
    }
    f.srv->poll();
    f.cli->poll();
  }
  ASSERT_TRUE(f.wait([&] { return done_count() == kCalls; }, 20000))
      << done_count() << " of " << kCalls << "; outstanding " << f.conn->outstanding() << "\nclient: "
      << format_stats(f.cli->stats_view()) << "\nserver: " << format_stats(f.srv->stats_view());
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_EQ(ps[i].reply.status, CallStatus::kOk) << i;
    ASSERT_EQ(ps[i].results, std::vector<uint8_t>(args[i].begin(), args[i].end())) << i;
  }
  EXPECT_LT(f.cli->stats().sends_signaled.get(), f.cli->stats().sends.get()) << "Sends are signaled in batches";
}

// Connection loss with calls in flight (some holding MRs), reconnecting
// off: every call completes exactly once with kDisconnected, and nothing
// leaks.
TEST(Rpc, ConnectionLossFailsOutstandingCallsOnce) {
  EngineOptions so, co;
  co.reconnect = false;  // recovery_test.cc has the calls sent again
  Fixture f(so, co);
  constexpr int kCalls = 8;
  std::vector<Pending> ps(kCalls);
  std::vector<int> completions(kCalls, 0);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(kCalls * 4096));
  for (int i = 0; i < kCalls; ++i) {
    Call c;
    c.prog = kProg, c.vers = kVers, c.proc = kLater, c.ctx = &ps[i];
    c.done = on_done;
    if (i % 2 == 0) c.bulk_recv = std::span<uint8_t>(bulk + i * 4096, 4096);  // an MR per even call
    ASSERT_EQ(f.conn->call(c), 0);
  }
  ASSERT_TRUE(f.wait([&] { return !f.later.empty(); }));
  // The server replies to one call, then its engine goes away (as if killed).
  ASSERT_OK(f.later.front()->reply({}));
  f.later.clear();
  f.wait([] { return false; }, 20);
  f.srv.reset();
  ASSERT_TRUE(f.wait_client([&] {
    for (auto& p : ps)
      if (!p.done) return false;
    return true;
  })) << "calls did not all complete after the connection was lost";
  int ok = 0, lost = 0;
  for (auto& p : ps) {
    if (p.reply.status == CallStatus::kOk) ++ok;
    else if (p.reply.status == CallStatus::kDisconnected) ++lost;
  }
  EXPECT_EQ(ok + lost, kCalls);
  EXPECT_LE(ok, 1);
  EXPECT_TRUE(f.conn->failed());
  EXPECT_EQ(f.conn->outstanding(), 0u);
  EXPECT_EQ(f.conn->call(Call{kProg, kVers, kEcho}), ENOTCONN);
}

// Bad calls are refused at call() with a reason, never half-sent.
TEST(Rpc, BadCallsAreRefusedUpFront) {
  EngineOptions so, co;
  co.frwr_depth = 1;  // one page per MR: a large chunk needs many segments
  co.max_long_call = 16 * 1024;
  Fixture f(so, co);
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kEcho, c.done = on_done;
  Pending p;
  c.ctx = &p;

  std::vector<uint8_t> huge(20000);
  c.args = huge;
  EXPECT_EQ(f.conn->call(c), EMSGSIZE) << "a call message over max_long_call";
  c.args = {};

  std::vector<uint8_t> heap(4096);  // not registered with the engine
  c.bulk_send = heap;
  EXPECT_EQ(f.conn->call(c), EINVAL) << "bulk memory the engine did not register";

  auto* big = static_cast<uint8_t*>(f.cli->alloc(128 * 1024));
  c.bulk_send = std::span<const uint8_t>(big, 128 * 1024);  // 32 pages = 32 segments at depth 1
  EXPECT_EQ(f.conn->call(c), EMSGSIZE) << "more segments than a chunk list holds";

  ReadChunk two[2] = {{std::span<const uint8_t>(big, 4096), 0}, {std::span<const uint8_t>(big, 4096), 0}};
  c.bulk_send = {};
  c.read_chunks = two;
  EXPECT_EQ(f.conn->call(c), EINVAL) << "two read chunks at one position";
  two[1].position = 2;
  EXPECT_EQ(f.conn->call(c), EINVAL) << "a position that is not XDR-aligned";
  two[1].position = 8;
  EXPECT_EQ(f.conn->call(c), EINVAL) << "a position past the arguments";
  c.read_chunks = {};

  // Within limits the same engine still works: 8 pages, 8 segments.
  c.bulk_send = std::span<const uint8_t>(big, 8 * 4096);
  c.proc = kSum;
  EXPECT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return p.done; }));
  EXPECT_EQ(p.reply.status, CallStatus::kOk);
  EXPECT_FALSE(f.conn->failed());
  Call none;
  EXPECT_EQ(f.conn->call(none), EINVAL) << "no completion callback";
}

// A call larger than the inline threshold goes as RDMA_NOMSG: its message
// through a position-zero read chunk the server pulls (RFC 8166 §3.5.3),
// staged in the client's bulk pool; the large results come back through a
// reply chunk. Also with a read chunk of its own beside it.
TEST(Rpc, LongCallGoesThroughAPositionZeroReadChunk) {
  Fixture f;
  std::vector<uint8_t> args(12000);
  for (size_t i = 0; i < args.size(); ++i) args[i] = pat(3, i);
  Call c;
  c.proc = kEcho;
  c.args = args;
  c.max_results = 12000;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  EXPECT_EQ(p.results, args);
  EXPECT_EQ(f.cli->stats().long_calls.get(), 1u);
  // Without room for the results, the server says so with ERR_CHUNK.
  c.max_results = 0;
  p = f.call(c);
  EXPECT_EQ(p.reply.status, CallStatus::kRdmaError);
  // A long call with a read chunk beside its message.
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(64 * 1024));
  uint32_t want = 0;
  for (uint32_t i = 0; i < 64 * 1024; ++i) want += bulk[i] = pat(9, i);
  Call s;
  s.proc = kSum;
  s.args = args;
  s.bulk_send = std::span<const uint8_t>(bulk, 64 * 1024);
  p = f.call(s);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  uint32_t got[2];
  ASSERT_EQ(p.results.size(), 8u);
  std::memcpy(got, p.results.data(), 8);
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], 64u * 1024);
  EXPECT_EQ(f.cli->stats().long_calls.get(), 3u);
  EXPECT_EQ(f.cli->stats().rkeys_live.get(), 0u);
}

// Connections come and go without the engines' arenas running dry: each
// dead connection's memory is reused by the next.
TEST(Rpc, ManySuccessiveConnectionsReuseMemory) {
  EngineOptions so, co;
  // A server connection needs (8 credits + 17 slack) x ~1.07 MiB = ~27 MiB:
  // this arena holds two at once, and eight come and go.
  so.arena_bytes = co.arena_bytes = 64u << 20;
  so.max_bulk = 1u << 20;
  so.credits = co.credits = 8;
  auto srv = Engine::create(so).value();
  auto cli = Engine::create(co).value();
  srv->handle(kProg, kVers, kEcho, &Fixture::echo, nullptr);
  std::string path = next_spec();
  ASSERT_OK(srv->listen(path));
  auto spin = [&](const std::function<bool()>& pred, int ms = 5000) {
    return poll_until({srv.get(), cli.get()}, pred, ms);
  };
  for (int round = 0; round < 8; ++round) {
    Connection* c = cli->connect(path).value();
    ASSERT_TRUE(spin([&] { return c->ready() || c->failed(); }));
    ASSERT_TRUE(c->ready()) << "round " << round << ": " << c->error().to_string();
    Pending p;
    uint8_t a[8] = {1, 2, 3, 4, 5, 6, 7, static_cast<uint8_t>(round)};
    Call call;
    call.prog = kProg, call.vers = kVers, call.proc = kEcho, call.args = a, call.done = on_done, call.ctx = &p;
    ASSERT_EQ(c->call(call), 0);
    ASSERT_TRUE(spin([&] { return p.done; }));
    ASSERT_EQ(p.reply.status, CallStatus::kOk);
    EXPECT_EQ(p.results, std::vector<uint8_t>(a, a + 8));
    c->close();
    // Both ends notice, drain and reclaim (connection events are checked
    // once a millisecond): until each engine has destroyed its side, which
    // gives the connection's memory back (ConnBase's destructor drops the
    // gauge), so the next round starts with it free.
    ASSERT_TRUE(spin([&] { return srv->stats().connections.get() == 0 && cli->stats().connections.get() == 0; }))
        << "round " << round << ": connections still held: server " << srv->stats().connections.get()
        << ", client " << cli->stats().connections.get();
  }
  remove_spec(path);
}

// ---------------------------------------------------------------- observability

namespace {
uint64_t counter(const ConnectionStats& s, std::string_view name) {
  for (auto& [n, v] : s.counters)
    if (name == n) return v;
  ADD_FAILURE() << "no counter " << name;
  return 0;
}
const ProcedureStats* proc_of(const std::vector<ProcedureStats>& v, uint32_t proc, bool server) {
  for (const ProcedureStats& p : v)
    if (p.prog == kProg && p.vers == kVers && p.proc == proc && p.server == server) return &p;
  return nullptr;
}
// A strict JSON syntax check (RFC 8259: objects, arrays, strings with
// escapes, numbers, true/false/null), in the test itself: the VM stage runs
// this suite where there is no python3.
struct JsonCheck {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  }
  bool lit(const char* w) {
    size_t n = std::strlen(w);
    if (s.compare(i, n, w) != 0) return false;
    i += n;
    return true;
  }
  bool str() {
    if (i >= s.size() || s[i] != '"') return false;
    for (++i; i < s.size(); ++i) {
      auto c = static_cast<unsigned char>(s[i]);
      if (c == '"') return ++i, true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (++i >= s.size()) return false;
        if (s[i] == 'u') {
          for (int k = 0; k < 4; ++k)
            if (++i >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
        } else if (std::strchr("\"\\/bfnrt", s[i]) == nullptr) {
          return false;
        }
      }
    }
    return false;
  }
  bool num() {
    size_t b = i;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    if (s[i] == '0') ++i;
    else while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i < s.size() && s[i] == '.') {
      if (++i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    }
    return i > b;
  }
  bool value(int depth) {
    if (depth > 64) return false;
    ws();
    if (i >= s.size()) return false;
    char c = s[i];
    if (c == '{' || c == '[') {
      char close = c == '{' ? '}' : ']';
      ++i;
      ws();
      if (i < s.size() && s[i] == close) return ++i, true;
      for (;;) {
        if (c == '{') {
          ws();
          if (!str()) return false;
          ws();
          if (i >= s.size() || s[i++] != ':') return false;
        }
        if (!value(depth + 1)) return false;
        ws();
        if (i >= s.size()) return false;
        if (s[i] == ',') {
          ++i;
          continue;
        }
        if (s[i] == close) return ++i, true;
        return false;
      }
    }
    if (c == '"') return str();
    if (lit("true") || lit("false") || lit("null")) return true;
    return num();
  }
};
bool valid_json(const std::string& doc) {
  JsonCheck j{doc};
  if (!j.value(0)) return false;
  j.ws();
  return j.i == doc.size();
}

TEST(Rpc, TheJsonCheckRefusesWhatIsNotJson) {
  EXPECT_TRUE(valid_json(R"({"a":[1,-2.5e3,"x\"y",true,null,{}],"b":{}})"));
  for (const char* bad : {"", "{", "{\"a\":}", "{\"a\" 1}", "[1,]", "{\"a\":1,}", "\"\\q\"", "01", "{} x",
                          "{\"a\":\"\n\"}", "[1 2]"})
    EXPECT_FALSE(valid_json(bad)) << bad;
}
}  // namespace

// Per-connection and per-procedure figures count what really crossed the
// connection: calls, bytes inline and through each kind of chunk, errors,
// and a round trip per reply.
// Five echoes of `args`, then 64 KiB through a write chunk and 32 KiB
// through a read chunk: seven calls, each kind of bulk once.
void echoes_and_chunks(Fixture& f, std::span<const uint8_t> args) {
  Call c;
  c.proc = kEcho;
  c.args = args;
  for (int i = 0; i < 5; ++i) ASSERT_EQ(f.call(c).reply.status, CallStatus::kOk);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(65536));
  ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, 65536, 3));  // write chunk
  Call s;
  s.proc = kSum;
  s.bulk_send = std::span<const uint8_t>(bulk, 32768);  // read chunk
  ASSERT_EQ(f.call(s).reply.status, CallStatus::kOk);
}

TEST(Rpc, StatsCountEachConnectionAndProcedure) {
  Fixture f;
  std::vector<uint8_t> args(100, 1);
  ASSERT_NO_FATAL_FAILURE(echoes_and_chunks(f, args));
  Call u;
  u.proc = 77;                                               // no handler
  ASSERT_EQ(f.call(u).reply.status, CallStatus::kProcUnavail);

  ConnectionStats cs = f.conn->stats();
  EXPECT_FALSE(cs.server);
  EXPECT_STREQ(cs.state, "ready");
  EXPECT_GT(cs.connect_ns, 0u);
  EXPECT_NE(cs.peer.find(f.path), std::string::npos) << cs.peer;  // names the device spec
  EXPECT_EQ(counter(cs, "calls"), 8u);
  EXPECT_EQ(counter(cs, "replies"), 8u);
  EXPECT_EQ(counter(cs, "sends"), 8u);
  EXPECT_EQ(counter(cs, "recvs"), 8u);
  EXPECT_EQ(counter(cs, "errors"), 1u) << "the PROC_UNAVAIL call";
  EXPECT_EQ(counter(cs, "write_chunks"), 1u);
  EXPECT_EQ(counter(cs, "write_chunk_bytes"), 65536u);
  EXPECT_EQ(counter(cs, "read_chunks"), 1u);
  EXPECT_EQ(counter(cs, "read_chunk_bytes"), 32768u);
  EXPECT_GT(counter(cs, "bytes_sent"), 5u * 100u);
  EXPECT_EQ(cs.rtt.count, 8u);
  EXPECT_GT(cs.rtt.p50, 0u);
  EXPECT_LE(cs.rtt.min, cs.rtt.p50);
  EXPECT_LE(cs.rtt.p99, cs.rtt.max);

  // The server's view of the same connection.
  std::vector<ConnectionStats> all = f.srv->connection_stats();
  ASSERT_EQ(all.size(), 1u);
  const ConnectionStats& ss = all[0];
  EXPECT_TRUE(ss.server);
  EXPECT_NE(ss.id, 0u);
  EXPECT_EQ(counter(ss, "calls"), 8u);
  EXPECT_EQ(counter(ss, "replies"), 8u);
  EXPECT_EQ(counter(ss, "read_chunk_bytes"), 32768u);
  EXPECT_EQ(counter(ss, "write_chunk_bytes"), 65536u);
  EXPECT_EQ(counter(ss, "bytes_received"), counter(cs, "bytes_sent"));
  EXPECT_EQ(counter(ss, "bytes_sent"), counter(cs, "bytes_received"));
  EXPECT_EQ(ss.rtt.count, 8u);

  // Per procedure, on each side.
  auto cp = f.cli->procedure_stats();
  const ProcedureStats* echo = proc_of(cp, kEcho, false);
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo->ops, 5u);
  EXPECT_EQ(echo->errors, 0u);
  EXPECT_EQ(echo->rtt.count, 5u);
  const ProcedureStats* sum = proc_of(cp, kSum, false);
  ASSERT_NE(sum, nullptr);
  EXPECT_GE(sum->bytes_sent, 32768u) << "a read chunk's bulk counts as sent";
  const ProcedureStats* unk = proc_of(cp, 77, false);
  ASSERT_NE(unk, nullptr);
  EXPECT_EQ(unk->errors, 1u);
  auto sp = f.srv->procedure_stats();
  const ProcedureStats* secho = proc_of(sp, kEcho, true);
  ASSERT_NE(secho, nullptr);
  EXPECT_EQ(secho->ops, 5u);
  const ProcedureStats* sfill = proc_of(sp, kFill, true);
  ASSERT_NE(sfill, nullptr);
  EXPECT_GE(sfill->bytes_sent, 65536u);
  EXPECT_EQ(proc_of(sp, 77, true), nullptr) << "a peer's unknown procedures share one entry";
  bool shared = false;
  for (const ProcedureStats& p : sp)
    if (p.server && p.proc == UINT32_MAX) shared = p.ops == 1 && p.errors == 1;
  EXPECT_TRUE(shared);

  // The JSON document: valid, with the same figures.
  std::string j = f.cli->stats_json();
  EXPECT_TRUE(valid_json(j)) << j;
  EXPECT_NE(j.find("\"connections\":[{"), std::string::npos);
  EXPECT_NE(j.find("\"write_chunk_bytes\":65536"), std::string::npos) << j;
  EXPECT_NE(j.find("\"mrs_allocated\""), std::string::npos);
  std::string sj = f.srv->stats_json();
  EXPECT_TRUE(valid_json(sj)) << sj;
  EXPECT_NE(sj.find("\"side\":\"server\""), std::string::npos);
}

TEST(Rpc, BreakdownTimesEachStageOfEveryCall) {
  EngineOptions so, co;
  so.breakdown = co.breakdown = true;
  Fixture f(so, co);
  ASSERT_NO_FATAL_FAILURE(echoes_and_chunks(f, {}));

  auto stage = [](const ConnectionStats& st, const char* name) -> const LatencySummary* {
    for (const auto& [n, l] : st.breakdown)
      if (std::strcmp(n, name) == 0) return &l;
    return nullptr;
  };
  ConnectionStats cs = f.conn->stats();
  std::vector<std::string> names;
  for (const auto& b : cs.breakdown) names.emplace_back(b.first);
  EXPECT_EQ(names, (std::vector<std::string>{"queue", "wire", "invalidate", "complete", "total", "send_done"}));
  uint64_t sum_of_means = 0;
  for (const char* n : {"queue", "wire", "invalidate", "complete"}) {
    const LatencySummary* l = stage(cs, n);
    ASSERT_NE(l, nullptr) << n;
    EXPECT_EQ(l->count, 7u) << n;
    sum_of_means += l->mean;
  }
  const LatencySummary* total = stage(cs, "total");
  ASSERT_NE(total, nullptr);
  EXPECT_EQ(total->count, 7u);
  EXPECT_GT(stage(cs, "wire")->mean, 0u);
  // The stages tile the round trip: their means add up to its mean (each
  // mean is exact; each sample rounds down to a nanosecond, so allow a few).
  EXPECT_NEAR(static_cast<double>(sum_of_means), static_cast<double>(total->mean), 4.0);
  EXPECT_LE(total->mean, cs.rtt.max);
  EXPECT_LE(stage(cs, "send_done")->count, 7u);

  std::vector<ConnectionStats> all = f.srv->connection_stats();
  ASSERT_EQ(all.size(), 1u);
  names.clear();
  for (const auto& b : all[0].breakdown) names.emplace_back(b.first);
  EXPECT_EQ(names, (std::vector<std::string>{"pull", "wait", "handler", "post", "total"}));
  EXPECT_EQ(stage(all[0], "pull")->count, 1u) << "only the call with a read chunk pulls";
  for (const char* n : {"wait", "handler", "post", "total"}) EXPECT_EQ(stage(all[0], n)->count, 7u) << n;

  // Off (the default): nothing kept.
  Fixture g;
  Call c;
  c.proc = kEcho;
  ASSERT_EQ(g.call(c).reply.status, CallStatus::kOk);
  EXPECT_TRUE(g.conn->stats().breakdown.empty());
  for (const ConnectionStats& st : g.srv->connection_stats()) EXPECT_TRUE(st.breakdown.empty());
}

// The same figures are readable from outside the process: engines,
// connections and procedures are telemetry sources (docs/observability.md),
// which the Unix-socket and DPDK exporters serve.
TEST(Rpc, StatsAreTelemetrySources) {
  Fixture f;
  Call c;
  c.proc = kEcho;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(f.call(c).reply.status, CallStatus::kOk);
  uint64_t conn_id = f.conn->stats().id;
  std::string conns = telemetry::handle_request("/tern/conns");
  ASSERT_TRUE(valid_json(conns)) << conns;
  // Find our client connection among every engine's ("<engine>.<conn>").
  bool found = false;
  size_t pos = 0;
  while ((pos = conns.find('"', pos)) != std::string::npos) {
    size_t end = conns.find('"', pos + 1);
    std::string id = conns.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    if (id.find('.') == std::string::npos || !id.ends_with(std::string(".").append(std::to_string(conn_id)))) continue;
    std::string one = telemetry::handle_request("/tern/conn," + id);
    for (size_t at; (at = one.find("\": ")) != std::string::npos;) one.erase(at + 2, 1);  // "k": v -> "k":v
    if (one.find("\"side\":\"client\"") == std::string::npos) continue;
    EXPECT_TRUE(valid_json(one)) << one;
    EXPECT_NE(one.find("\"calls\":3"), std::string::npos) << one;
    EXPECT_NE(one.find("\"rtt_count\":3"), std::string::npos) << one;
    EXPECT_NE(one.find(f.path), std::string::npos) << one;
    found = true;
  }
  EXPECT_TRUE(found) << conns;
  std::string procs = telemetry::handle_request("/tern/procs");
  char want[64];
  std::snprintf(want, sizeof want, ".%u.%u.%u.c", kProg, kVers, kEcho);
  EXPECT_NE(procs.find(want), std::string::npos) << procs;
  // A connection that is gone is gone from telemetry too.
  Connection* old = f.conn;
  old->close();  // the pointer must not be used after this: the engine reclaims it from a later poll()
  f.conn = nullptr;
  f.wait([] { return false; }, 50);
  std::string engines = telemetry::handle_request("/tern/engines");
  EXPECT_TRUE(valid_json(engines)) << engines;
}

// A server's procedure table does not grow with what a peer asks for.
TEST(Rpc, StatsOfUnknownProceduresAreBounded) {
  Fixture f;
  for (uint32_t proc = 100; proc < 140; ++proc) {
    Call u;
    u.proc = proc;
    ASSERT_EQ(f.call(u).reply.status, CallStatus::kProcUnavail);
  }
  // 5 handlers and the shared entry for everything else.
  EXPECT_EQ(f.srv->procedure_stats().size(), 6u);
}

// Another thread reads a snapshot while the engine's thread polls; without
// polling it gets the last published one, with its age.
TEST(Rpc, StatsSnapshotFromAnotherThread) {
  Fixture f;
  Call c;
  c.proc = kEcho;
  ASSERT_EQ(f.call(c).reply.status, CallStatus::kOk);
  std::atomic<bool> stop{false};
  std::string got;
  std::thread reader([&] {
    got = f.cli->stats_json_snapshot(5000);
    stop = true;
  });
  f.wait([&] { return stop.load(); });
  reader.join();
  ASSERT_FALSE(got.empty());
  EXPECT_TRUE(valid_json(got)) << got;
  EXPECT_NE(got.find("\"snapshot_age_ms\""), std::string::npos);
  EXPECT_NE(got.find("\"calls\":1"), std::string::npos) << got;
  // Nobody polls now: the last snapshot comes back after the wait.
  std::string stale = f.cli->stats_json_snapshot(10);
  EXPECT_TRUE(valid_json(stale));
  EXPECT_NE(stale.find("\"calls\":1"), std::string::npos);
}

// MRs destroyed because their connection was lost mid-call are counted as
// orphans (xprtrdma's orphaned_mrs).
TEST(Rpc, StatsCountMrsAndOrphans) {
  EngineOptions so, co;
  co.reconnect = false;
  Fixture f(so, co);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  ASSERT_NO_FATAL_FAILURE(f.fill_and_check(bulk, 8192, 1));
  auto by_name = [&](std::string_view n) {
    for (const StatEntry& e : f.cli->stats_view())
      if (n == e.name) return e.counter->get();
    ADD_FAILURE() << "no " << n;
    return uint64_t{0};
  };
  EXPECT_GE(by_name("mrs_allocated"), 1u);
  EXPECT_EQ(by_name("mrs_orphaned"), 0u);
  // A call the server holds, then the server goes away with it.
  Pending p;
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kLater, c.done = on_done, c.ctx = &p;
  c.bulk_recv = std::span<uint8_t>(bulk, 8192);
  ASSERT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return !f.later.empty(); }));
  f.srv.reset();
  ASSERT_TRUE(f.wait_client([&] { return p.done; }));
  EXPECT_EQ(p.reply.status, CallStatus::kDisconnected);
  EXPECT_GE(by_name("mrs_orphaned"), 1u);
  ConnectionStats cs = f.conn->stats();
  EXPECT_EQ(counter(cs, "errors"), 1u);
  EXPECT_STREQ(cs.state, "dead");
}

}  // namespace
}  // namespace tern::rpc
