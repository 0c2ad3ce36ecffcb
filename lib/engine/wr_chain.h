// WrChain: the work requests of one post_send call, built without allocation.
// REG_MRs for a request's chunks go first, then its Send (or, on the server,
// RDMA WRITEs then the reply Send), so one doorbell posts the lot and strong
// send-queue ordering makes each registration take effect before the Send
// that advertises it.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

class WrChain {
 public:
  static constexpr int kMaxWrs = 64;
  static constexpr int kMaxSges = 64;

  void clear() { n_ = 0, nsge_ = 0; }
  int size() const { return n_; }
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
  // Drops WRs from the end (a chain that could not be completed).
  void truncate(int n) { n_ = n; }

 private:
  rdma::SendWr wr_[kMaxWrs];
  rdma::Sge sge_[kMaxSges];
  int n_ = 0, nsge_ = 0;
};

// Send-queue slots in use. Unsignaled WRs hold their slot until a later
// signaled WR completes; each signaled WR remembers the count of WRs posted
// up to and including itself, and its completion retires that many.
class SqBudget {
 public:
  explicit SqBudget(uint32_t depth) : depth_(depth) {}
  bool room(uint32_t n) const { return posted_ + n - retired_ <= depth_; }
  // Returns the sequence to store with the chain's signaled WR(s).
  uint64_t post(uint32_t n) {
    posted_ += n;
    return posted_;
  }
  void retire(uint64_t seq) {
    if (seq > retired_ && seq <= posted_) retired_ = seq;
  }
  void retire_all() { retired_ = posted_; }
  uint64_t outstanding() const { return posted_ - retired_; }

 private:
  uint32_t depth_;
  uint64_t posted_ = 0, retired_ = 0;
};

}  // namespace tern::rpc
