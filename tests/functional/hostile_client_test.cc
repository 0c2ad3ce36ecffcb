// A hostile client against a Tern server: a raw peer (tests/functional/
// raw_peer.h: the driver interface, no engine) sends hand-made RPC-over-RDMA
// messages and RDMA operations. For every case the server gives RFC 8166's
// answer, or drops that connection only with one warning naming the peer and
// the reason; a second, well-behaved client on the same server engine keeps
// passing its data checks before and after; and server memory nobody was
// offered is untouched.
//
// Over pmd/shm by default; TERN_RPC_DEVICE names another device (the VM
// stage runs the rkey cases on rxe). Cases that need pmd/shm's socket
// protocol or its MR numbering say so and skip elsewhere.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "mem/memfd.h"
#include "chunk_handlers.h"
#include "raw_peer.h"
#include "test_arena.h"
#include "rpcrdma/cm_private.h"
#include "shm/shm_internal.h"

namespace tern::rpc {
namespace {

using namespace tern::rdma;
using namespace tern::test;
namespace rr = tern::rpcrdma;

constexpr uint32_t kProg = 0x20000055, kVers = 1;
constexpr uint32_t kEcho = 1;  // results = args, bulk results = the read chunk
constexpr uint32_t kFill = 2;  // args: u32 n -> n bytes of 0xA5 into the write chunk
constexpr uint32_t kSum = 3;   // results: u32 sum of the read chunk's bytes
constexpr uint8_t kSecret = 0x5A;

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 13 + i * 7 + (i >> 9)); }



class HostileClient : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }

  void start(EngineOptions so) {
    so.arena_bytes = kTestArenaBytes;
    // Every server connection holds (credits + slack) x max_bulk today; keep
    // that small so that the cases that reconnect fit the arena.
    so.max_bulk = 256u << 10;
    srv = Engine::create(so).value();
    srv->handle(kProg, kVers, kEcho, echo_handler, nullptr);
    srv->handle(kProg, kVers, kFill, fill_handler, nullptr);
    srv->handle(kProg, kVers, kSum, sum_handler, nullptr);
    spec = fresh_spec("hostile-client");
    ASSERT_TRUE(srv->listen(spec).is_ok());
    // Server memory no peer was ever offered: it must never change.
    secret = static_cast<uint8_t*>(srv->alloc(kSecretLen));
    std::memset(secret, kSecret, kSecretLen);

    good = Engine::create({.arena_bytes = kTestArenaBytes}).value();
    good_conn = good->connect(spec).value();
    ASSERT_TRUE(wait([&] { return good_conn->ready() || good_conn->failed(); }));
    ASSERT_TRUE(good_conn->ready()) << good_conn->error().to_string();
    good_in = static_cast<uint8_t*>(good->alloc(64 * 1024));
    good_out = static_cast<uint8_t*>(good->alloc(64 * 1024));
    ASSERT_NO_FATAL_FAILURE(good_calls());

    raw = std::make_unique<RawPeer>([this] { pump(); });
    ASSERT_TRUE(raw->open(spec).is_ok());
    Status st = raw->connect(rr::CmPrivateData{true, 4096, 4096});
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    log.clear();
  }

  void TearDown() override {
    if (!srv) return;
    // The well-behaved connection is unharmed, and so is server memory.
    if (!HasFatalFailure()) {
      ASSERT_NO_FATAL_FAILURE(good_calls());
      EXPECT_TRUE(good_conn->ready());
    }
    for (size_t i = 0; i < kSecretLen; ++i) ASSERT_EQ(secret[i], kSecret) << "server memory changed at " << i;
    raw.reset();
    good.reset();
    srv.reset();
    remove_spec(spec);
  }

  void pump() {
    srv->poll();
    good->poll();
  }
  bool wait(const std::function<bool()>& pred, int ms = 3000) { return poll_until([this] { pump(); }, pred, ms); }

  // Three calls on the well-behaved connection: a read chunk pulled and
  // summed, a write chunk filled, an inline echo, all checked.
  void good_calls() {
    for (int k = 0; k < 3; ++k, ++rounds) {
      for (int i = 0; i < 64 * 1024; ++i) good_in[i] = pat(rounds, i);
      uint32_t want = 0;
      for (int i = 0; i < 64 * 1024; ++i) want += good_in[i];
      Done d1, d2;
      Call c{kProg, kVers, kSum};
      c.bulk_send = std::span<const uint8_t>(good_in, 64 * 1024);
      c.done = on_done, c.ctx = &d1;
      ASSERT_EQ(good_conn->call(c), 0);
      uint32_t n = 64 * 1024;
      std::memset(good_out, 0, n);
      Call f{kProg, kVers, kFill};
      f.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
      f.bulk_recv = std::span<uint8_t>(good_out, n);
      f.done = on_done, f.ctx = &d2;
      ASSERT_EQ(good_conn->call(f), 0);
      ASSERT_TRUE(wait([&] { return d1.done && d2.done; })) << "the well-behaved client's calls hang";
      ASSERT_EQ(d1.r.status, CallStatus::kOk) << call_status_name(d1.r.status);
      ASSERT_EQ(d1.results.size(), 4u);
      uint32_t got;
      std::memcpy(&got, d1.results.data(), 4);
      ASSERT_EQ(got, want) << "the server pulled the wrong bytes";
      ASSERT_EQ(d2.r.status, CallStatus::kOk) << call_status_name(d2.r.status);
      ASSERT_EQ(d2.r.bulk_recv_len, n);
      for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(good_out[i], 0xA5) << i;
    }
    EXPECT_TRUE(wait([&] { return good->stats().rkeys_live.get() == 0; }, 1000))
        << good->stats().rkeys_live.get() << " rkeys still live at idle";
  }

  // The server dropped the raw peer's connection: its QP goes to error, the
  // server counts one protocol error and says so once, naming the peer and
  // `why` (or `why2`: who notices first, the device or the engine, depends
  // on the driver and on whether receives come from a shared queue).
  void expect_dropped(std::string_view why, std::string_view why2 = {}) {
    // On rxe in the VM the peer sometimes learns of the drop only ~5 s late
    // (seen intermittently on SendWithInvalidateToTheServer..., before and
    // after the port-flap work; the kernel CM's DREQ retransmission comes
    // after ~4.8 s there, so a first DREQ that goes missing would explain
    // it -- not proven). The server's side is checked at once below.
    EXPECT_TRUE(raw->wait([&] { return raw->in_error() || raw->disconnected(); }, on_shm() ? 3000 : 10000))
        << "the server kept a connection whose peer broke the protocol";
    EXPECT_TRUE(wait([&] { return srv->stats().protocol_errors.get() == 1; }, 1000))
        << "protocol_errors " << srv->stats().protocol_errors.get();
    auto w = log.warnings({raw->id()});
    EXPECT_EQ(w.size(), 1u) << "want one warning naming " << raw->id() << "; got:\n" << log.dump();
    if (!w.empty()) {
      EXPECT_TRUE(w[0].find(why) != std::string::npos || (!why2.empty() && w[0].find(why2) != std::string::npos))
          << w[0];
    }
    if (on_shm()) {
      EXPECT_EQ(log.warnings({raw->id(), "pid " + std::to_string(getpid())}).size(), 1u) << log.dump();
    }
  }

  // A call from the raw peer: RDMA_MSG with `chunks`, then the RPC call.
  std::vector<uint8_t> call_msg(uint32_t xid, uint32_t proc, const rr::ChunkLists& chunks,
                                std::span<const uint8_t> args = {}, uint32_t credit = 8) {
    rr::Header h = plain_header(xid, credit);
    h.chunks = chunks;
    auto body = rpc_call(xid, kProg, kVers, proc, args);
    return rdma_msg(h, body);
  }
  rr::ChunkLists read_chunk(uint32_t pos, uint32_t rkey, uint32_t len, uint64_t addr) {
    rr::ChunkLists c;
    c.clear();
    c.nreads = 1;
    c.reads[0] = rr::ReadSegment{pos, rr::Segment{rkey, len, addr}};
    return c;
  }
  rr::ChunkLists write_chunk(uint32_t rkey, uint32_t len, uint64_t addr) {
    rr::ChunkLists c;
    c.clear();
    c.nwrites = 1;
    c.writes[0].nsegments = 1;
    c.writes[0].segments[0] = rr::Segment{rkey, len, addr};
    return c;
  }
  // The raw peer's next message, decoded.
  bool reply(rr::Header* h, std::vector<uint8_t>* bytes = nullptr, int ms = 1000) {
    auto m = raw->recv(ms);
    if (!m) return false;
    rr::DecodeResult d = rr::decode_header(m->bytes, h);
    EXPECT_EQ(d.status, rr::DecodeStatus::kOk);
    if (bytes) *bytes = m->bytes;
    return true;
  }

  static constexpr size_t kSecretLen = 256 * 1024;
  LogCapture log;
  std::unique_ptr<Engine> srv, good;
  Connection* good_conn = nullptr;
  std::unique_ptr<RawPeer> raw;
  std::string spec;
  uint8_t* secret = nullptr;
  uint8_t* good_in = nullptr;
  uint8_t* good_out = nullptr;
  int rounds = 0;
};

// ---------------------------------------------------------------- header errors: RFC 8166's answers

TEST_F(HostileClient, MalformedHeadersGetTheRfcAnswers) {
  rr::Header h;
  // Version 2: RDMA_ERROR / ERR_VERS with the supported range 1..1.
  {
    std::vector<uint8_t> m;
    put32(m, 11), put32(m, 2), put32(m, 8), put32(m, 0), put32(m, 0), put32(m, 0), put32(m, 0);
    ASSERT_TRUE(raw->send(m));
    ASSERT_TRUE(reply(&h)) << "no answer to a version-2 header";
    EXPECT_EQ(h.xid, 11u);
    EXPECT_EQ(h.proc, rr::Proc::kError);
    EXPECT_EQ(h.error.code, rr::ErrCode::kVers);
    EXPECT_EQ(h.error.vers_low, 1u);
    EXPECT_EQ(h.error.vers_high, 1u);
  }
  // RDMA_MSGP (deprecated): ERR_CHUNK.
  {
    std::vector<uint8_t> m;
    put32(m, 12), put32(m, 1), put32(m, 8), put32(m, 2);
    for (int i = 0; i < 5; ++i) put32(m, 0);
    ASSERT_TRUE(raw->send(m));
    ASSERT_TRUE(reply(&h));
    EXPECT_EQ(h.xid, 12u);
    EXPECT_EQ(h.proc, rr::Proc::kError);
    EXPECT_EQ(h.error.code, rr::ErrCode::kChunk);
  }
  // A read list that claims entries past the end of the message: ERR_CHUNK.
  {
    std::vector<uint8_t> m;
    put32(m, 13), put32(m, 1), put32(m, 8), put32(m, 0), put32(m, 1), put32(m, 4);
    ASSERT_TRUE(raw->send(m));
    ASSERT_TRUE(reply(&h));
    EXPECT_EQ(h.xid, 13u);
    EXPECT_EQ(h.error.code, rr::ErrCode::kChunk);
  }
  // Transport and RPC xids disagree: ERR_CHUNK.
  {
    rr::Header ch = plain_header(14, 8);
    auto m = rdma_msg(ch, rpc_call(99, kProg, kVers, kEcho));
    ASSERT_TRUE(raw->send(m));
    ASSERT_TRUE(reply(&h));
    EXPECT_EQ(h.xid, 14u);
    EXPECT_EQ(h.error.code, rr::ErrCode::kChunk);
  }
  // Too short to answer, and RDMA_DONE: silence.
  {
    ASSERT_TRUE(raw->send(std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
    EXPECT_FALSE(raw->recv(100));
    std::vector<uint8_t> m;
    put32(m, 15), put32(m, 1), put32(m, 8), put32(m, 3);
    ASSERT_TRUE(raw->send(m));
    EXPECT_FALSE(raw->recv(100));
  }
  // ONC RPC version 3: MSG_DENIED / RPC_MISMATCH (2, 2), inside an RDMA_MSG.
  {
    auto body = rpc_call(16, kProg, kVers, kEcho);
    body[11] = 3;  // rpcvers
    auto m = rdma_msg(plain_header(16, 8), body);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(raw->send(m));
    ASSERT_TRUE(reply(&h, &bytes));
    ASSERT_EQ(h.proc, rr::Proc::kMsg);
    oncrpc::ReplyHeader rh;
    auto rr2 = oncrpc::decode_reply(std::span<const uint8_t>(bytes).subspan(rr::encoded_size(h)), &rh);
    ASSERT_EQ(rr2.status, oncrpc::ReplyDecodeStatus::kOk);
    EXPECT_EQ(rh.xid, 16u);
    EXPECT_EQ(rh.stat, oncrpc::ReplyStat::kDenied);
    EXPECT_EQ(rh.reject, oncrpc::RejectStat::kRpcMismatch);
  }
  // A segment that wraps the address space: ERR_CHUNK, not a READ.
  {
    uint32_t rkey = raw->offer(raw->buf(4096), 4096, kAccessRemoteRead);
    auto body_len = static_cast<uint32_t>(rpc_call(17, kProg, kVers, kSum).size());
    ASSERT_TRUE(raw->send(call_msg(17, kSum, read_chunk(body_len, rkey, 8192, ~uint64_t{0} - 4095))));
    ASSERT_TRUE(reply(&h));
    EXPECT_EQ(h.xid, 17u);
    EXPECT_EQ(h.proc, rr::Proc::kError);
    EXPECT_EQ(h.error.code, rr::ErrCode::kChunk);
  }
  // After all that, a valid call is still served.
  {
    uint8_t args[4] = {0xab, 0xcd, 0xef, 0x01};
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(raw->send(call_msg(18, kEcho, rr::ChunkLists{}, args)));
    ASSERT_TRUE(reply(&h, &bytes));
    ASSERT_EQ(h.proc, rr::Proc::kMsg);
    EXPECT_EQ(h.xid, 18u);
    ASSERT_GE(bytes.size(), 4u);
    EXPECT_EQ(bytes[bytes.size() - 4], 0xab) << "echoed arguments";
  }
  EXPECT_EQ(srv->stats().rdma_errors_sent.get(), 5u);
  EXPECT_EQ(srv->stats().disconnects.get(), 0u) << "bad headers are answered, not fatal";
  EXPECT_EQ(srv->stats().protocol_errors.get(), 0u);
}

// RDMA_NOMSG: the whole call travels in a position-zero read chunk (what a
// client sends when its call exceeds the inline threshold). The server pulls
// it and answers as for any call.
TEST_F(HostileClient, NoMsgCallInAPositionZeroReadChunkIsServed) {
  uint8_t args[4] = {0xab, 0, 0, 0};
  auto call = rpc_call(21, kProg, kVers, kEcho, args);
  uint8_t* mem = raw->buf(4096);
  std::memcpy(mem, call.data(), call.size());
  uint32_t rkey = raw->offer(mem, 4096, kAccessRemoteRead);
  ASSERT_NE(rkey, 0u);
  rr::Header h = plain_header(21, 8, rr::Proc::kNoMsg);
  h.chunks = read_chunk(0, rkey, static_cast<uint32_t>(call.size()), reinterpret_cast<uint64_t>(mem));
  ASSERT_TRUE(raw->send(rdma_msg(h)));
  rr::Header got;
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(reply(&got, &bytes)) << "no reply to an RDMA_NOMSG call";
  ASSERT_EQ(got.proc, rr::Proc::kMsg);
  EXPECT_EQ(got.xid, 21u);
  EXPECT_EQ(bytes[bytes.size() - 4], 0xab);

  // RDMA_NOMSG whose read chunk is not at position zero: ERR_CHUNK.
  h = plain_header(22, 8, rr::Proc::kNoMsg);
  h.chunks = read_chunk(8, rkey, 16, reinterpret_cast<uint64_t>(mem));
  ASSERT_TRUE(raw->send(rdma_msg(h)));
  ASSERT_TRUE(reply(&got));
  EXPECT_EQ(got.xid, 22u);
  EXPECT_EQ(got.proc, rr::Proc::kError);
  EXPECT_EQ(got.error.code, rr::ErrCode::kChunk);
}

// ---------------------------------------------------------------- chunks that lie

TEST_F(HostileClient, ReadChunkLongerThanWhatWasOfferedDropsTheConnection) {
  if (!raw->caps().fast_reg_bounds_enforced)
    GTEST_SKIP() << raw->caps().name << " checks window accesses against the MR under them (docs/security.md)";
  uint8_t* mem = raw->buf(64 * 1024);
  uint32_t rkey = raw->offer(mem, 4096, kAccessRemoteRead);  // 4 KiB offered...
  auto body_len = static_cast<uint32_t>(rpc_call(31, kProg, kVers, kSum).size());
  // ...64 KiB claimed.
  ASSERT_TRUE(raw->send(call_msg(31, kSum, read_chunk(body_len, rkey, 64 * 1024, reinterpret_cast<uint64_t>(mem)))));
  expect_dropped("RDMA READ of its read chunk failed");
}

TEST_F(HostileClient, ReadChunkWithAnUnknownRkeyDropsTheConnection) {
  uint8_t* mem = raw->buf(4096);
  auto body_len = static_cast<uint32_t>(rpc_call(32, kProg, kVers, kSum).size());
  ASSERT_TRUE(raw->send(call_msg(32, kSum, read_chunk(body_len, 0x00abcd42, 4096, reinterpret_cast<uint64_t>(mem)))));
  expect_dropped("RDMA READ of its read chunk failed");
}

TEST_F(HostileClient, WriteChunkWithAnUnknownRkeyDropsTheConnection) {
  uint32_t n = 4096;
  uint8_t* mem = raw->buf(4096);
  ASSERT_TRUE(raw->send(call_msg(33, kFill, write_chunk(0x00abcd42, 4096, reinterpret_cast<uint64_t>(mem)),
                                 std::span(reinterpret_cast<const uint8_t*>(&n), 4))));
  expect_dropped("RDMA_WRITE failed");
}

TEST_F(HostileClient, WriteChunkOfferedReadOnlyDropsTheConnection) {
  uint32_t n = 4096;
  uint8_t* mem = raw->buf(4096);
  std::memset(mem, 0, 4096);
  uint32_t rkey = raw->offer(mem, 4096, kAccessRemoteRead);  // not writable
  ASSERT_TRUE(raw->send(call_msg(34, kFill, write_chunk(rkey, 4096, reinterpret_cast<uint64_t>(mem)),
                                 std::span(reinterpret_cast<const uint8_t*>(&n), 4))));
  expect_dropped("RDMA_WRITE failed");
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(mem[i], 0) << "written through a read-only registration";
}

TEST_F(HostileClient, ReadChunkOverMaxBulkGetsErrChunk) {
  uint8_t* mem = raw->buf(4096);
  uint32_t rkey = raw->offer(mem, 4096, kAccessRemoteRead);
  auto body_len = static_cast<uint32_t>(rpc_call(35, kProg, kVers, kSum).size());
  rr::ChunkLists c = read_chunk(body_len, rkey, 0x80000000u, reinterpret_cast<uint64_t>(mem));
  c.nreads = 2;
  c.reads[1] = c.reads[0];  // 2 x 2 GiB
  ASSERT_TRUE(raw->send(call_msg(35, kSum, c)));
  rr::Header h;
  ASSERT_TRUE(reply(&h));
  EXPECT_EQ(h.xid, 35u);
  EXPECT_EQ(h.proc, rr::Proc::kError);
  EXPECT_EQ(h.error.code, rr::ErrCode::kChunk);
  EXPECT_EQ(srv->stats().protocol_errors.get(), 0u);
}

TEST_F(HostileClient, OverlappingReadSegmentsAreServed) {
  uint8_t* mem = raw->buf(4096);
  for (int i = 0; i < 4096; ++i) mem[i] = 1;
  uint32_t rkey = raw->offer(mem, 4096, kAccessRemoteRead);
  auto body_len = static_cast<uint32_t>(rpc_call(36, kProg, kVers, kSum).size());
  rr::ChunkLists c = read_chunk(body_len, rkey, 4096, reinterpret_cast<uint64_t>(mem));
  c.nreads = 3;
  c.reads[1] = c.reads[0];
  c.reads[2] = rr::ReadSegment{body_len, rr::Segment{rkey, 100, reinterpret_cast<uint64_t>(mem) + 10}};
  ASSERT_TRUE(raw->send(call_msg(36, kSum, c)));
  rr::Header h;
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(reply(&h, &bytes));
  ASSERT_EQ(h.proc, rr::Proc::kMsg);
  uint32_t s;
  std::memcpy(&s, bytes.data() + bytes.size() - 4, 4);
  EXPECT_EQ(s, 2 * 4096u + 100u) << "the same bytes, pulled as often as the client named them";
}

// ---------------------------------------------------------------- credits, xids, floods

TEST_F(HostileClient, CreditRequestsOfZeroAndAllOnesGetTheServersGrant) {
  uint8_t args[4] = {1, 2, 3, 4};
  for (uint32_t credit : {0u, 0xffffffffu}) {
    ASSERT_TRUE(raw->send(call_msg(40 + credit % 7, kEcho, rr::ChunkLists{}, args, credit)));
    rr::Header h;
    ASSERT_TRUE(reply(&h));
    ASSERT_EQ(h.proc, rr::Proc::kMsg);
    EXPECT_GE(h.credit, 1u);
    EXPECT_LE(h.credit, EngineOptions{}.credits);
  }
}

TEST_F(HostileClient, DuplicateXidsAreEachAnswered) {
  uint8_t args[4] = {9, 9, 9, 9};
  auto m = call_msg(50, kEcho, rr::ChunkLists{}, args);
  ASSERT_TRUE(raw->send(m));
  ASSERT_TRUE(raw->send(m));
  rr::Header a, b;
  ASSERT_TRUE(reply(&a));
  ASSERT_TRUE(reply(&b));
  EXPECT_EQ(a.xid, 50u);
  EXPECT_EQ(b.xid, 50u);
}

// More calls than credits, without waiting: the server serves them as its
// receives allow (the rest wait in the sender's queue, as RC's receiver-not-
// ready does), all are answered, and no other client notices.
TEST_F(HostileClient, AFloodOfCallsIsServedWithinCredits) {
  uint8_t args[4] = {7, 7, 7, 7};
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(raw->post_send(call_msg(1000 + i, kEcho, rr::ChunkLists{}, args)));
  std::vector<int> seen(kCalls, 0);
  int answers = 0;
  while (auto m = raw->recv(2000)) {
    rr::Header h;
    ASSERT_EQ(rr::decode_header(m->bytes, &h).status, rr::DecodeStatus::kOk);
    ASSERT_GE(h.xid, 1000u);
    ASSERT_LT(h.xid, 1000u + kCalls);
    ++seen[h.xid - 1000];
    if (++answers == kCalls) break;
  }
  EXPECT_EQ(answers, kCalls);
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(seen[i], 1) << "call " << i << " answered " << seen[i] << " times";
  EXPECT_EQ(srv->stats().protocol_errors.get(), 0u);
}

// Calls beyond the grant while earlier ones are still being served: the
// client is using receive buffers promised to other connections (they come
// from one shared queue), so it is dropped with a warning, and the calls it
// had within its grant are not answered on the dead connection.
TEST_F(HostileClient, CallsOverTheGrantDropTheConnection) {
  std::vector<ServerCall*> held;
  constexpr uint32_t kHold = 77;
  srv->handle(kProg, kVers, kHold, [](void* ctx, ServerCall* c) { static_cast<std::vector<ServerCall*>*>(ctx)->push_back(c); },
              &held);
  uint8_t args[4] = {1, 1, 1, 1};
  // A fresh connection has one credit (RFC 8166): the second call is over it.
  ASSERT_TRUE(raw->post_send(call_msg(3000, kHold, rr::ChunkLists{}, args, 1)));
  ASSERT_TRUE(wait([&] { return held.size() == 1; }));
  // The next may find the connection already gone.
  for (uint32_t i = 1; i < 3; ++i) (void)raw->post_send(call_msg(3000 + i, kHold, rr::ChunkLists{}, args, 1));
  expect_dropped("over its grant");
  EXPECT_EQ(held.size(), 1u) << "a call over the grant reached its handler";
  for (ServerCall* c : held) EXPECT_FALSE(c->reply({}).is_ok()) << "a reply on the dropped connection";
}

// A client that stops taking replies: the server's replies wait for its
// receives; other clients are served as before (TearDown checks).
TEST_F(HostileClient, APeerThatStopsReceivingStallsOnlyItself) {
  raw->stop_reposting();
  uint8_t args[4] = {3, 3, 3, 3};
  for (uint32_t i = 0; i < RawPeer::kRecvs + 20; ++i)
    ASSERT_TRUE(raw->post_send(call_msg(2000 + i, kEcho, rr::ChunkLists{}, args)));
  int answers = 0;
  while (raw->recv(300)) ++answers;
  EXPECT_EQ(answers, static_cast<int>(RawPeer::kRecvs)) << "one reply per receive it posted";
  ASSERT_NO_FATAL_FAILURE(good_calls());
}

TEST_F(HostileClient, ASendLargerThanTheReceiveBufferDropsTheConnection) {
  std::vector<uint8_t> big(EngineOptions{}.inline_recv + 1024, 0);
  auto m = call_msg(60, kEcho, rr::ChunkLists{});
  std::copy(m.begin(), m.end(), big.begin());
  (void)raw->send(big);
  // The engine's receive fails (its own receive queue, or rxe's shared one),
  // or pmd/shm refuses the SEND before taking a receive of its shared queue.
  expect_dropped("a receive failed", "larger than the receive buffer");
}

// The server has no fast registrations; a Send With Invalidate from a
// client names nothing it may invalidate.
TEST_F(HostileClient, SendWithInvalidateToTheServerDropsTheConnection) {
  uint8_t args[4] = {};
  (void)raw->send(call_msg(61, kEcho, rr::ChunkLists{}, args), /*inv_rkey=*/0x00000101);
  // pmd/shm refuses the invalidation (the receive fails, or with a shared
  // queue the SEND is refused before it takes one); a device that names no
  // error there (rxe) delivers it, and the engine refuses it.
  expect_dropped(on_shm() ? "a receive failed" : "Send With Invalidate", "SEND_WITH_INV names no valid fast MR");
}

// ---------------------------------------------------------------- server memory

// On pmd/shm an rkey is (MR table index << 8 | key byte), so a peer can
// guess the server's long-lived registrations: the arena is MR 1. With
// remote rights on them (the old engine) these READs and WRITEs reached all
// of its memory; now each is refused with a remote access error.
TEST_F(HostileClient, LongLivedRegistrationsAreNotReachableWhateverKeyIsNamed) {
  if (!on_shm()) GTEST_SKIP() << "guesses pmd/shm's key numbering";
  auto target = reinterpret_cast<uint64_t>(secret);
  uint8_t junk[64];
  std::memset(junk, 0xEE, sizeof junk);
  int tries = 0;
  for (uint32_t index = 1; index <= 4; ++index) {
    for (uint8_t key = 0; key < 2; ++key) {
      uint32_t rkey = make_rkey(index, key);
      for (bool is_write : {false, true}) {
        if (tries++ > 0) {
          // Each refusal costs the raw peer its connection: connect again.
          raw = std::make_unique<RawPeer>([this] { pump(); });
          ASSERT_TRUE(raw->open(spec).is_ok());
          ASSERT_TRUE(raw->connect(rr::CmPrivateData{true, 4096, 4096}).is_ok()) << log.dump();
        }
        uint8_t got[64];
        WcStatus st = is_write ? raw->write(junk, sizeof junk, rkey, target) : raw->read(got, sizeof got, rkey, target);
        EXPECT_EQ(st, WcStatus::kRemAccessErr)
            << (is_write ? "WRITE" : "READ") << " with rkey 0x" << std::hex << rkey << ": " << wc_status_name(st);
      }
    }
  }
  EXPECT_EQ(srv->stats().rkeys_live.get(), 0u) << "a server offers nothing";
}

// ---------------------------------------------------------------- pmd/shm's socket protocol

// A client of pmd/shm written by hand against its socket protocol, to send
// what the driver never would: silence, unsealed memfds, a segment twice.
struct ShmHandClient {
  int sock = -1;
  int area = -1;
  ~ShmHandClient() {
    if (sock >= 0) close(sock);
    if (area >= 0) close(area);
  }
  bool connect_only(const std::string& spec) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::string path = spec.substr(std::string("shm:path=").size());
    std::memcpy(sa.sun_path, path.data(), path.size());
    sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    return ::connect(sock, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  }
  static int memfd(size_t len, bool sealed) {
    if (sealed) return mem::create_sealed_memfd("hand", len, false).value();
    int fd = memfd_create("hand-unsealed", MFD_CLOEXEC);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(len)), 0);
    return fd;
  }
  // The driver's own message framing; what goes in the messages is ours.
  bool send(const shm::ShmMsg& m, int fd) { return shm::send_msg(sock, m, fd) == 0; }
  static shm::ShmMsg msg(uint16_t type) { return shm::make_msg(static_cast<shm::ShmMsgType>(type)); }
  // Says hello with a fresh area (sealed or not); true if the server accepted.
  bool hello(const std::string& spec, bool sealed_area, const std::function<void()>& pump) {
    if (!connect_only(spec)) return false;
    uint32_t slots = 64;
    size_t len = shm::area_size(slots);
    area = memfd(len, sealed_area);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, area, 0);
    auto* hdr = static_cast<shm::ShmAreaHeader*>(p);
    hdr->magic = shm::kAreaMagic, hdr->version = shm::kLayoutVersion, hdr->header_size = sizeof *hdr;
    hdr->ring_slots = slots, hdr->slot_size = sizeof(shm::ShmDesc), hdr->area_size = len;
    // Our endpoint (the client's, [0]) says active, as a real client's does.
    auto* state = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(p) + shm::kEndpointOffset);
    __atomic_store_n(state, uint32_t{shm::kEpActive}, __ATOMIC_RELEASE);
    munmap(p, len);
    auto m = msg(shm::kMsgHello);
    m.qp_num = 4242, m.ring_slots = slots, m.area_size = len;
    uint8_t pb[8];
    m.pdata_len = static_cast<uint32_t>(rpcrdma::encode_cm_private({}, pb));
    std::memcpy(m.pdata, pb, m.pdata_len);
    if (!send(m, area)) return false;
    // Wait for ACCEPT (or the socket closing).
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < end) {
      pump();
      shm::ShmMsg r{};
      ssize_t n = recv(sock, &r, sizeof r, MSG_DONTWAIT);
      if (n == sizeof r) return r.type == shm::kMsgAccept;
      if (n == 0) return false;
    }
    return false;
  }
  // The server closed (or broke) our socket.
  bool closed_by_server() {
    char c;
    ssize_t n = recv(sock, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
};

class HostileShmClient : public HostileClient {
 protected:
  void SetUp() override {
    if (!on_shm()) GTEST_SKIP() << "pmd/shm's socket protocol";
    HostileClient::SetUp();
  }
  // The server dropped the hand client: one warning naming "qp 4242".
  void expect_hand_dropped(ShmHandClient& h, std::string_view why) {
    EXPECT_TRUE(wait([&] { return h.closed_by_server() || srv->stats().protocol_errors.get() > 0 ||
                                  !log.warnings({"qp 4242"}).empty(); }));
    auto w = log.warnings({"qp 4242"});
    EXPECT_EQ(w.size(), 1u) << log.dump();
    if (!w.empty()) {
      EXPECT_NE(w[0].find(why), std::string::npos) << w[0];
    }
  }
};

TEST_F(HostileShmClient, AnUnsealedConnectionAreaIsRefused) {
  ShmHandClient h;
  EXPECT_FALSE(h.hello(spec, /*sealed_area=*/false, [this] { pump(); }));
  auto w = log.warnings({"pid " + std::to_string(getpid())});
  ASSERT_EQ(w.size(), 1u) << log.dump();
  EXPECT_NE(w[0].find("not sealed"), std::string::npos) << w[0];
}

TEST_F(HostileShmClient, AnUnsealedSegmentIsRefusedSoItCannotBeTruncatedUnderUs) {
  ShmHandClient h;
  ASSERT_TRUE(h.hello(spec, true, [this] { pump(); })) << log.dump();
  int seg = ShmHandClient::memfd(1 << 20, /*sealed=*/false);
  auto m = ShmHandClient::msg(shm::kMsgSegment);
  m.seg_index = 0, m.seg_length = 1 << 20;
  ASSERT_TRUE(h.send(m, seg));
  expect_hand_dropped(h, "not sealed");
  // What it would have done next: shrink the file under the server's mapping.
  EXPECT_EQ(ftruncate(seg, 0), 0) << "an unsealed memfd can be truncated: that is why it is refused";
  close(seg);
}

TEST_F(HostileShmClient, ASegmentSmallerThanAnnouncedIsRefused) {
  ShmHandClient h;
  ASSERT_TRUE(h.hello(spec, true, [this] { pump(); })) << log.dump();
  int seg = ShmHandClient::memfd(4096, /*sealed=*/true);
  auto m = ShmHandClient::msg(shm::kMsgSegment);
  m.seg_index = 0, m.seg_length = 1 << 20;
  ASSERT_TRUE(h.send(m, seg));
  expect_hand_dropped(h, "announced");
  close(seg);
}

TEST_F(HostileShmClient, ASegmentSentTwiceIsAProtocolError) {
  ShmHandClient h;
  ASSERT_TRUE(h.hello(spec, true, [this] { pump(); })) << log.dump();
  int seg = ShmHandClient::memfd(1 << 20, true);
  auto m = ShmHandClient::msg(shm::kMsgSegment);
  m.seg_index = 3, m.seg_length = 1 << 20;
  ASSERT_TRUE(h.send(m, seg));
  ASSERT_TRUE(h.send(m, seg));  // the same index again: a remap
  expect_hand_dropped(h, "sent again");
  close(seg);
}

TEST_F(HostileShmClient, OurOwnMemfdsCannotBeTruncated) {
  // What every peer relies on: the arena's memfd refuses to shrink or grow.
  auto a = mem::Arena::create({.size = 1 << 20, .huge = mem::HugePages::kNever}).value();
  EXPECT_NE(ftruncate(a->fd(), 0), 0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(a->fd(), 2 << 20), 0);
  EXPECT_TRUE(mem::check_peer_memfd(a->fd(), a->size()).is_ok());
}

// Sockets that connect and say nothing are dropped after the hello timeout
// (default 1 s), and no more than max_pending wait at once.
TEST(HostileShmSockets, SilentSocketsAreDroppedAndCapped) {
  if (!on_shm()) GTEST_SKIP() << "pmd/shm's socket protocol";
  LogCapture log;
  auto srv = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  // 1 s (the default): the six connects below must all land before the
  // first times out, or fewer than two are refused; 200 ms was not enough
  // on a loaded 2-core machine.
  std::string spec = fresh_spec("silent") + ",hello_timeout_ms=1000,max_pending=4";
  ASSERT_TRUE(srv->listen(spec).is_ok());
  std::string path_spec = spec.substr(0, spec.find(','));
  std::vector<std::unique_ptr<ShmHandClient>> silent;
  for (int i = 0; i < 6; ++i) {
    silent.push_back(std::make_unique<ShmHandClient>());
    ASSERT_TRUE(silent.back()->connect_only(path_spec));
    for (int k = 0; k < 20; ++k) srv->poll();
  }
  auto wait_ms = [&](int ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) srv->poll();
  };
  // The two over max_pending=4 are refused at once. On a loaded machine the
  // other four may time out before this look, so this
  // only checks that the refusals came first; the split -- two refused, four
  // timed out -- is checked by the log below, whatever the scheduling.
  wait_ms(20);
  int closed_early = 0;
  for (auto& s : silent) closed_early += s->closed_by_server();
  EXPECT_GE(closed_early, 2) << "two over max_pending=4 are refused at once";
  // The rest once hello_timeout_ms passed (looked for until then; 5 s is
  // the guard).
  int closed = 0;
  auto all_closed = [&] {
    closed = 0;
    for (auto& s : silent) closed += s->closed_by_server();
    return closed == 6;
  };
  auto guard = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!all_closed() && std::chrono::steady_clock::now() < guard) wait_ms(10);
  EXPECT_EQ(closed, 6) << "the rest are dropped once hello_timeout_ms passed";
  EXPECT_EQ(log.warnings({"no hello within 1000 ms"}).size(), 4u) << log.dump();
  // Said once for the two refused, not once per socket: a flood of
  // connect()s must not flood the log.
  EXPECT_EQ(log.warnings({"already wait for their hello"}).size(), 1u) << log.dump();
  // A client that does say hello is still served.
  auto cli = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  Connection* c = cli->connect(path_spec).value();
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!c->ready() && !c->failed() && std::chrono::steady_clock::now() < end) {
    srv->poll();
    cli->poll();
  }
  EXPECT_TRUE(c->ready());
  // ... and counted when connections are taken again.
  EXPECT_EQ(log.lines({"taking connections again; 2 refused"}, LogLevel::kInfo).size(), 1u) << log.dump();
  remove_spec(path_spec);
}

}  // namespace
}  // namespace tern::rpc
