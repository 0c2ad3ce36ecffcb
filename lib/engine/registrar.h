// Registrar: how a client makes a call's memory reachable by the server for
// the call's chunks, and unreachable again. One interface, two strategies
// side by side, as xprtrdma once kept one memory-registration mode per file
// behind one ops table:
//
//   FrwrRegistrar (frwr_registrar.h)      per-call fast registration (FRWR,
//       type-2 memory windows, mlx5 UMR): REG_MR WRs chained ahead of the
//       Send, invalidated by a LOCAL_INV chain or by the server's Send With
//       Invalidate before the call completes. The only strategy that keeps
//       the promise "a peer reaches a call's memory only until the call
//       completes"; the default wherever the device has fast registration.
//   RegCacheRegistrar (reg_cache_registrar.h)   for devices without it: a
//       cached reg_mr per chunk that outlives its call. Trusted peers only.
//
// A call's registrations are a list of EngineMr (mr_free_list.h) that the
// request owns from map() until release() (its invalidation is done) or
// destroy() (its connection was lost and the MRs' state is unknown).
#pragma once

#include <cstdint>

#include "base/stats.h"
#include "engine/chunks.h"
#include "engine/mr_free_list.h"
#include "engine/wr_chain.h"

namespace tern::rpc {

struct RegistrarStats {
  Counter mrs_created, mrs_destroyed, reg_wrs, local_inv_wrs, remote_invalidated, out_of_mrs;
  // Destroyed by destroy(): their call's connection was lost with their
  // state unknown (xprtrdma's orphaned MRs).
  Counter mrs_orphaned;
};

class Registrar {
 public:
  // map() results besides a segment count.
  static constexpr int kNoResources = -1;  // not enough MRs or chain room now: retry later, nothing taken
  static constexpr int kRefused = -2;      // the device refused to register this memory: retrying will not help

  virtual ~Registrar() = default;
  // True when registrations end with their call (they must be invalidated,
  // and remote invalidation may be offered); false for the registration cache.
  virtual bool invalidates() const = 0;
  // Segments a chunk of `len` bytes at `addr` needs.
  virtual uint32_t segments_for(uint64_t addr, uint64_t len) const = 0;
  // The largest chunk one segment can cover whatever its alignment (a bound
  // for sizing a buffer whose address is not known yet).
  virtual uint64_t max_segment_bytes() const = 0;
  // Makes [addr, addr+len) (inside the long-lived registration `lkey`)
  // reachable with `access`: appends REG_MR WRs to `chain` if the strategy
  // needs any, writes the segments to advertise to segs, and links the
  // registrations onto *list. Returns the number of segments, or one of the
  // results above.
  virtual int map(uint64_t addr, uint64_t len, uint32_t lkey, uint32_t access, WrChain& chain, RdmaSegment* segs,
                  int max_segs, EngineMr** list) = 0;
  // Appends a LOCAL_INV for every registration on the list the peer can
  // still reach (unsignaled: the post path signals the chain's last WR).
  // Returns how many (0: nothing to invalidate; release() at once).
  virtual int invalidate(EngineMr* list, WrChain& chain) = 0;
  // The peer invalidated m (Send With Invalidate; m from live_with_rkey).
  virtual void remote_invalidated(EngineMr* m) = 0;
  // The invalidation is done (LOCAL_INV chain completed, or the peer did
  // it, or nothing was ever posted): the list's MRs go back for reuse.
  virtual void release(EngineMr** list) = 0;
  // The connection was lost and the QP drained: the list's MRs are in an
  // unknown state (a REG_MR or LOCAL_INV may have been flushed), so they
  // are destroyed, never reused (xprtrdma's recovery rule).
  virtual void destroy(EngineMr** list) = 0;
  // MRs (or cache entries) this registrar holds right now.
  virtual uint32_t mrs_live() const = 0;

  // The registration on `list` the peer may still invalidate with Send With
  // Invalidate (registered, its LOCAL_INV not yet posted) under `rkey`.
  static EngineMr* live_with_rkey(EngineMr* list, uint32_t rkey) {
    for (EngineMr* m = list; m != nullptr; m = m->next)
      if (m->registered && !m->invalidating && m->cached == nullptr && m->rkey == rkey) return m;
    return nullptr;
  }

  const RegistrarStats& stats() const { return *st_; }
  // Counts into `totals` from now on (an engine sums its registrars' figures).
  void share_stats(RegistrarStats* totals) { st_ = totals; }

 protected:
  RegistrarStats own_st_;
  RegistrarStats* st_ = &own_st_;
};

}  // namespace tern::rpc
