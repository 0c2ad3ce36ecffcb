// pmd/shm responder: executes the peer's descriptors against our memory --
// a SEND lands in our next receive, an RDMA WRITE is copied in, an RDMA READ
// is granted (its initiator copies the range when it retires the READ, in
// shm_completer.cc) -- after checking each as peer input: the descriptor is
// copied out of shared memory first, its SGEs must lie in segments the peer
// exported, its rkey must name a registration this QP may use. A descriptor
// that fails is refused by name (reject_inbound), and the QP goes to error.
// Also the receives SENDs land in (post_recv). Runs on the device's thread,
// from progress() (shm_qp.cc).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>

#include "shm/shm_internal.h"
#include "shm/shm_ring.h"

namespace tern::shm {

namespace {

// What an inline SEND needs of its descriptor, besides the message: the
// words from `op` to `acked` (16 bytes, one move, not the 40 of the header).
struct InlineHead {
  uint8_t op;
  uint8_t num_sge;
  uint16_t flags;
  uint32_t key;
  uint32_t length;
  uint32_t acked;
};
static_assert(sizeof(InlineHead) == offsetof(ShmDesc, acked) + sizeof(uint32_t) - offsetof(ShmDesc, op) &&
              offsetof(ShmDesc, length) - offsetof(ShmDesc, op) == offsetof(InlineHead, length) &&
              offsetof(ShmDesc, acked) - offsetof(ShmDesc, op) == offsetof(InlineHead, acked));

// An inline message (at most kMaxInline bytes) into its receive: 16-byte
// moves, the last one overlapping the one before, in place of a call to
// libc's memcpy, or of the `rep movs` the compiler makes of a memcpy it
// knows is short (slow to start on CPUs without fast short moves).
[[gnu::always_inline]] inline void copy_short(uint8_t* dst, const uint8_t* src, uint32_t n) {
  if (n >= 16) {
    for (uint32_t i = 0; i + 16 < n; i += 16) std::memcpy(dst + i, src + i, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else {
    for (uint32_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

}  // namespace

int ShmQp::post_recv(const RecvWr* wrs, int n, int* err) {
  if (srq_ != nullptr) {
    *err = EINVAL;  // rdmadev.h: a QP on an SRQ has no receive queue of its own
    return 0;
  }
  int i = rq_.post(pd_, wrs, n, err);
  // A SEND waiting for a receive (or a flush, in error) completes now. Only
  // those: a receive posted back after each message (one per RPC at depth
  // 1) queued a visit with nothing to do.
  if (i > 0 && (rq_starved_ || state_ == QpState::kError)) {
    rq_starved_ = false;
    if (rcq_->armed()) dev_->self_wake();
    mark_active();
  }
  return i;
}

void ShmQp::reject_inbound(uint32_t index, WcStatus status, const char* why) {
  // Acknowledge what we did execute, then name the descriptor we refuse. The
  // record is written before the state word (release), so the peer that sees
  // kEpError reads a complete record.
  in_->cons.store(in_cons_, std::memory_order_release);
  ordered_ = false;
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
    else rq_starved_ = true;  // post_recv comes back for it
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
    if (r == Exec::kDone) st_.bytes_in.add(d.length);  // descs_in: execute_inbound's, once a visit
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
  st_.bytes_in.add(d.length);  // descs_in: execute_inbound's, once a visit
  return Exec::kDone;
}

[[gnu::always_inline]] inline bool ShmQp::land_inline_send(const ShmDesc* slot, uint16_t* flags, uint32_t* acked,
                                                         uint32_t* length) {
  // Copied out before it is checked, like every descriptor: the peer may
  // rewrite the slot meanwhile, and what was checked is what is used (the
  // length most of all: it bounds the copy below).
  InlineHead h;
  std::memcpy(&h, reinterpret_cast<const uint8_t*>(slot) + offsetof(ShmDesc, op), sizeof h);
  if (h.op != kOpSend || h.num_sge != 0 || (h.flags & kDescInline) == 0 || h.length > kMaxInline) return false;
  // The receive: one that took a message before (a good lkey, a buffer the
  // message fits in its first span, which is where the general scatter
  // puts it too), and room in its CQ. A starved queue, a full CQ, a bad
  // receive and a message too large are the general path's, which says why.
  ShmRecvQueue& rq = *recv_;
  if (rq.empty() || rcq_->full()) return false;
  ShmRecvQueue::Entry& r = rq.front();
  if (r.status != WcStatus::kSuccess || r.num_sge == 0 || h.length > r.sge[0].len) return false;
  // Straight from the slot into the receive: the producer does not rewrite
  // a slot before our consumer index passes it (kDescInline), so these are
  // the bytes it published (a peer that does anyway changes only its own
  // message, never how much is copied); and the peer's own memory is not
  // read, so reads_fenced has nothing to recheck after the copy.
  copy_short(r.sge[0].p, reinterpret_cast<const uint8_t*>(slot) + kInlineOffset, h.length);
  rcq_->push(Wc{r.wr_id, h.length, 0, qpn_, WcStatus::kSuccess, WcOpcode::kRecv, 0, 0});
  rq.pop();
  // Its counters (descs_in, bytes_in, the SRQ's consumed) are the
  // caller's, once per visit (execute_inbound).
  *flags = h.flags;
  *acked = h.acked;
  *length = h.length;
  return true;
}

void ShmQp::execute_inbound() {
  // The idle pass: one load of a line that stays in our cache until the
  // peer writes it.
  const ShmDesc* slot = &in_slots_[in_cons_ & slot_mask_];
  if (seq_word(slot).load(std::memory_order_acquire) != slot_seq(in_cons_, slot_shift_)) return;
  const uint32_t start = in_cons_;
  // The slots published behind this one, up to the budget, before any is
  // executed: their seq words loaded back to back, each the line the
  // peer's core wrote last, so that the misses overlap where one per
  // message came after the previous message's whole execution. Each
  // published slot's second line (a message past 40 bytes) is prefetched
  // with it. Only seq words are read here, and only to count: a slot is
  // still copied out and checked when its turn comes, the executing stops
  // at the first that fails or waits, and a prefetch is a hint at an
  // address in our own ring, never one a peer wrote. A slot not yet
  // published is not touched past its seq word (a prefetch of it would
  // take its lines from a producer still writing them).
  __builtin_prefetch(reinterpret_cast<const uint8_t*>(slot) + kCacheLine);
  uint32_t ready = 1;
  {
    // Walked by pointer: the seq word a slot must hold changes only where
    // the ring wraps (computed again there, not incremented: the index
    // itself wraps at 2^32, and the lap with it).
    const ShmDesc* const ring_end = in_slots_ + slot_mask_ + 1;
    const ShmDesc* next = slot;
    uint32_t want = slot_seq(start, slot_shift_);
    for (const uint32_t budget = dev_->exec_burst(); ready < budget; ++ready) {
      if (++next == ring_end) next = in_slots_, want = slot_seq(start + ready, slot_shift_);
      if (seq_word(next).load(std::memory_order_acquire) != want) break;
      __builtin_prefetch(reinterpret_cast<const uint8_t*>(next) + kCacheLine);
    }
  }
  uint16_t flags_seen = 0;  // for kDescAckWanted
  bool waiting = false;
  // The newest ack a SEND carried (kDescAcked): the peer's consumer index of
  // our ring, which complete_sends checks and uses in place of loading
  // `cons` (docs/shm-driver.md, "Acks on the message").
  uint32_t acked = peer_acked_;
  // The inline SENDs landed on their own path (high half) and their bytes
  // (low half: at most 32 x kMaxInline), one register for both, into the
  // counters once at the end (each counter a load and a store).
  uint64_t landed = 0;
  for (;;) {
    // Once the peer's QP has left RTS it flushes what we have not
    // executed and may reuse the memory those descriptors name: execute
    // none of them (reads_fenced, shm_layout.h).
    if (peer_reads_fenced()) break;
    uint16_t flags;
    uint32_t said, len;
    // A capture records what each descriptor did: the general path's.
    if (TERN_UNLIKELY(pcap_ != nullptr) || !land_inline_send(slot, &flags, &said, &len)) {
      // Copy the descriptor out of shared memory before checking it, so the
      // peer cannot change it between the check and the use.
      ShmDesc d;
      std::memcpy(&d, slot, kDescHeader);
      if (d.num_sge <= kMaxSge && (d.flags & kDescInline) == 0)
        std::memcpy(d.sge, slot->sge, d.num_sge * sizeof(ShmSge));
      Exec r = execute_one(d, slot, in_cons_);
      if (r != Exec::kDone) {
        if (r == Exec::kFailed) {
          count_executed(in_cons_ - start, landed);
          return;
        }
        // Waiting for a receive or for room in our CQ: peeks would find this
        // slot published and queue a visit on every poll. What the peer
        // publishes behind it waits for it, and the post_recv or the CQ poll
        // that lets it land comes back for both.
        waiting = true;
        dev_->drop_watch(this);
        break;
      }
      flags = d.op == kOpSend || d.op == kOpSendInv ? d.flags : static_cast<uint16_t>(d.flags & ~kDescAcked);
      said = d.acked;
    } else {
      landed += uint64_t{1} << 32 | len;
    }
    if ((flags & kDescAcked) != 0) acked = said;
    flags_seen |= flags;
    ++in_cons_;
    if (--ready == 0) break;
    slot = &in_slots_[in_cons_ & slot_mask_];
  }
  count_executed(in_cons_ - start, landed);
  // Peer input like cons: ahead of what we published is a protocol error;
  // behind what we know, an older message's (a visit may have loaded a
  // newer cons since), ignored.
  if (acked != peer_acked_) {
    if (TERN_LIKELY(static_cast<uint32_t>(acked - out_done_) <= static_cast<uint32_t>(out_prod_ - out_done_))) {
      if (idx_before(peer_acked_, acked)) peer_acked_ = acked;
    } else {
      acked_outside(acked);
      if (state_ != QpState::kRts) return;
    }
  }
  // A full burst executed and more waiting: the next poll comes back for
  // it, and a host about to sleep must poll again first, for the peer will
  // not ring or set our bit for descriptors it published already.
  if (in_cons_ - start == dev_->exec_burst() &&
      seq_word(&in_slots_[in_cons_ & slot_mask_]).load(std::memory_order_acquire) == slot_seq(in_cons_, slot_shift_)) {
    revisit_ = true;
    if (dev_->armed()) dev_->self_wake();
  }
  if (in_cons_ != start) {
    in_->cons.store(in_cons_, std::memory_order_release);
    ordered_ = false;
    // Found work: our polls look at the next slot themselves from now on
    // (shm_link.cc, "Watched QPs"), and the peer's posts skip the link.
    if (watched_) dev_->watch_next(this);
    else if (!waiting) dev_->watch(this);
    // The peer retires its WRs when it sees cons move, but waits for that
    // only where it flagged a descriptor (a signaled WR, a filling ring):
    // its bit and a WAKE for those alone. The rest it reads at its next
    // visit, which its own next post or our next message brings; what it
    // queued behind them locally it comes back for (complete_sends). Even
    // the flagged ones' bit waits a little (shm_link.cc, "Acks"): our host
    // usually answers what it just received, and that post's bit carries
    // the ack; otherwise the device sends it a poll later. Not so for the
    // poll a host makes after arming (the wait protocol's second look): it
    // may sleep next, and nothing would send it then.
    const bool ack_wanted = (flags_seen & kDescAckWanted) != 0;
    if (ack_wanted && dev_->armed()) {
      ring_due_ = notify_due_ = true;
    } else if (ack_wanted && !ack_owed_) {
      ack_owed_ = true;
      dev_->owe_ack(this);
    }
  }
}

}  // namespace tern::shm
