// pmd/verbs queue pair: posting. A post_send chain is one ibv_wr_start ..
// ibv_wr_complete sequence (one doorbell); a post_recv chain is one
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

namespace {

unsigned mw_access(uint32_t a) {
  unsigned f = 0;
  if (a & kAccessRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE;
  if (a & kAccessRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  return f;
}

}  // namespace

void ShadowRing::init(uint32_t d) {
  uint32_t n = 1;
  while (n < d) n <<= 1;
  e.assign(n, Entry{});
  mask = n - 1;
  depth = d;
  head = tail = 0;
}

VerbsQp::VerbsQp(VerbsDevice* dev, VerbsPd* pd, VerbsCq* scq, VerbsCq* rcq, const QpInit& init, ibv_qp* qp,
                 uint32_t index, uint16_t gen)
    : dev_(dev), pd_(pd), scq_(scq), rcq_(rcq), init_(init), qp_(qp), qpx_(ibv_qp_to_qp_ex(qp)), index_(index),
      gen_(gen) {
  sq_.init(init.sq_depth);
  rq_.init(init.rq_depth);
  rwr_.resize(init.rq_depth);
  swr_.resize(init.sq_depth);
  mw_undo_.reserve(init.sq_depth);
}

VerbsQp::~VerbsQp() {
  if (cm_id_ != nullptr) {
    // Destroying a connected id sends the peer a DREQ: it sees kDisconnected.
    rdma_destroy_id(cm_id_);
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
}

StatsView VerbsQp::stats() const {
  return {{"post_calls", &st_.post_calls},   {"doorbells", &st_.doorbells},   {"send_wrs", &st_.send_wrs},
          {"recv_wrs", &st_.recv_wrs},       {"bytes_out", &st_.bytes_out},   {"completions", &st_.completions},
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
  const uint32_t start = sq_.tail;
  const uint32_t max_sge = init_.max_send_sge;
  mw_undo_.clear();
  int i = 0;
  // rxe's wr_* builder is broken in rdma-core 44 (wr_set_sge_list sums the
  // first SGE num_sge times, and larger transfers stall): on rxe the same
  // chain goes out as one ibv_post_send list -- still one doorbell.
  const bool legacy = dev_->legacy_post();
  if (!legacy) ibv_wr_start(qpx_);
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
      // A window covers one contiguous range of one MR; refuse what the
      // device would only refuse later (or, on rxe, not at all).
      auto* f = static_cast<VerbsFastMr*>(w.reg.mr);
      ibv_mr* under = pd_->mr_of(w.reg.lkey);
      uint64_t page = dev_->caps().fast_reg_page_size;
      bool ok = f != nullptr && f->mw() != nullptr && f->pd() == pd_ && under != nullptr && w.reg.length > 0 &&
                w.reg.length <= uint64_t{f->max_depth()} * page &&
                rkey_index(w.reg.rkey) == rkey_index(f->mw()->rkey) &&
                w.reg.addr >= reinterpret_cast<uint64_t>(under->addr) &&
                w.reg.length <= under->length &&
                w.reg.addr - reinterpret_cast<uint64_t>(under->addr) <= under->length - w.reg.length;
      if (!ok) {
        *err = EINVAL;
        break;
      }
      mw = f->mw();
      bind.mr = under;
      bind.addr = w.reg.addr;
      bind.length = w.reg.length;
      bind.mw_access_flags = mw_access(w.reg.access);
      f->note_bound(this);
    } else if ((w.opcode == WrOpcode::kLocalInv && !dev_->caps().memory_windows) ||
               (w.opcode == WrOpcode::kSendWithInv && !dev_->caps().remote_invalidation)) {
      *err = EINVAL;
      break;
    }
    uint32_t seq = sq_.tail++;
    ShadowRing::Entry& e = sq_.at(seq);
    e.wr_id = w.wr_id;
    e.opcode = wc_opcode_for(w.opcode);
    e.signaled = (w.flags & kWrSignaled) != 0;
    e.sw = false;
    const auto* sg = reinterpret_cast<const ibv_sge*>(w.sg_list);
    if (legacy) {
      ibv_send_wr& x = swr_[static_cast<size_t>(i)];
      std::memset(&x, 0, sizeof x);
      x.wr_id = encode_wr_id(gen_, index_, false, seq);
      x.send_flags = e.signaled ? IBV_SEND_SIGNALED : 0;
      if (i > 0) swr_[static_cast<size_t>(i - 1)].next = &x;
      if (has_sge) {
        x.sg_list = const_cast<ibv_sge*>(sg);
        x.num_sge = static_cast<int>(w.num_sge);
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
          x.opcode = IBV_WR_BIND_MW;
          x.bind_mw.mw = mw;
          x.bind_mw.rkey = w.reg.rkey;
          x.bind_mw.bind_info = bind;
          // ibv_post_send reads mw->rkey as the window's current key when it
          // builds the WQE, so the new key is stored only after posting.
          mw_undo_.push_back({mw, w.reg.rkey});
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
      continue;
    }
    qpx_->wr_id = encode_wr_id(gen_, index_, false, seq);
    qpx_->wr_flags = e.signaled ? IBV_SEND_SIGNALED : 0;
    switch (w.opcode) {
      case WrOpcode::kSend:
        ibv_wr_send(qpx_);
        ibv_wr_set_sge_list(qpx_, w.num_sge, sg);
        break;
      case WrOpcode::kSendWithInv:
        ibv_wr_send_inv(qpx_, w.invalidate_rkey);
        ibv_wr_set_sge_list(qpx_, w.num_sge, sg);
        st_.send_inv.add();
        break;
      case WrOpcode::kRdmaWrite:
        ibv_wr_rdma_write(qpx_, w.rkey, w.remote_addr);
        ibv_wr_set_sge_list(qpx_, w.num_sge, sg);
        break;
      case WrOpcode::kRdmaRead:
        ibv_wr_rdma_read(qpx_, w.rkey, w.remote_addr);
        ibv_wr_set_sge_list(qpx_, w.num_sge, sg);
        break;
      case WrOpcode::kRegMr:
        ibv_wr_bind_mw(qpx_, mw, w.reg.rkey, &bind);
        // rxe passes mw->rkey as the window's current key and the kernel
        // checks it, but nothing updates it (rxe-vm.md quirk 3). Binds run
        // in send-queue order, so the key to present next is this bind's.
        mw_undo_.push_back({mw, mw->rkey});
        mw->rkey = w.reg.rkey;
        st_.reg_mr.add();
        break;
      case WrOpcode::kLocalInv:
        ibv_wr_local_inv(qpx_, w.invalidate_rkey);
        st_.local_inv.add();
        break;
    }
    if (has_sge)
      for (uint32_t k = 0; k < w.num_sge; ++k) st_.bytes_out.add(w.sg_list[k].length);
  }
  if (i == 0) {
    if (!legacy) ibv_wr_abort(qpx_);
    return 0;
  }
  if (legacy) {
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_, &swr_[0], &bad); rc != 0) {
      // WRs before `bad` were posted; the rest were not.
      int posted = bad == nullptr ? 0 : static_cast<int>(bad - &swr_[0]);
      sq_.tail = start + static_cast<uint32_t>(posted);
      // Binds that were posted carry their keys forward (rxe-vm.md quirk 3).
      for (int k = 0; k < posted; ++k) {
        const ibv_send_wr& x = swr_[static_cast<size_t>(k)];
        if (x.opcode == IBV_WR_BIND_MW) x.bind_mw.mw->rkey = x.bind_mw.rkey;
      }
      *err = rc == ENOMEM ? EAGAIN : rc;
      if (posted > 0) st_.doorbells.add();
      st_.send_wrs.add(static_cast<uint64_t>(posted));
      return posted;
    }
    // rxe-vm.md quirk 3: the next bind of a window must present this key.
    // (Two binds of one window in one chain would both present the old key.)
    for (const MwUndo& m : mw_undo_) m.mw->rkey = m.rkey;
    st_.doorbells.add();
    st_.send_wrs.add(static_cast<uint64_t>(i));
    return i;
  }
  if (int rc = ibv_wr_complete(qpx_); rc != 0) {
    // Nothing of the chain was posted: undo the slots and window keys.
    sq_.tail = start;
    for (auto it = mw_undo_.rbegin(); it != mw_undo_.rend(); ++it) it->mw->rkey = it->rkey;
    *err = rc == ENOMEM ? EAGAIN : rc;
    return 0;
  }
  st_.doorbells.add();
  st_.send_wrs.add(static_cast<uint64_t>(i));
  return i;
}

int VerbsQp::post_recv(const RecvWr* wrs, int n, int* err) {
  st_.post_calls.add();
  *err = 0;
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
    uint32_t seq = rq_.tail++;
    ShadowRing::Entry& e = rq_.at(seq);
    e.wr_id = w.wr_id;
    e.opcode = WcOpcode::kRecv;
    e.signaled = true;
    e.sw = false;
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
    ShadowRing::Entry& e = sq_.at(sq_.tail++);
    e = {wrs[i].wr_id, wc_opcode_for(wrs[i].opcode), true, true};
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
    ShadowRing::Entry& e = rq_.at(rq_.tail++);
    e = {wrs[i].wr_id, WcOpcode::kRecv, true, true};
  }
  if (i > 0) rcq_->add_pending(this);
  return i;
}

}  // namespace tern::verbs
