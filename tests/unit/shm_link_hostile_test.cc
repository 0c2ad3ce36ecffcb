// A hostile client's activity bits cost only its own connections
// (pmd/shm/shm_link.cc, docs/shm-driver.md "Finding the QPs with work"): a
// process that writes every word of its link half, all ones, again and
// again, names slots of connections it does not have; the server visits
// only the QPs that process owns, and another client's idle connections
// are still visited only by the safety net, its busy one on its own news.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>

#include "../fuzz/shm_peer.h"
#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
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
    server_.wcs.clear();
    std::memset(client_.base(), static_cast<uint8_t>(m), kMsg);
    Sge s = client_.sge(0, kMsg);
    SendWr w{};
    w.wr_id = 1, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend, w.flags = kWrSignaled;
    int err = 0;
    ASSERT_EQ(client_.qps[0]->post_send(&w, 1, &err), 1);
    ASSERT_TRUE(wait_for(
        [&] {
          ++polls;
          for (const Wc& wc : server_.wcs)
            if (wc.opcode == WcOpcode::kRecv) return true;
          return false;
        },
        "the well-behaved client's message"));
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kRecv) {
        ASSERT_EQ(wc.status, WcStatus::kSuccess);
        ASSERT_EQ(wc.qp_num, server_.qps[0]->qp_num());
        server_.post_recvs(server_.qps[0].get(), 0, 1);
      }
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

}  // namespace
}  // namespace tern
