// A raw client (the driver interface, no engine) sends a Tern server hand-made
// malformed RPC-over-RDMA messages. Each gets RFC 8166's answer, or none where
// the RFC says drop, and the server keeps serving valid calls afterwards.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "mem/arena.h"
#include "oncrpc/oncrpc.h"
#include "rdmadev/rdmadev.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace tern::rpc {
namespace {

using namespace tern::rdma;
constexpr uint32_t kProg = 0x20000055, kVers = 1, kEcho = 1;

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }

void put32(std::vector<uint8_t>& v, uint32_t x) {
  uint8_t b[4] = {uint8_t(x >> 24), uint8_t(x >> 16), uint8_t(x >> 8), uint8_t(x)};
  v.insert(v.end(), b, b + 4);
}

struct Raw {
  std::unique_ptr<Engine> srv;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Qp> qp;
  uint8_t* tx = nullptr;
  uint8_t* rx = nullptr;
  std::string path;

  void SetUp() {
    EngineOptions so;
    so.arena_bytes = 96u << 20;
    srv = Engine::create(so).value();
    srv->handle(kProg, kVers, kEcho, echo, nullptr);
    path = "/tmp/tern-hostile-" + std::to_string(getpid()) + ".sock";
    ASSERT_TRUE(srv->listen("shm:path=" + path).is_ok());
    arena = mem::Arena::create({.size = 1u << 20, .huge = mem::HugePages::kNever}).value();
    tx = static_cast<uint8_t*>(arena->carve(4096));
    rx = static_cast<uint8_t*>(arena->carve(16 * 4096));
    dev = open_device("shm:path=" + path).value();
    pd = dev->alloc_pd().value();
    mr = pd->reg_mr(arena->base(), arena->size(), kAccessLocalWrite | kAccessRemoteRead).value();
    scq = dev->create_cq(256).value();
    rcq = dev->create_cq(256).value();
    QpInit qi;
    qi.pd = pd.get(), qi.send_cq = scq.get(), qi.recv_cq = rcq.get();
    qi.sq_depth = 64, qi.rq_depth = 16, qi.max_send_sge = 1, qi.max_recv_sge = 1;
    qp = dev->create_qp(qi).value();
    for (uint32_t i = 0; i < 16; ++i) {
      Sge s{reinterpret_cast<uint64_t>(rx + i * 4096), 4096, mr->lkey()};
      RecvWr r{i, &s, 1};
      int err;
      ASSERT_EQ(qp->post_recv(&r, 1, &err), 1);
    }
    rpcrdma::CmPrivateData pdata;
    uint8_t pb[8];
    size_t n = rpcrdma::encode_cm_private(pdata, pb);
    ASSERT_TRUE(dev->connect(qp.get(), std::span<const uint8_t>(pb, n)).is_ok());
    bool up = false;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    CmEvent ev;
    while (!up && std::chrono::steady_clock::now() < end) {
      srv->poll();
      Wc wc[4];
      scq->poll(wc, 4);
      if (dev->poll_cm(&ev)) up = ev.type == CmEventType::kEstablished;
    }
    ASSERT_TRUE(up);
  }
  ~Raw() {
    qp.reset();
    if (!path.empty()) unlink(path.c_str());
  }

  void send(const std::vector<uint8_t>& m) {
    std::memcpy(tx, m.data(), m.size());
    Sge s{reinterpret_cast<uint64_t>(tx), static_cast<uint32_t>(m.size()), mr->lkey()};
    SendWr w;
    w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend, w.flags = kWrSignaled;
    int err;
    ASSERT_EQ(qp->post_send(&w, 1, &err), 1);
  }
  // The next message the server sends back, or empty after `ms`.
  std::vector<uint8_t> reply(int ms = 300) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      srv->poll();
      Wc wc[4];
      scq->poll(wc, 4);
      int n = rcq->poll(wc, 1);
      if (n == 1) {
        EXPECT_EQ(wc[0].status, WcStatus::kSuccess);
        const uint8_t* b = rx + wc[0].wr_id * 4096;
        std::vector<uint8_t> out(b, b + wc[0].byte_len);
        Sge s{reinterpret_cast<uint64_t>(rx + wc[0].wr_id * 4096), 4096, mr->lkey()};
        RecvWr r{wc[0].wr_id, &s, 1};
        int err;
        qp->post_recv(&r, 1, &err);
        return out;
      }
    }
    return {};
  }
};

std::vector<uint8_t> header(uint32_t xid, uint32_t vers, uint32_t proc) {
  std::vector<uint8_t> v;
  put32(v, xid);
  put32(v, vers);
  put32(v, 8);
  put32(v, proc);
  return v;
}

// A valid inline call of kProg/kVers/kEcho with `args`.
std::vector<uint8_t> valid_call(uint32_t xid, uint32_t rpcvers = 2) {
  std::vector<uint8_t> v = header(xid, 1, 0);
  put32(v, 0), put32(v, 0), put32(v, 0);  // no chunks
  put32(v, xid), put32(v, 0), put32(v, rpcvers), put32(v, kProg), put32(v, kVers), put32(v, kEcho);
  put32(v, 0), put32(v, 0), put32(v, 0), put32(v, 0);  // AUTH_NONE cred and verf
  put32(v, 0xabcdef01);                                // args
  return v;
}

rpcrdma::Header decode(const std::vector<uint8_t>& m, rpcrdma::DecodeResult* r) {
  rpcrdma::Header h;
  *r = rpcrdma::decode_header(m, &h);
  return h;
}

TEST(RpcHostile, MalformedHeadersGetTheRfcAnswers) {
  Raw t;
  t.SetUp();
  if (HasFatalFailure()) return;
  rpcrdma::DecodeResult dr;

  // Version 2: RDMA_ERROR / ERR_VERS with the supported range 1..1.
  auto m = header(11, 2, 0);
  put32(m, 0), put32(m, 0), put32(m, 0);
  t.send(m);
  auto r = t.reply();
  ASSERT_FALSE(r.empty()) << "no answer to a version-2 header";
  auto h = decode(r, &dr);
  ASSERT_EQ(dr.status, rpcrdma::DecodeStatus::kOk);
  EXPECT_EQ(h.xid, 11u);
  EXPECT_EQ(h.proc, rpcrdma::Proc::kError);
  EXPECT_EQ(h.error.code, rpcrdma::ErrCode::kVers);
  EXPECT_EQ(h.error.vers_low, 1u);
  EXPECT_EQ(h.error.vers_high, 1u);

  // RDMA_MSGP (deprecated): ERR_CHUNK.
  m = header(12, 1, 2);
  put32(m, 0), put32(m, 0), put32(m, 0), put32(m, 0), put32(m, 0);
  t.send(m);
  r = t.reply();
  ASSERT_FALSE(r.empty());
  h = decode(r, &dr);
  EXPECT_EQ(h.xid, 12u);
  EXPECT_EQ(h.proc, rpcrdma::Proc::kError);
  EXPECT_EQ(h.error.code, rpcrdma::ErrCode::kChunk);

  // A read list that claims entries past the end of the message: ERR_CHUNK.
  m = header(13, 1, 0);
  put32(m, 1), put32(m, 4);  // one read segment present, then it stops
  t.send(m);
  r = t.reply();
  ASSERT_FALSE(r.empty());
  h = decode(r, &dr);
  EXPECT_EQ(h.xid, 13u);
  EXPECT_EQ(h.error.code, rpcrdma::ErrCode::kChunk);

  // Transport and RPC xids disagree: ERR_CHUNK.
  m = valid_call(14);
  m[28 + 3] ^= 0xff;  // the RPC message's xid
  t.send(m);
  r = t.reply();
  ASSERT_FALSE(r.empty());
  h = decode(r, &dr);
  EXPECT_EQ(h.xid, 14u);
  EXPECT_EQ(h.error.code, rpcrdma::ErrCode::kChunk);

  // Too short to answer, and RDMA_DONE: silence.
  t.send(std::vector<uint8_t>{1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(t.reply(100).empty());
  m = header(15, 1, 3);
  t.send(m);
  EXPECT_TRUE(t.reply(100).empty());

  // ONC RPC version 3: MSG_DENIED / RPC_MISMATCH (2, 2), inside an RDMA_MSG.
  t.send(valid_call(16, 3));
  r = t.reply();
  ASSERT_FALSE(r.empty());
  h = decode(r, &dr);
  ASSERT_EQ(h.proc, rpcrdma::Proc::kMsg);
  oncrpc::ReplyHeader rh;
  auto rr = oncrpc::decode_reply(std::span<const uint8_t>(r).subspan(dr.header_len), &rh);
  ASSERT_EQ(rr.status, oncrpc::ReplyDecodeStatus::kOk);
  EXPECT_EQ(rh.xid, 16u);
  EXPECT_EQ(rh.stat, oncrpc::ReplyStat::kDenied);
  EXPECT_EQ(rh.reject, oncrpc::RejectStat::kRpcMismatch);
  EXPECT_EQ(rh.mismatch_low, 2u);
  EXPECT_EQ(rh.mismatch_high, 2u);

  // After all that, a valid call is still served.
  t.send(valid_call(17));
  r = t.reply();
  ASSERT_FALSE(r.empty());
  h = decode(r, &dr);
  ASSERT_EQ(dr.status, rpcrdma::DecodeStatus::kOk);
  ASSERT_EQ(h.proc, rpcrdma::Proc::kMsg);
  EXPECT_EQ(h.xid, 17u);
  rr = oncrpc::decode_reply(std::span<const uint8_t>(r).subspan(dr.header_len), &rh);
  ASSERT_EQ(rr.status, oncrpc::ReplyDecodeStatus::kOk);
  EXPECT_EQ(rh.accept, oncrpc::AcceptStat::kSuccess);
  ASSERT_EQ(r.size(), dr.header_len + rr.header_len + 4);
  EXPECT_EQ(r[r.size() - 1], 0x01) << "echoed arguments";

  EXPECT_EQ(t.srv->stats().rdma_errors_sent.get(), 4u);
  EXPECT_GE(t.srv->stats().bad_headers.get(), 6u);
  EXPECT_EQ(t.srv->stats().disconnects.get(), 0u) << "bad headers are answered, not fatal";
}

// RDMA_NOMSG: the whole call travels in a position-zero read chunk (what a
// client sends when its call exceeds the inline threshold). The server pulls
// it and answers as for any call.
TEST(RpcHostile, NoMsgCallInAPositionZeroReadChunkIsServed) {
  Raw t;
  t.SetUp();
  if (HasFatalFailure()) return;
  std::vector<uint8_t> full = valid_call(21);
  std::vector<uint8_t> rpc(full.begin() + 28, full.end());  // drop the 28-byte RDMA_MSG header
  auto* call_mem = static_cast<uint8_t*>(t.arena->carve(4096));
  std::memcpy(call_mem, rpc.data(), rpc.size());
  std::vector<uint8_t> m = header(21, 1, 1);  // RDMA_NOMSG
  put32(m, 1);                                // read list: one segment
  put32(m, 0);                                // position zero
  put32(m, t.mr->rkey());
  put32(m, static_cast<uint32_t>(rpc.size()));
  uint64_t addr = reinterpret_cast<uint64_t>(call_mem);
  put32(m, static_cast<uint32_t>(addr >> 32));
  put32(m, static_cast<uint32_t>(addr));
  put32(m, 0);  // end of read list
  put32(m, 0);  // no write list
  put32(m, 0);  // no reply chunk
  t.send(m);
  auto r = t.reply();
  ASSERT_FALSE(r.empty()) << "no reply to an RDMA_NOMSG call";
  rpcrdma::DecodeResult dr;
  auto h = decode(r, &dr);
  ASSERT_EQ(dr.status, rpcrdma::DecodeStatus::kOk);
  ASSERT_EQ(h.proc, rpcrdma::Proc::kMsg);
  EXPECT_EQ(h.xid, 21u);
  oncrpc::ReplyHeader rh;
  auto rr = oncrpc::decode_reply(std::span<const uint8_t>(r).subspan(dr.header_len), &rh);
  ASSERT_EQ(rr.status, oncrpc::ReplyDecodeStatus::kOk);
  EXPECT_EQ(rh.accept, oncrpc::AcceptStat::kSuccess);
  ASSERT_EQ(r.size(), dr.header_len + rr.header_len + 4);
  EXPECT_EQ(r[r.size() - 4], 0xab);
  EXPECT_EQ(t.srv->stats().rdma_reads.get(), 1u);

  // RDMA_NOMSG whose read chunk is not at position zero: ERR_CHUNK.
  m = header(22, 1, 1);
  put32(m, 1), put32(m, 8), put32(m, t.mr->rkey()), put32(m, 16), put32(m, 0), put32(m, 0);
  put32(m, 0), put32(m, 0), put32(m, 0);
  t.send(m);
  r = t.reply();
  ASSERT_FALSE(r.empty());
  h = decode(r, &dr);
  EXPECT_EQ(h.xid, 22u);
  EXPECT_EQ(h.proc, rpcrdma::Proc::kError);
  EXPECT_EQ(h.error.code, rpcrdma::ErrCode::kChunk);
}

}  // namespace
}  // namespace tern::rpc
