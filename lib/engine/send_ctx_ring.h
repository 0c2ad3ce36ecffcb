// SendCtxRing: which request each posted Send belongs to, so that the Send
// side's ownership of a request can be released when its Send is known done.
//
// Sends are posted unsignaled except one per batch (and whenever the ring runs
// low), because a completion per Send costs CQ work and doorbells. Verbs'
// strong send-queue ordering makes one signaled completion prove that every
// earlier Send finished, so that completion walks the ring from its tail and
// releases every context up to and including its own. A Send that failed to
// post cancels its context (its request keeps only the RPC owner), and
// teardown releases the unsignaled tail that no signaled completion will ever
// walk (the 2026 xprtrdma patch set's rule).
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"

namespace tern::rpc {

class SendCtxRing {
 public:
  // `size` contexts (a power of two); one is signaled at least every `batch`.
  SendCtxRing(uint32_t size, uint32_t batch) : slots_(size, nullptr), mask_(size - 1), batch_(batch) {
    TERN_REQUIRE(size >= 2 && (size & (size - 1)) == 0, "send context ring size %u must be a power of two", size);
    TERN_REQUIRE(batch >= 1 && batch < size, "signal batch %u must be in [1, %u)", batch, size);
  }

  uint32_t size() const { return mask_ + 1; }
  uint32_t in_use() const { return head_ - tail_; }
  bool full() const { return in_use() == size(); }

  // Takes the next context for a Send owned by `owner`. Returns its index and
  // whether this Send must be signaled: every `batch`-th, and always when the
  // ring would otherwise fill with Sends that no completion will walk.
  uint32_t acquire(void* owner, bool* signal) {
    TERN_REQUIRE(!full(), "send context ring full; wait for a Send completion");
    TERN_ASSERT(owner != nullptr);
    uint32_t idx = head_++;
    slots_[idx & mask_] = owner;
    ++since_signal_;
    *signal = since_signal_ >= batch_ || in_use() + batch_ > size();
    if (*signal) since_signal_ = 0;
    return idx;
  }

  // The Send could not be posted: forget its owner without releasing it.
  // Only the most recent acquire can be cancelled (Sends post in order).
  void cancel(uint32_t idx) {
    TERN_ASSERT(idx + 1 == head_);
    slots_[idx & mask_] = nullptr;
  }

  // A signaled Send at `idx` completed (successfully or flushed): releases
  // every context from the tail through idx. Returns how many owners released.
  template <typename Release>
  uint32_t complete_through(uint32_t idx, Release&& release) {
    // A completion for a context already walked (a flush of an unsignaled Send
    // after a later signaled one) releases nothing.
    if (static_cast<int32_t>(idx - tail_) < 0 || static_cast<int32_t>(idx - head_) >= 0) return 0;
    uint32_t n = 0;
    while (static_cast<int32_t>(idx - tail_) >= 0) {
      void*& s = slots_[tail_ & mask_];
      if (s != nullptr) {
        release(s);
        s = nullptr;
        ++n;
      }
      ++tail_;
    }
    return n;
  }

  // Teardown, after the QP is drained: the unsignaled tail.
  template <typename Release>
  uint32_t release_all(Release&& release) {
    return head_ == tail_ ? 0 : complete_through(head_ - 1, release);
  }

 private:
  std::vector<void*> slots_;
  uint32_t mask_;
  uint32_t batch_;
  uint32_t head_ = 0, tail_ = 0;
  uint32_t since_signal_ = 0;
};

}  // namespace tern::rpc
