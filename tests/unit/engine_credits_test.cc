// GrantPolicy (lib/engine/credits.h) with several peers: fair shares of the
// receive credits, borrowing when alone, the lend reserve, grants that come
// down to what a connection uses under contention -- and, under random
// sequences of admissions, calls, replies and departures of well-behaved
// clients with messages in flight both ways, the invariants: the grants
// never add up to more than the buffers the pool holds, each peer's count
// is the sum of its connections', and no call of a client that keeps within
// the last grant it read is ever refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/credits.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kAll = 0xffffffff;  // a credit request asking for everything

// A client connection that keeps every credit it is granted in use: calls
// until it holds its grant, then one is answered (the server's reply
// carries the next grant), as a client with a deep backlog does.
struct Saturating {
  ConnGrant g;
  uint32_t client_grant = 1;
  uint32_t wanted = kAll;
  void round(GrantPolicy& p) {
    while (g.unreplied < client_grant) ASSERT_TRUE(p.on_call(&g)) << "a call within the grant was refused";
    client_grant = p.grant_for_reply(&g, wanted);
    p.on_replied(&g);
  }
  // Its calls still outstanding are answered, one reply at a time.
  void drain(GrantPolicy& p) {
    while (g.unreplied > 0) {
      client_grant = p.grant_for_reply(&g, wanted);
      p.on_replied(&g);
    }
  }
};

uint32_t held_by(const GrantPolicy& p, const char* peer) {
  const PeerCredits* pc = p.peer(peer);
  return pc == nullptr ? 0 : pc->held;
}

// Found by tern-soak: a server call received on a connection whose loss was
// already being drained was answered after the connection left the policy;
// its reply's grant read the peer the connection no longer had (SIGSEGV).
TEST(PeerCredits, AReplyOnAConnectionThatLeftTouchesNothing) {
  GrantPolicy p(64, 32);
  ConnGrant gone, other;
  ASSERT_TRUE(p.admit(&gone, "a"));
  ASSERT_TRUE(p.admit(&other, "b"));
  ASSERT_TRUE(p.on_call(&gone));
  p.leave(&gone);
  const uint32_t free_before = p.free();
  EXPECT_EQ(p.grant_for_reply(&gone, kAll), 1u);
  p.on_replied(&gone);
  EXPECT_EQ(p.free(), free_before) << "a departed connection's reply changed the pool";
  EXPECT_EQ(p.peer("a"), nullptr);
  EXPECT_EQ(held_by(p, "b"), 1u);
}

TEST(PeerCredits, APeerAloneBorrowsTheIdleRestButNotTheLendReserve) {
  GrantPolicy p(256, 32);
  p.set_lend_reserve(32);
  std::vector<Saturating> hog(16);
  for (auto& c : hog) ASSERT_TRUE(p.admit(&c.g, "hog"));
  for (int r = 0; r < 40; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  EXPECT_EQ(held_by(p, "hog"), 256u - 32u) << "alone it takes every credit but the lend reserve";
  EXPECT_EQ(p.free(), 32u);
}

TEST(PeerCredits, APeerAloneWithoutALendReserveMayTakeThePool) {
  GrantPolicy p(256, 32);
  std::vector<Saturating> hog(16);
  for (auto& c : hog) ASSERT_TRUE(p.admit(&c.g, "hog"));
  for (int r = 0; r < 40; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  EXPECT_EQ(held_by(p, "hog"), 256u) << "work-conserving: nobody else wants credits";
}

TEST(PeerCredits, ANewcomerIsGrantedAtOnceFromTheLendReserveWhileTheHogIsIdle) {
  GrantPolicy p(256, 32);
  p.set_lend_reserve(32);
  std::vector<Saturating> hog(16);
  for (auto& c : hog) ASSERT_TRUE(p.admit(&c.g, "hog"));
  for (int r = 0; r < 40; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  // The hog goes quiet: nothing can lower its grants now. A second peer
  // arrives and asks for a full window.
  Saturating good;
  good.wanted = 32;
  ASSERT_TRUE(p.admit(&good.g, "good"));
  // The pool is contested (the hog wants more), so its grant follows its
  // use: it doubles with every round of calls that uses all of it.
  for (int r = 0; r < 6; ++r) ASSERT_NO_FATAL_FAILURE(good.round(p));
  EXPECT_EQ(good.g.granted, 32u) << "a busy newcomer is not granted its window";
  EXPECT_LE(held_by(p, "hog") + held_by(p, "good") + p.free(), 256u);
}

TEST(PeerCredits, APeerAskingForEverythingOnManyConnectionsGetsItsShareWhileAnotherWants) {
  GrantPolicy p(256, 32);
  p.set_lend_reserve(32);
  std::vector<Saturating> hog(16), good(8);
  for (auto& c : hog) ASSERT_TRUE(p.admit(&c.g, "hog"));
  for (int r = 0; r < 40; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  ASSERT_GT(held_by(p, "hog"), 128u);
  // A second peer that wants more than half the pool too (8 x 32), and both
  // keep every credit busy: the hog's grants come down by one per reply to
  // its share, the other's grow into what that frees.
  for (auto& c : good) {
    c.wanted = 32;
    ASSERT_TRUE(p.admit(&c.g, "good"));
  }
  for (int r = 0; r < 200; ++r) {
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
    for (auto& c : good) ASSERT_NO_FATAL_FAILURE(c.round(p));
  }
  const uint32_t share = p.share_of(p.peer("hog"));
  EXPECT_EQ(share, 128u);
  EXPECT_LE(held_by(p, "hog"), share) << "the hog keeps more than its share while another peer wants credits";
  EXPECT_GE(held_by(p, "good"), share - 8) << "the other peer did not get its share";
  EXPECT_EQ(held_by(p, "hog") + held_by(p, "good") + p.free(), 256u);
}

TEST(PeerCredits, CreditsBeyondAPeersShareComeDownToWhatItsConnectionsUse) {
  GrantPolicy p(256, 32);
  p.set_lend_reserve(32);
  std::vector<Saturating> hog(16);
  for (auto& c : hog) ASSERT_TRUE(p.admit(&c.g, "hog"));
  for (int r = 0; r < 40; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  ASSERT_EQ(held_by(p, "hog"), 224u);
  // A second peer, content with one credit: the hog is now beyond its
  // share (128), so its grants follow what it uses.
  ConnGrant quiet;
  ASSERT_TRUE(p.admit(&quiet, "quiet"));
  ASSERT_TRUE(p.on_call(&quiet));
  EXPECT_EQ(p.grant_for_reply(&quiet, 1), 1u);
  p.on_replied(&quiet);
  EXPECT_EQ(p.peers_wanting(), 1u) << "the hog still asks for more";
  // The hog's calls are answered, one reply at a time, as a client that
  // goes quiet: beyond its share, each reply lowers the grant by one once
  // the connection uses less than half of it -- so it goes quiet holding
  // about what it used, not all it borrowed.
  std::vector<uint32_t> before;
  for (auto& c : hog) before.push_back(c.g.granted);
  for (auto& c : hog) c.drain(p);
  for (size_t i = 0; i < hog.size(); ++i)
    if (before[i] >= 4) {
      EXPECT_LE(hog[i].g.granted, before[i] * 3 / 4) << "a quiet connection kept what it borrowed";
    }
  EXPECT_LE(held_by(p, "hog"), 224u * 3 / 4);
  // Alone again, it may borrow what is idle at once.
  p.leave(&quiet);
  for (int r = 0; r < 8; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  EXPECT_EQ(held_by(p, "hog"), 224u);
}

TEST(PeerCredits, WithinItsShareAGrantFollowsTheRequestNotTheUse) {
  // A server that answers each call as it arrives sees one outstanding
  // however deep the client's backlog: the request says what it wants.
  GrantPolicy p(256, 32);
  p.set_lend_reserve(32);
  std::vector<Saturating> hog(16);
  for (auto& c : hog) ASSERT_TRUE(p.admit(&c.g, "hog"));
  for (int r = 0; r < 40; ++r)
    for (auto& c : hog) ASSERT_NO_FATAL_FAILURE(c.round(p));
  ConnGrant c;
  ASSERT_TRUE(p.admit(&c, "client"));
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(p.on_call(&c));
    // (31 when the pool is out: then a grant follows use too, and the
    // credit it gives back is its own to take again at the next reply.)
    EXPECT_GE(p.grant_for_reply(&c, 32), 31u) << "round " << r;
    p.on_replied(&c);
  }
}

TEST(PeerCredits, APeerLeavingWithItsLastConnectionIsForgotten) {
  GrantPolicy p(16, 8);
  ConnGrant a, b;
  ASSERT_TRUE(p.admit(&a, "x"));
  ASSERT_TRUE(p.admit(&b, "x"));
  EXPECT_EQ(p.peers(), 1u);
  EXPECT_EQ(p.peer("x")->conns, 2u);
  p.leave(&a);
  EXPECT_EQ(p.peers(), 1u);
  p.leave(&b);
  p.leave(&b);  // twice: harmless
  EXPECT_EQ(p.peers(), 0u);
  EXPECT_EQ(p.free(), 16u);
}

// ---------------------------------------------------------------- random

// A well-behaved client connection with messages in flight both ways: calls
// sent and not yet received by the server, replies (each with its grant)
// sent and not yet read by the client.
struct Wire {
  ConnGrant g;
  std::string peer;
  uint32_t wanted = kAll;
  uint32_t client_grant = 1;  // the last grant the client read
  uint32_t in_flight = 0;     // its calls not yet answered, as it counts them
  uint32_t to_server = 0;     // calls on their way
  std::deque<uint32_t> to_client;  // replies on their way: their grants
};

void check_invariants(const GrantPolicy& p, const std::vector<std::unique_ptr<Wire>>& conns, uint32_t total) {
  uint64_t granted = 0;
  std::map<std::string, uint64_t> by_peer;
  std::map<std::string, uint32_t> hungry;
  for (const auto& w : conns) {
    ASSERT_TRUE(w->g.admitted);
    ASSERT_GE(w->g.granted, 1u);
    ASSERT_LE(w->g.granted, p.max_per_conn());
    ASSERT_LE(w->g.unreplied, w->g.granted);
    granted += w->g.granted;
    by_peer[w->peer] += w->g.granted;
    hungry[w->peer] += w->g.hungry ? 1 : 0;
  }
  ASSERT_LE(granted, total) << "the grants add up to more receive buffers than are posted";
  ASSERT_EQ(granted + p.free(), total) << "a credit was lost or made up";
  uint32_t wanting = 0;
  for (const auto& [k, n] : by_peer) {
    const PeerCredits* pc = p.peer(k);
    ASSERT_NE(pc, nullptr);
    ASSERT_EQ(pc->held, n) << k;
    ASSERT_EQ(pc->hungry, hungry[k]) << k;
    wanting += hungry[k] > 0;
  }
  ASSERT_EQ(p.peers(), by_peer.size());
  ASSERT_EQ(p.peers_wanting(), wanting);
}

TEST(PeerCredits, RandomSequencesKeepTheInvariants) {
  for (uint32_t seed = 1; seed <= 24; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
    const uint32_t total = 8 + pick(200);
    GrantPolicy p(total, 1 + pick(40));
    p.set_reserve(pick(8));
    p.set_lend_reserve(pick(total / 2 + 1));
    std::vector<std::unique_ptr<Wire>> conns;
    const char* names[] = {"a", "b", "c", "d", "e"};
    for (int step = 0; step < 6000; ++step) {
      const uint32_t op = pick(100);
      if (op < 4 || conns.empty()) {
        auto w = std::make_unique<Wire>();
        w->peer = names[pick(5)];
        w->wanted = pick(3) == 0 ? kAll : pick(48);
        if (p.admit(&w->g, w->peer)) conns.push_back(std::move(w));
      } else if (op < 7) {
        // The client goes away: its credits come back, whatever is in flight.
        const uint32_t i = pick(static_cast<uint32_t>(conns.size()));
        p.leave(&conns[i]->g);
        conns.erase(conns.begin() + i);
      } else {
        Wire& w = *conns[pick(static_cast<uint32_t>(conns.size()))];
        if (op < 35) {
          // The client sends a call if its last grant lets it.
          if (w.in_flight < w.client_grant) ++w.in_flight, ++w.to_server;
        } else if (op < 55) {
          // A call reaches the server: a client within the last grant it
          // read is never over the server's count.
          if (w.to_server > 0) {
            --w.to_server;
            ASSERT_TRUE(p.on_call(&w.g)) << "a call within the client's grant was refused (unreplied "
                                         << w.g.unreplied << ", granted " << w.g.granted << ")";
          }
        } else if (op < 80) {
          // The server answers one, with the grant for it.
          if (w.g.unreplied > 0) {
            if (pick(10) == 0) w.wanted = pick(4) == 0 ? kAll : pick(48);
            w.to_client.push_back(p.grant_for_reply(&w.g, w.wanted));
            p.on_replied(&w.g);
          }
        } else if (!w.to_client.empty()) {
          // The client reads a reply and the grant in it.
          w.client_grant = std::clamp<uint32_t>(w.to_client.front(), 1, p.max_per_conn());
          w.to_client.pop_front();
          --w.in_flight;
        }
      }
      ASSERT_NO_FATAL_FAILURE(check_invariants(p, conns, total)) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace tern::rpc
