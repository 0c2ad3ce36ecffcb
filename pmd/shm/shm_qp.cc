// pmd/shm queue pair: the object and its state. Creation (attaching its
// CQs and receive queue), destruction, the connection area it maps, the
// state machine's moves to error (on our own failure, the peer's, a
// protocol violation or a disconnect) and what each tells the peer through
// our endpoint's state word, fault injection, and progress(): one visit of
// the device's poll, which runs the responder (shm_responder.cc), the
// requester (shm_requester.cc) and the completer (shm_completer.cc) in that
// order. Everything here runs on the thread that owns the device; the only
// cross-process state is the connection area.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "base/log.h"
#include "shm/shm_internal.h"
#include "shm/shm_ring.h"

namespace tern::shm {

ShmQp::ShmQp(ShmDevice* dev, ShmPd* pd, const QpInit& init, uint32_t qpn)
    : dev_(dev),
      pd_(pd),
      scq_(static_cast<ShmCq*>(init.send_cq)),
      rcq_(static_cast<ShmCq*>(init.recv_cq)),
      init_(init),
      qpn_(qpn),
      pcap_(dev->pcap()) {
  general_only_ = pcap_ != nullptr || init.max_send_sge < 1;
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
  // The visits that executed one descriptor: every descriptor executed
  // that no larger batch holds (execute_inbound counts only those).
  st_.exec_batches[0].set(st_.descs_in.get() - st_.multi_descs.get());
  return {{"post_calls", &st_.post_calls},   {"doorbells", &st_.doorbells},
          {"descs_out", &st_.descs_out},     {"descs_in", &st_.descs_in},
          {"bytes_out", &st_.bytes_out},     {"bytes_in", &st_.bytes_in},
          {"reg_mr", &st_.reg_mr},           {"local_inv", &st_.local_inv},
          {"remote_inv", &st_.remote_inv},   {"rnr_waits", &st_.rnr_waits},
          {"ring_full", &st_.ring_full},     {"cq_full", &st_.cq_full},
          {"flushed", &st_.flushed},         {"protection_errors", &st_.protection_errors},
          {"corrupt_descs", &st_.corrupt_descs}, {"wakes_sent", &st_.wakes_sent},
          {"wakes_received", &st_.wakes_received}, {"sq_grows", &st_.sq_grows},
          {"idle_trims", &st_.idle_trims},   {"visits", &st_.visits},
          {"watches", &st_.watches},         {"bits_skipped", &st_.bits_skipped},
          {"cons_loads", &st_.cons_loads},   {"exec_batch_1", &st_.exec_batches[0]},
          {"exec_batch_2_3", &st_.exec_batches[1]}, {"exec_batch_4_7", &st_.exec_batches[2]},
          {"exec_batch_8_15", &st_.exec_batches[3]}, {"exec_batch_16_31", &st_.exec_batches[4]},
          {"exec_batch_32", &st_.exec_batches[5]}};
}

Status ShmQp::inject_fault(const Fault& f) {
  if (f.kind != Fault::Kind::kDropConnection) general_only_ = true;
  switch (f.kind) {
    case Fault::Kind::kFailAfterWrs:
      fail_after_ = static_cast<int64_t>(f.count);
      return Status::ok();
    case Fault::Kind::kDelayCompletions:
      delay_ticks_ = f.delay_ns == 0 ? 0 : std::max<uint64_t>(1, ticks_from_ns(f.delay_ns));
      look_at_cons();
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
    // issue() only when there is something to issue: the inline sends go
    // out through their fast path, so this is empty on almost every visit,
    // and the call (its frame, six registers saved) cost more than the test.
    if (state_ == QpState::kRts && sq_next_ != sq_tail_ && issue()) {
      st_.doorbells.add();
      note_published();
    }
  }
  // Nothing outstanding: the peer's index is not worth a look (and news
  // that only it carried is no longer news). Nor is the call worth making
  // when it would find nothing (waits_on_peer): the visit after our own
  // post, at depth 1 one of every two.
  if (sq_head_ == sq_tail_) cons_look_ = false;
  else if (!waits_on_peer()) complete_sends();
  // What waited for ring slots the retirements just freed: now, not when
  // some later news brings us back.
  if (state_ == QpState::kRts && sq_next_ != sq_tail_ && issue()) {
    st_.doorbells.add();
    note_published();
  }
  if (state_ == QpState::kError) flush_recvs();
  if (ring_due_) ring_peer();  // sets the peer's bit too, if due
  else if (notify_due_) notify_peer();
  // Work left that no peer will flag: a full CQ (ours), a burst cut short,
  // flushes, completions held back (fault injection).
  if (TERN_UNLIKELY(delay_ticks_ != 0) && sq_head_ != sq_next_)
    look_at_cons();  // held back: each visit reads cons, as every visit did before acks rode on SENDs
  if (revisit_ || (state_ == QpState::kError && (sq_head_ != sq_tail_ || !rq_.empty()))) mark_active();
}

void ShmQp::write_own_state(uint32_t st) {
  if (my_ep_ == nullptr || vanished_) return;
  if (my_ep_->state.load(std::memory_order_relaxed) != kEpActive) return;
  my_ep_->state.store(st, std::memory_order_release);
  ordered_ = false;
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
  dev_->drop_watch(this);  // its visits are flushes now: nothing inbound to peek for
  mark_active();  // flushes to deliver
  // Nothing on the socket matters any more; flushes are ours to deliver.
  if (sock_ >= 0) dev_->unwatch_fd(sock_);
  if (dev_->armed()) dev_->self_wake();
  if (out_ != nullptr) {
    uint32_t c = out_->cons.load(std::memory_order_acquire);
    // Only descriptors the peer provably executed complete successfully.
    final_cons_ = static_cast<uint32_t>(c - out_done_) <= static_cast<uint32_t>(out_prod_ - out_done_) ? c
                                                                                                      : out_done_;
    // What a SEND of the peer's said it executed counts as well (an honest
    // peer's cons is never behind it).
    if (idx_before(final_cons_, peer_acked_)) final_cons_ = peer_acked_;
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
      new (&eps[i].watching) std::atomic<uint32_t>(0);
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
  cons_room_ = ring_slots / 4;
  my_ep_->state.store(kEpActive, std::memory_order_release);
  return Status::ok();
}

}  // namespace tern::shm
