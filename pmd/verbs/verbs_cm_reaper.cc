// The reaper's thread (verbs_cm_reaper.h says why it exists).
#include "verbs/verbs_cm_reaper.h"

#include <pthread.h>


#include "base/log.h"

namespace tern::verbs {

void CmReaper::reap(rdma_cm_id* id, const std::string& peer) {
  if (id == nullptr) return;
  {
    std::unique_lock<std::mutex> g(mu_);
    if (stopping_) {
      // The device is being destroyed (its requests reject and destroy
      // their ids from its destructor): no thread to hand over to.
      g.unlock();
      destroy_(id);
      return;
    }
    if (nthreads_ == 0 && !start_thread()) {
      g.unlock();
      TERN_LOG(kWarn, "verbs", "cannot start the CM id reaper thread: destroying an id on the engine's thread");
      destroy_(id);
      return;
    }
    queue_.emplace_back(id, peer);
    if (!peer.empty()) ++per_peer_[peer];
    backlog_.fetch_add(1, std::memory_order_relaxed);
    // Every thread busy in a destroy (one the CM may hold for a minute):
    // another takes this id. A thread that cannot be started leaves it to
    // the ones there are.
    if (queue_.size() > static_cast<size_t>(idle_) && nthreads_ < kMaxThreads) start_thread();
  }
  cv_.notify_one();
}

bool CmReaper::start_thread() {
  // pthread_create, not std::thread: std::thread reports failure by an
  // exception, and lib/ and pmd/ do without them.
  pthread_t t;
  auto trampoline = [](void* self) -> void* {
    static_cast<CmReaper*>(self)->run();
    return nullptr;
  };
  if (pthread_create(&t, nullptr, trampoline, this) != 0) return false;
  pthread_setname_np(t, "tern-cm-reaper");
  native_[nthreads_++] = t;
  return true;
}

int CmReaper::threads() const {
  std::lock_guard<std::mutex> g(mu_);
  return nthreads_;
}

void CmReaper::run() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(g, [&] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left
    auto [id, peer] = std::move(queue_.front());
    queue_.pop_front();
    g.unlock();
    destroy_(id);  // may block for as long as the CM holds the id
    g.lock();
    // Counted until the destroy has returned: the kernel held the id until then.
    if (!peer.empty()) {
      auto it = per_peer_.find(peer);
      if (it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
    }
    backlog_.fetch_sub(1, std::memory_order_relaxed);
  }
}

size_t CmReaper::peer_backlog(const std::string& peer) const {
  if (peer.empty()) return 0;
  std::lock_guard<std::mutex> g(mu_);
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

bool CmReaper::peer_full(const std::string& peer) const { return peer_backlog(peer) >= kMaxPerPeer; }

void CmReaper::stop() {
  int n;
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
    n = nthreads_;
    nthreads_ = 0;
  }
  cv_.notify_all();
  // Each thread destroys what is left before it sees the queue empty.
  for (int i = 0; i < n; ++i) pthread_join(native_[i], nullptr);
}

}  // namespace tern::verbs
