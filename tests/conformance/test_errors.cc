// Connection loss: graceful disconnect, QP error flushes, and peer death. The
// fork tests also prove that two processes talk through the driver: the child
// (which never runs gtest) is the client, the parent the server.
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

class ErrorTest : public ConnectedTest {};
TERN_CONFORMANCE_SUITE(ErrorTest);

std::vector<RecvWr> recvs(const Buf& b, Sge* sges, uint64_t first_id, int n, size_t each) {
  std::vector<RecvWr> w;
  for (int i = 0; i < n; ++i) {
    sges[i] = b.sge(i * each, each);
    w.push_back(wr_recv(first_id + i, &sges[i], 1));
  }
  return w;
}

TEST_P(ErrorTest, DisconnectFlushesReceivesOnBothSides) {
  Buf cb, sb;
  Sge cs[4], ss[4];
  ASSERT_TRUE(client.alloc(4 * 256, kAccessLocalWrite, &cb));
  ASSERT_TRUE(server.alloc(4 * 256, kAccessLocalWrite, &sb));
  ASSERT_TRUE(client.post_recv(recvs(cb, cs, 10, 4, 256)));
  ASSERT_TRUE(server.post_recv(recvs(sb, ss, 20, 4, 256)));

  Status st = client.dev->disconnect(client.qp.get());
  ASSERT_TRUE(st.is_ok()) << to_string(st);
  std::vector<Wc> c, s;
  ASSERT_TRUE(poller.wait_recv(client, 4, &c));
  EXPECT_TRUE(all_flushed(c, {10, 11, 12, 13})) << "the disconnecting side";
  EXPECT_EQ(client.qp->state(), QpState::kError);

  ASSERT_TRUE(poller.wait_disconnected(server)) << "the peer must see the goodbye";
  ASSERT_TRUE(poller.wait_recv(server, 4, &s));
  EXPECT_TRUE(all_flushed(s, {20, 21, 22, 23})) << "the peer's receives";
  EXPECT_EQ(server.qp->state(), QpState::kError);
  // Like rdma_cm, the side that called disconnect() hears about it too.
  ASSERT_TRUE(poller.wait_disconnected(client))
      << "disconnect() must also be reported on the disconnecting side";
}

TEST_P(ErrorTest, DisconnectFlushesOutstandingSendsInOrder) {
  Buf src, sink, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &sink));
  ASSERT_TRUE(server.alloc(4096, kAccessAll, &dst));
  fill_pattern(src.p, 4096, 90);
  Sge a = src.sge(0, 64), b = src.sge(0, 4096), c = src.sge(0, 8), d = sink.sge(0, 64);
  // The server has no receive posted, so the first SEND waits for one (RNR)
  // and everything behind it waits too: all four are outstanding.
  ASSERT_TRUE(client.post_send({wr_send(1, &a, 1), wr_write(2, &b, 1, dst.addr(), dst.rkey(), false),
                                wr_send(3, &c, 1, false), wr_read(4, &d, 1, dst.addr(), dst.rkey())}));
  poller.settle();
  ASSERT_TRUE(client.send_wcs.empty())
      << "a SEND completed with no receive posted at the peer (it must wait, as RC does with rnr_retry=7): "
      << client.describe();

  ASSERT_TRUE(client.dev->disconnect(client.qp.get()).is_ok());
  std::vector<Wc> s;
  ASSERT_TRUE(poller.wait_send(client, 4, &s));
  EXPECT_TRUE(all_flushed(s, {1, 2, 3, 4})) << "signaled or not, every outstanding WR flushes, in order";
  ASSERT_TRUE(poller.wait_disconnected(server));
  EXPECT_TRUE(check_filled(dst.p, dst.len, 0, "target of a flushed WRITE"));
}

TEST_P(ErrorTest, PostingToAQpInErrorFlushes) {
  ASSERT_TRUE(client.dev->disconnect(client.qp.get()).is_ok());
  ASSERT_TRUE(poller.wait_disconnected(server));
  ASSERT_TRUE(poller.wait_disconnected(client));
  poller.settle();
  client.send_wcs.clear();
  client.recv_wcs.clear();

  Buf b, sb;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &b));
  ASSERT_TRUE(server.alloc(4096, kAccessAll, &sb));
  Sge s1 = b.sge(0, 64), s2 = b.sge(64, 64), r1 = b.sge(1024, 256), r2 = sb.sge(0, 256);
  ASSERT_TRUE(client.post_send({wr_send(1, &s1, 1, false), wr_write(2, &s2, 1, sb.addr(), sb.rkey()),
                                wr_send(3, &s1, 1)}))
      << "posting to a QP in error is accepted, then flushed";
  ASSERT_TRUE(client.post_recv({wr_recv(4, &r1, 1)}));
  ASSERT_TRUE(server.post_recv({wr_recv(5, &r2, 1)}));
  std::vector<Wc> s, r, sr;
  ASSERT_TRUE(poller.wait_send(client, 3, &s));
  EXPECT_TRUE(all_flushed(s, {1, 2, 3}));
  ASSERT_TRUE(poller.wait_recv(client, 1, &r));
  EXPECT_TRUE(all_flushed(r, {4}));
  ASSERT_TRUE(poller.wait_recv(server, 1, &sr));
  EXPECT_TRUE(all_flushed(sr, {5})) << "the peer's QP is in error too";
  EXPECT_TRUE(check_filled(sb.p, 64, 0, "target of a flushed WRITE"));
}

TEST_P(ErrorTest, ServerDisconnectIsSeenByTheClient) {
  Buf cb;
  Sge cs[2];
  ASSERT_TRUE(client.alloc(2 * 256, kAccessLocalWrite, &cb));
  ASSERT_TRUE(client.post_recv(recvs(cb, cs, 10, 2, 256)));
  ASSERT_TRUE(server.dev->disconnect(server.qp.get()).is_ok());
  ASSERT_TRUE(poller.wait_disconnected(client));
  std::vector<Wc> c;
  ASSERT_TRUE(poller.wait_recv(client, 2, &c));
  EXPECT_TRUE(all_flushed(c, {10, 11}));
  EXPECT_EQ(client.qp->state(), QpState::kError);
  EXPECT_EQ(server.qp->state(), QpState::kError);
}

TEST_P(ErrorTest, ReconnectWithNewQpsAfterDisconnect) {
  // The engine's recovery path: after a disconnect, destroy the QPs, make new
  // ones, and connect again to the same listener.
  ASSERT_TRUE(client.dev->disconnect(client.qp.get()).is_ok());
  ASSERT_TRUE(poller.wait_disconnected(server));
  ASSERT_TRUE(poller.wait_disconnected(client));
  client.qp.reset();
  server.qp.reset();
  poller.settle();
  ASSERT_TRUE(client.create_qp(client.default_qp_init(), &client.qp));
  ASSERT_TRUE(server.create_qp(server.default_qp_init(), &server.qp));
  ConnectOptions opt;
  opt.listen = false;
  ASSERT_TRUE(connect_pair(opt));

  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  fill_pattern(src.p, 512, 91);
  Sge r = dst.sge(), s = src.sge(0, 512);
  ASSERT_TRUE(server.post_recv({wr_recv(1, &r, 1)}));
  ASSERT_TRUE(client.post_send({wr_send(2, &s, 1)}));
  Wc rw, sw;
  ASSERT_TRUE(poller.wait_recv1(server, &rw));
  EXPECT_TRUE(wc_is(rw, 1, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_TRUE(check_pattern(dst.p, 512, 91, "data on the new connection"));
  ASSERT_TRUE(poller.wait_send1(client, &sw));
  EXPECT_TRUE(wc_is(sw, 2, WcStatus::kSuccess, WcOpcode::kSend));
}

// ---------------------------------------------------------------- two processes

// The children below are peer processes (see Child): each opens its own
// client Side on `spec` and exits with 0 or the number of the step that failed.

// A fresh client Side on `spec`, connected, with a receive of `recv_len`
// bytes (id 1) posted first if recv_len > 0.
AssertionResult child_connect(const std::string& spec, Side& me, Poller& p, Buf* rbuf, Sge* rsge,
                              size_t recv_len) {
  if (auto r = me.open(spec); !r) return r;
  if (recv_len > 0) {
    if (auto r = me.alloc(recv_len, kAccessLocalWrite, rbuf); !r) return r;
    *rsge = rbuf->sge();
    if (auto r = me.post_recv({wr_recv(1, rsge, 1)}); !r) return r;
  }
  std::vector<uint8_t> pd = {'c', 'h', 'i', 'l', 'd', 0, 0, 1};
  Status s = me.dev->connect(me.qp.get(), pd);
  if (!s.is_ok()) return AssertionFailure() << "connect: " << to_string(s);
  return p.wait_cm(me, CmEventType::kEstablished);
}

constexpr size_t kHalf = 32 << 10;

class ForkTest : public ConformanceTest {
 protected:
  void SetUp() override {
    ConformanceTest::SetUp();
    if (!HasFatalFailure() && caps().driver == "sim")
      GTEST_SKIP() << "pmd/sim is in-process: its peers cannot live in another process";
  }
  // Parent: accept the child's connection request on server.qp.
  AssertionResult accept_child() {
    CmEvent req;
    if (auto r = poller.wait_cm(server, CmEventType::kConnectRequest, &req); !r) return r;
    std::vector<uint8_t> pd = {'p', 'a', 'r', 'e', 'n', 't', 0, 2};
    Status s = server.dev->accept(req.request, server.qp.get(), pd);
    if (!s.is_ok()) return AssertionFailure() << "accept: " << to_string(s);
    return poller.wait_cm(server, CmEventType::kEstablished);
  }

  void expect_child_exit(Child& child, int want) {
    int code = -1;
    ASSERT_TRUE(child.wait_exit(poller, &code));
    EXPECT_EQ(code, want) << "child exit status (its stderr says why)";
  }
};
TERN_CONFORMANCE_SUITE(ForkTest);

TERN_CONFORMANCE_CHILD(child_moves_data) {
  Side me("child");
  Poller p{&me};
  Buf rb, bulk, small, sink;
  Sge rsge;
  TERN_CHILD_CHECK(2, child_connect(spec, me, p, &rb, &rsge, 4096));
  Wc wc;
  TERN_CHILD_CHECK(3, p.wait_recv1(me, &wc));
  TERN_CHILD_CHECK(4, wc_is(wc, 1, WcStatus::kSuccess, WcOpcode::kRecv));
  RemoteBuf where;
  std::memcpy(&where, rb.p, sizeof where);
  TERN_CHILD_CHECK(5, me.alloc(kHalf, kAccessLocalWrite, &bulk));
  TERN_CHILD_CHECK(5, me.alloc(kHalf, kAccessLocalWrite, &sink));
  TERN_CHILD_CHECK(5, me.alloc(1024, kAccessLocalWrite, &small));
  fill_pattern(bulk.p, kHalf, 0xA);
  fill_pattern(small.p, 1024, 0xB);
  Sge a = bulk.sge(), b = sink.sge(), c = small.sge();
  TERN_CHILD_CHECK(6, me.post_send({wr_write(10, &a, 1, where.addr, where.rkey, false),
                                    wr_read(11, &b, 1, where.addr + kHalf, where.rkey, false),
                                    wr_send(12, &c, 1)}));
  TERN_CHILD_CHECK(7, p.wait_send1(me, &wc));
  TERN_CHILD_CHECK(8, wc_is(wc, 12, WcStatus::kSuccess, WcOpcode::kSend));
  TERN_CHILD_CHECK(9, check_pattern(sink.p, kHalf, 0xC, "child: data READ from the parent"));
  Status st = me.dev->disconnect(me.qp.get());
  if (!st.is_ok()) return 10;
  p.settle();
  return 0;
}

TEST_P(ForkTest, TwoProcessesMoveData) {
  Buf target, rbuf, msg;
  ASSERT_TRUE(server.alloc(2 * kHalf, kAccessAll, &target));
  fill_pattern(target.p + kHalf, kHalf, 0xC);  // for the child to READ
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &rbuf));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &msg));
  Sge rs = rbuf.sge();
  ASSERT_TRUE(server.post_recv({wr_recv(1, &rs, 1)}));
  ASSERT_TRUE(server.dev->listen().is_ok());

  Child child("child_moves_data", spec);
  ASSERT_TRUE(child.started());

  ASSERT_TRUE(accept_child());
  RemoteBuf where{target.addr(), target.rkey(), static_cast<uint32_t>(target.len)};
  std::memcpy(msg.p, &where, sizeof where);
  Sge ms = msg.sge(0, sizeof where);
  ASSERT_TRUE(server.post_send({wr_send(1, &ms, 1)}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(server, &wc));
  EXPECT_TRUE(wc_is(wc, 1, WcStatus::kSuccess, WcOpcode::kSend));
  ASSERT_TRUE(poller.wait_recv1(server, &wc));
  ASSERT_TRUE(wc_is(wc, 1, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_EQ(wc.byte_len, 1024u);
  EXPECT_TRUE(check_pattern(rbuf.p, 1024, 0xB, "SEND from the child"));
  EXPECT_TRUE(check_pattern(target.p, kHalf, 0xA, "child's RDMA_WRITE, visible when its later SEND arrived"));
  EXPECT_TRUE(check_pattern(target.p + kHalf, kHalf, 0xC, "memory the child only read"));
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kDisconnected));
  ASSERT_NO_FATAL_FAILURE(expect_child_exit(child, 0));
}

TERN_CONFORMANCE_CHILD(child_exits_mid_stream) {
  Side me("child");
  Poller p{&me};
  Buf unused, src;
  Sge rsge;
  TERN_CHILD_CHECK(2, child_connect(spec, me, p, &unused, &rsge, 0));
  TERN_CHILD_CHECK(3, me.alloc(4096, kAccessLocalWrite, &src));
  Sge a = src.sge(0, 100);
  TERN_CHILD_CHECK(4, me.post_send({wr_send(1, &a, 1), wr_send(2, &a, 1), wr_send(3, &a, 1)}));
  std::vector<Wc> wcs;
  TERN_CHILD_CHECK(5, p.wait_send(me, 3, &wcs));
  for (const Wc& w : wcs)
    if (w.status != WcStatus::kSuccess) return 6;
  // Two more in flight, then die without a goodbye (no destructors run).
  TERN_CHILD_CHECK(7, me.post_send({wr_send(4, &a, 1, false), wr_send(5, &a, 1, false)}));
  _exit(0);
}

TEST_P(ForkTest, PeerExitMidStreamFlushesAndDisconnects) {
  constexpr int kRecvs = 8;
  Buf rbuf;
  Sge rs[kRecvs];
  ASSERT_TRUE(server.alloc(kRecvs * 256, kAccessLocalWrite, &rbuf));
  ASSERT_TRUE(server.post_recv(recvs(rbuf, rs, 0, kRecvs, 256)));
  ASSERT_TRUE(server.dev->listen().is_ok());

  Child child("child_exits_mid_stream", spec);
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(accept_child());

  CmEvent ev;
  ASSERT_TRUE(poller.wait_disconnected(server, nullptr, &ev)) << "the peer process exited";
  EXPECT_FALSE(ev.status.is_ok()) << "kDisconnected should say why";
  std::vector<Wc> r;
  ASSERT_TRUE(poller.wait_recv(server, kRecvs, &r));
  int ok = 0;
  while (ok < kRecvs && r[ok].status == WcStatus::kSuccess) {
    EXPECT_EQ(r[ok].wr_id, static_cast<uint64_t>(ok));
    EXPECT_EQ(r[ok].byte_len, 100u);
    ++ok;
  }
  EXPECT_GE(ok, 3) << "the three SENDs the child saw complete must have been received: " << to_string(r);
  EXPECT_LE(ok, 5) << to_string(r);
  std::vector<uint64_t> rest;
  for (int i = ok; i < kRecvs; ++i) rest.push_back(i);
  EXPECT_TRUE(all_flushed(std::vector<Wc>(r.begin() + ok, r.end()), rest));
  EXPECT_EQ(server.qp->state(), QpState::kError);
  ASSERT_NO_FATAL_FAILURE(expect_child_exit(child, 0));
}

TERN_CONFORMANCE_CHILD(child_polls_until_killed) {
  Side me("child");
  Poller p{&me};
  Buf unused, buf;
  Sge rsge;
  TERN_CHILD_CHECK(2, child_connect(spec, me, p, &unused, &rsge, 0));
  TERN_CHILD_CHECK(3, me.alloc(4096, kAccessLocalWrite, &buf));
  Sge a = buf.sge(0, 10);
  TERN_CHILD_CHECK(4, me.post_send({wr_send(1, &a, 1)}));
  // Keep polling (a live peer) until killed; never more than 30 s.
  p.settle(std::chrono::seconds(30));
  return 5;
}

TEST_P(ForkTest, PeerKilledFlushesAndDisconnects) {
  Buf rbuf, src;
  Sge rs[4];
  ASSERT_TRUE(server.alloc(4 * 256, kAccessLocalWrite, &rbuf));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.post_recv(recvs(rbuf, rs, 0, 4, 256)));
  ASSERT_TRUE(server.dev->listen().is_ok());

  Child child("child_polls_until_killed", spec);
  ASSERT_TRUE(child.started());
  ASSERT_TRUE(accept_child());
  Wc wc;
  ASSERT_TRUE(poller.wait_recv1(server, &wc));
  ASSERT_TRUE(wc_is(wc, 0, WcStatus::kSuccess, WcOpcode::kRecv));
  // The child posts no receives, so these SENDs wait at the peer.
  Sge a = src.sge(0, 16);
  ASSERT_TRUE(server.post_send({wr_send(100, &a, 1), wr_send(101, &a, 1, false)}));
  poller.settle();

  child.kill_now();  // SIGKILL and reap
  ASSERT_TRUE(poller.wait_disconnected(server)) << "the peer process was killed";
  std::vector<Wc> r, sw;
  ASSERT_TRUE(poller.wait_recv(server, 3, &r));
  EXPECT_TRUE(all_flushed(r, {1, 2, 3}));
  ASSERT_TRUE(poller.wait_send(server, 2, &sw));
  // The WR in progress may report the vanished transport; the rest flush.
  EXPECT_TRUE(sw[0].wr_id == 100 &&
              (sw[0].status == WcStatus::kWrFlushErr || sw[0].status == WcStatus::kRetryExcErr))
      << to_string(sw[0]);
  EXPECT_TRUE(all_flushed({sw[1]}, {101}));
  EXPECT_EQ(server.qp->state(), QpState::kError);
  // And a QP in error flushes whatever is posted later.
  Sge late = rbuf.sge(0, 64);
  ASSERT_TRUE(server.post_recv({wr_recv(9, &late, 1)}));
  ASSERT_TRUE(poller.wait_recv(server, 1, &r));
  EXPECT_TRUE(all_flushed(r, {9}));
}

}  // namespace
}  // namespace tern::conformance
