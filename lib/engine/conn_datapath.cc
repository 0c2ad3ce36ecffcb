// What client and server connections do alike on the datapath: posting a
// chain, taking a send-queue completion, taking a receive.
#include "base/clock.h"
#include "base/log.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/server_conn.h"

namespace tern::rpc {

using namespace tern::rdma;

bool ConnBase::post(WrChain& chain, SendCtxKind kind, uint32_t obj, bool signal, bool* was_signaled) {
  bool signaled = false;
  int err = 0;
  // When the shared pools run low, every Send is signaled: an unsignaled
  // Send holds its request (or server call) and its send buffer until a
  // later completion on its connection walks past it, and a connection that
  // goes idle may never post that later WR. Signaled, each Send gives its
  // buffers back on its own completion, so the pools always come back.
  signal |= core->pools_low();
  SendQueue::Posted p = sq_->post(qp.get(), slot, chain, kind, obj, &signaled, &err, signal);
  core->engine_stats.sends.add();
  if (signaled) core->engine_stats.sends_signaled.add();
  if (was_signaled != nullptr) *was_signaled = signaled;
  if (p == SendQueue::Posted::kOk) return true;
  // The QP refused (part of) the chain: the connection is failing. The
  // drain fails this chain's object like any other in flight.
  TERN_LOG(kWarn, "engine", "conn %llu: post_send refused a chain of %d WRs (errno %d)",
           static_cast<unsigned long long>(id), chain.size(), err);
  on_disconnected(make_sys_error(Errc::kDisconnected, err, "post_send refused a chain"));
  return false;
}

void ConnBase::on_send_completion(const Wc& wc) {
  // The chain's own object first: a failed READ says best why it failed.
  sq_->complete(wc, [&](const SendCtx& c, bool own) { ctx_done(c, own, &wc); });
  if (wc.status != WcStatus::kSuccess && qp_live()) {
    // A failed WR: the QP is in error now. The remote statuses say the peer
    // refused what we did: it named memory it does not let us reach, or
    // broke the protocol. Whichever chain it was, the connection is lost.
    // A flush says the QP went to error for another reason (the peer went
    // away): the connection event may follow, but the loss is now.
    Status why = make_error(Errc::kRemoteError, "%s failed: %s", wc_opcode_name(wc.opcode), wc_status_name(wc.status));
    if (wc.status == WcStatus::kRemAccessErr || wc.status == WcStatus::kRemInvReqErr ||
        wc.status == WcStatus::kRemOpErr)
      protocol_error(std::move(why));
    else if (wc.status == WcStatus::kWrFlushErr) {
      on_disconnected(make_error(Errc::kDisconnected, "the QP went to error (its WRs are flushed)"));
      lost_to_flush = true;
      core->cm_due = true;  // the driver's event says why: read it in this same poll()
    } else {
      on_disconnected(std::move(why));
    }
  }
  if (phase() == State::kReady && has_waiting()) want_service();  // room for what waits for it
}

bool ConnBase::receive_unusual(MsgBuf* buf, const Wc& wc) {
  if (wc.status != WcStatus::kSuccess) {
    // Flushed (or failed). A receive of ours (registered, sized to what we
    // advertised) fails only when the peer sent more than it may or, with
    // Send With Invalidate, named an rkey that is not ours to invalidate;
    // devices differ in the status they say it with (rxe: LOC_QP_OP_ERR).
    // A flush means the QP is in error: the connection is lost now, before
    // its connection event, or the buffer would be posted back to a QP that
    // flushes it straight back. Not for the shared receive queue's: a QP in
    // error flushes none of them, so a flushed one is a message that was
    // being received when *a* QP failed or was destroyed -- and a destroyed
    // QP's number may be this connection's QP's now (rdmadev.h: a device may
    // deliver what a destroyed QP left, under its number). Its buffer goes
    // back; this connection's own QP tells of its own loss (its send
    // queue's flushes, its connection event).
    if (wc.status != WcStatus::kWrFlushErr)
      protocol_error(make_error(Errc::kRemoteError,
                                "a receive failed: %s (a message over %u bytes, or a Send With Invalidate of an rkey "
                                "that is not ours)",
                                wc_status_name(wc.status), buf->cap));
    else if (qp_live() && !rq->shared()) {
      on_disconnected(make_error(Errc::kDisconnected, "the QP went to error (its receives are flushed)"));
      lost_to_flush = true;
      core->cm_due = true;  // the driver's event says why: read it in this same poll()
    }
    give_back(buf);
    return false;
  }
  if (!qp_live()) {
    // A message that was already on its way when the connection was lost.
    give_back(buf);
    return false;
  }
  // A message proves the connection is up, even when the device's
  // ESTABLISHED event is still queued (the engine polls CM events once a
  // millisecond, and on verbs the client's first SEND can overtake its RTU).
  if (phase() == State::kConnecting) receive_while_connecting();
  return true;
}

void ConnBase::want_service() {
  if (ConnCore::ServiceList::linked(this)) return;  // on the list, or in this pass's walk
  core->service_list.push_back(this);
}

}  // namespace tern::rpc
