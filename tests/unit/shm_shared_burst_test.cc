// How much of one QP's inbound queue a pmd/shm poll executes when other QPs
// have work too (docs/shm-driver.md, "Progress"; kSharedBurst): a peer that
// keeps a deep queue full (a flood) adds one message to that poll, not its
// whole queue, ahead of another connection's one message. A host that
// serves a pass's calls before it polls anything else pays for every
// message the pass took in -- its execution, and the lines its peer wrote
// from another core -- even when the engine then only holds it (one call
// per peer per turn). Alone, a QP still executes its queue in one poll.
// Counted, not timed: receive completions per QP per server poll.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rdmadev/rdmadev.h"
#include "shm/shm_internal.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;

constexpr uint32_t kMsg = shmtest::ManyQpEnd::kMsg;
constexpr int kDeep = 16;  // the server posts 16 receives per QP

class ShmSharedBurstTest : public shmtest::PairTest {
 protected:
  explicit ShmSharedBurstTest(bool two_cqs = false) : PairTest("shared-burst"), two_cqs_(two_cqs) {}
  void SetUp() override {
    PairTest::SetUp();
    if (two_cqs_) server_.scq = std::move(server_.dev->create_cq(4096)).value();
    connect_all(2);
    // The handshakes' own visits, and their completions, out of the way.
    for (int k = 0; k < 200; ++k) poll_both();
    server_.wcs.clear();
    client_.wcs.clear();
  }
  // n SENDs on client connection `conn`, message k filled with `fill` + k.
  void send(int conn, int n, uint8_t fill) {
    for (int k = 0; k < n; ++k) {
      const size_t off = (static_cast<size_t>(conn) * kDeep + static_cast<size_t>(k)) * kMsg;
      std::memset(client_.base() + off, fill + k, kMsg);
      Sge s = client_.sge(off, kMsg);
      SendWr w{};
      w.wr_id = static_cast<uint64_t>(k), w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
      int err = 0;
      ASSERT_EQ(client_.qps[conn]->post_send(&w, 1, &err), 1);
    }
  }
  // Receive completions on server QP `conn` among what the last polls took.
  int received(int conn) {
    int n = 0;
    for (const Wc& wc : server_.wcs)
      n += wc.opcode == WcOpcode::kRecv && wc.qp_num == server_.qps[conn]->qp_num();
    return n;
  }
  // The k-th receive of server QP `conn` holds message k of its peer.
  void check_data(int conn, int n, uint8_t fill) {
    for (int k = 0; k < n; ++k) {
      const uint8_t* p = server_.base() + (static_cast<size_t>(conn) * 16 + static_cast<size_t>(k)) * kMsg;
      for (uint32_t i = 0; i < kMsg; ++i) ASSERT_EQ(p[i], static_cast<uint8_t>(fill + k)) << "message " << k;
    }
  }
  const bool two_cqs_;
};

// The server as an engine polls: its send CQ, then its receive CQ, per pass.
class ShmSharedBurstPassTest : public ShmSharedBurstTest {
 protected:
  ShmSharedBurstPassTest() : ShmSharedBurstTest(true) {}
};

// Connection 0 has 16 messages published, connection 1 one: the server poll
// that finds both takes connection 1's message and one of connection 0's
// (today's code took all 16 first), and so does the poll after it (a host
// polls a send CQ and then a receive CQ per pass); the rest follows in the
// next poll, all of it, in order.
TEST_F(ShmSharedBurstTest, AFullQueueAddsOneMessageToAPollOthersHaveWorkIn) {
  send(0, kDeep, 0x10);
  send(1, 1, 0x80);
  server_.poll();
  EXPECT_EQ(received(1), 1) << "the other connection's one message";
  EXPECT_EQ(received(0), 1) << "messages of the full queue taken in the poll that found another connection's";
  server_.wcs.clear();
  server_.poll();
  EXPECT_EQ(received(0), 1) << "messages of the full queue taken in the poll after it";
  server_.wcs.clear();
  server_.poll();
  EXPECT_EQ(received(0), kDeep - 2) << "alone again: the rest of its queue in one poll";
  check_data(0, kDeep, 0x10);
  check_data(1, 1, 0x80);
}

// A pass polls two CQs: the full queue cut short in the first poll waits
// for the next pass (the next poll of that CQ), not for the second poll of
// this one, so it adds one message to the pass the other connection's
// message is in, not two (2 before). Then one per pass while the other
// connection has work, and the rest in one pass once it is alone.
TEST_F(ShmSharedBurstPassTest, AFullQueueAddsOneMessageToAPassOthersHaveWorkIn) {
  send(0, kDeep, 0x30);
  send(1, 1, 0x90);
  server_.poll();
  EXPECT_EQ(received(1), 1) << "the other connection's one message";
  EXPECT_EQ(received(0), 1) << "messages of the full queue taken in the pass that found another connection's";
  server_.wcs.clear();
  send(1, 1, 0x91);  // the other connection's next message, in its slot 1
  server_.poll();
  EXPECT_EQ(received(1), 1);
  EXPECT_EQ(received(0), 1) << "one per pass while the other connection has work";
  server_.wcs.clear();
  int passes = 0;
  for (; received(0) < kDeep - 2 && passes < 8; ++passes) server_.poll();
  EXPECT_EQ(received(0), kDeep - 2) << "the rest, alone";
  EXPECT_LE(passes, 3);
  check_data(0, kDeep, 0x30);
}

// Cut short in a pass's second poll (the receive CQ's: its messages were
// published after the send CQ's poll), the full queue comes back in the
// next pass's second poll, alone in that visit -- the other connection's
// next message was taken in the first -- and still executes one message,
// not its whole queue, in the pass that message is in.
TEST_F(ShmSharedBurstPassTest, AQueueCutInTheSecondPollStaysSharedWhenItComesBack) {
  rdma::Wc wc[64];
  server_.scq->poll(wc, 64);
  send(0, kDeep, 0x40);
  send(1, 1, 0xa0);
  int n = server_.cq->poll(wc, 64);
  server_.wcs.assign(wc, wc + n);
  EXPECT_EQ(received(1), 1);
  EXPECT_EQ(received(0), 1);
  server_.wcs.clear();
  send(1, 1, 0xa1);
  server_.poll();
  EXPECT_EQ(received(1), 1);
  EXPECT_EQ(received(0), 1) << "back from the cut in the pass's second poll: a shared burst, not its whole queue";
  check_data(0, 2, 0x40);
}

// Two full queues cut short wait on the cut list for that CQ's next poll;
// one of them destroyed there -- either, so first or second on it -- must
// leave it (ShmDevice::unready), or that poll would visit freed memory
// (ASan), and the other still gets the rest of its queue.
class ShmCutListTest : public ShmSharedBurstPassTest {
 protected:
  size_t server_ready() const { return static_cast<const shm::ShmDevice*>(server_.dev.get())->ready_qps(); }
  void destroy_cut(int lost) {
    send(0, kDeep, 0x50);
    send(1, kDeep, 0x60);
    rdma::Wc wc[64];
    server_.scq->poll(wc, 64);  // a visit among two: both queues cut short
    ASSERT_EQ(server_ready(), 2u) << "both QPs wait with work left";
    server_.qps[static_cast<size_t>(lost)].reset();
    EXPECT_EQ(server_ready(), 1u) << "the QP gone is still on the cut list";
    for (int k = 0; k < 8; ++k) server_.poll();
    EXPECT_EQ(server_ready(), 0u);
    const int kept = 1 - lost;
    EXPECT_EQ(received(kept), kDeep) << "the other queue, all of it";
    check_data(kept, kDeep, kept == 0 ? 0x50 : 0x60);
  }
};

TEST_F(ShmCutListTest, TheFirstQpDestroyedOnTheCutListLeavesIt) { destroy_cut(0); }
TEST_F(ShmCutListTest, TheSecondQpDestroyedOnTheCutListLeavesIt) { destroy_cut(1); }

// Alone, a QP's whole queue is one poll's work: one busy connection keeps
// its batches.
TEST_F(ShmSharedBurstTest, AQueueAloneIsTakenInOnePoll) {
  send(0, kDeep, 0x20);
  server_.poll();
  EXPECT_EQ(received(0), kDeep);
  check_data(0, kDeep, 0x20);
}

}  // namespace
}  // namespace tern
