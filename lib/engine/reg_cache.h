// RegCache: chunk registration for devices without fast registration (no
// FRWR, no type-2 memory windows): each chunk's pages are registered with
// Pd::reg_mr (ibv_reg_mr on verbs) and the registration is kept for the next
// call that uses the same buffer.
//
// Why a cache: reg_mr is a system call that pins pages (tens of
// microseconds); RPC buffers are reused (an engine's bulk buffers, a storage
// gateway's I/O buffers), so nearly every chunk after the first hits.
//
// What it gives up, and why it is only a fallback: a registration stays valid
// after its call completes, so the peer keeps remote access to those pages
// until the entry is evicted (the kernel's long-retired persistent
// registration modes had the same exposure). There is nothing to invalidate:
// no LOCAL_INV is posted, and remote invalidation must not be offered on
// connections that use it (a Send With Invalidate of a plain MR's rkey is an
// error). Use it only with peers you trust.
//
// Entries are keyed by page-rounded range and access. An entry in use by a
// call in flight is never evicted; past `max_entries` the least recently used
// idle entry is deregistered.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/stats.h"
#include "engine/mr_free_list.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

struct RegCacheStats {
  Counter hits, misses, evictions, registrations_failed, full;
};

class RegCache {
 public:
  // rkeys_live: the engine's gauge; every cached entry is one rkey a peer
  // can use until it is evicted.
  RegCache(rdma::Pd* pd, uint32_t page_size, uint32_t max_entries, Counter* rkeys_live);
  ~RegCache();
  RegCache(const RegCache&) = delete;
  RegCache& operator=(const RegCache&) = delete;

  // Finds or makes a registration covering [addr, addr+len) with `access`.
  // Returns a hold on it (rkey, iova = addr, length = len; `registered` false:
  // there is nothing to invalidate), or nullptr with nothing taken: every
  // entry is in use (*refused false: retry when a call finishes), or the
  // device refused the registration (*refused true, and a warning logged).
  EngineMr* acquire(uint64_t addr, uint64_t len, uint32_t access, bool* refused);
  // Drops a hold (its call finished, or its connection died: the
  // registration itself stays valid either way).
  void release(EngineMr* hold);

  uint32_t entries() const { return static_cast<uint32_t>(by_key_.size()); }
  uint32_t in_use() const { return in_use_; }
  const RegCacheStats& stats() const { return st_; }

 private:
  friend struct RegCacheEntry;
  struct Key {
    uint64_t start, end;
    uint32_t access;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      return static_cast<size_t>(k.start * 0x9E3779B97F4A7C15ull ^ (k.end << 1) ^ k.access);
    }
  };

  bool evict_one();

  rdma::Pd* pd_;
  uint64_t page_mask_;
  uint32_t max_entries_;
  uint64_t tick_ = 0;
  uint32_t in_use_ = 0;  // entries with at least one hold
  Counter* rkeys_live_;
  std::unordered_map<Key, std::unique_ptr<RegCacheEntry>, KeyHash> by_key_;
  std::vector<EngineMr*> free_holds_;
  std::vector<std::unique_ptr<EngineMr[]>> hold_blocks_;
  RegCacheStats st_;
};

}  // namespace tern::rpc
