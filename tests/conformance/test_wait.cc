// Wait mode (rdmadev.h: Cq::arm, Device::wait_fd / arm_wait / ack_wait): a
// host that armed its device and sleeps on wait_fd() is woken by everything
// it would have found by polling -- the peer's SEND, the completion of its
// own WRs, a connection request, a disconnect, a dead peer -- and by nothing
// else; and a completion that came before the arm is found by the second
// look the protocol prescribes, never slept through.
//
// The side under test is never polled between its arm and its wake-up: only
// the peer is (in this thread), so the wake can only come from the driver.
#include <poll.h>

#include <cstring>
#include <functional>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// Whether fd becomes readable within `limit`, running `meanwhile` (the
// peer's progress) between short sleeps on it.
bool becomes_readable(int fd, Duration limit, const std::function<void()>& meanwhile = {}) {
  auto end = SteadyClock::now() + limit;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1) == 1 && (p.revents & POLLIN) != 0) return true;
    if (SteadyClock::now() > end) return false;
    if (meanwhile) meanwhile();
  }
}

class WaitTest : public ConnectedTest {
 protected:
  void SetUp() override {
    ConnectedTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (client.dev->wait_fd() < 0 || server.dev->wait_fd() < 0)
      GTEST_SKIP() << "driver " << caps().driver << " has no wait mode";
  }
  // The protocol's step 2 for one side: both CQs, then the device.
  static AssertionResult arm(Side& s) {
    for (Cq* cq : {s.send_cq.get(), s.recv_cq.get()})
      if (Status st = cq->arm(); !st.is_ok()) return AssertionFailure() << s.name << " Cq::arm: " << to_string(st);
    if (Status st = s.dev->arm_wait(); !st.is_ok())
      return AssertionFailure() << s.name << " arm_wait: " << to_string(st);
    return AssertionSuccess();
  }
  // Steps 3-5 for `s`, with `peer` making progress while s sleeps: the
  // second look, else a wake-up and a poll. Succeeds when s has stashed a
  // completion or event by either way; *woken says which.
  AssertionResult second_look_or_wake(Side& s, Side& peer, bool* woken) {
    *woken = false;
    if (s.poll_once() > 0) {
      s.dev->ack_wait();
      return AssertionSuccess();
    }
    if (!becomes_readable(s.dev->wait_fd(), kWait, [&] { peer.poll_once(); }))
      return AssertionFailure() << s.name << " slept through it: wait fd not readable within 5 s; "
                                << s.describe() << "; peer: " << peer.describe();
    *woken = true;
    s.dev->ack_wait();
    return AssertionSuccess();
  }
};
TERN_CONFORMANCE_SUITE(WaitTest);

TEST_P(WaitTest, PeerSendWakesAnArmedReceiverAndNothingElseDoes) {
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  fill_pattern(src.p, 512, 7);
  Sge rs = dst.sge(0, 4096), ss = src.sge(0, 512);
  // A first SEND, unarmed: whatever a driver does once per connection or
  // buffer (pmd/shm passes the segment's memfd on the socket) is done, so
  // that only the SEND itself can wake the server below.
  ASSERT_TRUE(server.post_recv({wr_recv(0x50, &rs, 1)}));
  ASSERT_TRUE(client.post_send({wr_send(0x50, &ss, 1)}));
  Wc r, s;
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  ASSERT_TRUE(poller.wait_send1(client, &s));
  server.dev->ack_wait();  // a device that never slept: a no-op
  ASSERT_TRUE(server.post_recv({wr_recv(0x51, &rs, 1)}));

  const int fd = server.dev->wait_fd();
  ASSERT_TRUE(arm(server));
  EXPECT_EQ(server.poll_once(), 0) << "nothing was sent yet";
  // Idle and armed: nothing makes the fd readable (a hung socket, an event
  // left unread, a timer would wake a sleeping host for nothing).
  EXPECT_FALSE(becomes_readable(fd, kQuiet)) << "an idle armed device woke its host";

  ASSERT_TRUE(client.post_send({wr_send(0x52, &ss, 1)}));
  ASSERT_TRUE(becomes_readable(fd, kWait, [&] { client.poll_once(); }))
      << "the client's SEND did not wake the armed server; " << server.describe();
  server.dev->ack_wait();
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  EXPECT_TRUE(wc_is(r, 0x51, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_TRUE(check_pattern(dst.p, 512, 7, "received"));
  ASSERT_TRUE(poller.wait_send1(client, &s));
  // ack_wait consumed the wake-up: the next sleep is not cut short by it.
  EXPECT_FALSE(readable_now(fd)) << "the wait fd stayed readable after ack_wait";
}

// The second look polls the CQs, then the connection events. A peer that
// publishes between the two and wakes us must still wake us, even though
// reading connection events is what reads pmd/shm's WAKE message: a host
// whose second look found nothing would otherwise sleep through the SEND
// (the lost wake-up seen as a 3 s stall in wait_mode_test under TSan).
TEST_P(WaitTest, AWakeReadWithConnectionEventsStillEndsTheSleep) {
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  Sge rs = dst.sge(0, 4096), ss = src.sge(0, 64);
  // Warm up unarmed (pmd/shm passes the segment once per connection).
  ASSERT_TRUE(server.post_recv({wr_recv(0x60, &rs, 1)}));
  ASSERT_TRUE(client.post_send({wr_send(0x60, &ss, 1)}));
  Wc r, s;
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  ASSERT_TRUE(poller.wait_send1(client, &s));
  server.dev->ack_wait();
  ASSERT_TRUE(server.post_recv({wr_recv(0x61, &rs, 1)}));

  ASSERT_TRUE(arm(server));
  // The second look, first half: the CQs, before the peer sends.
  Wc none[4];
  EXPECT_EQ(server.send_cq->poll(none, 4) + server.recv_cq->poll(none, 4), 0);
  // The peer sends and wakes us (our device is armed).
  ASSERT_TRUE(client.post_send({wr_send(0x62, &ss, 1)}));
  client.poll_once();
  // Second half: connection events, and there are none.
  CmEvent ev;
  EXPECT_FALSE(server.dev->poll_cm(&ev));
  // Nothing found, so the host sleeps: it must be woken at once.
  EXPECT_TRUE(becomes_readable(server.dev->wait_fd(), kWait, [&] { client.poll_once(); }))
      << "a wake-up read with the connection events was lost; " << server.describe();
  server.dev->ack_wait();
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  EXPECT_TRUE(wc_is(r, 0x61, WcStatus::kSuccess, WcOpcode::kRecv));
  ASSERT_TRUE(poller.wait_send1(client, &s));
}

TEST_P(WaitTest, PeerExecutingOurSendWakesAnArmedSender) {
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  Sge rs = dst.sge(0, 4096), ss = src.sge(0, 64);
  ASSERT_TRUE(server.post_recv({wr_recv(1, &rs, 1)}));
  ASSERT_TRUE(client.post_send({wr_send(2, &ss, 1)}));
  ASSERT_TRUE(arm(client));
  bool woken = false;
  ASSERT_TRUE(second_look_or_wake(client, server, &woken));
  Wc s;
  ASSERT_TRUE(poller.wait_send1(client, &s));
  EXPECT_TRUE(wc_is(s, 2, WcStatus::kSuccess, WcOpcode::kSend));
  // On shm the server's poll is what executes the SEND, so the second look
  // cannot have found it: the wake-up came from the peer.
  if (caps().driver == "shm") {
    EXPECT_TRUE(woken);
  }
}

TEST_P(WaitTest, CompletionPendingAtArmIsFoundBySecondLook) {
  // The race the protocol exists for: the completion reaches us before we
  // arm, so no notification follows; the poll after arming must find it.
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  Sge rs = dst.sge(0, 4096), ss = src.sge(0, 64);
  ASSERT_TRUE(server.post_recv({wr_recv(3, &rs, 1)}));
  ASSERT_TRUE(client.post_send({wr_send(4, &ss, 1)}));
  // Let the SEND reach the server without the server polling: on verbs the
  // client's completion proves the server's device has the receive; on shm
  // the descriptor is in the ring already (only the server's poll completes it).
  auto end = SteadyClock::now() + kQuiet;
  while (client.send_wcs.empty() && SteadyClock::now() < end) client.poll_once();
  ASSERT_TRUE(arm(server));
  bool woken = false;
  ASSERT_TRUE(second_look_or_wake(server, client, &woken));
  Wc r;
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  EXPECT_TRUE(wc_is(r, 3, WcStatus::kSuccess, WcOpcode::kRecv));
  if (!client.send_wcs.empty()) {
    EXPECT_FALSE(woken) << "the completion was there before the arm";
  }
}

TEST_P(WaitTest, OwnWorkRequestPostedAfterArmingWakes) {
  TERN_SKIP_UNLESS_CAP(fast_reg);
  // A REG_MR completes without the peer: only the device (or on shm, the
  // driver itself) can wake a host that posted it after arming.
  Buf backing;
  ASSERT_TRUE(client.alloc(8192, kAccessLocalWrite, &backing));
  FastMr* fmr = nullptr;
  ASSERT_TRUE(client.alloc_fast_mr(4, &fmr));
  const int fd = client.dev->wait_fd();
  ASSERT_TRUE(arm(client));
  EXPECT_EQ(client.poll_once(), 0);
  ASSERT_TRUE(client.post_send(
      {wr_reg(9, fmr, backing, 0, 4096, kAccessLocalWrite | kAccessRemoteWrite, fmr->bump_rkey(), true)}));
  ASSERT_TRUE(becomes_readable(fd, kWait)) << "a REG_MR posted after arming did not wake; " << client.describe();
  client.dev->ack_wait();
  Wc s;
  ASSERT_TRUE(poller.wait_send1(client, &s));
  EXPECT_TRUE(wc_is(s, 9, WcStatus::kSuccess, WcOpcode::kRegMr));
}

TEST_P(WaitTest, DisconnectWakesAnArmedPeer) {
  const int fd = client.dev->wait_fd();
  ASSERT_TRUE(arm(client));
  EXPECT_EQ(client.poll_once(), 0);
  EXPECT_FALSE(becomes_readable(fd, kQuiet));
  ASSERT_TRUE(server.dev->disconnect(server.qp.get()).is_ok());
  ASSERT_TRUE(becomes_readable(fd, kWait, [&] { server.poll_once(); }))
      << "the server's disconnect did not wake the armed client; " << client.describe();
  EXPECT_TRUE(client.dev->ack_wait()) << "ack_wait must send the host to poll_cm";
  ASSERT_TRUE(poller.wait_disconnected(client));
}

TEST_P(WaitTest, PeerThatVanishesWakesAnArmedHost) {
  // A killed process says no goodbye: the socket's hang-up (shm) or the
  // transport (verbs) must still wake whoever waits on it.
  const int fd = client.dev->wait_fd();
  ASSERT_TRUE(arm(client));
  EXPECT_EQ(client.poll_once(), 0);
  TERN_INJECT_OR_SKIP(server.qp, (Fault{Fault::Kind::kDropConnection}));
  ASSERT_TRUE(becomes_readable(fd, kWait, [&] { server.poll_once(); }))
      << "a vanished peer did not wake the armed client; " << client.describe();
  EXPECT_TRUE(client.dev->ack_wait());
  ASSERT_TRUE(poller.wait_disconnected(client));
}

class WaitCmTest : public ConformanceTest {};
TERN_CONFORMANCE_SUITE(WaitCmTest);

TEST_P(WaitCmTest, ConnectRequestWakesAnArmedListener) {
  const int fd = server.dev->wait_fd();
  if (fd < 0) GTEST_SKIP() << "driver " << caps().driver << " has no wait mode";
  ASSERT_TRUE(server.dev->listen().is_ok());
  for (Cq* cq : {server.send_cq.get(), server.recv_cq.get()}) ASSERT_TRUE(cq->arm().is_ok());
  ASSERT_TRUE(server.dev->arm_wait().is_ok());
  EXPECT_EQ(server.poll_once(), 0);
  EXPECT_FALSE(becomes_readable(fd, kQuiet)) << "an idle listener woke its host";

  const std::vector<uint8_t> hello = {'w', 'a', 'i', 't'};
  ASSERT_TRUE(client.dev->connect(client.qp.get(), hello).is_ok());
  // The client polls its CM meanwhile (rdma_cm resolves address and route
  // through events); the server is not polled until its fd says so.
  ASSERT_TRUE(becomes_readable(fd, kWait, [&] { client.poll_once(); }))
      << "the connect did not wake the armed listener; " << server.describe();
  EXPECT_TRUE(server.dev->ack_wait()) << "ack_wait must send the host to poll_cm";
  CmEvent req;
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kConnectRequest, &req));
  EXPECT_EQ(req.request->private_data(), hello);
  ASSERT_TRUE(server.dev->accept(req.request, server.qp.get(), {}).is_ok());
  ASSERT_TRUE(poller.wait_cm(client, CmEventType::kEstablished));
  ASSERT_TRUE(poller.wait_cm(server, CmEventType::kEstablished));
}

}  // namespace
}  // namespace tern::conformance
