// A hostile client's activity bits cost only its own connections
// (pmd/shm/shm_link.cc, docs/shm-driver.md "Finding the QPs with work"): a
// process that writes every word of its link half, all ones, again and
// again, names slots of connections it does not have; the server visits
// only the QPs that process owns, and another client's idle connections
// are still visited only by the safety net, its busy one on its own news.
// And its `watching` word (ShmWatchingHostileTest below).
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "../fuzz/shm_peer.h"
#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "shm/shm_internal.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;

constexpr int kVictims = 16;
constexpr uint32_t kMsg = shmtest::ManyQpEnd::kMsg;
constexpr uint32_t kSlots = 16;

class ShmLinkHostileTest : public shmtest::PairTest {
 protected:
  ShmLinkHostileTest() : PairTest("hostile", LogLevel::kError) {}
  void SetUp() override {
    PairTest::SetUp();
    // The well-behaved client's connections first: slots 0..15 of its link.
    connect_all(kVictims);
    // The hostile one, by hand (tests/fuzz/shm_peer.h): its own socket,
    // area and hello (device token 0: a link of its own), and the link the
    // ACCEPT brings, mapped writable.
    hsock_ = fuzz::connect_client(path_);
    ASSERT_GE(hsock_, 0);
    harea_fd_ = fuzz::make_memfd(shm::area_size(kSlots), fuzz::kGoodSeals, 0);
    harea_ = static_cast<uint8_t*>(
        mmap(nullptr, shm::area_size(kSlots), PROT_READ | PROT_WRITE, MAP_SHARED, harea_fd_, 0));
    ASSERT_NE(harea_, MAP_FAILED);
    fuzz::init_area(harea_, kSlots);
    shm::ShmMsg m = fuzz::hello_msg(kSlots);
    fuzz::send_raw(hsock_, &m, sizeof m, &harea_fd_, 1);
    accept_next(kVictims);
    ASSERT_TRUE(wait_for([&] { return hlink_.take_accept(hsock_); }, "the hostile client's ACCEPT"));
  }
  void TearDown() override {
    hlink_.unmap();
    if (harea_ != nullptr && harea_ != MAP_FAILED) munmap(harea_, shm::area_size(kSlots));
    if (harea_fd_ >= 0) close(harea_fd_);
    if (hsock_ >= 0) close(hsock_);
    PairTest::TearDown();
  }
  // Every word of the hostile half all ones: 4,096 slots named, one of
  // them its own.
  void scribble() {
    if (hlink_.map == nullptr) return;
    shm::ShmLinkHalf& h = hlink_.map->half[0];
    if (own_bit_only_) {
      // What an honest client does for a slot of word 0: the word's bit
      // alone, no summary bit (layout version 6).
      h.words[hlink_.slot / 64].fetch_or(uint64_t{1} << (hlink_.slot % 64), std::memory_order_release);
      return;
    }
    for (auto& w : h.words) w.store(~uint64_t{0}, std::memory_order_release);
    h.summary.store(~uint64_t{0}, std::memory_order_release);
  }
  void on_poll() override { scribble(); }
  // One message from the well-behaved client's QP 0 (signaled or not), and
  // the server's receive of it, with its bytes, within wait_for's bound;
  // `polls` counts the polls that took.
  void victim_message(uint8_t fill, bool signaled = false, int* polls = nullptr) {
    server_.wcs.clear();
    std::memset(client_.base(), fill, kMsg);
    Sge s = client_.sge(0, kMsg);
    SendWr w{};
    w.wr_id = 1, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
    if (signaled) w.flags = kWrSignaled;
    int err = 0;
    ASSERT_EQ(client_.qps[0]->post_send(&w, 1, &err), 1);
    ASSERT_TRUE(wait_for(
        [&] {
          if (polls != nullptr) ++*polls;
          for (const Wc& wc : server_.wcs)
            if (wc.opcode == WcOpcode::kRecv) return true;
          return false;
        },
        "the well-behaved client's message"));
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kRecv) {
        ASSERT_EQ(wc.status, WcStatus::kSuccess);
        ASSERT_EQ(wc.qp_num, server_.qps[0]->qp_num());
        EXPECT_EQ(server_.base()[(wc.wr_id & 0xffff) % 16 * kMsg], fill);
      }
    server_.post_recvs(server_.qps[0].get(), 0, 1);
  }
  bool own_bit_only_ = false;

  int hsock_ = -1, harea_fd_ = -1;
  uint8_t* harea_ = nullptr;
  fuzz::PeerLink hlink_;
};

TEST_F(ShmLinkHostileTest, BitsNameOnlyTheWritersConnections) {
  for (int k = 0; k < 200; ++k) poll_both();
  std::vector<uint64_t> before(kVictims + 1);
  for (int i = 0; i <= kVictims; ++i) before[i] = server_visits(i);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kMessages = 100;
  int polls = 0;
  for (int m = 0; m < kMessages; ++m) {
    victim_message(static_cast<uint8_t>(m), /*signaled=*/true, &polls);
    if (HasFatalFailure()) return;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The well-behaved client's idle connections: the safety net's visits
  // only (one per 10 ms, plus one for a net already due), whatever the
  // hostile bits said. Naming their slots in its own link must not reach them.
  const uint64_t allowed = static_cast<uint64_t>(ms / 10.0) + 2;
  uint64_t idle = 0;
  for (int i = 1; i < kVictims; ++i) idle += server_visits(i) - before[i];
  EXPECT_LE(idle, allowed * (kVictims - 1))
      << "over " << polls << " polls in " << ms << " ms, the idle QPs were visited " << idle << " times";
  // The hostile connection pays for its bits: a visit on (nearly) every poll.
  EXPECT_GT(server_visits(kVictims) - before[kVictims], static_cast<uint64_t>(polls) / 2);
  EXPECT_EQ(server_.qps[kVictims]->state(), QpState::kRts);
}

TEST_F(ShmLinkHostileTest, AWordZeroBitNeedsNoSummaryBit) {
  // The hand-made client sets its own bit in word 0 before every poll and
  // never a summary bit: each poll must still find it (a visit of its QP on
  // nearly every poll), not only the safety net's look every 10 ms.
  ASSERT_LT(hlink_.slot, 64u);
  own_bit_only_ = true;
  for (int k = 0; k < 20; ++k) poll_both();
  const uint64_t before = server_visits(kVictims);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kPolls = 200;
  for (int k = 0; k < kPolls; ++k) poll_both();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(server_visits(kVictims) - before, static_cast<uint64_t>(kPolls) / 2)
      << "a word-0 bit without its summary bit was seen only " << server_visits(kVictims) - before << " times in "
      << kPolls << " polls (" << ms << " ms)";
}


// The hostile client's `watching` word (docs/shm-driver.md, "Watched
// QPs"): the one word of its endpoint that tells us to skip its bit. A
// client that keeps it set, or flips it at random, and never polls must
// cost only its own connection: our posts to it return at once (a full
// send queue refuses more) and are flushed, each once, when we give up on
// it; the other connections' messages arrive and wake a sleeping server;
// its idle neighbours and the connection itself get no more visits than
// the safety net's. One that clears it must get its bit for every message
// published after that, and our Sends complete once it executes them.
class ShmWatchingHostileTest : public ShmLinkHostileTest {
 protected:
  shm::ShmEndpoint& hostile_ep() { return reinterpret_cast<shm::ShmEndpoint*>(harea_ + shm::kEndpointOffset)[0]; }
  // The hostile client's word, written before every poll of ours: always
  // set, or a random value (zero half the time).
  void on_poll() override {
    if (harea_ == nullptr) return;
    const uint32_t r = static_cast<uint32_t>(rng_());
    hostile_ep().watching.store(always_ ? 1u : (r & 1u) != 0 ? r : 0u, std::memory_order_relaxed);
  }
  Qp* hostile_qp() { return server_.qps[kVictims].get(); }
  // The server's k-th signaled 32-byte Send to server QP `conn`.
  int server_sends(int conn, uint64_t wr_id) {
    Sge s = server_.sge(kSendBuf, 32);
    SendWr w = shmtest::signaled_send(wr_id, &s);
    int err = 0;
    return server_.qps[static_cast<size_t>(conn)]->post_send(&w, 1, &err);
  }
  // Our bit for the hostile connection in the half of its link it reads.
  bool hostile_bit_set() {
    return (hlink_.map->half[1].words[hlink_.slot / 64].load(std::memory_order_acquire) >> (hlink_.slot % 64)) & 1u;
  }
  void clear_hostile_bit() {
    hlink_.map->half[1].words[hlink_.slot / 64].fetch_and(~(uint64_t{1} << (hlink_.slot % 64)));
  }
  // Server ring index `i`'s slot, as the hostile client sees it.
  const shm::ShmDesc* server_slot(uint32_t i) {
    auto* slots = reinterpret_cast<const shm::ShmDesc*>(harea_ + shm::kSlotsOffset);
    return slots + kSlots + (i & (kSlots - 1));
  }
  shm::ShmRing& server_ring() { return reinterpret_cast<shm::ShmRing*>(harea_ + shm::kRingOffset)[1]; }
  int completions(uint64_t wr_id, WcStatus* status = nullptr) {
    int n = 0;
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kSend && wc.wr_id == wr_id) {
        ++n;
        if (status != nullptr) *status = wc.status;
      }
    return n;
  }
  void never_polls(bool always);

  static constexpr size_t kSendBuf = 2u << 20;
  bool always_ = true;
  std::mt19937_64 rng_{2026};
};

// What a client that never polls, whatever its word says, may not cost us.
void ShmWatchingHostileTest::never_polls(bool always) {
  always_ = always;
  // A thread writes the word too, between and during our polls and our
  // sleep; stopped however the test ends.
  std::atomic<bool> stop{false};
  std::thread flipper([&, always] {
    std::mt19937 r(7);
    while (!stop.load(std::memory_order_relaxed)) {
      hostile_ep().watching.store(always ? 1u : r() & 1u, std::memory_order_relaxed);
      std::this_thread::yield();
    }
  });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop, flipper};
  std::vector<uint64_t> before(kVictims + 1);
  for (int i = 0; i <= kVictims; ++i) before[i] = server_visits(i);
  const auto t0 = std::chrono::steady_clock::now();
  // The well-behaved client's messages still arrive (and the server
  // comes to watch its QP 0).
  for (int m = 0; m < 50; ++m) victim_message(static_cast<uint8_t>(m));
  // A sleeping server is still woken by them.
  const int sfd = server_.dev->wait_fd();
  ASSERT_GE(sfd, 0);
  ASSERT_GE(client_.dev->wait_fd(), 0);
  client_.poll();
  ASSERT_TRUE(server_.cq->arm().is_ok());
  ASSERT_TRUE(server_.dev->arm_wait().is_ok());
  server_.wcs.clear();
  server_.poll();  // the protocol's second look: nothing yet
  std::memset(client_.base(), 0x5a, kMsg);
  Sge s = client_.sge(0, kMsg);
  SendWr w{};
  w.wr_id = 2, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
  int err = 0;
  ASSERT_EQ(client_.qps[0]->post_send(&w, 1, &err), 1);
  client_.poll();  // its post's visit: the WAKE check
  pollfd p{sfd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 2000), 1) << "the server slept through the well-behaved client's message";
  server_.dev->ack_wait();
  client_.dev->ack_wait();
  ASSERT_TRUE(wait_for([&] { return !server_.wcs.empty(); }, "the message that woke the server"));
  server_.post_recvs(server_.qps[0].get(), 0, 1);
  // Our Sends to the client that never polls: each post returns at once,
  // accepted until its send queue is full (EAGAIN), none of them waiting
  // for it.
  int posted = 0;
  while (posted < 1000 && server_sends(kVictims, 1000 + static_cast<uint64_t>(posted)) == 1) ++posted;
  EXPECT_GT(posted, 0);
  EXPECT_LT(posted, 1000) << "a full send queue must refuse more";
  // Meanwhile the other connections: the server's Sends to the
  // well-behaved client complete, its messages arrive.
  client_.post_recvs(client_.qps[0].get(), 0, 4);
  for (int k = 0; k < 4; ++k) ASSERT_EQ(server_sends(0, 500 + static_cast<uint64_t>(k)), 1);
  ASSERT_TRUE(wait_for(
      [&] {
        for (int k = 0; k < 4; ++k)
          if (completions(500 + static_cast<uint64_t>(k)) != 1) return false;
        return true;
      },
      "the server's Sends to the well-behaved client"));
  for (int m = 0; m < 20; ++m) victim_message(static_cast<uint8_t>(100 + m));
  // The well-behaved client's idle connections: the safety net's visits
  // only (one per 10 ms, plus one for a net already due), as if the
  // hostile client were not there.
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  uint64_t idle = 0;
  for (int i = 1; i < kVictims; ++i) idle += server_visits(i) - before[i];
  EXPECT_LE(idle, (static_cast<uint64_t>(ms / 10.0) + 2) * (kVictims - 1)) << "in " << ms << " ms";
  // Nor does the hostile connection itself get more than an idle one's
  // visits and one for our posts: a send queue it never drains is not
  // looked at on every poll.
  EXPECT_LE(server_visits(kVictims) - before[kVictims], static_cast<uint64_t>(ms / 10.0) + 4) << "in " << ms << " ms";
  // Ours to the hostile client complete when we give up on it (as the
  // engine does when its keepalive times out): every one flushed, once.
  for (int k = 0; k < posted; ++k) EXPECT_EQ(completions(1000 + static_cast<uint64_t>(k)), 0);
  ASSERT_TRUE(server_.dev->disconnect(hostile_qp()).is_ok());
  ASSERT_TRUE(wait_for(
      [&] {
        for (int k = 0; k < posted; ++k)
          if (completions(1000 + static_cast<uint64_t>(k)) == 0) return false;
        return true;
      },
      "the flushes of the Sends to the hostile client"));
  for (int k = 0; k < posted; ++k) {
    WcStatus st = WcStatus::kSuccess;
    EXPECT_EQ(completions(1000 + static_cast<uint64_t>(k), &st), 1);
    EXPECT_EQ(st, WcStatus::kWrFlushErr);
  }
}

TEST_F(ShmWatchingHostileTest, AWordAlwaysSetThatNeverPollsCostsOnlyItsConnection) { never_polls(true); }

TEST_F(ShmWatchingHostileTest, AWordFlippedAtRandomThatNeverPollsCostsOnlyItsConnection) { never_polls(false); }

TEST_F(ShmWatchingHostileTest, APeerThatClearsWatchingGetsItsBitForEveryMessageAfter) {
  // No polls of ours between the hostile client's writes and our posts
  // (post_send publishes a 32-byte Send at once): what each post saw is
  // exactly what the word held.
  always_ = false;
  const uint64_t skipped0 = shmtest::counter(hostile_qp()->stats(), "bits_skipped");
  uint64_t skips = 0;
  for (uint32_t i = 0; i < 200; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng_());
    const uint32_t word = (r & 1u) != 0 ? (r | 1u) : 0u;
    hostile_ep().watching.store(word, std::memory_order_relaxed);
    clear_hostile_bit();  // as its poll takes the bits it read
    ASSERT_EQ(server_sends(kVictims, 2000 + i), 1);
    // Published in the slot the client reads, whatever the word said.
    ASSERT_EQ(shm::seq_word(server_slot(i)).load(std::memory_order_acquire), shm::slot_seq(i, 4));
    if (word == 0) {
      EXPECT_TRUE(hostile_bit_set()) << "message " << i << " published after the client stopped watching, no bit";
    } else {
      ++skips;  // the client said it watches: its own peek finds the slot
    }
    // The client executes it and sets its bit for us (the Send was
    // signaled): our completion comes, once.
    server_ring().cons.store(i + 1, std::memory_order_release);
    hlink_.notify();
    ASSERT_TRUE(wait_for([&] { return completions(2000 + i) == 1; }, "our Send's completion"));
  }
  EXPECT_EQ(shmtest::counter(hostile_qp()->stats(), "bits_skipped") - skipped0, skips);
  for (uint32_t i = 0; i < 200; ++i) {
    WcStatus st = WcStatus::kGeneralErr;
    EXPECT_EQ(completions(2000 + i, &st), 1);
    EXPECT_EQ(st, WcStatus::kSuccess);
  }
}

}  // namespace
}  // namespace tern
