// pmd/verbs wait mode: the device's one wait fd is an epoll set of
//  - the completion channel every CQ of the device reports to (Cq::arm is
//    ibv_req_notify_cq; events are read here and acked in batches),
//  - the rdma_cm event channel and the async-event fds (already
//    non-blocking: poll_cm reads them),
//  - an eventfd for events the driver queues itself (a QP error seen in a
//    completion, an ESTABLISHED learnt from a receive) and for async events
//    another device of the same context read first (verbs_events.cc),
//  - a timerfd for the flush grace of a QP in error (verbs_cq.cc).
// All are level-triggered, so nothing read late is lost.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>

#include "base/log.h"
#include "base/timer_fd.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

Status VerbsDevice::init_wait() {
  comp_ = ibv_create_comp_channel(ctx_);
  if (comp_ == nullptr)
    return make_sys_error(Errc::kNoResources, errno, "verbs: ibv_create_comp_channel(%s)", caps_.name.c_str());
  // ack_wait reads events until there are none: it must never block.
  int fl = fcntl(comp_->fd, F_GETFL);
  if (fl < 0 || fcntl(comp_->fd, F_SETFL, fl | O_NONBLOCK) != 0)
    return make_sys_error(Errc::kInternal, errno, "verbs: cannot make the completion channel non-blocking");
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return make_sys_error(Errc::kNoResources, errno, "verbs: eventfd");
  return Status::ok();
}

Status VerbsDevice::enable_wait() {
  if (epfd_ >= 0) return Status::ok();
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return make_sys_error(Errc::kNoResources, errno, "verbs: epoll_create1");
  int tm = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (tm < 0) {
    int e = errno;
    close(ep);
    return make_sys_error(Errc::kNoResources, e, "verbs: timerfd_create");
  }
  int fds[] = {comp_->fd, channel_->fd, wake_fd_, tm, cm_ctx_->async_fd, ctx_ != cm_ctx_ ? ctx_->async_fd : -1};
  for (int fd : fds) {
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) {
      int e = errno;
      close(ep);
      close(tm);
      return make_sys_error(Errc::kInternal, e, "verbs: epoll_ctl(ADD %d)", fd);
    }
  }
  epfd_ = ep, timer_fd_ = tm;
  return Status::ok();
}

int VerbsDevice::wait_fd() {
  if (Status st = enable_wait(); !st.is_ok()) {
    TERN_LOG(kWarn, "verbs", "%s: no wait mode: %s", caps_.name.c_str(), st.to_string().c_str());
    return -1;
  }
  return epfd_;
}

void VerbsDevice::self_wake() {
  if (wake_fd_ < 0 || woken_) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) == sizeof one) woken_ = true;
}

Status VerbsDevice::arm_wait() {
  TERN_TRY(enable_wait());
  armed_ = true;
  // What poll_cm would report at once must not wait for an fd to fire.
  if (!events_.empty() || !errored_.empty() || async_inbox_pending(cm_ctx_, this) ||
      (ctx_ != cm_ctx_ && async_inbox_pending(ctx_, this)))
    self_wake();
  if (wake_at_ns_ != timer_at_ns_) {
    TERN_TRY(arm_timer_fd(timer_fd_, wake_at_ns_, /*absolute=*/true, "verbs"));
    timer_at_ns_ = wake_at_ns_;
  }
  return Status::ok();
}

bool VerbsDevice::ack_wait() {
  armed_ = false;
  wake_at_ns_ = 0;  // the CQs ask again when they are armed again
  if (epfd_ < 0) return true;
  bool cm = !events_.empty() || !errored_.empty();
  epoll_event evs[8];
  int n = epoll_wait(epfd_, evs, 8, 0);
  for (int i = 0; i < n; ++i) {
    int fd = evs[i].data.fd;
    uint64_t v;
    if (fd == comp_->fd) {
      // The notification is spent (one per arm); the completions themselves
      // are the host's next poll.
      ibv_cq* cq = nullptr;
      void* cq_ctx = nullptr;
      // The channel serves only this device's CQs; create_cq set each one's
      // context to its VerbsCq.
      while (ibv_get_cq_event(comp_, &cq, &cq_ctx) == 0) static_cast<VerbsCq*>(cq_ctx)->note_event();
    } else if (fd == wake_fd_) {
      (void)!read(wake_fd_, &v, sizeof v);
      woken_ = false;
      cm = true;
    } else if (fd == timer_fd_) {
      (void)!read(timer_fd_, &v, sizeof v);
      timer_at_ns_ = 0;  // one-shot: disarmed now; the CQ poll does the flushes
    } else {
      cm = true;  // the rdma_cm channel or an async fd: poll_cm reads them
    }
  }
  return cm;
}

}  // namespace tern::verbs
