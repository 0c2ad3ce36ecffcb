// The client request machine's events (request_machine.h has the states
// and the table): ClientConn::process, and what a transition does --
// sending, invalidating, completing, abandoning, sending again, freeing.
// Every change of a request's state is here, through ReqMachine::enter;
// the call, reply, recovery and drain files only raise events.
#include "engine/request_machine.h"

#include <cstring>

#include "base/clock.h"
#include "base/reclaim_hook.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"

namespace tern::rpc {

using namespace tern::rdma;

const char* req_state_name(ReqState s) {
  switch (s) {
    case ReqState::kFree: return "free";
    case ReqState::kBacklog: return "backlog";
    case ReqState::kSent: return "sent";
    case ReqState::kInvalidating: return "invalidating";
    case ReqState::kOrphaned: return "orphaned";
    case ReqState::kCompleted: return "completed";
    case ReqState::kAbandoned: return "abandoned";
  }
  return "?";
}

void req_transition_refused(ReqState from, ReqState to) {
  TERN_CHECK(req_transition_allowed(from, to),
             "request: %s -> %s is not a transition of the request machine (request_machine.h)",
             req_state_name(from), req_state_name(to));
  __builtin_unreachable();  // only called for a refused transition
}

// Every call's way out raises these two: entry points of their own, so that
// call() and send() pay a call and the check, not process()'s frame (raised
// through process() they cost ~60 instructions per RPC more).
void ClientConn::accepted(Request* r) {
  // call() or a keepalive probe filled it in: into the backlog (where the
  // caller puts it, or sends it at once).
  r->enter(ReqState::kBacklog);
}

void ClientConn::posting(Request* r) {
  // send() holds everything the call needs and its chain is encoded: sent
  // from now on, before the post, since a refused post fails the
  // connection at once (and the call is then an orphan of it).
  r->enter(ReqState::kSent);
}

// The send side's completions, as the request's events. Here, beside
// process(), so that the compiler specializes process() for the event each
// raises (the Send's release comes with every call).
void ClientConn::ctx_done(const SendCtx& ctx, bool own, const Wc* wc) {
  switch (ctx.kind) {
    case SendCtxKind::kCallSend:
      send_released(core->requests.at(ctx.obj));  // process(r, kSendReleased)
      break;
    case SendCtxKind::kInvalidate: {
      // Always signaled, so only its own completion (or teardown) reaches it.
      Request* r = core->requests.at(ctx.obj);
      if (own && wc != nullptr && wc->status == WcStatus::kSuccess) process(r, ReqEvent::kInvalidated);
      // Failed or flushed: the MRs' state is unknown; the drain fails the call.
      break;
    }
    case SendCtxKind::kReplySend:
    case SendCtxKind::kRead:
    case SendCtxKind::kCancelled:
      break;
  }
}

// Small arguments (most calls') are moved in fixed-size blocks into the
// request: reading past their end stays inside the send buffer, whose
// bytes after the message are the pool's (never the caller's). Inline in
// send_released(), where nearly every call at depth 32 comes (~45
// instructions per call fewer than args_copy's assign and memcpy call).
[[gnu::always_inline]] inline void ClientConn::keep_args(Request* r) {
  TERN_ASSERT(r->args_in_sendbuf && r->sendbuf != nullptr);
  const std::span<const uint8_t> a = r->call.args;
  constexpr size_t kHalf = Request::kHeldArgs / 2;
  const size_t end = static_cast<size_t>(a.data() - r->sendbuf->data) + Request::kHeldArgs;
  if (TERN_UNLIKELY(a.size() > Request::kHeldArgs || end > r->sendbuf->cap)) {
    copy_args_out(r);
    return;
  }
  std::memcpy(r->args_held, a.data(), kHalf);
  if (a.size() > kHalf) std::memcpy(r->args_held + kHalf, a.data() + kHalf, kHalf);
  r->call.args = std::span<const uint8_t>(r->args_held, a.size());
  r->args_in_sendbuf = false;
}

// kSendReleased, raised once per call: an entry point of its own, so that
// the Send's completion does not set up process()'s frame and jump table
// for it (~16 instructions per RPC).
void ClientConn::send_released(Request* r) {
  // Its Send is done: the device no longer reads its send buffer.
  TERN_ASSERT(r->send_owner);
  r->send_owner = false;
  if (TERN_UNLIKELY(breakdown != nullptr)) breakdown->record(Stage::kSendDone, r->ts_posted, now_ticks());
  if (r->sendbuf != nullptr) {
    // A call still waiting for its reply may be sent again: its
    // arguments leave the buffer first (request.h). A completed one's
    // are never read again (call() sets them afresh).
    if (TERN_UNLIKELY(r->args_in_sendbuf && r->rpc_owner)) keep_args(r);
    core->send_bufs->put(r->sendbuf);
    r->sendbuf = nullptr;
  }
  maybe_free(r);
}

// kReply, raised once per call (the reply side and the service list's
// retry of a LOCAL_INV chain): an entry point of its own, like
// send_released.
void ClientConn::replied(Request* r) {
  // The reply is attached and decoded (or the call failed on it), or its
  // LOCAL_INV chain waited for room: invalidate what the server could
  // still reach, then complete.
  TERN_ASSERT(r->state() == ReqState::kSent || (r->state() == ReqState::kInvalidating && r->inv_waiting));
  if (r->state() == ReqState::kSent) {
    xids.erase(r->xid);
    credits.answered();
    r->enter(ReqState::kInvalidating);
  }
  WrChain& chain = core->chain;
  int n = 0;
  if (r->mrs != nullptr) {
    chain.clear();
    n = pd_ctx->reg->invalidate(r->mrs, chain);
  }
  if (n == 0) {
    if (r->inv_waiting) --inv_waits;
    r->inv_waiting = false;
    if (r->mrs != nullptr) pd_ctx->reg->release(&r->mrs);  // nothing left registered: no LOCAL_INV posted
    r->ts_fenced = r->ts_recv;  // nothing to fence: no time spent on it
    // Most replies complete their call here, at once: finish()'s body in
    // this frame rather than a call and a frame of its own (~20
    // instructions per RPC), and the compiler knows the state it leaves.
    complete(r, r->result.status);
    return;
  }
  if (!room(n)) {
    // The send queue is full: the chain waits for room (the service
    // list retries it), as any other WR would.
    if (!r->inv_waiting) ++inv_waits;
    r->inv_waiting = true;
    want_service();
    return;
  }
  if (r->inv_waiting) --inv_waits;
  r->inv_waiting = false;
  core->engine_stats.local_inv_chains.add();
  counters.local_inv_chains.add();
  // Its completion finishes the call (I3). A refusal orphans it.
  (void)post(chain, SendCtxKind::kInvalidate, r->index);
  return;
}

// What each event does to a request: request_machine.h has the states and
// the table of transitions that enter() checks.
void ClientConn::process(Request* r, ReqEvent ev) {
  switch (ev) {
    case ReqEvent::kAccepted:
      accepted(r);
      return;
    case ReqEvent::kPosting:
      posting(r);
      return;
    case ReqEvent::kLateReply:
      // The reply of a call that timed out or was cancelled: its caller has
      // its status; the reply side gave back its credit and xid.
      TERN_ASSERT(r->state() == ReqState::kAbandoned);
      retire_abandoned(r);
      return;
    case ReqEvent::kSubmit: {
      // The backlog's head gets its turn.
      TERN_ASSERT(r->state() == ReqState::kBacklog && r == backlog.front());
      SendResult res = r->refused ? SendResult::kRefused : send(r);
      head_waits_for_credit = res == SendResult::kWaitCredit;
      switch (res) {
        case SendResult::kWait:
        case SendResult::kWaitCredit:
          return;  // it keeps what it took, and waits at the head
        case SendResult::kRefused:
          // Its memory could not be registered: it fails alone, never sent
          // -- from poll(), where every completion comes from.
          if (in_call_) {
            r->refused = true;
            want_service();
            return;
          }
          backlog.remove(r);
          finish(r, CallStatus::kNoRegistration);
          return;
        case SendResult::kSent:
        case SendResult::kConnFailed:
          backlog.remove(r);
          in_flight.push_front(r);
          // A refused post failed the connection: the call is an orphan.
          if (res == SendResult::kConnFailed || phase() != State::kReady) process(r, ReqEvent::kConnLost);
          return;
      }
      return;
    }
    case ReqEvent::kReply:
      replied(r);
      return;
    case ReqEvent::kInvalidated:
      // Its LOCAL_INV chain completed: the server can reach nothing of it.
      // (An orphan whose chain completed before the loss keeps its reply.)
      TERN_ASSERT(r->state() == ReqState::kInvalidating || r->state() == ReqState::kOrphaned);
      if (r->state() == ReqState::kOrphaned && r->reply == nullptr) return;
      pd_ctx->reg->release(&r->mrs);
      if (TERN_UNLIKELY(breakdown != nullptr)) r->ts_fenced = now_ticks();
      finish(r, r->result.status);
      return;
    case ReqEvent::kSendReleased:
      send_released(r);
      return;
    case ReqEvent::kConnLost:
      // In flight when the connection was lost: the QP flushes its WRs, and
      // nothing of it is released until that is proved (the drain).
      if (r->state() == ReqState::kSent || r->state() == ReqState::kInvalidating) {
        r->enter(ReqState::kOrphaned);
        if (r->inv_waiting) --inv_waits;
        r->inv_waiting = false;
      }
      return;
    case ReqEvent::kDrained:
      // The QP is drained. The registrations of a call that did not finish
      // are in an unknown state (a REG_MR or LOCAL_INV may have been
      // flushed): destroyed, never reused (the kernel's xprtrdma commit
      // "Properly recover FRWRs with in-flight FASTREG WRs"). Then it
      // completes once -- or, when the connection re-establishes itself, it is sent again
      // with its xid (the connection is in kBackoff; settle_calls requeues it).
      switch (r->state()) {
        case ReqState::kBacklog:
          if (phase() == State::kBackoff) {
            // It waits for the new connection; a reservation it holds was on
            // the old one's receive queue.
            release_recv(r);
            return;
          }
          backlog.remove(r);
          finish(r, r->expire != CallStatus::kOk ? r->expire : CallStatus::kDisconnected);
          return;
        case ReqState::kOrphaned:
          if (r->mrs != nullptr) pd_ctx->reg->destroy(&r->mrs);
          if (r->expire != CallStatus::kOk) {
            finish(r, r->expire);  // timed out or cancelled: now fenced
          } else if (r->reply != nullptr) {
            finish(r, r->result.status);  // its reply came before the loss: its results stand
          } else if (phase() != State::kBackoff || r->call.no_retry || r->probe) {
            finish(r, CallStatus::kDisconnected);
          } else {
            requeue(r);
          }
          return;
        case ReqState::kAbandoned:
          // Its late reply will never come: what it kept goes back.
          retire_abandoned(r);
          return;
        default:
          return;
      }
    case ReqEvent::kExpire:
      // Its deadline passed, or its caller cancelled it (r->expire says
      // which). Its memory goes back only once nothing can reach it.
      switch (r->state()) {
        case ReqState::kBacklog:
          // Never sent: no credit spent, nothing registered.
          backlog.remove(r);
          if (r->sendbuf != nullptr) {
            core->send_bufs->put(r->sendbuf);
            r->sendbuf = nullptr;
          }
          finish(r, r->expire);
          if (!backlog.empty()) want_service();
          return;
        case ReqState::kSent:
          if (r->mrs == nullptr) {
            // Nothing of the caller's is reachable: it completes now, and
            // keeps its credit and xid for the late reply.
            abandon(r, r->expire);
            return;
          }
          // Its registrations are the server's to use until the reply; the
          // only way to fence them without it is to drop the connection,
          // drain, and destroy them, as the kernel's client does (xprtrdma's
          // timeout forces a disconnect). The other calls are sent again.
          declare_dead(make_error(Errc::kTimedOut, "call %u %s with registrations the server may still use", r->xid,
                                  r->expire == CallStatus::kCancelled ? "was cancelled" : "timed out"));
          return;
        case ReqState::kOrphaned:
          return;  // completes with r->expire at the drain
        default:
          return;  // its reply is in (invalidating), or it is done
      }
  }
}

void ClientConn::requeue(Request* r) {
  // Sent again on the new connection, with the same xid, ahead of the calls
  // that never went out (on_drained puts them in their first order).
  in_flight.remove(r);
  release_recv(r);
  // Marshaled again into the buffer its arguments may still be read from.
  if (r->args_in_sendbuf) keep_args(r);
  r->enter(ReqState::kBacklog);
  ++r->retransmits;
  counters.retransmits.add();
  core->engine_stats.retransmits.add();
  requeued_.push_back(r);
}

inline void ClientConn::release_recv(Request* r) {
  if (!r->holds_recv) return;
  rq->grants().unreserve();
  r->holds_recv = false;
}

void ClientConn::retire_abandoned(Request* r) {
  in_flight.remove(r);
  release_recv(r);
  r->enter(ReqState::kCompleted);
  maybe_free(r);
}

void ClientConn::drop_staging(Request* r) {
  if (r->longbuf != nullptr) core->bulk->put(r->longbuf);
  if (r->replybuf != nullptr) core->bulk->put(r->replybuf);
  r->longbuf = r->replybuf = nullptr;
  release_recv(r);
}

// The caller's chunk memory is the caller's again once its call completes
// (it may reuse or free it in the callback): the reclaim check
// (base/reclaim_hook.h) looks whether a WR or an rkey could still reach it,
// as for the engine's own pools.
inline void ClientConn::note_caller_memory([[maybe_unused]] const Request* r) {
#if defined(TERN_DEBUG) && TERN_DEBUG
  for (int i = 0; i < r->nreads; ++i) note_reclaimed(r->reads[i].data.data(), r->reads[i].data.size(), "caller's chunk");
  for (int i = 0; i < r->nwrites; ++i) note_reclaimed(r->writes[i].data(), r->writes[i].size(), "caller's chunk");
#endif
}

void ClientConn::finish(Request* r, CallStatus status) { complete(r, status); }

[[gnu::always_inline]] inline void ClientConn::complete(Request* r, CallStatus status) {
  // I3: every MR of this call is invalidated before its results are seen.
  TERN_ASSERT(r->mrs == nullptr, "call completing with registered MRs");
  if (deadlines.linked(r)) deadlines.remove(r);
  if (status == CallStatus::kTimedOut) counters.timeouts.add();
  const bool was_active = r->state() == ReqState::kInvalidating || r->state() == ReqState::kOrphaned ||
                          r->state() == ReqState::kSent;
  if (was_active) {
    in_flight.remove(r);
    if (r->state() == ReqState::kSent || r->state() == ReqState::kOrphaned) xids.erase(r->xid);
  }
  r->enter(ReqState::kCompleted);
  if (r->reply == nullptr) {
    r->result = CallReply{status, r->xid, {}, 0};  // no reply: nothing but the status
  } else {
    r->result.status = status;
    if (status != CallStatus::kOk) r->result.results = {};
  }
  bool error = status != CallStatus::kOk;
  if (r->probe) {
    t_last = now_ticks();  // a keepalive probe: not the host's call, not in its figures
  } else if (r->reply != nullptr) {
    record_rtt(r->proc_counters, r->t_call, error);  // a reply came: its round trip counts
    if (TERN_UNLIKELY(breakdown != nullptr)) {
      const uint64_t now = core->now_tick;  // record_rtt's reading
      breakdown->record(Stage::kQueue, r->t_call, r->ts_posted);
      breakdown->record(Stage::kWire, r->ts_posted, r->ts_recv);
      breakdown->record(Stage::kInvalidate, r->ts_recv, r->ts_fenced);
      breakdown->record(Stage::kComplete, r->ts_fenced, now);
      breakdown->record(Stage::kTotal, r->t_call, now);
      if (TERN_UNLIKELY(breakdown->trace != nullptr) && breakdown->trace->due(false)) trace_call(r, now);
    }
  } else if (error) {
    counters.errors.add();  // failed without a reply (connection lost, memory refused)
    if (r->proc_counters != nullptr) r->proc_counters->errors.add();
  }
  r->result.retransmits = r->retransmits;
  note_caller_memory(r);
  if (r->call.done != nullptr) r->call.done(r->call.ctx, r->result);
  // I2: detach the reply buffer before it goes back to the device.
  if (MsgBuf* rep = r->reply) {
    r->reply = nullptr;
    give_back(rep);
  }
  // Staging is only a chunked call's: most calls give back their receive
  // reservation alone, without drop_staging's call.
  if (TERN_UNLIKELY(r->longbuf != nullptr || r->replybuf != nullptr)) drop_staging(r);
  else release_recv(r);
  r->rpc_owner = false;
  maybe_free(r);
}

// Inline in its callers (process's kSendReleased above all, once per call):
// out of line it set up a frame of its own for the pool's put.
[[gnu::always_inline]] inline void ClientConn::maybe_free(Request* r) {
  // I4: back to the pool only when both the RPC owner and the Send owner let go.
  if (r->rpc_owner || r->send_owner || r->state() != ReqState::kCompleted) return;
  // I5.
  TERN_ASSERT(r->reply == nullptr && r->mrs == nullptr && r->longbuf == nullptr && r->replybuf == nullptr &&
              !r->holds_recv);
  if (r->sendbuf != nullptr) {
    core->send_bufs->put(r->sendbuf);
    r->sendbuf = nullptr;
  }
  // Only what a later user reads before setting it: the rest is written
  // afresh by call() and by the reply.
  r->enter(ReqState::kFree);
  r->call.done = nullptr;
  r->refused = false;
  r->proc_counters = nullptr;
  r->conn = nullptr;
  core->requests.put(r);
}

void ClientConn::abandon(Request* r, CallStatus status) {
  // Its caller learns the status now; the request keeps its credit, its
  // receive reservation and its xid until the late reply or the drain.
  if (deadlines.linked(r)) deadlines.remove(r);
  if (status == CallStatus::kTimedOut) counters.timeouts.add();
  counters.errors.add();
  if (r->proc_counters != nullptr) r->proc_counters->errors.add();
  r->result = CallReply{status, r->xid, {}, 0};
  r->result.retransmits = r->retransmits;
  r->enter(ReqState::kAbandoned);
  note_caller_memory(r);
  if (r->call.done != nullptr) r->call.done(r->call.ctx, r->result);
  r->call.done = nullptr;
  r->rpc_owner = false;
}

}  // namespace tern::rpc
