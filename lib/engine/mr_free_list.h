// MrFreeList: an engine's fast-registration MRs not in use. The owning engine
// takes MRs one at a time as it registers chunks and gives each back as soon as
// it is invalidated (xprtrdma's lesson: never grab a request's worth under a
// lock). The owner's side is a plain stack; other threads that finish with an
// MR (an SPDK-like host completing work elsewhere) push onto a lock-free stack
// that the owner takes whole with one exchange, so neither side ever waits and
// there is no ABA (only the owner pops, and it pops everything).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/check.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

struct RegCacheEntry;

// One fast-registration MR and what it currently maps; or, on a device
// without fast registration, a call's hold on a RegCache entry (mr is null).
struct EngineMr {
  std::unique_ptr<rdma::FastMr> mr;
  RegCacheEntry* cached = nullptr;
  EngineMr* next = nullptr;  // free-list and request-list link
  uint32_t rkey = 0;         // of the current registration
  uint64_t iova = 0;
  uint32_t length = 0;
  // REG_MR posted and not yet proved invalid: the peer may reach the memory
  // (counted in EngineStats::rkeys_live).
  bool registered = false;
  // Its LOCAL_INV is posted: still reachable until that completes, but no
  // longer the peer's to invalidate (a Send With Invalidate naming it now is
  // a protocol error, and a double invalidation on some devices).
  bool invalidating = false;
  // Registered since it last came back: FastMr::retire is due before reuse
  // (whoever invalidated it, this end or the peer).
  bool exposed = false;
  uint32_t slot = 0;  // its place in the registrar's table of every MR it made
};

class MrFreeList {
 public:
  // Owner thread only.
  EngineMr* get() {
    if (local_.empty()) take_remote();
    if (local_.empty()) return nullptr;
    EngineMr* m = local_.back();
    local_.pop_back();
    TERN_ASSERT(!m->registered, "a registered MR was on the free list");
    return m;
  }
  void put(EngineMr* m) {
    TERN_ASSERT(!m->registered, "MR returned before it was invalidated");
    m->next = nullptr;
    local_.push_back(m);
  }
  void reserve(size_t n) { local_.reserve(n); }
  size_t local_size() const { return local_.size(); }

  // Any thread: lock-free push.
  void put_remote(EngineMr* m) {
    EngineMr* head = remote_.load(std::memory_order_relaxed);
    do {
      m->next = head;
    } while (!remote_.compare_exchange_weak(head, m, std::memory_order_release, std::memory_order_relaxed));
  }

 private:
  void take_remote() {
    EngineMr* m = remote_.exchange(nullptr, std::memory_order_acquire);
    while (m != nullptr) {
      EngineMr* next = m->next;
      put(m);
      m = next;
    }
  }

  std::vector<EngineMr*> local_;
  std::atomic<EngineMr*> remote_{nullptr};
};

}  // namespace tern::rpc
