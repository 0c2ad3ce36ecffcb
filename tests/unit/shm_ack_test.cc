// pmd/shm acks (shm_link.cc, "Acks"): a flagged descriptor's consumer
// stores cons at once but owes the producer its bit and WAKE check until its
// next post to the QP (which carries them), two CQ polls later, or its arm
// before a sleep, whichever comes first; and a producer waits at most the
// safety net's period for an ack its peer stranded by not polling again.
// Each test drives both devices from this thread, so what a poll sees is
// exactly what the other side has done.
#include <poll.h>

#include <chrono>
#include <initializer_list>

#include "shm/shm_internal.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;
using shmtest::counter;

class ShmAckTest : public shmtest::PairTest {
 protected:
  ShmAckTest() : PairTest("ack") {}

  void SetUp() override {
    PairTest::SetUp();
    connect_all(1);
    client_.post_recvs(cqp(), 0, 8);
    // The safety net looks at the clock on every 64th poll of a CQ: 64
    // polls of each here put its next look 64 polls away, more than any
    // test below makes before it asserts, so no completion below comes
    // from the net's visit unless the test waits for it.
    for (int k = 0; k < 64; ++k) server_.poll(), client_.poll();
    server_.wcs.clear();
    client_.wcs.clear();
  }
  Qp* cqp() { return client_.qps[0].get(); }
  Qp* sqp() { return server_.qps[0].get(); }
  // A signaled Send of 32 bytes from the client (flagged: the peer owes an ack).
  void client_sends_signaled(uint64_t wr_id) {
    Sge s = client_.sge(8 * shmtest::ManyQpEnd::kMsg * 4, 32);
    SendWr w{};
    w.wr_id = wr_id, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend, w.flags = kWrSignaled;
    int err = 0;
    ASSERT_EQ(cqp()->post_send(&w, 1, &err), 1);
  }
  void server_sends(uint64_t wr_id) {
    Sge s = server_.sge(32 * shmtest::ManyQpEnd::kMsg, 32);
    SendWr w{};
    w.wr_id = wr_id, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend, w.flags = 0;
    int err = 0;
    ASSERT_EQ(sqp()->post_send(&w, 1, &err), 1);
  }
  bool client_has(uint64_t wr_id, WcOpcode op) {
    for (const Wc& wc : client_.wcs)
      if (wc.wr_id == wr_id && wc.opcode == op && wc.status == WcStatus::kSuccess) return true;
    return false;
  }
  bool server_received() {
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kRecv && wc.status == WcStatus::kSuccess) return true;
    return false;
  }
  // The client's Send executed by the server: the client polls first (its
  // post's own visit), then the server once.
  void deliver() {
    client_sends_signaled(1);
    client_.poll();
    server_.poll();
    ASSERT_TRUE(server_received());
  }
};

TEST_F(ShmAckTest, AckRidesOnTheAnswer) {
  deliver();
  // No bit yet: the client's poll does not visit its QP, so its Send is
  // not retired. (Sent on its own, the ack had it retired here.)
  const uint64_t visits = counter(cqp()->stats(), "visits");
  client_.poll();
  EXPECT_FALSE(client_has(1, WcOpcode::kSend)) << "the ack went out on its own, before the server's answer";
  EXPECT_EQ(counter(cqp()->stats(), "visits"), visits);
  // The server answers: that post's bit carries the ack, and one visit of
  // the client's QP takes both.
  server_sends(100);
  client_.poll();
  EXPECT_TRUE(client_has(1, WcOpcode::kSend));
  EXPECT_TRUE(client_has(0, WcOpcode::kRecv));  // the answer, in the client's first receive
  EXPECT_EQ(counter(cqp()->stats(), "visits"), visits + 1);
}

TEST_F(ShmAckTest, OwedAckGoesTwoPollsLater) {
  deliver();
  // The server posts nothing: its device sends the ack by itself at its
  // second CQ poll after the one that executed the Send.
  server_.poll();
  client_.poll();
  EXPECT_FALSE(client_has(1, WcOpcode::kSend));
  server_.poll();
  client_.poll();
  EXPECT_TRUE(client_has(1, WcOpcode::kSend)) << "the owed ack did not go within two polls";
}

TEST_F(ShmAckTest, OwedAckGoesWhenTheHostArms) {
  // The client sleeps waiting for its signaled Send's completion.
  client_sends_signaled(1);
  client_.poll();
  const int cfd = client_.dev->wait_fd();
  ASSERT_GE(cfd, 0);
  ASSERT_GE(server_.dev->wait_fd(), 0);
  ASSERT_TRUE(client_.cq->arm().is_ok());
  ASSERT_TRUE(client_.dev->arm_wait().is_ok());
  client_.poll();  // the protocol's second look: nothing yet
  ASSERT_FALSE(client_has(1, WcOpcode::kSend));
  server_.poll();  // executes it, owes the ack
  ASSERT_TRUE(server_received());
  const uint64_t wakes = counter(sqp()->stats(), "wakes_sent");
  // The server goes to sleep too: arming sends the ack, a WAKE included.
  ASSERT_TRUE(server_.cq->arm().is_ok());
  ASSERT_TRUE(server_.dev->arm_wait().is_ok());
  EXPECT_EQ(counter(sqp()->stats(), "wakes_sent"), wakes + 1) << "arming did not send the owed ack";
  pollfd p{cfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1);
  client_.dev->ack_wait();
  server_.dev->ack_wait();
  client_.poll();
  EXPECT_TRUE(client_has(1, WcOpcode::kSend));
}

TEST_F(ShmAckTest, PollWhileArmedAcksAtOnce) {
  // The server arms first and then executes the client's Send in the wait
  // protocol's second look: it may sleep next, so that poll owes nothing.
  client_sends_signaled(1);
  client_.poll();
  ASSERT_GE(client_.dev->wait_fd(), 0);
  ASSERT_GE(server_.dev->wait_fd(), 0);
  ASSERT_TRUE(client_.cq->arm().is_ok());
  ASSERT_TRUE(client_.dev->arm_wait().is_ok());
  ASSERT_TRUE(server_.cq->arm().is_ok());
  ASSERT_TRUE(server_.dev->arm_wait().is_ok());
  const uint64_t wakes = counter(sqp()->stats(), "wakes_sent");
  server_.poll();
  ASSERT_TRUE(server_received());
  EXPECT_EQ(counter(sqp()->stats(), "wakes_sent"), wakes + 1) << "the armed poll left its ack owed";
  client_.dev->ack_wait();
  server_.dev->ack_wait();
  client_.poll();
  EXPECT_TRUE(client_has(1, WcOpcode::kSend));
}

TEST_F(ShmAckTest, StrandedAckWakesASleepingProducer) {
  // The server executes the client's Send and then neither polls nor arms
  // (a host between synchronous calls): the ack stays owed. The client,
  // asleep waiting for the completion, must wake by its own timer and read
  // the server's cons.
  client_sends_signaled(1);
  client_.poll();
  const int cfd = client_.dev->wait_fd();
  ASSERT_GE(cfd, 0);
  ASSERT_TRUE(client_.cq->arm().is_ok());
  ASSERT_TRUE(client_.dev->arm_wait().is_ok());
  client_.poll();
  server_.poll();
  ASSERT_TRUE(server_received());
  pollfd p{cfd, POLLIN, 0};
  const auto t0 = std::chrono::steady_clock::now();
  const int r = ::poll(&p, 1, 5000);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r, 1) << "the client slept " << ms << " ms without waking for the ack it awaits";
  client_.dev->ack_wait();
  client_.poll();
  EXPECT_TRUE(client_has(1, WcOpcode::kSend));
}

TEST_F(ShmAckTest, StrandedAckSeenByThePollingProducer) {
  // As above, the client polling instead of sleeping: the safety net's
  // visit reads the server's cons (a guard of 5 s against a hang; the net
  // takes at most two of its 10 ms periods).
  deliver();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!client_has(1, WcOpcode::kSend) && std::chrono::steady_clock::now() < end) client_.poll();
  EXPECT_TRUE(client_has(1, WcOpcode::kSend));
}

TEST_F(ShmAckTest, ReceivePostedBackQueuesNoVisitUnlessASendWaits) {
  // A receive posted back with none missing gives its QP nothing to do.
  const uint64_t visits = counter(cqp()->stats(), "visits");
  client_.post_recvs(cqp(), 0, 1);
  client_.poll();
  EXPECT_EQ(counter(cqp()->stats(), "visits"), visits) << "a receive posted back queued a visit";
  // With a SEND waiting for one, it does: the SEND lands at the next poll.
  for (int k = 0; k < 16; ++k) server_sends(200 + static_cast<uint64_t>(k));  // all 8+1 receives, then 7 waiting
  for (int k = 0; k < 4; ++k) client_.poll(), server_.poll();
  size_t got = 0;
  for (const Wc& wc : client_.wcs) got += wc.opcode == WcOpcode::kRecv ? 1 : 0;
  ASSERT_EQ(got, 9u);
  EXPECT_GT(counter(cqp()->stats(), "rnr_waits"), 0u);
  client_.post_recvs(cqp(), 1, 1);
  client_.poll();
  got = 0;
  for (const Wc& wc : client_.wcs) got += wc.opcode == WcOpcode::kRecv ? 1 : 0;
  EXPECT_EQ(got, 10u) << "the waiting SEND did not land in the receive posted for it";
}

}  // namespace
}  // namespace tern

namespace tern {
namespace {

using namespace tern::rdma;

// QPs that owe acks are listed on the device (two lists, by age); one
// destroyed while it owes must leave its list (ShmDevice::unready), in the
// middle of it and on either list, and the others' acks still go.
class ShmOwedListTest : public shmtest::PairTest {
 protected:
  ShmOwedListTest() : PairTest("owed") {}
  void SetUp() override {
    PairTest::SetUp();
    connect_all(3);
    for (int k = 0; k < 64; ++k) server_.poll(), client_.poll();
    server_.wcs.clear();
    client_.wcs.clear();
  }
  void client_sends_signaled(int q) {
    Sge s = client_.sge((48 + static_cast<size_t>(q)) * shmtest::ManyQpEnd::kMsg, 32);
    SendWr w{};
    w.wr_id = 10 + static_cast<uint64_t>(q), w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend,
    w.flags = kWrSignaled;
    int err = 0;
    ASSERT_EQ(client_.qps[static_cast<size_t>(q)]->post_send(&w, 1, &err), 1);
  }
  bool client_sent(int q) {
    for (const Wc& wc : client_.wcs)
      if (wc.wr_id == 10 + static_cast<uint64_t>(q) && wc.opcode == WcOpcode::kSend &&
          wc.status == WcStatus::kSuccess)
        return true;
    return false;
  }
  // Every client QP's flagged Send executed by the server in one poll: each
  // server QP owes its ack, all on the newer list.
  void deliver_all() {
    for (int q = 0; q < 3; ++q) client_sends_signaled(q);
    client_.poll();
    server_.poll();
  }
  size_t owed() const { return static_cast<const shm::ShmDevice*>(server_.dev.get())->owed_qps(); }
  void check_others_acked() {
    EXPECT_EQ(owed(), 2u) << "the QP gone is still listed as owing an ack";
    for (int k = 0; k < 3; ++k) server_.poll(), client_.poll();
    EXPECT_EQ(owed(), 0u);
    EXPECT_TRUE(client_sent(0)) << "the ack owed by the QP before it was lost";
    EXPECT_TRUE(client_sent(2)) << "the ack owed by the QP after it was lost";
  }
};

TEST_F(ShmOwedListTest, QpDestroyedOnTheNewerListLeavesIt) {
  deliver_all();
  ASSERT_EQ(owed(), 3u);
  server_.qps[1].reset();
  check_others_acked();
}

TEST_F(ShmOwedListTest, QpDestroyedOnTheOlderListLeavesIt) {
  deliver_all();
  server_.poll();  // the newer list ages: the acks are owed on the older one
  client_.poll();
  EXPECT_FALSE(client_sent(0));
  ASSERT_EQ(owed(), 3u);
  server_.qps[1].reset();
  check_others_acked();
}

// The ready list the same way: a post queues its QP for the device's next
// poll, and a QP destroyed before that poll must leave the list -- first,
// in the middle or last on it, or next to one that left before -- or the
// poll would visit freed memory (ASan) and the others' Sends would still
// have to complete.
class ShmReadyListTest : public ShmOwedListTest {
 protected:
  size_t client_ready() const { return static_cast<const shm::ShmDevice*>(client_.dev.get())->ready_qps(); }
  void destroy_queued(std::initializer_list<int> lost) {
    for (int q = 0; q < 3; ++q) client_sends_signaled(q);
    ASSERT_EQ(client_ready(), 3u) << "a post queues its QP for the next poll";
    for (int q : lost) client_.qps[static_cast<size_t>(q)].reset();
    EXPECT_EQ(client_ready(), 3 - lost.size()) << "a QP gone is still on the ready list";
    for (int k = 0; k < 8; ++k) client_.poll(), server_.poll();
    EXPECT_EQ(client_ready(), 0u);
    for (int q = 0; q < 3; ++q) {
      if (client_.qps[static_cast<size_t>(q)] == nullptr) continue;
      EXPECT_TRUE(client_sent(q)) << "the Send of QP " << q << ", queued beside a QP lost";
    }
  }
};

// Queued last (the list's head): QP 2; in the middle: QP 1; first: QP 0.
TEST_F(ShmReadyListTest, QpQueuedLastDestroyedLeavesTheReadyList) { destroy_queued({2}); }
TEST_F(ShmReadyListTest, QpQueuedInTheMiddleDestroyedLeavesTheReadyList) { destroy_queued({1}); }
TEST_F(ShmReadyListTest, QpQueuedFirstDestroyedLeavesTheReadyList) { destroy_queued({0}); }
// QP 0 was after QP 1 on the list: its link back must now skip QP 1.
TEST_F(ShmReadyListTest, TwoNeighboursDestroyedLeaveTheReadyList) { destroy_queued({1, 0}); }

}  // namespace
}  // namespace tern

namespace tern {
namespace {

using namespace tern::rdma;
using shmtest::counter;

// Acks on the message (docs/shm-driver.md): a SEND carries its producer's
// consumer index of the other ring, so a connection that answers what it
// receives retires the peer's WRs with no load of `cons` (whose line then
// stays in its writer's cache); `cons` is read only on news that nothing
// else carries, or for room. Every completion still comes in bounded time.
class ShmAckOnMessageTest : public shmtest::PairTest {
 protected:
  ShmAckOnMessageTest() : PairTest("ackmsg") {}

  void SetUp() override {
    PairTest::SetUp();
    connect_all(1);
    client_.post_recvs(cqp(), 0, 16);
    // As ShmAckTest: the safety net's next look is 64 polls away.
    for (int k = 0; k < 64; ++k) server_.poll(), client_.poll();
    server_.wcs.clear();
    client_.wcs.clear();
  }
  Qp* cqp() { return client_.qps[0].get(); }
  Qp* sqp() { return server_.qps[0].get(); }
  void send(Qp* qp, shmtest::ManyQpEnd& end, uint64_t wr_id, bool signaled) {
    Sge s = end.sge(40 * shmtest::ManyQpEnd::kMsg, 32);
    SendWr w{};
    w.wr_id = wr_id, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
    w.flags = signaled ? kWrSignaled : 0;
    int err = 0;
    ASSERT_EQ(qp->post_send(&w, 1, &err), 1);
  }
  static bool has(const shmtest::ManyQpEnd& end, uint64_t wr_id, WcOpcode op) {
    for (const Wc& wc : end.wcs)
      if (wc.wr_id == wr_id && wc.opcode == op && wc.status == WcStatus::kSuccess) return true;
    return false;
  }
  static size_t received(const shmtest::ManyQpEnd& end) {
    size_t n = 0;
    for (const Wc& wc : end.wcs) n += wc.opcode == WcOpcode::kRecv && wc.status == WcStatus::kSuccess ? 1 : 0;
    return n;
  }
  // Takes one received message on each side and posts its receive back.
  void repost(shmtest::ManyQpEnd& end, Qp* qp, int q, size_t* seen) {
    const size_t n = received(end);
    for (; *seen < n; ++*seen) end.post_recvs(qp, q, 1);
  }
  // One round trip at depth 1, both Sends signaled: the client sends, the
  // server executes and answers, the client executes the answer. Each
  // side's Send must be complete once the other side's answer executed.
  void round(uint64_t k) {
    send(cqp(), client_, k, true);
    client_.poll();  // the post's own visit: nothing executed yet
    server_.poll();  // executes the call
    ASSERT_EQ(received(server_), k) << "round " << k;
    if (k > 1) {
      EXPECT_TRUE(has(server_, 1000 + k - 1, WcOpcode::kSend))
          << "the server's answer " << k - 1 << " not complete when the next call executed";
    }
    send(sqp(), server_, 1000 + k, true);
    server_.poll();  // the answer's own visit
    client_.poll();  // executes the answer
    ASSERT_EQ(received(client_), k) << "round " << k;
    EXPECT_TRUE(has(client_, k, WcOpcode::kSend)) << "the client's call " << k
                                                  << " not complete when its answer executed";
    repost(server_, sqp(), 0, &server_seen_);
    repost(client_, cqp(), 0, &client_seen_);
  }
  size_t server_seen_ = 0, client_seen_ = 0;
};

TEST_F(ShmAckOnMessageTest, AnAnswerCarriesTheAckAndConsStaysPut) {
  // The first rounds watch both QPs (their peers' posts stop setting bits).
  for (uint64_t k = 1; k <= 3; ++k) round(k);
  ASSERT_GT(counter(sqp()->stats(), "watches"), 0u);
  ASSERT_GT(counter(cqp()->stats(), "watches"), 0u);
  const uint64_t cloads = counter(cqp()->stats(), "cons_loads");
  const uint64_t sloads = counter(sqp()->stats(), "cons_loads");
  for (uint64_t k = 4; k <= 40; ++k) round(k);
  // Not one load of the peer's cons on either side since: each completion
  // came with the message that answered it.
  EXPECT_EQ(counter(cqp()->stats(), "cons_loads"), cloads);
  EXPECT_EQ(counter(sqp()->stats(), "cons_loads"), sloads);
}

TEST_F(ShmAckOnMessageTest, NoAnswerTheOwedAckStillGoes) {
  for (uint64_t k = 1; k <= 3; ++k) round(k);
  // The server executes a signaled Send and answers nothing: its device
  // sends the ack by itself (its bit, two polls later), and the client's
  // visit for that bit reads cons.
  send(cqp(), client_, 99, true);
  client_.poll();
  server_.poll();
  ASSERT_EQ(received(server_), 4u);
  for (int k = 0; k < 3 && !has(client_, 99, WcOpcode::kSend); ++k) server_.poll(), client_.poll();
  EXPECT_TRUE(has(client_, 99, WcOpcode::kSend)) << "the owed ack did not complete the Send";
}

TEST_F(ShmAckOnMessageTest, AFullRingGetsItsRoomBackWithoutAnswers) {
  for (uint64_t k = 1; k <= 3; ++k) round(k);
  client_.wcs.clear();
  // Unsignaled Sends, one way, more than the ring (64) and the send queue
  // (64) hold: the client's posts wait for room that only the server's
  // cons gives back; the server answers nothing.
  int posted = 0, refused = 0;
  Sge s = client_.sge(40 * shmtest::ManyQpEnd::kMsg, 32);
  for (int polls = 0; polls < 60 && posted < 200; ++polls) {
    for (;;) {
      SendWr w{};
      w.wr_id = 5000 + static_cast<uint64_t>(posted), w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
      w.flags = posted == 199 ? kWrSignaled : 0;
      int err = 0;
      if (cqp()->post_send(&w, 1, &err) != 1) {
        ++refused;
        break;
      }
      if (++posted == 200) break;
    }
    client_.poll();
    server_.poll();
    repost(server_, sqp(), 0, &server_seen_);
  }
  EXPECT_EQ(posted, 200) << "the client's send queue stayed full";
  EXPECT_GT(refused, 0) << "the test never filled the send queue";
  for (int k = 0; k < 16 && !has(client_, 5199, WcOpcode::kSend); ++k) {
    client_.poll();
    server_.poll();
    repost(server_, sqp(), 0, &server_seen_);
  }
  EXPECT_TRUE(has(client_, 5199, WcOpcode::kSend));
}

}  // namespace
}  // namespace tern
