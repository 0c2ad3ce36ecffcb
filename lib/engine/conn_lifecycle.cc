// A connection's life (connection.h): set-up of its queues, establishment,
// loss, the drain, and teardown. What each role does at those moments is in
// its on_lost() / on_drained().
#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/server_conn.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

namespace {

uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 2;
  while (p < v) p <<= 1;
  return p;
}

// Send-queue depth: per call at most its read and write chunks' REG_MRs (or,
// on a server, READs and WRITEs) and as many LOCAL_INVs, plus the Send. The
// send-context ring bounds the chains in flight; the budget keeps the WR
// total under the depth whatever the mix, and what does not fit waits.
uint32_t sq_depth_for(const EngineOptions& o, const DeviceCaps& caps) {
  uint32_t per_call = 2 * 3 * 4 + 2;
  return std::min<uint32_t>(caps.max_qp_wr, std::max<uint32_t>(64, o.credits * per_call));
}

uint32_t ring_size_for(const EngineOptions& o) { return pow2_at_least(o.credits * 2 + o.send_batch + 2); }

}  // namespace

ConnBase::ConnBase(ConnCore* e, DeviceCtx* d, const ConnTransitions* machine, const char* role)
    : ConnMachine(machine, role),
      core(e),
      dc(d),
      id(e->next_conn_id++),
      pd_ctx(d->shared.get()),
      t_created(now_ticks()) {
  if (e->opt.breakdown || e->trace != nullptr) {
    breakdown = std::make_unique<Breakdown>(e->ns_per_tick);
    breakdown->trace = e->trace.get();
  }
}

ConnBase::~ConnBase() {
  if (qp && qp_live()) (void)dc->dev->disconnect(qp.get());
  if (by_qpn_entered && qp) dc->forget_qpn(qp->qp_num());
  // The QP first: nothing can reach this connection's buffers after it.
  qp.reset();
  if (own_rq) {
    own_rq->release_all();
    core->remove_queue(own_rq->id());
  }
  own_rq.reset();
  own_pd.reset();  // after the QP, which was created in it
  core->engine_stats.connections.sub();
}

std::string ConnBase::peer_name() const {
  std::string who = qp ? qp->peer() : std::string();
  return std::string(peer_role()) + " " + (who.empty() ? "?" : who) + " (" + dc->spec + ")";
}

void ConnBase::protocol_error(Status reason) {
  // A connection already lost to a flush (its QP went to error before the
  // driver's event said why) still hears the reason: the peer's fault.
  if (!qp_live() && !lost_to_flush) return;
  if (lost_to_flush && !qp_live()) {
    lost_to_flush = false;
    core->engine_stats.protocol_errors.add();
    why = reason;
    TERN_LOG(kWarn, "engine", "conn %llu: dropping the connection to %s: %s", static_cast<unsigned long long>(id),
             peer_name().c_str(), reason.message().c_str());
    return;
  }
  core->engine_stats.protocol_errors.add();
  TERN_LOG(kWarn, "engine", "conn %llu: dropping the connection to %s: %s", static_cast<unsigned long long>(id),
           peer_name().c_str(), reason.message().c_str());
  on_disconnected(std::move(reason));
}

Status ConnBase::setup_queues() {
  const EngineOptions& o = core->opt;
  const DeviceCaps& caps = dc->dev->caps();
  // The device's shared receive queue lives in its shared PD; a connection
  // in a PD of its own, or on a device without one, has a queue of its own:
  // as many receives as replies it may wait for (client) or credits it may
  // grant (server), and one to spare.
  const bool own_queue = !dc->recv || own_pd;
  const uint32_t own_depth = o.credits + 1;
  // A send-context ring for this QP (a reconnect makes a fresh one).
  const uint32_t ring = ring_size_for(o);
  sq_ = std::make_unique<SendQueue>(sq_depth_for(o, caps), ring, std::min(o.send_batch, ring / 2));
  sq_drained = rq_drained = sq_marker = rq_marker = false;
  QpInit qi;
  qi.pd = pd_ctx->pd.get();
  qi.send_cq = dc->scq.get();
  qi.recv_cq = dc->rcq.get();
  qi.sq_depth = sq_->budget().depth();
  qi.rq_depth = own_queue ? std::min<uint32_t>(caps.max_qp_wr, own_depth + 1) : 1;  // +1: the drain marker
  qi.max_send_sge = std::min<uint32_t>(caps.max_send_sge, 2);
  qi.max_recv_sge = 1;
  qi.srq = own_queue ? nullptr : dc->srq.get();
  auto q = dc->dev->create_qp(qi);
  if (!q) return q.status();
  qp = std::move(q).value();
  dc->by_qpn[qp->qp_num()] = this;
  if (dc->last_qpn == qp->qp_num()) dc->last_qpn = UINT32_MAX;
  by_qpn_entered = true;
  if (own_queue) {
    uint16_t qid = core->add_queue(nullptr);
    own_rq = std::make_unique<RecvQueue>(core->recv_bufs.get(), own_depth, o.credits, nullptr, qp.get(), qid,
                                         pd_ctx->arena_lkey());
    core->queues[qid] = own_rq.get();
    // Two to start (a first credit and a spare); more as load asks.
    if (own_rq->grow(2) < 2)
      return make_error(Errc::kNoResources, "engine: no receive buffers left (EngineOptions::recv_buffers)");
    rq = own_rq.get();
    // Receives may be posted before the connection is up.
    core->queue_needs_post(rq);
  } else {
    rq = dc->recv.get();
    // Only this connection's own QP drains receives of its own.
    rq_drained = true;
    rq_marker = true;
  }
  return Status::ok();
}

void ConnBase::on_established(std::span<const uint8_t> peer_pdata) {
  // A server may learn it first from a receive.
  if (phase() != State::kConnecting && phase() != State::kReconnecting) return;
  on_peer_pdata(peer_pdata);
  raise(ConnEvent::kEstablished);
  t_established = t_last = now_ticks();
  register_telemetry();
  TERN_LOG(kInfo, "engine", "conn %llu: connection to %s up: inline send %u recv %u, remote invalidation %s",
           static_cast<unsigned long long>(id), peer_name().c_str(), inline_send, inline_recv,
           remote_inv ? "on" : "off");
  on_up();
  want_service();  // a client's backlog may wait for this
}

void ConnBase::on_disconnected(Status reason) {
  if (!qp_live()) return;  // lost already, or between a client's attempts (no QP)
  why = std::move(reason);
  core->engine_stats.disconnects.add();
  const bool was_connecting = phase() != State::kReady;
  raise(ConnEvent::kLost);
  // The engine may give up on a connection whose QP is still up (a post it
  // could not make): put the QP in error first, or the drain below would
  // never complete and MRs with a REG_MR in flight would be destroyed.
  if (qp->state() == QpState::kRts || qp->state() == QpState::kConnecting) (void)dc->dev->disconnect(qp.get());
  if (was_connecting || qp->state() != QpState::kError) {
    sq_drained = rq_drained = true;  // nothing was ever posted to the peer
  } else {
    post_drain_markers();
  }
  on_lost();
  want_service();
  TERN_LOG(kInfo, "engine", "conn %llu: connection to %s lost: %s", static_cast<unsigned long long>(id),
           peer_name().c_str(), why.to_string().c_str());
}

int ConnBase::step_drain(bool* more) {
  if (!drained()) post_drain_markers();
  if (!drained()) {
    *more = true;
    return 0;
  }
  finish_teardown();
  return 1;
}

void ConnBase::post_drain_markers() {
  // Drain as ib_drain_qp does: a WR posted to a QP in error is flushed after
  // everything before it, so its flush completion proves the queue is empty
  // (for a QP on a shared receive queue, also that no receive completion for
  // it will follow: rdmadev.h's Srq contract). A full queue refuses the
  // marker until flushes make room: retried from the service list.
  int err = 0;
  if (!sq_marker && !sq_drained) {
    SendWr sw;
    sw.opcode = WrOpcode::kSend;
    sw.flags = kWrSignaled;
    sw.wr_id = make_wr_id(WrKind::kDrain, slot, 0);
    sq_marker = qp->post_send(&sw, 1, &err) == 1;
  }
  if (!rq_marker && !rq_drained) {
    RecvWr rw;
    rw.wr_id = make_wr_id(WrKind::kDrain, slot, 1);
    rq_marker = qp->post_recv(&rw, 1, &err) == 1;
  }
}

void ConnBase::drop_qp() {
  // Drained: nothing of ours is on the QP. Its last receive completions
  // first (a device may drop what a destroyed QP left in its CQ), then the
  // QP, then what was its alone.
  if (own_rq == nullptr && dc->srq) {
    Wc left[32];
    for (int n; (n = dc->rcq->poll(left, 32)) > 0;)
      for (int i = 0; i < n; ++i) core->control->dispatch_left(dc, left[i]);
  }
  if (by_qpn_entered) dc->forget_qpn(qp->qp_num());
  by_qpn_entered = false;
  qp.reset();
  if (own_rq) {
    own_rq->release_all();
    core->remove_queue(own_rq->id());
    own_rq.reset();
  }
  rq = nullptr;
}

void ConnBase::finish_teardown() {
  // The QP is drained: no WR of ours is outstanding. Release the owners of
  // the unsignaled tail, then the role fails every call that did not finish.
  // Its received calls still waiting for their turn (peer_service.h) go
  // back first, while its receive queue is still there to take them.
  if (TERN_UNLIKELY(!core->service.empty())) core->release_held(this);
  sq_->release_all([&](const SendCtx& c) { ctx_done(c, false, nullptr); });
  on_drained();
}

}  // namespace tern::rpc
