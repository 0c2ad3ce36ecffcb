// pmd/mlx5 device: the `mlx5:` driver and its FastRegProvider.
//
// `mlx5:` takes the spec keys of `verbs:` and opens a pmd/verbs device with
// this provider. At open the provider checks, in order, everything the UMR
// path needs; the first thing missing ends the attempt and the device stays
// plain verbs, with one log line saying why (VerbsDevice::attach_fast_reg):
//   1. mlx5dv_is_supported(device)        an mlx5 device at all
//   2. mlx5dv_open_device(DEVX)           mlx5dv_create_mkey(3): mkeys need one
//   3. mlx5dv_create_mkey(INDIRECT | UPDATE_TAG [| REMOTE_INVALIDATE])
//                                         UPDATE_TAG lets each UMR set the key
//                                         byte; without REMOTE_INVALIDATE the
//                                         device works but reports no remote
//                                         invalidation
//   4. mlx5dv_create_qp with MLX5DV_QP_EX_WITH_MR_LIST, else with
//      MLX5DV_QP_EX_WITH_MKEY_CONFIGURE   the QP fails if the device lacks UMR
//                                         (mlx5dv_wr_post(3))
// `verbs:` never does this: it stays plain verbs on any device.
#include <algorithm>
#include <cerrno>
#include <string>

#include "base/log.h"
#include "mlx5/mlx5_internal.h"
#include "rdmadev/rdmadev_driver.h"
#include "verbs/verbs_internal.h"

namespace tern::mlx5 {

namespace {

constexpr uint32_t kPageSize = 4096;

#ifdef HAVE_MLX5DV_UMR

// Inline bytes a QP needs so that a UMR carries kUmrMaxEntries entries: the
// entries (16 bytes each) go in the WQE's inline segment, whose 4-byte header
// counts against max_inline_data (mlx5dv_wr_mr_list(3) asks for a larger
// max_inline_data to carry more entries than the default).
constexpr uint32_t kUmrInlineBytes = kUmrMaxEntries * 16 - 4;

class Mlx5Provider final : public verbs::FastRegProvider {
 public:
  explicit Mlx5Provider(uint32_t depth) : depth_(depth) {}
  ~Mlx5Provider() override {
    if (ctx_ != nullptr) ibv_close_device(ctx_);
  }
  const char* name() const override { return "mlx5"; }
  Status attach(ibv_context* cm_ctx, uint8_t port, DeviceCaps* caps) override;
  ibv_context* object_context() const override { return ctx_; }
  ibv_qp* create_qp(ibv_qp_init_attr_ex* qa) override { return create_qp_mode(*qa, mode_); }
  std::unique_ptr<verbs::RegMrBuilder> make_builder(ibv_qp* qp, ibv_pd* pd, const verbs::MrTable* mrs) override {
    mlx5dv_qp_ex* mqp = mlx5dv_qp_ex_from_ibv_qp_ex(ibv_qp_to_qp_ex(qp));
    return std::make_unique<UmrBuilder>(mqp, pd, mrs, mode_, kPageSize);
  }
  Result<std::unique_ptr<FastMr>> alloc_fast_mr(ibv_pd* pd, uint32_t max_depth) override {
    return alloc_mkey_fast_mr(pd, mkey_flags_, max_depth, kPageSize);
  }

 private:
  Status probe();
  ibv_qp* create_qp_mode(ibv_qp_init_attr_ex qa, UmrMode mode);

  uint32_t depth_;
  ibv_context* ctx_ = nullptr;  // DEVX context: PDs, CQs, QPs and mkeys live here
  uint32_t mkey_flags_ = 0;
  bool remote_inv_ = false;
  UmrMode mode_ = UmrMode::kMrList;
};

Status Mlx5Provider::attach(ibv_context* cm_ctx, uint8_t port, DeviceCaps* caps) {
  (void)port;  // the QP's port is set by pmd/verbs at INIT, as for plain verbs
  if (!mlx5dv_is_supported(cm_ctx->device))
    return make_error(Errc::kUnsupported, "not an mlx5 device (mlx5dv_is_supported is false)");
  mlx5dv_context_attr ca = {};
  ca.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
  ctx_ = mlx5dv_open_device(cm_ctx->device, &ca);
  if (ctx_ == nullptr)
    return make_sys_error(Errc::kUnsupported, errno,
                          "mlx5dv_open_device(DEVX) failed, and indirect mkeys need a DEVX context");
  if (Status s = probe(); !s.is_ok()) {
    ibv_close_device(ctx_);
    ctx_ = nullptr;
    return s;
  }
  caps->driver = "mlx5";
  caps->fast_reg = true;
  caps->memory_windows = false;
  caps->remote_invalidation = remote_inv_;
  caps->max_fast_reg_depth = depth_;
  caps->fast_reg_page_size = kPageSize;
  caps->fast_reg_bounds_enforced = true;  // an mkey maps exactly its entries
  caps->fast_reg_zero_based = true;       // mlx5dv_wr_mr_list(3): "used in a zero-based mode"
  // An indirect mkey belongs to the PD, not to a QP: any connection on the PD
  // could use its rkey. The engine gives each connection a PD of its own.
  caps->fast_reg_qp_bound = false;
  caps->remote_inv_qp_bound = false;
  TERN_LOG(kInfo, "mlx5", "%s: fast registration by UMR (%s) into indirect mkeys%s",
           ibv_get_device_name(cm_ctx->device), umr_mode_name(mode_),
           remote_inv_ ? ", remotely invalidatable" : ", no remote invalidation");
  return Status::ok();
}

Status Mlx5Provider::probe() {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  if (pd == nullptr) return make_sys_error(Errc::kNoResources, errno, "ibv_alloc_pd on the DEVX context");

  // 3. The mkey a FastMr will be.
  const uint32_t base = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG;
  uint32_t flags = base;
#ifdef HAVE_MLX5DV_MKEY_REMOTE_INVALIDATE
  flags |= MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
#endif
  mlx5dv_mkey_init_attr ma = {};
  ma.pd = pd;
  ma.create_flags = flags;
  ma.max_entries = 1;
  mlx5dv_mkey* mkey = mlx5dv_create_mkey(&ma);
  if (mkey == nullptr && flags != base) {
    ma.create_flags = flags = base;
    ma.max_entries = 1;
    mkey = mlx5dv_create_mkey(&ma);
  }
  if (mkey == nullptr) {
    const int e = errno;
    ibv_dealloc_pd(pd);
    return make_sys_error(Errc::kUnsupported, e,
                          "mlx5dv_create_mkey(INDIRECT | UPDATE_TAG) failed; without UPDATE_TAG an mkey's key "
                          "byte cannot change at each registration");
  }
  mlx5dv_destroy_mkey(mkey);
  mkey_flags_ = flags;
  remote_inv_ = flags != base;

  // 4. A QP with UMR send ops.
  ibv_cq* cq = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
  if (cq == nullptr) {
    const int e = errno;
    ibv_dealloc_pd(pd);
    return make_sys_error(Errc::kNoResources, e, "ibv_create_cq on the DEVX context");
  }
  ibv_qp_init_attr_ex qa = {};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.cap.max_send_wr = 1;
  qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = 1;
  qa.pd = pd;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                      IBV_QP_EX_WITH_LOCAL_INV | (remote_inv_ ? IBV_QP_EX_WITH_SEND_WITH_INV : 0);
  bool found = false;
  int e = 0;
  for (UmrMode m : {UmrMode::kMrList, UmrMode::kMkeyConfigure}) {
    ibv_qp* qp = create_qp_mode(qa, m);
    if (qp == nullptr) {
      if (e == 0) e = errno;
      continue;
    }
    ibv_destroy_qp(qp);
    mode_ = m;
    found = true;
    break;
  }
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  if (!found)
    return make_sys_error(Errc::kUnsupported, e,
                          "mlx5dv_create_qp with UMR send ops (MR_LIST, MKEY_CONFIGURE) failed: no UMR here");
  return Status::ok();
}

ibv_qp* Mlx5Provider::create_qp_mode(ibv_qp_init_attr_ex qa, UmrMode mode) {
  mlx5dv_qp_init_attr dv = {};
  dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
  if (mode == UmrMode::kMrList) {
#ifdef HAVE_MLX5DV_WR_MR_LIST
    dv.send_ops_flags = MLX5DV_QP_EX_WITH_MR_LIST;
#else
    errno = EOPNOTSUPP;
    return nullptr;
#endif
  } else {
#ifdef HAVE_MLX5DV_WR_MKEY_CONFIGURE
    dv.send_ops_flags = MLX5DV_QP_EX_WITH_MKEY_CONFIGURE;
#else
    errno = EOPNOTSUPP;
    return nullptr;
#endif
  }
#ifdef HAVE_MLX5DV_DISABLE_SCATTER_TO_CQE
  // mlx5dv_create_mkey(3): indirect mkeys cannot work with scatter to CQE.
  dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS;
  dv.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
#endif
  qa.send_ops_flags &= ~static_cast<uint64_t>(IBV_QP_EX_WITH_BIND_MW);
  qa.cap.max_inline_data = std::max(qa.cap.max_inline_data, kUmrInlineBytes);
  return mlx5dv_create_qp(ctx_, &qa, &dv);
}

#else  // !HAVE_MLX5DV_UMR

// What this build's rdma-core lacked, for the log line.
std::string missing_features() {
  std::string m;
  auto add = [&](const char* s) { m += (m.empty() ? "" : ", ") + std::string(s); };
#ifndef HAVE_MLX5DV_H
  add("infiniband/mlx5dv.h or libmlx5");
#else
#ifndef HAVE_MLX5DV_IS_SUPPORTED
  add("mlx5dv_is_supported");
#endif
#ifndef HAVE_MLX5DV_OPEN_DEVICE
  add("mlx5dv_open_device");
#endif
#ifndef HAVE_MLX5DV_CONTEXT_FLAGS_DEVX
  add("MLX5DV_CONTEXT_FLAGS_DEVX");
#endif
#ifndef HAVE_MLX5DV_CREATE_QP
  add("mlx5dv_create_qp");
#endif
#ifndef HAVE_MLX5DV_QP_EX_FROM_IBV_QP_EX
  add("mlx5dv_qp_ex_from_ibv_qp_ex");
#endif
#ifndef HAVE_MLX5DV_CREATE_MKEY
  add("mlx5dv_create_mkey");
#endif
#ifndef HAVE_MLX5DV_MKEY_UPDATE_TAG
  add("MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG");
#endif
#if !defined(HAVE_MLX5DV_WR_MR_LIST) && !defined(HAVE_MLX5DV_WR_MKEY_CONFIGURE)
  add("mlx5dv_wr_mr_list and mlx5dv_wr_mkey_configure");
#endif
#endif
  return m;
}

#endif  // HAVE_MLX5DV_UMR

// No device at all: say so here, naming mlx5, before pmd/verbs would.
Status check_rdma_devices() {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  const int e = list == nullptr ? errno : ENODEV;
  if (list != nullptr) ibv_free_device_list(list);
  if (list != nullptr && n > 0) return Status::ok();
  return make_sys_error(Errc::kNotFound, e,
                        "mlx5: no RDMA devices on this machine, so no mlx5 device (ibv_get_device_list found "
                        "none; is mlx5_ib loaded and /dev/infiniband/uverbs* present?)");
}

}  // namespace

std::unique_ptr<verbs::FastRegProvider> make_provider(uint32_t fast_reg_depth, const char** why) {
#ifdef HAVE_MLX5DV_UMR
  *why = nullptr;
  return std::make_unique<Mlx5Provider>(fast_reg_depth);
#else
  (void)fast_reg_depth;
  static const std::string missing = missing_features();
  *why = missing.c_str();
  return nullptr;
#endif
}

class Mlx5Driver final : public rdma::Driver {
 public:
  const char* name() const override { return "mlx5"; }
  const char* usage() const override {
    return "mlx5:[dev=<rdma device>][,addr=<ip to listen on / connect to>][,port=<n, default 20049>]"
           "[,depth=<fast-reg pages>][,mw=on|off]  (verbs with UMR fast registration; verbs alone where "
           "the device or rdma-core cannot)";
  }
  Result<std::unique_ptr<rdma::Device>> open(const DevArgs& a) override {
    auto cfg = verbs::parse_verbs_config(a, "mlx5");
    TERN_TRY(cfg);
    TERN_TRY(check_rdma_devices());
    const char* why = nullptr;
    auto fr = make_provider(cfg->fast_reg_depth, &why);
    if (fr == nullptr)
      TERN_LOG(kWarn, "mlx5", "built without mlx5dv UMR support (rdma-core lacks %s); using the verbs driver", why);
    return verbs::VerbsDevice::open(*cfg, std::move(fr));
  }
};

}  // namespace tern::mlx5

TERN_BUILTIN_DRIVER(mlx5, ::tern::mlx5::Mlx5Driver)
