// FrwrRegistrar: per-RPC fast memory registration, the FRWR way (the kernel's
// frwr_ops.c, in Tern's terms).
//
//  - A chunk (a contiguous buffer the user handed in) is mapped into as few
//    fast-registration MRs as the device's depth allows: one MR covers up to
//    `depth` pages, and only a chunk larger than that is split.
//  - MRs come off the engine's MrFreeList one at a time, as chunks are mapped;
//    an MR is created on demand while fewer than `max_mrs` exist.
//  - Each registration takes a fresh rkey (the key byte moves on), so a peer
//    holding an old rkey can never reach the new mapping.
//  - The REG_MR WRs are appended to the caller's chain ahead of the Send that
//    advertises the rkeys; they are unsignaled (the Send's ordering covers them).
//  - Invalidation is a LOCAL_INV chain of which only the last WR is signaled:
//    strong send-queue ordering makes its completion cover the whole chain, and
//    that completion is what finishes the RPC. An MR the peer invalidated with
//    Send With Invalidate needs no LOCAL_INV.
//  - After a connection loss an MR's state is unknown (its REG_MR or LOCAL_INV
//    may have been flushed), so it is destroyed, never reused; new ones are
//    made on demand (xprtrdma's recovery rule).
//  - On a device without fast registration the same calls work through a
//    RegCache (reg_cache.h): one cached reg_mr per chunk, no WRs, nothing to
//    invalidate. The engine then offers no remote invalidation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/stats.h"
#include "engine/mr_free_list.h"
#include "engine/reg_cache.h"
#include "engine/wr_chain.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

// One RDMA segment as RPC-over-RDMA carries it (handle, length, offset).
struct RdmaSegment {
  uint32_t handle;
  uint32_t length;
  uint64_t offset;
};

struct RegistrarStats {
  Counter mrs_created, mrs_destroyed, reg_wrs, local_inv_wrs, remote_invalidated, out_of_mrs;
  // Destroyed by destroy(): their call's connection was lost with their
  // state unknown (xprtrdma's orphaned MRs).
  Counter mrs_orphaned;
};

class FrwrRegistrar {
 public:
  // depth: pages per MR (already capped by the device); max_mrs: MRs to create at most;
  // zero_based: the device's registrations start at offset 0 (DeviceCaps::fast_reg_zero_based).
  // rkeys_live: the engine's gauge of registrations a peer can reach right
  // now (EngineStats::rkeys_live), kept up to date by this registrar.
  FrwrRegistrar(rdma::Pd* pd, uint32_t depth, uint32_t page_size, uint32_t max_mrs, bool zero_based,
                Counter* rkeys_live);
  // The fallback for trusted peers: chunks registered through a RegCache of
  // max_mrs entries, each of which stays reachable while it is cached.
  struct UseRegCache {};
  FrwrRegistrar(rdma::Pd* pd, uint32_t page_size, uint32_t max_mrs, UseRegCache, Counter* rkeys_live);
  ~FrwrRegistrar();
  // False in RegCache mode: registrations outlive their calls, so there is
  // nothing to invalidate (locally or by the peer).
  bool invalidates() const { return cache_ == nullptr; }
  const RegCache* cache() const { return cache_.get(); }

  uint32_t depth() const { return depth_; }
  // Segments a chunk of `len` bytes at `addr` needs.
  uint32_t segments_for(uint64_t addr, uint64_t len) const;

  // Maps [addr, addr+len) (inside the long-lived registration `lkey`) with
  // `access`: appends REG_MR WRs to `chain`, writes the segments to segs, and
  // links the MRs onto *list. Returns the number of segments, or -1 when
  // there are not enough MRs or room (then nothing was appended or taken),
  // or kRefused when the device refused to register the memory (RegCache
  // mode; retrying the same call would not help).
  static constexpr int kRefused = -2;
  int map(uint64_t addr, uint64_t len, uint32_t lkey, uint32_t access, WrChain& chain, RdmaSegment* segs,
          int max_segs, EngineMr** list);

  // The MR on `list` whose registration the peer may still invalidate with
  // Send With Invalidate (registered, its LOCAL_INV not yet posted) under
  // `rkey`, or nullptr.
  static EngineMr* live_with_rkey(EngineMr* list, uint32_t rkey);
  // The peer invalidated m's registration (Send With Invalidate, and m came
  // from live_with_rkey): it is invalid now and never invalidated again.
  void remote_invalidated(EngineMr* m);
  // Appends LOCAL_INV for every MR on the list still registered; the last is
  // signaled with wr_id. Returns how many WRs were appended (0: none needed).
  int invalidate(EngineMr* list, WrChain& chain, uint64_t wr_id);
  // The invalidation finished (LOCAL_INV chain completed, or the peer did
  // it): every MR on the list goes back to the free list.
  void release(EngineMr** list);
  // Connection lost: the MRs' state is unknown; destroy them. (RegCache
  // holds are only dropped: a plain registration's state is known.)
  void destroy(EngineMr** list);

  MrFreeList& free_list() { return free_; }
  const RegistrarStats& stats() const { return *st_; }
  // Counts into `totals` from now on (an engine sums its registrars' figures).
  void share_stats(RegistrarStats* totals) { st_ = totals; }
  uint32_t mrs_live() const { return live_; }

 private:
  EngineMr* take();
  // m's registration can no longer be reached: the gauge goes down.
  void unregistered(EngineMr* m);

  rdma::Pd* pd_;
  uint32_t depth_, page_size_, max_mrs_;
  bool zero_based_;
  uint32_t live_ = 0;
  MrFreeList free_;
  std::vector<EngineMr*> all_;  // every MR ever created and not destroyed, for teardown
  std::unique_ptr<RegCache> cache_;
  Counter* rkeys_live_;
  RegistrarStats own_st_;
  RegistrarStats* st_ = &own_st_;
};

}  // namespace tern::rpc
