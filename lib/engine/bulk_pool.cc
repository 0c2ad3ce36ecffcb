#include "engine/bulk_pool.h"

#include <cstring>

#include "base/check.h"
#include "base/reclaim_hook.h"

namespace tern::rpc {

BulkPool::BulkPool(uint8_t* base, size_t bytes, size_t min_block, size_t max_block, bool poison)
    : base_(base), min_block_(min_block), poison_(poison) {
  TERN_REQUIRE(min_block >= 64 && (min_block & (min_block - 1)) == 0 && (max_block & (max_block - 1)) == 0 &&
                   max_block >= min_block,
               "BulkPool blocks must be powers of two with 64 <= min_block <= max_block");
  max_order_ = 0;
  while ((min_block << max_order_) < max_block) ++max_order_;
  bytes_ = bytes / max_block * max_block;
  const size_t units = bytes_ / min_block;
  order_.assign(units, -1);
  free_.assign(units, 0);
  prev_.assign(units, kNone);
  next_.assign(units, kNone);
  head_.assign(static_cast<size_t>(max_order_) + 1, kNone);
  const uint32_t per_top = 1u << max_order_;
  for (size_t u = units; u >= per_top; u -= per_top) push_free(static_cast<uint32_t>(u - per_top), max_order_);
}

int BulkPool::order_for(size_t len) const {
  int o = 0;
  while ((min_block_ << o) < len) ++o;
  return o;
}

void BulkPool::push_free(uint32_t unit, int order) {
  order_[unit] = static_cast<int8_t>(order);
  free_[unit] = 1;
  prev_[unit] = kNone;
  next_[unit] = head_[order];
  if (head_[order] != kNone) prev_[head_[order]] = unit;
  head_[order] = unit;
}

void BulkPool::unlink_free(uint32_t unit, int order) {
  if (prev_[unit] != kNone) next_[prev_[unit]] = next_[unit];
  else head_[order] = next_[unit];
  if (next_[unit] != kNone) prev_[next_[unit]] = prev_[unit];
  prev_[unit] = next_[unit] = kNone;
  free_[unit] = 0;
}

uint8_t* BulkPool::get(size_t len) {
  TERN_REQUIRE(len >= 1 && len <= max_block(), "BulkPool::get(%zu): blocks are 1..%zu bytes", len, max_block());
  const int want = order_for(len);
  int o = want;
  while (o <= max_order_ && head_[o] == kNone) ++o;
  if (o > max_order_) {
    st_.empty.add();
    return nullptr;
  }
  uint32_t u = head_[o];
  unlink_free(u, o);
  // Split down to the size asked for; the upper halves become free buddies.
  while (o > want) {
    --o;
    push_free(u + (1u << o), o);
  }
  order_[u] = static_cast<int8_t>(want);
  const size_t sz = min_block_ << want;
  in_use_ += sz;
  ++out_;
  st_.gets.add();
  st_.in_use.add(sz);
  if (in_use_ > st_.high_water.get()) st_.high_water.set(in_use_);
  return base_ + static_cast<size_t>(u) * min_block_;
}

size_t BulkPool::block_size(const uint8_t* p) const {
  TERN_REQUIRE(owns(p) && static_cast<size_t>(p - base_) % min_block_ == 0, "not a BulkPool block");
  const auto u = static_cast<uint32_t>(static_cast<size_t>(p - base_) / min_block_);
  TERN_REQUIRE(order_[u] >= 0 && !free_[u], "not a BulkPool block in use");
  return min_block_ << order_[u];
}

void BulkPool::put(uint8_t* p) {
  TERN_REQUIRE(owns(p) && static_cast<size_t>(p - base_) % min_block_ == 0, "BulkPool::put of a foreign pointer");
  auto u = static_cast<uint32_t>(static_cast<size_t>(p - base_) / min_block_);
  TERN_REQUIRE(order_[u] >= 0 && !free_[u], "BulkPool::put of a block that is not in use (given back twice?)");
  int o = order_[u];
  const size_t sz = min_block_ << o;
  note_reclaimed(p, sz, "bulk");
  if (poison_) std::memset(p, kPoison, sz);
  in_use_ -= sz;
  --out_;
  ++puts_;
  st_.puts.add();
  st_.in_use.sub(sz);
  // Merge with the buddy while it is a free block of the same order.
  while (o < max_order_) {
    const uint32_t buddy = u ^ (1u << o);
    if (!free_[buddy] || order_[buddy] != o) break;
    unlink_free(buddy, o);
    order_[buddy] = -1;
    order_[u] = -1;
    u = u < buddy ? u : buddy;
    ++o;
  }
  push_free(u, o);
}

}  // namespace tern::rpc
