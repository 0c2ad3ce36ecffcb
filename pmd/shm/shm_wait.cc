// pmd/shm wait mode: how a host sleeps on a device whose "hardware" is the
// peer process. There is no interrupt, so the work a sleeping host must be
// woken for comes from three places:
//
//  - the peer: it publishes a descriptor, executes one of ours that we
//    flagged as waited for (kDescAckWanted: a signaled WR, or a ring
//    filling up), or changes its state. While we are armed our
//    endpoint's wait word is odd, and the peer, after such a store, sends
//    one WAKE message on the connection's socket per armed value. The socket
//    is in our epoll set anyway (a hang-up there is how a dead peer is
//    noticed), so the WAKE costs no extra descriptor.
//  - ourselves: a WR posted to an armed CQ (REG_MR, LOCAL_INV and failures
//    complete locally), a receive that lets a waiting SEND land, an event
//    the driver queued, more inbound descriptors than one poll executes.
//    Those write our own eventfd, which no other process holds.
//  - the clock: hello timeouts and held-back completions (fault injection)
//    set a timerfd.
//
// Why a WAKE message and not an eventfd passed to the peer: whoever holds an
// eventfd can fill its counter to 2^64-2 and clear O_NONBLOCK on the shared
// file description, and then the peer's next write blocks for ever -- a
// hostile process could stall our whole engine. A send with MSG_DONTWAIT on
// our own end of a socket never blocks, whatever the peer does; it only
// fails when the peer's buffer is full, and then the peer is readable anyway.
//
// The race between arming and the peer's store is Dekker's: we store our
// wait word, fence, then poll (loading seq words, cons and state); the peer
// stores seq/cons/state, fences, then loads our wait word. With both fences
// seq_cst, either our poll sees its store or it sees our word armed
// (C++20 [atomics.fences]), so a WAKE is never lost. The fence waits for our
// stores to drain -- for the line of the slot we published to come back
// from the peer's core, which is polling it -- so it is paid once per poll
// pass that published, not per post (ShmQp::post_send leaves it to
// progress(), which every host runs before it sleeps); and no system call:
// the WAKE goes only to a peer that armed.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/log.h"
#include "base/timer_fd.h"
#include "shm/shm_internal.h"

namespace tern::shm {

// ---------------------------------------------------------------- the device

Status ShmDevice::enable_wait() {
  if (epfd_ >= 0) return Status::ok();
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int ev = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int tm = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (ep < 0 || ev < 0 || tm < 0) {
    int e = errno;
    for (int fd : {ep, ev, tm})
      if (fd >= 0) close(fd);
    return make_sys_error(Errc::kNoResources, e, "shm: cannot set up wait mode (epoll, eventfd, timerfd)");
  }
  epfd_ = ep, wake_fd_ = ev, timer_fd_ = tm;
  watch_fd(wake_fd_);
  watch_fd(timer_fd_);
  // What is already open joins the set; later sockets join as they come.
  if (listen_fd_ >= 0) watch_fd(listen_fd_);
  for (const Pending& p : handshaking_) watch_fd(p.fd);
  for (ShmQp* qp : qps_)
    if ((qp->state() == QpState::kRts || qp->state() == QpState::kConnecting) && qp->socket_fd() >= 0)
      watch_fd(qp->socket_fd());
  return Status::ok();
}

int ShmDevice::wait_fd() {
  if (Status st = enable_wait(); !st.is_ok()) {
    TERN_LOG(kWarn, "shm", "%s: %s", cfg_.path.c_str(), st.to_string().c_str());
    return -1;
  }
  return epfd_;
}

void ShmDevice::watch_fd(int fd) {
  if (epfd_ < 0 || fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST)
    TERN_LOG(kWarn, "shm", "%s: epoll_ctl(ADD %d): errno %d; a sleeping host may miss that socket", cfg_.path.c_str(),
             fd, errno);
}

void ShmDevice::unwatch_fd(int fd) {
  if (epfd_ < 0 || fd < 0) return;
  (void)epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);  // ENOENT: it never joined
}

void ShmDevice::self_wake() {
  if (wake_fd_ < 0 || woken_) return;
  // Our own eventfd: only we write it, and at most once per ack_wait, so
  // its counter stays tiny and the write cannot block.
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) == sizeof one) woken_ = true;
}

Status ShmDevice::arm_wait() {
  TERN_TRY(enable_wait());
  sweep_idle();  // a host about to sleep may not call poll_cm for a while
  send_all_owed();  // as ShmCq::arm: no deferred ack waits for our sleep
  // QPs cut short wait for no particular CQ now: the second look's polls
  // visit them, and what they leave queued wakes us (enqueue_ready).
  if (cut_head_ != nullptr) take_cut();
  armed_ = true;
  // Events for poll_cm wake the host at once. QPs queued for a visit do not:
  // the protocol's second look (step 3) polls the CQs and so visits them,
  // and what that visit leaves queued (work left that no peer will flag: a
  // full CQ, a burst cut short) wakes it from enqueue_ready, as does a WR
  // posted after the arm. Waking for them here woke an idle host for a
  // receive posted before it slept (tests/conformance/test_wait.cc).
  if (!events_.empty()) self_wake();
  uint64_t at = 0;
  auto earlier = [&](uint64_t t) {
    if (t != 0 && (at == 0 || t < at)) at = t;
  };
  for (const Pending& p : handshaking_) earlier(p.deadline_ns);
  // A flagged descriptor of ours not retired yet: its peer owes us an ack,
  // which it sends with its next post or poll, or when it arms. A peer that
  // executed it and then stopped polling without arming (a host between
  // synchronous calls) sends it only when it comes back; we look at its
  // cons ourselves, as the safety net does in poll mode, after kSafetyNetNs
  // (ack_wait visits every QP that awaits one). On a grid of that period,
  // 10-20 ms ahead: a server whose every reply is signaled arms with one
  // awaited on every sleep, and a deadline that moved with the clock would
  // cost a timerfd_settime each time.
  bool awaits = false;
  for (ShmQp* qp : qps_) {
    earlier(qp->delay_deadline_ns());
    awaits |= qp->awaits_ack();
  }
  if (awaits) earlier((monotonic_ns() / kSafetyNetNs + 2) * kSafetyNetNs);
  if (at != timer_at_ns_) {
    TERN_TRY(arm_timer_fd(timer_fd_, at, /*absolute=*/true, "shm"));
    timer_at_ns_ = at;
  }
  return Status::ok();
}

bool ShmDevice::ack_wait() {
  armed_ = false;
  // A QP that awaits an ack is visited by the next poll whatever woke us:
  // its peer may have stored cons without a bit (arm_wait).
  for (ShmQp* qp : qps_) {
    qp->disarm();
    if (qp->awaits_ack()) qp->look_at_cons();
  }
  if (epfd_ < 0) return true;
  bool cm = !events_.empty();
  epoll_event evs[32];
  int n = epoll_wait(epfd_, evs, 32, 0);
  for (int i = 0; i < n; ++i) {
    int fd = evs[i].data.fd;
    uint64_t v;
    if (fd == wake_fd_) {
      (void)!read(wake_fd_, &v, sizeof v);
      woken_ = false;
      cm = true;  // it may have been an event queued by the driver
    } else if (fd == timer_fd_) {
      (void)!read(timer_fd_, &v, sizeof v);
      timer_at_ns_ = 0;  // one-shot: it is disarmed now
      cm = true;         // hello timeouts are read_hellos' business
    } else {
      ShmQp* qp = qp_of_fd(fd);
      if (qp == nullptr || qp->state() != QpState::kRts) {
        // The listener, a handshake, a connect's answer: poll_cm reads them.
        // A socket of a QP in error needs nothing more: it leaves the set.
        if (qp != nullptr && qp->state() == QpState::kError) unwatch_fd(fd);
        else cm = true;
        continue;
      }
      // WAKE messages (and segments, a goodbye, a hang-up): read them now,
      // or the socket stays readable and the next sleep ends at once.
      if (!qp->drain_ctl())
        qp->peer_vanished(make_error(Errc::kDisconnected, "shm: the peer closed the connection or died"));
    }
  }
  return cm || !events_.empty();
}

// ---------------------------------------------------------------- the CQ and the QP

Status ShmCq::arm() {
  armed_ = true;
  // A host about to sleep owes its peers every deferred ack now: nothing
  // may wait for a poll of ours that a sleep puts off.
  dev_->send_all_owed();
  for (ShmQp* qp : qps_) qp->arm_doorbell();
  // Our wait words before the re-check poll's loads of seq words, cons and state;
  // pairs with the fence in ShmQp::ring_peer (see the top of this file).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return Status::ok();
}

void ShmQp::arm_doorbell() {
  if (my_ep_ == nullptr || vanished_) return;
  wait_gen_ += 2;
  my_ep_->wait_word.store(wait_gen_ | 1u, std::memory_order_relaxed);
}

void ShmQp::disarm() {
  scq_->disarm();
  rcq_->disarm();
  if (my_ep_ == nullptr || vanished_) return;
  if (my_ep_->wait_word.load(std::memory_order_relaxed) & 1u) my_ep_->wait_word.store(wait_gen_, std::memory_order_relaxed);
}

void ShmQp::ring_peer() {
  ring_due_ = false;
  skipped_since_ring_ = false;
  // The note the posts after a skipped one left to us (note_published):
  // the second look at `watching` after their seq stores, and our bit if
  // the peer let go in between. Not needed when the bit goes anyway.
  if (note_deferred_) {
    note_deferred_ = false;
    if (notify_due_ || ack_owed_ || notify_word_ == nullptr || vanished_ || !peer_watching())
      notify_due_ = true;
    else
      st_.bits_skipped.add();
  }
  // An ack we owed (shm_link.cc, "Acks") goes now: our bit and this check.
  if (ack_owed_) {
    ack_owed_ = false;
    notify_due_ = true;
  }
  // Our bit in the link first, if not set since our last store (shm_link.cc):
  // the fence below orders it, with what we stored before, ahead of the
  // load of the wait word.
  if (notify_due_) notify_peer();
  if (peer_ep_ == nullptr || sock_ < 0 || peer_gone_ || vanished_) return;
  // Our stores (seq words, cons, state) before the load of its wait word.
#if defined(__x86_64__)
  // On x86 a locked read-modify-write is a full barrier: a fetch_or of
  // notify_peer's after our last such store (ordered_: just now, or the
  // post's that published it) drained the store buffer as the fence would,
  // so a second locked instruction (~20+ cycles, and a wait for the
  // published line to come back from the peer's core) would order nothing
  // more. Only the compiler must still keep the load below it.
  if (ordered_)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
#endif
    std::atomic_thread_fence(std::memory_order_seq_cst);
  // Peer-written, a hint: any value costs us at most one WAKE per change.
  uint32_t w = peer_ep_->wait_word.load(std::memory_order_relaxed);
  if ((w & 1u) == 0 || w == rung_gen_) return;
  rung_gen_ = w;
  ShmMsg m = make_msg(kMsgWake);
  m.qp_num = qpn_;
  // Our end is non-blocking. A full buffer means the peer has unread
  // messages: it is readable, so awake, already.
  if (send_msg(sock_, m) == 0) st_.wakes_sent.add();
}

uint64_t ShmQp::delay_deadline_ns() const {
  if (delay_ticks_ == 0 || sq_head_ == sq_next_) return 0;
  const SqEntry& e = sq_[sq_head_ & sq_mask_];
  if (!e.issued) return 0;
  const uint64_t due = e.issue_tick + delay_ticks_, now = now_ticks();
  return monotonic_ns() + (due > now ? static_cast<uint64_t>(ns_from_ticks(due - now)) : 0);
}

}  // namespace tern::shm
