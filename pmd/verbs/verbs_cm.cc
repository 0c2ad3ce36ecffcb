// pmd/verbs connection management: rdma_cm with a non-blocking event channel,
// QPs that belong to tern (created before connecting, moved through RTR/RTS
// here with the attributes rdma_cm resolves), and RDMA_CM events mapped to
// tern CmEvents.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

namespace {

constexpr int kResolveTimeoutMs = 2000;
// IB CM REJ reason "consumer defined": what rdma_reject() sends. Any other
// reason (e.g. 8, invalid service id: nobody listens) is not a refusal by
// the server's application.
constexpr int kRejConsumerDefined = 28;
constexpr uint8_t kTrailer0 = 'T', kTrailer1 = 'n', kLenCheck = 0xC3;

}  // namespace

std::string peer_host_of(rdma_cm_id* id) {
  // The address alone: a client's port and QP change when it reconnects.
  const sockaddr* sa = rdma_get_peer_addr(id);
  char host[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, host, sizeof host);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, host, sizeof host);
  return host;
}

void encode_private_data(std::span<const uint8_t> in, uint8_t* out) {
  std::memset(out, 0, kCmRawPrivateData);
  if (!in.empty()) std::memcpy(out, in.data(), in.size());
  out[52] = kTrailer0;
  out[53] = kTrailer1;
  out[54] = static_cast<uint8_t>(in.size());
  out[55] = static_cast<uint8_t>(in.size() ^ kLenCheck);
}

std::vector<uint8_t> decode_private_data(const void* p, size_t len) {
  const auto* b = static_cast<const uint8_t*>(p);
  if (b == nullptr || len == 0) return {};
  if (len >= kCmRawPrivateData && b[52] == kTrailer0 && b[53] == kTrailer1 && b[54] <= kMaxPrivateData &&
      b[55] == (b[54] ^ kLenCheck))
    return {b, b + b[54]};
  return {b, b + len};  // not a tern peer (e.g. the kernel's svcrdma): all of it
}

// The client's RTU and its first SEND race, and the SEND may win: a receive
// completes on an accepted QP whose ESTABLISHED event has not come. The QP
// has been RTS since accept() and a message proves the client is too, so the
// connection is up now (as the kernel's rdma_notify(IB_EVENT_COMM_EST) path
// says); the CM's own ESTABLISHED event then finds the QP connected and is
// dropped.
void VerbsDevice::established_by_receive(VerbsQp* qp) {
  (void)rdma_notify(qp->cm_id(), IBV_EVENT_COMM_EST);  // best effort: the RTU may still come
  qp->set_state(QpState::kRts);
  CmEvent ev{CmEventType::kEstablished};
  ev.qp = qp;
  ev.private_data = qp->peer_private();
  queue_event(std::move(ev));
}

VerbsConnRequest::~VerbsConnRequest() {
  if (id != nullptr) {
    if (dev != nullptr) {
      dev->drop_request(id);
    } else {
      // Detached: no device to ask whether its port is up; refuse it plainly.
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
    }
  }
  if (transit != nullptr) rdma_destroy_event_channel(transit);
}

// The request's id moves to a channel of its own, so that its events (the
// client giving up) no longer reach this device's thread, and the adopting
// device moves it to its own channel. rdma_migrate_id waits for the id's
// events to be acked; poll_cm acks each one as it reads it.
Result<std::unique_ptr<ConnRequest>> VerbsDevice::detach(ConnRequest* reqi) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == reqi; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "verbs detach: unknown connection request");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) return make_sys_error(Errc::kNoResources, errno, "verbs detach: rdma_create_event_channel");
  if (rdma_migrate_id((*it)->id, ch) != 0) {
    int e = errno;
    rdma_destroy_event_channel(ch);
    return make_sys_error(Errc::kInternal, e, "verbs detach: rdma_migrate_id");
  }
  std::unique_ptr<VerbsConnRequest> req = std::move(*it);
  requests_.erase(it);
  req->dev = nullptr;
  req->transit = ch;
  return std::unique_ptr<ConnRequest>(std::move(req));
}

Result<ConnRequest*> VerbsDevice::adopt(std::unique_ptr<ConnRequest> reqi) {
  auto* req = dynamic_cast<VerbsConnRequest*>(reqi.get());
  if (req == nullptr || req->dev != nullptr || req->id == nullptr)
    return make_error(Errc::kInvalidArgument, "verbs adopt: not a detached connection request of pmd/verbs");
  if (req->id->verbs != cm_ctx_)
    return make_error(Errc::kInvalidArgument, "verbs adopt: the request came in on %s, this device is %s",
                      req->id->verbs ? ibv_get_device_name(req->id->verbs->device) : "no device", caps_.name.c_str());
  if (rdma_migrate_id(req->id, channel_) != 0)
    return make_sys_error(Errc::kInternal, errno, "verbs adopt: rdma_migrate_id");
  rdma_destroy_event_channel(req->transit);
  req->transit = nullptr;
  req->dev = this;
  reqi.release();
  requests_.push_back(std::unique_ptr<VerbsConnRequest>(req));
  return static_cast<ConnRequest*>(req);
}

Status VerbsDevice::listen() {
  if (listen_id_ != nullptr) return make_error(Errc::kBadState, "verbs: already listening");
  if (cfg_.addr.empty()) return make_error(Errc::kInvalidArgument, "verbs: listen needs addr=<ip> in the spec");
  TERN_TRY(check_port("listen"));
  sockaddr_storage sa;
  TERN_TRY(make_sockaddr(cfg_.port, &sa));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0)
    return make_sys_error(Errc::kNoResources, errno, "verbs: rdma_create_id");
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sa)) != 0 || rdma_listen(id, 128) != 0) {
    int e = errno;
    rdma_destroy_id(id);
    return make_sys_error(e == EADDRINUSE ? Errc::kBadState : Errc::kInvalidArgument, e,
                          "verbs: cannot listen on %s port %u", cfg_.addr.c_str(), cfg_.port);
  }
  listen_id_ = id;
  TERN_LOG(kInfo, "verbs", "listening on %s port %u (%s)", cfg_.addr.c_str(), cfg_.port, caps_.name.c_str());
  return Status::ok();
}

Status VerbsDevice::connect(Qp* qpi, std::span<const uint8_t> pdata) {
  VerbsQp* qp = own_qp(qpi);
  if (qp == nullptr) return make_error(Errc::kInvalidArgument, "verbs connect: QP is not from this device");
  if (qp->state() != QpState::kInit)
    return make_error(Errc::kBadState, "verbs connect: QP %u is %s, not init", qp->qp_num(),
                      qp_state_name(qp->state()));
  if (pdata.size() > kMaxPrivateData)
    return make_error(Errc::kInvalidArgument, "verbs connect: %zu bytes of private data, at most %u", pdata.size(),
                      kMaxPrivateData);
  if (cfg_.addr.empty()) return make_error(Errc::kInvalidArgument, "verbs: connect needs addr=<ip> in the spec");
  TERN_TRY(check_port("connect"));
  if (reaper_.full())
    return make_sys_error(Errc::kNoResources, EAGAIN,
                          "verbs connect: %zu closed connections' CM ids are still being destroyed by the kernel",
                          reaper_.backlog());
  sockaddr_storage src, dst;
  TERN_TRY(make_sockaddr(0, &src));
  TERN_TRY(make_sockaddr(cfg_.port, &dst));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel_, &id, qp, RDMA_PS_TCP) != 0)
    return make_sys_error(Errc::kNoResources, errno, "verbs: rdma_create_id");
  qp->set_cm_id(id);
  apply_ack_timeout(id);
  qp->active = true;
  qp->my_private().assign(pdata.begin(), pdata.end());
  qp->set_state(QpState::kConnecting);
  // A peer elsewhere: rdma_cm picks the source address from the route. A
  // loopback connect to our own address binds to it (RoCE cannot route
  // loopback without it).
  sockaddr* srcp = addr_is_local_ ? reinterpret_cast<sockaddr*>(&src) : nullptr;
  if (rdma_resolve_addr(id, srcp, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs) != 0)
    fail_connect(qp, CmEventType::kUnreachable,
                 make_sys_error(Errc::kDisconnected, errno, "verbs: rdma_resolve_addr(%s)", cfg_.addr.c_str()));
  return Status::ok();
}

Status VerbsDevice::accept(ConnRequest* reqi, Qp* qpi, std::span<const uint8_t> pdata) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == reqi; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "verbs accept: unknown connection request");
  VerbsQp* qp = own_qp(qpi);
  if (qp == nullptr) return make_error(Errc::kInvalidArgument, "verbs accept: QP is not from this device");
  if (qp->state() != QpState::kInit)
    return make_error(Errc::kBadState, "verbs accept: QP %u is %s, not init", qp->qp_num(),
                      qp_state_name(qp->state()));
  if (pdata.size() > kMaxPrivateData)
    return make_error(Errc::kInvalidArgument, "verbs accept: %zu bytes of private data, at most %u", pdata.size(),
                      kMaxPrivateData);
  std::unique_ptr<VerbsConnRequest> req = std::move(*it);
  requests_.erase(it);  // from here on, req's destructor rejects on failure
  if (req->id->verbs != cm_ctx_)
    return make_error(Errc::kInvalidArgument, "verbs accept: the request came in on %s, the QP is on %s",
                      ibv_get_device_name(req->id->verbs->device), caps_.name.c_str());
  // The REP would not leave (cm_may_send); the request is dropped, its REJ
  // held back with it.
  if (!cm_may_send("REP"))
    return make_error(Errc::kDisconnected, "verbs accept: %s port %u went down", caps_.name.c_str(), port_num_);
  uint8_t resp = std::min(max_rd_atom_, req->responder_resources);
  uint8_t init = std::min(max_init_rd_atom_, req->initiator_depth);
  apply_ack_timeout(req->id);
  TERN_TRY(qp->to_rtr_rts(req->id, resp, init));
  uint8_t raw[kCmRawPrivateData];
  encode_private_data(pdata, raw);
  rdma_conn_param p;
  std::memset(&p, 0, sizeof p);
  p.private_data = raw;
  p.private_data_len = kCmRawPrivateData;
  p.responder_resources = resp;
  p.initiator_depth = init;
  p.rnr_retry_count = 7;
  p.qp_num = qp->qp_num();
  if (rdma_accept(req->id, &p) != 0) {
    int e = errno;
    qp->enter_error();
    return make_sys_error(Errc::kDisconnected, e, "verbs: rdma_accept");
  }
  req->id->context = qp;
  qp->set_cm_id(req->id);
  req->id = nullptr;
  qp->peer_private() = req->private_data();
  qp->set_state(QpState::kConnecting);  // kEstablished when the client's RTU arrives
  return Status::ok();
}

Status VerbsDevice::reject(ConnRequest* reqi, std::span<const uint8_t> pdata) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == reqi; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "verbs reject: unknown connection request");
  if (pdata.size() > kMaxPrivateData)
    return make_error(Errc::kInvalidArgument, "verbs reject: %zu bytes of private data, at most %u", pdata.size(),
                      kMaxPrivateData);
  uint8_t raw[kCmRawPrivateData];
  encode_private_data(pdata, raw);
  drop_request((*it)->id, std::span<const uint8_t>(raw, kCmRawPrivateData));
  (*it)->id = nullptr;
  requests_.erase(it);
  return Status::ok();
}

Status VerbsDevice::disconnect(Qp* qpi) {
  VerbsQp* qp = own_qp(qpi);
  if (qp == nullptr) return make_error(Errc::kInvalidArgument, "verbs disconnect: QP is not from this device");
  if (qp->state() == QpState::kRts) {
    // ERR first, so that everything outstanding flushes now; the DREQ tells
    // the peer; our own kDisconnected comes with rdma_cm's DISCONNECTED.
    qp->enter_error();
    if (cm_may_send("DREQ")) {
      rdma_disconnect(qp->cm_id());
    } else {
      // rdma_cm's DISCONNECTED would only come after the port is back (the
      // DREQ waits for it: send_dreq).
      report_disconnected(qp, make_error(Errc::kDisconnected, "verbs: closed locally while %s port %u is down",
                                         caps_.name.c_str(), port_num_));
    }
  } else if (qp->state() == QpState::kConnecting) {
    if (qp->cm_id() != nullptr) {
      destroy_cm_id(qp->cm_id());  // a REJ (REQ sent) or a DREQ (REP received): not through a down port
      qp->set_cm_id(nullptr);
    }
    report_disconnected(qp, make_error(Errc::kDisconnected, "connect abandoned"));
  }
  return Status::ok();
}

void VerbsDevice::fail_connect(VerbsQp* qp, CmEventType type, Status why, std::vector<uint8_t> pdata) {
  qp->enter_error();  // receives posted before connecting flush
  qp->disconnect_reported = true;  // never connected: no kDisconnected
  CmEvent ev{type};
  ev.qp = qp;
  ev.status = std::move(why);
  ev.private_data = std::move(pdata);
  queue_event(std::move(ev));
}

void VerbsDevice::report_disconnected(VerbsQp* qp, Status why, bool peer_fault) {
  if (qp->disconnect_reported) return;
  qp->disconnect_reported = true;
  qp->enter_error();
  // Tell the peer (or answer its DREQ); harmless if already done.
  send_dreq(qp);
  CmEvent ev{CmEventType::kDisconnected};
  ev.qp = qp;
  ev.status = std::move(why);
  ev.peer_fault = peer_fault;
  queue_event(std::move(ev));
}

// CM messages wait for the port. While the port is down a CM message can
// only fail, and on rxe (kernel 6.1) one failed send on the CM's QP1 ends
// that QP's receiving for good: QP1 is back in RTS afterwards and sends,
// but every CM message that arrives is dropped, so no connection on the
// device completes until it is re-created (measured in the VM:
// docs/verbs-driver.md). Any message does it -- a REQ as much as a
// DREQ. So none is sent while the port is down: no REQ (the connect fails),
// no REP (the accept fails), no RTU (the connect fails), no REJ and no
// DREQ (destroying an id that would send one parks it), no DREQ or DREP
// from rdma_disconnect (deferred). What is held back goes when the port is
// active again.
//
// The PORT_ERR event comes a little after the port is down, and the engine
// reads events about once a millisecond (later still when its thread is
// not running), so the port's state is read from the device before each
// message. (On rxe over a netdev without link settings, each read also
// logs "speed is unknown" in the kernel's log; control path only.) What
// the kernel's CM retransmits on its own -- a REQ, REP or DREQ still
// unanswered when the port went down -- cannot be held back from here.
bool VerbsDevice::cm_may_send(const char* what) {
  if (removed_) return true;  // nothing left to wedge; removal wants the ids gone
  if (!port_up_) {
    dst_.cm_held.add();
    return false;
  }
  ibv_port_attr pa;
  std::memset(&pa, 0, sizeof pa);
  if (ibv_query_port(cm_ctx_, port_num_, &pa) == 0 && pa.state != IBV_PORT_ACTIVE) {
    // port_up_ stays as the events say: PORT_ERR is on its way, and the
    // PORT_ACTIVE after it sends what is held back.
    dst_.port_down_early.add();
    dst_.cm_held.add();
    TERN_LOG(kInfo, "verbs", "%s port %u is %s before its event came: %s held back", caps_.name.c_str(),
             port_num_, ibv_port_state_str(pa.state), what);
    return false;
  }
  return true;
}

// A DREQ (from rdma_disconnect or from destroying a connected id), or the
// DREP answering the peer's DREQ, waits for the port: the local side is
// already reported and flushed, and the peer learns when the port is back
// (or from its own failing WRs).
void VerbsDevice::send_dreq(VerbsQp* qp) {
  if (qp->cm_id() == nullptr) return;
  if (cm_may_send("DREQ/DREP")) {
    rdma_disconnect(qp->cm_id());
    qp->dreq_deferred = false;
  } else {
    qp->dreq_deferred = true;
  }
}

void VerbsDevice::destroy_cm_id(rdma_cm_id* id) {
  if (cm_may_send("destroy")) reap_cm_id(id);
  else park_cm_id(id);
}

void VerbsDevice::reap_cm_id(rdma_cm_id* id) {
  id->context = nullptr;  // read by poll_cm before each ack: its late events are dropped
  reaper_.reap(id, peer_host_of(id));  // counted for its peer (a churner is refused alone)
}

void VerbsDevice::park_cm_id(rdma_cm_id* id) {
  id->context = nullptr;  // its QP is gone: its late events are dropped (handle_event)
  parked_ids_.push_back(id);
}

void VerbsDevice::drop_request(rdma_cm_id* id, std::span<const uint8_t> raw_pdata) {
  if (!cm_may_send("REJ")) {
    park_cm_id(id);  // its REJ goes when it is destroyed
    return;
  }
  // Best effort: a client already gone needs no answer.
  rdma_reject(id, raw_pdata.empty() ? nullptr : raw_pdata.data(), static_cast<uint8_t>(raw_pdata.size()));
  reap_cm_id(id);
}

void VerbsDevice::flush_deferred_cm() {
  for (VerbsQp* q : qps_)
    if (q != nullptr && q->dreq_deferred) send_dreq(q);
  if (parked_ids_.empty() || !cm_may_send("destroy")) return;  // down again already: the next PORT_ACTIVE
  std::vector<rdma_cm_id*> ids = std::move(parked_ids_);
  parked_ids_.clear();
  for (rdma_cm_id* id : ids) reap_cm_id(id);
}

void VerbsDevice::apply_ack_timeout(rdma_cm_id* id) {
  if (cfg_.ack_timeout < 0) return;
  // rdma_init_qp_attr(RTS) then carries it into the QP (to_rtr_rts).
  uint8_t t = static_cast<uint8_t>(cfg_.ack_timeout);
  if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof t) != 0)
    TERN_LOG(kWarn, "verbs", "ack_timeout=%d not applied (rdma_set_option: errno %d); rdma_cm's default is used",
             cfg_.ack_timeout, errno);
}

// The device is gone or dead: every QP is reported once, as the kind of
// event it was waiting for (a client still connecting: kUnreachable), and
// its WRs flush (enter_error; the driver completes what the device won't).
void VerbsDevice::fail_all_qps(const Status& why) {
  for (VerbsQp* q : qps_) {
    if (q == nullptr) continue;
    if (q->state() == QpState::kConnecting && q->active) fail_connect(q, CmEventType::kUnreachable, why);
    else if (q->state() == QpState::kRts || q->state() == QpState::kConnecting || q->error_pending_cm)
      report_disconnected(q, why);
    else q->enter_error();
  }
}

void VerbsDevice::note_qp_error(VerbsQp* qp) {
  if (std::find(errored_.begin(), errored_.end(), qp) == errored_.end()) errored_.push_back(qp);
  if (armed_) self_wake();  // poll_cm reports it
}

void VerbsDevice::handle_qp_errors() {
  std::vector<VerbsQp*> errs = std::move(errored_);
  errored_.clear();
  for (VerbsQp* qp : errs) {
    qp->error_pending_cm = false;
    report_disconnected(qp, qp->error_status);
  }
}

void VerbsDevice::handle_event(const rdma_cm_event& e, void* ctx, std::vector<uint8_t> pdata) {
  rdma_cm_id* id = e.id;
  if (e.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
    if (removed_) {
      rdma_reject(id, nullptr, 0);
      reap_cm_id(id);
      return;
    }
    const std::string peer = peer_host_of(id);
    const bool all_full = reaper_.full();
    if (all_full || reaper_.peer_full(peer)) {
      // The CM is kMaxBacklog destroys behind (verbs_cm_reaper.h), or this
      // peer's own closed connections are kMaxPerPeer of them: no new
      // connection (for anyone, or for this peer) until it catches up. This
      // id is destroyed here, not queued behind them: the long destroys
      // seen were of ids with a connection to take down (its disconnect and
      // timewait), and one only ever refused has none (expected; the VM
      // never reached the bound).
      if (all_full) {
        if (!reaper_full_warned_)
          TERN_LOG(kWarn, "verbs", "%s: refusing connection requests: %zu closed connections' CM ids still being "
                   "destroyed by the kernel", caps_.name.c_str(), reaper_.backlog());
        reaper_full_warned_ = true;
        dst_.requests_refused_backlog.add();
      } else {
        if (!reaper_peer_warned_)
          TERN_LOG(kWarn, "verbs", "%s: refusing connection requests of %s: %zu of its closed connections' CM ids "
                   "are still being destroyed by the kernel (said once until a request is accepted again)",
                   caps_.name.c_str(), peer.c_str(), reaper_.peer_backlog(peer));
        reaper_peer_warned_ = true;
        dst_.requests_refused_backlog_peer.add();
      }
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
      return;
    }
    reaper_full_warned_ = false;
    reaper_peer_warned_ = false;
    id->context = nullptr;
    requests_.push_back(std::make_unique<VerbsConnRequest>(this, id, pdata, e.param.conn.responder_resources,
                                                           e.param.conn.initiator_depth));
    requests_.back()->set_peer_host(peer);  // the REQ's source address, read above
    CmEvent ev{CmEventType::kConnectRequest};
    ev.request = requests_.back().get();
    ev.private_data = std::move(pdata);
    queue_event(std::move(ev));
    return;
  }
  if (e.event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
    // One event per id on the device; the first one fails everything.
    if (removed_) return;
    removed_ = true;
    port_up_ = false;
    TERN_LOG(kWarn, "verbs", "%s was removed (RDMA_CM_EVENT_DEVICE_REMOVAL): every connection fails",
             caps_.name.c_str());
    fail_all_qps(make_error(Errc::kDisconnected, "verbs: device %s was removed", caps_.name.c_str()));
    return;
  }
  if (e.event == RDMA_CM_EVENT_ADDR_CHANGE) {
    // The address the connection uses moved (bonding failover, address
    // removed): like xprtrdma, give the connection up; the engine
    // reconnects through whatever now owns the address.
    dst_.addr_change.add();
    VerbsQp* q = id == listen_id_ ? nullptr : own_qp(static_cast<VerbsQp*>(ctx));
    TERN_LOG(kWarn, "verbs", "%s: RDMA_CM_EVENT_ADDR_CHANGE on %s", caps_.name.c_str(),
             id == listen_id_ ? "the listener (it keeps listening)" : q != nullptr ? "a connection" : "a stale id");
    if (q == nullptr || q->cm_id() != id) return;
    Status why = make_error(Errc::kDisconnected, "verbs: the address of QP %u's connection changed (%s)",
                            q->qp_num(), rdma_event_str(e.event));
    if (q->state() == QpState::kConnecting && q->active) fail_connect(q, CmEventType::kUnreachable, std::move(why));
    else if (q->state() == QpState::kRts || q->state() == QpState::kConnecting || q->error_pending_cm)
      report_disconnected(q, std::move(why));
    return;
  }
  VerbsQp* qp = id == listen_id_ ? nullptr : own_qp(static_cast<VerbsQp*>(ctx));
  if (qp == nullptr || qp->cm_id() != id) return;  // a pending request's or a stale id: nothing to tell
  const bool connecting = qp->state() == QpState::kConnecting;
  switch (e.event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (!connecting) return;
      if (id->verbs != cm_ctx_) {
        fail_connect(qp, CmEventType::kUnreachable,
                     make_error(Errc::kDisconnected, "verbs: %s is reached through %s, not %s", cfg_.addr.c_str(),
                                id->verbs ? ibv_get_device_name(id->verbs->device) : "no RDMA device",
                                caps_.name.c_str()));
      } else if (rdma_resolve_route(id, kResolveTimeoutMs) != 0) {
        fail_connect(qp, CmEventType::kUnreachable, make_sys_error(Errc::kDisconnected, errno, "rdma_resolve_route"));
      }
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      if (!connecting) return;
      if (!cm_may_send("REQ")) {  // no REQ through a down port
        fail_connect(qp, CmEventType::kUnreachable,
                     make_error(Errc::kDisconnected, "verbs: %s port %u went down while connecting to %s",
                                caps_.name.c_str(), port_num_, cfg_.addr.c_str()));
        return;
      }
      uint8_t raw[kCmRawPrivateData];
      encode_private_data(qp->my_private(), raw);
      rdma_conn_param p;
      std::memset(&p, 0, sizeof p);
      p.private_data = raw;
      p.private_data_len = kCmRawPrivateData;
      p.responder_resources = max_rd_atom_;
      p.initiator_depth = max_init_rd_atom_;
      p.retry_count = 7;
      p.rnr_retry_count = 7;  // a SEND waits for the peer's receive, as rdmadev.h says
      p.qp_num = qp->qp_num();
      if (rdma_connect(id, &p) != 0)
        fail_connect(qp, CmEventType::kUnreachable, make_sys_error(Errc::kDisconnected, errno, "rdma_connect"));
      return;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE: {
      // rdma_cm does not own the QP, so the REP comes to us: RTR, RTS, RTU.
      if (!connecting) return;
      if (!cm_may_send("RTU")) {  // no RTU (nor REJ) through a down port; the id's REJ waits with it
        fail_connect(qp, CmEventType::kUnreachable,
                     make_error(Errc::kDisconnected, "verbs: %s port %u went down while connecting to %s",
                                caps_.name.c_str(), port_num_, cfg_.addr.c_str()));
        return;
      }
      // The REP's values as the CM reports them to this end (already
      // swapped): responder_resources = the server's initiator depth, the
      // RDMA Reads it will have outstanding toward us (read chunks).
      uint8_t resp = std::min(max_rd_atom_, e.param.conn.responder_resources);
      uint8_t init = std::min(max_init_rd_atom_, e.param.conn.initiator_depth);
      Status st = qp->to_rtr_rts(id, resp, init);
      if (st.is_ok() && rdma_establish(id) != 0) st = make_sys_error(Errc::kDisconnected, errno, "rdma_establish");
      if (!st.is_ok()) {
        if (cm_may_send("REJ")) rdma_reject(id, nullptr, 0);
        fail_connect(qp, CmEventType::kUnreachable, st);
        return;
      }
      qp->set_state(QpState::kRts);
      CmEvent ev{CmEventType::kEstablished};
      ev.qp = qp;
      ev.private_data = std::move(pdata);
      queue_event(std::move(ev));
      return;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
      if (!connecting) return;
      qp->set_state(QpState::kRts);
      CmEvent ev{CmEventType::kEstablished};
      ev.qp = qp;
      ev.private_data = qp->peer_private();  // the client's, from its REQ
      queue_event(std::move(ev));
      return;
    }
    case RDMA_CM_EVENT_REJECTED:
      if (!connecting) return;
      if (qp->active && e.status == kRejConsumerDefined) {
        fail_connect(qp, CmEventType::kRejected, make_error(Errc::kRemoteError, "verbs: the server rejected the connection"),
                     std::move(pdata));
      } else if (qp->active) {
        fail_connect(qp, CmEventType::kUnreachable,
                     make_error(Errc::kDisconnected, "verbs: %s port %u refused the connection (CM reject reason %d: "
                                "nobody listens there?)", cfg_.addr.c_str(), cfg_.port, e.status));
      } else {
        report_disconnected(qp, make_error(Errc::kDisconnected, "verbs: the client gave up (reject reason %d)", e.status));
      }
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE: {
      Status why = make_sys_error(Errc::kDisconnected, e.status < 0 ? -e.status : 0, "verbs: %s (%s port %u)",
                                  rdma_event_str(e.event), cfg_.addr.c_str(), cfg_.port);
      if (connecting && qp->active) fail_connect(qp, CmEventType::kUnreachable, std::move(why));
      else report_disconnected(qp, std::move(why));
      return;
    }
    case RDMA_CM_EVENT_DISCONNECTED:
      if (qp->disconnect_reported) {
        // Lost and reported already (a QP error, a local close): still
        // answer the peer's DREQ now, or its CM sends it again every few
        // seconds until our id is destroyed -- and one of those sends
        // meeting a down port breaks rxe's CM (cm_may_send). After our own
        // DREQ's answer this sends nothing.
        send_dreq(qp);
        return;
      }
      report_disconnected(qp, make_error(Errc::kDisconnected, "verbs: the connection was closed (QP %u)", qp->qp_num()));
      return;
    default:
      return;  // TIMEWAIT_EXIT, ...: nothing for the engine
  }
}

bool VerbsDevice::poll_cm(CmEvent* ev) {
  if (events_.empty()) {
    // Asynchronous events first: a QP's fatal event names the cause better
    // than the failed completion handle_qp_errors would report.
    poll_async();
    handle_qp_errors();
    rdma_cm_event* e = nullptr;
    while (rdma_get_cm_event(channel_, &e) == 0) {
      // Copy what we need, then ack: the private data lives only until then,
      // and rdma_destroy_id waits for every event of its id to be acked.
      // The context too: once acked, an id being destroyed by the reaper may
      // be freed at any moment, and only ids with a context are used after.
      rdma_cm_event copy = *e;
      void* ctx = e->id != nullptr ? e->id->context : nullptr;
      std::vector<uint8_t> pdata = decode_private_data(e->param.conn.private_data, e->param.conn.private_data_len);
      rdma_ack_cm_event(e);
      copy.param.conn.private_data = nullptr;
      handle_event(copy, ctx, std::move(pdata));
    }
  }
  if (events_.empty()) return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

std::string VerbsQp::peer() const {
  if (cm_id_ == nullptr) return {};
  // "169.254.77.1:20049 qp 17": the address and the QP at the other end.
  const sockaddr* sa = rdma_get_peer_addr(cm_id_);
  char host[INET6_ADDRSTRLEN] = "?";
  std::string who;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    who = std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    who = std::string("[") + host + "]:" + std::to_string(ntohs(in6->sin6_port));
  } else {
    who = "?";
  }
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (qp_ != nullptr && ibv_query_qp(qp_, &attr, IBV_QP_DEST_QPN, &init) == 0 && attr.dest_qp_num != 0)
    who += " qp " + std::to_string(attr.dest_qp_num);
  return who;
}

std::string VerbsQp::peer_host() const {
  if (cm_id_ == nullptr) return {};
  return peer_host_of(cm_id_);
}

}  // namespace tern::verbs
