// ClientConn: a connection this engine made to a server, and the client
// datapath: call() marshals a request, registers its chunks (REG_MR chained
// ahead of the Send) and posts it with one doorbell, under the server's
// credit grant (client_call.cc); a reply is matched by xid, the request's
// registrations are invalidated (remotely by the server's Send With
// Invalidate, or by a LOCAL_INV chain whose completion finishes the call),
// and the callback runs (client_reply.cc). What moves a request is decided
// in ClientConn::process and the helpers it calls; its state is written only
// by ReqMachine::enter, against the table in request_machine.h.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/connection.h"
#include "engine/client_timers.h"
#include "engine/credits.h"
#include "engine/request.h"
#include "engine/xid_table.h"

namespace tern::rpc {

// The public Connection is the client's: a server connection is not one.
class ClientConn final : public ConnBase, public Connection {
 public:
  ClientConn(ConnCore* core, DeviceCtx* dc);
  ~ClientConn() override;

  // ---- Connection
  ConnectionInfo info() const override;
  Status error() const override { return why; }
  ConnectionStats stats() const override { return ConnBase::stats(); }
  int call(const Call& c, uint32_t* xid) override;  // client_call.cc
  int cancel(uint32_t xid) override;                // client_recovery.cc
  void on_state_change(StateCallback cb, void* ctx) override {
    state_cb = cb;
    state_ctx = ctx;
  }
  // What the host sees, derived from the phase (conn_machine.h) and close().
  ConnState state() const override { return public_state(phase()); }
  ConnState public_state(State p) const {
    if (user_closed) return ConnState::kClosed;
    switch (p) {
      case State::kConnecting: return ConnState::kConnecting;
      case State::kReady: return ConnState::kReady;
      case State::kDraining:
      case State::kDead: return ConnState::kFailed;
      case State::kDrainingToReconnect:
      case State::kBackoff:
      case State::kPortDown:
      case State::kReconnecting: return ConnState::kReconnecting;
    }
    return ConnState::kFailed;
  }
  bool ready() const override { return ConnBase::ready(); }
  bool failed() const override {
    const ConnState s = state();
    return s == ConnState::kFailed || s == ConnState::kClosed;
  }
  uint32_t outstanding() const override { return credits.in_flight(); }
  void close() override;

  // ---- ConnBase hooks
  bool reclaimable() const override { return phase() == State::kDead && user_closed; }
  const char* peer_role() const override { return "server"; }
  ClientConn* as_client() override { return this; }
  // Makes a PD of its own first where the device asks for one per connection.
  Status setup_queues() override;
  bool has_waiting() const override { return !backlog.empty() || inv_waits > 0; }
  int service(bool* more) override;
  void ctx_done(const SendCtx& ctx, bool own, const rdma::Wc* wc) override;
  void on_message(MsgBuf* buf) override;  // client_reply.cc
  void on_lost() override;
  void on_drained() override;
  void on_peer_pdata(std::span<const uint8_t> pdata) override;
  void on_up() override;

  // What each event does to a request (request_machine.h: the states,
  // the events and the transitions enter() allows).
  void process(Request* r, ReqEvent ev);
  // kAccepted and kPosting, the events every call raises on its way out,
  // as entry points of their own (request_machine.cc): process(r, ev) for
  // them comes here too.
  void accepted(Request* r);
  void posting(Request* r);
  // kSendReleased's and kReply's entry points, for the same reason.
  void send_released(Request* r);
  void replied(Request* r);
  // A sampled call's stamps into the engine's CallTrace (out of line: rare).
  [[gnu::cold, gnu::noinline]] void trace_call(const Request* r, uint64_t now);

  // The server invalidated `rkey` with its Send With Invalidate; `r` is the
  // call the reply names, if any. kOurs: one of this connection's live
  // registrations, now marked invalid. kOtherConnection: a live registration
  // of another connection in the same PD, which a device that does not
  // check the window's QP (rxe) invalidated all the same: marked invalid
  // there, and a protocol error here. kNone: a protocol error.
  enum class RemoteInv : uint8_t { kOurs, kOtherConnection, kNone };
  RemoteInv accept_remote_inv(Request* r, uint32_t rkey);
  // A live registration of this connection's calls in flight with `rkey`.
  EngineMr* live_registration(uint32_t rkey);

  // ---- recovery (client_recovery.cc)
  // Once a millisecond (and at wait-mode wake-ups): deadlines, keepalive,
  // connect timeouts and reconnect attempts. Returns work done.
  int tick(uint64_t now);
  // The next time tick() has something to do (ticks; 0: nothing).
  uint64_t next_tick() const;
  // When the engine's timers should look next, after a visit at `now`:
  // next_tick(), but a connection that is up with keepalive on no later than
  // the shorter of keepalive_ms and keepalive_idle_ms from now. What a send
  // starts is due later than that look -- keepalive_ms after a call goes in
  // flight while none were, keepalive_idle_ms after the last call -- so a
  // send need not file the connection itself.
  uint64_t refile_at(uint64_t now) const;
  // Something may be due at `at` (ticks), earlier than the engine's timers
  // have this connection filed: filed by then (client_timers.h).
  void timer_due(uint64_t at) {
    if (timer_pos == ClientTimers::kNotFiled || at < timer_at) file_timer(at);
  }
  void file_timer(uint64_t at);
  // Where the engine's timers have it (client_timers.h): the time it is
  // filed under, and its place in the heap.
  uint64_t timer_at = 0;
  uint32_t timer_pos = ClientTimers::kNotFiled;
  // A transition changed what the host sees: its callback hears it.
  void entered(State from) override;
  // The host's view changed from `from` (by a transition or by close()).
  void tell_host(ConnState from, const Status& why);
  // Declares the connection dead (keepalive, connect timeout): it drains,
  // then reconnects or fails.
  void declare_dead(Status why);

  CreditWindow credits;
  XidTable xids;
  uint32_t next_xid;
  StateCallback state_cb = nullptr;
  void* state_ctx = nullptr;
  uint64_t lost_at = 0;           // ticks: when this outage began (give-up deadline)
  uint64_t next_attempt = 0;      // ticks: the next reconnect attempt
  uint64_t backoff_ns = 0;        // the current backoff, before jitter
  uint64_t connect_deadline = 0;  // ticks: a connect attempt under way fails then
  // ticks: the last message received, or when calls went in flight after
  // none were (what keepalive's silence is measured from)
  uint64_t t_last_recv = 0;
  bool probe_in_flight = false;
  uint32_t last_prog = 0, last_vers = 0;  // what a keepalive probe calls
  // The counters of the procedure last called (the engine's table is a
  // hash map; a connection mostly calls one procedure after another).
  uint32_t pc_key[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
  ProcCounters* pc_last = nullptr;
  // Calls with a deadline, earliest first (a new one is mostly the latest:
  // link_deadline looks for its place from the back).
  IntrusiveList<Request, &Request::deadline_link> deadlines;
  // The backlog: accepted calls not yet sent, in order.
  IntrusiveList<Request, &Request::backlog_link> backlog;
  // Requests of this connection that are sent, invalidating, orphaned or
  // abandoned (for teardown and for remote invalidation's accounting), the
  // latest first.
  IntrusiveList<Request, &Request::in_flight_link> in_flight;
  bool head_waits_for_credit = false;
  bool in_call_ = false;  // inside call(): nothing may complete
  uint32_t inv_waits = 0;    // requests whose LOCAL_INV chain waits for room

 private:
  enum class SendResult : uint8_t { kSent, kWait, kWaitCredit, kRefused, kConnFailed };
  // Takes what the backlog's head needs and posts it (client_call.cc).
  SendResult send(Request* r);
  int flush_backlog();
  // A checked call (call()) takes a request with its chunks and shape, and
  // is admitted. Returns call()'s answer.
  int accept(const Call& c, const ReadChunk* reads, int nr, const std::span<uint8_t>* writes, int nw, bool long_call,
             size_t rpc_len, size_t rpc_hdr, uint32_t* xid_out);
  // Admits an accepted call (call(), a probe) into the backlog and tries it.
  void admit(Request* r, const Call& c, bool probe);
  // Files r on the deadline list (client_recovery.cc).
  void link_deadline(Request* r);
  // Completes r to its caller with `status` but keeps its credit and xid
  // for a late reply (kAbandoned).
  void abandon(Request* r, CallStatus status);
  // After the drain: requeue what will be sent again, then a new QP.
  void schedule_reconnect();
  void reconnect_now();
 public:
  void give_up(Status why);
 private:
  void send_probe();
  static void probe_done(void* ctx, const CallReply& r);
  bool reconnect_wanted() const override;
  // Drained (or between attempts with no QP): every call fails, or -- when
  // it is to be re-established (kBackoff) -- what was in flight is sent
  // again on the next QP.
  void settle_calls();
  void requeue(Request* r);
  std::vector<Request*> requeued_;   // settle_calls: calls to send again
  // Inside settle_calls: a close() from a callback there only marks the
  // connection closed; settle_calls finishes the job.
  bool settling_ = false;
  // Gives back what a request holds for its chunks and staging.
  void drop_staging(Request* r);
  // Gives back r's receive reservation, if it holds one.
  void release_recv(Request* r);
  // r's arguments, read from its send buffer's message, copied into the
  // request (request.h: args_in_sendbuf): before the buffer goes back while
  // r may still be sent again.
  void keep_args(Request* r);
  void copy_args_out(Request* r);  // keep_args' way for arguments over Request::kHeldArgs
  // An abandoned call's late reply came, or will never come: what it kept
  // (its place among the active calls, its reservation) goes back.
  void retire_abandoned(Request* r);
  // The call is done (its registrations fenced): callback, then the RPC side lets go.
  void finish(Request* r, CallStatus status);
  // finish()'s body, inline where a reply completes its call (replied()).
  void complete(Request* r, CallStatus status);
  void note_caller_memory(const Request* r);  // base/reclaim_hook.h, TERN_DEBUG only
  void maybe_free(Request* r);
  // A reply for r that cannot be used: the call fails with `status` (after
  // its registrations are invalidated) instead of waiting for ever.
  void fail_reply(Request* r, MsgBuf* rep, CallStatus status);
  // A reply's steps (client_reply.cc), shared by the plain reply's
  // shortcut and the general path: the server's grant taken; the reply
  // attached to its call, its result reset to ok; the reply counted and the
  // call moved on (bytes: what it brought, inline and into chunks).
  void take_grant(uint32_t grant);
  CallReply& attach_reply(Request* r, MsgBuf* rep);
  void reply_taken(Request* r, uint64_t bytes);
};

}  // namespace tern::rpc
