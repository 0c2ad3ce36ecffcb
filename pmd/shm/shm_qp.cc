// pmd/shm datapath: posting, executing the peer's descriptors, retiring
// completions, and flushing in error. Everything here runs on the thread that
// owns the device; the only cross-process state is the connection area.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "mem/memfd.h"
#include "rdmadev/rdmadev_driver.h"
#include "shm/shm_internal.h"

namespace tern::shm {

namespace {

uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// a < b in free-running ring-index order.
bool idx_before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

constexpr size_t kDescHeader = offsetof(ShmDesc, sge);
// What a producer copies into a slot before its seq word: the fields after it.
constexpr size_t kSeqEnd = offsetof(ShmDesc, op);
constexpr size_t kInlineHeader = kInlineOffset - kSeqEnd;  // op .. raddr
static_assert(kSeqEnd == sizeof(uint32_t));

// The publication word of a slot, shared with the peer.
inline std::atomic_ref<uint32_t> seq_word(ShmDesc* slot) { return std::atomic_ref<uint32_t>(slot->seq); }
inline std::atomic_ref<uint32_t> seq_word(const ShmDesc* slot) {
  return std::atomic_ref<uint32_t>(const_cast<ShmDesc*>(slot)->seq);
}
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free && std::atomic_ref<uint32_t>::required_alignment <= 4);
constexpr uint32_t kExecBurst = 32;
constexpr uint32_t kCaptureQpnBase = 0x100;

}  // namespace

ShmQp::ShmQp(ShmDevice* dev, ShmPd* pd, const QpInit& init, uint32_t qpn)
    : dev_(dev),
      pd_(pd),
      scq_(static_cast<ShmCq*>(init.send_cq)),
      rcq_(static_cast<ShmCq*>(init.recv_cq)),
      init_(init),
      qpn_(qpn),
      pcap_(dev->pcap()) {
  // No send queue array until the first post (grow_sq), and small then:
  // most QPs never have many WRs outstanding, and an accepted QP may never
  // post at all. sq_limit_ 0 sends the first post to grow_sq.
  if (init.srq != nullptr) {
    // rq_depth and max_recv_sge do not apply: receives are the SRQ's.
    srq_ = static_cast<ShmSrq*>(init.srq);
    srq_->attach(this);
    recv_ = &srq_->queue();
  } else {
    rq_.init(init.rq_depth, init.max_recv_sge);
    recv_ = &rq_;
  }
  scq_->attach(this);
  if (rcq_ != scq_) rcq_->attach(this);
}

ShmQp::~ShmQp() {
  if (state_ == QpState::kRts) disconnect_gracefully();
  fence_reads();
  // The SRQ's receives are left as they are, for its other QPs (rdmadev.h).
  if (srq_ != nullptr) srq_->detach(this);
  scq_->detach(this);
  if (rcq_ != scq_) rcq_->detach(this);
  detach_link();
  dev_->unready(this);
  dev_->forget_qp(this);
  for (auto& ps : peer_segs_)
    if (ps.base != nullptr) munmap(const_cast<uint8_t*>(ps.base), ps.length);
  if (area_ != nullptr) munmap(area_, area_len_);
  if (sock_ >= 0) {
    dev_->own_fd(sock_, nullptr);
    close(sock_);  // leaves the epoll set with it
  }
}

StatsView ShmQp::stats() const {
  return {{"post_calls", &st_.post_calls},   {"doorbells", &st_.doorbells},
          {"descs_out", &st_.descs_out},     {"descs_in", &st_.descs_in},
          {"bytes_out", &st_.bytes_out},     {"bytes_in", &st_.bytes_in},
          {"reg_mr", &st_.reg_mr},           {"local_inv", &st_.local_inv},
          {"remote_inv", &st_.remote_inv},   {"rnr_waits", &st_.rnr_waits},
          {"ring_full", &st_.ring_full},     {"cq_full", &st_.cq_full},
          {"flushed", &st_.flushed},         {"protection_errors", &st_.protection_errors},
          {"corrupt_descs", &st_.corrupt_descs}, {"wakes_sent", &st_.wakes_sent},
          {"wakes_received", &st_.wakes_received}, {"sq_grows", &st_.sq_grows},
          {"idle_trims", &st_.idle_trims},   {"visits", &st_.visits}};
}

Status ShmQp::inject_fault(const Fault& f) {
  switch (f.kind) {
    case Fault::Kind::kFailAfterWrs:
      fail_after_ = static_cast<int64_t>(f.count);
      return Status::ok();
    case Fault::Kind::kDelayCompletions:
      delay_ticks_ = f.delay_ns == 0 ? 0 : std::max<uint64_t>(1, ticks_from_ns(f.delay_ns));
      mark_active();
      return Status::ok();
    case Fault::Kind::kDropConnection:
      if (state_ != QpState::kRts) return make_error(Errc::kBadState, "drop: QP %u is not connected", qpn_);
      // Vanish as a killed process would: no goodbye, no state word; the peer
      // learns from the socket closing, like a transport timeout.
      vanished_ = true;
      if (sock_ >= 0) shutdown(sock_, SHUT_RDWR);
      enter_error(make_error(Errc::kDisconnected, "connection dropped (fault injection)"));
      return Status::ok();
    case Fault::Kind::kCorruptNextDesc:
      corrupt_next_ = true;
      return Status::ok();
  }
  return make_error(Errc::kInvalidArgument, "unknown fault");
}

// ---------------------------------------------------------------- posting

WcStatus ShmQp::build_send_entry(const SendWr& wr, SqEntry* e) {
  e->wr_id = wr.wr_id;
  e->opcode = wc_opcode_for(wr.opcode);
  e->signaled = (wr.flags & kWrSignaled) != 0;
  e->issued = false;
  e->remote = false;
  e->inline_msg = false;
  e->byte_len = 0;
  e->num_local = 0;
  bool fast = wr.opcode == WrOpcode::kRegMr || wr.opcode == WrOpcode::kLocalInv || wr.opcode == WrOpcode::kSendWithInv;
  if (fast && !dev_->caps().fast_reg) return WcStatus::kLocQpOpErr;  // fast_reg=0: not this device's operations
  switch (wr.opcode) {
    case WrOpcode::kRegMr: {
      if (wr.reg.mr == nullptr) return WcStatus::kLocQpOpErr;
      e->reg.index = rkey_index(wr.reg.mr->rkey());
      e->reg.rkey = wr.reg.rkey;
      e->reg.lkey = wr.reg.lkey;
      e->reg.access = wr.reg.access;
      e->reg.addr = wr.reg.addr;
      e->reg.length = wr.reg.length;
      return WcStatus::kSuccess;
    }
    case WrOpcode::kLocalInv:
      e->inv_rkey = wr.invalidate_rkey;
      return WcStatus::kSuccess;
    default:
      break;
  }
  e->remote = true;
  ShmDesc& d = e->desc;
  uint64_t total = 0;
  bool is_read = wr.opcode == WrOpcode::kRdmaRead;
  uint8_t* local[kMaxSge];
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& s = wr.sg_list[i];
    const MrEntry* m = pd_->lookup_local(s.lkey, s.addr, s.length, is_read ? static_cast<uint32_t>(kAccessLocalWrite) : 0u);
    if (m == nullptr) return WcStatus::kLocProtErr;
    uint8_t* p = m->host + (s.addr - m->iova);
    local[i] = p;
    if (!is_read) d.sge[i] = ShmSge{m->seg, s.length, static_cast<uint64_t>(p - m->seg_base)};
    total += s.length;
  }
  if (total > kMaxMessage) return WcStatus::kLocLenErr;
  // A READ's SGEs are our sink, and a small Send travels in its descriptor:
  // either way the SGEs stay local (set_local), and the peer needs none.
  const bool send = wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithInv;
  e->inline_msg = send && total <= kMaxInline;
  if (is_read || e->inline_msg)
    for (uint32_t i = 0; i < wr.num_sge; ++i) set_local(e, i, local[i], wr.sg_list[i].length);
  e->byte_len = static_cast<uint32_t>(total);
  d.length = static_cast<uint32_t>(total);
  d.raddr = wr.remote_addr;
  d.read_seg = 0;
  d.read_offset = 0;
  switch (wr.opcode) {
    case WrOpcode::kSend: d.op = kOpSend, d.key = 0; break;
    case WrOpcode::kSendWithInv: d.op = kOpSendInv, d.key = wr.invalidate_rkey; break;
    case WrOpcode::kRdmaWrite: d.op = kOpWrite, d.key = wr.rkey; break;
    default: d.op = kOpRead, d.key = wr.rkey; break;
  }
  d.num_sge = static_cast<uint8_t>(is_read || e->inline_msg ? 0 : wr.num_sge);
  d.flags = e->inline_msg ? kDescInline : 0;
  e->num_local = is_read || e->inline_msg ? wr.num_sge : 0;
  return WcStatus::kSuccess;
}

bool ShmQp::post_inline_send(const SendWr& wr) {
  // The datapath's commonest WR -- one small Send, nothing queued ahead of
  // it, room in the ring -- straight into its slot: what build_send_entry
  // and issue() do for it, without the general cases' copies and branches.
  // Anything else (and anything that fails a check) takes the general path,
  // which says why.
  const Sge& s = wr.sg_list[0];
  if (sq_next_ != sq_tail_ || out_prod_ - out_done_ >= slots_ || sq_tail_ - sq_head_ >= sq_limit_) return false;
  const MrEntry* m = pd_->lookup_local(s.lkey, s.addr, s.length, 0);
  if (m == nullptr) return false;
  SqEntry& e = sq_[sq_tail_ & sq_mask_];
  e.wr_id = wr.wr_id;
  e.opcode = WcOpcode::kSend;
  e.status = WcStatus::kSuccess;
  e.signaled = (wr.flags & kWrSignaled) != 0;
  e.remote = true;
  e.inline_msg = true;
  e.issued = true;
  e.byte_len = s.length;
  e.num_local = 0;
  e.ring_index = out_prod_;
  ShmDesc* slot = &out_slots_[out_prod_ & slot_mask_];
  slot->op = kOpSend;
  slot->num_sge = 0;
  slot->flags = static_cast<uint16_t>(kDescInline |
                                      (e.signaled || out_prod_ + 1 - out_done_ >= slots_ / 2 ? kDescAckWanted : 0));
  slot->key = 0;
  slot->length = s.length;
  slot->raddr = 0;
  std::memcpy(reinterpret_cast<uint8_t*>(slot) + kInlineOffset, m->host + (s.addr - m->iova), s.length);
  seq_word(slot).store(slot_seq(out_prod_, slot_shift_), std::memory_order_release);
  ++out_prod_;
  ++sq_tail_;
  ++sq_next_;
  st_.descs_out.add();
  st_.bytes_out.add(s.length);
  return true;
}

int ShmQp::post_send(const SendWr* wrs, int n, int* err) {
  st_.post_calls.add();
  *err = 0;
  if (state_ == QpState::kInit || state_ == QpState::kConnecting) {
    *err = ENOTCONN;
    return 0;
  }
  // No fault injection, capture or held-back completions: those want the
  // general path's bookkeeping for every WR.
  const bool plain =
      state_ == QpState::kRts && fail_after_ < 0 && !corrupt_next_ && pcap_ == nullptr && delay_ticks_ == 0;
  int fast = 0;
  int i = 0;
  for (; i < n; ++i) {
    const SendWr& wr = wrs[i];
    if (plain && wr.opcode == WrOpcode::kSend && wr.num_sge == 1 && wr.sg_list != nullptr &&
        wr.sg_list[0].length <= kMaxInline && init_.max_send_sge >= 1 && post_inline_send(wr)) {
      ++fast;
      continue;
    }
    if (TERN_UNLIKELY(sq_tail_ - sq_head_ >= sq_limit_)) {
      if (sq_tail_ - sq_head_ >= init_.sq_depth) {
        *err = EAGAIN;
        break;
      }
      grow_sq();
    }
    if (wr.num_sge > init_.max_send_sge || (wr.num_sge != 0 && wr.sg_list == nullptr) ||
        static_cast<uint8_t>(wr.opcode) > static_cast<uint8_t>(WrOpcode::kLocalInv)) {
      *err = EINVAL;
      break;
    }
    SqEntry& e = sq_[sq_tail_ & sq_mask_];
    e.status = build_send_entry(wr, &e);
    ++sq_tail_;
  }
  bool published = fast > 0;
  if (state_ == QpState::kRts) published |= issue();
  if (published) {
    // A doorbell is a post that published (what a NIC's would be), and a
    // WAKE may be due.
    st_.doorbells.add();
    ring_due_ = true;
    // Our bit in the link now, not at our next poll: a host descheduled
    // between this post and that poll would leave the peer without news for
    // as long (on a loaded machine, tens of ms). One locked RMW per post
    // call that published, not per WR.
    notify_due_ = true;
    notify_peer();
  }
  // The WAKE check for what this published (ring_peer) waits for our next
  // progress(), which every host makes before it sleeps (rdmadev.h's wait
  // protocol polls after posting): its fence waits for the slot's line to
  // come back from the peer's core, which per post -- 32 calls posted in a
  // burst -- serialized what the store buffer would otherwise overlap. One
  // check per poll pass covers the whole burst.
  // Local WRs and failures complete at our next poll, which a host asleep
  // on an armed CQ would never make: it is woken for it.
  if (i > 0 && scq_->armed()) dev_->self_wake();
  // What this posted is issued, notified and completed by our CQs' next
  // poll, which visits only QPs with work (shm_link.cc); a full queue is
  // looked at again too, for what the peer executed without telling us.
  if (i > 0 || *err == EAGAIN) mark_active();
  return i;
}

void ShmQp::grow_sq() {
  // Rare (a QP's first bursts, or the first after an idle trim) and cheap
  // next to what filled it: the outstanding entries move to their places
  // under the new mask.
  const uint32_t cap = sq_cap_ == 0 ? std::min(kSqInitial, next_pow2(init_.sq_depth)) : sq_cap_ * 2;
  std::unique_ptr<SqEntry[]> n(new SqEntry[cap]);
  for (uint32_t i = sq_head_; i != sq_tail_; ++i) n[i & (cap - 1)] = sq_[i & sq_mask_];
  sq_ = std::move(n);
  sq_cap_ = cap;
  sq_mask_ = cap - 1;
  sq_limit_ = std::min(cap, init_.sq_depth);
  st_.sq_grows.add();
}

int ShmQp::post_recv(const RecvWr* wrs, int n, int* err) {
  if (srq_ != nullptr) {
    *err = EINVAL;  // rdmadev.h: a QP on an SRQ has no receive queue of its own
    return 0;
  }
  int i = rq_.post(pd_, wrs, n, err);
  // A SEND waiting for a receive (or a flush, in error) completes now.
  if (i > 0 && rcq_->armed()) dev_->self_wake();
  if (i > 0) mark_active();
  return i;
}

// ---------------------------------------------------------------- issuing

bool ShmQp::issue_local(SqEntry* e) {
  if (e->opcode == WcOpcode::kLocalInv) {
    MrEntry* m = pd_->entry(rkey_index(e->inv_rkey));
    // A registration made through another QP is not this QP's to invalidate
    // (type-2 window semantics; dev_->config().qp_bound).
    if (m == nullptr || !m->in_use || !m->fast || m->key != rkey_key(e->inv_rkey) ||
        (m->valid && dev_->config().qp_bound && m->qpn != qpn_)) {
      e->status = WcStatus::kMwBindErr;
      return false;
    }
    m->valid = false;
    st_.local_inv.add();
    return true;
  }
  // kRegMr: the MR must be free (invalidated), the rkey must name it, the range
  // must lie in a long-lived registration and fit the MR's depth.
  MrEntry* m = pd_->entry(e->reg.index);
  const auto& r = e->reg;
  const MrEntry* base = pd_->lookup_local(r.lkey, r.addr, r.length, 0);
  uint64_t pages = r.length == 0 ? 0 : ((r.addr & 4095) + r.length + 4095) / 4096;
  if (m == nullptr || !m->in_use || !m->fast || m->valid || rkey_index(r.rkey) != e->reg.index ||
      base == nullptr || base->fast || r.length == 0 || pages > m->max_depth ||
      (r.access & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)) != 0 ||
      ((r.access & kAccessRemoteWrite) && !(r.access & kAccessLocalWrite))) {
    e->status = WcStatus::kMwBindErr;
    return false;
  }
  m->valid = true;
  m->qpn = qpn_;
  m->key = rkey_key(r.rkey);
  m->access = r.access;
  m->iova = r.addr;
  m->length = r.length;
  m->host = base->host + (r.addr - base->iova);
  m->seg = base->seg;
  m->seg_base = base->seg_base;
  st_.reg_mr.add();
  return true;
}

bool ShmQp::export_segment(uint32_t seg) {
  if (seg < exported_.size() && exported_[seg]) return true;
  const mem::Segment& s = pd_->segment(seg);
  ShmMsg m = make_msg(kMsgSegment);
  m.qp_num = qpn_;
  m.seg_index = seg;
  m.seg_length = s.length;
  // Sent before the descriptor that names it is published: the peer finds the
  // message queued on the socket when it meets the unknown segment.
  if (send_msg(sock_, m, s.fd) != 0) return false;
  if (exported_.size() <= seg) exported_.resize(seg + 1, 0);
  exported_[seg] = 1;
  return true;
}

bool ShmQp::issue() {
  bool published = false;
  while (sq_next_ != sq_tail_) {
    SqEntry& e = sq_[sq_next_ & sq_mask_];
    if (e.status != WcStatus::kSuccess) break;  // an error waits for its turn to complete
    if (fail_after_ == 0) {
      e.status = WcStatus::kRetryExcErr;  // injected: as if the transport died here
      break;
    }
    if (e.remote) {
      if (out_prod_ - out_done_ >= slots_) {
        st_.ring_full.add();
        break;
      }
      bool ok = true;
      for (uint32_t k = 0; k < e.desc.num_sge && ok; ++k) ok = export_segment(e.desc.sge[k].seg);
      if (!ok) {
        e.status = WcStatus::kRetryExcErr;
        break;
      }
      e.ring_index = out_prod_;
      // A host asleep on this WR's completion, or on room in a filling ring
      // (the newest descriptor is always flagged when the ring is full),
      // needs the consumer to wake it; see ShmDescFlags.
      e.desc.flags = static_cast<uint16_t>((e.desc.flags & kDescInline) |
                                           (e.signaled || out_prod_ + 1 - out_done_ >= slots_ / 2 ? kDescAckWanted : 0));
      ShmDesc* slot = &out_slots_[out_prod_ & slot_mask_];
      uint8_t* body = reinterpret_cast<uint8_t*>(slot) + kSeqEnd;
      const uint8_t* mine = reinterpret_cast<const uint8_t*>(&e.desc) + kSeqEnd;
      if (e.inline_msg) {
        // The message goes in the slot now: this copy is the one the peer
        // reads (one cache line for up to 40 bytes), and our buffer is ours
        // again as far as the peer is concerned.
        std::memcpy(body, mine, kInlineHeader);
        uint8_t* dst = reinterpret_cast<uint8_t*>(slot) + kInlineOffset;
        for (uint32_t k = 0; k < e.num_local; ++k) {
          const LocalSpan src = local_sge(e, k);
          std::memcpy(dst, src.p, src.len);
          dst += src.len;
        }
      } else {
        std::memcpy(body, mine, kDescHeader - kSeqEnd + e.desc.num_sge * sizeof(ShmSge));
      }
      if (TERN_UNLIKELY(corrupt_next_)) {
        corrupt_next_ = false;
        slot->op = 0xee;
        slot->num_sge = 0xff;
      }
      // Published: everything above before the seq word (release).
      seq_word(slot).store(slot_seq(out_prod_, slot_shift_), std::memory_order_release);
      ++out_prod_;
      published = true;
      if (TERN_UNLIKELY(pcap_ != nullptr)) capture_issued(e);
      st_.descs_out.add();
      st_.bytes_out.add(e.byte_len);
    } else if (!issue_local(&e)) {
      break;
    } else {
      local_end_ = sq_next_ + 1;  // complete_sends: see there
    }
    e.issued = true;
    if (delay_ticks_ != 0) e.issue_tick = now_ticks();
    if (fail_after_ > 0) --fail_after_;
    ++sq_next_;
  }
  return published;
}

// ---------------------------------------------------------------- completing

bool ShmQp::push_wc(ShmCq* cq, const Wc& wc) {
  if (cq->full()) {
    st_.cq_full.add();
    revisit_ = true;  // our own CQ: nobody else will tell us it has room
    return false;
  }
  cq->push(wc);
  return true;
}

bool ShmQp::copy_read_response(SqEntry& e) {
  const ShmDesc& slot = out_slots_[e.ring_index & slot_mask_];
  // Peer-written: validate before use.
  uint32_t seg = slot.read_seg;
  uint64_t off = slot.read_offset;
  if (e.byte_len == 0) return true;
  // The owner granted the range when it executed the READ; once its QP
  // has left RTS it may have fenced and reused that memory (reads_fenced).
  // Checked before the copy, and after it: a copy that overlapped the
  // fence may hold newer bytes, and fails as well.
  if (peer_reads_fenced()) return false;
  const PeerSeg* ps = peer_segment(seg, off, e.byte_len);
  if (ps == nullptr) return false;
  const uint8_t* src = ps->base + off;
  for (uint32_t k = 0; k < e.num_local; ++k) {
    const LocalSpan sink = local_sge(e, k);
    std::memcpy(sink.p, src, sink.len);
    src += sink.len;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peer_reads_fenced()) return false;
  if (TERN_UNLIKELY(pcap_ != nullptr)) {
    RocePcap::Piece pieces[kMaxSge];
    for (uint32_t k = 0; k < e.num_local; ++k) pieces[k] = {local_sge(e, k).p, local_sge(e, k).len};
    pcap_->read_response(cap_flow(), RocePcap::Dir::kOut, e.cap_psn, {pieces, e.num_local});
  }
  return true;
}

void ShmQp::complete_sends() {
  if (sq_head_ == sq_tail_) return;  // nothing outstanding: the peer's index is not worth a load
  uint32_t cons = final_cons_;
  if (state_ != QpState::kError && out_ != nullptr) {
    cons = out_->cons.load(std::memory_order_acquire);
    if (static_cast<uint32_t>(cons - out_done_) > static_cast<uint32_t>(out_prod_ - out_done_)) {
      st_.corrupt_descs.add();
      protocol_error(make_error(Errc::kRemoteError, "its consumer index %u is outside [%u, %u]", cons, out_done_,
                                out_prod_));
      cons = final_cons_;
    }
  }
  uint64_t now = delay_ticks_ != 0 ? now_ticks() : 0;
  while (sq_head_ != sq_tail_) {
    SqEntry& e = sq_[sq_head_ & sq_mask_];
    WcStatus st;
    bool in_error = state_ == QpState::kError;
    if (!in_error) {
      if (!e.issued) {
        if (e.status == WcStatus::kSuccess) break;  // not issued yet
        st = e.status;                              // a local failure, reached in order
      } else if (e.remote && !idx_before(e.ring_index, cons)) {
        // The peer has not executed it yet. Unless it was flagged (or a
        // later one was), the peer will not tell us when it has: a local WR
        // or a failure queued behind it, which completes in order, has us
        // come back on our next poll instead.
        if (static_cast<uint32_t>(local_end_ - sq_head_ - 1) < static_cast<uint32_t>(sq_tail_ - sq_head_) ||
            (sq_next_ != sq_tail_ && sq_[sq_next_ & sq_mask_].status != WcStatus::kSuccess))
          revisit_ = true;
        break;
      } else if (delay_ticks_ != 0 && now - e.issue_tick < delay_ticks_) {
        break;
      } else {
        st = WcStatus::kSuccess;
      }
    } else if (e.issued && (!e.remote || idx_before(e.ring_index, final_cons_))) {
      st = WcStatus::kSuccess;  // it did complete before the error
    } else if (e.issued && e.remote && peer_err_valid_ && e.ring_index == peer_err_index_) {
      st = peer_err_status_;
    } else {
      st = WcStatus::kWrFlushErr;
    }
    if (st == WcStatus::kSuccess && e.opcode == WcOpcode::kRdmaRead && !copy_read_response(e))
      st = in_error ? WcStatus::kWrFlushErr : WcStatus::kRemOpErr;
    bool need_wc = st != WcStatus::kSuccess || e.signaled;
    if (need_wc && !push_wc(scq_, Wc{e.wr_id, e.byte_len, 0, qpn_, st, e.opcode, 0, 0})) break;
    if (e.issued && e.remote) out_done_ = e.ring_index + 1;
    if (st == WcStatus::kWrFlushErr) st_.flushed.add();
    ++sq_head_;
    if (st != WcStatus::kSuccess && !in_error)
      enter_error(make_error(Errc::kRemoteError, "send WR %llu failed: %s",
                             static_cast<unsigned long long>(e.wr_id), wc_status_name(st)));
  }
}

void ShmQp::flush_recvs() {
  // Our own queue only: an SRQ's receives belong to its other QPs as well
  // and stay posted (rq_ is empty on a QP of an SRQ).
  while (!rq_.empty()) {
    ShmRecvQueue::Entry& r = rq_.front();
    if (!push_wc(rcq_, Wc{r.wr_id, 0, 0, qpn_, WcStatus::kWrFlushErr, WcOpcode::kRecv, 0, 0})) return;
    st_.flushed.add();
    rq_.pop();
  }
}

// ---------------------------------------------------------------- executing the peer's requests

const ShmQp::PeerSeg* ShmQp::peer_segment(uint32_t seg, uint64_t off, uint64_t len) {
  if (seg >= kMaxSegments) return nullptr;
  if (seg >= peer_segs_.size() || peer_segs_[seg].base == nullptr) {
    drain_ctl();  // the segment's memfd is queued on the socket ahead of its first use
    if (seg >= peer_segs_.size() || peer_segs_[seg].base == nullptr) return nullptr;
  }
  const PeerSeg& ps = peer_segs_[seg];
  if (len > ps.length || off > ps.length - len) return nullptr;
  return &ps;
}

void ShmQp::reject_inbound(uint32_t index, WcStatus status, const char* why) {
  // Acknowledge what we did execute, then name the descriptor we refuse. The
  // record is written before the state word (release), so the peer that sees
  // kEpError reads a complete record.
  in_->cons.store(in_cons_, std::memory_order_release);
  ring_due_ = true;
  notify_due_ = true;
  if (!vanished_) {
    my_ep_->err_index = index;
    my_ep_->err_status = static_cast<uint32_t>(status);
    my_ep_->err_valid = 1;
    write_own_state(kEpError);
  }
  protocol_error(make_error(Errc::kRemoteError, "refused its request %u: %s", index, why));
}

// A SEND or SEND_WITH_INV of the peer's: the message, in n pieces (its
// SGEs in the peer's segments, or the one inline piece in its slot), lands
// in our next receive.
ShmQp::Exec ShmQp::execute_send(const ShmDesc& d, const uint8_t* const* src, const uint32_t* len, uint32_t n,
                                uint32_t index, bool from_peer_memory) {
  ShmRecvQueue& rq = *recv_;
  if (rq.empty()) {
    st_.rnr_waits.add();  // receiver not ready: RC with infinite RNR retry waits
    if (srq_ != nullptr) srq_->note_starved();
    return Exec::kWait;
  }
  if (rcq_->full()) {
    st_.cq_full.add();
    revisit_ = true;
    return Exec::kWait;
  }
  ShmRecvQueue::Entry& r = rq.front();
  if (TERN_UNLIKELY(r.status != WcStatus::kSuccess || d.length > r.capacity)) {
    if (r.status != WcStatus::kSuccess) {
      // Our own bad receive (an lkey refused at post time): the QP whose
      // message reaches it fails, as on verbs, SRQ or not.
      rcq_->push(Wc{r.wr_id, 0, 0, qpn_, r.status, WcOpcode::kRecv, 0, 0});
      rq.pop();
      if (srq_ != nullptr) srq_->st().consumed.add();
      reject_inbound(index, WcStatus::kRemOpErr, "receive buffer has a bad lkey");
      return Exec::kFailed;
    }
    // The peer's message is too large. With our own queue the receive
    // completes in error, as verbs does. A receive of an SRQ is left
    // where it is, unwritten, for the next message on any of its QPs
    // (rdmadev.h allows either): a peer that breaks the rules on its own
    // connection must not use up a receive that another peer's message
    // would have landed in. (The same below for a bad SEND_WITH_INV.)
    if (srq_ == nullptr) {
      rcq_->push(Wc{r.wr_id, 0, 0, qpn_, WcStatus::kLocLenErr, WcOpcode::kRecv, 0, 0});
      rq.pop();
    } else {
      srq_->st().returned.add();
    }
    reject_inbound(index, WcStatus::kRemInvReqErr, "message larger than the receive buffer");
    return Exec::kFailed;
  }
  uint8_t flags = 0;
  uint32_t inv = 0;
  if (d.op == kOpSendInv) {
    MrEntry* m = pd_->entry(rkey_index(d.key));
    if (m == nullptr || !m->in_use || !m->fast || !m->valid || m->key != rkey_key(d.key) ||
        (dev_->config().qp_bound && dev_->config().inv_qp_check && m->qpn != qpn_)) {
      if (srq_ == nullptr) {
        rcq_->push(Wc{r.wr_id, 0, 0, qpn_, WcStatus::kLocProtErr, WcOpcode::kRecv, 0, 0});
        rq.pop();
      } else {
        srq_->st().returned.add();
      }
      st_.protection_errors.add();
      reject_inbound(index, WcStatus::kRemInvReqErr, "SEND_WITH_INV names no valid fast MR");
      return Exec::kFailed;
    }
    // Invalidated before the receive completes: the receiver may reuse the
    // memory as soon as it sees the completion.
    m->valid = false;
    flags = kWcWithInv;
    inv = d.key;
    st_.remote_inv.add();
  }
  // Scatter the peer's gather list into our receive buffer.
  uint32_t sk = 0;
  uint64_t soff = 0;
  for (uint32_t k = 0; k < n; ++k) {
    const uint8_t* p = src[k];
    uint64_t left = len[k];
    while (left > 0) {
      while (soff == r.sge[sk].len) ++sk, soff = 0;
      uint64_t n = std::min<uint64_t>(left, r.sge[sk].len - soff);
      std::memcpy(r.sge[sk].p + soff, p, n);
      p += n, left -= n, soff += n;
    }
  }
  // The peer's QP left RTS while we copied: it may have flushed this
  // Send and reused its buffer, so the copy may hold newer bytes. The
  // receive stays posted, uncompleted (reads_fenced, shm_layout.h). An
  // inline message was copied out of its slot, which the peer does not
  // reuse before our consumer index passes it: nothing to check.
  if (from_peer_memory) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (peer_reads_fenced()) return Exec::kWait;
  }
  rcq_->push(Wc{r.wr_id, d.length, inv, qpn_, WcStatus::kSuccess, WcOpcode::kRecv, flags, 0});
  rq.pop();
  if (srq_ != nullptr) srq_->st().consumed.add();
  if (TERN_UNLIKELY(pcap_ != nullptr)) capture_executed(d, src, len, n, nullptr);
  return Exec::kDone;
}

ShmQp::Exec ShmQp::execute_one(const ShmDesc& d, const ShmDesc* slot, uint32_t index) {
  const bool inline_msg = (d.flags & kDescInline) != 0;
  if (d.op == 0 || d.op > kOpMax || d.num_sge > kMaxSge || d.length > kMaxMessage ||
      (inline_msg && (d.num_sge != 0 || d.length > kMaxInline || (d.op != kOpSend && d.op != kOpSendInv)))) {
    st_.corrupt_descs.add();
    reject_inbound(index, WcStatus::kRemInvReqErr, "malformed descriptor");
    return Exec::kFailed;
  }
  if (inline_msg) {
    const uint8_t* msg = reinterpret_cast<const uint8_t*>(slot) + kInlineOffset;
    Exec r = execute_send(d, &msg, &d.length, 1, index, false);
    if (r == Exec::kDone) {
      st_.descs_in.add();
      st_.bytes_in.add(d.length);
    }
    return r;
  }
  uint64_t sum = 0;
  const uint8_t* src[kMaxSge];
  uint32_t lens[kMaxSge];
  // Looking up a segment not mapped yet reads the queued control messages
  // (drain_ctl), but a mapping, once made, stays until the QP is destroyed
  // (a second "segment" message for its index is a protocol error), so the
  // pointers taken for earlier SGEs stay good.
  for (uint32_t k = 0; k < d.num_sge; ++k) {
    const ShmSge& s = d.sge[k];
    const PeerSeg* ps = peer_segment(s.seg, s.offset, s.length);
    if (ps == nullptr) {
      st_.corrupt_descs.add();
      reject_inbound(index, WcStatus::kRemInvReqErr, "descriptor names memory the peer never exported");
      return Exec::kFailed;
    }
    src[k] = ps->base + s.offset;
    lens[k] = s.length;
    sum += s.length;
  }
  if ((d.op != kOpRead && sum != d.length) || (d.op == kOpRead && d.num_sge != 0)) {
    st_.corrupt_descs.add();
    reject_inbound(index, WcStatus::kRemInvReqErr, "descriptor length does not match its SGEs");
    return Exec::kFailed;
  }

  switch (d.op) {
    case kOpSend:
    case kOpSendInv: {
      Exec r = execute_send(d, src, lens, d.num_sge, index, true);
      if (r != Exec::kDone) return r;
      break;
    }
    case kOpWrite: {
      if (d.length == 0) break;
      const MrEntry* m = pd_->lookup_remote(d.key, d.raddr, d.length, kAccessRemoteWrite, qpn_);
      if (m == nullptr) {
        st_.protection_errors.add();
        reject_inbound(index, WcStatus::kRemAccessErr, "RDMA WRITE: rkey, range or access refused");
        return Exec::kFailed;
      }
      uint8_t* dst = m->host + (d.raddr - m->iova);
      for (uint32_t k = 0; k < d.num_sge; ++k) {
        std::memcpy(dst, src[k], d.sge[k].length);
        dst += d.sge[k].length;
      }
      // As for a Send: a WRITE the peer may have flushed is not executed
      // (what it wrote is in memory its call offered, and that call is not
      // answered on this connection any more).
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (peer_reads_fenced()) return Exec::kWait;
      if (TERN_UNLIKELY(pcap_ != nullptr)) capture_executed(d, src, lens, d.num_sge, nullptr);
      break;
    }
    case kOpRead: {
      if (d.length == 0) break;
      const MrEntry* m = pd_->lookup_remote(d.key, d.raddr, d.length, kAccessRemoteRead, qpn_);
      if (m == nullptr) {
        st_.protection_errors.add();
        reject_inbound(index, WcStatus::kRemAccessErr, "RDMA READ: rkey, range or access refused");
        return Exec::kFailed;
      }
      if (!export_segment(m->seg)) {
        reject_inbound(index, WcStatus::kRemOpErr, "could not export memory for RDMA READ");
        return Exec::kFailed;
      }
      // Grant the range; the initiator copies it when it retires the READ.
      ShmDesc& slot = in_slots_[index & slot_mask_];
      slot.read_seg = m->seg;
      slot.read_offset = static_cast<uint64_t>(m->host + (d.raddr - m->iova) - m->seg_base);
      if (TERN_UNLIKELY(pcap_ != nullptr)) capture_executed(d, src, lens, d.num_sge, m);
      break;
    }
  }
  st_.descs_in.add();
  st_.bytes_in.add(d.length);
  return Exec::kDone;
}

void ShmQp::execute_inbound() {
  // The idle pass: one load of a line that stays in our cache until the
  // peer writes it.
  if (seq_word(&in_slots_[in_cons_ & slot_mask_]).load(std::memory_order_acquire) != slot_seq(in_cons_, slot_shift_))
    return;
  const uint32_t start = in_cons_;
  bool ack_wanted = false;
  uint32_t budget = kExecBurst;
  for (; budget > 0; --budget) {
    // Once the peer's QP has left RTS it flushes what we have not
    // executed and may reuse the memory those descriptors name: execute
    // none of them (reads_fenced, shm_layout.h).
    if (peer_reads_fenced()) break;
    const ShmDesc* slot = &in_slots_[in_cons_ & slot_mask_];
    // Not published yet (or never will be: a peer that writes another
    // value only stalls its own connection).
    if (seq_word(slot).load(std::memory_order_acquire) != slot_seq(in_cons_, slot_shift_)) break;
    // Copy the descriptor out of shared memory before checking it, so the
    // peer cannot change it between the check and the use.
    ShmDesc d;
    std::memcpy(&d, slot, kDescHeader);
    if (d.num_sge <= kMaxSge && (d.flags & kDescInline) == 0) std::memcpy(d.sge, slot->sge, d.num_sge * sizeof(ShmSge));
    Exec r = execute_one(d, slot, in_cons_);
    if (r != Exec::kDone) {
      if (r == Exec::kFailed) return;
      break;
    }
    ack_wanted |= (d.flags & kDescAckWanted) != 0;
    ++in_cons_;
  }
  // A full burst executed and more waiting: the next poll comes back for
  // it, and a host about to sleep must poll again first, for the peer will
  // not ring or set our bit for descriptors it published already.
  if (budget == 0 &&
      seq_word(&in_slots_[in_cons_ & slot_mask_]).load(std::memory_order_acquire) == slot_seq(in_cons_, slot_shift_)) {
    revisit_ = true;
    if (dev_->armed()) dev_->self_wake();
  }
  if (in_cons_ != start) {
    in_->cons.store(in_cons_, std::memory_order_release);
    // The peer retires its WRs when it sees cons move, but waits for that
    // only where it flagged a descriptor (a signaled WR, a filling ring):
    // its bit and a WAKE for those alone. The rest it reads at its next
    // visit, which its own next post or our next message brings; what it
    // queued behind them locally it comes back for (complete_sends).
    if (ack_wanted) ring_due_ = notify_due_ = true;
  }
}

// ---------------------------------------------------------------- capture (pcap=)

RocePcap::Flow& ShmQp::cap_flow() {
  // The peer's QP number arrives with the handshake, after the QP exists.
  // shm numbers QPs from 1, and QPs 0 and 1 are InfiniBand's management QPs
  // (Wireshark decodes their payload as MADs): the capture shows 0x100 + n.
  cap_.local_qpn = kCaptureQpnBase + qpn_;
  cap_.remote_qpn = kCaptureQpnBase + peer_qpn_;
  cap_.local_is_client = is_client_;
  return cap_;
}

void ShmQp::capture_issued(SqEntry& e) {
  const ShmDesc& d = e.desc;
  RocePcap::Piece pieces[kMaxSge];
  uint32_t n = d.num_sge;
  if (e.inline_msg) {
    n = e.num_local;
    for (uint32_t k = 0; k < n; ++k) pieces[k] = {local_sge(e, k).p, local_sge(e, k).len};
  } else {
    for (uint32_t k = 0; k < n; ++k) {
      const mem::Segment& seg = pd_->segment(d.sge[k].seg);
      pieces[k] = {static_cast<const uint8_t*>(seg.base) + d.sge[k].offset, d.sge[k].length};
    }
  }
  std::span<const RocePcap::Piece> payload(pieces, n);
  switch (d.op) {
    case kOpSend: pcap_->send(cap_flow(), RocePcap::Dir::kOut, payload); break;
    case kOpSendInv: pcap_->send(cap_flow(), RocePcap::Dir::kOut, payload, &d.key); break;
    case kOpWrite: pcap_->write(cap_flow(), RocePcap::Dir::kOut, d.raddr, d.key, payload); break;
    case kOpRead: e.cap_psn = pcap_->read_request(cap_flow(), RocePcap::Dir::kOut, d.raddr, d.key, d.length); break;
  }
}

void ShmQp::capture_executed(const ShmDesc& d, const uint8_t* const* src, const uint32_t* len, uint32_t n,
                             const MrEntry* read_mr) {
  RocePcap::Piece pieces[kMaxSge];
  for (uint32_t k = 0; k < n; ++k) pieces[k] = {src[k], len[k]};
  std::span<const RocePcap::Piece> payload(pieces, n);
  switch (d.op) {
    case kOpSend: pcap_->send(cap_flow(), RocePcap::Dir::kIn, payload); break;
    case kOpSendInv: pcap_->send(cap_flow(), RocePcap::Dir::kIn, payload, &d.key); break;
    case kOpWrite: pcap_->write(cap_flow(), RocePcap::Dir::kIn, d.raddr, d.key, payload); break;
    case kOpRead: {
      uint32_t psn = pcap_->read_request(cap_flow(), RocePcap::Dir::kIn, d.raddr, d.key, d.length);
      RocePcap::Piece data{read_mr->host + (d.raddr - read_mr->iova), d.length};
      pcap_->read_response(cap_flow(), RocePcap::Dir::kIn, psn, {&data, 1});
      break;
    }
  }
}

// ---------------------------------------------------------------- progress and errors

void ShmQp::progress() {
  st_.visits.add();
  revisit_ = false;
  ++visit_count_;
  if (state_ == QpState::kRts) {
    uint32_t ps = peer_ep_->state.load(std::memory_order_acquire);
    if (TERN_UNLIKELY(ps != kEpActive)) {
      if (ps == kEpError && peer_ep_->err_valid != 0) {
        uint32_t idx = peer_ep_->err_index;
        uint32_t code = peer_ep_->err_status;
        // Peer-written: the index must name one of our published descriptors.
        if (!idx_before(idx, out_done_) && idx_before(idx, out_prod_) &&
            code <= static_cast<uint32_t>(WcStatus::kGeneralErr) && code != 0) {
          peer_err_valid_ = true;
          peer_err_index_ = idx;
          peer_err_status_ = static_cast<WcStatus>(code);
        }
      }
      if (ps == kEpClosed)
        enter_error(make_error(Errc::kDisconnected, "peer disconnected"));
      else if (ps == kEpError)
        enter_error(make_error(Errc::kRemoteError, "peer's QP went to error"));
      else
        protocol_error(make_error(Errc::kRemoteError, "it wrote endpoint state %u", ps));
    }
  }
  if (state_ == QpState::kRts) {
    execute_inbound();
    if (state_ == QpState::kRts && issue()) {
      st_.doorbells.add();
      ring_due_ = true;
      notify_due_ = true;
    }
  }
  complete_sends();
  // What waited for ring slots the retirements just freed: now, not when
  // some later news brings us back.
  if (state_ == QpState::kRts && sq_next_ != sq_tail_ && issue()) {
    st_.doorbells.add();
    ring_due_ = true;
    notify_due_ = true;
  }
  if (state_ == QpState::kError) flush_recvs();
  if (ring_due_) ring_peer();  // sets the peer's bit too, if due
  else if (notify_due_) notify_peer();
  // Work left that no peer will flag: a full CQ (ours), a burst cut short,
  // flushes, completions held back (fault injection).
  if (revisit_ || (state_ == QpState::kError && (sq_head_ != sq_tail_ || !rq_.empty())) ||
      (delay_ticks_ != 0 && sq_head_ != sq_next_))
    mark_active();
}

void ShmQp::write_own_state(uint32_t st) {
  if (my_ep_ == nullptr || vanished_) return;
  if (my_ep_->state.load(std::memory_order_relaxed) != kEpActive) return;
  my_ep_->state.store(st, std::memory_order_release);
  notify_due_ = true;
  ring_peer();
}

void ShmQp::fence_reads() {
  // Even when vanishing: a vanished QP's host lives on and reuses its
  // memory (a dead process's memory is never reused, so nothing is lost).
  if (my_ep_ != nullptr) my_ep_->reads_fenced.store(1, std::memory_order_seq_cst);
}

void ShmQp::enter_error(Status why) {
  if (state_ == QpState::kError) return;
  bool was_connected = state_ == QpState::kRts;
  state_ = QpState::kError;
  fence_reads();
  mark_active();  // flushes to deliver
  // Nothing on the socket matters any more; flushes are ours to deliver.
  if (sock_ >= 0) dev_->unwatch_fd(sock_);
  if (dev_->armed()) dev_->self_wake();
  if (out_ != nullptr) {
    uint32_t c = out_->cons.load(std::memory_order_acquire);
    // Only descriptors the peer provably executed complete successfully.
    final_cons_ = static_cast<uint32_t>(c - out_done_) <= static_cast<uint32_t>(out_prod_ - out_done_) ? c
                                                                                                      : out_done_;
  }
  write_own_state(kEpError);
  if (was_connected && !error_event_sent_) {
    error_event_sent_ = true;
    TERN_LOG(kInfo, "shm", "QP %u: %s", qpn_, why.message().c_str());
    CmEvent ev{CmEventType::kDisconnected};
    ev.qp = this;
    ev.status = std::move(why);
    ev.peer_fault = peer_fault_;
    dev_->queue_event(std::move(ev));
  }
}

void ShmQp::disconnect_gracefully() {
  if (state_ != QpState::kRts) return;
  fence_reads();
  write_own_state(kEpClosed);
  if (sock_ >= 0) {
    ShmMsg m = make_msg(kMsgBye);
    m.qp_num = qpn_;
    send_msg(sock_, m);
  }
  enter_error(make_error(Errc::kDisconnected, "disconnected locally"));
}

void ShmQp::peer_vanished(Status why) {
  peer_gone_ = true;
  enter_error(std::move(why));
}

bool ShmQp::drain_ctl() {
  if (sock_ < 0 || peer_gone_) return false;
  for (;;) {
    ShmMsg m;
    int fd = -1;
    int r = recv_msg(sock_, &m, &fd);
    if (r == 0) return true;
    if (r == -EPROTO) {
      protocol_error(make_error(Errc::kRemoteError, "malformed control message"));
      return false;
    }
    if (r < 0) {
      peer_gone_ = true;
      return false;
    }
    Status bad;
    if (m.type == kMsgSegment) {
      bad = map_peer_segment(m, fd);
    } else if (m.type == kMsgWake) {
      // Its work is in the rings, and progress() finds it -- unless this
      // WAKE is read after this pass's progress, by the connection-event
      // poll of the very poll() that is a host's second look before it
      // sleeps: then the WAKE was the only news of that work. Keep it on our
      // own eventfd while armed, so the sleep ends at once.
      st_.wakes_received.add();
      if (dev_->armed()) dev_->self_wake();
      mark_active();  // the peer set our bit before it rang; a visit costs little
    } else if (m.type == kMsgBye) {
      peer_gone_ = true;  // the state word says the same; this covers a peer that never mapped it
    } else {
      bad = make_error(Errc::kRemoteError, "unexpected control message type %u on an established connection",
                       unsigned{m.type});
    }
    if (fd >= 0) close(fd);
    if (!bad.is_ok()) {
      protocol_error(std::move(bad));
      return false;
    }
    if (peer_gone_) return false;
  }
}

Status ShmQp::map_peer_segment(const ShmMsg& m, int fd) {
  if (fd < 0) return make_error(Errc::kRemoteError, "segment %u came without a memfd", m.seg_index);
  if (m.seg_index >= kMaxSegments)
    return make_error(Errc::kRemoteError, "segment index %u is over the limit of %u", m.seg_index, kMaxSegments);
  // Mapped once for the life of the connection: descriptors we validated
  // point into the mapping, so replacing it could leave them dangling.
  if (m.seg_index < peer_segs_.size() && peer_segs_[m.seg_index].base != nullptr)
    return make_error(Errc::kRemoteError, "segment %u sent again (each index is mapped once per connection)",
                      m.seg_index);
  if (m.seg_length == 0 || m.seg_length > (uint64_t{1} << 46))
    return make_error(Errc::kRemoteError, "segment %u has length %llu", m.seg_index,
                      static_cast<unsigned long long>(m.seg_length));
  // Sealed against shrinking and at least as long as announced: nothing the
  // peer does to the file later can make our mapping fault.
  if (Status st = mem::check_peer_memfd(fd, m.seg_length); !st.is_ok())
    return make_error(Errc::kRemoteError, "segment %u: %s", m.seg_index, st.message().c_str());
  void* p = mmap(nullptr, m.seg_length, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return make_sys_error(Errc::kNoResources, errno, "mapping the peer's segment %u", m.seg_index);
  if (peer_segs_.size() <= m.seg_index) peer_segs_.resize(m.seg_index + 1);
  peer_segs_[m.seg_index] = PeerSeg{static_cast<const uint8_t*>(p), m.seg_length};
  return Status::ok();
}

void ShmQp::protocol_error(Status why) {
  st_.protocol_errors.add();
  // Info here: the kDisconnected event carries peer_fault, and the engine
  // (which knows what the connection was for) warns once, naming the peer.
  TERN_LOG(kInfo, "shm", "QP %u: dropping the connection to %s: %s", qpn_, peer().c_str(), why.message().c_str());
  if (state_ == QpState::kRts) peer_fault_ = true;
  if (state_ == QpState::kRts && !vanished_) {
    // Tell the peer: it sees a QP error, as RC peers see a broken connection.
    write_own_state(kEpError);
  }
  enter_error(std::move(why));
}

void ShmQp::set_socket(int fd) {
  sock_ = fd;
  dev_->own_fd(fd, this);
  dev_->watch_fd(fd);  // a hang-up or a message wakes a sleeping host
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    peer_pid_ = cred.pid;
    peer_uid_ = static_cast<int>(cred.uid);
  }
}

std::string ShmQp::peer() const {
  if (sock_ < 0 && peer_pid_ < 0) return {};
  return "pid " + std::to_string(peer_pid_) + " uid " + std::to_string(peer_uid_) + " qp " + std::to_string(peer_qpn_);
}

std::string ShmQp::peer_host() const {
  if (sock_ < 0 && peer_pid_ < 0) return {};
  return "pid " + std::to_string(peer_pid_) + " uid " + std::to_string(peer_uid_);
}

Status ShmQp::attach_area(int area_fd, bool is_client, uint32_t ring_slots, size_t area_len) {
  void* p = mmap(nullptr, area_len, PROT_READ | PROT_WRITE, MAP_SHARED, area_fd, 0);
  if (p == MAP_FAILED) return make_sys_error(Errc::kNoResources, errno, "shm: mapping the connection area");
  area_ = static_cast<uint8_t*>(p);
  area_len_ = area_len;
  auto* hdr = reinterpret_cast<ShmAreaHeader*>(area_);
  auto* eps = reinterpret_cast<ShmEndpoint*>(area_ + kEndpointOffset);
  auto* rings = reinterpret_cast<ShmRing*>(area_ + kRingOffset);
  auto* slots = reinterpret_cast<ShmDesc*>(area_ + kSlotsOffset);
  if (is_client) {
    hdr->magic = kAreaMagic;
    hdr->version = kLayoutVersion;
    hdr->header_size = sizeof(ShmAreaHeader);
    hdr->ring_slots = ring_slots;
    hdr->slot_size = sizeof(ShmDesc);
    hdr->area_size = area_len;
    for (int i = 0; i < 2; ++i) {
      new (&eps[i].state) std::atomic<uint32_t>(0);
      new (&eps[i].wait_word) std::atomic<uint32_t>(0);
      new (&rings[i].cons) std::atomic<uint32_t>(0);
    }
  } else if (hdr->magic != kAreaMagic || hdr->version != kLayoutVersion || hdr->ring_slots != ring_slots ||
             hdr->slot_size != sizeof(ShmDesc) || hdr->area_size != area_len ||
             rings[0].cons.load() != 0 || rings[1].cons.load() != 0) {
    return make_error(Errc::kRemoteError, "shm: the client's connection area has a bad header");
  }
  int me = is_client ? 0 : 1;
  is_client_ = is_client;
  my_ep_ = &eps[me];
  peer_ep_ = &eps[1 - me];
  out_ = &rings[me];
  in_ = &rings[1 - me];
  out_slots_ = slots + static_cast<size_t>(me) * ring_slots;
  in_slots_ = slots + static_cast<size_t>(1 - me) * ring_slots;
  slots_ = ring_slots;
  slot_mask_ = ring_slots - 1;
  slot_shift_ = static_cast<uint32_t>(__builtin_ctz(ring_slots));
  my_ep_->state.store(kEpActive, std::memory_order_release);
  return Status::ok();
}

}  // namespace tern::shm
