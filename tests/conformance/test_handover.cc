// Handing a connection request to another device of the same driver in the
// process (Device::detach / adopt: what lets several engines serve one
// address, engine.h's ListenGroup). The device that listens detaches the
// request; a second device opened with the same spec adopts and accepts
// it; the connection then carries data between the client and the adopter,
// and the listener sees nothing of it. A detached request destroyed
// unadopted refuses the client; one of another driver is not adopted.
// Drivers without handover skip, saying so.
#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

class HandoverTest : public ConformanceTest {};
TERN_CONFORMANCE_SUITE(HandoverTest);

TEST_P(HandoverTest, AnAdoptedRequestIsAcceptedAndCarriesData) {
  Side adopter("adopter");
  ASSERT_TRUE(adopter.open(spec));
  poller.add(&adopter);
  ASSERT_TRUE(server.dev->listen().is_ok());
  const std::vector<uint8_t> cpriv = {'h', 'a', 'n', 'd', 'o', 'v', 'e', 'r'};
  ASSERT_TRUE(client.dev->connect(client.qp.get(), cpriv).is_ok());
  CmEvent req;
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kConnectRequest, &req));
  auto detached = server.dev->detach(req.request);
  if (!detached && detached.status().code() == Errc::kUnsupported) {
    (void)server.dev->reject(req.request, {});
    GTEST_SKIP() << caps().driver << " cannot hand connection requests over: " << to_string(detached.status());
  }
  ASSERT_TRUE(detached.is_ok()) << to_string(detached.status());
  // Gone from the listener: it can neither accept nor reject it now.
  EXPECT_EQ(server.dev->reject(req.request, {}).code(), Errc::kInvalidArgument);
  auto adopted = adopter.dev->adopt(std::move(*detached));
  ASSERT_TRUE(adopted.is_ok()) << to_string(adopted.status());
  EXPECT_EQ((*adopted)->private_data(), cpriv);
  const std::vector<uint8_t> spriv = {'a', 'd', 'o', 'p', 't', 'e', 'r'};
  ASSERT_TRUE(adopter.dev->accept(*adopted, adopter.qp.get(), spriv).is_ok());
  CmEvent est;
  ASSERT_TRUE(poller.wait_cm(client, CmEventType::kEstablished, &est));
  EXPECT_EQ(est.private_data, spriv);
  ASSERT_TRUE(poller.wait_cm(adopter, CmEventType::kEstablished));

  // Both ways over the adopter's QP.
  Buf a, c;
  ASSERT_TRUE(adopter.alloc(4096, kAccessLocalWrite, &a));
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &c));
  Sge ar = a.sge(0, 2048), cr = c.sge(0, 2048);
  ASSERT_TRUE(adopter.post_recv({wr_recv(1, &ar, 1)}));
  ASSERT_TRUE(client.post_recv({wr_recv(2, &cr, 1)}));
  fill_pattern(c.p + 2048, 300, 21);
  fill_pattern(a.p + 2048, 400, 22);
  Sge cs = c.sge(2048, 300), as = a.sge(2048, 400);
  ASSERT_TRUE(client.post_send({wr_send(3, &cs, 1)}));
  ASSERT_TRUE(adopter.post_send({wr_send(4, &as, 1)}));
  Wc w;
  ASSERT_TRUE(poller.wait_recv1(adopter, &w));
  EXPECT_TRUE(wc_is(w, 1, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_EQ(w.byte_len, 300u);
  EXPECT_TRUE(check_pattern(a.p, 300, 21, "at the adopter"));
  ASSERT_TRUE(poller.wait_recv1(client, &w));
  EXPECT_TRUE(wc_is(w, 2, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_TRUE(check_pattern(c.p, 400, 22, "at the client"));
  poller.settle();
  EXPECT_TRUE(server.cm_events.empty()) << "the listener saw events of a connection it handed over:"
                                        << poller.describe();
}

TEST_P(HandoverTest, ADetachedRequestDestroyedUnadoptedRefusesTheClient) {
  ASSERT_TRUE(server.dev->listen().is_ok());
  ASSERT_TRUE(client.dev->connect(client.qp.get(), {}).is_ok());
  CmEvent req;
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kConnectRequest, &req));
  {
    auto detached = server.dev->detach(req.request);
    if (!detached && detached.status().code() == Errc::kUnsupported) {
      (void)server.dev->reject(req.request, {});
      GTEST_SKIP() << caps().driver << " cannot hand connection requests over";
    }
    ASSERT_TRUE(detached.is_ok()) << to_string(detached.status());
  }  // destroyed here, on no device
  ASSERT_TRUE(poller.wait_until([&] {
    for (const CmEvent& e : client.cm_events)
      if (e.type == CmEventType::kRejected || e.type == CmEventType::kUnreachable) return true;
    return false;
  }, "the client refused"));
  client.cm_events.clear();
  // The listener still accepts the next one.
  ASSERT_TRUE(connect_fresh_client_qp());
}

TEST_P(HandoverTest, ARequestOfAnotherDriverIsNotAdopted) {
  struct Foreign : ConnRequest {};
  auto r = server.dev->adopt(std::make_unique<Foreign>());
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(r.status().code() == Errc::kInvalidArgument || r.status().code() == Errc::kUnsupported)
      << to_string(r.status());
}

}  // namespace
}  // namespace tern::conformance
