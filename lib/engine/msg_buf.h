// Message buffers: the engine's registered buffers for inline messages --
// send buffers (a call's or a reply's RPC-over-RDMA message) and receive
// buffers -- in pools shared by every connection of the engine, carved from
// the arena in slabs as they are first needed and never given back to it.
// A connection holds none while idle: a call takes a send buffer when it is
// marshaled and gives it back when its Send is known complete; a receive
// buffer belongs to a receive queue (posted), then to the call or reply it
// carries (held), then goes back to be posted again.
//
// Every buffer lies in the arena, whose one local-only registration per
// protection domain gives its lkey: no lookup per buffer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/check.h"
#include "base/reclaim_hook.h"
#include "mem/arena.h"

namespace tern::rpc {

struct MsgBuf {
  // Where a buffer is (I1: a receive buffer is the device's from post to
  // completion, then the CPU's; a buffer on its way back is held by nobody).
  enum class Where : uint8_t {
    kPool,    // free, in its pool
    kQueued,  // a receive buffer waiting in a receive queue to be posted
    kPosted,  // posted to the device (a receive) -- only its completion gives it back
    kHeld,    // owned by a request, a server call or a receive being processed
  };
  uint8_t* data = nullptr;
  uint32_t cap = 0;
  uint32_t index = 0;      // in its pool: a receive's wr_id names it
  Where where = Where::kPool;
  uint8_t wc_flags = 0;    // receive: the completion's flags (kWcWithInv)
  uint16_t queue = 0;      // receive: the receive queue it was posted to
  uint32_t len = 0;        // receive: bytes received
  uint32_t inv_rkey = 0;   // receive: the rkey a Send With Invalidate invalidated
};

class MsgBufPool {
 public:
  static constexpr uint8_t kPoison = 0xa7;
  static constexpr uint32_t kSlab = 32;

  // Buffers of buf_size bytes, at most max_count of them, carved from arena.
  MsgBufPool(mem::Arena* arena, uint32_t buf_size, uint32_t max_count, bool poison)
      : arena_(arena), size_(buf_size), max_(max_count), poison_(poison) {}

  // A free buffer (Where::kHeld), or nullptr when max_count are out or the
  // arena is full.
  MsgBuf* get() {
    if (free_.empty() && !grow()) return nullptr;
    MsgBuf* b = free_.back();
    free_.pop_back();
    TERN_ASSERT(b->where == MsgBuf::Where::kPool);
    b->where = MsgBuf::Where::kHeld;
    ++out_;
    return b;
  }
  void put(MsgBuf* b) {
    TERN_REQUIRE(b->where != MsgBuf::Where::kPool, "message buffer %u given back twice", b->index);
    TERN_ASSERT(b->where != MsgBuf::Where::kPosted, "message buffer %u given back while posted", b->index);
    note_reclaimed(b->data, b->cap, "message");
    if (poison_) __builtin_memset(b->data, kPoison, b->cap);
    b->where = MsgBuf::Where::kPool;
    b->len = 0;
    b->wc_flags = 0;
    b->inv_rkey = 0;
    free_.push_back(b);
    --out_;
  }
  // By index (a receive's wr_id); nullptr when it names no buffer.
  MsgBuf* at(uint64_t index) {
    if (index >= made_) return nullptr;
    return &slabs_[index / kSlab][index % kSlab];
  }
  uint32_t buf_size() const { return size_; }
  uint32_t made() const { return made_; }
  uint32_t out() const { return out_; }
  uint32_t max_count() const { return max_; }
  bool poison() const { return poison_; }

 private:
  // Out of line: get() is inlined into the call's path (the server's
  // start(), the client's send), where an inlined grow made the caller save
  // registers on every call for what happens once a slab.
  [[gnu::noinline]] bool grow() {
    if (made_ >= max_) return false;
    uint32_t n = std::min(kSlab, max_ - made_);
    auto* mem = static_cast<uint8_t*>(arena_->carve(size_t{size_} * n, 64));
    if (mem == nullptr) return false;
    if (made_ % kSlab == 0) slabs_.push_back(std::make_unique<MsgBuf[]>(kSlab));
    for (uint32_t i = 0; i < n; ++i) {
      MsgBuf& b = slabs_[(made_ + i) / kSlab][(made_ + i) % kSlab];
      b.data = mem + size_t{size_} * i;
      b.cap = size_;
      b.index = made_ + i;
      free_.push_back(&b);
    }
    made_ += n;
    return true;
  }

  mem::Arena* arena_;
  uint32_t size_, max_;
  bool poison_;
  uint32_t made_ = 0, out_ = 0;
  std::vector<std::unique_ptr<MsgBuf[]>> slabs_;
  std::vector<MsgBuf*> free_;
};

}  // namespace tern::rpc
