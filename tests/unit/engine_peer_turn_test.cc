// PeerService (lib/engine/peer_service.h): whose turn a pass serves when
// calls of several peers are held -- the peer served last (in the last turn,
// or in a batch the engine served at once outside the order) sits out the
// pass of peers that waited, and has the next turn; peers that all waited,
// or were all served last, share the pass in rounds.
#include <gtest/gtest.h>

#include <vector>

#include "engine/peer_service.h"

namespace tern::rpc {
namespace {

ConnBase* conn(uintptr_t n) { return reinterpret_cast<ConnBase*>(n * 64); }

struct Turn : ::testing::Test {
  PeerService s{256, 1};
  ServiceQueue flood, good, third;
  uint32_t next = 0;
  uint32_t hold(ServiceQueue* p, ConnBase* c) {
    rdma::Wc wc{};
    EXPECT_TRUE(s.hold(p, next, wc, c));
    return next++;
  }
  std::vector<uint32_t> plan(bool batch_since = false, const ServiceQueue* batch_peer = nullptr) {
    const uint32_t n = s.plan(batch_since, batch_peer);
    return std::vector<uint32_t>(s.order(), s.order() + n);
  }
};

TEST_F(Turn, APeerServedAloneLastSitsOutThePassOfOneThatWaited) {
  // The flooder was served alone (a batch outside the order); then 16 of its
  // calls and one of another peer are held.
  for (int i = 0; i < 16; ++i) hold(&flood, conn(1));
  const uint32_t g = hold(&good, conn(2));
  EXPECT_EQ(plan(true, &flood), (std::vector<uint32_t>{g}));
  EXPECT_EQ(s.held(), 16u);
  // Its turn next: alone now, all of it.
  auto second = plan();
  ASSERT_EQ(second.size(), 16u);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(second[i], i);
  EXPECT_TRUE(s.empty());
}

TEST_F(Turn, TurnsAlternateBetweenAPeerThatWaitedAndTheOneServedLast) {
  for (int i = 0; i < 4; ++i) hold(&flood, conn(1));  // 0..3
  const uint32_t g1 = hold(&good, conn(2));
  EXPECT_EQ(plan(true, &flood), (std::vector<uint32_t>{g1}));
  // The good peer's next call: it was served last, the flooder waited.
  const uint32_t g2 = hold(&good, conn(2));
  EXPECT_EQ(plan(), (std::vector<uint32_t>{0}));
  // And back: the good peer waited one pass, behind one flood call.
  EXPECT_EQ(plan(), (std::vector<uint32_t>{g2}));
  EXPECT_EQ(plan(), (std::vector<uint32_t>{1, 2, 3}));
  EXPECT_TRUE(s.empty());
}

TEST_F(Turn, PeersThatWereAllServedLastShareThePassInRounds) {
  for (int i = 0; i < 3; ++i) hold(&flood, conn(1));  // 0 1 2
  for (int i = 0; i < 5; ++i) hold(&third, conn(3));  // 3..7
  // Nobody was served before: rounds, then `third` keeps 6 7.
  EXPECT_EQ(plan(), (std::vector<uint32_t>{0, 3, 1, 4, 2, 5}));
  // Both were served in that turn; the flooder's new calls meet third's
  // rest: rounds again (third first: it stayed at the front).
  hold(&flood, conn(1));  // 8
  hold(&flood, conn(1));  // 9
  EXPECT_EQ(plan(), (std::vector<uint32_t>{6, 8, 7, 9}));
  EXPECT_TRUE(s.empty());
}

TEST_F(Turn, ABatchOfAnUnknownPeerLeavesEveryPeerWaiting) {
  for (int i = 0; i < 3; ++i) hold(&flood, conn(1));  // 0 1 2
  const uint32_t g = hold(&good, conn(2));
  // A batch was served after the last turn, of no peer here (replies of a
  // client connection, or a connection since reclaimed): rounds.
  EXPECT_EQ(plan(true, nullptr), (std::vector<uint32_t>{0, g}));
  EXPECT_EQ(plan(), (std::vector<uint32_t>{1, 2}));
}

TEST_F(Turn, ThreePeersTheOneServedLastWaitsForTheOthersRound) {
  for (int i = 0; i < 3; ++i) hold(&flood, conn(1));  // 0 1 2
  const uint32_t g = hold(&good, conn(2));
  const uint32_t t = hold(&third, conn(3));
  EXPECT_EQ(plan(true, &flood), (std::vector<uint32_t>{g, t}));
  // Then the flooder, alone.
  EXPECT_EQ(plan(), (std::vector<uint32_t>{0, 1, 2}));
}

}  // namespace
}  // namespace tern::rpc
