// A connection driven alone: a ServerConn or a ClientConn over a core of
// the test's own (conn_core.h) and a stub QP that records what the
// connection posts -- no engine, no device, no driver. That a connection can
// be built and run this way is what the narrow core is for. Each test walks
// one call through its machine's transitions (server: received -> in
// handler -> sent -> free; client: queued -> sent -> replied -> done) and
// checks what went on the wire and what came back to the pools.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "base/clock.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/device_ctx.h"
#include "engine/server_conn.h"
#include "engine/wire.h"
#include "engine/wr_id.h"

namespace tern::rpc {
namespace {

using rdma::Wc;
using rdma::WcStatus;

// The control path, answered as a test needs it: nothing here is asked on
// a server connection's datapath.
class StubControl final : public ConnControl {
 public:
  explicit StubControl(ConnCore* core) : core_(core) {}
  Result<std::unique_ptr<PdCtx>> make_pd_ctx(DeviceCtx*) override {
    return make_error(Errc::kUnsupported, "stub: no PDs");
  }
  void dispatch_left(DeviceCtx*, const Wc&) override { ++left; }
  void server_gone(const std::string&, bool, bool) override { ++gone; }
  ProcCounters* add_proc_counters(uint64_t key, uint32_t prog, uint32_t vers, uint32_t proc, bool server) override {
    auto pc = std::make_unique<ProcCounters>();
    pc->prog = prog, pc->vers = vers, pc->proc = proc, pc->server = server;
    ProcCounters* p = pc.get();
    core_->procs.emplace(key, std::move(pc));
    core_->proc_order.push_back(p);
    return p;
  }
  EngineMr* registration_elsewhere(const ConnBase*, const PdCtx*, uint32_t) override { return nullptr; }
  const std::string& telemetry_id() const override { return none_; }
  int left = 0, gone = 0;

 private:
  ConnCore* core_;
  std::string none_;
};

// A QP that takes every WR and remembers it (a Send's bytes copied at post
// time, as a device would read them).
class StubQp final : public rdma::Qp {
 public:
  struct Posted {
    uint64_t wr_id;
    rdma::WrOpcode opcode;
    uint8_t flags;
    std::vector<uint8_t> bytes;
  };
  int post_send(const rdma::SendWr* wrs, int n, int*) override {
    for (int i = 0; i < n; ++i) {
      Posted p{wrs[i].wr_id, wrs[i].opcode, wrs[i].flags, {}};
      for (uint32_t s = 0; s < wrs[i].num_sge; ++s) {
        const auto* a = reinterpret_cast<const uint8_t*>(wrs[i].sg_list[s].addr);
        p.bytes.insert(p.bytes.end(), a, a + wrs[i].sg_list[s].length);
      }
      sends.push_back(std::move(p));
    }
    return n;
  }
  int post_recv(const rdma::RecvWr* wrs, int n, int*) override {
    for (int i = 0; i < n; ++i) recvs.push_back(wrs[i].wr_id);
    return n;
  }
  rdma::QpState state() const override { return state_now; }
  uint32_t qp_num() const override { return 7; }
  const rdma::QpInit& init() const override { return init_; }
  StatsView stats() const override { return {}; }
  std::vector<Posted> sends;
  std::vector<uint64_t> recvs;
  rdma::QpState state_now = rdma::QpState::kRts;

 private:
  rdma::QpInit init_;
};

class ArenaMr final : public rdma::Mr {
 public:
  ArenaMr(uint64_t addr, uint64_t len) { addr_ = addr, length_ = len, lkey_ = 0x51, access_ = 0; }
};

constexpr uint32_t kProg = 400100, kVers = 1, kProc = 3;

EngineOptions small_options() {
  EngineOptions o;
  o.arena_bytes = 8u << 20;
  o.recv_buffers = 32;
  o.send_buffers = 32;
  o.max_bulk = 64u << 10;
  o.max_reply = 16u << 10;
  o.max_long_call = 16u << 10;
  o.bulk_pool_bytes = 1u << 20;
  o.server_rw_timeout_ms = 0;  // no pull/push deadlines: nothing here reads a clock for them
  return o;
}

// The handler answers at once with its arguments reversed.
void reverse_handler(void* ctx, ServerCall* call) {
  ++*static_cast<int*>(ctx);
  std::vector<uint8_t> out(call->args().rbegin(), call->args().rend());
  ASSERT_TRUE(call->reply(out).is_ok());
}

template <typename Conn>
struct Harness {
  ConnCore core{small_options()};
  StubControl control{&core};
  DeviceCtx dc;
  StubQp* qp = nullptr;
  std::unique_ptr<RecvQueue> rq;
  std::unique_ptr<Conn> conn;
  int handled = 0;

  explicit Harness(bool reconnect = true) {
    core.opt.reconnect = reconnect;
    core.control = &control;
    core.ns_per_tick = 1e9 / tick_hz();
    core.now_tick = now_ticks();
    EXPECT_TRUE(core.make_pools().is_ok());
    core.handlers.set(HandlerEntry{kProg, kVers, kProc, reverse_handler, &handled, nullptr,
                                   core.proc_counters(kProg, kVers, kProc, true)});
    dc.spec = "stub";
    dc.shared = std::make_unique<PdCtx>();
    dc.shared->arena_lo = reinterpret_cast<uint64_t>(core.arena->base());
    dc.shared->arena_hi = dc.shared->arena_lo + core.arena->size();
    dc.shared->arena_mr = std::make_unique<ArenaMr>(dc.shared->arena_lo, core.arena->size());
    dc.chunk_reg = ChunkReg::kNone;  // no registrar: inline calls only
    conn = std::make_unique<Conn>(&core, &dc);
    auto q = std::make_unique<StubQp>();
    qp = q.get();
    conn->qp = std::move(q);
    // What ConnBase::setup_queues() makes on a device without an SRQ.
    const EngineOptions& o = core.opt;
    // Every Send signaled (a batch of one), so that each chain's completion
    // can be handed back by the test and its owners released.
    conn->sq_ = std::make_unique<SendQueue>(64, 64, 1);
    const uint16_t qid = core.add_queue(nullptr);
    rq = std::make_unique<RecvQueue>(core.recv_bufs.get(), o.credits + 1, o.credits, nullptr, qp, qid,
                                     dc.shared->arena_lkey());
    core.queues[qid] = rq.get();
    conn->rq = rq.get();
    EXPECT_GE(rq->grow(2), 2u);
    // A server connection's first credit, as accepting it does
    // (EngineImpl::accept_request).
    if constexpr (std::is_same_v<Conn, ServerConn>) EXPECT_TRUE(rq->grants().admit(&conn->grant, "stub peer"));
    rq->post(&core.st.recvs_posted, &core.st.recv_batches);
    conn->on_established({});
  }
  ~Harness() {
    // No device: the connection must not disconnect a QP on its way out.
    conn->life = ConnBase::State::kDead;
    conn.reset();
    rq->release_all();
  }

  // A call arrives in the receive buffer the QP was given first.
  void deliver(uint32_t xid, std::span<const uint8_t> args) {
    Call c;
    c.prog = kProg, c.vers = kVers, c.proc = kProc;
    receive([&](uint8_t* p, size_t cap) { return wire::encode_call(p, cap, xid, 8, ChunkLists{}, c, args); });
  }
  // A plain SUCCESS reply arrives, granting `credits`.
  void deliver_reply(uint32_t xid, uint32_t credits, std::span<const uint8_t> results) {
    receive([&](uint8_t* p, size_t cap) {
      const size_t h = wire::encode_reply_header(p, cap, xid, credits, ChunkLists{}, false);
      return h + wire::encode_rpc_reply(p + h, cap - h, xid, 0, 0, 0, results);
    });
  }
  template <typename Fill>
  void receive(Fill fill) {
    ASSERT_FALSE(qp->recvs.empty());
    const uint64_t wr_id = qp->recvs.front();
    qp->recvs.erase(qp->recvs.begin());
    MsgBuf* buf = core.recv_bufs->at(wr_id_value(wr_id));
    ASSERT_NE(buf, nullptr);
    const size_t len = fill(buf->data, core.opt.inline_recv);
    ASSERT_GT(len, 0u);
    rq->completed(buf);
    Wc wc{};
    wc.wr_id = wr_id;
    wc.byte_len = static_cast<uint32_t>(len);
    wc.qp_num = qp->qp_num();
    wc.status = WcStatus::kSuccess;
    wc.opcode = rdma::WcOpcode::kRecv;
    conn->on_receive(buf, wc);
  }
};

TEST(ConnCore, ServerConnAnswersOneCallOverAStubCoreAndQp) {
  Harness<ServerConn> h;
  ASSERT_TRUE(h.conn->ready());
  ASSERT_EQ(h.core.srv_calls.out(), 0u);
  const uint8_t args[] = {1, 2, 3, 4, 5, 6, 7, 8};
  h.deliver(0x1234, args);
  EXPECT_EQ(h.handled, 1);
  EXPECT_EQ(h.conn->cs.calls.get(), 1u);
  // The reply went out as one Send: RDMA_MSG, our xid, the results.
  ASSERT_EQ(h.qp->sends.size(), 1u);
  const StubQp::Posted& s = h.qp->sends[0];
  EXPECT_EQ(s.opcode, rdma::WrOpcode::kSend);
  wire::Reply r;
  ASSERT_TRUE(wire::decode_reply_header(s.bytes, &r));
  EXPECT_EQ(r.xid, 0x1234u);
  EXPECT_EQ(r.kind, wire::Reply::Kind::kMsg);
  std::span<const uint8_t> results;
  ASSERT_EQ(wire::decode_rpc_reply(r.body, r.xid, &results), CallStatus::kOk);
  const std::vector<uint8_t> want = {8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_EQ(std::vector<uint8_t>(results.begin(), results.end()), want);
  // The call (and its send buffer) is held until the Send is known done.
  EXPECT_EQ(h.core.srv_calls.out(), 1u);
  const StubQp::Posted& last = h.qp->sends.back();
  ASSERT_TRUE(last.flags & rdma::kWrSignaled);
  Wc wc{};
  wc.wr_id = last.wr_id;
  wc.qp_num = h.qp->qp_num();
  wc.status = WcStatus::kSuccess;
  wc.opcode = rdma::WcOpcode::kSend;
  h.conn->on_send_completion(wc);
  EXPECT_EQ(h.core.srv_calls.out(), 0u) << "every server call back in its pool";
  EXPECT_EQ(h.core.send_bufs->out(), 0u) << "every send buffer back in its pool";
  // The receive buffers went back to the connection's queue, to be posted.
  EXPECT_EQ(h.rq->pending() + h.rq->posted(), h.rq->owned());
  EXPECT_EQ(h.control.left, 0);
}

struct Done {
  int calls = 0;
  CallStatus status = CallStatus::kDisconnected;
  std::vector<uint8_t> results;
};
void on_done(void* ctx, const CallReply& r) {
  auto* d = static_cast<Done*>(ctx);
  ++d->calls;
  d->status = r.status;
  d->results.assign(r.results.begin(), r.results.end());
}

TEST(ConnCore, ClientConnMakesOneCallOverAStubCoreAndQp) {
  Harness<ClientConn> h;
  ASSERT_TRUE(h.conn->ready());
  Done done;
  const uint8_t args[] = {9, 8, 7, 6};
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kProc;
  c.args = args;
  c.done = on_done;
  c.ctx = &done;
  uint32_t xid = 0;
  ASSERT_EQ(h.conn->call(c, &xid), 0);
  EXPECT_EQ(h.core.requests.out(), 1u);
  // The call went out as one Send: RDMA_MSG around the ONC RPC call.
  ASSERT_EQ(h.qp->sends.size(), 1u);
  const StubQp::Posted& s = h.qp->sends[0];
  EXPECT_EQ(s.opcode, rdma::WrOpcode::kSend);
  wire::Incoming in;
  ChunkLists ch;
  wire::decode_call_header(s.bytes, &in, &ch);
  ASSERT_EQ(in.verdict, wire::Incoming::Verdict::kOk);
  EXPECT_EQ(in.xid, xid);
  wire::RpcCall rc;
  ASSERT_TRUE(wire::decode_rpc_call(in.body, in.xid, &rc));
  EXPECT_EQ(rc.prog, kProg);
  EXPECT_EQ(rc.proc, kProc);
  EXPECT_EQ(done.calls, 0);
  // Its reply completes it once, with the results; the request (and its
  // send buffer) goes back when its Send is known complete as well.
  const uint8_t results[] = {1, 1, 2, 3, 5, 8, 13, 21};
  h.deliver_reply(xid, 4, results);
  ASSERT_TRUE(s.flags & rdma::kWrSignaled);
  Wc wc{};
  wc.wr_id = s.wr_id;
  wc.qp_num = h.qp->qp_num();
  wc.status = WcStatus::kSuccess;
  wc.opcode = rdma::WcOpcode::kSend;
  h.conn->on_send_completion(wc);
  EXPECT_EQ(done.calls, 1);
  EXPECT_EQ(done.status, CallStatus::kOk);
  EXPECT_EQ(done.results, std::vector<uint8_t>(std::begin(results), std::end(results)));
  EXPECT_EQ(h.core.requests.out(), 0u) << "the request back in its pool";
  EXPECT_EQ(h.core.send_bufs->out(), 0u) << "its send buffer back in its pool";
  EXPECT_EQ(h.rq->pending() + h.rq->posted(), h.rq->owned());
}

// The QP goes to error with a call in flight: its Send flushes, the
// connection drains (markers after everything it posted, as ib_drain_qp
// does) and, once drained, completes the call once with kDisconnected and
// gives everything back. The engine's part -- seeing the markers' flush
// completions -- is the test's.
TEST(ConnCore, ClientConnFailsItsCallOnceWhenTheQpFlushes) {
  Harness<ClientConn> h(/*reconnect=*/false);
  Done done;
  const uint8_t args[] = {4, 2};
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kProc;
  c.args = args;
  c.done = on_done;
  c.ctx = &done;
  uint32_t xid = 0;
  ASSERT_EQ(h.conn->call(c, &xid), 0);
  ASSERT_EQ(h.qp->sends.size(), 1u);
  h.qp->state_now = rdma::QpState::kError;
  Wc wc{};
  wc.wr_id = h.qp->sends[0].wr_id;
  wc.qp_num = h.qp->qp_num();
  wc.status = WcStatus::kWrFlushErr;
  wc.opcode = rdma::WcOpcode::kSend;
  h.conn->on_send_completion(wc);
  EXPECT_TRUE(h.conn->failed());
  EXPECT_TRUE(h.core.cm_due) << "the engine is asked to read the driver's reason in this poll()";
  EXPECT_EQ(done.calls, 0) << "nothing completes before the QP is drained";
  // The drain markers went after the Send: one Send-side, one receive.
  ASSERT_EQ(h.qp->sends.size(), 2u);
  EXPECT_EQ(wr_id_kind(h.qp->sends[1].wr_id), WrKind::kDrain);
  bool more = false;
  EXPECT_EQ(h.conn->step_drain(&more), 0);
  EXPECT_TRUE(more) << "not drained before the markers' completions";
  // Their flush completions (the engine's dispatch marks them).
  h.conn->sq_drained = h.conn->rq_drained = true;
  more = false;
  EXPECT_EQ(h.conn->step_drain(&more), 1);
  EXPECT_EQ(done.calls, 1);
  EXPECT_EQ(done.status, CallStatus::kDisconnected);
  EXPECT_EQ(h.core.requests.out(), 0u);
  EXPECT_EQ(h.core.send_bufs->out(), 0u);
  EXPECT_EQ(h.conn->state(), ConnState::kFailed);
}

}  // namespace
}  // namespace tern::rpc
