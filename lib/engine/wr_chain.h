// WrChain: the work requests of one post_send call, built without allocation.
// A call's REG_MRs go first, then its Send; a reply's RDMA WRITEs, then its
// Send; so one post (one doorbell) carries the lot and strong send-queue
// ordering makes each registration or write take effect before the Send
// that advertises or follows it.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

class WrChain {
 public:
  static constexpr int kMaxWrs = 128;
  static constexpr int kMaxSges = 128;

  void clear() { n_ = 0, nsge_ = 0; }
  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  bool room(int wrs, int sges = 0) const { return n_ + wrs <= kMaxWrs && nsge_ + sges <= kMaxSges; }
  rdma::SendWr& add() {
    TERN_REQUIRE(n_ < kMaxWrs, "WR chain overflow");
    wr_[n_] = rdma::SendWr{};
    return wr_[n_++];
  }
  // A WR of `op` over one local SGE (the chain's storage): the shape of
  // every Send, RDMA READ and RDMA WRITE the engine posts.
  rdma::SendWr& add_one_sge(rdma::WrOpcode op, const void* local, uint32_t len, uint32_t lkey) {
    rdma::SendWr& w = add();
    rdma::Sge* sg = sges(1);
    sg[0] = rdma::Sge{reinterpret_cast<uint64_t>(local), len, lkey};
    w.opcode = op;
    w.sg_list = sg;
    w.num_sge = 1;
    return w;
  }
  // SGE storage that lives as long as the chain (until post_send returns).
  rdma::Sge* sges(int n) {
    TERN_REQUIRE(nsge_ + n <= kMaxSges, "WR chain SGE overflow");
    rdma::Sge* s = &sge_[nsge_];
    nsge_ += n;
    return s;
  }
  rdma::SendWr* data() { return wr_; }
  rdma::SendWr& back() { return wr_[n_ - 1]; }
  // Drops WRs from the end (a chain that could not be completed). Their
  // SGEs stay allocated until clear(); harmless.
  void truncate(int n) { n_ = n; }

 private:
  rdma::SendWr wr_[kMaxWrs];
  rdma::Sge sge_[kMaxSges];
  int n_ = 0, nsge_ = 0;
};

}  // namespace tern::rpc
