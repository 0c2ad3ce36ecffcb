// pmd/mlx5: a kRegMr as one UMR WQE, inside pmd/verbs' ibv_wr_start ..
// ibv_wr_complete sequence (post_send_wr_api calls check() then build()).
//
// As mlx5dv_wr_mr_list(3) and mlx5dv_wr_mkey_configure(3) require:
//  - IBV_SEND_INLINE in wr_flags (the entries travel inside the WQE);
//  - wr_id and wr_flags set before the builder call, as for any ibv_wr_*;
//  - the mkey configured with an access setter and a layout setter.
// The key: the provider writes the low byte of mkey->lkey into the UMR as
// the mkey's new tag (and the mkey was created with UPDATE_TAG so that this
// is allowed), so the mkey's lkey/rkey become the kRegMr's rkey before the
// call. If the chain is then not posted, they are put back.
//
// Ordering needs nothing from us: the provider fences the WQE after a UMR,
// so the SEND that advertises the rkey runs after the registration.
#include <cerrno>

#include "mlx5/mlx5_internal.h"

namespace tern::mlx5 {

const char* umr_mode_name(UmrMode m) {
  return m == UmrMode::kMrList ? "mlx5dv_wr_mr_list" : "mlx5dv_wr_mkey_configure";
}

int UmrBuilder::check(const SendWr& w) {
  // Every FastMr of this device is an Mlx5FastMr (alloc_fast_mr makes them).
  auto* f = static_cast<Mlx5FastMr*>(w.reg.mr);
  if (f == nullptr || f->pd() != pd_) {
    refusal_ = UmrRefusal::kWrongMkey;
    return EINVAL;
  }
  UmrSource src;
  const ibv_mr* under = mrs_->find(w.reg.lkey);
  if (under != nullptr) src = UmrSource{reinterpret_cast<uint64_t>(under->addr), under->length, under->lkey};
  const UmrRequest r{w.reg.addr, w.reg.length, w.reg.access, w.reg.rkey};
  refusal_ = plan_umr(f->target(page_), under != nullptr ? &src : nullptr, r, &plan_);
  if (refusal_ != UmrRefusal::kNone) return EINVAL;
  mkey_ = f->mkey();
  return 0;
}

void UmrBuilder::build(ibv_qp_ex* qpx, const SendWr& w) {
  (void)w;  // planned by check()
  qpx->wr_flags |= IBV_SEND_INLINE;
  undo_.push_back({mkey_, mkey_->lkey});
  mkey_->lkey = plan_.new_key;
  mkey_->rkey = plan_.new_key;
  if (mode_ == UmrMode::kMrList) {
#ifdef HAVE_MLX5DV_WR_MR_LIST
    mlx5dv_wr_mr_list(mqp_, mkey_, plan_.access_flags, plan_.num_sge, plan_.sge);
#endif
  } else {
#ifdef HAVE_MLX5DV_WR_MKEY_CONFIGURE
    mlx5dv_mkey_conf_attr attr = {};
    mlx5dv_wr_mkey_configure(mqp_, mkey_, 2, &attr);  // two setters follow
    mlx5dv_wr_set_mkey_access_flags(mqp_, plan_.access_flags);
    mlx5dv_wr_set_mkey_layout_list(mqp_, plan_.num_sge, plan_.sge);
#endif
  }
}

void UmrBuilder::finish(bool posted) {
  if (!posted)
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) it->mkey->lkey = it->mkey->rkey = it->key;
  undo_.clear();
}

}  // namespace tern::mlx5
