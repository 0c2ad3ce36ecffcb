// Unit tests for the engine's registration and send-side building blocks:
// SendCtxRing, SqBudget, MrFreeList, FrwrRegistrar and RegCacheRegistrar (the
// registrars over a real pmd/shm PD, since fast MRs come from a device).
// engine_pieces_test.cc has the pools, credits and tables.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "engine/frwr_registrar.h"
#include "engine/mr_free_list.h"
#include "engine/reg_cache_registrar.h"
#include "engine/send_ctx_ring.h"
#include "engine/sq_budget.h"
#include "engine/wr_chain.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {
namespace {

TEST(SendCtxRing, SignalsOncePerBatch) {
  SendCtxRing ring(64, 8);
  int signaled = 0;
  for (uint32_t i = 0; i < 32; ++i) {
    bool sig;
    ring.acquire(SendCtxKind::kCallSend, i, i + 1, &sig);
    signaled += sig;
    if (sig) {
      EXPECT_EQ((i + 1) % 8, 0u) << "send " << i;
    }
  }
  EXPECT_EQ(signaled, 4);
}

TEST(SendCtxRing, InvalidationAndReadChainsAreAlwaysSignaled) {
  // Their completion is what moves their call on.
  SendCtxRing ring(64, 8);
  bool sig;
  ring.acquire(SendCtxKind::kCallSend, 0, 1, &sig);
  EXPECT_FALSE(sig);
  ring.acquire(SendCtxKind::kInvalidate, 1, 2, &sig);
  EXPECT_TRUE(sig);
  ring.acquire(SendCtxKind::kRead, 2, 3, &sig);
  EXPECT_TRUE(sig);
  ring.acquire(SendCtxKind::kReplySend, 3, 4, &sig);
  EXPECT_FALSE(sig) << "the batch counts from the last signaled chain";
}

TEST(SendCtxRing, SignalsEverySendWhenNearlyFull) {
  // So that the ring can never fill with Sends no completion will walk.
  SendCtxRing ring(16, 8);
  bool sig = false;
  for (uint32_t i = 0; i < 9; ++i) ring.acquire(SendCtxKind::kCallSend, i, 0, &sig);
  for (uint32_t i = 9; i < 16; ++i) {
    ring.acquire(SendCtxKind::kCallSend, i, 0, &sig);
    EXPECT_TRUE(sig) << "send " << i << " with " << ring.in_use() << " in use";
  }
  EXPECT_TRUE(ring.full());
}

TEST(SendCtxRing, CompletionReleasesEveryEarlierContextOnceInOrder) {
  SendCtxRing ring(32, 4);
  std::vector<uint32_t> idx;
  for (uint32_t i = 0; i < 10; ++i) {
    bool sig;
    idx.push_back(ring.acquire(SendCtxKind::kCallSend, 100 + i, 10 * (i + 1), &sig));
  }
  std::vector<uint32_t> released;
  std::vector<bool> owns;
  auto rel = [&](const SendCtx& c, bool own) {
    released.push_back(c.obj);
    owns.push_back(own);
  };
  EXPECT_EQ(ring.complete_through(idx[3], rel), 4u);
  ASSERT_EQ(released.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(released[i], 100 + i) << "in order";
  EXPECT_EQ(owns, (std::vector<bool>{false, false, false, true})) << "only the last is the completion's own";
  // A late completion for an already-walked context releases nothing.
  EXPECT_EQ(ring.complete_through(idx[1], rel), 0u);
  EXPECT_EQ(ring.complete_through(idx[7], rel), 4u);
  EXPECT_EQ(ring.in_use(), 2u);
  // Teardown releases the unsignaled tail.
  std::vector<uint32_t> tail;
  EXPECT_EQ(ring.release_all([&](const SendCtx& c) { tail.push_back(c.obj); }), 2u);
  EXPECT_EQ(tail, (std::vector<uint32_t>{108, 109}));
  EXPECT_EQ(ring.in_use(), 0u);
  EXPECT_EQ(ring.release_all([&](const SendCtx&) {}), 0u);
}

TEST(SendCtxRing, CancelledChainReleasesNobody) {
  SendCtxRing ring(8, 4);
  bool sig;
  ring.acquire(SendCtxKind::kCallSend, 7, 1, &sig);
  uint32_t b = ring.acquire(SendCtxKind::kCallSend, 8, 2, &sig);
  ring.cancel(b);  // its post failed: the request keeps only its RPC owner
  std::vector<SendCtx> walked;
  EXPECT_EQ(ring.complete_through(b, [&](const SendCtx& c, bool) { walked.push_back(c); }), 2u);
  ASSERT_EQ(walked.size(), 2u);
  EXPECT_EQ(walked[0].kind, SendCtxKind::kCallSend);
  EXPECT_EQ(walked[0].obj, 7u);
  EXPECT_EQ(walked[1].kind, SendCtxKind::kCancelled);
}

TEST(SendCtxRingDeath, AcquireOnFullRingIsACallerBug) {
  SendCtxRing ring(4, 2);
  bool sig;
  for (uint32_t i = 0; i < 4; ++i) ring.acquire(SendCtxKind::kCallSend, i, 0, &sig);
  EXPECT_DEATH(ring.acquire(SendCtxKind::kCallSend, 5, 0, &sig), "send context ring full");
}

TEST(MrFreeList, OwnerGetPutIsLifo) {
  MrFreeList fl;
  EngineMr a, b;
  fl.put(&a);
  fl.put(&b);
  EXPECT_EQ(fl.get(), &b);
  EXPECT_EQ(fl.get(), &a);
  EXPECT_EQ(fl.get(), nullptr);
}

TEST(MrFreeList, RemoteReturnsFromAnotherThreadAreAllSeen) {
  // Another thread returns MRs with put_remote while the owner takes them:
  // none lost, none twice (TSan checks the synchronisation).
  constexpr int kN = 20000;
  std::vector<EngineMr> mrs(kN);
  MrFreeList fl;
  std::thread other([&] {
    for (auto& m : mrs) fl.put_remote(&m);
  });
  std::vector<int> seen(kN, 0);
  int got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got < kN && std::chrono::steady_clock::now() < deadline) {
    if (EngineMr* m = fl.get()) {
      ++seen[m - mrs.data()];
      ++got;
    }
  }
  other.join();
  ASSERT_EQ(got, kN);
  for (int i = 0; i < kN; ++i) ASSERT_EQ(seen[i], 1) << i;
  EXPECT_EQ(fl.get(), nullptr);
}

TEST(SqBudget, UnsignaledSlotsRetireWithALaterSignaledWr) {
  SqBudget sq(8);
  uint64_t first = sq.post(3);
  EXPECT_TRUE(sq.room(5));
  EXPECT_FALSE(sq.room(6));
  uint64_t second = sq.post(5);
  EXPECT_FALSE(sq.room(1));
  sq.retire(first);
  EXPECT_TRUE(sq.room(3));
  sq.retire(second);
  EXPECT_EQ(sq.outstanding(), 0u);
  sq.retire(first);  // stale: no effect
  EXPECT_EQ(sq.outstanding(), 0u);
}

class Registrar : public ::testing::Test {
 protected:
  void SetUp() override {
    arena = mem::Arena::create({.size = 8u << 20, .huge = mem::HugePages::kNever}).value();
    dev = rdma::open_device("shm:path=/tmp/tern-unit-reg.sock,depth=16").value();
    pd = dev->alloc_pd().value();
    mr = pd->reg_mr(arena->base(), arena->size(), rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite |
                                                     rdma::kAccessRemoteRead)
             .value();
  }
  void TearDown() override {
    reg.reset();
    cache.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  uint64_t addr(size_t off) const { return reinterpret_cast<uint64_t>(arena->base()) + off; }

  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<rdma::Device> dev;
  std::unique_ptr<rdma::Pd> pd;
  std::unique_ptr<rdma::Mr> mr;
  std::unique_ptr<FrwrRegistrar> reg;
  std::unique_ptr<RegCacheRegistrar> cache;
  Counter live;  // the engine's rkeys_live gauge
};

TEST_F(Registrar, OneMrPerChunkWithinDepth) {
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 8, false, &live);
  WrChain chain;
  RdmaSegment segs[4];
  EngineMr* list = nullptr;
  ASSERT_EQ(reg->map(addr(0), 64 * 1024, mr->lkey(), rdma::kAccessRemoteWrite | rdma::kAccessLocalWrite, chain,
                     segs, 4, &list),
            1);
  ASSERT_EQ(chain.size(), 1);
  const rdma::SendWr& w = chain.data()[0];
  EXPECT_EQ(w.opcode, rdma::WrOpcode::kRegMr);
  EXPECT_FALSE(w.flags & rdma::kWrSignaled) << "REG_MR rides ahead of the Send, unsignaled";
  EXPECT_EQ(segs[0].length, 64u * 1024);
  EXPECT_EQ(segs[0].offset, addr(0));
  EXPECT_EQ(segs[0].handle, w.reg.rkey);
  ASSERT_NE(list, nullptr);
  EXPECT_TRUE(list->registered);
}

TEST_F(Registrar, ChunkBeyondDepthSplitsAtPageBoundaries) {
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 8, false, &live);  // 64 KiB per MR
  EXPECT_EQ(reg->segments_for(addr(100), 64 * 1024), 2u) << "an unaligned 64 KiB chunk spans 17 pages";
  WrChain chain;
  RdmaSegment segs[8];
  EngineMr* list = nullptr;
  ASSERT_EQ(reg->map(addr(100), 200 * 1024, mr->lkey(), rdma::kAccessRemoteRead, chain, segs, 8, &list), 4);
  uint64_t pos = addr(100), total = 0;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(segs[i].offset, pos) << "segments are contiguous";
    if (i > 0) {
      EXPECT_EQ(segs[i].offset % 4096, 0u) << "later pieces start on a page";
    }
    EXPECT_LE(((segs[i].offset & 4095) + segs[i].length + 4095) / 4096, 16u) << "within depth";
    pos += segs[i].length;
    total += segs[i].length;
  }
  EXPECT_EQ(total, 200u * 1024);
}

TEST_F(Registrar, ZeroBasedDeviceAdvertisesOffsetZero) {
  // mlx5 indirect mkeys start at address 0: the REG_MR still names the
  // memory by its address, but the peer must be told offset 0 (per MR).
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 8, /*zero_based=*/true, &live);
  WrChain chain;
  RdmaSegment segs[8];
  EngineMr* list = nullptr;
  ASSERT_EQ(reg->map(addr(100), 100 * 1024, mr->lkey(), rdma::kAccessRemoteWrite | rdma::kAccessLocalWrite, chain,
                     segs, 8, &list),
            2);
  uint64_t pos = addr(100);
  for (int i = 0; i < 2; ++i) {
    const rdma::SendWr& w = chain.data()[i];
    EXPECT_EQ(w.reg.addr, pos) << "REG_MR " << i << " maps the chunk's own bytes";
    EXPECT_EQ(segs[i].offset, 0u) << "segment " << i << " is addressed from 0 on a zero-based device";
    EXPECT_EQ(segs[i].length, w.reg.length);
    EXPECT_EQ(segs[i].handle, w.reg.rkey);
    pos += w.reg.length;
  }
  EXPECT_EQ(pos, addr(100) + 100 * 1024);
}

TEST_F(Registrar, OutOfMrsTakesNothing) {
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 2, false, &live);
  WrChain chain;
  RdmaSegment segs[8];
  EngineMr* list = nullptr;
  EXPECT_EQ(reg->map(addr(0), 3 * 64 * 1024, mr->lkey(), rdma::kAccessRemoteRead, chain, segs, 8, &list), -1);
  EXPECT_EQ(chain.size(), 0);
  EXPECT_EQ(list, nullptr);
  EXPECT_EQ(reg->stats().out_of_mrs.get(), 1u);
  // The two it could make are free for the next caller.
  ASSERT_EQ(reg->map(addr(0), 2 * 64 * 1024, mr->lkey(), rdma::kAccessRemoteRead, chain, segs, 8, &list), 2);
}

TEST_F(Registrar, KeyByteChangesOnEveryRegistration) {
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 1, false, &live);
  uint32_t last = 0;
  for (int i = 0; i < 5; ++i) {
    WrChain chain;
    RdmaSegment seg;
    EngineMr* list = nullptr;
    ASSERT_EQ(reg->map(addr(0), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &seg, 1, &list), 1);
    if (i > 0) {
      EXPECT_NE(seg.handle, last);
      EXPECT_EQ(rdma::rkey_index(seg.handle), rdma::rkey_index(last)) << "same MR, new key byte";
    }
    last = seg.handle;
    WrChain inv;
    EXPECT_EQ(reg->invalidate(list, inv), 1);
    reg->release(&list);
  }
}

TEST_F(Registrar, InvalidationSkipsWhatThePeerInvalidated) {
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 8, false, &live);
  WrChain chain;
  RdmaSegment segs[8];
  EngineMr* list = nullptr;
  ASSERT_EQ(reg->map(addr(0), 3 * 64 * 1024, mr->lkey(), rdma::kAccessRemoteRead, chain, segs, 8, &list), 3);
  EXPECT_EQ(live.get(), 3u) << "three registrations a peer can reach";
  // The peer invalidated one of them with Send With Invalidate.
  EngineMr* m = rpc::Registrar::live_with_rkey(list, segs[1].handle);
  ASSERT_NE(m, nullptr);
  reg->remote_invalidated(m);
  EXPECT_EQ(live.get(), 2u);
  EXPECT_EQ(rpc::Registrar::live_with_rkey(list, segs[1].handle), nullptr) << "invalid now: not the peer's again";
  EXPECT_EQ(rpc::Registrar::live_with_rkey(list, 0xdeadbe00), nullptr);
  WrChain inv;
  ASSERT_EQ(reg->invalidate(list, inv), 2) << "no LOCAL_INV for the remotely invalidated MR";
  EXPECT_EQ(rpc::Registrar::live_with_rkey(list, segs[0].handle), nullptr)
      << "its LOCAL_INV is posted: a Send With Invalidate of it now would invalidate it twice";
  EXPECT_EQ(live.get(), 2u) << "reachable until the LOCAL_INV chain completes";
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(inv.data()[i].opcode, rdma::WrOpcode::kLocalInv);
    EXPECT_FALSE(inv.data()[i].flags & rdma::kWrSignaled) << "the post path signals the chain's last WR";
    EXPECT_NE(inv.data()[i].invalidate_rkey, segs[1].handle);
  }
  reg->release(&list);
  EXPECT_EQ(list, nullptr);
  EXPECT_EQ(reg->free_list().local_size(), 3u);
  EXPECT_EQ(live.get(), 0u);
}

TEST_F(Registrar, DestroyAfterConnectionLossNeverReuses) {
  reg = std::make_unique<FrwrRegistrar>(pd.get(), 16, 4096, 4, false, &live);
  WrChain chain;
  RdmaSegment segs[2];
  EngineMr* list = nullptr;
  ASSERT_EQ(reg->map(addr(0), 2 * 64 * 1024, mr->lkey(), rdma::kAccessRemoteRead, chain, segs, 2, &list), 2);
  EXPECT_EQ(live.get(), 2u);
  reg->destroy(&list);
  EXPECT_EQ(live.get(), 0u) << "a destroyed MR is reachable by nobody";
  EXPECT_EQ(reg->mrs_live(), 0u);
  EXPECT_EQ(reg->stats().mrs_destroyed.get(), 2u);
  EXPECT_EQ(reg->free_list().local_size(), 0u);
  // New MRs are made on demand.
  WrChain c2;
  ASSERT_EQ(reg->map(addr(0), 4096, mr->lkey(), rdma::kAccessRemoteRead, c2, segs, 2, &list), 1);
  EXPECT_EQ(reg->stats().mrs_created.get(), 3u);
}

// A fast MR must be handed to the driver (FastMr::retire) before it is
// reused, whoever ended its registration: pmd/verbs replaces rxe's windows
// there, which panic the kernel if a peer invalidates them once free. The
// remotely invalidated MR is the one that matters (the peer knows its rkey).
struct CountingFastMr final : rdma::FastMr {
  CountingFastMr(int* retired, const bool* ok) : retired_(retired), ok_(ok) { max_depth_ = 16; }
  bool retire() override {
    ++*retired_;
    return *ok_;
  }
  int* retired_;
  const bool* ok_;
};
struct CountingPd final : rdma::Pd {
  Result<std::unique_ptr<rdma::Mr>> reg_mr(void*, uint64_t, uint32_t) override {
    return make_error(Errc::kUnsupported, "not used");
  }
  Result<std::unique_ptr<rdma::FastMr>> alloc_fast_mr(uint32_t) override {
    return std::unique_ptr<rdma::FastMr>(new CountingFastMr(&retired, &ok));
  }
  int retired = 0;
  bool ok = true;
};

TEST(RegistrarRetire, EveryEndedRegistrationIsRetiredBeforeReuse) {
  CountingPd pd;
  Counter live;
  FrwrRegistrar reg(&pd, 16, 4096, 8, false, &live);
  WrChain chain;
  RdmaSegment segs[2];
  EngineMr* list = nullptr;
  ASSERT_EQ(reg.map(0x10000, 2 * 64 * 1024, 1, rdma::kAccessRemoteWrite | rdma::kAccessLocalWrite, chain, segs, 2,
                    &list),
            2);
  // One MR invalidated by the peer, the other by a LOCAL_INV chain.
  reg.remote_invalidated(rpc::Registrar::live_with_rkey(list, segs[0].handle));
  WrChain inv;
  ASSERT_EQ(reg.invalidate(list, inv), 1);
  reg.release(&list);
  EXPECT_EQ(pd.retired, 2) << "both MRs go through retire(), the remotely invalidated one too";
  EXPECT_EQ(reg.free_list().local_size(), 2u);
  EXPECT_EQ(live.get(), 0u);
  // An MR the driver cannot make safe is destroyed, not reused.
  pd.ok = false;
  ASSERT_EQ(reg.map(0x10000, 4096, 1, rdma::kAccessRemoteRead, chain, segs, 1, &list), 1);
  reg.release(&list);
  EXPECT_EQ(pd.retired, 3);
  EXPECT_EQ(reg.free_list().local_size(), 1u);
  EXPECT_EQ(reg.stats().mrs_destroyed.get(), 1u);
}

// ---- the registration cache (devices without fast registration)

TEST_F(Registrar, RegCacheRegistersAChunkOnceAndPostsNoWrs) {
  cache = std::make_unique<RegCacheRegistrar>(pd.get(), 4096, 8, &live);
  EXPECT_FALSE(cache->invalidates());
  EXPECT_EQ(cache->segments_for(addr(100), 3u << 20), 1u) << "one plain registration per chunk, any length";
  uint32_t rkey = 0;
  for (int i = 0; i < 3; ++i) {
    WrChain chain;
    RdmaSegment seg;
    EngineMr* list = nullptr;
    ASSERT_EQ(cache->map(addr(100), 200 * 1024, mr->lkey(), rdma::kAccessRemoteRead, chain, &seg, 1, &list), 1);
    EXPECT_EQ(chain.size(), 0) << "no REG_MR: the registration was made by reg_mr";
    EXPECT_EQ(seg.offset, addr(100)) << "a plain MR is addressed by virtual address";
    EXPECT_EQ(seg.length, 200u * 1024);
    if (i > 0) {
      EXPECT_EQ(seg.handle, rkey) << "the same buffer hits the same registration";
    }
    rkey = seg.handle;
    ASSERT_NE(list, nullptr);
    EXPECT_FALSE(list->registered) << "nothing for LOCAL_INV or the peer to invalidate";
    EXPECT_EQ(rpc::Registrar::live_with_rkey(list, seg.handle), nullptr);
    EXPECT_EQ(live.get(), 1u) << "a cached registration stays reachable between calls";
    WrChain inv;
    EXPECT_EQ(cache->invalidate(list, inv), 0);
    cache->release(&list);
    EXPECT_EQ(list, nullptr);
  }
  EXPECT_EQ(cache->cache().stats().misses.get(), 1u);
  EXPECT_EQ(cache->cache().stats().hits.get(), 2u);
  EXPECT_EQ(cache->cache().in_use(), 0u);
}

TEST_F(Registrar, RegCacheKeysOnPagesAndAccess) {
  cache = std::make_unique<RegCacheRegistrar>(pd.get(), 4096, 8, &live);
  WrChain chain;
  RdmaSegment a, b, c;
  EngineMr* list = nullptr;
  ASSERT_EQ(cache->map(addr(4096), 1000, mr->lkey(), rdma::kAccessRemoteRead, chain, &a, 1, &list), 1);
  ASSERT_EQ(cache->map(addr(4096 + 8), 2000, mr->lkey(), rdma::kAccessRemoteRead, chain, &b, 1, &list), 1);
  EXPECT_EQ(a.handle, b.handle) << "same page, same access: one registration";
  EXPECT_EQ(b.offset, addr(4096 + 8));
  ASSERT_EQ(cache->map(addr(4096), 1000, mr->lkey(), rdma::kAccessRemoteWrite, chain, &c, 1, &list), 1);
  EXPECT_NE(c.handle, a.handle) << "other access rights: another registration";
  EXPECT_EQ(cache->cache().entries(), 2u);
  EXPECT_EQ(cache->cache().in_use(), 2u);
  cache->release(&list);
  EXPECT_EQ(cache->cache().in_use(), 0u);
}

TEST_F(Registrar, RegCacheEvictsOnlyIdleEntriesLeastRecentlyUsedFirst) {
  cache = std::make_unique<RegCacheRegistrar>(pd.get(), 4096, 2, &live);
  WrChain chain;
  RdmaSegment s0, s1, s2;
  EngineMr *l0 = nullptr, *l1 = nullptr, *l2 = nullptr;
  ASSERT_EQ(cache->map(addr(0), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &s0, 1, &l0), 1);
  ASSERT_EQ(cache->map(addr(8192), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &s1, 1, &l1), 1);
  // Both entries held by calls in flight: a third buffer must wait.
  EXPECT_EQ(cache->map(addr(16384), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &s2, 1, &l2), -1);
  EXPECT_EQ(l2, nullptr);
  EXPECT_EQ(cache->stats().out_of_mrs.get(), 1u);
  EXPECT_EQ(cache->cache().stats().evictions.get(), 0u) << "an entry in use is never deregistered";
  cache->release(&l1);
  cache->release(&l0);  // idle both; by last use, addr(0) is the older
  ASSERT_EQ(cache->map(addr(16384), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &s2, 1, &l2), 1);
  EXPECT_EQ(cache->cache().stats().evictions.get(), 1u);
  EXPECT_EQ(cache->cache().entries(), 2u);
  // addr(0) was acquired first, so it was the least recently used and went.
  RdmaSegment again;
  EngineMr* l3 = nullptr;
  ASSERT_EQ(cache->map(addr(8192), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &again, 1, &l3), 1);
  EXPECT_EQ(again.handle, s1.handle) << "the more recently used entry survived";
  EXPECT_EQ(cache->cache().stats().hits.get(), 1u);
  cache->release(&l2);
  cache->release(&l3);
}

TEST_F(Registrar, RegCacheHoldsSurviveConnectionLoss) {
  cache = std::make_unique<RegCacheRegistrar>(pd.get(), 4096, 4, &live);
  WrChain chain;
  RdmaSegment s;
  EngineMr* list = nullptr;
  ASSERT_EQ(cache->map(addr(0), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &s, 1, &list), 1);
  cache->destroy(&list);  // what the engine does on connection loss
  EXPECT_EQ(list, nullptr);
  EXPECT_EQ(cache->cache().in_use(), 0u);
  EXPECT_EQ(cache->cache().entries(), 1u) << "a plain registration's state is known: kept";
  RdmaSegment again;
  ASSERT_EQ(cache->map(addr(0), 4096, mr->lkey(), rdma::kAccessRemoteRead, chain, &again, 1, &list), 1);
  EXPECT_EQ(again.handle, s.handle);
  cache->release(&list);
}

}  // namespace
}  // namespace tern::rpc
