// Shared receive queues (rdmadev.h: Srq, QpInit::srq, Device::create_srq):
// the server's two QPs take their receives from one SRQ, each connected to a
// QP of its own at the client. Checked here: the SRQ serves both, oldest
// receive first, with the right qp_num and wr_id; a QP of an SRQ has no
// receive queue of its own; a SEND with no receive posted waits and nothing
// fails; a QP that fails (its peer leaves, a local disconnect, its peer's
// too-large SEND) flushes none of the SRQ's receives and the other QP keeps
// receiving into them; a full SRQ refuses with EAGAIN; the drain rule; a QP
// destroyed leaves the SRQ to the others; and wait mode's wake-up for a post
// that lets a waiting SEND land. Skipped on devices without SRQs.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

constexpr uint32_t kSrqDepth = 16;
constexpr size_t kSlot = 256;       // bytes per receive
constexpr uint8_t kUntouched = 0xEE;  // what receive buffers hold before a message lands

class SrqTest : public ConformanceTest {
 protected:
  void SetUp() override {
    ConformanceTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (caps().max_srq_wr == 0 || caps().max_srq_sge == 0)
      GTEST_SKIP() << "device '" << caps().name << "' (driver " << caps().driver << ") has no shared receive queue";
    auto s = server.dev->create_srq(server.pd.get(), kSrqDepth, 1);
    ASSERT_TRUE(s) << "create_srq(" << kSrqDepth << ", 1): " << to_string(s.status());
    server.srq = std::move(s).value();
    EXPECT_EQ(server.srq->capacity(), kSrqDepth);
    EXPECT_EQ(server.srq->posted(), 0u);

    // Both server QPs on the SRQ. rq_depth and max_recv_sge do not apply
    // to them (rdmadev.h), so values no QP of its own could have are fine.
    server.qp.reset();
    ASSERT_TRUE(server.create_qp(srq_qp_init(), &server.qp));
    server.extra_qps.emplace_back();
    ASSERT_TRUE(server.create_qp(srq_qp_init(), &server.extra_qps[0]));
    client.extra_qps.emplace_back();
    ASSERT_TRUE(client.create_qp(client.default_qp_init(), &client.extra_qps[0]));
    ASSERT_TRUE(connect_pair());
    ConnectOptions second;
    second.listen = false;
    second.client_qp = client.extra_qps[0].get();
    second.server_qp = server.extra_qps[0].get();
    ASSERT_TRUE(connect_pair(second));

    ASSERT_TRUE(server.alloc(kSrqDepth * kSlot, kAccessLocalWrite, &rbuf));
    std::memset(rbuf.p, kUntouched, rbuf.len);
    for (uint32_t i = 0; i < kSrqDepth; ++i) rsge[i] = rbuf.sge(i * kSlot, kSlot);
    ASSERT_TRUE(client.alloc(64 << 10, kAccessLocalWrite, &src));
  }

  QpInit srq_qp_init() const {
    QpInit in = server.default_qp_init();
    in.srq = server.srq.get();
    in.rq_depth = 0;
    in.max_recv_sge = 0;
    return in;
  }
  // Server QP i (0: server.qp, 1: the second) and the client QP connected to it.
  Qp* sqp(int i) const { return i == 0 ? server.qp.get() : server.extra_qps[0].get(); }
  Qp* cqp(int i) const { return i == 0 ? client.qp.get() : client.extra_qps[0].get(); }

  // Receives into slots [first, first+n) of rbuf, with wr_ids 100+slot.
  AssertionResult post_srq(uint32_t first, uint32_t n) {
    std::vector<RecvWr> w;
    for (uint32_t k = first; k < first + n; ++k) w.push_back(wr_recv(100 + k, &rsge[k], 1));
    int err = 0;
    int got = server.srq->post_recv(w.data(), static_cast<int>(w.size()), &err);
    if (got != static_cast<int>(w.size()))
      return AssertionFailure() << "Srq::post_recv accepted " << got << " of " << w.size() << ", err " << err << " ("
                                << std::strerror(err) << ")";
    return AssertionSuccess();
  }
  // A SEND of `len` bytes of pattern `seed` from client QP i, signaled, wr_id `id`.
  AssertionResult send_from(int i, uint64_t id, size_t len, uint32_t seed) {
    uint8_t* p = src.p + (seed % 8) * 8192;
    fill_pattern(p, len, seed);
    ssge = Sge{reinterpret_cast<uint64_t>(p), static_cast<uint32_t>(len), src.lkey()};
    SendWr w = wr_send(id, &ssge, 1);
    int err = 0;
    if (cqp(i)->post_send(&w, 1, &err) != 1)
      return AssertionFailure() << "client QP " << i << ": post_send failed, err " << err << " ("
                                << std::strerror(err) << ")";
    return AssertionSuccess();
  }
  // The receive completion of slot `slot` for server QP i, `len` bytes of `seed`.
  AssertionResult landed(const Wc& wc, uint32_t slot, int i, size_t len, uint32_t seed) {
    if (auto r = wc_is(wc, 100 + slot, WcStatus::kSuccess, WcOpcode::kRecv); !r) return r;
    if (wc.qp_num != sqp(i)->qp_num())
      return AssertionFailure() << "receive " << 100 + slot << " carries qp_num " << wc.qp_num << ", the message came "
                                << "on QP " << sqp(i)->qp_num() << " (the other one is "
                                << sqp(1 - i)->qp_num() << ")";
    if (wc.byte_len != len) return AssertionFailure() << "byte_len " << wc.byte_len << ", sent " << len;
    if (auto r = check_pattern(rbuf.p + slot * kSlot, len, seed, "received message"); !r) return r;
    return check_filled(rbuf.p + slot * kSlot + len, kSlot - len, kUntouched, "the receive past the message");
  }
  // Sends one message from client QP i and checks it lands in `slot`.
  AssertionResult one_message(int i, uint32_t slot, uint32_t seed, size_t len = 100) {
    if (auto r = send_from(i, 1000 + seed, len, seed); !r) return r;
    Wc rw, sw;
    if (auto r = poller.wait_recv1(server, &rw); !r) return r;
    if (auto r = landed(rw, slot, i, len, seed); !r) return r;
    if (auto r = poller.wait_send1(client, &sw); !r) return r;
    return wc_is(sw, 1000 + seed, WcStatus::kSuccess, WcOpcode::kSend);
  }
  // Waits for server QP i's kDisconnected (and its peer's, which follows).
  AssertionResult both_ends_disconnected(int i) {
    if (auto r = poller.wait_disconnected(server, sqp(i)); !r) return r;
    return poller.wait_disconnected(client, cqp(i));
  }

  Buf rbuf, src;
  Sge rsge[kSrqDepth];
  Sge ssge;
};
TERN_CONFORMANCE_SUITE(SrqTest);

TEST_P(SrqTest, BothQpsReceiveFromTheSrqOldestFirst) {
  ASSERT_TRUE(post_srq(0, 6));
  EXPECT_EQ(server.srq->posted(), 6u);
  // Messages alternate between the two connections; each takes the oldest
  // receive, whichever QP it came on, and completes on that QP.
  for (uint32_t k = 0; k < 6; ++k) {
    int i = static_cast<int>(k % 2);
    ASSERT_TRUE(one_message(i, k, 10 + k, 40 + 20 * k)) << "message " << k << " on QP " << i;
    EXPECT_EQ(server.srq->posted(), 5 - k);
  }
  EXPECT_TRUE(server.recv_wcs.empty()) << server.describe();
  EXPECT_EQ(sqp(0)->state(), QpState::kRts);
  EXPECT_EQ(sqp(1)->state(), QpState::kRts);
}

TEST_P(SrqTest, QpOfAnSrqHasNoReceiveQueueOfItsOwn) {
  RecvWr w = wr_recv(7, &rsge[0], 1);
  int err = 0;
  EXPECT_EQ(sqp(0)->post_recv(&w, 1, &err), 0) << "connected";
  EXPECT_EQ(err, EINVAL);
  std::unique_ptr<Qp> fresh;
  ASSERT_TRUE(server.create_qp(srq_qp_init(), &fresh));
  err = 0;
  EXPECT_EQ(fresh->post_recv(&w, 1, &err), 0) << "never connected";
  EXPECT_EQ(err, EINVAL);
  fresh.reset();
  // In error it is still no queue at all: EINVAL, not a flush.
  ASSERT_TRUE(server.dev->disconnect(sqp(0)).is_ok());
  ASSERT_TRUE(both_ends_disconnected(0));
  err = 0;
  EXPECT_EQ(sqp(0)->post_recv(&w, 1, &err), 0) << "in error";
  EXPECT_EQ(err, EINVAL);
  poller.settle();
  EXPECT_TRUE(server.recv_wcs.empty()) << "nothing was posted, so nothing may complete: " << server.describe();
  // An SRQ of another PD is refused.
  auto other = server.dev->alloc_pd();
  ASSERT_TRUE(other);
  QpInit in = srq_qp_init();
  in.pd = other.value().get();
  auto q = server.dev->create_qp(in);
  EXPECT_FALSE(q) << "a QP on another PD than its SRQ's was created";
}

TEST_P(SrqTest, SendWithNoReceivePostedWaitsAndLandsOnThePost) {
  ASSERT_TRUE(send_from(0, 1, 64, 21));
  ASSERT_TRUE(send_from(1, 2, 80, 22));
  poller.settle(std::chrono::milliseconds(100));
  EXPECT_TRUE(client.send_wcs.empty()) << "a SEND completed with the SRQ empty: " << client.describe();
  EXPECT_TRUE(server.recv_wcs.empty()) << server.describe();
  EXPECT_TRUE(server.cm_events.empty() && client.cm_events.empty()) << poller.describe();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sqp(i)->state(), QpState::kRts);
    EXPECT_EQ(cqp(i)->state(), QpState::kRts);
  }
  ASSERT_TRUE(post_srq(0, 1));
  Wc first;
  ASSERT_TRUE(poller.wait_recv1(server, &first));
  // Either message may take it; the other keeps waiting for the next post.
  const int i = first.qp_num == sqp(0)->qp_num() ? 0 : 1;
  EXPECT_TRUE(landed(first, 0, i, i == 0 ? 64 : 80, i == 0 ? 21 : 22));
  poller.settle();
  EXPECT_TRUE(server.recv_wcs.empty()) << "one receive, one message: " << server.describe();
  ASSERT_TRUE(post_srq(1, 1));
  Wc second;
  ASSERT_TRUE(poller.wait_recv1(server, &second));
  EXPECT_TRUE(landed(second, 1, 1 - i, i == 0 ? 80 : 64, i == 0 ? 22 : 21));
  std::vector<Wc> s;
  ASSERT_TRUE(poller.wait_send(client, 2, &s));
  for (const Wc& wc : s) EXPECT_EQ(wc.status, WcStatus::kSuccess) << to_string(wc);
  EXPECT_EQ(server.srq->posted(), 0u);
}

// QP 0 goes to error; none of the SRQ's receives may flush, and QP 1 then
// receives into all of them, oldest first.
class SrqErrorTest : public SrqTest {
 protected:
  void fails_flushing_nothing(const std::function<AssertionResult()>& fail) {
    ASSERT_TRUE(post_srq(0, 4));
    ASSERT_TRUE(one_message(0, 0, 31)) << "QP 0 works before";
    ASSERT_TRUE(fail());
    poller.settle(std::chrono::milliseconds(100));
    EXPECT_TRUE(server.recv_wcs.empty()) << "a QP in error flushed receives of the SRQ: " << server.describe();
    EXPECT_EQ(server.srq->posted(), 3u);
    EXPECT_EQ(sqp(1)->state(), QpState::kRts);
    for (uint32_t k = 1; k < 4; ++k) ASSERT_TRUE(one_message(1, k, 31 + k)) << "QP 1 takes receive " << 100 + k;
    EXPECT_EQ(server.srq->posted(), 0u);
  }
};
TERN_CONFORMANCE_SUITE(SrqErrorTest);

TEST_P(SrqErrorTest, PeerDisconnectFlushesNoSrqReceive) {
  fails_flushing_nothing([&] {
    if (Status s = client.dev->disconnect(cqp(0)); !s.is_ok()) return AssertionFailure() << to_string(s);
    return both_ends_disconnected(0);
  });
}

TEST_P(SrqErrorTest, LocalDisconnectFlushesNoSrqReceive) {
  fails_flushing_nothing([&] {
    if (Status s = server.dev->disconnect(sqp(0)); !s.is_ok()) return AssertionFailure() << to_string(s);
    return both_ends_disconnected(0);
  });
}

TEST_P(SrqErrorTest, VanishedPeerFlushesNoSrqReceive) {
  Status s = cqp(0)->inject_fault(Fault{Fault::Kind::kDropConnection});
  if (s.code() == Errc::kUnsupported) GTEST_SKIP() << "driver " << caps().driver << " has no fault injection";
  ASSERT_TRUE(s.is_ok()) << to_string(s);
  // Injected before the first message: redo the set-up's expectations by hand.
  ASSERT_TRUE(poller.wait_disconnected(server, sqp(0)));
  ASSERT_TRUE(post_srq(0, 3));
  poller.settle(std::chrono::milliseconds(100));
  EXPECT_TRUE(server.recv_wcs.empty()) << "a QP in error flushed receives of the SRQ: " << server.describe();
  for (uint32_t k = 0; k < 3; ++k) ASSERT_TRUE(one_message(1, k, 41 + k));
}

TEST_P(SrqErrorTest, TooLargeSendFailsOnlyItsOwnQp) {
  ASSERT_TRUE(post_srq(0, 4));
  // 1 KiB into 256-byte receives: the sender's WR fails and both ends of that
  // connection go to error. The receive it reached either stays in the SRQ
  // or completes in error on that QP (rdmadev.h allows both).
  ASSERT_TRUE(send_from(0, 50, 1024, 51));
  Wc sw;
  ASSERT_TRUE(poller.wait_send1(client, &sw));
  EXPECT_TRUE(is_real_error(sw, 50));
  ASSERT_TRUE(poller.wait_disconnected(server, sqp(0)));
  poller.settle();
  uint32_t consumed = 0;
  for (const Wc& wc : server.recv_wcs) {
    EXPECT_EQ(wc.qp_num, sqp(0)->qp_num()) << "a receive completed on the QP that did nothing wrong: " << to_string(wc);
    EXPECT_NE(wc.status, WcStatus::kSuccess) << "the too-large message landed: " << to_string(wc);
    EXPECT_EQ(wc.wr_id, 100u + consumed) << "not the oldest receive: " << to_string(wc);
    ++consumed;
  }
  ASSERT_LE(consumed, 1u) << "one message can reach one receive: " << server.describe();
  RecordProperty("receives_consumed_by_the_failed_qp", static_cast<int>(consumed));
  server.recv_wcs.clear();
  EXPECT_EQ(server.srq->posted(), 4 - consumed);
  // The receives after it were not written; the one it reached was not
  // either, when it stayed in the SRQ.
  EXPECT_TRUE(check_filled(rbuf.p + consumed * kSlot, (4 - consumed) * kSlot, kUntouched, "receives left in the SRQ"));
  EXPECT_EQ(sqp(1)->state(), QpState::kRts);
  EXPECT_EQ(cqp(1)->state(), QpState::kRts);
  for (uint32_t k = consumed; k < 4; ++k) ASSERT_TRUE(one_message(1, k, 52 + k, 200));
}

TEST_P(SrqTest, FullSrqRefusesWithEagainAndMalformedWithEinval) {
  auto s = server.dev->create_srq(server.pd.get(), 4, 1);
  ASSERT_TRUE(s) << to_string(s.status());
  Srq& q = *s.value();
  EXPECT_EQ(q.capacity(), 4u);
  std::vector<RecvWr> w;
  for (int k = 0; k < 6; ++k) w.push_back(wr_recv(k, &rsge[k], 1));
  int err = 0;
  EXPECT_EQ(q.post_recv(w.data(), 6, &err), 4) << "accepted from the front, up to the capacity";
  EXPECT_EQ(err, EAGAIN);
  EXPECT_EQ(q.posted(), 4u);
  err = 0;
  EXPECT_EQ(q.post_recv(&w[4], 1, &err), 0);
  EXPECT_EQ(err, EAGAIN);

  auto s2 = server.dev->create_srq(server.pd.get(), 4, 1);
  ASSERT_TRUE(s2) << to_string(s2.status());
  Sge two[2] = {rsge[0], rsge[1]};
  RecvWr bad[2] = {wr_recv(1, &rsge[0], 1), wr_recv(2, two, 2)};
  err = 0;
  EXPECT_EQ(s2.value()->post_recv(bad, 2, &err), 1) << "more SGEs than the SRQ's max_sge";
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(s2.value()->posted(), 1u);
  // Nobody's QP uses these SRQs: destroying them drops their receives.
}

TEST_P(SrqTest, NoReceiveCompletionOfAQpAfterItsDrainMarker) {
  // Messages in flight on QP 0 when it fails: each either landed (a receive
  // completion, before the drain marker's flush is polled) or did not (its
  // receive stays in the SRQ). After the marker nothing more of QP 0's.
  constexpr uint32_t kN = 8;
  ASSERT_TRUE(post_srq(0, kN));
  for (uint32_t k = 0; k < kN; ++k) ASSERT_TRUE(send_from(0, 60 + k, 32, 60 + k));
  ASSERT_TRUE(server.dev->disconnect(sqp(0)).is_ok());
  Buf mbuf;
  ASSERT_TRUE(server.alloc(64, kAccessLocalWrite, &mbuf));
  Sge msge = mbuf.sge();
  SendWr marker = wr_send(999, &msge, 1);
  int err = 0;
  ASSERT_EQ(sqp(0)->post_send(&marker, 1, &err), 1) << "err " << err;

  // Poll the server's send CQ until the marker's flush; then take what the
  // receive CQ holds at that moment. Those are all of QP 0's receives.
  std::vector<Wc> before;
  bool seen = false;
  auto end = SteadyClock::now() + kWait;
  while (!seen && SteadyClock::now() < end) {
    client.poll_once();
    Wc wc[32];
    int n = server.send_cq->poll(wc, 32);
    for (int j = 0; j < n; ++j) {
      if (wc[j].wr_id == 999) {
        EXPECT_EQ(wc[j].status, WcStatus::kWrFlushErr) << to_string(wc[j]);
        seen = true;
      }
    }
    if (seen)
      while ((n = server.recv_cq->poll(wc, 32)) > 0) before.insert(before.end(), wc, wc + n);
  }
  ASSERT_TRUE(seen) << "the drain marker's flush never came";
  ASSERT_TRUE(both_ends_disconnected(0));
  // The client's SENDs each complete once, landed or not.
  std::vector<Wc> cs;
  ASSERT_TRUE(poller.wait_send(client, kN, &cs));
  for (uint32_t k = 0; k < kN; ++k) EXPECT_EQ(cs[k].wr_id, 60 + k) << to_string(cs);
  poller.settle(std::chrono::milliseconds(300));  // past pmd/verbs' flush grace
  for (const Wc& wc : server.recv_wcs)
    EXPECT_NE(wc.qp_num, sqp(0)->qp_num()) << "a receive completion of QP 0 after its drain marker: " << to_string(wc);
  // What landed took the oldest receives, in order; the rest are QP 1's now.
  uint32_t landed_n = 0;
  for (const Wc& wc : before) {
    EXPECT_EQ(wc.qp_num, sqp(0)->qp_num()) << to_string(wc);
    EXPECT_EQ(wc.wr_id, 100u + landed_n) << "not the oldest receive: " << to_string(before);
    ++landed_n;
  }
  EXPECT_EQ(server.srq->posted(), kN - landed_n) << "every receive is either completed or still posted";
  // How the device behaved (rxe: whether it says LAST_WQE_REACHED at all).
  RecordProperty("landed_before_the_marker", static_cast<int>(landed_n));
  RecordProperty("device_stats", format_stats(server.dev->stats()));
  for (uint32_t k = landed_n; k < kN; ++k) ASSERT_TRUE(one_message(1, k, 70 + k, 32));
}

TEST_P(SrqTest, DestroyingAQpLeavesTheSrqToTheOthers) {
  ASSERT_TRUE(post_srq(0, 4));
  ASSERT_TRUE(one_message(0, 0, 81));
  server.qp.reset();
  ASSERT_TRUE(poller.wait_disconnected(client, cqp(0)));
  poller.settle();
  EXPECT_TRUE(server.recv_wcs.empty()) << server.describe();
  EXPECT_EQ(server.srq->posted(), 3u);
  for (uint32_t k = 1; k < 4; ++k) ASSERT_TRUE(one_message(1, k, 81 + k));
  ASSERT_TRUE(post_srq(4, 1));
  ASSERT_TRUE(one_message(1, 4, 86));
}

bool readable_within(int fd, Duration limit, const std::function<void()>& meanwhile) {
  auto end = SteadyClock::now() + limit;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1) == 1 && (p.revents & POLLIN) != 0) return true;
    if (SteadyClock::now() > end) return false;
    meanwhile();
  }
}

TEST_P(SrqTest, PostThatLetsAWaitingSendLandWakesAnArmedHost) {
  const int fd = server.dev->wait_fd();
  if (fd < 0) GTEST_SKIP() << "driver " << caps().driver << " has no wait mode";
  // One message first, so that whatever a driver does once per connection
  // (pmd/shm passes the segment's memfd) is done before the armed part.
  ASSERT_TRUE(post_srq(0, 1));
  ASSERT_TRUE(one_message(0, 0, 91));
  // A SEND that finds the SRQ empty and waits; the server has seen it.
  ASSERT_TRUE(send_from(0, 92, 48, 92));
  poller.settle(std::chrono::milliseconds(50));
  ASSERT_TRUE(server.recv_wcs.empty() && client.send_wcs.empty()) << poller.describe();
  server.dev->ack_wait();

  for (Cq* cq : {server.send_cq.get(), server.recv_cq.get()}) ASSERT_TRUE(cq->arm().is_ok());
  ASSERT_TRUE(server.dev->arm_wait().is_ok());
  ASSERT_EQ(server.poll_once(), 0) << "the second look finds nothing: the SEND still waits";
  EXPECT_FALSE(readable_within(fd, kQuiet, [&] { client.poll_once(); })) << "armed, with nothing to do, it woke";
  // Posted by the host between its arm and its sleep: nothing else will
  // happen for that SEND, so the post itself must wake the host.
  ASSERT_TRUE(post_srq(1, 1));
  ASSERT_TRUE(readable_within(fd, kWait, [&] { client.poll_once(); }))
      << "the SRQ post that lets the waiting SEND land did not wake the armed host; " << server.describe();
  server.dev->ack_wait();
  Wc rw, sw;
  ASSERT_TRUE(poller.wait_recv1(server, &rw));
  EXPECT_TRUE(landed(rw, 1, 0, 48, 92));
  ASSERT_TRUE(poller.wait_send1(client, &sw));
  EXPECT_TRUE(wc_is(sw, 92, WcStatus::kSuccess, WcOpcode::kSend));
}

}  // namespace
}  // namespace tern::conformance
