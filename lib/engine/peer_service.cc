#include "engine/peer_service.h"

#include "base/check.h"

namespace tern::rpc {

PeerService::PeerService(uint32_t capacity, uint32_t quantum)
    : capacity_(capacity), quantum_(quantum == 0 ? 1 : quantum) {}

PeerService::~PeerService() = default;

void PeerService::set_capacity(uint32_t capacity) {
  TERN_ASSERT(held_ == 0 && !held_at_);
  capacity_ = capacity;
}

bool PeerService::hold(ServiceQueue* p, uint32_t index, const rdma::Wc& wc, ConnBase* c) {
  if (index >= capacity_) return false;
  if (!held_at_) {
    // Once per engine, on the first pass where two peers' calls met: an
    // engine that only ever serves one peer (or only calls) never pays it.
    held_at_ = std::make_unique<Held[]>(capacity_);
    order_ = std::make_unique<uint32_t[]>(capacity_);
  }
  Held& h = held_at_[index];
  h.wc = wc;
  h.conn = c;
  h.next = kNil;
  if (p->tail == kNil) p->head = index;
  else held_at_[p->tail].next = index;
  p->tail = index;
  if (p->count++ == 0) ring_.push_back(p);
  ++held_;
  return true;
}

uint32_t PeerService::pop(ServiceQueue* p) {
  const uint32_t i = p->head;
  TERN_ASSERT(i != kNil);
  p->head = held_at_[i].next;
  if (p->head == kNil) p->tail = kNil;
  --p->count;
  --held_;
  return i;
}

uint32_t PeerService::plan(bool batch_since, const ServiceQueue* batch_peer) {
  using Ring = IntrusiveList<ServiceQueue, &ServiceQueue::link>;
  const uint64_t last = turn_++;
  const uint64_t now = turn_;
  // Served last: in the batch served after the last turn, if there was one;
  // else in the last turn.
  auto served_last = [&](const ServiceQueue* p) { return batch_since ? p == batch_peer : p->served == last; };
  uint32_t n = 0;
  if (ring_.size() == 1) {
    // One peer: everything, in order (work-conserving).
    ServiceQueue* p = ring_.pop_front();
    p->served = now;
    while (p->count != 0) order_[n++] = pop(p);
    return n;
  }
  size_t waited = 0;
  for (const ServiceQueue* p = ring_.front(); p != nullptr; p = Ring::next(p)) waited += !served_last(p);
  if (waited != 0 && waited != ring_.size()) {
    // One round of the peers that waited; those served last sit this pass
    // out (they have waited by the next turn).
    for (ServiceQueue* p = ring_.front(); p != nullptr;) {
      ServiceQueue* next = Ring::next(p);
      if (!served_last(p)) {
        p->served = now;
        for (uint32_t k = 0; k < quantum_ && p->count != 0; ++k) order_[n++] = pop(p);
        if (p->count == 0) ring_.remove(p);
      }
      p = next;
    }
    return n;
  }
  // Rounds of `quantum` per peer while two or more have calls; the last
  // busy peer's rest waits for the next pass (its turn comes first then,
  // as it stays at the front of the ring).
  while (ring_.size() >= 2) {
    ServiceQueue* p = ring_.front();
    while (p != nullptr) {
      ServiceQueue* next = Ring::next(p);
      p->served = now;
      for (uint32_t k = 0; k < quantum_ && p->count != 0; ++k) order_[n++] = pop(p);
      if (p->count == 0) ring_.remove(p);
      p = next;
    }
  }
  return n;
}

uint32_t PeerService::release(const ConnBase* c) {
  uint32_t n = 0;
  for (ServiceQueue* p = ring_.front(); p != nullptr;) {
    ServiceQueue* next_peer = IntrusiveList<ServiceQueue, &ServiceQueue::link>::next(p);
    // Unlink c's entries from p's queue, keeping the others' order.
    uint32_t prev = kNil;
    for (uint32_t i = p->head; i != kNil;) {
      const uint32_t next = held_at_[i].next;
      if (c == nullptr || held_at_[i].conn == c) {
        if (prev == kNil) p->head = next;
        else held_at_[prev].next = next;
        if (p->tail == i) p->tail = prev;
        --p->count;
        --held_;
        order_[n++] = i;
      } else {
        prev = i;
      }
      i = next;
    }
    if (p->count == 0) ring_.remove(p);
    p = next_peer;
  }
  return n;
}

}  // namespace tern::rpc
