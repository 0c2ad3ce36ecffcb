// Per-client entries of the storage queue (lib/nfsd/storage_queue.h) and
// the caller pool (caller_pool.h): an idle client's entry is kept for its
// next operation (not made and dropped for each one), and that must change
// no bound -- only clients with work share the engine. Whether an
// operation starts or waits is decided in submit(), on this thread, so the
// checks need no timing. The storage queue is driven with reservations
// (StorageKind::kReserve), which never reach the device: each starts in
// submit() when the bounds allow and completes at the next poll(); the
// caller pool's workers hold their jobs while a test says so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "nfsd/caller_pool.h"
#include "nfsd/storage_queue.h"

using namespace tern;
using nfsd::StorageKind;
using nfsd::StorageOptions;
using nfsd::StorageQueue;
using nfsd::StorageReq;

namespace {

struct Count {
  int done = 0;
};

StorageReq reservation(Count* c) {
  StorageReq r;
  r.kind = StorageKind::kReserve;
  r.ctx = c;
  r.done = [](void* ctx, const StorageReq&, int64_t res) {
    EXPECT_EQ(res, 0);
    ++static_cast<Count*>(ctx)->done;
  };
  return r;
}

std::unique_ptr<StorageQueue> queue(uint32_t in_flight, uint32_t per_peer) {
  StorageOptions o;
  o.mode = StorageOptions::Mode::kThreads;  // reservations never reach a worker
  o.max_in_flight = in_flight;
  o.max_per_peer = per_peer;
  auto q = StorageQueue::create(o);
  EXPECT_TRUE(q->asynchronous());
  return q;
}

void settle(StorageQueue& q) {
  for (int i = 0; i < 1000 && !q.idle(); ++i) q.poll();
  ASSERT_TRUE(q.idle());
}

}  // namespace

// Client A did its work and went idle; B alone then gets the engine's
// whole bound (4 of 4), as if A had never been there. Counted with A's
// entry among the clients sharing the engine, B would get 2 and queue 2.
TEST(NfsdStorageQueuePeers, AnIdleClientKeptForItsNextOperationTakesNoShare) {
  auto q = queue(4, 4);
  Count a, b;
  q->submit("pid 1 uid 1000", reservation(&a));
  settle(*q);
  ASSERT_EQ(a.done, 1);
  for (int i = 0; i < 4; ++i) q->submit("pid 2 uid 1000", reservation(&b));
  EXPECT_EQ(q->stats().in_flight.get(), 4u);
  EXPECT_EQ(q->stats().queued.get(), 0u);
  settle(*q);
  EXPECT_EQ(b.done, 4);
  // A comes back while B still has work: now they share (2 each).
  for (int i = 0; i < 4; ++i) q->submit("pid 2 uid 1000", reservation(&b));
  for (int i = 0; i < 2; ++i) q->submit("pid 1 uid 1000", reservation(&a));
  EXPECT_EQ(q->stats().in_flight.get(), 4u);  // B's 4 went first, A's 2 wait
  EXPECT_EQ(q->stats().queued.get(), 2u);
  settle(*q);
  EXPECT_EQ(a.done, 3);
  EXPECT_EQ(b.done, 8);
}

// Many clients, each with one operation at a time, more of them than the
// queue keeps idle entries for: the idle ones are forgotten in sweeps while
// others are in flight or just finished, every operation completes once,
// and a lone client afterwards still gets the whole bound.
TEST(NfsdStorageQueuePeers, IdleEntriesBeyondTheKeptNumberAreForgottenSafely) {
  auto q = queue(8, 8);
  Count c;
  int submitted = 0;
  for (int round = 0; round < 3; ++round) {
    for (int p = 0; p < 300; ++p) {
      // Two in flight at once (this client and the one before it), so
      // sweeps run while some clients are active.
      q->submit("pid " + std::to_string(10000 + p) + " uid 1000", reservation(&c));
      ++submitted;
      if (p % 2 == 1) q->poll();
    }
    settle(*q);
    EXPECT_EQ(c.done, submitted);
  }
  EXPECT_EQ(q->stats().queued.get(), 0u);
  Count lone;
  for (int i = 0; i < 8; ++i) q->submit("pid 99999 uid 1000", reservation(&lone));
  EXPECT_EQ(q->stats().in_flight.get(), 8u);
  EXPECT_EQ(q->stats().queued.get(), 0u);
  settle(*q);
  EXPECT_EQ(lone.done, 8);
}

// The caller pool, the same: A's job done, B alone gets the pool's whole
// bound (4 of 4 running, none queued), though A's entry is kept.
TEST(NfsdCallerPoolPeers, AnIdleClientKeptForItsNextJobTakesNoShare) {
  std::atomic<bool> hold{false};
  nfsd::CallerPoolOptions o;
  o.threads = 4;
  o.max_in_flight = 4;
  o.max_per_peer = 4;
  o.hold = &hold;
  nfsd::CallerPool pool(o);
  int done = 0;
  auto job = [&done] {
    nfsd::CallerJob j;  // the process's own credentials: nothing to switch
    j.cred.uid = geteuid();
    j.cred.gid = getegid();
    j.fn = [] { return nfs::Nfs3Stat::kOk; };
    j.ctx = &done;
    j.done = [](void* ctx, nfs::Nfs3Stat) { ++*static_cast<int*>(ctx); };
    return j;
  };
  pool.submit("pid 1 uid 1000", job());
  pool.drain();
  ASSERT_EQ(done, 1);
  hold = true;  // B's jobs stay running until released
  for (int i = 0; i < 4; ++i) pool.submit("pid 2 uid 1000", job());
  EXPECT_EQ(pool.stats().in_flight.get(), 4u);
  EXPECT_EQ(pool.stats().queued.get(), 0u);
  hold = false;
  pool.drain();
  EXPECT_EQ(done, 5);
}
