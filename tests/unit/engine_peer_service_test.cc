// PeerService (lib/engine/peer_service.h) driven directly: the order in
// which held receives of several peers are served, pass by pass, and that a
// connection's held receives can be taken out alone (before it is reclaimed).
#include <gtest/gtest.h>

#include <vector>

#include "engine/peer_service.h"

namespace tern::rpc {
namespace {

// Connections are only compared, never used: distinct fake addresses.
ConnBase* conn(uintptr_t n) { return reinterpret_cast<ConnBase*>(n * 64); }

struct Svc : ::testing::Test {
  PeerService s{256, 1};
  ServiceQueue flood, good, third;
  uint32_t next = 0;
  uint32_t hold(ServiceQueue* p, ConnBase* c) {
    rdma::Wc wc{};
    wc.wr_id = next;
    EXPECT_TRUE(s.hold(p, next, wc, c));
    return next++;
  }
  std::vector<uint32_t> plan() {
    const uint32_t n = s.plan(false, nullptr);
    return std::vector<uint32_t>(s.order(), s.order() + n);
  }
};

TEST_F(Svc, OnePeerIsServedWholeAndInOrder) {
  for (int i = 0; i < 20; ++i) hold(&flood, conn(1 + i % 3));
  EXPECT_EQ(plan(), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.peers(), 0u);
}

TEST_F(Svc, AnotherPeersCallWaitsBehindOneFloodCallNotAll) {
  // 16 calls of a flooding peer arrived first, then one of another peer.
  for (int i = 0; i < 16; ++i) hold(&flood, conn(1));
  const uint32_t g = hold(&good, conn(2));
  auto first = plan();
  // One round: one call of each, and the pass ends there.
  ASSERT_EQ(first, (std::vector<uint32_t>{0, g}));
  EXPECT_EQ(s.held(), 15u);
  // The flood alone now: the rest in the next pass, in order.
  auto second = plan();
  ASSERT_EQ(second.size(), 15u);
  for (uint32_t i = 0; i < 15; ++i) EXPECT_EQ(second[i], i + 1);
  EXPECT_TRUE(s.empty());
}

TEST_F(Svc, RoundsGoOnWhileTwoPeersHaveCalls) {
  for (int i = 0; i < 3; ++i) hold(&flood, conn(1));   // 0 1 2
  for (int i = 0; i < 2; ++i) hold(&good, conn(2));    // 3 4
  for (int i = 0; i < 5; ++i) hold(&third, conn(3));   // 5..9
  // Rounds of one each: (0 3 5) (1 4 6) (2 7), then `third` alone keeps 8 9.
  EXPECT_EQ(plan(), (std::vector<uint32_t>{0, 3, 5, 1, 4, 6, 2, 7}));
  EXPECT_EQ(s.held(), 2u);
  EXPECT_EQ(s.peers(), 1u);
  EXPECT_EQ(plan(), (std::vector<uint32_t>{8, 9}));
}

TEST_F(Svc, ALargerQuantumServesThatManyPerRound) {
  PeerService q{64, 2};
  rdma::Wc wc{};
  for (uint32_t i = 0; i < 6; ++i) ASSERT_TRUE(q.hold(&flood, i, wc, conn(1)));
  ASSERT_TRUE(q.hold(&good, 6, wc, conn(2)));
  const uint32_t n = q.plan(false, nullptr);
  EXPECT_EQ(std::vector<uint32_t>(q.order(), q.order() + n), (std::vector<uint32_t>{0, 1, 6}));
}

TEST_F(Svc, ReleasingAConnectionTakesOnlyItsReceivesAndKeepsTheRestInOrder) {
  hold(&flood, conn(1));  // 0
  hold(&flood, conn(4));  // 1: another connection of the same peer
  hold(&flood, conn(1));  // 2
  hold(&good, conn(2));   // 3
  hold(&flood, conn(4));  // 4
  uint32_t n = s.release(conn(4));
  EXPECT_EQ(std::vector<uint32_t>(s.order(), s.order() + n), (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(s.held(), 3u);
  // The rest is intact: round (0 3), then flood's 2 alone is held.
  EXPECT_EQ(plan(), (std::vector<uint32_t>{0, 3}));
  EXPECT_EQ(plan(), (std::vector<uint32_t>{2}));
  // A peer whose last receive was released leaves the ring.
  hold(&good, conn(2));
  n = s.release(conn(2));
  EXPECT_EQ(n, 1u);
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.peers(), 0u);
  // And everything at once (shutdown).
  hold(&flood, conn(1));
  hold(&good, conn(2));
  EXPECT_EQ(s.release(nullptr), 2u);
  EXPECT_TRUE(s.empty());
}

TEST_F(Svc, AnIndexBeyondTheBuffersIsNotHeld) {
  rdma::Wc wc{};
  EXPECT_FALSE(s.hold(&flood, 256, wc, conn(1)));
  EXPECT_TRUE(s.empty());
}

}  // namespace
}  // namespace tern::rpc
