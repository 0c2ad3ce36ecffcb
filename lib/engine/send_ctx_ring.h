// SendCtxRing: a context for every chain the engine posts on a send queue
// (a call's REG_MRs and Send, a reply's WRITEs and Send, a LOCAL_INV chain,
// a read chunk's READs), in posting order, with the WR sequence number that
// chain ended at (sq_budget.h).
//
// Sends are posted unsignaled except one per batch (and whenever the ring
// runs low), because a completion per Send costs CQ work. Verbs' strong
// send-queue ordering makes any signaled completion prove that every earlier
// WR finished, so a completion walks the ring from its tail and releases
// every context up to and including its own: each earlier Send's owner lets
// go of its request, and the send-queue budget retires the walked sequence.
// LOCAL_INV and READ chains are always signaled (their completion is what
// moves their call on), and they walk the ring like any other.
//
// Every WR of a chain carries its context's index in its wr_id, so that a
// failed or flushed WR that was posted unsignaled (which still completes,
// with an error) lands on its own chain's context; a context is processed
// once, by whichever completion reaches it first. A chain whose post failed
// cancels its context, and teardown releases the unsignaled tail that no
// completion will ever walk (the rule of the
// "xprtrdma: Decouple req recycling from RPC completion" series (linux-nfs, 2026)).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "base/check.h"

namespace tern::rpc {

// What a context's chain was for: who must hear that it is done.
enum class SendCtxKind : uint8_t {
  kCancelled,   // its post failed: nobody
  kCallSend,    // a client call's Send (REG_MRs ahead of it): the request's Send owner
  kReplySend,   // a server reply's Send (RDMA WRITEs ahead of it), or an RDMA_ERROR
  kInvalidate,  // a client call's LOCAL_INV chain: its completion completes the call
  kRead,        // a server call's RDMA READs of its read chunks
};

struct SendCtx {
  SendCtxKind kind = SendCtxKind::kCancelled;
  uint32_t obj = 0;  // the request or server call (an index in its engine-wide table)
  uint64_t seq = 0;  // SqBudget sequence at the end of the chain
};

class SendCtxRing {
 public:
  // Up to `size` contexts (a power of two); one Send is signaled at least
  // every `batch`. The storage starts at kInitial contexts and doubles as
  // chains in flight need it: an idle connection (most of a gateway's
  // thousands) never needs more than a few, a busy one reaches `size` in
  // its first bursts (an idle connection must cost its server at most
  // 16 KiB: docs/performance.md, "Connections at scale").
  static constexpr uint32_t kInitial = 8;
  SendCtxRing(uint32_t size, uint32_t batch) : size_(size), batch_(batch) {
    TERN_REQUIRE(size >= 2 && (size & (size - 1)) == 0, "send context ring size %u must be a power of two", size);
    TERN_REQUIRE(batch >= 1 && batch < size, "signal batch %u must be in [1, %u)", batch, size);
    cap_ = std::min(size, kInitial);
    ctx_.reset(new SendCtx[cap_]);
    mask_ = cap_ - 1;
  }

  uint32_t size() const { return size_; }
  // Contexts it has storage for now (at most size()).
  uint32_t capacity() const { return cap_; }
  uint32_t in_use() const { return head_ - tail_; }
  bool full() const { return in_use() == size(); }

  // Takes the next context. *signal says whether the chain's last WR must be
  // signaled: always for LOCAL_INV and READ chains; for Sends every
  // `batch`-th, and whenever the ring would otherwise fill with contexts no
  // completion will walk.
  // `force`: the caller wants this one signaled (its connection goes
  // quiet, or the engine's pools run low: see ConnBase::post).
  uint32_t acquire(SendCtxKind kind, uint32_t obj, uint64_t seq, bool* signal, bool force = false) {
    TERN_REQUIRE(!full(), "send context ring full; check room() first");
    if (TERN_UNLIKELY(in_use() == cap_)) grow();
    uint32_t idx = head_++;
    ctx_[idx & mask_] = SendCtx{kind, obj, seq};
    ++since_signal_;
    *signal = force || kind == SendCtxKind::kInvalidate || kind == SendCtxKind::kRead || since_signal_ >= batch_ ||
              in_use() + batch_ > size();
    if (*signal) since_signal_ = 0;
    return idx;
  }

  // The chain could not be posted: its context releases nobody. Only the
  // most recent acquire can be cancelled (chains post in order).
  void cancel(uint32_t idx) {
    TERN_ASSERT(idx + 1 == head_);
    ctx_[idx & mask_].kind = SendCtxKind::kCancelled;
  }

  // A completion for the chain at `idx` (successful or not): calls
  // done(ctx, is_own) for every context from the tail through idx, in order
  // (is_own: the completion is that context's own), and returns how many
  // contexts it walked. A completion for a context already walked (a flush
  // of an unsignaled WR after a later completion) walks nothing.
  template <typename Done>
  uint32_t complete_through(uint32_t idx, Done&& done) {
    if (static_cast<int32_t>(idx - tail_) < 0 || static_cast<int32_t>(idx - head_) >= 0) return 0;
    uint32_t n = 0;
    while (static_cast<int32_t>(idx - tail_) >= 0) {
      SendCtx c = ctx_[tail_ & mask_];
      bool own = tail_ == idx;
      ++tail_;
      ++n;
      done(c, own);
    }
    return n;
  }

  // Teardown, after the QP is drained: every context still in the ring.
  template <typename Done>
  uint32_t release_all(Done&& done) {
    return head_ == tail_ ? 0 : complete_through(head_ - 1, [&](const SendCtx& c, bool) { done(c); });
  }

 private:
  // Twice the storage; the contexts in use keep their indices (wr_ids
  // carry them) and move to their places under the new mask.
  void grow() {
    const uint32_t cap = cap_ * 2;
    std::unique_ptr<SendCtx[]> n(new SendCtx[cap]);
    for (uint32_t i = tail_; i != head_; ++i) n[i & (cap - 1)] = ctx_[i & mask_];
    ctx_ = std::move(n);
    cap_ = cap;
    mask_ = cap - 1;
  }

  std::unique_ptr<SendCtx[]> ctx_;
  uint32_t cap_ = 0, mask_ = 0;
  uint32_t size_;
  uint32_t batch_;
  uint32_t head_ = 0, tail_ = 0;
  uint32_t since_signal_ = 0;
};

}  // namespace tern::rpc
