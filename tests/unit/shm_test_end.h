// What pmd/shm unit tests that drive the driver directly share: one side of
// a connection set (an arena, a device, one CQ for many QPs) and a lookup of
// a device counter by name.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/stats.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern::shmtest {

// The device counter `name` (ShmDevice::stats()); a test failure if none.
inline uint64_t counter(const StatsView& v, const char* name) {
  for (const StatEntry& e : v)
    if (std::strcmp(e.name, name) == 0) return e.counter->get();
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

// One side with many QPs on one CQ, each receiving into 16 slots of kMsg
// bytes of its own in the arena (QP q's k-th receive: wr_id q << 16 | k).
struct ManyQpEnd {
  static constexpr uint32_t kMsg = 64;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<rdma::Device> dev;
  std::unique_ptr<rdma::Pd> pd;
  std::unique_ptr<rdma::Mr> mr;
  std::unique_ptr<rdma::Cq> cq;
  std::vector<std::unique_ptr<rdma::Qp>> qps;
  std::vector<rdma::Wc> wcs;
  ~ManyQpEnd() {
    qps.clear();
    cq.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  uint8_t* base() const { return static_cast<uint8_t*>(arena->base()); }
  rdma::Sge sge(size_t off, uint32_t len) const {
    return rdma::Sge{reinterpret_cast<uint64_t>(base() + off), len, mr->lkey()};
  }
  void poll() {
    rdma::Wc wc[64];
    int n = cq->poll(wc, 64);
    wcs.insert(wcs.end(), wc, wc + n);
  }
  std::unique_ptr<rdma::Qp> make_qp() {
    rdma::QpInit in;
    in.pd = pd.get(), in.send_cq = cq.get(), in.recv_cq = cq.get();
    in.sq_depth = 64, in.rq_depth = 16, in.max_send_sge = 1, in.max_recv_sge = 1;
    return std::move(dev->create_qp(in)).value();
  }
  void post_recvs(rdma::Qp* qp, int q, int n) {
    for (int k = 0; k < n; ++k) {
      rdma::Sge s = sge((static_cast<size_t>(q) * 16 + static_cast<size_t>(k % 16)) * kMsg, kMsg);
      rdma::RecvWr r{static_cast<uint64_t>(q) << 16 | static_cast<uint64_t>(k), &s, 1};
      int err = 0;
      ASSERT_EQ(qp->post_recv(&r, 1, &err), 1);
    }
  }
};

}  // namespace tern::shmtest
