// pmd/mlx5 private classes: pmd/verbs with fast registration by UMR into
// indirect mkeys. Only what differs from pmd/verbs is here; the device, CQs,
// QPs, posting and connections are pmd/verbs' (verbs_hooks.h says where the
// seams are).
//
// Files, one concept each:
//   mlx5_device.cc       the `mlx5:` driver, and the FastRegProvider: DEVX
//                        context, probing, caps, QP creation with UMR ops
//   mlx5_mkey.cc         FastMr = indirect mkey
//   mlx5_umr_plan.cc     kRegMr -> UMR plan (pure; mlx5_umr_plan.h)
//   mlx5_umr_builder.cc  the plan -> mlx5dv_wr_* calls, with the mkey's new key
//
// Built in full only when rdma-core has every piece (HAVE_MLX5DV_UMR, from
// meson); otherwise `mlx5:` opens the verbs path and says why.
#pragma once

#include <memory>

#include "mlx5/mlx5_config.h"
#include "mlx5/mlx5_umr_plan.h"
#include "verbs/verbs_hooks.h"

#ifdef HAVE_MLX5DV_UMR
#include <infiniband/mlx5dv.h>

#include <vector>
#endif

namespace tern::mlx5 {

using rdma::DeviceCaps;
using rdma::FastMr;
using rdma::SendWr;

// The provider `mlx5:` gives VerbsDevice::open (nullptr when built without
// UMR support; `why` then says what rdma-core lacked).
std::unique_ptr<verbs::FastRegProvider> make_provider(uint32_t fast_reg_depth, const char** why);

#ifdef HAVE_MLX5DV_UMR

// How a UMR is written: mlx5dv_wr_mr_list, or the newer mkey-configure
// builder with two setters (access flags, SGE layout). Both make the same WQE.
enum class UmrMode : uint8_t { kMrList, kMkeyConfigure };
const char* umr_mode_name(UmrMode m);

using MkeyDestroyFn = int (*)(mlx5dv_mkey*);

// A FastMr is an indirect mkey. Its lkey and rkey are equal; the low byte is
// the key, which each UMR sets to the kRegMr's (needs the UPDATE_TAG flag at
// creation). LOCAL_INV and SEND_WITH_INV name it by rkey like any MR.
class Mlx5FastMr final : public rdma::FastMr {
 public:
  // `destroy` is mlx5dv_destroy_mkey; tests pass their own for a fake mkey.
  Mlx5FastMr(ibv_pd* pd, mlx5dv_mkey* mkey, uint32_t max_depth, uint32_t max_entries,
             MkeyDestroyFn destroy = &mlx5dv_destroy_mkey);
  ~Mlx5FastMr() override;
  Mlx5FastMr(const Mlx5FastMr&) = delete;
  Mlx5FastMr& operator=(const Mlx5FastMr&) = delete;

  mlx5dv_mkey* mkey() const { return mkey_; }
  ibv_pd* pd() const { return pd_; }
  UmrTarget target(uint32_t page_size) const {
    return UmrTarget{mkey_->lkey, max_entries_, max_depth_, page_size};
  }

 private:
  ibv_pd* pd_;
  mlx5dv_mkey* mkey_;
  uint32_t max_entries_;
  MkeyDestroyFn destroy_;
};

// Creates the indirect mkey a FastMr of `max_depth` pages needs.
Result<std::unique_ptr<rdma::FastMr>> alloc_mkey_fast_mr(ibv_pd* pd, uint32_t create_flags, uint32_t max_depth,
                                                         uint32_t page_size);

// Per QP: kRegMr -> one UMR WQE on an mkey of this PD.
class UmrBuilder final : public verbs::RegMrBuilder {
 public:
  UmrBuilder(mlx5dv_qp_ex* mqp, ibv_pd* pd, const verbs::MrTable* mrs, UmrMode mode, uint32_t page_size)
      : mqp_(mqp), pd_(pd), mrs_(mrs), mode_(mode), page_(page_size) {}
  int check(const SendWr& w) override;
  void build(ibv_qp_ex* qpx, const SendWr& w) override;
  void finish(bool posted) override;
  // Why the last check() refused (kNone if it did not); for tests and logs.
  UmrRefusal last_refusal() const { return refusal_; }

 private:
  mlx5dv_qp_ex* mqp_;
  ibv_pd* pd_;
  const verbs::MrTable* mrs_;
  UmrMode mode_;
  uint32_t page_;
  UmrRefusal refusal_ = UmrRefusal::kNone;
  mlx5dv_mkey* mkey_ = nullptr;  // the last check()'s mkey and plan
  UmrPlan plan_;
  struct Undo {
    mlx5dv_mkey* mkey;
    uint32_t key;
  };
  std::vector<Undo> undo_;  // mkey keys to restore if the chain is not posted
};

#endif  // HAVE_MLX5DV_UMR

}  // namespace tern::mlx5
