// ConnCore: the part of an engine its connections may use, and nothing more.
//
// Why narrow: a connection (ConnBase, ClientConn, ServerConn) runs the
// datapath of one QP. What it needs of its engine is what all connections
// share on that datapath: the pools it takes buffers, requests and server
// calls from; the scratch a post is built in; the clock; the counters; the
// receive queues by id; the receive batch being dispatched; the small
// scheduler that services connections waiting for resources (the service
// list, the peers' service order, the server calls waiting for memory, the
// pull/push deadlines, the clients' timers). That is this type. What it must
// not reach is everything else an engine is -- devices and their CM events,
// listening, admission, telemetry, wait mode, the host's pollers, the
// connection table -- so that a change there cannot reach a connection's
// code unseen, and a test can drive a connection over a core of its own.
// The few control-path requests a connection makes of its engine (a
// protection domain, a connection leaving the admission tables, ...) go
// through ConnControl below, a tiny explicit interface; each is off the
// datapath, so a virtual call there costs nothing that matters.
//
// Zero cost: EngineImpl derives from ConnCore, so a connection's
// core->stats-style access is the same single load from the same object as
// the engine's own; nothing on the datapath is virtual or one pointer
// further away than before.
//
// Layering inside lib/engine (each header includes only those below it):
//   connection.h    ConnBase, which names its core only by pointer
//   conn_core.h     this file: what connections share (its lists thread
//                   through ConnBase, hence ConnBase below it)
//   conn_datapath.h ConnBase's inline datapath steps, which use both
//   client_conn.h, server_conn.h   the roles
//   the engine      EngineImpl: a ConnCore, plus devices, CM, the table, control
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/intrusive_list.h"
#include "engine/breakdown.h"
#include "engine/bulk_pool.h"
#include "engine/bulk_share.h"
#include "engine/call_trace.h"
#include "engine/chunks.h"
#include "engine/client_timers.h"
#include "engine/conn_stats.h"
#include "engine/connection.h"
#include "engine/engine.h"
#include "engine/handler_table.h"
#include "engine/msg_buf.h"
#include "engine/peer_service.h"
#include "engine/receive_queue.h"
#include "engine/request.h"
#include "engine/rw_deadline.h"
#include "engine/server_call.h"
#include "engine/slab_table.h"
#include "engine/wr_chain.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

// What a connection asks of its engine on the control path. Implemented by
// EngineImpl; a test's stub core implements it with what the test needs.
class ConnControl {
 public:
  // A protection domain of the connection's own on dc's device
  // (DeviceCtx::pd_per_conn), with the engine's memory registered.
  virtual Result<std::unique_ptr<PdCtx>> make_pd_ctx(DeviceCtx* dc) = 0;
  // A receive completion left in a device's shared CQ by a QP about to go:
  // dispatched to whichever connection it belongs to.
  virtual void dispatch_left(DeviceCtx* dc, const rdma::Wc& wc) = 0;
  // A server connection goes: out of the per-peer admission table (when it
  // was in it) and, if reaped, out of the count of reaped ones draining.
  virtual void server_gone(const std::string& peer, bool in_peer_table, bool reaped) = 0;
  // Procedure counters not made yet (ConnCore::proc_counters found none).
  virtual ProcCounters* add_proc_counters(uint64_t key, uint32_t prog, uint32_t vers, uint32_t proc,
                                          bool server) = 0;
  // Another client connection in pd_ctx holding the registration rkey names,
  // for devices whose remote invalidation is not bound to the QP (rxe).
  virtual EngineMr* registration_elsewhere(const ConnBase* me, const PdCtx* pd_ctx, uint32_t rkey) = 0;
  // The engine's telemetry id ("" when it has none): connections' sources
  // are named under it.
  virtual const std::string& telemetry_id() const = 0;

 protected:
  ~ConnControl() = default;
};

class ConnCore {
 public:
  explicit ConnCore(const EngineOptions& o);
  ConnCore(const ConnCore&) = delete;
  ConnCore& operator=(const ConnCore&) = delete;

  // The control path's requests (the engine, or a test's stub).
  ConnControl* control = nullptr;

  // Layout: the fields every poll() pass and every message touch are this
  // structure's last lines (from "hot" on), so that they lie next to
  // EngineImpl's own per-pass fields, which lead EngineImpl (a derived
  // class's members follow its bases'), and a pass at depth 1 touches a few
  // adjacent lines of the engine rather than a dozen spread over 16 KiB;
  // the scratch (14 KiB) and what the control path reads come first.
  // tests/unit/hot_fields_test.cc holds it (docs/performance.md, "The poll
  // pass's lines").

  // ---- memory and the shared pools. The arena first: what is carved from
  // it (the pools, in the hot part below) goes after it, so is destroyed
  // before it.
  std::unique_ptr<mem::Arena> arena;
  // The arena and the pools in it, sized by opt (settled by Engine::create).
  Status make_pools();  // engine.cc

  // ---- scratch
  // The scratch chain every post is built in (one thread, one at a time).
  WrChain chain;
  // The chunk lists a call is marshaled with (ClientConn::send), scratch
  // like the chain: ~2 KiB that a frame would construct on every call.
  ChunkLists chunks;

  // ---- receive queues by id: ids given back, for reuse (the queues
  // themselves are in the pass's section below)
  std::vector<uint16_t> free_queue_ids;
  uint16_t add_queue(RecvQueue* q);  // engine.cc
  void remove_queue(uint16_t id);

  // ---- service, its colder part
  // Serves what waits of connection c (of all: nullptr) now, before c goes
  // (a connection that is not ready gives the buffers back). engine_poll.cc
  void release_held(const ConnBase* c);
  // Server calls whose peer must complete a pull or a push, by deadline;
  // the bound in ticks (0: none).
  RwDeadlines rw_due;
  uint64_t rw_timeout_ticks = 0;

  // ---- routing and counting
  HandlerTable handlers;
  // The counters of (prog, vers, proc) on one side, made on first use
  // (ConnControl::add_proc_counters). The client's table is bounded by
  // kMaxProcs (further procedures share one entry); the server's has an
  // entry per handler, plus one for calls no handler serves, so no peer
  // can grow it.
  static constexpr size_t kMaxProcs = 256;
  std::unordered_map<uint64_t, std::unique_ptr<ProcCounters>> procs;
  std::vector<ProcCounters*> proc_order;
  ProcCounters* unknown_proc = nullptr;
  ProcCounters* proc_counters(uint32_t prog, uint32_t vers, uint32_t proc, bool server);  // engine_stats.cc
  // Breakdown (EngineOptions::breakdown): what connections already gone
  // measured, client side [0] and server side [1] (merged at teardown).
  std::unique_ptr<Breakdown> bd_gone[2];
  std::unique_ptr<CallTrace> trace;  // EngineOptions::trace_every; null when off

  // ---- connection ids
  uint64_t next_conn_id = 1;  // ConnBase::id: engine-unique, never reused

  // ---- hot, per message: the counters, the options, the pools
  EngineStats engine_stats;
  EngineOptions opt;
  // (The message buffers and the bulk pool's per-peer shares are in the
  // pass's part below.)
  std::unique_ptr<BulkPool> bulk;
  SlabTable<Request> requests;
  SlabTable<SrvCall> srv_calls;
  uint32_t srv_call_cap = 0;
  bool poison = false;  // test builds: recycled buffers are poisoned
  // What the pools looked like when the server call chosen last of those
  // waiting for memory failed (retried only once something came back).
  uint64_t wait_bulk_gen = 0;
  uint32_t wait_send_free = 0;
  // Server calls waiting for memory, in their peers' queues (bulk_share.h).
  // stop_waiting: served (its peer's turn is charged) or not (freed).
  void wait_for_memory(SrvCall* sc);  // engine_poll.cc
  void stop_waiting(SrvCall* sc, bool served);
  // The shared send buffers or server calls are three quarters used, or a
  // call waits for bulk memory: Sends are signaled so that what they hold
  // comes back promptly (ConnBase::post).
  bool pools_low() const {
    return memory_waiters != 0 || send_bufs->out() >= send_bufs_low || srv_calls.out() >= srv_calls_low;
  }
  // Three quarters of each pool's most, rounded up (out >= low is
  // out * 4 >= most * 3), set once the pools are made.
  uint32_t send_bufs_low = 0, srv_calls_low = 0;
  static uint32_t three_quarters(uint32_t most) { return static_cast<uint32_t>((uint64_t{most} * 3 + 3) / 4); }

  // The client connections by when their timers are next due.
  ClientTimers timers;
  // Ticks to nanoseconds (each round trip's histograms).
  double ns_per_tick = 1.0;
  // The shorter of EngineOptions::keepalive_ms and keepalive_idle_ms, in
  // ticks (0: no keepalive): how long the timers may leave a connection
  // that is up without a look (ClientConn::refile_at).
  uint64_t keepalive_look_ticks = 0;

  // ---- hot, per pass (the last lines: EngineImpl's pass fields follow)
  // The message buffers (a receive's is looked up by its wr_id), and the
  // bulk pool's per-peer shares with the server calls waiting for memory in
  // their peers' queues (every pass asks whether any waits). After the
  // server calls and requests, which hold their buffers: destroyed first.
  std::unique_ptr<MsgBufPool> send_bufs, recv_bufs;
  std::unique_ptr<BulkShares> shares;
  // How many server calls wait for memory (shares->waiters(), kept by
  // wait_for_memory and stop_waiting, its only callers): the pass's test
  // and pools_low() read it here rather than on the shares' own line.
  uint32_t memory_waiters = 0;
  // The service list and the peers' service order.
  // Connections with work waiting for resources, in the order they asked.
  using ServiceList = IntrusiveList<ConnBase, &ConnBase::service_link>;
  ServiceList service_list;
  // Received calls of several peers waiting for their turn (peer_service.h).
  // One call per peer per round while another peer waits: the smallest
  // turn, so another peer's call waits behind at most one of each other's.
  static constexpr uint32_t kServiceQuantum = 1;
  PeerService service{0, kServiceQuantum};

  // Receive queues by id (MsgBuf::queue names it).
  std::vector<RecvQueue*> queues;
  std::vector<RecvQueue*> to_post;  // queues with buffers to post
  // A buffer was queued since poll() last looked at to_post: the queues
  // there that wait for a batch are looked at only then.
  bool posts_due = false;
  // A receive queue has buffers to post.
  void queue_needs_post(RecvQueue* q) {
    posts_due = true;
    if (q->in_post_list) return;
    q->in_post_list = true;
    to_post.push_back(q);
  }

  // The receive batch poll() is dispatching: its number (bumped per
  // batch, and after it, so that nothing outside a batch matches) and the
  // index of the completion being dispatched. A connection remembers the
  // last index of its own in the batch (ConnBase::rx_*): more_in_batch()
  // lets a server leave a reply unsignaled when another call of the same
  // connection is already in hand (see ServerConn::post_reply).
  uint64_t rx_batch = 0;  // 64 bits: a connection's old mark never comes round again
  int rx_pos = 0;
  bool more_in_batch(const ConnBase* c) const { return c->rx_batch == rx_batch && c->rx_last > rx_pos; }

  // The clock:
  // A recent reading of the clock (ticks), for what needs only
  // millisecond precision (a connection's last activity: keepalive, idle
  // time): poll() reads the clock every few passes (EngineImpl::kClockPasses),
  // and a round trip's measurement refreshes it. Reading the TSC costs
  // ~14 ns on this project's VMs, which per pass and per message was ~10%
  // of a depth-32 RPC's time (perf, tern-perf --rpc --qd 32).
  uint64_t now_tick = 0;
  // A reading taken in this pass of poll() (a wake-up's, a receive's):
  // pass_tick() reuses it, so that a batch of calls costs one read.
  bool tick_fresh = false;
  uint64_t pass_tick() {
    if (!tick_fresh) now_tick = now_ticks(), tick_fresh = true;
    return now_tick;
  }

  // Flags the pass and the control path read.
  bool cm_due = false;  // a connection just failed: read connection events in this poll()
  bool shutting_down = false;
};

}  // namespace tern::rpc
