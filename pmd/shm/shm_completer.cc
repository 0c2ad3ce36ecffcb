// pmd/shm completer: retires a QP's send WRs into its send CQ, in post order,
// once the peer's consumer index shows it executed them (copying a READ's
// data into its sink as it retires), and in error completes what is left
// with the status the QP's fate gives each: done before the error, the one
// descriptor the peer refused, or flushed. Flushes of the QP's own receive
// queue land here too. A receive's successful completion is the responder's
// (shm_responder.cc), made as the message lands. Runs on the device's
// thread, from progress() (shm_qp.cc).
#include <atomic>
#include <cstring>

#include "base/clock.h"
#include "shm/shm_internal.h"
#include "shm/shm_ring.h"

namespace tern::shm {

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
  if (TERN_UNLIKELY(pcap_ != nullptr)) capture_read_response(e);
  return true;
}

uint32_t ShmQp::load_cons(uint32_t known) {
  st_.cons_loads.add();
  const uint32_t c = out_->cons.load(std::memory_order_acquire);
  if (static_cast<uint32_t>(c - out_done_) > static_cast<uint32_t>(out_prod_ - out_done_)) {
    st_.corrupt_descs.add();
    protocol_error(
        make_error(Errc::kRemoteError, "its consumer index %u is outside [%u, %u]", c, out_done_, out_prod_));
    return final_cons_;
  }
  if (idx_before(known, c)) peer_acked_ = known = c;
  return known;
}

void ShmQp::acked_outside(uint32_t said) {
  if (idx_before(said, out_done_)) return;  // an older message's (or a lie that stalls only this QP)
  st_.corrupt_descs.add();
  protocol_error(make_error(Errc::kRemoteError, "a SEND acked its consumer index %u, outside [%u, %u]", said,
                            out_done_, out_prod_));
}

void ShmQp::complete_sends() {
  uint32_t cons = final_cons_;
  if (state_ != QpState::kError && out_ != nullptr) {
    // Where the peer's consumer index is known from: its SENDs carry it
    // (kDescAcked, taken in by execute_inbound), on the line that brought
    // them, so a busy connection answers our WRs with their acks and
    // `cons` need not be loaded; its line stays in the writer's cache,
    // where loading it on every visit moved it between the cores twice per
    // message (the peer's store took it back each time).
    cons = peer_acked_;
    // `cons` itself is loaded only when what the SENDs said may not be
    // enough: news that only cons carries (an ack's bit, a WAKE, the
    // safety net's look, a sleeping host's ack wait: look_at_cons) while
    // something of ours is not known executed; a quarter of the ring or
    // three quarters of the send queue array not known retirable (room,
    // before a post must wait or grow the array; cons_room_, sq_look_);
    // held-back completions (fault injection: every visit looks). Not on the visit that follows our own post: the
    // peer cannot have answered it yet, and it tells us when it does, by
    // a SEND of its own or, for a WR we flagged, by its bit. So a
    // signaled WR still completes in bounded time (docs/shm-driver.md,
    // "Acks on the message").
    const bool look = cons_look_;
    cons_look_ = false;
    if (TERN_UNLIKELY((look && cons != out_prod_) || out_prod_ - cons >= cons_room_ ||
                      sq_tail_ - sq_head_ >= sq_look_))
      cons = load_cons(cons);
    if (TERN_UNLIKELY(state_ == QpState::kError)) cons = final_cons_;
  }
  // The commonest retirement first: descriptors the peer executed, no
  // READ to copy, nothing held back, the QP not in error -- each only its
  // completion if signaled and its slot given back, without the general
  // loop's cases. It stops at the first entry that is anything else (not
  // issued, local, a READ, not executed yet), which the loop below takes.
  if (state_ != QpState::kError && delay_ticks_ == 0) {
    uint32_t head = sq_head_;
    const uint32_t tail = sq_tail_;
    while (head != tail) {
      const SqEntry& e = sq_[head & sq_mask_];
      if (!e.issued || !e.remote || e.opcode == WcOpcode::kRdmaRead || !idx_before(e.ring_index, cons)) break;
      if (e.signaled && !push_wc(scq_, Wc{e.wr_id, e.byte_len, 0, qpn_, WcStatus::kSuccess, e.opcode, 0, 0})) break;
      out_done_ = e.ring_index + 1;
      ++head;
    }
    sq_head_ = head;
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
          revisit_ = cons_look_ = true;  // and that visit reads cons: no SEND need tell us
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

}  // namespace tern::shm
