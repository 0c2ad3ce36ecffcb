// ConnBase: what a client connection and a server connection share -- the
// QP and its send queue, the receive queue it draws on, the connection's
// life (conn_lifecycle.cc), its counters and telemetry. The roles are two
// types over it: ClientConn (client_conn.h) and ServerConn (server_conn.h).
// A connection sees its engine only as a ConnCore (conn_core.h): the pools,
// scratch, clock, counters and small scheduler all connections share, and a
// ConnControl for the few control-path requests it makes.
//
// A connection's life is its machine (conn_machine.h): the phases, the
// transitions each role allows, and the one function that writes them.
// conn_lifecycle.cc moves it through establishment, loss and the drain;
// the roles decide what follows (ClientConn: reconnecting; ServerConn: the
// handlers still holding its calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/intrusive_list.h"
#include "base/lazy_histogram.h"
#include "engine/breakdown.h"
#include "engine/conn_machine.h"
#include "engine/conn_stats.h"
#include "engine/device_ctx.h"
#include "engine/engine.h"
#include "engine/peer_service.h"
#include "engine/receive_queue.h"
#include "engine/send_queue.h"
#include "telemetry/registry.h"

namespace tern::rpc {

class ConnCore;
class ClientConn;
class ServerConn;

// Not a public Connection: only a client connection is one (ClientConn);
// a server names its peer through ServerCall::peer_id().
class ConnBase : public ConnMachine {
 public:
  using State = ConnPhase;

  // `machine`, `role`: the role's transition table and name (conn_machine.h).
  ConnBase(ConnCore* core, DeviceCtx* dc, const ConnTransitions* machine, const char* role);
  ~ConnBase() override;

  // ---- what both roles report
  bool ready() const { return phase() == State::kReady; }
  // A QP that is connected or connecting: the phases before a loss.
  bool qp_live() const {
    return phase() == State::kReady || phase() == State::kConnecting || phase() == State::kReconnecting;
  }
  // Lost and draining (whatever follows the drain).
  bool draining() const { return phase() == State::kDraining || phase() == State::kDrainingToReconnect; }
  // Destroys the QP (drained) and what belonged to it alone -- its receive
  // queue, its send-context ring -- so that a new one can be made
  // (reconnect) in the same slot, PD and registrar.
  void drop_qp();
  Status error() const { return why; }
  ConnectionStats stats() const;  // engine_stats.cc
  virtual ConnectionInfo info() const = 0;
  virtual uint32_t outstanding() const = 0;
  // Its role's view of it: the client connection, or the server
  // connection, or null (what the engine's tables look through).
  virtual ClientConn* as_client() { return nullptr; }
  virtual ServerConn* as_server() { return nullptr; }
  const ServerConn* as_server() const { return const_cast<ConnBase*>(this)->as_server(); }

  // ---- life (conn_lifecycle.cc)
  // Creates the QP (and the receive queue of its own, on a device without
  // an SRQ or in a PD of its own). A client makes its own PD first
  // (ClientConn::setup_queues).
  virtual Status setup_queues();
  void on_established(std::span<const uint8_t> peer_pdata);
  void on_disconnected(Status reason);
  // The peer broke the protocol: one warning naming it and saying why, then
  // the connection is torn down (its calls fail; other connections go on).
  void protocol_error(Status why);
  void post_drain_markers();
  bool drained() const { return sq_drained && rq_drained; }
  void finish_teardown();
  // One service step of a draining connection: markers posted until the QP
  // is drained, then the teardown. 1 when it tore down; *more while it waits.
  int step_drain(bool* more);
  // Whether the engine may destroy it now.
  virtual bool reclaimable() const = 0;
  // "client" or "server": who is at the other end, for log lines.
  virtual const char* peer_role() const = 0;
  // "client connection to pid 1234 uid 0 (shm:path=...)": who, for log lines.
  std::string peer_name() const;

  // ---- datapath (conn_datapath.cc)
  // A completion of a chain this connection posted.
  void on_send_completion(const rdma::Wc& wc);
  // A receive completion on this connection's QP (the buffer is held).
  // Inline (conn_datapath.h): every message takes it.
  inline void on_receive(MsgBuf* buf, const rdma::Wc& wc);
  // on_receive() of a failed receive or on a connection that is not ready:
  // false when the buffer went back and there is nothing to deliver.
  bool receive_unusual(MsgBuf* buf, const rdma::Wc& wc);
  // The one post path (send_queue.h): false if the QP refused the chain,
  // and then the connection is failing. `signal` asks for a completion
  // beyond the send-context ring's batching; *was_signaled says whether the
  // chain got one (its own completion will say when the peer took it).
  bool post(WrChain& chain, SendCtxKind kind, uint32_t obj, bool signal = false, bool* was_signaled = nullptr);
  bool room(int wrs) const { return sq_->room(wrs); }
  // A receive buffer this connection is done with goes back to its queue
  // (inline, conn_datapath.h).
  inline void give_back(MsgBuf* buf);
  // Work waiting for resources (a backlog, queued replies, deferred
  // receives, a drain): run from the engine's service list each poll.
  // Returns work done; sets *more when it still needs service.
  virtual int service(bool* more) = 0;
  // Asks to be serviced from the next poll().
  void want_service();
  // Whether anything of this connection waits for resources (a backlog,
  // a LOCAL_INV chain, queued replies or pulls, deferred receives): a
  // completion that frees room services it only then.
  virtual bool has_waiting() const = 0;

  // ---- role hooks
  // A send context walked by a completion (own: the completion's own
  // context) or by teardown (wc == nullptr).
  virtual void ctx_done(const SendCtx& ctx, bool own, const rdma::Wc* wc) = 0;
  // A message arrived (established, checked, counted).
  virtual void on_message(MsgBuf* buf) = 0;
  // The connection is lost (kDraining from now): calls in flight are orphaned.
  virtual void on_lost() = 0;
  // The QP is drained: the role enters what follows (kDead, or a client's
  // kBackoff) and fails or requeues everything of the role.
  virtual void on_drained() = 0;
  // The peer's private data at establishment (a client negotiates from it).
  virtual void on_peer_pdata(std::span<const uint8_t> pdata) { (void)pdata; }
  // The connection came up (kReady).
  virtual void on_up() {}
  // A receive on a connection still connecting (a server learns it is
  // established from its first receive, before the driver's event).
  virtual void receive_while_connecting() {}

  // Records one finished call's RTT on the connection and its procedure
  // (inline, conn_datapath.h).
  inline void record_rtt(ProcCounters* proc_counters, uint64_t t0, bool error);
  void register_telemetry();

  // What it may use of its engine (conn_core.h), and nothing more.
  ConnCore* core;
  DeviceCtx* dc;
  Status why;
  uint32_t slot = 0;  // in the engine's connection table: wr_ids name it
  uint64_t id = 0;    // engine-unique, never reused: log lines say "conn <id>"
  PdCtx* pd_ctx = nullptr;           // dc->shared, or own_pd
  std::unique_ptr<PdCtx> own_pd;  // DeviceCtx::pd_per_conn (client)
  std::unique_ptr<rdma::Qp> qp;
  std::unique_ptr<SendQueue> sq_;  // remade with each QP
  SendQueue& sq() { return *sq_; }
  const SendQueue& sq() const { return *sq_; }
  RecvQueue* rq = nullptr;             // dc->recv, or own_rq
  std::unique_ptr<RecvQueue> own_rq;   // a receive queue of its own (no SRQ, or own PD)
  // Negotiated (RFC 8797).
  uint32_t inline_send = 1024, inline_recv = 1024;
  bool remote_inv = false;  // ConnectionInfo::remote_invalidation
  // close() was called: the host let go. A fact beside the phase, not a
  // phase: a closed connection still drains, and is reclaimed once dead.
  bool user_closed = false;
  bool lost_to_flush = false;  // lost because its WRs flushed, before the driver said why
  bool sq_drained = false, rq_drained = false;
  bool sq_marker = false, rq_marker = false;  // drain markers posted
  ListLink<ConnBase> service_link;  // on the engine's service list (ConnCore::service_list)
  bool by_qpn_entered = false;
  // Its peer's place in the service order (peer_service.h): a server
  // connection's, from on_up(); null for a client connection (its receives
  // are replies, served at once).
  ServiceQueue* svc_peer = nullptr;
  // Observability (conn_stats.h): written only by the engine's thread.
  ConnCounters counters;
  // Its round trips: buckets allocated as they are used (lazy_histogram.h),
  // not a Histogram's 8 KiB per connection, most of them idle.
  LazyHistogram rtt;
  // Where the round trips go, stage by stage: only with
  // EngineOptions::breakdown (null otherwise; each stamp tests it).
  std::unique_ptr<Breakdown> breakdown;
  uint64_t t_created = 0, t_established = 0, t_last = 0;  // ticks
  // The engine's receive batch this connection last had a completion in,
  // and the index of its last one there (ConnCore::more_in_batch).
  uint64_t rx_batch = 0;
  int rx_last = 0;
  std::string peer_fixed;
  // Telemetry: "conn" source "<engine>.<id>" while established; its
  // provider reads only counters, the histogram and peer_fixed. Last
  // member: unregistered before anything it reads goes.
  telemetry::Source tsrc;
};

}  // namespace tern::rpc
