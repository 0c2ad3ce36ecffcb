// pmd/verbs asynchronous events: what the device says about itself, its
// ports and its QPs outside any completion (ibv_get_async_event). Read from
// poll_cm, never from the datapath; see verbs-driver.md for what each does.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

#include "base/log.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

namespace {

struct Subscriber {
  VerbsDevice* dev;
  std::vector<AsyncEvent> inbox;
};
struct ContextEntry {
  ibv_context* ctx;
  std::vector<Subscriber> subs;
};

// Process-wide: contexts are process-wide (librdmacm's). Control path only.
std::mutex g_mu;
std::vector<ContextEntry> g_contexts;

ContextEntry* find_entry(ibv_context* ctx) {
  for (ContextEntry& e : g_contexts)
    if (e.ctx == ctx) return &e;
  return nullptr;
}

}  // namespace

void async_subscribe(ibv_context* ctx, VerbsDevice* dev) {
  std::lock_guard<std::mutex> g(g_mu);
  ContextEntry* e = find_entry(ctx);
  if (e == nullptr) {
    // poll_cm must never block; the flag stays with the fd, set once.
    int fl = fcntl(ctx->async_fd, F_GETFL);
    if (fl < 0 || fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
      TERN_LOG(kWarn, "verbs", "%s: cannot make the async event fd non-blocking (errno %d): its events are ignored",
               ibv_get_device_name(ctx->device), errno);
      return;
    }
    g_contexts.push_back(ContextEntry{ctx, {}});
    e = &g_contexts.back();
  }
  for (const Subscriber& s : e->subs)
    if (s.dev == dev) return;
  e->subs.push_back(Subscriber{dev, {}});
}

void async_unsubscribe(ibv_context* ctx, VerbsDevice* dev) {
  std::lock_guard<std::mutex> g(g_mu);
  ContextEntry* e = find_entry(ctx);
  if (e == nullptr) return;
  std::erase_if(e->subs, [&](const Subscriber& s) { return s.dev == dev; });
  // The entry stays even without subscribers: the context outlives the
  // device (librdmacm keeps it) and is already non-blocking.
}

void async_drain(ibv_context* ctx, VerbsDevice* dev, std::vector<AsyncEvent>* out) {
  std::lock_guard<std::mutex> g(g_mu);
  ContextEntry* e = find_entry(ctx);
  if (e == nullptr) return;
  ibv_async_event ae;
  while (ibv_get_async_event(ctx, &ae) == 0) {
    AsyncEvent a;
    a.from = ctx;
    a.type = ae.event_type;
    switch (ae.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        a.qp_num = ae.element.qp != nullptr ? ae.element.qp->qp_num : 0;
        break;
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
      case IBV_EVENT_GID_CHANGE:
        a.port = static_cast<uint8_t>(ae.element.port_num);
        break;
      default:
        break;
    }
    // Every event must be acked, or destroying the object it names (and
    // closing the context) waits for ever.
    ibv_ack_async_event(&ae);
    for (Subscriber& s : e->subs) {
      s.inbox.push_back(a);
      // Another device's host may be asleep: its fd no longer shows the
      // event we just read. Its wake fd is its own eventfd (never blocks).
      if (s.dev != dev && s.dev->wake_fd() >= 0) {
        const uint64_t one = 1;
        (void)!write(s.dev->wake_fd(), &one, sizeof one);
      }
    }
  }
  for (Subscriber& s : e->subs)
    if (s.dev == dev) {
      out->insert(out->end(), s.inbox.begin(), s.inbox.end());
      s.inbox.clear();
    }
}

bool async_inbox_pending(ibv_context* ctx, VerbsDevice* dev) {
  std::lock_guard<std::mutex> g(g_mu);
  ContextEntry* e = find_entry(ctx);
  if (e == nullptr) return false;
  for (const Subscriber& s : e->subs)
    if (s.dev == dev) return !s.inbox.empty();
  return false;
}

// ---------------------------------------------------------------- the device's side

StatsView VerbsDevice::stats() const {
  return {{"async_events", &dst_.async_events}, {"port_err", &dst_.port_err},
          {"port_active", &dst_.port_active},   {"device_fatal", &dst_.device_fatal},
          {"qp_fatal", &dst_.qp_fatal},         {"qp_req_err", &dst_.qp_req_err},
          {"qp_access_err", &dst_.qp_access_err}, {"comm_est", &dst_.comm_est},
          {"addr_change", &dst_.addr_change},   {"last_wqe_reached", &dst_.last_wqe_reached},
          {"other_events", &dst_.other_events}, {"cm_held", &dst_.cm_held},
          {"port_down_early", &dst_.port_down_early},
          {"requests_refused_backlog", &dst_.requests_refused_backlog},
          {"requests_refused_backlog_peer", &dst_.requests_refused_backlog_peer}};
}

void VerbsDevice::poll_async() {
  std::vector<AsyncEvent> evs;
  async_drain(cm_ctx_, this, &evs);
  // A FastRegProvider's own context holds the QPs: their events come there.
  if (ctx_ != cm_ctx_) async_drain(ctx_, this, &evs);
  for (const AsyncEvent& e : evs) handle_async(e);
}

Status VerbsDevice::check_port(const char* what) {
  poll_async();  // the flag as of now, not as of the last poll_cm
  if (removed_) return make_error(Errc::kDisconnected, "verbs %s: device %s is gone", what, caps_.name.c_str());
  if (!port_up_)
    return make_error(Errc::kDisconnected, "verbs %s: %s port %u is down (link down or cable out); retry when it is up",
                      what, caps_.name.c_str(), port_num_);
  return Status::ok();
}

void VerbsDevice::qp_async_error(VerbsQp* qp, ibv_event_type t) {
  Status why = make_error(Errc::kDisconnected, "verbs: QP %u failed: %s (asynchronous event from %s)", qp->qp_num(),
                          ibv_event_type_str(t), caps_.name.c_str());
  // REQ_ERR and ACCESS_ERR: the responder refused a request of the peer's
  // (malformed, or beyond its rights). The host warns about those, naming
  // the peer; a QP that failed on its own is the driver's to report.
  bool peer_fault = t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR;
  if (peer_fault) TERN_LOG(kInfo, "verbs", "%s", why.message().c_str());
  else TERN_LOG(kWarn, "verbs", "%s", why.message().c_str());
  if (qp->state() == QpState::kConnecting && qp->active) {
    fail_connect(qp, CmEventType::kUnreachable, std::move(why));
  } else if (qp->state() == QpState::kRts || qp->state() == QpState::kConnecting || qp->error_pending_cm) {
    // Also a QP whose failing completion came first but is not reported yet:
    // the event says more than the completion's status.
    report_disconnected(qp, std::move(why), peer_fault);
  } else {
    qp->enter_error();  // never connected, or already reported: just flush
  }
}

void VerbsDevice::handle_async(const AsyncEvent& e) {
  dst_.async_events.add();
  // A provider's context reports the same ports again: count them once.
  const bool port_event_here = e.from == cm_ctx_ && e.port == port_num_;
  switch (e.type) {
    case IBV_EVENT_PORT_ERR:
      if (!port_event_here) return;
      dst_.port_err.add();
      if (port_up_)
        TERN_LOG(kWarn, "verbs", "%s port %u is down: connections through it will fail, new ones are refused",
                 caps_.name.c_str(), port_num_);
      port_up_ = false;
      return;
    case IBV_EVENT_PORT_ACTIVE:
      if (!port_event_here) return;
      dst_.port_active.add();
      if (!port_up_ && !removed_) TERN_LOG(kInfo, "verbs", "%s port %u is active again", caps_.name.c_str(), port_num_);
      port_up_ = !removed_;
      if (port_up_) flush_deferred_cm();  // the DREQs held back while it was down
      return;
    case IBV_EVENT_DEVICE_FATAL:
      // (Both contexts of a FastRegProvider report it; failing twice is a no-op.)
      dst_.device_fatal.add();
      TERN_LOG(kError, "verbs", "%s: fatal device error (IBV_EVENT_DEVICE_FATAL): every connection fails",
               caps_.name.c_str());
      removed_ = true;
      port_up_ = false;
      fail_all_qps(make_error(Errc::kDisconnected, "verbs: device %s failed (IBV_EVENT_DEVICE_FATAL)",
                              caps_.name.c_str()));
      return;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
      (e.type == IBV_EVENT_QP_FATAL ? dst_.qp_fatal : e.type == IBV_EVENT_QP_REQ_ERR ? dst_.qp_req_err
                                                                                   : dst_.qp_access_err)
          .add();
      // Another device's QP on a shared context: not ours to touch.
      if (VerbsQp* qp = qp_by_num(e.qp_num)) qp_async_error(qp, e.type);
      return;
    }
    case IBV_EVENT_COMM_EST:
      // A packet arrived on an accepted QP before the client's RTU: tell
      // rdma_cm, whose ESTABLISHED event then completes the accept (a
      // receive completion may already have, established_by_receive).
      if (VerbsQp* qp = qp_by_num(e.qp_num)) {
        dst_.comm_est.add();
        if (qp->state() == QpState::kConnecting && qp->cm_id() != nullptr) (void)rdma_notify(qp->cm_id(), e.type);
      }
      return;
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      // A QP of an SRQ in error will take no more receives from it, and the
      // completions of those it took are in its CQ: its drain markers'
      // flushes may be delivered now (rdmadev.h's drain rule, verbs_cq.cc).
      if (VerbsQp* qp = qp_by_num(e.qp_num)) {
        dst_.last_wqe_reached.add();
        qp->note_last_wqe_reached();
      }
      return;
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
      if (e.qp_num != 0 && qp_by_num(e.qp_num) == nullptr) return;  // another device's QP
      if (e.port != 0 && !port_event_here) return;
      dst_.other_events.add();
      TERN_LOG(kInfo, "verbs", "%s: %s%s%u", caps_.name.c_str(), ibv_event_type_str(e.type),
               e.qp_num != 0 ? " on QP " : " on port ", e.qp_num != 0 ? e.qp_num : e.port);
      return;
    default:
      if (e.qp_num != 0 && qp_by_num(e.qp_num) == nullptr) return;
      dst_.other_events.add();
      TERN_LOG(kInfo, "verbs", "%s: asynchronous event %s (%d), nothing to do", caps_.name.c_str(),
               ibv_event_type_str(e.type), static_cast<int>(e.type));
      return;
  }
}

}  // namespace tern::verbs
