// What a test needs to drive one connection alone (conn_core_test.cc,
// conn_machine_test.cc): a core of the test's own (conn_core.h), a stub
// control path, a stub QP that records what the connection posts, a stub
// device whose connection manager answers as the test says, and a harness
// that builds a ClientConn or ServerConn over them -- no engine, no driver.
#pragma once

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

namespace tern::rpc::conn_stubs {

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

// A device whose connection manager answers as the test says: connect()
// succeeds (or fails with connect_status), disconnect() puts the QP in
// error, and the port is up unless the test takes it down. New QPs (a
// reconnect) are StubQps; the last one made is `last`.
class StubDevice final : public rdma::Device {
 public:
  StubDevice() {
    caps_.driver = "stub";
    caps_.max_qp_wr = 1024;
    caps_.max_send_sge = 2;
    caps_.max_recv_sge = 1;
  }
  const rdma::DeviceCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<rdma::Pd>> alloc_pd() override { return make_error(Errc::kUnsupported, "stub"); }
  Result<std::unique_ptr<rdma::Cq>> create_cq(uint32_t) override { return make_error(Errc::kUnsupported, "stub"); }
  Result<std::unique_ptr<rdma::Qp>> create_qp(const rdma::QpInit&) override {
    auto q = std::make_unique<StubQp>();
    last = q.get();
    ++qps_made;
    return std::unique_ptr<rdma::Qp>(std::move(q));
  }
  Status listen() override { return Status::ok(); }
  Status connect(rdma::Qp* qp, std::span<const uint8_t>) override {
    ++connects;
    if (connect_status.is_ok()) static_cast<StubQp*>(qp)->state_now = rdma::QpState::kConnecting;
    return connect_status;
  }
  Status accept(rdma::ConnRequest*, rdma::Qp*, std::span<const uint8_t>) override { return Status::ok(); }
  Status reject(rdma::ConnRequest*, std::span<const uint8_t>) override { return Status::ok(); }
  Status disconnect(rdma::Qp* qp) override {
    ++disconnects;
    if (qp != nullptr) static_cast<StubQp*>(qp)->state_now = rdma::QpState::kError;
    return Status::ok();
  }
  bool poll_cm(rdma::CmEvent*) override { return false; }
  bool port_up() const override { return port; }

  StubQp* last = nullptr;
  int qps_made = 0, connects = 0, disconnects = 0;
  Status connect_status = Status::ok();
  bool port = true;

 private:
  rdma::DeviceCaps caps_;
};

class ArenaMr final : public rdma::Mr {
 public:
  ArenaMr(uint64_t addr, uint64_t len) { addr_ = addr, length_ = len, lkey_ = 0x51, access_ = 0; }
};

inline constexpr uint32_t kProg = 400100, kVers = 1, kProc = 3;

inline EngineOptions small_options() {
  EngineOptions o;
  o.arena_bytes = 4u << 20;  // made once per harness, and some tests make hundreds
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
inline void reverse_handler(void* ctx, ServerCall* call) {
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

  StubDevice* dev = nullptr;

  // established: the connection is up when the harness is made (as the
  // first tests want); otherwise it is left connecting.
  explicit Harness(bool reconnect = true, bool established = true) {
    core.opt.reconnect = reconnect;
    core.control = &control;
    core.ns_per_tick = 1e9 / tick_hz();
    core.now_tick = now_ticks();
    EXPECT_TRUE(core.make_pools().is_ok());
    core.handlers.set(HandlerEntry{kProg, kVers, kProc, reverse_handler, &handled, nullptr,
                                   core.proc_counters(kProg, kVers, kProc, true)});
    dc.spec = "stub";
    auto d = std::make_unique<StubDevice>();
    dev = d.get();
    dc.dev = std::move(d);
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
    if constexpr (std::is_same_v<Conn, ServerConn>) {
      EXPECT_TRUE(rq->grants().admit(&conn->grant, "stub peer"));
    }
    rq->post(&core.engine_stats.recvs_posted, &core.engine_stats.recv_batches);
    if (established) conn->on_established({});
  }
  ~Harness() {
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

struct Done {
  int calls = 0;
  CallStatus status = CallStatus::kDisconnected;
  std::vector<uint8_t> results;
};
inline void on_done(void* ctx, const CallReply& r) {
  auto* d = static_cast<Done*>(ctx);
  ++d->calls;
  d->status = r.status;
  d->results.assign(r.results.begin(), r.results.end());
}
// A call of the stubs' program with no arguments, told to `d`.
inline Call null_call(Done* d) {
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kProc;
  c.done = on_done;
  c.ctx = d;
  return c;
}

// The request of `xid`: in the connection's xid table once sent, else in
// its backlog; nullptr if neither has it.
inline Request* request_of(Harness<ClientConn>& h, uint32_t xid) {
  uint32_t idx = 0;
  if (h.conn->xids.find(xid, &idx)) return h.core.requests.at(idx);
  for (Request* r = h.conn->backlog.front(); r != nullptr; r = h.conn->backlog.next(r))
    if (r->xid == xid) return r;
  return nullptr;
}

// A call sent with nothing registered and a 1 ms timeout, then the clock
// past its deadline: the request abandoned (its caller told) and waiting
// for a late reply. Returns it (nullptr, with a failure, if the call was
// not taken); *xid is its xid.
inline Request* abandoned_call(Harness<ClientConn>& h, Done* d, uint32_t* xid) {
  Call c = null_call(d);
  c.timeout_ns = 1'000'000;
  *xid = 0;
  EXPECT_EQ(h.conn->call(c, xid), 0);
  Request* r = request_of(h, *xid);
  EXPECT_NE(r, nullptr);
  if (r == nullptr) return nullptr;
  h.conn->tick(r->deadline + 1);
  EXPECT_EQ(r->state(), ReqState::kAbandoned);
  EXPECT_EQ(d->status, CallStatus::kTimedOut);
  return r;
}

}  // namespace tern::rpc::conn_stubs
