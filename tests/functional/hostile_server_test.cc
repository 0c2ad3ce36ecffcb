// A hostile server against a Tern client: a raw peer (raw_peer.h) accepts
// the client's connection and answers its calls by hand, reaching for its
// memory with RDMA and lying in its replies. For every case the client gives
// RFC 8166's answer (the call completes, once, with its status) or drops that
// connection only, with one warning naming the peer and the reason; a second
// connection of the same client engine, to a well-behaved server, keeps
// passing its data checks; client memory outside what a call offered is
// untouched; and an rkey a call advertised reaches nothing once the call has
// ended, however it ended (the rkey-exposure probe).
//
// Over pmd/shm by default; TERN_RPC_DEVICE names another device (the VM stage
// runs these on rxe). Cases that depend on a device's bounds checks or on
// pmd/shm's key numbering say so and skip elsewhere.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "raw_peer.h"
#include "test_arena.h"

namespace tern::rpc {
namespace {

using namespace tern::rdma;
using namespace tern::test;
namespace rr = tern::rpcrdma;

constexpr uint32_t kProg = 0x20000077, kVers = 1;
constexpr uint32_t kEcho = 1, kFill = 2;
constexpr uint8_t kGuard = 0xC1, kSecret = 0x5A;
constexpr uint32_t kChunk = 64 * 1024;

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 11 + i * 5 + (i >> 10)); }

struct Done {
  int count = 0;  // completions: must end at exactly 1
  CallReply r{};
  std::vector<uint8_t> results;
  bool done() const { return count > 0; }
};
void on_done(void* ctx, const CallReply& r) {
  auto* d = static_cast<Done*>(ctx);
  ++d->count;
  d->r = r;
  d->results.assign(r.results.begin(), r.results.end());
}

// A well-behaved server for the client's second connection.
void good_echo(void*, ServerCall* c) { (void)c->reply(c->args(), c->bulk()); }
void good_fill(void*, ServerCall* c) {
  uint32_t n = c->bulk_capacity();
  auto b = c->bulk_buffer(n);
  for (uint32_t i = 0; i < n; ++i) b[i] = pat(9, i);
  (void)c->reply({}, b);
}

// What the raw server learned of one call.
struct RawCall {
  uint32_t xid = 0;
  rr::Header h;
  uint32_t read_rkey = 0, write_rkey = 0, reply_rkey = 0;
  uint64_t read_addr = 0, write_addr = 0;
  uint32_t read_len = 0, write_len = 0;
};

class HostileServer : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }

  void start(EngineOptions co, std::string spec_suffix = "") {
    co.arena_bytes = kTestArenaBytes;
    // A hostile server costs its connection: these tests see it fail (a
    // reconnect would only meet the same server again).
    co.reconnect = false;
    cli = Engine::create(co).value();
    EngineOptions so;
    so.arena_bytes = kTestArenaBytes;
    so.max_bulk = 256u << 10;
    good_srv = Engine::create(so).value();
    good_srv->handle(kProg, kVers, kEcho, good_echo, nullptr);
    good_srv->handle(kProg, kVers, kFill, good_fill, nullptr);
    good_spec = fresh_spec("hostile-good");
    ASSERT_TRUE(good_srv->listen(good_spec).is_ok());
    good_conn = cli->connect(good_spec).value();
    ASSERT_TRUE(wait([&] { return good_conn->ready() || good_conn->failed(); }));
    ASSERT_TRUE(good_conn->ready());

    // Client memory: [guard | offered | guard], and a secret never offered.
    region = static_cast<uint8_t*>(cli->alloc(3 * kChunk));
    std::memset(region, kGuard, 3 * kChunk);
    offered = region + kChunk;
    secret = static_cast<uint8_t*>(cli->alloc(kChunk));
    std::memset(secret, kSecret, kChunk);
    send_buf = static_cast<uint8_t*>(cli->alloc(kChunk));
    good_buf = static_cast<uint8_t*>(cli->alloc(kChunk));
    ASSERT_NO_FATAL_FAILURE(good_calls());

    raw_spec = fresh_spec("hostile-raw") + spec_suffix;
    ASSERT_NO_FATAL_FAILURE(new_raw());
    log.clear();
  }

  // A fresh raw server (at raw_spec, or `spec`) and a client connection to it.
  void new_raw(uint32_t recvs = RawPeer::kRecvs, std::string spec = {}) {
    if (spec.empty()) spec = raw_spec;
    raw.reset();
    raw = std::make_unique<RawPeer>([this] { pump(); });
    ASSERT_TRUE(raw->open(spec, recvs).is_ok());
    ASSERT_TRUE(raw->listen().is_ok());
    auto c = cli->connect(spec);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    conn = c.value();
    Status st = raw->accept_one(rr::CmPrivateData{true, 4096, 4096});
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_TRUE(wait([&] { return conn->ready() || conn->failed(); }));
    ASSERT_TRUE(conn->ready()) << conn->error().to_string();
  }

  void TearDown() override {
    if (!cli) return;
    if (!HasFatalFailure()) {
      ASSERT_NO_FATAL_FAILURE(good_calls());
    }
    for (size_t i = 0; i < kChunk; ++i) {
      ASSERT_EQ(region[i], kGuard) << "client memory before the offered chunk changed at " << i;
      ASSERT_EQ(region[2 * kChunk + i], kGuard) << "client memory after the offered chunk changed at " << i;
      ASSERT_EQ(secret[i], kSecret) << "client memory never offered changed at " << i;
    }
    raw.reset();
    // Idle: no registration of any call is reachable.
    EXPECT_TRUE(wait([&] { return cli->stats().rkeys_live.get() == 0; }, 1000))
        << cli->stats().rkeys_live.get() << " rkeys live at idle";
    cli.reset();
    good_srv.reset();
    remove_spec(raw_spec.substr(0, raw_spec.find(',')));
    remove_spec(good_spec);
  }

  void pump() {
    cli->poll();
    good_srv->poll();
  }
  bool wait(const std::function<bool()>& pred, int ms = 3000) { return poll_until([this] { pump(); }, pred, ms); }

  // Calls on the well-behaved connection: a write chunk filled and checked,
  // a read chunk echoed back through the write chunk.
  void good_calls() {
    for (int k = 0; k < 2; ++k) {
      std::memset(good_buf, 0, kChunk);
      Done d;
      Call c{kProg, kVers, kFill};
      c.bulk_recv = std::span<uint8_t>(good_buf, kChunk);
      c.done = on_done, c.ctx = &d;
      ASSERT_EQ(good_conn->call(c), 0);
      ASSERT_TRUE(wait([&] { return d.done(); })) << "the well-behaved connection's call hangs";
      ASSERT_EQ(d.r.status, CallStatus::kOk) << call_status_name(d.r.status);
      ASSERT_EQ(d.r.bulk_recv_len, kChunk);
      for (uint32_t i = 0; i < kChunk; ++i) ASSERT_EQ(good_buf[i], pat(9, i)) << i;
    }
  }

  // Issues a call on the raw connection: a write chunk over `offered` (when
  // write), a read chunk over send_buf (when read).
  void issue(Done* d, bool write = true, bool read = false, uint32_t proc = kFill) {
    Call c{kProg, kVers, proc};
    if (write) c.bulk_recv = std::span<uint8_t>(offered, kChunk);
    if (read) {
      for (uint32_t i = 0; i < kChunk; ++i) send_buf[i] = pat(3, i);
      c.bulk_send = std::span<const uint8_t>(send_buf, kChunk);
    }
    c.done = on_done, c.ctx = d;
    ASSERT_EQ(conn->call(c), 0);
  }
  // issue() then take(): the call as the raw server sees it.
  void issue_and_take(Done* d, RawCall* rc, bool write = true, bool read = false) {
    ASSERT_NO_FATAL_FAILURE(issue(d, write, read));
    ASSERT_NO_FATAL_FAILURE(take(rc));
  }
  // The raw server takes the next call off the wire.
  void take(RawCall* rc) {
    auto m = raw->recv(2000);
    ASSERT_TRUE(m) << "the raw server got no call";
    rr::DecodeResult d = rr::decode_header(m->bytes, &rc->h);
    ASSERT_EQ(d.status, rr::DecodeStatus::kOk);
    rc->xid = rc->h.xid;
    if (rc->h.chunks.nreads > 0) {
      rc->read_rkey = rc->h.chunks.reads[0].target.handle;
      rc->read_addr = rc->h.chunks.reads[0].target.offset;
      rc->read_len = rc->h.chunks.reads[0].target.length;
    }
    if (rc->h.chunks.nwrites > 0) {
      rc->write_rkey = rc->h.chunks.writes[0].segments[0].handle;
      rc->write_addr = rc->h.chunks.writes[0].segments[0].offset;
      rc->write_len = rc->h.chunks.writes[0].segments[0].length;
    }
  }
  // A success reply for rc: its write chunk reported as `written` bytes.
  std::vector<uint8_t> reply_msg(const RawCall& rc, uint32_t written, uint32_t credit = 8,
                                 std::span<const uint8_t> results = {}) {
    rr::Header h = plain_header(rc.xid, credit);
    if (rc.h.chunks.nwrites > 0) {
      h.chunks.nwrites = 1;
      h.chunks.writes[0].nsegments = 1;
      h.chunks.writes[0].segments[0] = rr::Segment{rc.write_rkey, written, rc.write_addr};
    }
    return rdma_msg(h, rpc_success(rc.xid, results));
  }
  // Fills the call's write chunk (as a server does) and replies.
  void serve(const RawCall& rc, uint32_t inv_rkey = 0, uint32_t seed = 1) {
    std::vector<uint8_t> data(rc.write_len);
    for (uint32_t i = 0; i < rc.write_len; ++i) data[i] = pat(seed, i);
    for (uint32_t off = 0; off < rc.write_len; off += 16 * 1024) {
      uint32_t n = std::min<uint32_t>(16 * 1024, rc.write_len - off);
      ASSERT_EQ(raw->write(data.data() + off, n, rc.write_rkey, rc.write_addr + off), WcStatus::kSuccess);
    }
    auto st = raw->send(reply_msg(rc, rc.write_len), inv_rkey);
    ASSERT_TRUE(st && *st == WcStatus::kSuccess);
  }
  void expect_filled(uint32_t seed = 1) {
    for (uint32_t i = 0; i < kChunk; ++i) ASSERT_EQ(offered[i], pat(seed, i)) << i;
  }

  // The client dropped the raw server: one protocol error, one warning
  // naming it and saying `why` (or `why2`: with receives from a shared
  // queue, pmd/shm refuses a bad SEND before it takes a receive, and says so).
  void expect_dropped(std::string_view why, uint64_t errors = 1, std::string_view why2 = {}) {
    EXPECT_TRUE(wait([&] { return cli->stats().protocol_errors.get() == errors; }))
        << "protocol_errors " << cli->stats().protocol_errors.get() << "\n" << log.dump();
    EXPECT_TRUE(wait([&] { return conn->failed(); }));
    auto w = log.warnings({raw->id()});
    EXPECT_EQ(w.size(), 1u) << "want one warning naming " << raw->id() << "; got:\n" << log.dump();
    if (!w.empty()) {
      EXPECT_TRUE(w[0].find(why) != std::string::npos || (!why2.empty() && w[0].find(why2) != std::string::npos))
          << w[0];
    }
  }
  // Completed exactly once, with `want`.
  void expect_done(Done& d, CallStatus want) {
    EXPECT_TRUE(wait([&] { return d.done(); })) << "the call never completed";
    EXPECT_EQ(d.count, 1) << "completed " << d.count << " times";
    EXPECT_EQ(d.r.status, want) << call_status_name(d.r.status);
  }
  bool bounds_enforced() const { return raw->caps().fast_reg_bounds_enforced; }
  // A client starts with one credit (RFC 8166); one call answered with a
  // grant of `credits` lets more out.
  void grant(uint32_t credits) {
    Done d;
    RawCall rc;
    ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, false));
    ASSERT_TRUE(raw->send(reply_msg(rc, 0, credits)));
    expect_done(d, CallStatus::kOk);
    ASSERT_EQ(conn->info().credits, credits);
  }

  LogCapture log;
  std::unique_ptr<Engine> cli, good_srv;
  Connection* good_conn = nullptr;
  Connection* conn = nullptr;
  std::unique_ptr<RawPeer> raw;
  std::string raw_spec, good_spec;
  uint8_t *region = nullptr, *offered = nullptr, *secret = nullptr, *send_buf = nullptr, *good_buf = nullptr;
};

// ---------------------------------------------------------------- the baseline

TEST_F(HostileServer, AWellBehavedRawServerIsServedAndInvalidatesTheRkey) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, true, true));
  ASSERT_NE(rc.write_rkey, 0u);
  ASSERT_NE(rc.read_rkey, 0u);
  EXPECT_EQ(cli->stats().rkeys_live.get(), 2u) << "one registration per chunk while the call is out";
  std::vector<uint8_t> pulled(kChunk);
  for (uint32_t off = 0; off < kChunk; off += 16 * 1024)
    ASSERT_EQ(raw->read(pulled.data() + off, 16 * 1024, rc.read_rkey, rc.read_addr + off), WcStatus::kSuccess);
  for (uint32_t i = 0; i < kChunk; ++i) ASSERT_EQ(pulled[i], pat(3, i)) << i;
  ASSERT_NO_FATAL_FAILURE(serve(rc));
  expect_done(d, CallStatus::kOk);
  ASSERT_NO_FATAL_FAILURE(expect_filled());
  EXPECT_EQ(cli->stats().protocol_errors.get(), 0u);
}

// ---------------------------------------------------------------- reaching past what a call offered

TEST_F(HostileServer, WritesOutsideTheWriteChunkAreRefused) {
  if (!bounds_enforced())
    GTEST_SKIP() << raw->caps().name << " checks window accesses against the MR under them (docs/security.md)";
  for (int where = 0; where < 3; ++where) {
    if (where > 0) {
      ASSERT_NO_FATAL_FAILURE(new_raw());
    }
    log.clear();
    Done d;
    RawCall rc;
    ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc));
    // Just before the chunk, just after it, and starting inside but running past its end.
    uint64_t at = where == 0 ? rc.write_addr - 4096 : where == 1 ? rc.write_addr + rc.write_len
                                                                 : rc.write_addr + rc.write_len - 100;
    std::vector<uint8_t> junk(4096, 0xEE);
    EXPECT_EQ(raw->write(junk.data(), 4096, rc.write_rkey, at), WcStatus::kRemAccessErr) << "case " << where;
    ASSERT_NO_FATAL_FAILURE(expect_dropped("refused its request", static_cast<uint64_t>(where) + 1));
    expect_done(d, CallStatus::kDisconnected);
  }
}

TEST_F(HostileServer, LongLivedRegistrationsAreNotReachableWhateverKeyIsNamed) {
  if (!on_shm()) GTEST_SKIP() << "guesses pmd/shm's key numbering";
  uint8_t junk[64], got[64];
  std::memset(junk, 0xEE, sizeof junk);
  int tries = 0;
  for (uint32_t index = 1; index <= 4; ++index) {
    for (uint8_t key = 0; key < 2; ++key) {
      for (bool is_write : {false, true}) {
        if (tries++ > 0) {
          ASSERT_NO_FATAL_FAILURE(new_raw());
        }
        uint32_t rkey = make_rkey(index, key);
        auto target = reinterpret_cast<uint64_t>(secret);
        WcStatus st = is_write ? raw->write(junk, sizeof junk, rkey, target) : raw->read(got, sizeof got, rkey, target);
        EXPECT_EQ(st, WcStatus::kRemAccessErr) << (is_write ? "WRITE" : "READ") << " with rkey 0x" << std::hex << rkey;
      }
    }
  }
}

// The rkey-exposure probe: once a call has ended, however it ended, READ and
// WRITE with each rkey it advertised fail with a remote access error.
enum class Ending { kOk, kRpcError, kRdmaError, kRemoteInvalidated, kDisconnected };

class RkeyProbe : public HostileServer, public ::testing::WithParamInterface<Ending> {};

TEST_P(RkeyProbe, RkeysReachNothingOnceTheCallEnded) {
  Ending how = GetParam();
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, true, true));
  std::vector<uint8_t> pulled(16 * 1024);
  ASSERT_EQ(raw->read(pulled.data(), 16 * 1024, rc.read_rkey, rc.read_addr), WcStatus::kSuccess) << "live: readable";
  CallStatus want = CallStatus::kOk;
  switch (how) {
    case Ending::kOk:
      ASSERT_NO_FATAL_FAILURE(serve(rc));
      break;
    case Ending::kRemoteInvalidated:
      ASSERT_NO_FATAL_FAILURE(serve(rc, rc.write_rkey));
      break;
    case Ending::kRpcError: {
      oncrpc::ReplyHeader rh;
      rh.xid = rc.xid;
      rh.accept = oncrpc::AcceptStat::kProcUnavail;
      std::vector<uint8_t> body(oncrpc::reply_size(rh));
      body.resize(oncrpc::encode_reply(rh, body));
      ASSERT_TRUE(raw->send(rdma_msg(plain_header(rc.xid, 8), body)));
      want = CallStatus::kProcUnavail;
      break;
    }
    case Ending::kRdmaError: {
      std::vector<uint8_t> m(64);
      m.resize(rr::encode_err_chunk(rc.xid, 8, m));
      ASSERT_TRUE(raw->send(m));
      want = CallStatus::kRdmaError;
      break;
    }
    case Ending::kDisconnected:
      raw.reset();  // the server goes away with the call outstanding
      want = CallStatus::kDisconnected;
      break;
  }
  expect_done(d, want);
  EXPECT_TRUE(wait([&] { return cli->stats().rkeys_live.get() == 0; })) << "the call's registrations are gone";
  if (how == Ending::kDisconnected) {
    // Probe from a new connection of the same server.
    ASSERT_NO_FATAL_FAILURE(new_raw());
  }
  std::vector<uint8_t> before(offered, offered + kChunk);
  // Probe: one access per connection, since each refusal costs the prober it.
  std::vector<uint8_t> junk(4096, 0xEE);
  EXPECT_EQ(raw->read(pulled.data(), 4096, rc.read_rkey, rc.read_addr), WcStatus::kRemAccessErr)
      << "READ through the read chunk's rkey after the call ended";
  ASSERT_NO_FATAL_FAILURE(new_raw());
  EXPECT_EQ(raw->write(junk.data(), 4096, rc.write_rkey, rc.write_addr), WcStatus::kRemAccessErr)
      << "WRITE through the write chunk's rkey after the call ended";
  EXPECT_TRUE(std::equal(before.begin(), before.end(), offered)) << "the late WRITE changed the buffer";
}

INSTANTIATE_TEST_SUITE_P(Endings, RkeyProbe,
                         ::testing::Values(Ending::kOk, Ending::kRpcError, Ending::kRdmaError,
                                           Ending::kRemoteInvalidated, Ending::kDisconnected),
                         [](const auto& info) {
                           switch (info.param) {
                             case Ending::kOk: return "Ok";
                             case Ending::kRpcError: return "RpcError";
                             case Ending::kRdmaError: return "RdmaError";
                             case Ending::kRemoteInvalidated: return "RemoteInvalidated";
                             case Ending::kDisconnected: return "Disconnected";
                           }
                           return "?";
                         });

// An rkey made for a call on one connection is useless on every other
// connection, even while the call is out: a server cannot reach the calls a
// client made to another server. Run with QP-bound registrations (windows)
// and with PD-wide ones (qp_bound=0: the engine gives each connection a PD).
// HostileServer with, when the parameter says so, a pmd/shm device argument
// that makes the device behave as another kind does.
template <const char* kShmArg>
class WithShmArg : public HostileServer, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    if (GetParam() && !on_shm()) GTEST_SKIP() << kShmArg << " is a pmd/shm device argument";
    start({}, GetParam() ? std::string(",") + kShmArg : std::string());
  }
};
constexpr char kPdWide[] = "qp_bound=0";
constexpr char kInvUnchecked[] = "inv_qp_check=0";

class OtherConnection : public WithShmArg<kPdWide> {};

TEST_P(OtherConnection, CannotUseAnotherConnectionsRkeys) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, true, true));
  // Another connection of the same client to the same server: the same
  // device, so with QP-bound registrations the same PD, and with PD-wide
  // ones (qp_bound=0) a PD of its own. Its peer holds the first call's rkeys.
  for (bool is_write : {false, true}) {
    auto other = raw->sibling();
    ASSERT_TRUE(other.is_ok()) << other.status().to_string();
    RawPeer& b = **other;
    auto c2 = cli->connect(raw_spec);
    ASSERT_TRUE(c2.is_ok()) << c2.status().to_string();
    ASSERT_TRUE(b.accept_one(rr::CmPrivateData{true, 4096, 4096}).is_ok());
    ASSERT_TRUE(wait([&] { return (*c2)->ready(); }));
    log.clear();
    std::vector<uint8_t> buf(4096, 0xEE);
    WcStatus st = is_write ? b.write(buf.data(), 4096, rc.write_rkey, rc.write_addr)
                           : b.read(buf.data(), 4096, rc.read_rkey, rc.read_addr);
    EXPECT_EQ(st, WcStatus::kRemAccessErr) << (is_write ? "WRITE into" : "READ of")
                                           << " another connection's chunk: " << wc_status_name(st);
    EXPECT_TRUE(wait([&] { return (*c2)->failed(); })) << "the connection whose peer reached too far is gone";
    if (b.caps().driver == "shm") {
      EXPECT_EQ(cli->stats().protocol_errors.get(), is_write ? 2u : 1u);
      EXPECT_EQ(log.warnings({b.id()}).size(), 1u) << log.dump();
    } else {
      // rxe tells the responder nothing of why its QP went to error (no
      // QP_ACCESS_ERR event): the engine can only say the connection failed.
      EXPECT_FALSE(log.lines({b.id()}, LogLevel::kInfo).empty()) << log.dump();
    }
  }
  for (uint32_t i = 0; i < 4096; ++i) ASSERT_NE(offered[i], 0xEE) << i;
  // The first connection is untouched: its server serves the call as usual.
  ASSERT_TRUE(conn->ready());
  ASSERT_NO_FATAL_FAILURE(serve(rc, rc.write_rkey));
  expect_done(d, CallStatus::kOk);
  ASSERT_NO_FATAL_FAILURE(expect_filled());
}

INSTANTIATE_TEST_SUITE_P(Registrations, OtherConnection, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "PdWide" : "QpBound"; });

// ---------------------------------------------------------------- Send With Invalidate

// The server invalidates another outstanding call's rkey with its reply.
// The device did invalidate it, so the client accepts that, and never
// invalidates that MR again (on rxe a second invalidation of a window panics
// the kernel); both calls complete normally.
TEST_F(HostileServer, SendWithInvalidateOfAnotherCallsRkeyIsHonouredOnce) {
  ASSERT_NO_FATAL_FAILURE(grant(8));
  uint8_t* other = static_cast<uint8_t*>(cli->alloc(kChunk));
  Done dx, dy;
  issue(&dx);
  Call c{kProg, kVers, kFill};
  c.bulk_recv = std::span<uint8_t>(other, kChunk);
  c.done = on_done, c.ctx = &dy;
  ASSERT_EQ(conn->call(c), 0);
  RawCall x, y;
  ASSERT_NO_FATAL_FAILURE(take(&x));
  ASSERT_NO_FATAL_FAILURE(take(&y));
  uint64_t chains0 = cli->stats().local_inv_chains.get(), inv0 = cli->stats().remote_invalidations.get();
  ASSERT_NO_FATAL_FAILURE(serve(x, /*inv=*/y.write_rkey));  // X's reply invalidates Y's rkey
  expect_done(dx, CallStatus::kOk);
  ASSERT_NO_FATAL_FAILURE(expect_filled());
  // Y's rkey is dead already: the server can no longer fill Y's chunk.
  auto st = raw->send(reply_msg(y, 0));
  ASSERT_TRUE(st && *st == WcStatus::kSuccess);
  expect_done(dy, CallStatus::kOk);
  EXPECT_EQ(cli->stats().remote_invalidations.get() - inv0, 1u);
  EXPECT_EQ(cli->stats().local_inv_chains.get() - chains0, 1u)
      << "X's own MR is invalidated locally, Y's (invalidated by the server) is not invalidated again";
  EXPECT_EQ(cli->stats().protocol_errors.get(), 0u);
  EXPECT_TRUE(conn->ready());
}

// A server on another connection of the same client (same device and PD)
// names, in its Send With Invalidate, an rkey of a call on the first
// connection. A device that checks the window's QP refuses it; one that does
// not (rxe) invalidates it, and the engine must then never invalidate it
// again (on rxe a second invalidation panics the kernel). With MR-style
// registrations (not QP-bound: pmd/sim's default, FRWR) the engine gives
// each connection a PD of its own, and the device refuses an invalidation
// of another PD's MR. Either way the sender is dropped and the first call
// completes normally.
class OtherConnectionInv : public WithShmArg<kInvUnchecked> {};

TEST_P(OtherConnectionInv, SendWithInvalidateOfAnotherConnectionsRkey) {
  Done d;
  RawCall a;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &a));
  auto other = raw->sibling();
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  RawPeer& b = **other;
  auto c2 = cli->connect(raw_spec);
  ASSERT_TRUE(c2.is_ok());
  ASSERT_TRUE(b.accept_one(rr::CmPrivateData{true, 4096, 4096}).is_ok());
  ASSERT_TRUE(wait([&] { return (*c2)->ready(); }));
  Done d2;
  Call c{kProg, kVers, kFill};
  c.done = on_done, c.ctx = &d2;
  ASSERT_EQ((*c2)->call(c), 0);
  auto m = b.recv(2000);
  ASSERT_TRUE(m);
  rr::Header h;
  ASSERT_EQ(rr::decode_header(m->bytes, &h).status, rr::DecodeStatus::kOk);
  RawCall bc;
  bc.xid = h.xid;
  bc.h = h;
  log.clear();
  uint64_t chains0 = cli->stats().local_inv_chains.get();
  (void)b.send(reply_msg(bc, 0), /*inv=*/a.write_rkey);  // the first connection's rkey
  EXPECT_TRUE(wait([&] { return (*c2)->failed(); })) << log.dump();
  expect_done(d2, CallStatus::kDisconnected);
  bool device_refused = b.caps().remote_inv_qp_bound || !b.caps().fast_reg_qp_bound;
  // The first connection goes on; its server answers without writing (on a
  // device that honoured the foreign invalidation it could not anyway).
  ASSERT_TRUE(conn->ready());
  ASSERT_TRUE(raw->send(reply_msg(a, 0)));
  expect_done(d, CallStatus::kOk);
  EXPECT_EQ(cli->stats().local_inv_chains.get() - chains0, device_refused ? 1u : 0u)
      << "the first call's MR is invalidated locally unless the foreign invalidation already did it";
  if (b.caps().driver == "shm") {
    EXPECT_EQ(log.warnings({b.id()}).size(), 1u) << log.dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, OtherConnectionInv, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "InvalidationNotQpChecked" : "AsTheDeviceDoes"; });

TEST_F(HostileServer, SendWithInvalidateOfAForeignRkeyDropsTheConnection) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc));
  (void)raw->send(reply_msg(rc, 0), /*inv=*/0x00424242);
  ASSERT_NO_FATAL_FAILURE(expect_dropped(on_shm() ? "a receive failed" : "failed", 1, "SEND_WITH_INV names no valid"));
  expect_done(d, CallStatus::kDisconnected);
}

TEST_F(HostileServer, SendWithInvalidateOfAStaleRkeyDropsTheConnection) {
  Done d1;
  RawCall a;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d1, &a));
  ASSERT_NO_FATAL_FAILURE(serve(a, a.write_rkey));
  expect_done(d1, CallStatus::kOk);
  Done d2;
  RawCall b;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d2, &b));
  // Answers the second call, but invalidates the first call's rkey again.
  (void)raw->send(reply_msg(b, 0), a.write_rkey);
  ASSERT_NO_FATAL_FAILURE(expect_dropped(""));
  expect_done(d2, CallStatus::kDisconnected);
}

// Once a call has ended, its rkey names a free registration. A Send With
// Invalidate of it must be refused by the device (and cost the sender its
// connection); on rxe (Linux 6.1) the invalidation of a free window whose
// key matches panics the kernel, so pmd/verbs replaces every window after
// its invalidation (FastMr::retire) and the old rkey names nothing.
TEST_F(HostileServer, SendWithInvalidateOfAnIdleRkeyDropsTheConnection) {
  ASSERT_NO_FATAL_FAILURE(grant(8));
  for (bool remote : {true, false}) {
    if (!remote) {
      ASSERT_NO_FATAL_FAILURE(new_raw());
    }
    log.clear();
    Done d;
    RawCall a;
    ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &a));
    // Ended by the server's invalidation, or by the client's LOCAL_INV.
    ASSERT_NO_FATAL_FAILURE(serve(a, remote ? a.write_rkey : 0));
    expect_done(d, CallStatus::kOk);
    ASSERT_TRUE(wait([&] { return cli->stats().rkeys_live.get() == 0; }));
    // Nothing else runs: the MR sits free. The server names its old rkey.
    RawCall stray = a;
    stray.xid = a.xid ^ 0x00100000;
    stray.h.chunks.nwrites = 0;
    (void)raw->send(reply_msg(stray, 0), a.write_rkey);
    ASSERT_NO_FATAL_FAILURE(expect_dropped("a receive failed", remote ? 1 : 2, "SEND_WITH_INV names no valid"));
  }
}

class HostileServerNoInv : public HostileServer {
 protected:
  void SetUp() override {
    EngineOptions co;
    co.remote_invalidation = false;
    start(co);
  }
};

TEST_F(HostileServerNoInv, SendWithInvalidateThatWasNotOfferedIsAProtocolError) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc));
  ASSERT_NO_FATAL_FAILURE(serve(rc, rc.write_rkey));
  ASSERT_NO_FATAL_FAILURE(expect_dropped("did not offer"));
  expect_done(d, CallStatus::kDisconnected);
}

// ---------------------------------------------------------------- replies that lie

TEST_F(HostileServer, CreditGrantsOfZeroAndAllOnesAreClamped) {
  for (uint32_t grant : {0u, 0xffffffffu}) {
    Done a, b, c;
    RawCall ra;
    ASSERT_NO_FATAL_FAILURE(issue_and_take(&a, &ra, false));
    ASSERT_TRUE(raw->send(reply_msg(ra, 0, grant)));
    expect_done(a, CallStatus::kOk);
    uint32_t want = grant == 0 ? 1u : EngineOptions{}.credits;
    EXPECT_EQ(conn->info().credits, want) << "grant " << grant;
    // Calls still flow under the grant: with 1 credit, one at a time.
    issue(&b, false);
    issue(&c, false);
    RawCall rb, rcx;
    ASSERT_NO_FATAL_FAILURE(take(&rb));
    if (grant == 0) {
      EXPECT_FALSE(raw->recv(100)) << "a second call beyond the grant of 1";
    }
    ASSERT_TRUE(raw->send(reply_msg(rb, 0, grant)));
    ASSERT_NO_FATAL_FAILURE(take(&rcx));
    ASSERT_TRUE(raw->send(reply_msg(rcx, 0, 8)));
    expect_done(b, CallStatus::kOk);
    expect_done(c, CallStatus::kOk);
  }
}

TEST_F(HostileServer, StrayDuplicateAndStaleXidsAreDropped) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, false));
  uint64_t bad0 = cli->stats().bad_headers.get();
  RawCall stray = rc;
  stray.xid = rc.xid ^ 0x5a5a0000;  // nobody's
  ASSERT_TRUE(raw->send(reply_msg(stray, 0)));
  RawCall stale = rc;
  stale.xid = rc.xid + (1u << 16);  // the same slot, another sequence number
  ASSERT_TRUE(raw->send(reply_msg(stale, 0)));
  EXPECT_TRUE(wait([&] { return cli->stats().bad_headers.get() == bad0 + 2; }));
  EXPECT_FALSE(d.done()) << "a reply to another xid completed the call";
  ASSERT_TRUE(raw->send(reply_msg(rc, 0)));
  expect_done(d, CallStatus::kOk);
  ASSERT_TRUE(raw->send(reply_msg(rc, 0)));  // a duplicate
  EXPECT_TRUE(wait([&] { return cli->stats().bad_headers.get() == bad0 + 3; }));
  EXPECT_EQ(d.count, 1);
  EXPECT_TRUE(conn->ready());
}

// A reply the client cannot use still names its call: the call fails with
// kBadReply at once instead of waiting for ever.
TEST_F(HostileServer, ObsoleteProceduresAndOtherVersionsFailTheirCall) {
  for (int kind = 0; kind < 4; ++kind) {
    Done d;
    RawCall rc;
    ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, false));
    std::vector<uint8_t> m;
    put32(m, rc.xid);
    put32(m, kind == 2 ? 2 : 1);                              // version
    put32(m, 8);                                              // credits
    put32(m, kind == 0 ? 3u : kind == 1 ? 2u : kind == 3 ? 9u : 0u);  // RDMA_DONE, RDMA_MSGP, (v2) MSG, proc 9
    put32(m, 0), put32(m, 0), put32(m, 0);
    ASSERT_TRUE(raw->send(m));
    expect_done(d, CallStatus::kBadReply);
  }
  EXPECT_EQ(cli->stats().bad_replies.get(), 4u);
  EXPECT_TRUE(conn->ready());
}

TEST_F(HostileServer, AReplyClaimingMoreThanTheWriteChunkHeldFailsTheCall) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc));
  ASSERT_TRUE(raw->send(reply_msg(rc, rc.write_len + 4096)));
  expect_done(d, CallStatus::kBadReply);
}

TEST_F(HostileServer, ASendLargerThanTheReceiveBufferDropsTheConnection) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, false));
  std::vector<uint8_t> big(EngineOptions{}.inline_recv + 1024, 0);
  auto m = reply_msg(rc, 0);
  std::copy(m.begin(), m.end(), big.begin());
  (void)raw->send(big);
  ASSERT_NO_FATAL_FAILURE(expect_dropped("a receive failed", 1, "larger than the receive buffer"));
  expect_done(d, CallStatus::kDisconnected);
}

TEST_F(HostileServer, AFloodOfStrayRepliesIsDropped) {
  Done d;
  RawCall rc;
  ASSERT_NO_FATAL_FAILURE(issue_and_take(&d, &rc, false));
  uint64_t bad0 = cli->stats().bad_headers.get();
  constexpr int kFlood = 300;
  for (int i = 0; i < kFlood; ++i) {
    RawCall s = rc;
    s.xid = 0x7f000000u + i;
    ASSERT_TRUE(raw->post_send(reply_msg(s, 0)));
  }
  EXPECT_TRUE(wait([&] { return cli->stats().bad_headers.get() == bad0 + kFlood; }))
      << cli->stats().bad_headers.get() - bad0;
  ASSERT_TRUE(raw->send(reply_msg(rc, 0)));
  expect_done(d, CallStatus::kOk);
  EXPECT_TRUE(conn->ready());
}

TEST_F(HostileServer, AServerThatStopsReceivingStallsOnlyItsConnection) {
  ASSERT_NO_FATAL_FAILURE(new_raw(/*recvs=*/4));
  ASSERT_NO_FATAL_FAILURE(grant(8));
  raw->stop_reposting();
  std::vector<Done> ds(12);
  for (auto& d : ds) issue(&d, false);
  int got = 0;
  while (raw->recv(300)) ++got;
  EXPECT_EQ(got, 4) << "one call per receive it posted; the others wait";
  ASSERT_NO_FATAL_FAILURE(good_calls());
  // Closing it fails what is outstanding, once each.
  raw.reset();
  for (auto& d : ds) expect_done(d, CallStatus::kDisconnected);
}

}  // namespace
}  // namespace tern::rpc
