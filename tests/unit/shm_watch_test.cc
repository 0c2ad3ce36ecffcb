// pmd/shm watched QPs (shm_link.cc, "Watched QPs"): a QP that executed
// inbound descriptors joins its device's watched set (at most kMaxWatched),
// whose next slots every CQ poll peeks at, and its peer's posts then skip
// the link's bit. What must hold: a message published while the consumer
// lets go of the QP is not lost (Dekker's pair: the producer's fence and
// second look at the watching word, the consumer's fence and last peek), a
// consumer asleep is still woken by its producer's WAKE, and the set stays
// bounded. The safety net is off in these tests (ShmCq::disable_safety_net),
// so a lost message shows as a hang, not as a 10 ms delay.
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "shm/shm_internal.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;
using shmtest::counter;

class ShmWatchTest : public shmtest::PairTest {
 protected:
  ShmWatchTest() : PairTest("watch") {}

  void connect(int n) {
    connect_all(n);
    for (shmtest::ManyQpEnd* e : {&server_, &client_}) static_cast<shm::ShmCq*>(e->cq.get())->disable_safety_net();
    server_.wcs.clear();
    client_.wcs.clear();
  }
  shm::ShmDevice* sdev() { return static_cast<shm::ShmDevice*>(server_.dev.get()); }
  // An unsignaled 32-byte Send from client QP i carrying `value`.
  void client_sends(int i, uint64_t value) {
    Sge s = client_.sge(kSendBuf + static_cast<size_t>(i) * 64, 32);
    std::memcpy(client_.base() + kSendBuf + static_cast<size_t>(i) * 64, &value, sizeof value);
    SendWr w{};
    w.wr_id = value, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
    int err = 0;
    ASSERT_EQ(client_.qps[static_cast<size_t>(i)]->post_send(&w, 1, &err), 1);
  }
  // Receive completions of server QP i so far.
  int received(int i) {
    int n = 0;
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kRecv && wc.status == WcStatus::kSuccess && (wc.wr_id >> 16) == static_cast<uint64_t>(i))
        ++n;
    return n;
  }
  uint64_t skipped(int i) { return counter(client_.qps[static_cast<size_t>(i)]->stats(), "bits_skipped"); }
  uint64_t watches(int i) { return counter(server_.qps[static_cast<size_t>(i)]->stats(), "watches"); }

  static constexpr size_t kSendBuf = 1u << 20;
};

TEST_F(ShmWatchTest, QpWithWorkIsWatchedAndItsPeerSkipsTheLink) {
  connect(1);
  client_sends(0, 1);
  server_.poll();  // found through the link
  ASSERT_EQ(received(0), 1);
  EXPECT_EQ(sdev()->watched_qps(), 1u);
  EXPECT_EQ(watches(0), 1u);
  EXPECT_EQ(skipped(0), 0u);
  // Watched: the next Send sets no bit, and the server's poll finds it by
  // its peek.
  client_sends(0, 2);
  EXPECT_EQ(skipped(0), 1u);
  server_.poll();
  EXPECT_EQ(received(0), 2);
  EXPECT_EQ(watches(0), 1u);
}

TEST_F(ShmWatchTest, UnwatchLosesNoMessagePublishedBeforeIt) {
  connect(1);
  client_sends(0, 1);
  server_.poll();
  ASSERT_EQ(sdev()->watched_qps(), 1u);
  // Published while watched (no bit), then the server lets go: its last
  // peek must queue the QP, for no bit and no later peek will.
  client_sends(0, 2);
  ASSERT_EQ(skipped(0), 1u);
  sdev()->unwatch_all();
  EXPECT_EQ(sdev()->watched_qps(), 0u);
  server_.poll();
  EXPECT_EQ(received(0), 2) << "a message published while the QP was watched was lost when it was let go";
  // Watched again by the visit that took it; after an unwatch with nothing
  // published the producer sets the bit again.
  EXPECT_EQ(sdev()->watched_qps(), 1u);
  sdev()->unwatch_all();
  client_sends(0, 3);
  EXPECT_EQ(skipped(0), 1u);
  server_.poll();
  EXPECT_EQ(received(0), 3);
}

TEST_F(ShmWatchTest, TheSetIsBoundedAndStaleMembersMakeRoom) {
  const int n = static_cast<int>(shm::kMaxWatched) + 1;
  connect(n);
  for (int i = 0; i < n - 1; ++i) client_sends(i, 1);
  server_.poll();
  EXPECT_EQ(sdev()->watched_qps(), shm::kMaxWatched);
  // QP n-1 finds work while the members are fresh: it stays with the link.
  client_sends(n - 1, 1);
  server_.poll();
  EXPECT_EQ(received(n - 1), 1);
  EXPECT_EQ(watches(n - 1), 0u);
  // A member that executed nothing between two sweeps (the safety net's
  // clock makes them) is quiet, and makes room.
  sdev()->sweep_watched();
  sdev()->sweep_watched();
  client_sends(n - 1, 2);
  server_.poll();
  EXPECT_EQ(received(n - 1), 2);
  EXPECT_EQ(watches(n - 1), 1u);
  EXPECT_EQ(sdev()->watched_qps(), shm::kMaxWatched);
  // The one let go is found through the link again.
  for (int i = 0; i < n - 1; ++i) client_sends(i, 2);
  server_.poll();
  for (int i = 0; i < n - 1; ++i) EXPECT_EQ(received(i), 2) << "QP " << i;
}

TEST_F(ShmWatchTest, QuietMemberIsLetGoAndFoundThroughTheLinkAgain) {
  connect(1);
  client_sends(0, 1);
  server_.poll();
  ASSERT_EQ(sdev()->watched_qps(), 1u);
  for (uint32_t k = 0; k <= shm::kWatchQuietSweeps; ++k) sdev()->sweep_watched();
  EXPECT_EQ(sdev()->watched_qps(), 0u);
  client_sends(0, 2);
  EXPECT_EQ(skipped(0), 0u);
  server_.poll();
  EXPECT_EQ(received(0), 2);
}

TEST_F(ShmWatchTest, QpDestroyedOrInErrorLeavesTheSet) {
  connect(2);
  client_sends(0, 1);
  client_sends(1, 1);
  server_.poll();
  ASSERT_EQ(sdev()->watched_qps(), 2u);
  server_.qps[0].reset();
  EXPECT_EQ(sdev()->watched_qps(), 1u);
  ASSERT_TRUE(server_.dev->disconnect(server_.qps[1].get()).is_ok());
  server_.poll();
  EXPECT_EQ(sdev()->watched_qps(), 0u);
}

TEST_F(ShmWatchTest, SleepingConsumerIsWokenForAWatchedQp) {
  connect(1);
  client_sends(0, 1);
  client_.poll();  // its post's visit (the WAKE check of that post)
  server_.poll();
  ASSERT_EQ(sdev()->watched_qps(), 1u);
  const int sfd = server_.dev->wait_fd();
  ASSERT_GE(sfd, 0);
  ASSERT_GE(client_.dev->wait_fd(), 0);
  ASSERT_TRUE(server_.cq->arm().is_ok());
  ASSERT_TRUE(server_.dev->arm_wait().is_ok());
  server_.poll();  // the protocol's second look: nothing yet
  ASSERT_EQ(received(0), 1);
  // The client's post skips the bit; its visit's WAKE check must still
  // see the server armed and wake it.
  const uint64_t wakes = counter(client_.qps[0]->stats(), "wakes_sent");
  client_sends(0, 2);
  EXPECT_EQ(skipped(0), 1u);
  client_.poll();
  EXPECT_EQ(counter(client_.qps[0]->stats(), "wakes_sent"), wakes + 1);
  pollfd p{sfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "the server slept through a message on its watched QP";
  server_.dev->ack_wait();
  client_.dev->ack_wait();
  server_.poll();
  EXPECT_EQ(received(0), 2);
}

// A burst of posts between two of the producer's visits (a server's pass
// answering a deep queue's calls) pays one note: the first post's fence
// and look at `watching`; the rest leave theirs to the visit's ring_peer.
// The peer's peek still finds every message, in order.
TEST_F(ShmWatchTest, BurstBetweenVisitsPaysOneNote) {
  connect(1);
  client_sends(0, 1);
  client_.poll();
  server_.poll();
  ASSERT_EQ(sdev()->watched_qps(), 1u);
  for (uint64_t v = 2; v <= 9; ++v) client_sends(0, v);
  EXPECT_EQ(skipped(0), 1u) << "each post of the burst made its own note";
  server_.poll();
  ASSERT_EQ(received(0), 9);
  uint64_t expect = 1;
  for (const Wc& wc : server_.wcs) {
    if (wc.opcode != WcOpcode::kRecv) continue;
    uint64_t v = 0;
    std::memcpy(&v, server_.base() + (wc.wr_id & 0xffff) * shmtest::ManyQpEnd::kMsg, sizeof v);
    EXPECT_EQ(v, expect++) << "out of order";
  }
  // The visit makes the burst's one deferred note: the peer still watches.
  client_.poll();
  EXPECT_EQ(skipped(0), 2u);
  // And the next burst starts with a note of its own.
  client_sends(0, 10);
  EXPECT_EQ(skipped(0), 3u);
}

// The deferred note's other half: a peer that let go of the QP without its
// last peek finding the burst's later messages (what a race with the
// producer's plain load of `watching` leaves) gets our bit at our next
// visit, and finds them.
TEST_F(ShmWatchTest, DeferredNoteSetsTheBitForAPeerThatLetGo) {
  connect(1);
  client_sends(0, 1);
  client_.poll();
  server_.poll();
  ASSERT_EQ(sdev()->watched_qps(), 1u);
  client_sends(0, 2);
  client_sends(0, 3);  // deferred: the peer watched at the note before it
  ASSERT_EQ(skipped(0), 1u);
  // Let go with no peek: as if the peer's last peek ran before our stores
  // drained.
  sdev()->drop_watch(static_cast<shm::ShmQp*>(server_.qps[0].get()));
  server_.poll();
  ASSERT_EQ(received(0), 1) << "found without its bit: the test no longer shows the race's outcome";
  client_.poll();  // the deferred note: the peer no longer watches, so our bit
  EXPECT_EQ(skipped(0), 1u);
  server_.poll();
  EXPECT_EQ(received(0), 3) << "the burst's deferred messages were lost when the peer let go";
}

// Two threads: the client posts numbered Sends, each once the server has
// received the one before (so the next message cannot carry a lost one's
// bit: a loss is a hang), the server polls and keeps letting go of the QP
// (which its next visit watches again). Every message must arrive exactly
// once, in order, with no safety net to rescue one whose notification was
// lost.
TEST_F(ShmWatchTest, UnwatchRacingPostsLosesNothing) {
  connect(1);
  // Fewer under TSan, which runs it ~5x slower (~15 s for 20,000 on a
  // loaded 2-core machine).
#if defined(__SANITIZE_THREAD__)
  constexpr uint64_t kMessages = 4000;
#else
  constexpr uint64_t kMessages = 20000;
#endif
  std::atomic<bool> failed{false};
  std::atomic<uint64_t> got{0};
  std::thread producer([&] {
    Qp* qp = client_.qps[0].get();
    uint64_t next = 1;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (next <= kMessages && !failed.load(std::memory_order_relaxed)) {
      Wc wc[16];
      client_.cq->poll(wc, 16);  // retires what the server executed
      if (std::chrono::steady_clock::now() > end) break;
      if (got.load(std::memory_order_acquire) != next - 1) continue;
      Sge s = client_.sge(kSendBuf, 32);
      std::memcpy(client_.base() + kSendBuf, &next, sizeof next);
      SendWr w{};
      w.wr_id = next, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
      int err = 0;
      if (qp->post_send(&w, 1, &err) == 1) ++next;
    }
  });
  Qp* qp = server_.qps[0].get();
  uint64_t expect = 1;
  uint64_t polls = 0;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (expect <= kMessages && std::chrono::steady_clock::now() < end) {
    Wc wc[16];
    int n = server_.cq->poll(wc, 16);
    for (int k = 0; k < n; ++k) {
      ASSERT_EQ(wc[k].status, WcStatus::kSuccess);
      uint64_t v = 0;
      const size_t off = (wc[k].wr_id & 0xffff) % 16 * shmtest::ManyQpEnd::kMsg;
      std::memcpy(&v, server_.base() + off, sizeof v);
      if (v != expect) failed = true;
      ASSERT_EQ(v, expect) << "out of order or duplicated";
      ++expect;
      got.store(v, std::memory_order_release);
      Sge s = server_.sge(off, shmtest::ManyQpEnd::kMsg);
      RecvWr r{wc[k].wr_id, &s, 1};
      int err = 0;
      ASSERT_EQ(qp->post_recv(&r, 1, &err), 1);
    }
    // Let go on most polls; the next visit with work watches it again.
    if ((++polls & 3) != 0) sdev()->unwatch_all();
  }
  failed = expect <= kMessages;
  producer.join();
  EXPECT_EQ(expect, kMessages + 1) << "a message was lost (the server stopped finding it)";
  EXPECT_GT(counter(client_.qps[0]->stats(), "bits_skipped"), 0u);
  EXPECT_GT(counter(qp->stats(), "watches"), 1u);
}

}  // namespace
}  // namespace tern
