// Connection management: listen / connect / accept / reject, private data.
#include <cerrno>
#include <cstring>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

class ConnectionTest : public ConformanceTest {};
TERN_CONFORMANCE_SUITE(ConnectionTest);

std::vector<uint8_t> bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

TEST_P(ConnectionTest, ConnectAcceptExchangesPrivateData) {
  ConnectOptions opt;
  opt.client_private = bytes(8, 1);
  opt.server_private = bytes(8, 2);
  ASSERT_TRUE(connect_pair(opt));  // checks both directions and both kEstablished
  poller.settle();
  EXPECT_TRUE(server.cm_events.empty() && client.cm_events.empty())
      << "unexpected CM events after connecting:" << poller.describe();
}

TEST_P(ConnectionTest, PrivateDataUpToTheDeviceLimit) {
  size_t n = std::min<size_t>(caps().max_private_data, 4096);
  ConnectOptions opt;
  opt.client_private = bytes(n, 3);
  opt.server_private = bytes(n, 4);
  ASSERT_TRUE(connect_pair(opt));
}

TEST_P(ConnectionTest, EmptyPrivateData) {
  ConnectOptions opt;
  opt.client_private.clear();
  opt.server_private.clear();
  ASSERT_TRUE(connect_pair(opt));
}

TEST_P(ConnectionTest, RejectDeliversTheServersPrivateData) {
  ASSERT_TRUE(server.dev->listen().is_ok());
  std::vector<uint8_t> mine = bytes(8, 5), reason = {'g', 'o', ' ', 'a', 'w', 'a', 'y', '!'};
  Status s = client.dev->connect(client.qp.get(), mine);
  ASSERT_TRUE(s.is_ok()) << to_string(s);
  CmEvent req;
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kConnectRequest, &req));
  ASSERT_NE(req.request, nullptr);
  EXPECT_EQ(req.request->private_data(), mine);
  s = server.dev->reject(req.request, reason);
  ASSERT_TRUE(s.is_ok()) << to_string(s);
  CmEvent ev;
  ASSERT_TRUE(poller.wait_cm(client, CmEventType::kRejected, &ev));
  EXPECT_EQ(ev.private_data, reason) << "kRejected must carry the server's reason";
  EXPECT_NE(client.qp->state(), QpState::kRts);
  poller.settle();
  EXPECT_TRUE(server.cm_events.empty()) << "a rejected request produced server events:" << poller.describe();
}

TEST_P(ConnectionTest, ListenerAcceptsAfterARejection) {
  ASSERT_TRUE(server.dev->listen().is_ok());
  ASSERT_TRUE(client.dev->connect(client.qp.get(), bytes(8, 6)).is_ok());
  CmEvent req;
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kConnectRequest, &req));
  ASSERT_TRUE(server.dev->reject(req.request, bytes(8, 7)).is_ok());
  ASSERT_TRUE(poller.wait_cm(client, CmEventType::kRejected));

  // A rejected QP is finished; a fresh one connects to the same listener.
  ASSERT_TRUE(connect_fresh_client_qp());
}

TEST_P(ConnectionTest, ConnectToAnAddressNobodyListensOnIsUnreachable) {
  // server never listens.
  ASSERT_TRUE(client.dev->connect(client.qp.get(), bytes(8, 8)).is_ok())
      << "connect() only starts connecting; the outcome comes from poll_cm";
  CmEvent ev;
  ASSERT_TRUE(poller.wait_cm(client, CmEventType::kUnreachable, &ev));
  EXPECT_FALSE(ev.status.is_ok()) << "kUnreachable should say why";
  EXPECT_NE(client.qp->state(), QpState::kRts);
  EXPECT_TRUE(server.cm_events.empty()) << poller.describe();
}

TEST_P(ConnectionTest, PostSendWhileConnectingIsNotConnected) {
  Buf cb, sb;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &cb));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &sb));
  fill_pattern(cb.p, 64, 9);
  Sge rsge = sb.sge(0, 4096);
  ASSERT_TRUE(server.post_recv({wr_recv(7, &rsge, 1)}));

  ASSERT_TRUE(server.dev->listen().is_ok());
  ASSERT_TRUE(client.dev->connect(client.qp.get(), bytes(8, 10)).is_ok());
  CmEvent req;
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kConnectRequest, &req));
  EXPECT_EQ(client.qp->state(), QpState::kConnecting);
  Sge sge = cb.sge(0, 64);
  SendWr w = wr_send(1, &sge, 1);
  int err = 0;
  EXPECT_EQ(client.qp->post_send(&w, 1, &err), 0) << "post_send on a connecting QP";
  EXPECT_EQ(err, ENOTCONN) << std::strerror(err);

  ASSERT_TRUE(server.dev->accept(req.request, server.qp.get(), bytes(8, 11)).is_ok());
  ASSERT_TRUE(poller.wait_cm(client, CmEventType::kEstablished));
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kEstablished));
  // Now it goes through, to the receive posted before the connection existed.
  ASSERT_TRUE(client.post_send({w}));
  Wc s, r;
  ASSERT_TRUE(poller.wait_send1(client, &s));
  EXPECT_TRUE(wc_is(s, 1, WcStatus::kSuccess, WcOpcode::kSend));
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  EXPECT_TRUE(wc_is(r, 7, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_EQ(r.byte_len, 64u);
  EXPECT_TRUE(check_pattern(sb.p, 64, 9, "received data"));
}

TEST_P(ConnectionTest, TwoClientsOnOneListener) {
  Side client2("client2");
  ASSERT_TRUE(client2.open(spec));
  poller.add(&client2);
  std::unique_ptr<Qp> sqp2;
  ASSERT_TRUE(server.create_qp(server.default_qp_init(), &sqp2));
  Qp* server_qp2 = sqp2.get();
  server.extra_qps.push_back(std::move(sqp2));

  ConnectOptions o1;
  o1.client_private = bytes(8, 12);
  ASSERT_TRUE(establish(poller, server, client, o1));
  ConnectOptions o2;
  o2.listen = false;
  o2.client_private = bytes(8, 13);
  o2.server_qp = server_qp2;
  ASSERT_TRUE(establish(poller, server, client2, o2));
  ASSERT_NE(server.qp->qp_num(), server_qp2->qp_num());

  // Both QPs share the server's recv CQ; Wc::qp_num tells them apart.
  Buf rb, b1, b2;
  ASSERT_TRUE(server.alloc(8192, kAccessLocalWrite, &rb));
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &b1));
  ASSERT_TRUE(client2.alloc(4096, kAccessLocalWrite, &b2));
  Sge r1 = rb.sge(0, 4096), r2 = rb.sge(4096, 4096);
  ASSERT_TRUE(server.post_recv({wr_recv(1, &r1, 1)}));
  RecvWr rw2 = wr_recv(2, &r2, 1);
  int err = 0;
  ASSERT_EQ(server_qp2->post_recv(&rw2, 1, &err), 1) << err;
  fill_pattern(b1.p, 100, 14);
  fill_pattern(b2.p, 200, 15);
  Sge s1 = b1.sge(0, 100), s2 = b2.sge(0, 200);
  ASSERT_TRUE(client.post_send({wr_send(1, &s1, 1)}));
  ASSERT_TRUE(client2.post_send({wr_send(2, &s2, 1)}));
  std::vector<Wc> got;
  ASSERT_TRUE(poller.wait_recv(server, 2, &got));
  for (const Wc& wc : got) {
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << to_string(wc);
    if (wc.wr_id == 1) {
      EXPECT_EQ(wc.qp_num, server.qp->qp_num()) << to_string(wc);
      EXPECT_EQ(wc.byte_len, 100u);
      EXPECT_TRUE(check_pattern(rb.p, 100, 14, "from client 1"));
    } else {
      EXPECT_EQ(wc.wr_id, 2u);
      EXPECT_EQ(wc.qp_num, server_qp2->qp_num()) << to_string(wc);
      EXPECT_EQ(wc.byte_len, 200u);
      EXPECT_TRUE(check_pattern(rb.p + 4096, 200, 15, "from client 2"));
    }
  }
  Wc c1, c2;
  ASSERT_TRUE(poller.wait_send1(client, &c1));
  ASSERT_TRUE(poller.wait_send1(client2, &c2));
  EXPECT_TRUE(wc_is(c1, 1, WcStatus::kSuccess, WcOpcode::kSend));
  EXPECT_TRUE(wc_is(c2, 2, WcStatus::kSuccess, WcOpcode::kSend));
}

}  // namespace
}  // namespace tern::conformance
