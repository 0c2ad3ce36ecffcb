// pmd/verbs queue pair: state and posting. A post_send chain is one
// ibv_wr_start .. ibv_wr_complete sequence (one doorbell, verbs_wr_api.cc),
// or on rxe one ibv_post_send list (here); a post_recv chain is one
// ibv_post_recv of a linked list. Every WR takes a shadow-ring slot (see
// verbs_internal.h), which is also how queue-full is known before posting:
// rdmadev.h wants "accepted from the front", verbs posts all or nothing.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "rdmadev/rdmadev_driver.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

static_assert(sizeof(Sge) == sizeof(ibv_sge) && offsetof(Sge, addr) == offsetof(ibv_sge, addr) &&
                  offsetof(Sge, length) == offsetof(ibv_sge, length) && offsetof(Sge, lkey) == offsetof(ibv_sge, lkey),
              "tern::rdma::Sge is passed to verbs as ibv_sge");

void ShadowRing::init(uint32_t d) {
  uint32_t n = 1;
  while (n < d) n <<= 1;
  e.assign(n, Entry{});
  mask = n - 1;
  depth = d;
  head = tail = 0;
}

VerbsQp::VerbsQp(VerbsDevice* dev, VerbsPd* pd, VerbsCq* scq, VerbsCq* rcq, const QpInit& init, ibv_qp* qp,
                 uint32_t index, uint16_t gen, uint32_t max_inline)
    : dev_(dev), pd_(pd), scq_(scq), rcq_(rcq), init_(init), qp_(qp), qpx_(ibv_qp_to_qp_ex(qp)), index_(index),
      gen_(gen), max_inline_(max_inline), srq_(static_cast<VerbsSrq*>(init.srq)) {
  sq_.init(init.sq_depth);
  // A QP of an SRQ has no receive queue: an empty ring (always full) that
  // post_recv never reaches.
  rq_.init(srq_ != nullptr ? 0 : init.rq_depth);
  rwr_.resize(srq_ != nullptr ? 0 : init.rq_depth);
  if (srq_ != nullptr) srq_->attach();
  const DeviceCaps& c = dev->caps();
  if (FastRegProvider* fr = dev->fast_reg_provider()) {
    reg_ = fr->make_builder(qp, pd->pd(), &pd->mrs());
  } else if (c.memory_windows) {
    auto mw = std::make_unique<VerbsMwBuilder>(this, pd, c.fast_reg_page_size);
    mw_ = mw.get();
    reg_ = std::move(mw);
  }
  wq_.qpx = qpx_;
  wq_.sq = &sq_;
  wq_.st = &st_;
  wq_.reg = reg_.get();
  wq_.mrs = &pd->mrs();
  wq_.max_inline = max_inline;
  wq_.max_sge = init.max_send_sge;
  wq_.qp_index = index;
  wq_.gen = gen;
  wq_.local_inv = c.fast_reg;
  wq_.send_inv = c.remote_invalidation;
}

VerbsQp::~VerbsQp() {
  if (cm_id_ != nullptr) {
    // Destroying a connected id sends the peer a DREQ (a connecting one a
    // REJ): it sees kDisconnected. Not through a down port, though
    // (VerbsDevice::cm_may_send): then the id waits for the port.
    dev_->destroy_cm_id(cm_id_);
    cm_id_ = nullptr;
  }
  // Windows bound through this QP must let go of it before it is destroyed
  // (rxe-vm.md quirk 4); renewing them is cheap and correct on any device.
  std::vector<VerbsFastMr*> bound = std::move(bound_);
  for (VerbsFastMr* f : bound) {
    f->forget_qp(this);
    f->renew_window();
  }
  scq_->remove_pending(this);
  rcq_->remove_pending(this);
  dev_->forget_qp(this);
  if (int rc = ibv_destroy_qp(qp_); rc != 0)
    TERN_LOG(kWarn, "verbs", "ibv_destroy_qp(%u): %s", qp_->qp_num, std::strerror(rc));
  if (srq_ != nullptr) srq_->detach();  // the SRQ's receives stay posted, for its other QPs
}

StatsView VerbsQp::stats() const {
  return {{"post_calls", &st_.post_calls},   {"doorbells", &st_.doorbells},   {"send_wrs", &st_.send_wrs},
          {"recv_wrs", &st_.recv_wrs},       {"bytes_out", &st_.bytes_out},   {"completions", &st_.completions},
          {"inline_sends", &st_.inline_sends},
          {"reg_mr", &st_.reg_mr},           {"local_inv", &st_.local_inv},   {"send_inv", &st_.send_inv},
          {"remote_inv", &st_.remote_inv},   {"errors", &st_.errors},         {"flushed", &st_.flushed},
          {"sw_flushed", &st_.sw_flushed},   {"sq_full", &st_.sq_full},       {"rq_full", &st_.rq_full}};
}

void VerbsQp::enter_error() {
  if (state_ != QpState::kError) {
    state_ = QpState::kError;
    error_since_ = monotonic_ns();
  }
  // Hardware ERR flushes every outstanding WR; verbs does it for both queues.
  ibv_qp_attr at;
  std::memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(qp_, &at, IBV_QP_STATE);
  // Let the CQs complete WRs the hardware will not (see verbs_cq.cc).
  scq_->add_pending(this);
  rcq_->add_pending(this);
}

void VerbsQp::hw_error(WcStatus why) {
  if (state_ == QpState::kError) return;
  // A connected QP that failed: verbs has moved it to ERR already.
  bool was_connected = state_ == QpState::kRts;
  state_ = QpState::kError;
  error_since_ = monotonic_ns();
  scq_->add_pending(this);
  rcq_->add_pending(this);
  if (was_connected) {
    error_status = make_error(Errc::kDisconnected, "QP %u went to error: %s", qp_num(), wc_status_name(why));
    error_pending_cm = true;
    dev_->note_qp_error(this);
  }
}

Status VerbsQp::to_rtr_rts(rdma_cm_id* id, uint8_t resp_res, uint8_t init_depth) {
  // The QP is ours, not rdma_cm's (rdmadev creates QPs before connecting), so
  // the transitions rdma_accept/rdma_connect would make are made here, with
  // the attributes rdma_cm resolved for this connection.
  ibv_qp_attr at;
  int mask = 0;
  std::memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_RTR;
  if (rdma_init_qp_attr(id, &at, &mask) != 0)
    return make_sys_error(Errc::kInternal, errno, "verbs: rdma_init_qp_attr(RTR)");
  at.max_dest_rd_atomic = resp_res;
  if (int rc = ibv_modify_qp(qp_, &at, mask); rc != 0)
    return make_sys_error(Errc::kInternal, rc, "verbs: QP %u to RTR", qp_num());
  std::memset(&at, 0, sizeof at);
  mask = 0;
  at.qp_state = IBV_QPS_RTS;
  if (rdma_init_qp_attr(id, &at, &mask) != 0)
    return make_sys_error(Errc::kInternal, errno, "verbs: rdma_init_qp_attr(RTS)");
  at.max_rd_atomic = init_depth;
  // rdmadev.h: a SEND waits for a receive (RC with rnr_retry = 7, infinite).
  at.rnr_retry = 7;
  if (int rc = ibv_modify_qp(qp_, &at, mask | IBV_QP_RNR_RETRY); rc != 0)
    return make_sys_error(Errc::kInternal, rc, "verbs: QP %u to RTS", qp_num());
  return Status::ok();
}

// ---------------------------------------------------------------- posting

int VerbsQp::post_send(const SendWr* wrs, int n, int* err) {
  st_.post_calls.add();
  *err = 0;
  if (state_ == QpState::kError) return flush_sends(wrs, n, err);
  if (state_ != QpState::kRts) {
    *err = ENOTCONN;
    return 0;
  }
  // rxe's wr_* builder is broken in rdma-core 44 (wr_set_sge_list sums the
  // first SGE num_sge times, and larger transfers stall): on rxe the same
  // chain goes out as one ibv_post_send list -- still one doorbell.
  if (dev_->legacy_post()) return post_send_legacy(wrs, n, err);
  return post_send_wr_api(wq_, wrs, n, err);
}

int VerbsQp::post_send_legacy(const SendWr* wrs, int n, int* err) {
  const uint32_t start = sq_.tail;
  const uint32_t max_sge = init_.max_send_sge;
  // The device's list holds its deepest send queue: sq_.full() stops the
  // chain before it runs out.
  ibv_send_wr* const swr = dev_->send_scratch();
  int i = 0;
  for (; i < n; ++i) {
    const SendWr& w = wrs[i];
    if (sq_.full()) {
      *err = EAGAIN;
      st_.sq_full.add();
      break;
    }
    bool has_sge = w.opcode != WrOpcode::kRegMr && w.opcode != WrOpcode::kLocalInv;
    if (has_sge && (w.num_sge > max_sge || (w.num_sge > 0 && w.sg_list == nullptr))) {
      *err = EINVAL;
      break;
    }
    ibv_mw* mw = nullptr;
    ibv_mw_bind_info bind;
    if (w.opcode == WrOpcode::kRegMr) {
      // Only windows can be bound by an ibv_send_wr (a FastRegProvider
      // needs the wr_* builder and turns legacy posting off).
      if (mw_ == nullptr || !mw_->plan(w, &mw, &bind)) {
        *err = EINVAL;
        break;
      }
    } else if ((w.opcode == WrOpcode::kLocalInv && !dev_->caps().fast_reg) ||
               (w.opcode == WrOpcode::kSendWithInv && !dev_->caps().remote_invalidation)) {
      *err = EINVAL;
      break;
    }
    const bool signaled = (w.flags & kWrSignaled) != 0;
    const uint32_t seq = sq_.push(w.wr_id, wc_opcode_for(w.opcode), signaled, false);
    const auto* sg = reinterpret_cast<const ibv_sge*>(w.sg_list);
    ibv_send_wr& x = swr[i];
    std::memset(&x, 0, sizeof x);
    x.wr_id = encode_wr_id(gen_, index_, false, seq);
    x.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if (i > 0) swr[i - 1].next = &x;
    if (has_sge) {
      x.sg_list = const_cast<ibv_sge*>(sg);
      x.num_sge = static_cast<int>(w.num_sge);
      // The provider copies an inline WR's bytes inside ibv_post_send.
      if (w.opcode != WrOpcode::kRdmaRead && max_inline_ != 0 &&
          inline_fits(pd_->mrs(), max_inline_, w.sg_list, w.num_sge)) {
        x.send_flags |= IBV_SEND_INLINE;
        st_.inline_sends.add();
      }
    }
    switch (w.opcode) {
      case WrOpcode::kSend: x.opcode = IBV_WR_SEND; break;
      case WrOpcode::kSendWithInv:
        x.opcode = IBV_WR_SEND_WITH_INV;
        x.invalidate_rkey = w.invalidate_rkey;
        st_.send_inv.add();
        break;
      case WrOpcode::kRdmaWrite:
      case WrOpcode::kRdmaRead:
        x.opcode = w.opcode == WrOpcode::kRdmaWrite ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
        x.wr.rdma.remote_addr = w.remote_addr;
        x.wr.rdma.rkey = w.rkey;
        break;
      case WrOpcode::kRegMr:
        // ibv_post_send reads mw->rkey as the window's current key when it
        // builds the WQE, so the new key is stored only after posting.
        x.opcode = IBV_WR_BIND_MW;
        x.bind_mw.mw = mw;
        x.bind_mw.rkey = w.reg.rkey;
        x.bind_mw.bind_info = bind;
        st_.reg_mr.add();
        break;
      case WrOpcode::kLocalInv:
        x.opcode = IBV_WR_LOCAL_INV;
        x.invalidate_rkey = w.invalidate_rkey;
        st_.local_inv.add();
        break;
    }
    if (has_sge)
      for (uint32_t k = 0; k < w.num_sge; ++k) st_.bytes_out.add(w.sg_list[k].length);
  }
  if (i == 0) return 0;
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp_, swr, &bad);
  // WRs before `bad` were posted; the rest were not.
  int posted = rc == 0 ? i : bad == nullptr ? 0 : static_cast<int>(bad - swr);
  // rxe-vm.md quirk 3: the next bind of a window must present the key of
  // the last bind posted. (Two binds of one window in one chain would both
  // present the old key.)
  for (int k = 0; k < posted; ++k) {
    const ibv_send_wr& x = swr[k];
    if (x.opcode == IBV_WR_BIND_MW) x.bind_mw.mw->rkey = x.bind_mw.rkey;
  }
  if (rc != 0) {
    sq_.tail = start + static_cast<uint32_t>(posted);
    *err = rc == ENOMEM ? EAGAIN : rc;
  }
  if (posted > 0) st_.doorbells.add();
  st_.send_wrs.add(static_cast<uint64_t>(posted));
  return posted;
}

int VerbsQp::post_recv(const RecvWr* wrs, int n, int* err) {
  st_.post_calls.add();
  *err = 0;
  if (srq_ != nullptr) {
    *err = EINVAL;  // rdmadev.h: receives go to the SRQ
    return 0;
  }
  if (state_ == QpState::kError) return flush_recvs(wrs, n, err);
  const uint32_t start = rq_.tail;
  int i = 0;
  for (; i < n; ++i) {
    const RecvWr& w = wrs[i];
    if (rq_.full()) {
      *err = EAGAIN;
      st_.rq_full.add();
      break;
    }
    if (w.num_sge > init_.max_recv_sge || (w.num_sge > 0 && w.sg_list == nullptr)) {
      *err = EINVAL;
      break;
    }
    const uint32_t seq = rq_.push(w.wr_id, WcOpcode::kRecv, true, false);
    ibv_recv_wr& r = rwr_[static_cast<size_t>(i)];
    r.wr_id = encode_wr_id(gen_, index_, true, seq);
    r.sg_list = reinterpret_cast<ibv_sge*>(const_cast<Sge*>(w.sg_list));
    r.num_sge = static_cast<int>(w.num_sge);
    r.next = nullptr;
    if (i > 0) rwr_[static_cast<size_t>(i - 1)].next = &r;
  }
  if (i == 0) return 0;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_, &rwr_[0], &bad); rc != 0) {
    // WRs before `bad` were posted; the rest were not.
    int posted = bad == nullptr ? 0 : static_cast<int>(bad - &rwr_[0]);
    rq_.tail = start + static_cast<uint32_t>(posted);
    *err = rc == ENOMEM ? EAGAIN : rc;
    st_.doorbells.add();
    st_.recv_wrs.add(static_cast<uint64_t>(posted));
    return posted;
  }
  st_.doorbells.add();
  st_.recv_wrs.add(static_cast<uint64_t>(i));
  return i;
}

// WRs posted to a QP in error are flushed (rdmadev.h). They never reach the
// hardware: rxe, for one, would leave such receives unflushed until another
// packet arrives. The CQ completes them in order, after the hardware's own
// flushes of earlier WRs (verbs_cq.cc).
int VerbsQp::flush_sends(const SendWr* wrs, int n, int* err) {
  int i = 0;
  for (; i < n; ++i) {
    if (sq_.full()) {
      *err = EAGAIN;
      st_.sq_full.add();
      break;
    }
    if (wrs[i].num_sge > init_.max_send_sge) {
      *err = EINVAL;
      break;
    }
    sq_.push(wrs[i].wr_id, wc_opcode_for(wrs[i].opcode), true, true);
  }
  if (i > 0) scq_->add_pending(this);
  return i;
}

int VerbsQp::flush_recvs(const RecvWr* wrs, int n, int* err) {
  int i = 0;
  for (; i < n; ++i) {
    if (rq_.full()) {
      *err = EAGAIN;
      st_.rq_full.add();
      break;
    }
    if (wrs[i].num_sge > init_.max_recv_sge) {
      *err = EINVAL;
      break;
    }
    rq_.push(wrs[i].wr_id, WcOpcode::kRecv, true, true);
  }
  if (i > 0) rcq_->add_pending(this);
  return i;
}

}  // namespace tern::verbs
