// Unit tests that drive the engine's new pieces directly: the credit window
// and the server's grant policy, the bulk pool, message buffers, the xid
// table, the handler table, the slab table and the send queue (the one post
// path) over a fake QP that records what it was given.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "engine/bulk_pool.h"
#include "engine/credits.h"
#include "engine/handler_table.h"
#include "engine/msg_buf.h"
#include "engine/send_queue.h"
#include "engine/slab_table.h"
#include "engine/xid_table.h"
#include "mem/arena.h"

namespace tern::rpc {
namespace {

// ---------------------------------------------------------------- credits

TEST(CreditWindow, StartsAtOneFollowsTheGrantWithinOneAndTheMaximum) {
  CreditWindow w(32);
  EXPECT_EQ(w.granted(), 1u) << "RFC 8166: one credit until the first reply";
  EXPECT_TRUE(w.can_send());
  w.sent();
  EXPECT_FALSE(w.can_send());
  w.grant(8);
  EXPECT_TRUE(w.can_send());
  w.grant(0);
  EXPECT_EQ(w.granted(), 1u) << "a grant of 0 would stall the client for ever";
  w.grant(UINT32_MAX);
  EXPECT_EQ(w.granted(), 32u) << "never more than we asked for";
  w.answered();
  w.answered();  // more answers than calls (a teardown after a reply): no underflow
  EXPECT_EQ(w.in_flight(), 0u);
  w.reset();
  EXPECT_EQ(w.granted(), 1u);
}

TEST(GrantPolicy, AdmitsOneCreditPerConnectionUntilThePoolIsGranted) {
  GrantPolicy p(3, 32);
  ConnGrant a, b, c, d;
  EXPECT_TRUE(p.admit(&a));
  EXPECT_TRUE(p.admit(&b));
  EXPECT_TRUE(p.admit(&c));
  EXPECT_FALSE(p.admit(&d)) << "no buffer left to back a first credit: refuse the connection";
  p.leave(&b);
  EXPECT_TRUE(p.admit(&d)) << "a connection that left gave its credits back";
  p.leave(&b);  // twice: harmless
  EXPECT_EQ(p.free(), 0u);
}

TEST(GrantPolicy, TheGrantFollowsWhatTheClientAsksForWithinItsMaximumAndThePool) {
  GrantPolicy p(20, 16);
  ConnGrant c;
  ASSERT_TRUE(p.admit(&c));
  ASSERT_TRUE(p.on_call(&c));
  EXPECT_EQ(p.grant_for_reply(&c, 8), 8u) << "granted what it asked for";
  p.on_replied(&c);
  ASSERT_TRUE(p.on_call(&c));
  EXPECT_EQ(p.grant_for_reply(&c, 100), 16u) << "never more than the per-connection maximum";
  p.on_replied(&c);
  EXPECT_EQ(p.free(), 4u);
  ConnGrant d;
  ASSERT_TRUE(p.admit(&d));
  ASSERT_TRUE(p.on_call(&d));
  EXPECT_EQ(p.grant_for_reply(&d, 16), 4u) << "no more than the pool has left";
  EXPECT_EQ(p.free(), 0u);
  p.on_replied(&d);
}

TEST(GrantPolicy, StrictCheckCatchesAClientOverItsGrant) {
  GrantPolicy p(100, 16);
  ConnGrant c;
  ASSERT_TRUE(p.admit(&c));
  EXPECT_TRUE(p.on_call(&c));
  EXPECT_FALSE(p.on_call(&c)) << "a second call on one credit";
  EXPECT_EQ(c.unreplied, 1u) << "the refused call is not counted";
}

TEST(GrantPolicy, AGrantFallsByOnePerReplyToWhatIsAskedOrUnderPressure) {
  GrantPolicy p(8, 8);
  ConnGrant big, small;
  ASSERT_TRUE(p.admit(&big));
  ASSERT_TRUE(p.admit(&small));
  ASSERT_TRUE(p.on_call(&big));
  EXPECT_EQ(p.grant_for_reply(&big, 7), 7u);
  p.on_replied(&big);
  EXPECT_EQ(p.free(), 0u);
  // The client asks for less: one per reply, never faster (it may still
  // have the old grant's worth in flight).
  ASSERT_TRUE(p.on_call(&big));
  EXPECT_EQ(p.grant_for_reply(&big, 2), 6u);
  p.on_replied(&big);
  ASSERT_TRUE(p.on_call(&big));
  EXPECT_EQ(p.grant_for_reply(&big, 2), 5u);
  p.on_replied(&big);
  EXPECT_EQ(p.free(), 2u);
  // What came back goes to the connection that asks for it.
  ASSERT_TRUE(p.on_call(&small));
  EXPECT_EQ(p.grant_for_reply(&small, 4), 3u);
  p.on_replied(&small);
  EXPECT_EQ(p.free(), 0u);
  // The pool is out and big uses less than half of its 5: it gives one back
  // even while asking for more.
  ASSERT_TRUE(p.on_call(&big));
  EXPECT_EQ(p.grant_for_reply(&big, 8), 4u);
  p.on_replied(&big);
  EXPECT_LE(big.granted + small.granted, 8u) << "grants never add up to more buffers than the pool has";
}

TEST(GrantPolicy, ClientReservationsShareThePool) {
  GrantPolicy p(2, 8);
  EXPECT_TRUE(p.reserve());
  EXPECT_TRUE(p.reserve());
  EXPECT_FALSE(p.reserve()) << "a third reply would have no buffer";
  p.unreserve();
  EXPECT_TRUE(p.reserve());
  p.resize(5);
  EXPECT_EQ(p.free(), 3u);
  p.resize(1);
  EXPECT_EQ(p.free(), 0u);
}

// ---------------------------------------------------------------- bulk pool

class BulkPoolTest : public ::testing::Test {
 protected:
  // Page-aligned, as the engine's arena is.
  void SetUp() override { mem_ = static_cast<uint8_t*>(std::aligned_alloc(4096, 1u << 20)); }
  void TearDown() override { std::free(mem_); }
  uint8_t* base() { return mem_; }
  uint8_t* mem_ = nullptr;
};

TEST_F(BulkPoolTest, SplitsToTheSizeAskedAndMergesBuddiesBack) {
  BulkPool p(base(), 1u << 20, 4096, 256u << 10);  // 4 blocks of 256 KiB
  EXPECT_EQ(p.capacity(), 1u << 20);
  uint8_t* a = p.get(4096);
  uint8_t* b = p.get(5000);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(p.block_size(a), 4096u);
  EXPECT_EQ(p.block_size(b), 8192u) << "rounded up to a power of two";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  EXPECT_EQ(p.in_use(), 4096u + 8192u);
  p.put(a);
  p.put(b);
  EXPECT_EQ(p.in_use(), 0u);
  // Everything merged back: four whole top blocks are available again.
  std::vector<uint8_t*> top;
  for (int i = 0; i < 4; ++i) {
    uint8_t* t = p.get(256u << 10);
    ASSERT_NE(t, nullptr) << "top block " << i << " was not merged back";
    top.push_back(t);
  }
  EXPECT_EQ(p.get(1), nullptr);
  EXPECT_EQ(p.stats().empty.get(), 1u);
  for (uint8_t* t : top) p.put(t);
}

TEST_F(BulkPoolTest, RandomUseNeverOverlapsAndAlwaysMergesBack) {
  BulkPool p(base(), 1u << 20, 4096, 128u << 10);
  std::mt19937 rng(7);
  std::map<uint8_t*, size_t> out;  // block -> size
  for (int step = 0; step < 20000; ++step) {
    if (out.empty() || rng() % 3 != 0) {
      size_t len = 1 + rng() % (128u << 10);
      uint8_t* q = p.get(len);
      if (q == nullptr) continue;
      size_t sz = p.block_size(q);
      ASSERT_GE(sz, len);
      // No overlap with any block out.
      auto it = out.lower_bound(q);
      if (it != out.end()) {
        ASSERT_LE(q + sz, it->first);
      }
      if (it != out.begin()) {
        --it;
        ASSERT_LE(it->first + it->second, q);
      }
      out[q] = sz;
    } else {
      auto it = out.begin();
      std::advance(it, rng() % out.size());
      p.put(it->first);
      out.erase(it);
    }
  }
  for (auto& [q, sz] : out) p.put(q);
  EXPECT_EQ(p.in_use(), 0u);
  EXPECT_EQ(p.blocks_out(), 0u);
  for (int i = 0; i < 8; ++i) ASSERT_NE(p.get(128u << 10), nullptr) << "fragmented after random use";
}

TEST_F(BulkPoolTest, PoisonsWhatComesBack) {
  BulkPool p(base(), 1u << 20, 4096, 64u << 10, /*poison=*/true);
  uint8_t* a = p.get(100);
  std::fill(a, a + 100, 0x11);
  p.put(a);
  EXPECT_TRUE(std::all_of(a, a + 4096, [](uint8_t v) { return v == BulkPool::kPoison; }));
}

TEST_F(BulkPoolTest, GivingBackTwiceIsCaught) {
  BulkPool p(base(), 1u << 20, 4096, 64u << 10);
  uint8_t* a = p.get(100);
  p.put(a);
  EXPECT_DEATH(p.put(a), "not in use");
  EXPECT_DEATH(p.put(base() + 12), "foreign pointer");
}

// ---------------------------------------------------------------- message buffers

TEST(MsgBufPool, CarvesOnDemandUpToItsCapAndPoisons) {
  auto arena = mem::Arena::create({.size = 1u << 20, .huge = mem::HugePages::kNever}).value();
  MsgBufPool pool(arena.get(), 1024, 40, /*poison=*/true);
  EXPECT_EQ(pool.made(), 0u) << "nothing carved before first use";
  std::vector<MsgBuf*> got;
  while (MsgBuf* b = pool.get()) got.push_back(b);
  EXPECT_EQ(got.size(), 40u);
  EXPECT_EQ(pool.out(), 40u);
  std::set<uint8_t*> distinct;
  for (MsgBuf* b : got) {
    distinct.insert(b->data);
    EXPECT_EQ(pool.at(b->index), b) << "a receive's wr_id finds its buffer";
    EXPECT_TRUE(arena->contains(b->data, b->cap));
  }
  EXPECT_EQ(distinct.size(), 40u);
  EXPECT_EQ(pool.at(40), nullptr) << "a stale or forged index names nothing";
  got[0]->data[0] = 1;
  pool.put(got[0]);
  EXPECT_EQ(got[0]->data[0], MsgBufPool::kPoison);
  EXPECT_DEATH(pool.put(got[0]), "given back twice");
  for (size_t i = 1; i < got.size(); ++i) pool.put(got[i]);
  EXPECT_EQ(pool.out(), 0u);
}

// ---------------------------------------------------------------- xid table

TEST(XidTable, MatchesAReferenceMapUnderRandomUse) {
  XidTable t(64);
  std::map<uint32_t, uint32_t> ref;
  std::mt19937 rng(11);
  for (int step = 0; step < 200000; ++step) {
    // A small xid range makes collisions and clusters common.
    uint32_t xid = 1 + rng() % 500;
    switch (rng() % 3) {
      case 0: {
        bool ok = t.insert(xid, xid * 3);
        bool want = ref.size() < 64 && !ref.contains(xid);
        ASSERT_EQ(ok, want) << "insert " << xid;
        if (ok) ref[xid] = xid * 3;
        break;
      }
      case 1: {
        ASSERT_EQ(t.erase(xid), ref.erase(xid) == 1) << "erase " << xid;
        break;
      }
      default: {
        uint32_t obj = 0;
        bool found = t.find(xid, &obj);
        ASSERT_EQ(found, ref.contains(xid)) << "find " << xid;
        if (found) {
          ASSERT_EQ(obj, ref[xid]);
        }
      }
    }
    ASSERT_EQ(t.size(), ref.size());
  }
  uint32_t obj;
  EXPECT_FALSE(t.find(0, &obj)) << "xid 0 names nothing";
}

// ---------------------------------------------------------------- handlers

void h1(void*, ServerCall*) {}
void h2(void*, ServerCall*) {}

TEST(HandlerTable, FindsAHandlerOrSaysWhatToAnswer) {
  HandlerTable t;
  t.set(HandlerEntry{100003, 3, 6, &h1, nullptr, nullptr, nullptr});
  t.set(HandlerEntry{100003, 4, 1, &h1, nullptr, nullptr, nullptr});
  AcceptStat why{};
  uint32_t low = 0, high = 0;
  const HandlerEntry* e = t.find(100003, 3, 6, &why, &low, &high);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->h, &h1);
  EXPECT_EQ(t.find(100005, 3, 6, &why, &low, &high), nullptr);
  EXPECT_EQ(why, AcceptStat::kProgUnavail);
  EXPECT_EQ(t.find(100003, 9, 6, &why, &low, &high), nullptr);
  EXPECT_EQ(why, AcceptStat::kProgMismatch);
  EXPECT_EQ(low, 3u);
  EXPECT_EQ(high, 4u);
  EXPECT_EQ(t.find(100003, 3, 7, &why, &low, &high), nullptr);
  EXPECT_EQ(why, AcceptStat::kProcUnavail);
  // Replacing keeps the entry's address (calls in progress point at it).
  t.set(HandlerEntry{100003, 3, 6, &h2, nullptr, nullptr, nullptr});
  EXPECT_EQ(t.find(100003, 3, 6, &why, &low, &high), e);
  EXPECT_EQ(e->h, &h2);
}

// ---------------------------------------------------------------- slab table

struct Obj {
  uint32_t index = 0;
};

TEST(SlabTable, GrowsBySlabsKeepsAddressesAndCatchesDoublePut) {
  SlabTable<Obj> t(130);
  std::vector<Obj*> out;
  while (Obj* o = t.get()) out.push_back(o);
  EXPECT_EQ(out.size(), 192u) << "three slabs of 64: the cap is reached slab by slab";
  EXPECT_EQ(out[0]->index, 0u) << "lowest index first";
  for (Obj* o : out) EXPECT_EQ(t.at(o->index), o);
  EXPECT_EQ(t.at(192), nullptr);
  Obj* first = out[0];
  t.put(first);
  EXPECT_TRUE(t.is_free(first));
  EXPECT_EQ(t.get(), first) << "the most recently returned first";
  t.put(first);
  EXPECT_DEATH(t.put(first), "given back twice");
}

// ---------------------------------------------------------------- send queue

// A QP that records what it is given and takes up to `accept` WRs per post.
struct FakeQp final : rdma::Qp {
  int post_send(const rdma::SendWr* wrs, int n, int* err) override {
    int took = std::min(n, accept);
    for (int i = 0; i < took; ++i) posted.push_back(wrs[i]);
    *err = took < n ? EAGAIN : 0;
    return took;
  }
  int post_recv(const rdma::RecvWr*, int, int* err) override {
    *err = EINVAL;
    return 0;
  }
  rdma::QpState state() const override { return rdma::QpState::kRts; }
  uint32_t qp_num() const override { return 1; }
  const rdma::QpInit& init() const override { return qi; }
  StatsView stats() const override { return {}; }
  std::vector<rdma::SendWr> posted;
  int accept = 1 << 20;
  rdma::QpInit qi;
};

rdma::Wc completion_of(const rdma::SendWr& w, rdma::WcStatus st = rdma::WcStatus::kSuccess) {
  rdma::Wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = st;
  return wc;
}

TEST(SendQueue, EveryWrOfAChainCarriesItsContextAndOnlyTheLastMayBeSignaled) {
  FakeQp qp;
  SendQueue sq(64, 16, 4);
  WrChain chain;
  for (uint32_t call = 0; call < 4; ++call) {
    chain.clear();
    chain.add().opcode = rdma::WrOpcode::kRegMr;
    chain.add().opcode = rdma::WrOpcode::kRegMr;
    chain.add().opcode = rdma::WrOpcode::kSend;
    ASSERT_TRUE(sq.room(chain.size()));
    bool sig = false;
    int err = 0;
    ASSERT_EQ(sq.post(&qp, 9, chain, SendCtxKind::kCallSend, 200 + call, &sig, &err), SendQueue::Posted::kOk);
    EXPECT_EQ(sig, call == 3) << "one signaled chain per batch of 4";
  }
  ASSERT_EQ(qp.posted.size(), 12u);
  for (size_t i = 0; i < qp.posted.size(); ++i) {
    const rdma::SendWr& w = qp.posted[i];
    EXPECT_EQ(wr_id_kind(w.wr_id), WrKind::kChain);
    EXPECT_EQ(wr_id_slot(w.wr_id), 9u) << "the connection's slot";
    EXPECT_EQ(wr_id_value(w.wr_id), i / 3) << "the chain's context";
    EXPECT_EQ((w.flags & rdma::kWrSignaled) != 0, i == 11) << "WR " << i;
  }
  EXPECT_EQ(sq.budget().outstanding(), 12u);
  // The signaled completion walks every chain and retires the whole budget.
  std::vector<uint32_t> objs;
  EXPECT_EQ(sq.complete(completion_of(qp.posted[11]), [&](const SendCtx& c, bool) { objs.push_back(c.obj); }), 4u);
  EXPECT_EQ(objs, (std::vector<uint32_t>{200, 201, 202, 203}));
  EXPECT_EQ(sq.budget().outstanding(), 0u);
  EXPECT_EQ(sq.contexts_in_use(), 0u);
}

TEST(SendQueue, RoomCountsWrsAndContexts) {
  FakeQp qp;
  SendQueue sq(8, 4, 2);
  WrChain chain;
  chain.add();
  chain.add();
  chain.add();
  EXPECT_TRUE(sq.room(8));
  EXPECT_FALSE(sq.room(9)) << "more WRs than the queue is deep";
  bool sig;
  int err;
  ASSERT_EQ(sq.post(&qp, 0, chain, SendCtxKind::kReplySend, 1, &sig, &err), SendQueue::Posted::kOk);
  EXPECT_TRUE(sq.room(5));
  EXPECT_FALSE(sq.room(6));
  chain.clear();
  chain.add();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(sq.post(&qp, 0, chain, SendCtxKind::kReplySend, 2, &sig, &err),
                                        SendQueue::Posted::kOk);
  EXPECT_FALSE(sq.room(1)) << "every send context is in use";
}

TEST(SendQueue, AFailedUnsignaledWrLandsOnItsOwnChainOnce) {
  FakeQp qp;
  SendQueue sq(64, 16, 8);
  WrChain chain;
  bool sig;
  int err;
  for (uint32_t i = 0; i < 3; ++i) {
    chain.clear();
    chain.add().opcode = rdma::WrOpcode::kRdmaWrite;
    chain.add().opcode = rdma::WrOpcode::kSend;
    ASSERT_EQ(sq.post(&qp, 0, chain, SendCtxKind::kReplySend, i, &sig, &err), SendQueue::Posted::kOk);
  }
  // The second chain's (unsignaled) WRITE fails; then everything after it flushes.
  std::vector<std::pair<uint32_t, bool>> walked;
  auto rec = [&](const SendCtx& c, bool own) { walked.push_back({c.obj, own}); };
  sq.complete(completion_of(qp.posted[2], rdma::WcStatus::kRemAccessErr), rec);
  sq.complete(completion_of(qp.posted[3], rdma::WcStatus::kWrFlushErr), rec);  // same chain: walked already
  sq.complete(completion_of(qp.posted[4], rdma::WcStatus::kWrFlushErr), rec);
  sq.complete(completion_of(qp.posted[5], rdma::WcStatus::kWrFlushErr), rec);
  EXPECT_EQ(walked, (std::vector<std::pair<uint32_t, bool>>{{0, false}, {1, true}, {2, true}}));
}

TEST(SendQueue, ARefusedChainCancelsItsContext) {
  FakeQp qp;
  qp.accept = 1;  // takes the first WR of the chain only
  SendQueue sq(64, 16, 8);
  WrChain chain;
  chain.add().opcode = rdma::WrOpcode::kRegMr;
  chain.add().opcode = rdma::WrOpcode::kSend;
  bool sig;
  int err;
  EXPECT_EQ(sq.post(&qp, 0, chain, SendCtxKind::kCallSend, 5, &sig, &err), SendQueue::Posted::kRefused);
  EXPECT_EQ(err, EAGAIN);
  // The REG_MR that was taken flushes later: its context releases nobody.
  std::vector<SendCtx> walked;
  sq.complete(completion_of(qp.posted[0], rdma::WcStatus::kWrFlushErr),
              [&](const SendCtx& c, bool) { walked.push_back(c); });
  ASSERT_EQ(walked.size(), 1u);
  EXPECT_EQ(walked[0].kind, SendCtxKind::kCancelled);
}

}  // namespace
}  // namespace tern::rpc
