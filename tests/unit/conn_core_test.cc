// A connection driven alone: a ServerConn or a ClientConn over a core of
// the test's own (conn_core.h) and a stub QP that records what the
// connection posts -- no engine, no device, no driver. That a connection can
// be built and run this way is what the narrow core is for. Each test walks
// one call through its machine's transitions (server: received -> in
// handler -> sent -> free; client: queued -> sent -> replied -> done) and
// checks what went on the wire and what came back to the pools.
#include "conn_stubs.h"

namespace tern::rpc {
namespace {

using namespace conn_stubs;
using rdma::Wc;
using rdma::WcStatus;

TEST(ConnCore, ServerConnAnswersOneCallOverAStubCoreAndQp) {
  Harness<ServerConn> h;
  ASSERT_TRUE(h.conn->ready());
  ASSERT_EQ(h.core.srv_calls.out(), 0u);
  const uint8_t args[] = {1, 2, 3, 4, 5, 6, 7, 8};
  h.deliver(0x1234, args);
  EXPECT_EQ(h.handled, 1);
  EXPECT_EQ(h.conn->counters.calls.get(), 1u);
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
