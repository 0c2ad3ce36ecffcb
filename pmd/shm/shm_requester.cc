// pmd/shm requester: turns the WRs posted to a QP's send queue into
// descriptors in its outbound ring -- a small SEND with its message inside,
// others with SGEs that name our exported segments, an RDMA READ with none
// (its SGEs are our sink) -- and executes the local ones (REG_MR,
// LOCAL_INV) in order with them. Posting checks what the caller passed;
// issue() publishes, as ring room allows, each descriptor's seq word last.
// Runs on the device's thread: post_send(), and progress() (shm_qp.cc) for
// what waited for room.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "base/clock.h"
#include "rdmadev/rdmadev_driver.h"
#include "shm/shm_internal.h"
#include "shm/shm_ring.h"

namespace tern::shm {

namespace {

uint32_t next_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

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

bool ShmQp::post_inline_send(const SendWr& wr) { return inline_send(wr); }

inline bool ShmQp::inline_send(const SendWr& wr) {
  // The datapath's commonest WR -- one small Send, nothing queued ahead of
  // it, room in the ring -- straight into its slot: what build_send_entry
  // and issue() do for it, without the general cases' copies and branches.
  // Anything else (and anything that fails a check) takes the general path,
  // which says why.
  const Sge& s = wr.sg_list[0];
  if (sq_next_ != sq_tail_ || out_prod_ - out_done_ >= slots_ || sq_tail_ - sq_head_ >= sq_limit_) return false;
  const MrEntry* m = pd_->lookup_source(s.lkey, s.addr, s.length);
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
  const bool flagged = e.signaled || out_prod_ + 1 - out_done_ >= slots_ / 2;
  slot->flags = static_cast<uint16_t>(kDescInline | kDescAcked | (flagged ? kDescAckWanted : 0));
  if (flagged) flagged_end_ = out_prod_ + 1;
  slot->key = 0;
  slot->length = s.length;
  // The ack of what we executed of the peer's ring, on the message
  // (kDescAcked): our cons store came first (execute_inbound).
  slot->raddr = in_cons_;
  // libc's memcpy, not what gcc makes of a length it knows is at most
  // kMaxInline (`rep movsq`: few instructions to count, but slow to start
  // for a message of 100 bytes); the barrier hides the bound.
  size_t len = s.length;
  asm("" : "+r"(len));
  std::memcpy(reinterpret_cast<uint8_t*>(slot) + kInlineOffset, m->host + (s.addr - m->iova), len);
  seq_word(slot).store(slot_seq(out_prod_, slot_shift_), std::memory_order_release);
  ordered_ = false;
  ++out_prod_;
  ++sq_tail_;
  ++sq_next_;
  st_.descs_out.add();
  st_.bytes_out.add(s.length);
  return true;
}

int ShmQp::post_send(const SendWr* wrs, int n, int* err) {
  // The commonest post of all -- one small Send, the engine's every call
  // and reply -- in one frame: the general loop's, with post_inline_send's
  // inside it, was ~30 instructions of pushes and pops a message. What
  // follows the WR is the general path's for a post of one that published.
  // Only the choice here, so that this frame is empty and the general
  // path's posts (a bulk call's REG_MR and Send, a chunk's READs) pay two
  // jumps, not the inline path's pushes and pops.
  if (n == 1 && state_ == QpState::kRts && !general_only_ && wrs->opcode == WrOpcode::kSend && wrs->num_sge == 1 &&
      wrs->sg_list != nullptr && wrs->sg_list[0].length <= kMaxInline)
    return post_one_inline(*wrs, err);
  return post_general(wrs, n, err);
}

int ShmQp::post_one_inline(const SendWr& wr, int* err) {
  if (!inline_send(wr)) return post_general(&wr, 1, err);  // which says why
  st_.post_calls.add();
  *err = 0;
  st_.doorbells.add();
  note_published();
  if (scq_->armed()) dev_->self_wake();
  mark_active();
  return 1;
}

int ShmQp::post_general(const SendWr* wrs, int n, int* err) {
  st_.post_calls.add();
  *err = 0;
  if (state_ == QpState::kInit || state_ == QpState::kConnecting) {
    *err = ENOTCONN;
    return 0;
  }
  // No fault injection, capture or held-back completions: those want the
  // general path's bookkeeping for every WR (general_only_).
  const bool plain = state_ == QpState::kRts && !general_only_;
  int fast = 0;
  int i = 0;
  for (; i < n; ++i) {
    const SendWr& wr = wrs[i];
    if (plain && wr.opcode == WrOpcode::kSend && wr.num_sge == 1 && wr.sg_list != nullptr &&
        wr.sg_list[0].length <= kMaxInline && post_inline_send(wr)) {
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
  if (state_ == QpState::kRts && sq_next_ != sq_tail_) published |= issue();  // empty after fast-path posts
  if (published) {
    // A doorbell is a post that published (what a NIC's would be), and a
    // WAKE may be due.
    st_.doorbells.add();
    // Our bit in the link now, not at our next poll: a host descheduled
    // between this post and that poll would leave the peer without news for
    // as long (on a loaded machine, tens of ms). One locked RMW per post
    // call that published, not per WR -- none when the peer watches the
    // connection (a fence instead). An ack we owed (shm_link.cc, "Acks")
    // rides on it; its WAKE check is ring_peer's at the visit ring_due_ and
    // mark_active below bring.
    note_published();
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
  sq_look_ = sq_limit_ - sq_limit_ / 4;  // complete_sends: cons loaded before the array is full
  st_.sq_grows.add();
}

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
      const bool flagged = e.signaled || out_prod_ + 1 - out_done_ >= slots_ / 2;
      // A SEND carries the ack of what we executed of the peer's ring
      // (kDescAcked; it has no remote address to give).
      const bool send = e.desc.op == kOpSend || e.desc.op == kOpSendInv;
      if (send) e.desc.raddr = in_cons_;
      e.desc.flags = static_cast<uint16_t>((e.desc.flags & kDescInline) | (flagged ? kDescAckWanted : 0) |
                                           (send ? kDescAcked : 0));
      if (flagged) flagged_end_ = out_prod_ + 1;
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
      ordered_ = false;
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

}  // namespace tern::shm
