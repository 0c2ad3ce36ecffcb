// A client call: what it holds through its life. Its life is one state
// machine (request_machine.h: the states, a comment on each, the table of
// allowed transitions; ClientConn::process in client_call.cc decides them,
// the way SPDK's nvmf_rdma_request_process keeps an NVMe-oF request's).
// A request has two owners (as in the
// "xprtrdma: Decouple req recycling from RPC completion" series (linux-nfs, 2026)):
// the RPC side, from call() until its callback has run, and the Send side,
// from the moment its Send is posted until a completion proves that Send
// done (Sends are mostly unsignaled, so that can come long after the reply).
// It goes back to the pool only when both have let go.
//
// Invariants (asserted where they are checkable, always on in test builds):
//  I1 A receive buffer is the device's from post to completion, then the
//     CPU's until it is posted again; a buffer on its way back to the device
//     is attached to no request.
//  I2 While a request holds a reply buffer, that buffer is not reposted: the
//     request detaches it before giving it back.
//  I3 A call completes only after every registration it made is
//     invalidated (LOCAL_INV chain completed, the peer's Send With
//     Invalidate, or the MR destroyed after its QP drained).
//  I4 A request returns to the pool only when both owners have let go.
//  I5 A request in the pool has no owner, no reply, no MRs, no send buffer,
//     no staging and no xid in any table.
#pragma once

#include <cstdint>
#include <vector>

#include "base/intrusive_list.h"
#include "engine/chunks.h"
#include "engine/conn_stats.h"
#include "engine/engine.h"
#include "engine/mr_free_list.h"
#include "engine/msg_buf.h"
#include "engine/request_machine.h"

namespace tern::rpc {

class ClientConn;

// A request: its state (ReqMachine: read with state(), changed only with
// enter(), request_machine.h) and what it holds.
struct Request : ReqMachine {
  bool send_owner = false;   // I4: the Send side holds it
  bool rpc_owner = false;    // I4: the RPC side holds it (call() to callback)
  bool refused = false;      // its memory could not be registered: fails from the backlog
  uint32_t index = 0;        // in the engine's request table: send contexts name it
  uint32_t xid = 0;
  ClientConn* conn = nullptr;
  Call call{};
  MsgBuf* sendbuf = nullptr;   // from the engine's pool while marshaled and until the Send side lets go
  uint8_t* replybuf = nullptr; // bulk pool: reply chunk room
  uint8_t* longbuf = nullptr;  // bulk pool: a long call's RPC message (position-zero read chunk)
  EngineMr* mrs = nullptr;     // registered for this call (I3)
  MsgBuf* reply = nullptr;     // attached receive (I2)
  bool holds_recv = false;     // reserved a receive buffer for its reply (RecvQueue grants)
  bool long_call = false;      // sent as RDMA_NOMSG: the message goes in a position-zero read chunk
  bool waited = false;         // counted once as waiting (credits or memory)
  bool inv_waiting = false;    // its LOCAL_INV chain waits for send-queue room
  uint32_t rpc_len = 0;        // ONC RPC header + inline arguments
  uint32_t rpc_hdr = 0;        // ONC RPC header alone (read chunk positions follow it)
  // On its connection's backlog (kBacklog), or among its requests in flight
  // (sent, invalidating, orphaned, abandoned): never both.
  ListLink<Request> backlog_link;
  ListLink<Request> in_flight_link;
  // Recovery (client_recovery.cc).
  uint64_t deadline = 0;       // ticks; 0: none
  ListLink<Request> deadline_link;  // on the connection's deadline list, earliest first
  CallStatus expire = CallStatus::kOk;  // kTimedOut / kCancelled once expired: its status at the drain
  uint32_t retransmits = 0;
  bool probe = false;          // an internal keepalive probe (RPC NULL)
  CallReply result{};
  uint64_t t_call = 0;         // ticks at call(), for the RTT
  // Breakdown stamps (ticks; 0 when not taken): its Send posted, its reply
  // received, its registrations fenced (breakdown.h).
  uint64_t ts_posted = 0, ts_recv = 0, ts_fenced = 0;
  ProcCounters* proc_counters = nullptr;  // this procedure's counters
  // The call's inline arguments and credentials, copied at call() (a call
  // may be marshaled from the backlog, after the caller's buffers are gone).
  // A call that call() sends at once is not copied: its arguments are in
  // its send buffer's message, and call.args points there
  // (args_in_sendbuf) until ClientConn::keep_args copies them out -- when
  // the buffer goes back while the call may still be sent again.
  bool args_in_sendbuf = false;
  // The chunk lists the caller gave, copied (Call::read_chunks / write_chunks).
  int nreads = 0, nwrites = 0;
  // Last, the copies only a call with credentials, chunks or a wait in the
  // backlog fills: a plain call's request is read and written in the lines
  // above (~7 of its ~12).
  std::vector<uint8_t> args_copy;
  AuthSys auth_copy;
  ReadChunk reads[kMaxReadChunks];
  std::span<uint8_t> writes[kMaxWriteChunks];
  // Arguments of up to kHeldArgs bytes, copied out of the send buffer when
  // its Send is done before the reply (ClientConn::keep_args): a copy of a
  // fixed size, without args_copy's allocation check and memcpy call. At
  // depth 32 nearly every call's Send completes before its reply.
  static constexpr size_t kHeldArgs = 128;
  uint8_t args_held[kHeldArgs];
};

}  // namespace tern::rpc
