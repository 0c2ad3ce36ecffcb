// pmd/verbs shared receive queues: ibv_create_srq / ibv_post_srq_recv, and
// the slot table that gives each receive's completion back its wr_id (see
// verbs_internal.h for the wr_id encoding). QPs are attached at creation
// (ibv_qp_init_attr_ex::srq, verbs_device.cc); their completions are turned
// into tern Wcs in verbs_cq.cc; the drain rule's wait for
// IBV_EVENT_QP_LAST_WQE_REACHED is in verbs_events.cc and verbs_cq.cc.
//
// A QP of an SRQ that goes to error flushes nothing of it: the device keeps
// the SRQ's receives for its other QPs, and so does the slot table.
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

VerbsSrq::VerbsSrq(VerbsDevice* dev, VerbsPd* pd, ibv_srq* srq, uint32_t depth, uint32_t max_sge, uint32_t index,
                   uint16_t gen)
    : dev_(dev), pd_(pd), srq_(srq), depth_(depth), max_sge_(max_sge), index_(index), gen_(gen) {
  wr_ids_.assign(depth, 0);
  busy_.assign(depth, 0);
  free_.reserve(depth);
  // Slot 0 first: popped from the back.
  for (uint32_t i = depth; i > 0; --i) free_.push_back(i - 1);
  rwr_.resize(depth);
}

VerbsSrq::~VerbsSrq() {
  // Receives still posted go with it, without completions (rdmadev.h). Its
  // QPs must be gone (ibv_destroy_srq would fail with EBUSY, and they would
  // keep a pointer to it).
  TERN_ASSERT(qps_ == 0, "SRQ destroyed while %u QPs use it", qps_);
  dev_->forget_srq(this);
  if (int rc = ibv_destroy_srq(srq_); rc != 0)
    TERN_LOG(kWarn, "verbs", "ibv_destroy_srq: %s (QPs still use it?)", std::strerror(rc));
}

StatsView VerbsSrq::stats() const {
  return {{"posted", &st_.posted},
          {"completions", &st_.completions},
          {"errors", &st_.errors},
          {"full", &st_.full},
          {"doorbells", &st_.doorbells}};
}

int VerbsSrq::post_recv(const RecvWr* wrs, int n, int* err) {
  *err = 0;
  int i = 0;
  for (; i < n; ++i) {
    const RecvWr& w = wrs[i];
    // Full is known here, from the slot table, so that what is accepted is
    // always a prefix (ibv_post_srq_recv might take part of a chain).
    if (free_.empty()) {
      *err = EAGAIN;
      st_.full.add();
      break;
    }
    if (w.num_sge > max_sge_ || (w.num_sge > 0 && w.sg_list == nullptr)) {
      *err = EINVAL;
      break;
    }
    const uint32_t slot = free_.back();
    free_.pop_back();
    busy_[slot] = 1;
    wr_ids_[slot] = w.wr_id;
    ibv_recv_wr& r = rwr_[static_cast<size_t>(i)];
    r.wr_id = encode_srq_wr_id(gen_, index_, slot);
    r.sg_list = reinterpret_cast<ibv_sge*>(const_cast<Sge*>(w.sg_list));
    r.num_sge = static_cast<int>(w.num_sge);
    r.next = nullptr;
    if (i > 0) rwr_[static_cast<size_t>(i - 1)].next = &r;
  }
  if (i == 0) return 0;
  ibv_recv_wr* bad = nullptr;
  int posted = i;
  if (int rc = ibv_post_srq_recv(srq_, &rwr_[0], &bad); rc != 0) {
    // WRs before `bad` were posted; the slots of the rest are free again,
    // the last first so that the next post reuses them in order.
    posted = bad == nullptr ? 0 : static_cast<int>(bad - &rwr_[0]);
    for (int k = i - 1; k >= posted; --k) {
      const uint32_t slot = wr_id_srq_slot(rwr_[static_cast<size_t>(k)].wr_id);
      busy_[slot] = 0;
      free_.push_back(slot);
    }
    *err = rc == ENOMEM ? EAGAIN : rc;
  }
  st_.doorbells.add();
  st_.posted.add(static_cast<uint64_t>(posted));
  return posted;
}

Result<std::unique_ptr<Srq>> VerbsDevice::create_srq(Pd* pdi, uint32_t depth, uint32_t max_sge) {
  auto* pd = dynamic_cast<VerbsPd*>(pdi);
  if (pd == nullptr || pd->device() != this)
    return make_error(Errc::kInvalidArgument, "create_srq: the PD must come from this verbs device");
  if (caps_.max_srq_wr == 0)
    return make_error(Errc::kUnsupported, "verbs: %s has no shared receive queues", caps_.name.c_str());
  if (depth == 0 || depth > caps_.max_srq_wr)
    return make_error(Errc::kInvalidArgument, "create_srq: depth %u not in [1, %u]", depth, caps_.max_srq_wr);
  if (max_sge == 0 || max_sge > caps_.max_srq_sge)
    return make_error(Errc::kInvalidArgument, "create_srq: %u SGEs per receive not in [1, %u]", max_sge,
                      caps_.max_srq_sge);
  if (removed_) return make_error(Errc::kDisconnected, "verbs: %s was removed", caps_.name.c_str());
  uint32_t index = 0;
  while (index < srqs_.size() && srqs_[index] != nullptr) ++index;
  if (index >= kMaxSrqsPerDevice)
    return make_error(Errc::kNoResources, "verbs: more than %u SRQs on one Device", kMaxSrqsPerDevice);
  ibv_srq_init_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.attr.max_wr = depth;
  attr.attr.max_sge = max_sge;
  ibv_srq* srq = ibv_create_srq(pd->pd(), &attr);
  if (srq == nullptr)
    return make_sys_error(Errc::kNoResources, errno, "verbs: ibv_create_srq(%u, sge %u) on %s", depth, max_sge,
                          caps_.name.c_str());
  if (index == srqs_.size()) {
    srqs_.push_back(nullptr);
    srq_gens_.push_back(0);
  }
  auto* s = new VerbsSrq(this, pd, srq, depth, max_sge, index, ++srq_gens_[index]);
  srqs_[index] = s;
  return std::unique_ptr<Srq>(s);
}

void VerbsDevice::forget_srq(VerbsSrq* srq) {
  if (srq->index() < srqs_.size() && srqs_[srq->index()] == srq) srqs_[srq->index()] = nullptr;
}

}  // namespace tern::verbs
