// pmd/sim's queue pair: posting (nothing runs at post time), and the events
// the world runs for it: executing the head of its send queue as requester
// and, for SENDs, READs and WRITEs, as the peer's responder; publishing its
// completions to its CQs; its connection-manager actions.
#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "rdmadev/rdmadev_driver.h"
#include "sim/sim_internal.h"

namespace tern::sim {

namespace {

uint64_t sge_total(const Sge* sg, uint32_t n) {
  uint64_t t = 0;
  for (uint32_t i = 0; i < n; ++i) t += sg[i].length;
  return t;
}

// Copies the bytes of src's SGEs into dst's, in order; both lists hold at
// least `len` bytes.
void scatter(const Sge* src, uint32_t ns, const Sge* dst, uint32_t nd, uint64_t len) {
  uint32_t si = 0, di = 0;
  uint64_t so = 0, dof = 0;
  while (len > 0) {
    while (si < ns && so == src[si].length) ++si, so = 0;
    while (di < nd && dof == dst[di].length) ++di, dof = 0;
    if (si == ns || di == nd) return;
    uint64_t n = std::min<uint64_t>({len, src[si].length - so, dst[di].length - dof});
    std::memmove(reinterpret_cast<void*>(dst[di].addr + dof), reinterpret_cast<const void*>(src[si].addr + so), n);
    so += n, dof += n, len -= n;
  }
}

}  // namespace

SimQp::SimQp(SimDevice* dev, const QpInit& init) : dev_(dev), init_(init) {
  qpn_ = dev_->world().add_qp(this);
  serial_ = dev_->world().new_qp_serial();
  srq_ = static_cast<SimSrq*>(init.srq);  // create_qp checked that it is ours
}

SimQp::~SimQp() {
  // The peer loses its link, as RC peers of a destroyed QP do (retry
  // exceeded, or the CM's disconnect): a scheduled event, so it may be late.
  if (peer_ != nullptr && peer_->peer_ == this) {
    peer_->peer_ = nullptr;
    CmAction a{CmAction::Kind::kLoseLink, CmEvent{CmEventType::kDisconnected}, {}};
    a.ev.status = make_error(Errc::kDisconnected, "sim: the peer's QP was destroyed");
    peer_->queue_cm(std::move(a));
  }
  // Completions it left in its CQs stay there, named by its number (the
  // rdmadev contract allows it), but no longer retire any QP's slots: the
  // number may name a QP made later.
  static_cast<SimCq*>(init_.send_cq)->orphan(qpn_);
  static_cast<SimCq*>(init_.recv_cq)->orphan(qpn_);
  // World::late_receives: it held one of its SRQ's receives, whose error
  // completion comes after the destroy, under its number.
  World& w = dev_->world();
  if (srq_ != nullptr && !srq_->queue().empty() && w.late_receives_per_mille() != 0 &&
      w.chance(w.late_receives_per_mille())) {
    w.add_late(World::LateRecv{static_cast<SimCq*>(init_.recv_cq), srq_->queue().front().wr_id, qpn_, w.chance(500)});
    srq_->queue().pop_front();
    srq_->consumed();
    ++w.counters_mut().late_recvs;
    w.trace_event("late-rcqe-held", qpn_, "", 0);
  }
  dev_->forget_qp(this);
  dev_->world().remove_qp(this);
}

std::string SimQp::peer() const {
  if (peer_ == nullptr) return {};
  return peer_->dev_->host() + " qp " + std::to_string(peer_->qpn_);
}

std::string SimQp::peer_host() const { return peer_ != nullptr ? peer_->dev_->host() : std::string(); }

StatsView SimQp::stats() const {
  return {{"posted", &st_posted_}, {"executed", &st_executed_}, {"rnr_waits", &st_rnr_},
          {"flushed", &st_flushed_}, {"sq_full", &st_sq_full_}};
}

Status SimQp::inject_fault(const Fault& f) {
  switch (f.kind) {
    case Fault::Kind::kFailAfterWrs:
      fail_after_ = static_cast<int64_t>(f.count);
      return Status::ok();
    case Fault::Kind::kDropConnection:
      ++dev_->world().counters_mut().faults;
      enter_error(make_error(Errc::kDisconnected, "sim: connection dropped (injected)"), false, true);
      return Status::ok();
    case Fault::Kind::kDelayCompletions:
      // On the host's clock (base/clock.h): virtual time in a simulation,
      // so the delay is as deterministic as the rest.
      delay_ns_ = f.delay_ns;
      return Status::ok();
    case Fault::Kind::kCorruptNextDesc:
      garbage_next_ = true;
      return Status::ok();
  }
  return make_error(Errc::kInvalidArgument, "sim: unknown fault");
}

// ---------------------------------------------------------------- posting

int SimQp::post_send(const SendWr* wrs, int n, int* err) {
  *err = 0;
  if (state_ == QpState::kInit || state_ == QpState::kConnecting) {
    *err = ENOTCONN;
    return 0;
  }
  int i = 0;
  for (; i < n; ++i) {
    const SendWr& wr = wrs[i];
    // A slot frees when the completion that covers its WR is polled.
    if (sq_posted_ - sq_retired_ >= init_.sq_depth) {
      st_sq_full_.add();
      *err = EAGAIN;
      break;
    }
    if (wr.num_sge > init_.max_send_sge || (wr.num_sge != 0 && wr.sg_list == nullptr) ||
        static_cast<uint8_t>(wr.opcode) > static_cast<uint8_t>(WrOpcode::kLocalInv)) {
      *err = EINVAL;
      break;
    }
    PendingSend p;
    p.wr = wr;
    for (uint32_t k = 0; k < wr.num_sge; ++k) p.sg[k] = wr.sg_list[k];
    p.wr.sg_list = nullptr;
    p.seq = sq_posted_++;
    sq_.push_back(p);
    st_posted_.add();
  }
  if (i > 0) dev_->asleep();
  return i;
}

int SimQp::post_recv(const RecvWr* wrs, int n, int* err) {
  *err = 0;
  if (srq_ != nullptr) {
    // Its receives come from the SRQ: it has no queue of its own, in any state.
    *err = n > 0 ? EINVAL : 0;
    return 0;
  }
  int i = 0;
  for (; i < n; ++i) {
    const RecvWr& wr = wrs[i];
    if (wr.num_sge > init_.max_recv_sge || (wr.num_sge != 0 && wr.sg_list == nullptr)) {
      *err = EINVAL;
      break;
    }
    if (state_ == QpState::kError) {
      recv_cqes_.push_back(CqEntry{Wc{wr.wr_id, 0, 0, qpn_, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0}, false, 0});
      ++dev_->world().counters_mut().flushed;
      continue;
    }
    if (rq_.size() >= init_.rq_depth) {
      *err = EAGAIN;
      break;
    }
    PendingRecv r{wr.wr_id, {}, wr.num_sge};
    for (uint32_t k = 0; k < wr.num_sge; ++k) r.sg[k] = wr.sg_list[k];
    rq_.push_back(r);
  }
  if (i > 0) dev_->asleep();
  return i;
}

// ---------------------------------------------------------------- executing

bool SimQp::has_send_cqe() const {
  if (send_cqes_.empty()) return false;
  const uint64_t due = send_cqes_.front().due_ns;
  return due == 0 || monotonic_ns() >= due;
}

namespace {
bool overlaps(const Sge* sg, uint32_t n, uint64_t addr, uint64_t len) {
  for (uint32_t i = 0; i < n; ++i)
    if (sg[i].length != 0 && sg[i].addr < addr + len && addr < sg[i].addr + sg[i].length) return true;
  return false;
}
}  // namespace

bool SimQp::covers(uint64_t addr, uint64_t len, const char** what, uint64_t* seq) const {
  // A QP in error executes nothing more: what it holds only flushes (a
  // host may take a flush, or any completion after the error, as the end
  // of the WRs before it). Its SRQ's receives are other QPs' to take.
  if (state_ != QpState::kError) {
    for (const PendingSend& p : sq_) {
      if (overlaps(p.sg, p.wr.num_sge, addr, len)) {
        *what = wc_opcode_name(wc_opcode_for(p.wr.opcode));
        *seq = p.seq;
        return true;
      }
      // The peer's memory through the very registration given back: a
      // registration cache's entry (a long-lived MR of exactly these pages)
      // evicted while a READ or WRITE through its rkey is still to execute
      // -- under a call in flight. Other registrations of the same pages
      // (other entries, a fast registration) are not this one's to answer
      // for; with two entries of the same pages (a READ's and a WRITE's) the
      // report does not say which went, and none is checked.
      if ((p.wr.opcode == WrOpcode::kRdmaRead || p.wr.opcode == WrOpcode::kRdmaWrite) && peer_ != nullptr &&
          peer_->peer_ == this && peer_->state_ != QpState::kError) {
        const MrEntry* e = peer_->dev_->entry(rkey_index(p.wr.rkey));
        if (e != nullptr && !e->fast && e->iova == addr && e->length == len && rkey_key(p.wr.rkey) == e->key &&
            peer_->dev_->sole_remote_mr_of_range(*e)) {
          *what = p.wr.opcode == WrOpcode::kRdmaWrite ? "RDMA_WRITE into it, by its peer"
                                                      : "RDMA_READ from it, by its peer";
          *seq = p.seq;
          return true;
        }
      }
    }
    for (const PendingRecv& r : rq_)
      if (overlaps(r.sg, r.num_sge, addr, len)) {
        *what = "a posted receive";
        return true;
      }
  }
  if (srq_ != nullptr)
    for (const PendingRecv& r : srq_->queue())
      if (overlaps(r.sg, r.num_sge, addr, len)) {
        *what = "a receive posted to its SRQ";
        return true;
      }
  return false;
}

bool SimQp::sq_runnable() const {
  if (sq_.empty()) return false;
  // The drain rule of a QP of an SRQ (rdmadev.h): the flush of a WR posted
  // after the error comes after every receive completion of this QP, so a
  // host that polled the flush has them all. Holding the flushes back
  // while receive completions wait to be published gives exactly that.
  if (state_ == QpState::kError) return srq_ == nullptr || recv_cqes_.empty();
  if (state_ != QpState::kRts) return false;
  const WrOpcode op = sq_.front().wr.opcode;
  if ((op == WrOpcode::kSend || op == WrOpcode::kSendWithInv) && peer_ != nullptr && peer_->peer_ == this &&
      peer_->state_ != QpState::kError && !peer_->recv_available()) {
    // Receiver not ready: RC with infinite RNR retry waits -- unless the
    // SEND fails here first (a bad local SGE, a port down), before it
    // reaches the wire, or its finite RNR retries come due.
    const PendingSend& p = sq_.front();
    World& w = dev_->world();
    if (rnr_noted_seq_ != p.seq) {
      rnr_noted_seq_ = p.seq;
      ++w.counters_mut().rnr_waits;
      st_rnr_.add();
      w.trace_event("rnr-wait", qpn_, "seq", p.seq);
      if (rnr_retry_ >= 0) rnr_due_ns_ = w.now_ns() + rnr_timer_ns_;
    }
    if (!local_sges_ok(p)) return true;
    if (dev_->link_is_down() || peer_->dev_->link_is_down()) return true;
    return rnr_retry_ >= 0 && w.now_ns() >= rnr_due_ns_;
  }
  return true;
}

bool SimQp::local_sges_ok(const PendingSend& p) const {
  for (uint32_t k = 0; k < p.wr.num_sge; ++k)
    if (!dev_->local_ok(pd(), p.sg[k], 0)) return false;
  return true;
}

bool SimQp::wire_down() const {
  return dev_->link_is_down() || (peer_ != nullptr && peer_->dev_->link_is_down());
}

void SimQp::complete_send(const PendingSend& p, WcStatus st) {
  Wc wc{p.wr.wr_id, 0, 0, qpn_, st, wc_opcode_for(p.wr.opcode), 0, 0};
  send_cqes_.push_back(CqEntry{wc, true, p.seq, delay_ns_ != 0 ? monotonic_ns() + delay_ns_ : 0});
}

void SimQp::run_sq() {
  World& w = dev_->world();
  PendingSend p = sq_.front();
  sq_.pop_front();
  if (state_ == QpState::kError) {
    complete_send(p, WcStatus::kWrFlushErr);
    st_flushed_.add();
    ++w.counters_mut().flushed;
    w.trace_event("flush", qpn_, wc_opcode_name(wc_opcode_for(p.wr.opcode)), p.seq);
    return;
  }
  if (fail_after_ == 0) {
    // The injected failure strikes before this WR: it and the rest flush.
    fail_after_ = -1;
    sq_.push_front(p);
    ++w.counters_mut().faults;
    enter_error(make_error(Errc::kDisconnected, "sim: transport retry exceeded (injected)"), false, true);
    return;
  }
  const bool wire = p.wr.opcode != WrOpcode::kRegMr && p.wr.opcode != WrOpcode::kLocalInv;
  if (wire && wire_down()) {
    // A port is down: the requester's retries run out.
    ++w.counters_mut().link_failures;
    w.trace_event("exec-fail", qpn_, "link-down", p.seq);
    complete_send(p, WcStatus::kRetryExcErr);
    enter_error(make_error(Errc::kDisconnected, "sim: transport retry exceeded (port down)"), false, true);
    return;
  }
  if ((p.wr.opcode == WrOpcode::kSend || p.wr.opcode == WrOpcode::kSendWithInv) && peer_ != nullptr &&
      peer_->peer_ == this && peer_->state_ != QpState::kError && !peer_->recv_available() && local_sges_ok(p)) {
    // Only a QP with a finite RNR retry count gets here (sq_runnable): one
    // RNR NAK more, or the end of its retries.
    if (rnr_left_ > 0) {
      --rnr_left_;
      ++w.counters_mut().rnr_naks;
      rnr_due_ns_ = w.now_ns() + rnr_timer_ns_;
      w.trace_event("rnr-nak", qpn_, "left", rnr_left_);
      sq_.push_front(p);
      return;
    }
    w.trace_event("exec-fail", qpn_, "rnr-retry-exceeded", p.seq);
    complete_send(p, WcStatus::kRetryExcErr);
    enter_error(make_error(Errc::kDisconnected, "sim: RNR retry exceeded"), false, true);
    return;
  }
  if (rnr_retry_ >= 0) rnr_left_ = static_cast<uint32_t>(rnr_retry_);  // each WR has the whole count
  bool responder_failed = false;
  const char* why = "";
  if (corrupt_next_ && (p.wr.opcode == WrOpcode::kRdmaRead || p.wr.opcode == WrOpcode::kRdmaWrite ||
                        p.wr.opcode == WrOpcode::kSendWithInv)) {
    corrupt_next_ = false;
    ++w.counters_mut().faults;
    if (p.wr.opcode != WrOpcode::kSendWithInv && w.draw_below(2) == 0) {
      // A READ or WRITE past the end of the registration its key names.
      w.trace_event("corrupted-range", qpn_, wc_opcode_name(wc_opcode_for(p.wr.opcode)), p.seq);
      p.wr.remote_addr += uint64_t{1} << 30;
    } else {
      w.trace_event("corrupted-key", qpn_, wc_opcode_name(wc_opcode_for(p.wr.opcode)), p.seq);
      uint32_t& key = p.wr.opcode == WrOpcode::kSendWithInv ? p.wr.invalidate_rkey : p.wr.rkey;
      key = make_rkey(rkey_index(key), static_cast<uint8_t>(rkey_key(key) + 0x80));
    }
  }
  WcStatus st;
  if (garbage_next_ && p.wr.opcode != WrOpcode::kRegMr && p.wr.opcode != WrOpcode::kLocalInv) {
    // Fault::kCorruptNextDesc: what reaches the responder is garbage.
    garbage_next_ = false;
    ++w.counters_mut().faults;
    st = garbage(p, &responder_failed, &why);
  } else {
    st = execute(p, &responder_failed, &why);
  }
  w.trace_event(st == WcStatus::kSuccess ? "exec" : "exec-fail", qpn_, wc_opcode_name(wc_opcode_for(p.wr.opcode)),
                static_cast<uint64_t>(st));
  if (st == WcStatus::kSuccess && lose_ack_ && wire) {
    // It happened at the responder; the requester never hears so.
    lose_ack_ = false;
    ++w.counters_mut().faults;
    ++w.counters_mut().acks_lost;
    w.trace_event("ack-lost", qpn_, wc_opcode_name(wc_opcode_for(p.wr.opcode)), p.seq);
    complete_send(p, WcStatus::kRetryExcErr);
    enter_error(make_error(Errc::kDisconnected, "sim: transport retry exceeded (acknowledgement lost)"), false, true);
    return;
  }
  if (st == WcStatus::kSuccess) {
    st_executed_.add();
    if (fail_after_ > 0) --fail_after_;
    if (p.wr.flags & kWrSignaled) complete_send(p, st);
    return;
  }
  // A failed WR always completes, then the QP is in error.
  complete_send(p, st);
  if (responder_failed && peer_ != nullptr) {
    // The responder refused the peer's request: the peer broke the rules
    // (a bad rkey, a message too large): its connection goes, and says so
    // in the words the host's warning needs, as pmd/shm's responder does
    // ("refused its request N": N the peer's send-queue position).
    SimQp* peer = peer_;
    peer->enter_error(make_error(Errc::kRemoteError, "sim: refused its request %llu: %s",
                                 static_cast<unsigned long long>(p.seq), why),
                      true, false);
    enter_error(make_error(Errc::kRemoteError, "sim: the peer refused a request: %s", why), false, false);
  } else {
    enter_error(make_error(Errc::kRemoteError, "sim: %s", why), false, true);
  }
}

WcStatus SimQp::execute(PendingSend& p, bool* responder_failed, const char** why) {
  World& w = dev_->world();
  const SendWr& wr = p.wr;
  if (wr.opcode == WrOpcode::kRegMr) {
    auto* fmr = wr.reg.mr;
    MrEntry* m = fmr != nullptr ? dev_->entry(rkey_index(fmr->rkey())) : nullptr;
    uint64_t pages = wr.reg.length == 0 ? 0 : ((wr.reg.addr & 4095) + wr.reg.length + 4095) / 4096;
    MrEntry* base = dev_->entry(rkey_index(wr.reg.lkey));
    bool base_ok = base != nullptr && !base->fast && base->pd == pd() && rkey_key(wr.reg.lkey) == base->key &&
                   wr.reg.addr >= base->iova && wr.reg.length <= base->length &&
                   wr.reg.addr - base->iova <= base->length - wr.reg.length;
    if (m == nullptr || !m->fast || m->valid || m->pd != pd() || rkey_index(wr.reg.rkey) != rkey_index(fmr->rkey()) ||
        !base_ok || wr.reg.length == 0 || pages > m->max_depth ||
        (wr.reg.access & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)) != 0 ||
        ((wr.reg.access & kAccessRemoteWrite) && !(wr.reg.access & kAccessLocalWrite))) {
      *why = "REG_MR refused (MR state, key, range or access)";
      return WcStatus::kMwBindErr;
    }
    if (m->remote_ended) {
      // As rxe: the window a peer invalidated must be re-keyed (retire())
      // before it is bound again; there its next invalidation panics.
      ++w.counters_mut().reg_unretired;
      w.trace_event("reg-unretired", qpn_, "", rkey_index(wr.reg.rkey));
      *why = "REG_MR of an MR a remote invalidation ended, not retired since";
      return WcStatus::kMwBindErr;
    }
    m->valid = true;
    m->qpn = qpn_;
    m->key = rkey_key(wr.reg.rkey);
    m->access = wr.reg.access;
    m->iova = wr.reg.addr;
    m->length = wr.reg.length;
    ++w.counters_mut().fast_regs;
    return WcStatus::kSuccess;
  }
  if (wr.opcode == WrOpcode::kLocalInv) {
    MrEntry* m = dev_->entry(rkey_index(wr.invalidate_rkey));
    if (m == nullptr || !m->fast || m->pd != pd() || m->key != rkey_key(wr.invalidate_rkey) ||
        (dev_->qp_bound() && m->valid && m->qpn != qpn_)) {
      *why = "LOCAL_INV of a key that names no fast MR of this PD (or, QP-bound, of this QP)";
      return WcStatus::kMwBindErr;
    }
    if (!m->valid) {
      // Verbs let it pass; an engine must never do it (its registration was
      // already ended once).
      ++w.counters_mut().inv_of_invalid;
      w.trace_event("inv-of-invalid", qpn_, "", rkey_index(wr.invalidate_rkey));
    } else {
      m->valid = false;
      ++w.counters_mut().local_invs;
    }
    return WcStatus::kSuccess;
  }
  // Local SGEs: sources of SEND/WRITE, sinks of READ (which need local write).
  const uint32_t need = wr.opcode == WrOpcode::kRdmaRead ? uint32_t{kAccessLocalWrite} : 0u;
  for (uint32_t k = 0; k < wr.num_sge; ++k)
    if (!dev_->local_ok(pd(), p.sg[k], need)) {
      *why = "a local SGE names no registration of this PD";
      return WcStatus::kLocProtErr;
    }
  const uint64_t len = sge_total(p.sg, wr.num_sge);
  if (wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithInv) {
    if (len > kMaxMessage) {
      *why = "SEND over the device's message size";
      return WcStatus::kLocLenErr;
    }
    return deliver_send(p, responder_failed, why);
  }
  if (peer_ == nullptr || peer_->peer_ != this || peer_->state_ == QpState::kError) {
    *why = "the peer is gone";
    return WcStatus::kRetryExcErr;
  }
  const bool write = wr.opcode == WrOpcode::kRdmaWrite;
  if (!peer_->dev_->remote_ok(peer_->pd(), peer_->qpn_, wr.rkey, wr.remote_addr, len,
                              write ? kAccessRemoteWrite : kAccessRemoteRead)) {
    ++w.counters_mut().remote_access_errors;
    *responder_failed = true;
    *why = write ? "RDMA WRITE: rkey, range or access refused" : "RDMA READ: rkey, range or access refused";
    return WcStatus::kRemAccessErr;
  }
  Sge remote{wr.remote_addr, static_cast<uint32_t>(len), 0};
  if (write) scatter(p.sg, wr.num_sge, &remote, 1, len);
  else scatter(&remote, 1, p.sg, wr.num_sge, len);
  return WcStatus::kSuccess;
}

WcStatus SimQp::garbage(PendingSend& p, bool* responder_failed, const char** why) {
  if (peer_ == nullptr || peer_->peer_ != this || peer_->state_ == QpState::kError) {
    *why = "the peer is gone";
    return WcStatus::kRetryExcErr;
  }
  *responder_failed = true;
  *why = "the responder could not parse the request (injected)";
  const bool send = p.wr.opcode == WrOpcode::kSend || p.wr.opcode == WrOpcode::kSendWithInv;
  if (send && peer_->recv_available()) {
    // A SEND consumed the receive it reached, which completes in error.
    SimQp& rx = *peer_;
    PendingRecv r = rx.recvs().front();
    rx.recvs().pop_front();
    rx.recv_cqes_.push_back(CqEntry{Wc{r.wr_id, 0, 0, rx.qpn_, WcStatus::kLocQpOpErr, WcOpcode::kRecv, 0, 0}, false, 0});
  }
  return WcStatus::kRemInvReqErr;
}

WcStatus SimQp::deliver_send(PendingSend& p, bool* responder_failed, const char** why) {
  World& w = dev_->world();
  if (peer_ == nullptr || peer_->peer_ != this || peer_->state_ == QpState::kError || !peer_->recv_available()) {
    *why = "the peer is gone";
    return WcStatus::kRetryExcErr;
  }
  SimQp& rx = *peer_;
  PendingRecv r = rx.recvs().front();
  rx.recvs().pop_front();
  if (rx.srq_ != nullptr) rx.srq_->consumed();
  const uint64_t len = sge_total(p.sg, p.wr.num_sge);
  auto fail_recv = [&](WcStatus rst, WcStatus sst, const char* what) {
    rx.recv_cqes_.push_back(CqEntry{Wc{r.wr_id, 0, 0, rx.qpn_, rst, WcOpcode::kRecv, 0, 0}, false, 0});
    *responder_failed = true;
    *why = what;
    return sst;
  };
  if (len > sge_total(r.sg, r.num_sge))
    return fail_recv(WcStatus::kLocLenErr, WcStatus::kRemInvReqErr, "message larger than the receive buffer");
  for (uint32_t k = 0; k < r.num_sge; ++k)
    if (!rx.dev_->local_ok(rx.pd(), r.sg[k], kAccessLocalWrite))
      return fail_recv(WcStatus::kLocProtErr, WcStatus::kRemOpErr, "receive buffer has a bad lkey");
  uint8_t flags = 0;
  uint32_t inv = 0;
  if (p.wr.opcode == WrOpcode::kSendWithInv) {
    MrEntry* m = rx.dev_->entry(rkey_index(p.wr.invalidate_rkey));
    if (m == nullptr || !m->fast || m->pd != rx.pd() || !m->valid || m->key != rkey_key(p.wr.invalidate_rkey) ||
        (rx.dev_->qp_bound() && m->qpn != rx.qpn_))
      return fail_recv(WcStatus::kLocProtErr, WcStatus::kRemInvReqErr, "SEND_WITH_INV names no valid fast MR");
    // Invalidated before the receive completes.
    m->valid = false;
    m->remote_ended = true;
    ++w.counters_mut().remote_invs;
    flags = kWcWithInv;
    inv = p.wr.invalidate_rkey;
  }
  scatter(p.sg, p.wr.num_sge, r.sg, r.num_sge, len);
  rx.recv_cqes_.push_back(
      CqEntry{Wc{r.wr_id, static_cast<uint32_t>(len), inv, rx.qpn_, WcStatus::kSuccess, WcOpcode::kRecv, flags, 0},
              false, 0});
  return WcStatus::kSuccess;
}

// ---------------------------------------------------------------- publishing

void SimQp::publish_send() {
  CqEntry e = send_cqes_.front();
  send_cqes_.pop_front();
  dev_->world().trace_event("scqe", qpn_, wc_status_name(e.wc.status), e.seq);
  static_cast<SimCq*>(init_.send_cq)->publish(e);
}

void SimQp::publish_recv() {
  CqEntry e = recv_cqes_.front();
  recv_cqes_.pop_front();
  dev_->world().trace_event("rcqe", qpn_, wc_status_name(e.wc.status), e.wc.byte_len);
  static_cast<SimCq*>(init_.recv_cq)->publish(e);
}

// ---------------------------------------------------------------- errors and CM

void SimQp::flush_recvs() {
  World& w = dev_->world();
  while (!rq_.empty()) {
    recv_cqes_.push_back(CqEntry{Wc{rq_.front().wr_id, 0, 0, qpn_, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0}, false, 0});
    rq_.pop_front();
    st_flushed_.add();
    ++w.counters_mut().flushed;
  }
}

void SimQp::enter_error(Status why, bool peer_fault, bool tell_peer) {
  if (state_ == QpState::kError) return;
  World& w = dev_->world();
  const bool was_live = state_ == QpState::kRts || state_ == QpState::kConnecting;
  state_ = QpState::kError;
  ++w.counters_mut().qp_errors;
  w.trace_event("qp-error", qpn_, peer_fault ? "peer-fault" : "", 0);
  flush_recvs();  // send WRs flush one event at a time (run_sq)
  if (tell_peer && peer_ != nullptr && peer_->peer_ == this && peer_->state_ != QpState::kError) {
    CmAction a{CmAction::Kind::kLoseLink, CmEvent{CmEventType::kDisconnected}, {}};
    a.ev.status = make_error(Errc::kDisconnected, "sim: the peer's QP failed or disconnected");
    peer_->queue_cm(std::move(a));
  }
  if (was_live && !disc_reported_) {
    disc_reported_ = true;
    CmAction a{CmAction::Kind::kDeliver, CmEvent{CmEventType::kDisconnected}, {}};
    a.ev.qp = this;
    a.ev.status = std::move(why);
    a.ev.peer_fault = peer_fault;
    if (dup_disc_) {
      // World::duplicate_next_disconnect: a second, later copy.
      dup_disc_ = false;
      ++w.counters_mut().faults;
      CmAction again = a;
      queue_cm(std::move(a));
      queue_cm(CmAction{CmAction::Kind::kLoseLink, CmEvent{CmEventType::kDisconnected}, {}});
      queue_cm(std::move(again));
    } else {
      queue_cm(std::move(a));
    }
  }
}

void SimQp::run_cm() {
  World& w = dev_->world();
  CmAction a = std::move(cm_.front());
  cm_.pop_front();
  switch (a.kind) {
    case CmAction::Kind::kRequest: {
      if (state_ != QpState::kConnecting) {
        w.trace_event("cm-request-dropped", qpn_, "", 0);
        return;
      }
      SimDevice* l = w.listener(a.addr);
      // A port down on either side: the request is lost (the CM gives up).
      if (l != nullptr && (l->link_is_down() || dev_->link_is_down())) l = nullptr;
      w.trace_event("cm-request", qpn_, l != nullptr ? "listener" : "nobody", 0);
      if (l == nullptr) {
        disc_reported_ = true;  // kUnreachable is this QP's one event
        enter_error(make_error(Errc::kDisconnected, "sim: nobody listens at %s", a.addr.c_str()), false, false);
        CmEvent ev{CmEventType::kUnreachable};
        ev.qp = this;
        ev.status = make_error(Errc::kDisconnected, "sim: nobody listens at %s", a.addr.c_str());
        dev_->report(std::move(ev));
        return;
      }
      l->request_arrived(qpn_, std::move(a.ev.private_data), dev_->host());
      return;
    }
    case CmAction::Kind::kDeliver: {
      const CmEventType t = a.ev.type;
      w.trace_event("cm", qpn_, cm_event_name(t), 0);
      if (t == CmEventType::kEstablished) {
        // Failed while connecting: its kDisconnected is queued already.
        if (state_ != QpState::kConnecting) return;
        state_ = QpState::kRts;
      } else if (t == CmEventType::kRejected) {
        disc_reported_ = true;
        enter_error(make_error(Errc::kRemoteError, "sim: rejected"), false, false);
      }
      dev_->report(std::move(a.ev));
      return;
    }
    case CmAction::Kind::kLoseLink:
      w.trace_event("cm-lose-link", qpn_, "", 0);
      enter_error(std::move(a.ev.status), false, false);
      return;
  }
}

}  // namespace tern::sim
