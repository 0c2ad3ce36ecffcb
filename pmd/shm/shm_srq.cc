// pmd/shm receive queues: the storage of posted receives (a QP's own queue
// and the shared one have the same), and the shared receive queue itself
// (rdmadev.h's Srq). How an inbound SEND takes its receive from either is
// in shm_responder.cc (execute_send); this file only holds and hands them out.
//
// An SRQ is the host's memory, never the peer's business: peers only ever
// see that a SEND waited or landed. Every QP of the SRQ executes its own
// peer's descriptors and checks them as strictly as with its own queue; what
// a misbehaving peer can do to the SRQ is limited by where those checks
// happen (before a receive is taken, see ShmQp::execute_one): a message that
// breaks the rules leaves the receive it would have used in place, so one
// peer can neither use up nor write into the receives another peer's
// messages would get.
#include <algorithm>

#include "base/log.h"
#include "shm/shm_internal.h"

namespace tern::shm {

// ---------------------------------------------------------------- posted receives

void ShmRecvQueue::init(uint32_t depth, uint32_t max_sge) {
  depth_ = depth;
  max_sge_ = max_sge;
  head_ = tail_ = head_slot_ = tail_slot_ = 0;
  entries_.assign(depth, Entry{});
  // One block for every SGE, rather than one allocation per receive.
  sges_.assign(static_cast<size_t>(depth) * max_sge, LocalSpan{nullptr, 0});
  for (uint32_t i = 0; i < depth; ++i) entries_[i].sge = sges_.data() + static_cast<size_t>(i) * max_sge;
}

// ---------------------------------------------------------------- the shared receive queue

ShmSrq::ShmSrq(ShmDevice* dev, ShmPd* pd, uint32_t depth, uint32_t max_sge) : dev_(dev), pd_(pd) {
  q_.init(depth, max_sge);
  dev_->srq_made();
}

ShmSrq::~ShmSrq() {
  // rdmadev.h: QPs first. Receives still posted are dropped without
  // completions; their buffers are the caller's again.
  TERN_ASSERT(qps_.empty(), "SRQ destroyed while %zu QPs use it", qps_.size());
  dev_->srq_gone();
}

void ShmSrq::attach(ShmQp* qp) {
  qp->srq_at() = static_cast<uint32_t>(qps_.size());
  qps_.push_back(qp);
}

void ShmSrq::detach(ShmQp* qp) {
  // The last QP takes its place: the order is nobody's concern (post_recv
  // marks them all).
  const uint32_t i = qp->srq_at();
  TERN_CHECK(i < qps_.size() && qps_[i] == qp, "QP not attached to this SRQ");
  qps_[i] = qps_.back();
  qps_[i]->srq_at() = i;
  qps_.pop_back();
}

StatsView ShmSrq::stats() const {
  return {{"posted", &st_.posted},
          {"consumed", &st_.consumed},
          {"rnr_waits", &st_.rnr_waits},
          {"returned", &st_.returned}};
}

int ShmSrq::post_recv(const RecvWr* wrs, int n, int* err) {
  int i = q_.post(pd_, wrs, n, err);
  if (i > 0) {
    st_.posted.add(static_cast<uint64_t>(i));
    // A SEND that found the SRQ empty waits in its ring and its peer will
    // not ring again: a host asleep (armed) must poll now for it to land.
    // Unarmed, the host polls before it sleeps (the wait protocol's second
    // look), which finds it.
    if (starved_) {
      if (dev_->armed()) dev_->self_wake();
      // The starved SENDs wait in their rings, and no peer flags them
      // again: our QPs go back for them (only after a starvation, so the
      // walk is rare).
      for (ShmQp* qp : qps_) qp->mark_active();
    }
    starved_ = false;
  }
  return i;
}

Result<std::unique_ptr<Srq>> ShmDevice::create_srq(Pd* pdi, uint32_t depth, uint32_t max_sge) {
  auto* pd = dynamic_cast<ShmPd*>(pdi);
  if (pd == nullptr || pd->device() != this)
    return make_error(Errc::kInvalidArgument, "create_srq: the PD must come from this shm device");
  if (depth == 0 || depth > caps_.max_srq_wr)
    return make_error(Errc::kInvalidArgument, "create_srq: depth %u not in [1, %u]", depth, caps_.max_srq_wr);
  if (max_sge == 0 || max_sge > caps_.max_srq_sge)
    return make_error(Errc::kInvalidArgument, "create_srq: %u SGEs per receive not in [1, %u]", max_sge,
                      caps_.max_srq_sge);
  return std::unique_ptr<Srq>(new ShmSrq(this, pd, depth, max_sge));
}

}  // namespace tern::shm
