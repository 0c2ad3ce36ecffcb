// Destroys rdma_cm ids off the engine's thread.
//
// Why: rdma_destroy_id does not return until the kernel's connection manager
// has let go of the id, and that can take as long as the CM likes: in the rxe
// VM, destroying a connected id blocked for 20-65 s at a time (the guest
// logged cm_destroy_id_wait_timeout every 10 s meanwhile). Called from the
// engine's poll loop, that wait stopped every connection of the engine and
// left new clients' connection requests to time out. Here the engine hands
// the id over and goes on; the device's reaper threads destroy ids in the
// order handed over. One id the kernel holds must not hold up the ids
// behind it (they count against their peer's share below until destroyed,
// so a single stuck destroy refused a peer all its connections for as long
// as the CM took, 50 s and more in the VM): while more ids wait than
// threads are idle, another thread is started, up to kMaxThreads. Threads
// are few and sleep when the queue is empty.
//
// An id handed over must be one whose events the engine no longer wants
// (context cleared, see VerbsDevice::reap_cm_id) and whose QP, if any, is
// not attached through rdma_create_qp. The event channel stays open until
// the reaper is stopped (the device's destructor stops it first).
//
// The backlog is bounded, not by the connection table: an id leaves the
// engine's table when it is handed over, so a peer churning connections
// while the CM is slow would grow the queue by its churn rate, each entry
// an id the kernel still holds. At kMaxBacklog the device stops making
// ids that could be slow to destroy (VerbsDevice: connection requests are
// refused, connects fail with EAGAIN), so the backlog stays under
// kMaxBacklog plus the connections open when it was reached.
//
// One peer (a remote address) churning connections must not use that bound
// up for everyone: each id is counted for its peer too, and a peer with
// kMaxPerPeer ids in the queue has its own connection requests refused
// while other peers' are still accepted. A peer over its share waits for
// its own destroys.
#pragma once

#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <pthread.h>

namespace tern::verbs {

class CmReaper {
 public:
  // Ids handed over and not yet destroyed, at which the device stops
  // making more (see above).
  static constexpr size_t kMaxBacklog = 1024;
  // Ids of one peer in the queue at which its requests are refused: an
  // eighth of the whole, so that it takes eight churning peers to reach
  // kMaxBacklog.
  static constexpr size_t kMaxPerPeer = kMaxBacklog / 8;
  // Reaper threads at most: as many destroys the CM may hold at once
  // before the ids behind them wait.
  static constexpr int kMaxThreads = 8;

  // destroy: rdma_destroy_id; a test passes one that blocks as the CM can.
  explicit CmReaper(int (*destroy)(rdma_cm_id*) = rdma_destroy_id) : destroy_(destroy) {}
  ~CmReaper() { stop(); }
  CmReaper(const CmReaper&) = delete;
  CmReaper& operator=(const CmReaper&) = delete;

  // Hands `id` over; it is destroyed soon on a reaper thread (the first
  // started at the first hand-off, more while ids wait and none is idle),
  // counted for `peer` (its remote address; empty: counted in the whole
  // only). Never blocks on the CM. If no thread runs and none can be
  // started, the id is destroyed here.
  void reap(rdma_cm_id* id, const std::string& peer = std::string());
  // Destroys what is still queued and joins the threads. Blocks as long as
  // those destroys do: for the device's destructor only.
  void stop();
  // Ids handed over whose destroy has not returned yet; any thread.
  size_t backlog() const { return backlog_.load(std::memory_order_relaxed); }
  bool full() const { return backlog() >= kMaxBacklog; }
  // Whether `peer` holds kMaxPerPeer ids in the queue. Takes the queue's
  // lock, which the reaper's thread holds only to move an entry (never
  // across a destroy).
  bool peer_full(const std::string& peer) const;
  // Ids of `peer` in the queue.
  size_t peer_backlog(const std::string& peer) const;
  // Reaper threads started (tests).
  int threads() const;

 private:
  void run();
  // Starts one more thread; false if it could not. Called with mu_ held.
  bool start_thread();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int (*destroy_)(rdma_cm_id*);
  std::deque<std::pair<rdma_cm_id*, std::string>> queue_;  // (id, its peer)
  std::unordered_map<std::string, size_t> per_peer_;        // queued ids per named peer
  std::atomic<size_t> backlog_{0};
  bool stopping_ = false;
  int idle_ = 0;      // threads waiting for an id
  int nthreads_ = 0;  // threads started and not joined
  pthread_t native_[kMaxThreads]{};
};

}  // namespace tern::verbs
