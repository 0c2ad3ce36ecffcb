// Engine wait mode: arming every device before a host sleeps, the second
// look that makes the sleep safe, and consuming the wake-up in the next
// poll(). The protocol a host follows is in engine.h; the drivers' side
// (Cq::arm, Device::wait_fd / arm_wait / ack_wait) in rdmadev.h.
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/clock.h"
#include "base/timer_fd.h"
#include "engine/engine_impl.h"

namespace tern::rpc {

using namespace tern::rdma;

namespace {

// A host poller's tag in the epoll set: its index above this (wait() tells
// finish_wait() which fired). Devices are tagged with their index from 0,
// the timer and the listen group with UINT64_MAX and UINT64_MAX - 1.
constexpr uint64_t kPollerTag = uint64_t{1} << 62;

// Every device's wait fd in the engine's epoll set, the new ones too.
Status join_devices(EngineImpl& e) {
  auto& w = e.waiting;
  if (w.epfd < 0) {
    w.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (w.epfd < 0) return make_sys_error(Errc::kNoResources, errno, "engine: epoll_create1 for wait mode");
    // The engine's own deadlines (calls' timeouts, keepalive, reconnect
    // attempts) wake a sleeping host through this timer.
    w.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (w.timer_fd < 0) return make_sys_error(Errc::kNoResources, errno, "engine: timerfd_create for wait mode");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = UINT64_MAX;
    if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, w.timer_fd, &ev) != 0)
      return make_sys_error(Errc::kInternal, errno, "engine: epoll_ctl(ADD) for its timer");
  }
  for (; w.devices_added < e.devices.size(); ++w.devices_added) {
    DeviceCtx* dc = e.devices[w.devices_added].get();
    int fd = dc->dev->wait_fd();
    if (fd < 0)
      return make_error(Errc::kUnsupported, "engine: %s has no wait mode (driver %s)", dc->spec.c_str(),
                        dc->dev->caps().driver.c_str());
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = w.devices_added;
    if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
      return make_sys_error(Errc::kInternal, errno, "engine: epoll_ctl(ADD) for %s", dc->spec.c_str());
  }
  // The host's pollers' completions (add_poller).
  for (; w.pollers_added < e.pollers.size(); ++w.pollers_added) {
    const int fd = e.pollers[w.pollers_added].wake_fd;
    if (fd < 0) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kPollerTag + w.pollers_added;
    if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
      return make_sys_error(Errc::kInternal, errno, "engine: epoll_ctl(ADD) for a host poller");
  }
  // A listen group's member is woken when a connection is handed to it.
  for (auto& dcp : e.devices) {
    if (!dcp->member || dcp->member_waits) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = UINT64_MAX - 1;
    if (epoll_ctl(w.epfd, EPOLL_CTL_ADD, dcp->member->efd, &ev) != 0)
      return make_sys_error(Errc::kInternal, errno, "engine: epoll_ctl(ADD) for its listen group");
    dcp->member_waits = true;
  }
  return Status::ok();
}

}  // namespace

EngineImpl::WaitState::~WaitState() {
  if (epfd >= 0) close(epfd);
  if (timer_fd >= 0) close(timer_fd);
}

int EngineImpl::wait_fd() {
  if (!join_devices(*this).is_ok()) return -1;
  return waiting.epfd;
}

Result<bool> EngineImpl::prepare_wait() {
  // Called twice without a poll(): the first arm's wake-up may hold events.
  // (Drained outside a poll(): nothing to mask in the next one's pollers.)
  const bool events = waiting.armed && finish_wait() > 0;
  waiting.pollers_drained = 0;
  if (events) return false;
  // Calls waiting for their turn (peer_service.h) are work now.
  if (!service.empty()) return false;
  TERN_TRY(join_devices(*this));
  // A poller that found work since its eventfd was last drained was most
  // likely signalled for it: drained before the second look (which sees
  // any completion after this read), or that signal would end the sleep at
  // once for nothing.
  for (uint64_t worked = waiting.pollers_worked; worked != 0; worked &= worked - 1) {
    const int fd = pollers[static_cast<size_t>(__builtin_ctzll(worked))].wake_fd;
    uint64_t v;
    if (fd >= 0) (void)!read(fd, &v, sizeof v);
  }
  waiting.pollers_worked = 0;
  // Armed from here: whatever happens next, the next poll() acks.
  waiting.armed = true;
  // The clients' next timer (or a server call's pull or push deadline): a
  // deadline due now means work, not sleep.
  // One clock read per sleep, in ticks, and the timer armed relative to it
  // rather than against CLOCK_MONOTONIC (where the kernel's clock is a
  // system call, an emulated guest's hpet, that is one call fewer). Not the
  // pass's cached reading: it may be kClockPasses passes old, and a deadline
  // due since then would be slept through -- under a simulation's virtual
  // clock, which moves between passes, until something else woke the engine
  // (tern-sim's lost wake-up check found it).
  if (const uint64_t at = next_timer_tick(); at != 0) {
    const uint64_t now = now_tick = now_ticks();
    if (at <= now) {
      cm_due = true;
      waiting.armed = false;
      return false;
    }
    // Under a simulation's virtual clock a timerfd (real time) would take
    // this deadline as a real one: the simulation wakes a sleeping engine
    // itself when it moves time on (docs/sim.md).
    if (clock_source() != ClockSource::kVirtual && at != waiting.timer_at) {
      const auto ns = std::max<uint64_t>(1, static_cast<uint64_t>(ns_from_ticks(at - now)));
      TERN_TRY(arm_timer_fd(waiting.timer_fd, ns, /*absolute=*/false, "engine"));
      waiting.timer_at = at;
    }
  }
  for (auto& dc : devices) {
    TERN_TRY(dc->scq->arm());
    TERN_TRY(dc->rcq->arm());
    TERN_TRY(dc->dev->arm_wait());
  }
  // The second look. A completion that reached a CQ before its arm raises
  // no notification (verbs' req_notify semantics), and pmd/shm's peer may
  // have published just before it saw our doorbell armed: only a poll after
  // arming finds those. Anything found means no sleep.
  waiting.rechecking = true;
  int work = poll();
  waiting.rechecking = false;
  if (work > 0) {
    (void)finish_wait();
    waiting.pollers_drained = 0;
    return false;
  }
  return true;
}

int EngineImpl::finish_wait() {
  waiting.armed = false;
  int events = 0;
  // The clock once per wake-up: this pass's receives take it as their
  // arrival (ServerConn's t_recv), and the timers run from it.
  now_tick = now_ticks();
  tick_fresh = true;
  // The engine's timer is due: its clients' ticks run in this poll(). The
  // ticks may call it due a little before the kernel's timer expires (the
  // TSC's rate is calibrated, not exact); its read then finds nothing
  // (non-blocking) and the timer stays marked, to be drained when it fires.
  if (waiting.timer_at != 0 && now_tick >= waiting.timer_at) {
    uint64_t v;
    if (read(waiting.timer_fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) waiting.timer_at = 0;
    cm_due = true;
    ++events;
  }
  // A poller's wake fd is drained here, before its poller runs in this
  // poll(): a completion it does not see then signals the fd again. Only
  // the ones epoll said fired when wait() knows, and those whose poller
  // found work since the last drain (its completions signalled it, most
  // likely: left readable, it would end the next sleep at once); reading
  // every one was an EAGAIN system call per idle poller per wake-up. One
  // signalled after that and not read stays readable and ends the next
  // sleep at once, which drains it: late, never lost.
  const bool known = waiting.fired_known;
  const uint64_t fired = waiting.pollers_fired | waiting.pollers_worked;
  waiting.fired_known = false;
  waiting.pollers_fired = waiting.pollers_worked = 0;
  for (size_t i = 0; i < pollers.size(); ++i) {
    const HostPoller& p = pollers[i];
    if (p.wake_fd < 0) continue;
    if (known && (i >= 64 || (fired >> i & 1) == 0)) continue;
    uint64_t v;
    if (read(p.wake_fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) ++events;
    if (i < 64) waiting.pollers_drained |= uint64_t{1} << i;
  }
  // ack_wait disarms and consumes what fired; poll_cm at once, not at the
  // next millisecond tick: a connection event may be what woke us.
  for (auto& dc : devices) {
    bool cm = dc->dev->ack_wait();
    if (dc->member && dc->member->ack_wake()) cm = true;  // a connection was handed to us
    if (cm) events += poll_cm(dc.get());
  }
  return events;
}

Result<bool> EngineImpl::wait(int timeout_ms) {
  auto idle = prepare_wait();
  if (!idle) return idle.status();
  if (!*idle) return false;
  // Every fd that fired, so that finish_wait() reads only the pollers'
  // eventfds among them; a full array may have left some out: unknown.
  epoll_event ev[16];
  // EINTR (a signal) ends the sleep like a timeout: the host checks its flags.
  const int n = epoll_wait(waiting.epfd, ev, 16, timeout_ms);
  if (n < 0 && errno != EINTR) return make_sys_error(Errc::kInternal, errno, "engine: epoll_wait");
  uint64_t fired = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = ev[i].data.u64;
    if (tag >= kPollerTag && tag - kPollerTag < 64) fired |= uint64_t{1} << (tag - kPollerTag);
  }
  waiting.fired_known = n >= 0 && n < 16 && pollers.size() <= 64;
  waiting.pollers_fired = fired;
  return true;
}

}  // namespace tern::rpc
