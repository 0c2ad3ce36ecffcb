// BulkPool: the engine's registered memory for bulk data, shared by every
// call of every connection: a server's read-chunk destinations, its bulk
// results and reply-chunk staging; a client's long-call staging. Calls draw
// blocks when they need them and give them back when done, so an idle
// connection holds no bulk memory and a server's memory no longer grows with
// its connections (an engine that gave every server call slot max_bulk +
// max_reply of its own let three idle peers fill its arena).
//
// A binary buddy allocator over one region of the arena: blocks of
// min_block << k bytes up to max_block, split on demand and merged with
// their buddy when both are free, so fragmentation stays bounded and get()
// and put() cost O(log(max_block / min_block)). Metadata lives beside the
// memory, never inside it (the memory is registered, and a device may be
// writing into a block the pool thinks about).
//
// When no block is free get() returns nullptr and the caller waits (the
// engine keeps waiting calls in their peers' queues, bulk_share.h, and
// retries them when memory comes back): a call never fails for want of bulk
// memory. A request larger than
// max_block is a caller bug (the engine bounds chunks by max_bulk first).
//
// poison: fill blocks with a pattern when they come back (test builds), so
// that a block reused while a device or peer could still read it shows up as
// corrupted data instead of going unnoticed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/stats.h"

namespace tern::rpc {

struct BulkPoolStats {
  Counter gets;       // blocks handed out
  Counter puts;       // blocks given back
  Counter empty;      // get() found nothing free (a call waited)
  Counter in_use;     // gauge: bytes handed out now
  Counter high_water; // the most bytes handed out at once
};

class BulkPool {
 public:
  static constexpr uint8_t kPoison = 0xb5;

  // [base, base + bytes) in blocks from min_block to max_block bytes (powers
  // of two, min_block <= max_block); bytes is rounded down to whole max_blocks.
  BulkPool(uint8_t* base, size_t bytes, size_t min_block, size_t max_block, bool poison = false);

  // A block of at least len bytes (1 <= len <= max_block), or nullptr.
  uint8_t* get(size_t len);
  // Gives back a block from get(); a block given back twice, or a pointer
  // the pool never handed out, is a caller bug (REQUIRE).
  void put(uint8_t* p);

  size_t block_size(const uint8_t* p) const;
  // The size of the block get(len) hands out.
  size_t block_for(size_t len) const { return min_block_ << order_for(len); }
  bool owns(const uint8_t* p) const { return p >= base_ && p < base_ + bytes_; }
  size_t capacity() const { return bytes_; }
  size_t max_block() const { return min_block_ << max_order_; }
  size_t in_use() const { return in_use_; }
  // Blocks handed out and not given back (accounting: 0 when idle).
  uint64_t blocks_out() const { return out_; }
  // Increases on every put(): waiters retry only when it moved.
  uint64_t generation() const { return puts_; }
  const BulkPoolStats& stats() const { return st_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  int order_for(size_t len) const;
  void push_free(uint32_t unit, int order);
  void unlink_free(uint32_t unit, int order);

  uint8_t* base_;
  size_t bytes_;
  size_t min_block_;
  int max_order_;
  bool poison_;
  // Per min_block unit: the order of the block that starts there (-1: not a
  // block head), whether it is free, and its free-list links.
  std::vector<int8_t> order_;
  std::vector<uint8_t> free_;
  std::vector<uint32_t> prev_, next_;
  std::vector<uint32_t> head_;  // free list per order
  size_t in_use_ = 0;
  uint64_t out_ = 0, puts_ = 0;
  BulkPoolStats st_;
};

}  // namespace tern::rpc
