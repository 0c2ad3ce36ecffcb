// ClientConn: a connection this engine made to a server, and the client
// datapath: call() marshals a request, registers its chunks (REG_MR chained
// ahead of the Send) and posts it with one doorbell, under the server's
// credit grant (client_call.cc); a reply is matched by xid, the request's
// registrations are invalidated (remotely by the server's Send With
// Invalidate, or by a LOCAL_INV chain whose completion finishes the call),
// and the callback runs (client_reply.cc). Every state change of a request
// is in ClientConn::process (request.h has the states).
#pragma once

#include <cstdint>

#include "engine/connection.h"
#include "engine/credits.h"
#include "engine/request.h"
#include "engine/xid_table.h"

namespace tern::rpc {

class ClientConn final : public ConnBase {
 public:
  ClientConn(EngineImpl* eng, DeviceCtx* dc);
  ~ClientConn() override;

  // ---- Connection
  ConnectionInfo info() const override;
  int call(const Call& c) override;  // client_call.cc
  uint32_t outstanding() const override { return credits.in_flight(); }

  // ---- ConnBase hooks
  bool reclaimable() const override { return state == State::kDead && user_closed; }
  bool has_waiting() const override { return backlog_head != nullptr || inv_waits > 0; }
  int service(bool* more) override;
  void ctx_done(const SendCtx& ctx, bool own, const rdma::Wc* wc) override;
  void on_message(MsgBuf* buf) override;  // client_reply.cc
  void on_lost() override;
  void on_drained() override;

  // Every transition of a request (request.h).
  void process(Request* r, ReqEvent ev);

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

  CreditWindow credits;
  XidTable xids;
  uint32_t next_xid;
  // The backlog: accepted calls not yet sent, in order.
  Request* backlog_head = nullptr;
  Request* backlog_tail = nullptr;
  uint32_t backlog_len = 0;
  // Requests of this connection that are sent, invalidating or orphaned
  // (for teardown and for remote invalidation's accounting).
  Request* active_head = nullptr;
  uint32_t active = 0;
  bool head_waits_for_credit = false;
  bool in_call_ = false;  // inside call(): nothing may complete
  uint32_t inv_waits = 0;    // requests whose LOCAL_INV chain waits for room

 private:
  enum class SendResult : uint8_t { kSent, kWait, kWaitCredit, kRefused, kConnFailed };
  // Takes what the backlog's head needs and posts it (client_call.cc).
  SendResult send(Request* r);
  int flush_backlog();
  void pop_backlog(Request* r);
  void link_active(Request* r);
  void unlink_active(Request* r);
  // Gives back what a request holds for its chunks and staging.
  void drop_staging(Request* r);
  // The call is done (its registrations fenced): callback, then the RPC side lets go.
  void finish(Request* r, CallStatus status);
  void maybe_free(Request* r);
  // A reply for r that cannot be used: the call fails with `status` (after
  // its registrations are invalidated) instead of waiting for ever.
  void fail_reply(Request* r, MsgBuf* rep, CallStatus status);
};

}  // namespace tern::rpc
