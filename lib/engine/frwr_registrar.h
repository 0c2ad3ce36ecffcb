// FrwrRegistrar: per-RPC fast memory registration, the FRWR way (the kernel's
// frwr_ops.c, in Tern's terms).
//
//  - A chunk (a contiguous buffer the user handed in) is mapped into as few
//    fast-registration MRs as the device's depth allows: one MR covers up to
//    `depth` pages, and only a chunk larger than that is split.
//  - MRs come off the MrFreeList one at a time, as chunks are mapped; an MR
//    is created on demand while fewer than `max_mrs` exist.
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
#pragma once

#include <cstdint>
#include <vector>

#include "engine/registrar.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

class FrwrRegistrar final : public Registrar {
 public:
  // depth: pages per MR (already capped by the device); max_mrs: MRs to create at most;
  // zero_based: the device's registrations start at offset 0 (DeviceCaps::fast_reg_zero_based).
  // rkeys_live: the engine's gauge of registrations a peer can reach right
  // now (EngineStats::rkeys_live), kept up to date by this registrar.
  FrwrRegistrar(rdma::Pd* pd, uint32_t depth, uint32_t page_size, uint32_t max_mrs, bool zero_based,
                Counter* rkeys_live);
  ~FrwrRegistrar() override;

  bool invalidates() const override { return true; }
  uint32_t segments_for(uint64_t addr, uint64_t len) const override;
  uint64_t max_segment_bytes() const override { return (uint64_t{depth_} - 1) * page_size_; }
  int map(uint64_t addr, uint64_t len, uint32_t lkey, uint32_t access, WrChain& chain, RdmaSegment* segs,
          int max_segs, EngineMr** list) override;
  int invalidate(EngineMr* list, WrChain& chain) override;
  void remote_invalidated(EngineMr* m) override;
  void release(EngineMr** list) override;
  void destroy(EngineMr** list) override;
  uint32_t mrs_live() const override { return static_cast<uint32_t>(all_.size()); }

  uint32_t depth() const { return depth_; }
  MrFreeList& free_list() { return free_; }

 private:
  EngineMr* take();
  // m's registration can no longer be reached: the gauge goes down.
  void unregistered(EngineMr* m);
  // m leaves the registrar for good (its FastMr is destroyed).
  void forget(EngineMr* m);

  rdma::Pd* pd_;
  uint32_t depth_, page_size_, max_mrs_;
  bool zero_based_;
  MrFreeList free_;
  std::vector<EngineMr*> all_;  // every MR made and not destroyed (EngineMr::slot is its index)
  Counter* rkeys_live_;
};

}  // namespace tern::rpc
