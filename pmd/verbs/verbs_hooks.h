// Extension points of pmd/verbs, for drivers built on it (pmd/mlx5). Such a
// driver differs from plain verbs only in how fast registration is done; it
// supplies a FastRegProvider and keeps everything else -- opening, CQs,
// connections, posting, shadow rings, flushes -- as pmd/verbs' own code.
//
// Not for the engine, and not a stable API: it changes with pmd/verbs.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "base/result.h"
#include "rdmadev/rdmadev.h"

namespace tern::verbs {

using rdma::DeviceCaps;
using rdma::FastMr;
using rdma::SendWr;

// The long-lived MRs of one PD. A REG_MR names the one under its range by
// lkey, and the fast-registration code needs its bounds (and, for windows,
// the ibv_mr itself). Few and long-lived: a linear scan is fine.
class MrTable {
 public:
  ibv_mr* find(uint32_t lkey) const {
    for (ibv_mr* m : mrs_)
      if (m->lkey == lkey) return m;
    return nullptr;
  }
  void add(ibv_mr* mr) { mrs_.push_back(mr); }
  void remove(const ibv_mr* mr) { std::erase(mrs_, mr); }
  size_t size() const { return mrs_.size(); }

 private:
  std::vector<ibv_mr*> mrs_;
};

// How one QP turns a kRegMr into a send-queue WR of the ibv_wr_* builder:
// a type-2 window bind (pmd/verbs) or a UMR into an indirect mkey (pmd/mlx5).
// LOCAL_INV and SEND_WITH_INV need no strategy: both name an rkey.
class RegMrBuilder {
 public:
  virtual ~RegMrBuilder() = default;
  // Validates a kRegMr before it takes a send-queue slot: 0, or the errno
  // post_send reports (EINVAL: malformed). build() of the same WR follows.
  virtual int check(const SendWr& w) = 0;
  // Appends the WR last checked to the open ibv_wr_start() sequence; the
  // caller has set qpx->wr_id and qpx->wr_flags for it.
  virtual void build(ibv_qp_ex* qpx, const SendWr& w) = 0;
  // The sequence was posted (true), or aborted or refused by
  // ibv_wr_complete (false): keep or undo what build() changed on the host
  // (window or mkey keys). Called once per post_send that built anything.
  virtual void finish(bool posted) = 0;
};

// A device-wide replacement for type-2 windows as the fast-registration
// mechanism, chosen when the device is opened.
class FastRegProvider {
 public:
  virtual ~FastRegProvider() = default;
  virtual const char* name() const = 0;
  // The device has chosen `cm_ctx` (librdmacm's context: the one its
  // rdma_cm ids resolve to) and port, and filled `caps` as plain verbs does.
  // On success the provider has set the fast-registration caps, and
  // PDs, CQs and QPs are made on object_context() from now on. On failure
  // nothing changed: the device stays plain verbs and logs the Status.
  virtual Status attach(ibv_context* cm_ctx, uint8_t port, DeviceCaps* caps) = 0;
  virtual ibv_context* object_context() const = 0;
  // In place of ibv_create_qp_ex; `qa` is what plain verbs would pass
  // (RC, send_ops_flags for SEND, SEND_WITH_INV, WRITE, READ, LOCAL_INV).
  virtual ibv_qp* create_qp(ibv_qp_init_attr_ex* qa) = 0;
  virtual std::unique_ptr<RegMrBuilder> make_builder(ibv_qp* qp, ibv_pd* pd, const MrTable* mrs) = 0;
  virtual Result<std::unique_ptr<FastMr>> alloc_fast_mr(ibv_pd* pd, uint32_t max_depth) = 0;
};

}  // namespace tern::verbs
