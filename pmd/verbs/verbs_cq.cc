// pmd/verbs completion queue: extended-CQ polling (ibv_start_poll /
// ibv_next_poll / ibv_end_poll), one burst per call, translated to tern Wc
// through the QPs' shadow rings (verbs_internal.h).
#include <algorithm>

#include "verbs/verbs_internal.h"

namespace tern::verbs {

namespace {

// How long a QP in error waits for the hardware to flush a WR it holds
// before the driver completes it itself. Verbs flushes within microseconds;
// this only bounds the wait when a provider does not (or when an unsignaled
// WR completed silently before the error and will never be reported).
constexpr uint64_t kHwFlushGraceNs = 250'000'000;

WcStatus map_status(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return WcStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR: return WcStatus::kLocLenErr;
    case IBV_WC_LOC_QP_OP_ERR: return WcStatus::kLocQpOpErr;
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR: return WcStatus::kLocProtErr;
    case IBV_WC_WR_FLUSH_ERR: return WcStatus::kWrFlushErr;
    case IBV_WC_MW_BIND_ERR: return WcStatus::kMwBindErr;
    case IBV_WC_REM_INV_REQ_ERR: return WcStatus::kRemInvReqErr;
    case IBV_WC_REM_ACCESS_ERR: return WcStatus::kRemAccessErr;
    case IBV_WC_REM_OP_ERR: return WcStatus::kRemOpErr;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR: return WcStatus::kRetryExcErr;
    default: return WcStatus::kGeneralErr;
  }
}

}  // namespace

VerbsCq::~VerbsCq() {
  TERN_ASSERT(pending_.empty(), "CQ destroyed while %zu QPs use it", pending_.size());
  // ibv_destroy_cq waits for every event read from the channel to be acked.
  if (unacked_events_ != 0) ibv_ack_cq_events(ibv(), unacked_events_);
  ibv_destroy_cq(ibv());
}

Status VerbsCq::arm() {
  if (int rc = ibv_req_notify_cq(ibv(), 0); rc != 0)
    return make_sys_error(Errc::kInternal, rc, "verbs: ibv_req_notify_cq");
  // WRs the driver completes itself after the grace (poll_pending) raise no
  // event: a timer stands in for them.
  for (VerbsQp* qp : pending_) dev_->wake_at(qp->error_since() + kHwFlushGraceNs);
  return Status::ok();
}

void VerbsCq::note_event() {
  // Acked in batches: each ack takes the CQ's lock (rdma-core's advice).
  if (++unacked_events_ >= 64) {
    ibv_ack_cq_events(ibv(), unacked_events_);
    unacked_events_ = 0;
  }
}

void VerbsCq::add_pending(VerbsQp* qp) {
  if (std::find(pending_.begin(), pending_.end(), qp) == pending_.end()) pending_.push_back(qp);
}

void VerbsCq::remove_pending(VerbsQp* qp) {
  pending_.erase(std::remove(pending_.begin(), pending_.end(), qp), pending_.end());
}

int VerbsCq::poll(Wc* wc, int max) {
  if (max <= 0) return 0;
  int n = 0;
  ibv_poll_cq_attr attr = {};
  if (ibv_start_poll(cq_, &attr) == 0) {
    const bool inv_quirk = dev_->inv_flag_quirk();
    for (;;) {
      const uint64_t id = cq_->wr_id;
      if (TERN_UNLIKELY(wr_id_is_srq(id))) {
        if (srq_completion(id, &wc[n])) ++n;
        if (n == max) break;
        if (ibv_next_poll(cq_) != 0) {
          if (dev_->next_poll_ends()) goto ended;  // see below
          break;
        }
        continue;
      }
      VerbsQp* qp = dev_->qp_at(wr_id_qp(id), wr_id_gen(id));
      const bool recv = wr_id_recv(id);
      const uint32_t seq = wr_id_seq(id);
      // Completions of a destroyed QP, or of WRs the driver already
      // completed itself (see poll_pending), are dropped.
      if (qp != nullptr && (recv ? qp->rq() : qp->sq()).outstanding(seq)) {
        ShadowRing& r = recv ? qp->rq() : qp->sq();
        const ShadowRing::Entry& e = r.at(seq);
        Wc& w = wc[n++];
        w.wr_id = e.wr_id;
        w.opcode = e.opcode;
        w.qp_num = qp->qp_num();
        w.flags = 0;
        w.reserved = 0;
        w.invalidated_rkey = 0;
        w.byte_len = 0;
        r.head = seq + 1;  // a completion retires every earlier (unsignaled) WR
        qp->st().completions.add();
        WcStatus st = map_status(cq_->status);
        if (st == WcStatus::kSuccess) {
          w.byte_len = ibv_wc_read_byte_len(cq_);
          if (recv) {
            if (qp->state() == QpState::kConnecting && !qp->active) dev_->established_by_receive(qp);
            // rxe reports WITH_INV in bit 2 (IBV_WC_IP_CSUM_OK, meaningless
            // on an RC receive), not IBV_WC_WITH_INV: rxe-vm.md quirk 2.
            unsigned f = ibv_wc_read_wc_flags(cq_);
            if ((f & IBV_WC_WITH_INV) || (inv_quirk && (f & IBV_WC_IP_CSUM_OK))) {
              w.flags = kWcWithInv;
              w.invalidated_rkey = ibv_wc_read_invalidated_rkey(cq_);
              qp->st().remote_inv.add();
            }
          }
        } else {
          if (st == WcStatus::kWrFlushErr) qp->st().flushed.add();
          else qp->st().errors.add();
          qp->hw_error(st);
        }
        w.status = st;
      }
      if (n == max) break;
      if (ibv_next_poll(cq_) != 0) {
        // rxe's next_poll ends the poll itself when the CQ is empty (stores
        // the consumer index, drops the lock); ibv_end_poll after it would
        // skip a CQE that has not arrived yet and unlock twice. Other
        // providers need end_poll, as the man page says.
        if (dev_->next_poll_ends()) goto ended;
        break;
      }
    }
    ibv_end_poll(cq_);
  ended:;
  }
  if (n < max && !pending_.empty()) n += poll_pending(wc + n, max - n);
  return n;
}

// A receive of an SRQ: its slot gives the user's wr_id back, the CQE's
// qp_num says which QP's message took it. The QP may have been destroyed
// since (rxe leaves its completions in the CQ): the completion is still
// delivered, for the receive has left the SRQ and its buffer is the
// caller's again.
bool VerbsCq::srq_completion(uint64_t id, Wc* w) {
  VerbsSrq* srq = dev_->srq_at(wr_id_srq(id), wr_id_gen(id));
  uint64_t user = 0;
  if (srq == nullptr || !srq->take(wr_id_srq_slot(id), &user)) return false;  // a destroyed SRQ's
  const uint32_t qpn = ibv_wc_read_qp_num(cq_);
  VerbsQp* qp = dev_->qp_by_num(qpn);
  if (qp != nullptr && qp->srq() != srq) qp = nullptr;  // not one of its QPs (a number reused since)
  *w = Wc{};
  w->wr_id = user;
  w->opcode = WcOpcode::kRecv;
  w->qp_num = qpn;
  srq->st().completions.add();
  if (qp != nullptr) qp->st().completions.add();
  const WcStatus st = map_status(cq_->status);
  w->status = st;
  if (st == WcStatus::kSuccess) {
    w->byte_len = ibv_wc_read_byte_len(cq_);
    if (qp != nullptr && qp->state() == QpState::kConnecting && !qp->active) dev_->established_by_receive(qp);
    unsigned f = ibv_wc_read_wc_flags(cq_);
    if ((f & IBV_WC_WITH_INV) || (dev_->inv_flag_quirk() && (f & IBV_WC_IP_CSUM_OK))) {
      w->flags = kWcWithInv;
      w->invalidated_rkey = ibv_wc_read_invalidated_rkey(cq_);
      if (qp != nullptr) qp->st().remote_inv.add();
    }
  } else {
    srq->st().errors.add();
    if (qp != nullptr) {
      if (st == WcStatus::kWrFlushErr) qp->st().flushed.add();
      else qp->st().errors.add();
      qp->hw_error(st);
    }
  }
  return true;
}

// QPs in error: WRs posted after the error (marked sw) complete here, in
// order, once the hardware has flushed everything before them. On a QP of an
// SRQ the send queue's sw WRs also wait until the device has said it takes
// no more receives for the QP (IBV_EVENT_QP_LAST_WQE_REACHED), or for the
// grace: such a WR is a drain marker, and once its flush is polled no receive
// completion of the QP may follow (rdmadev.h). Receive completions the
// device made before that event are in the receive CQ already.
int VerbsCq::poll_pending(Wc* wc, int max) {
  int n = 0;
  const uint64_t now = monotonic_ns();
  for (size_t i = 0; i < pending_.size();) {
    VerbsQp* qp = pending_[i];
    const bool grace_over = now - qp->error_since() >= kHwFlushGraceNs;
    bool done = true;
    for (int which = 0; which < 2; ++which) {
      const bool recv = which == 1;
      if ((recv ? qp->recv_cq() : qp->send_cq()) != this) continue;
      ShadowRing& r = recv ? qp->rq() : qp->sq();
      while (r.head != r.tail && n < max) {
        const ShadowRing::Entry& e = r.at(r.head);
        if (e.sw && !recv && qp->srq() != nullptr && !qp->last_wqe_reached() && !grace_over) break;
        if (!e.sw) {
          if (!grace_over) break;  // the hardware's flush should come
          if (!recv && !e.signaled) {
            ++r.head;  // may have succeeded silently: nothing to report
            continue;
          }
        }
        Wc& w = wc[n++];
        w = Wc{};
        w.wr_id = e.wr_id;
        w.opcode = e.opcode;
        w.qp_num = qp->qp_num();
        w.status = WcStatus::kWrFlushErr;
        ++r.head;
        qp->st().sw_flushed.add();
      }
      if (r.head != r.tail) done = false;
    }
    if (done) pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    else ++i;
    if (n == max) break;
  }
  return n;
}

}  // namespace tern::verbs
