// BulkShares (lib/engine/bulk_share.h) driven directly: the rules a call of
// a peer meets when it asks for bulk-pool memory, and the order in which
// the queue serves waiting peers.
#include <gtest/gtest.h>

#include <vector>

#include "engine/bulk_share.h"

namespace tern::rpc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A pool of 8 MiB with a 1 MiB reserve and 1 MiB quanta.
struct Shares : ::testing::Test {
  BulkShares s{8 * kMiB, 1 * kMiB, 1 * kMiB};
  std::vector<SrvCall> calls = std::vector<SrvCall>(16);
  size_t used = 0;
  size_t free_bytes() const { return s.capacity() - used; }
  void take(PeerShare* p, size_t n) {
    s.charge(p, n);
    used += n;
  }
  SrvCall* wait(PeerShare* p, int i, size_t need) {
    calls[i].pool_need = need;
    s.enqueue(p, &calls[i]);
    return &calls[i];
  }
};

TEST_F(Shares, ALonePeerBorrowsAllButTheReserve) {
  PeerShare* a = s.attach("pid 1");
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(s.may_take(a, kMiB, free_bytes(), false)) << i;
    take(a, kMiB);
  }
  EXPECT_FALSE(s.may_take(a, kMiB, free_bytes(), false)) << "it took the reserve";
  // A peer holding nothing is served from the reserve at once.
  PeerShare* b = s.attach("pid 2");
  EXPECT_TRUE(s.may_take(b, 64 << 10, free_bytes(), false));
  s.credit(a, 7 * kMiB);
  s.detach(a);
  s.detach(b);
  EXPECT_EQ(s.peers(), 0u);
}

TEST_F(Shares, APeerBeyondItsShareWaitsWhileAnotherWithinItsShareWaits) {
  PeerShare* a = s.attach("hog");
  PeerShare* b = s.attach("victim");
  take(a, 7 * kMiB);
  take(b, kMiB);  // the pool is full
  // Both wait: a beyond its share (4 MiB of 8 between two), b within it.
  wait(a, 0, kMiB);
  wait(b, 1, kMiB);
  EXPECT_EQ(s.share_of(a), 4 * kMiB);
  // Whatever the round robin's order, b goes first.
  EXPECT_EQ(s.pick(), b);
  s.dequeue(b, &calls[1], true);
  // Only a waits now: it is served, but borrows only beyond the reserve.
  EXPECT_EQ(s.pick(), a);
  used -= kMiB, s.credit(b, kMiB);  // b gave back 1 MiB: 1 MiB free, all of it the reserve
  EXPECT_FALSE(s.may_take(a, kMiB, free_bytes(), true));
  // A new call of b's, within its share, does not queue behind a hog.
  EXPECT_TRUE(s.may_take(b, kMiB, free_bytes(), false));
  // A new call of a's goes behind its own waiting call.
  EXPECT_FALSE(s.may_take(a, 4096, free_bytes(), false));
  s.dequeue(a, &calls[0], false);
  s.credit(a, 7 * kMiB);
  s.detach(a);
  s.detach(b);
}

TEST_F(Shares, WaitingPeersAreServedRoundRobinInBytes) {
  // Three peers within their shares, each with calls waiting: a with big
  // calls, b and c with small ones. Per turn each gets about a quantum.
  PeerShare* a = s.attach("a");
  PeerShare* b = s.attach("b");
  PeerShare* c = s.attach("c");
  int k = 0;
  for (int i = 0; i < 3; ++i) wait(a, k++, kMiB - 4096);
  for (int i = 0; i < 6; ++i) wait(b, k++, 256 << 10);
  for (int i = 0; i < 6; ++i) wait(c, k++, 256 << 10);
  std::vector<PeerShare*> order;
  while (s.any_waiting()) {
    PeerShare* p = s.pick();
    order.push_back(p);
    s.dequeue(p, p->waiting.front(), true);
  }
  ASSERT_EQ(order.size(), 15u);
  // Each turn gives a peer a quantum's worth: one of a's calls, three of
  // b's or c's. Bytes, not calls, are shared.
  std::vector<PeerShare*> want = {a, b, b, b, c, c, c, a, b, b, b, c, c, c, a};
  EXPECT_EQ(order, want);
  for (PeerShare* p : {a, b, c}) s.detach(p);
  EXPECT_EQ(s.waiters(), 0u);
}

}  // namespace
}  // namespace tern::rpc
