// pmd/verbs memory: PD, long-lived MRs (ibv_reg_mr), and FastMrs, which are
// type-2 memory windows bound over those MRs by a REG_MR work request (or,
// with a FastRegProvider, whatever it makes).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

VerbsPd::~VerbsPd() {
  TERN_ASSERT(mrs_.size() == 0, "PD destroyed with %zu MRs alive", mrs_.size());
  if (int rc = ibv_dealloc_pd(pd_); rc != 0)
    TERN_LOG(kWarn, "verbs", "ibv_dealloc_pd: %s (objects still use it)", std::strerror(rc));
}

Result<std::unique_ptr<Mr>> VerbsPd::reg_mr(void* addr, uint64_t length, uint32_t access) {
  if (addr == nullptr || length == 0)
    return make_error(Errc::kInvalidArgument, "reg_mr: empty range");
  if (length > dev_->caps().max_mr_size)
    return make_error(Errc::kInvalidArgument, "reg_mr: %llu bytes, the device allows %llu",
                      static_cast<unsigned long long>(length),
                      static_cast<unsigned long long>(dev_->caps().max_mr_size));
  int flags = 0;
  if (access & kAccessLocalWrite) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kAccessRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (access & kAccessRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
  // Any long-lived MR may back a window later (SendWr::reg.lkey).
  if (dev_->caps().memory_windows) flags |= IBV_ACCESS_MW_BIND;
  ibv_mr* mr = ibv_reg_mr(pd_, addr, length, flags);
  if (mr == nullptr)
    return make_sys_error(errno == ENOMEM ? Errc::kNoResources : Errc::kInvalidArgument, errno,
                          "verbs: ibv_reg_mr(%llu bytes, access 0x%x)%s", static_cast<unsigned long long>(length),
                          flags, errno == ENOMEM ? " (locked-memory limit? ulimit -l)" : "");
  add_mr(mr);
  return std::unique_ptr<Mr>(new VerbsMr(this, mr, access));
}

VerbsMr::VerbsMr(VerbsPd* pd, ibv_mr* mr, uint32_t access) : pd_(pd), mr_(mr) {
  addr_ = reinterpret_cast<uint64_t>(mr->addr);
  length_ = mr->length;
  lkey_ = mr->lkey;
  // Without a remote right the rkey must not be advertised; 0 says so.
  rkey_ = (access & (kAccessRemoteWrite | kAccessRemoteRead)) ? mr->rkey : 0;
  access_ = access;
}

VerbsMr::~VerbsMr() {
  pd_->remove_mr(mr_);
  if (int rc = ibv_dereg_mr(mr_); rc != 0)
    TERN_LOG(kWarn, "verbs", "ibv_dereg_mr: %s (a window still bound over it?)", std::strerror(rc));
}

Result<std::unique_ptr<FastMr>> VerbsPd::alloc_fast_mr(uint32_t max_depth) {
  const DeviceCaps& c = dev_->caps();
  if (!c.fast_reg)
    return make_error(Errc::kUnsupported, "verbs: %s has no fast registration (no type-2 memory windows)",
                      c.name.c_str());
  if (max_depth == 0 || max_depth > c.max_fast_reg_depth)
    return make_error(Errc::kInvalidArgument, "alloc_fast_mr: depth %u not in [1, %u]", max_depth,
                      c.max_fast_reg_depth);
  if (FastRegProvider* fr = dev_->fast_reg_provider()) return fr->alloc_fast_mr(pd_, max_depth);
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  if (mw == nullptr) return make_sys_error(Errc::kNoResources, errno, "verbs: ibv_alloc_mw(type 2)");
  return std::unique_ptr<FastMr>(new VerbsFastMr(this, mw, max_depth));
}

VerbsFastMr::VerbsFastMr(VerbsPd* pd, ibv_mw* mw, uint32_t max_depth) : pd_(pd), mw_(mw) {
  // A window has no page list: the depth is a limit the driver enforces at
  // post time, so that the engine sees the same contract as with FRWR.
  max_depth_ = max_depth;
  rkey_ = mw->rkey;
}

VerbsFastMr::~VerbsFastMr() {
  for (VerbsQp* qp : bound_qps_)
    qp->bound_.erase(std::remove(qp->bound_.begin(), qp->bound_.end(), this), qp->bound_.end());
  if (mw_ != nullptr) {
    if (int rc = ibv_dealloc_mw(mw_); rc != 0) TERN_LOG(kWarn, "verbs", "ibv_dealloc_mw: %s", std::strerror(rc));
  }
}

void VerbsFastMr::note_bound(VerbsQp* qp) {
  if (std::find(bound_qps_.begin(), bound_qps_.end(), qp) != bound_qps_.end()) return;
  bound_qps_.push_back(qp);
  qp->bound_.push_back(this);
}

void VerbsFastMr::forget_qp(VerbsQp* qp) {
  bound_qps_.erase(std::remove(bound_qps_.begin(), bound_qps_.end(), qp), bound_qps_.end());
}

bool VerbsFastMr::retire() {
  if (!pd_->device()->renew_windows()) return true;
  // The old window is free now, under an rkey the peer has seen; on rxe a
  // Send With Invalidate of it would panic the kernel. Its index is given
  // back and the new window's differs, so that rkey names nothing.
  for (VerbsQp* qp : bound_qps_)
    qp->bound_.erase(std::remove(qp->bound_.begin(), qp->bound_.end(), this), qp->bound_.end());
  bound_qps_.clear();
  renew_window();
  return mw_ != nullptr;
}

void VerbsFastMr::renew_window() {
  // A bound type-2 window holds its QP: on rxe, ibv_destroy_qp then blocks
  // for ~50 s (rxe-vm.md quirk 4). Deallocating the window releases it; a new
  // window takes its place, so the FastMr stays usable on the next QP (its
  // rkey index changes, which only matters to a peer holding a stale rkey).
  if (mw_ != nullptr) ibv_dealloc_mw(mw_);
  mw_ = ibv_alloc_mw(pd_->pd(), IBV_MW_TYPE_2);
  if (mw_ == nullptr) {
    TERN_LOG(kWarn, "verbs", "ibv_alloc_mw after a QP's destruction: %s; this FastMr is unusable",
             std::strerror(errno));
    return;
  }
  rkey_ = mw_->rkey;
}

// ---------------------------------------------------------------- REG_MR as a bind

namespace {

unsigned mw_access(uint32_t a) {
  unsigned f = 0;
  if (a & kAccessRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE;
  if (a & kAccessRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  return f;
}

}  // namespace

bool VerbsMwBuilder::plan(const SendWr& w, ibv_mw** mw, ibv_mw_bind_info* bind) {
  auto* f = static_cast<VerbsFastMr*>(w.reg.mr);
  ibv_mr* under = pd_->mr_of(w.reg.lkey);
  bool ok = f != nullptr && f->mw() != nullptr && f->pd() == pd_ && under != nullptr && w.reg.length > 0 &&
            w.reg.length <= uint64_t{f->max_depth()} * page_ && rkey_index(w.reg.rkey) == rkey_index(f->mw()->rkey) &&
            w.reg.addr >= reinterpret_cast<uint64_t>(under->addr) && w.reg.length <= under->length &&
            w.reg.addr - reinterpret_cast<uint64_t>(under->addr) <= under->length - w.reg.length;
  if (!ok) return false;
  *mw = f->mw();
  bind->mr = under;
  bind->addr = w.reg.addr;
  bind->length = w.reg.length;
  bind->mw_access_flags = mw_access(w.reg.access);
  f->note_bound(qp_);
  return true;
}

int VerbsMwBuilder::check(const SendWr& w) { return plan(w, &mw_, &bind_) ? 0 : EINVAL; }

void VerbsMwBuilder::build(ibv_qp_ex* qpx, const SendWr& w) {
  ibv_wr_bind_mw(qpx, mw_, w.reg.rkey, &bind_);
  // rxe passes mw->rkey as the window's current key and the kernel checks
  // it, but nothing updates it (rxe-vm.md quirk 3). Binds run in send-queue
  // order, so the key to present next is this bind's.
  undo_.push_back({mw_, mw_->rkey});
  mw_->rkey = w.reg.rkey;
}

void VerbsMwBuilder::finish(bool posted) {
  if (!posted)
    for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) it->mw->rkey = it->rkey;
  undo_.clear();
}

}  // namespace tern::verbs
