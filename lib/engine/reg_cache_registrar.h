// RegCacheRegistrar: chunk registration for devices without fast
// registration, through a RegCache (reg_cache.h): each chunk is covered by a
// cached reg_mr whose registration outlives its call. There are no WRs to
// post and nothing to invalidate, so remote invalidation is never offered on
// its connections. The peer keeps access to those pages until the entry is
// evicted: the engine uses it only when the host declares its peers trusted
// (EngineOptions::trusted_peers), and says so once per connection.
#pragma once

#include <memory>

#include "engine/reg_cache.h"
#include "engine/registrar.h"

namespace tern::rpc {

class RegCacheRegistrar final : public Registrar {
 public:
  RegCacheRegistrar(rdma::Pd* pd, uint32_t page_size, uint32_t max_entries, Counter* rkeys_live)
      : cache_(pd, page_size, max_entries, rkeys_live) {}

  bool invalidates() const override { return false; }
  uint32_t segments_for(uint64_t, uint64_t len) const override { return len == 0 ? 0 : 1; }
  uint64_t max_segment_bytes() const override { return UINT32_MAX; }
  int map(uint64_t addr, uint64_t len, uint32_t lkey, uint32_t access, WrChain& chain, RdmaSegment* segs,
          int max_segs, EngineMr** list) override;
  int invalidate(EngineMr*, WrChain&) override { return 0; }
  void remote_invalidated(EngineMr*) override {}
  void release(EngineMr** list) override;
  // A plain registration's state is known whatever happened to the
  // connection: the holds are only dropped.
  void destroy(EngineMr** list) override { release(list); }
  uint32_t mrs_live() const override { return cache_.entries(); }

  const RegCache& cache() const { return cache_; }

 private:
  RegCache cache_;
};

}  // namespace tern::rpc
