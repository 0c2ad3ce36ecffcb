#include "engine/bulk_share.h"

#include <algorithm>

namespace tern::rpc {

BulkShares::BulkShares(size_t capacity, size_t reserve, size_t quantum)
    : capacity_(capacity), reserve_(std::min(reserve, capacity)), quantum_(std::max<size_t>(quantum, 4096)) {}

BulkShares::~BulkShares() = default;

PeerShare* BulkShares::attach(std::string_view key) {
  auto [it, made] = peers_.try_emplace(std::string(key));
  if (made) {
    it->second = std::make_unique<PeerShare>();
    it->second->key = it->first;
  }
  ++it->second->conns;
  return it->second.get();
}

void BulkShares::detach(PeerShare* p) {
  TERN_ASSERT(p->conns > 0);
  if (--p->conns > 0) return;
  // Its last connection is reclaimed only once every call of it is back in
  // the engine's table, having given its memory back and left the queue;
  // only an engine being destroyed drops connections whose calls a handler
  // still holds, and then the entry simply goes with the engine.
  if (p->held == 0 && p->waiting.empty()) peers_.erase(p->key);
}

size_t BulkShares::share_of(const PeerShare* p) const {
  const size_t n = active_ + (p->active ? 0 : 1);
  return std::min(capacity_ / n, capacity_ - reserve_);
}

bool BulkShares::eligible_waiter(const PeerShare* not_p) const {
  for (const PeerShare* q = ring_.front(); q != nullptr; q = ring_.next(q))
    if (q != not_p && within_share(q, q->waiting.front()->pool_need)) return true;
  return false;
}

bool BulkShares::may_take(const PeerShare* p, size_t need, size_t free_bytes, bool turn) const {
  if (need == 0) return true;
  const bool within = within_share(p, need);
  if (!turn && !ring_.empty()) {
    // Others wait. A new call goes behind its own peer's, and behind anyone
    // the queue would serve first: it takes memory now only if it stays
    // within its share and every peer waiting is beyond its own.
    if (!p->waiting.empty() || !within) return false;
    return !eligible_waiter(p);
  }
  // Chosen by the queue, or nobody waits: within its share it takes what is
  // free; beyond it, it borrows idle memory but leaves the reserve.
  return within || free_bytes >= need + reserve_;
}

void BulkShares::enqueue(PeerShare* p, SrvCall* sc) {
  p->waiting.push_back(sc);
  ++waiters_;
  if (!ring_.linked(p)) {
    p->deficit = 0;
    ring_.push_back(p);
  }
  update(p);
}

void BulkShares::dequeue(PeerShare* p, SrvCall* sc, bool served) {
  p->waiting.remove(sc);
  --waiters_;
  if (served) p->deficit -= static_cast<int64_t>(cost(sc));
  if (p->waiting.empty()) {
    ring_.remove(p);
    p->deficit = 0;
  }
  update(p);
}

PeerShare* BulkShares::pick() {
  TERN_ASSERT(!ring_.empty());
  // Peers beyond their share are passed over while one within its share
  // waits. Each visit to a peer that may be served adds a quantum to its
  // credit, so the loop ends within (largest cost / quantum) rounds.
  const bool any_within = eligible_waiter(nullptr);
  for (;;) {
    PeerShare* p = ring_.front();
    const SrvCall* head = p->waiting.front();
    if (any_within && !within_share(p, head->pool_need)) {
      ring_.rotate();
      continue;
    }
    if (p->deficit >= static_cast<int64_t>(cost(head))) return p;
    p->deficit += static_cast<int64_t>(quantum_);
    ring_.rotate();
  }
}

}  // namespace tern::rpc
