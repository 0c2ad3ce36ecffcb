// The engine's own classes: EngineImpl, what it owns for all its
// connections, and where each part of it lives.
//
//   engine.cc            control path: create, devices and PDs, memory, handlers, connect/listen, CM events
//   conn_admission.cc    which peer may take a slot of the connection table; reaping idle ones for fairness
//   listen_group.cc      several engines serving one address (ListenGroup): connection requests dealt out
//   engine_poll.cc       datapath dispatch: poll() -- completions to their connection and object in O(1),
//                        the memory queue, the pull/push deadlines, the service list, receive reposts, reaping
//   engine_wait.cc       wait mode (sleep instead of spin)
//   engine_stats.cc      counters, snapshots, JSON, telemetry
//   conn_lifecycle.cc    a connection's set-up, establishment, loss, drain and teardown (connection.h)
//   conn_datapath.cc     what both roles do on the datapath: post, completions, receives
//   client_call.cc       client: call(), the backlog, marshaling and sending; request transitions
//   client_reply.cc      client: replies, remote invalidation, completion
//   server_recv.cc       server: receiving a call, decoding and routing it, its bulk-pool memory
//   server_call_machine.cc  server: the server call's events and transitions (server_call_machine.h)
//   server_rw.cc         server: RDMA READ of read chunks, RDMA WRITE of write and reply chunks
//   server_reply.cc      server: encoding and sending replies, RDMA_ERROR
//   wire.cc              RPC-over-RDMA and ONC RPC headers (lib/rpcrdma, lib/oncrpc)
// and one file per concept: credits.h, sq_budget.h, send_ctx_ring.h +
// send_queue.h, request.h, server_call.h + server_call_machine.h, registrar.h (frwr_registrar,
// reg_cache_registrar), bulk_pool.h, bulk_share.h, peer_service.h, rw_deadline.h, msg_buf.h, receive_queue.h,
// xid_table.h, handler_table.h, chunks.h, wr_id.h.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "engine/bulk_pool.h"
#include "engine/bulk_share.h"
#include "engine/client_conn.h"
#include "engine/client_timers.h"
#include "engine/conn_admission.h"
#include "engine/conn_stats.h"
#include "engine/device_ctx.h"
#include "engine/engine.h"
#include "engine/handler_table.h"
#include "engine/msg_buf.h"
#include "engine/peer_service.h"
#include "engine/request.h"
#include "engine/rw_deadline.h"
#include "engine/server_call_machine.h"
#include "engine/server_conn.h"
#include "engine/slab_table.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "telemetry/registry.h"

namespace tern::rpc {

// What accounting found: objects not back in their pools (leaks) or given
// back twice. All zero at idle (engine_testing.h).
struct PoolAudit {
  uint64_t requests_out = 0, srv_calls_out = 0, send_bufs_out = 0, recv_bufs_held = 0, bulk_blocks_out = 0,
           mrs_registered = 0, send_ctxs_in_use = 0, double_releases = 0;
  std::string to_string() const;
};

class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& o);
  ~EngineImpl() override;

  // ---- Engine
  int poll() override;  // engine_poll.cc
  int wait_fd() override;
  Result<bool> prepare_wait() override;
  Result<bool> wait(int timeout_ms) override;
  void* alloc(size_t len, size_t align) override;
  Status register_memory(void* addr, size_t len) override;
  Result<Connection*> connect(std::string_view spec) override;
  Status listen(std::string_view spec) override;
  Status listen(std::string_view spec, const std::shared_ptr<ListenGroup>& group) override;
  // The server's reserves on a device's shared receive queue: first credits
  // for connections yet to come, and credits no peer beyond its share may
  // borrow (credits.h).
  void reserve_credits(RecvQueue* q);
  void handle(uint32_t prog, uint32_t vers, uint32_t proc, Handler h, void* ctx, Placer place) override;
  void add_poller(Poller fn, void* ctx, int wake_fd) override;
  const EngineStats& stats() const override { return st; }
  StatsView stats_view() const override;
  std::vector<ConnectionStats> connection_stats() const override;
  std::vector<std::pair<const char*, LatencySummary>> breakdown(bool server) const override;
  std::vector<ProcedureStats> procedure_stats() const override;
  std::string stats_json() const override;
  std::string stats_json_snapshot(int wait_ms) override;
  std::string trace_json() const override;
  Status write_trace(const std::string& path) const override;

  // ---- control path (engine.cc)
  Result<DeviceCtx*> device(std::string_view spec);
  // A protection domain on dc's device with the arena and the host's
  // regions registered (local only) and a registrar of dc->chunk_reg's kind.
  Result<std::unique_ptr<PdCtx>> make_pd_ctx(DeviceCtx* dc);
  // Connection events of dc's device, handled; returns how many.
  int poll_cm(DeviceCtx* dc);
  void accept_request(DeviceCtx* dc, const rdma::CmEvent& ev);
  // A listen group's request: accepted here, or handed to the member whose
  // turn it is (listen_group.h). And the requests handed to this engine.
  void deal_request(DeviceCtx* dc, const rdma::CmEvent& ev);
  int adopt_requests(DeviceCtx* dc);
  // A slot in the connection table for c (wr_ids name it), and its receive-queue id.
  void enter(ConnBase* c);
  uint16_t add_queue(RecvQueue* q);
  void remove_queue(uint16_t id);
  // Fences and completes every outstanding call (destruction).
  void shutdown();

  // ---- connection admission (conn_admission.h, conn_admission.cc)
  enum class Admit : uint8_t { kYes, kTableFull, kPeerLimit };
  // Whether a connection request of `peer` may have a slot now; at a full
  // table it may reap an idle connection of another peer for it.
  Admit admit(const std::string& peer);
  // Closes the idle connection that makes room for `peer` (holding `mine`)
  // under the fairness rule; false when there is none.
  bool reap_for(const std::string& peer, uint32_t mine);
  // Connections that count against max_connections: reaped ones that are
  // still draining have given their slot up already.
  uint32_t held() const { return nconns - reaping; }

  // ---- datapath (engine_poll.cc)
  void dispatch_send(DeviceCtx* dc, const rdma::Wc& wc);
  // A receive completion; `owner` is dc->conn_of(wc.qp_num), which poll()
  // has already looked up for the batch.
  void dispatch_recv(DeviceCtx* dc, const rdma::Wc& wc, ConnBase* owner);
  void dispatch_recv(DeviceCtx* dc, const rdma::Wc& wc) { dispatch_recv(dc, wc, dc->conn_of(wc.qp_num)); }
  // Service order among peers (peer_service.h): a receive of a server
  // connection waits in its peer's queue (or, when it cannot, is served at
  // once, and its connection asks for service); serve_held() serves this
  // pass's turn of what waits, from serve_connections(); release_held()
  // serves what waits of connection c (of all: nullptr) now, before c goes
  // (a connection that is not ready gives the buffers back).
  void hold_or_take(const rdma::Wc& wc, ConnBase* c, int pos);
  int serve_held();
  void release_held(const ConnBase* c);
  // Server calls waiting for memory, in their peers' queues (bulk_share.h).
  // stop_waiting: served (its peer's turn is charged) or not (freed).
  void wait_for_memory(SrvCall* sc);
  void stop_waiting(SrvCall* sc, bool served);
  int serve_memory_waiters();
  // Server calls whose pull or push their peer did not complete within
  // server_rw_timeout_ms: their connections are dropped (rw_deadline.h).
  int expire_rw(uint64_t now);
  // poll()'s rarer parts, out of its way: the service list (connections
  // with work waiting for resources, and reclaiming), and the millisecond
  // timers (connection events, the clients' deadlines and keepalives).
  int serve_connections();
  int run_timers();
  // A receive queue has buffers to post.
  void queue_needs_post(RecvQueue* q) {
    if (q->in_post_list) return;
    q->in_post_list = true;
    to_post.push_back(q);
  }
  // The shared send buffers or server calls are three quarters used, or a
  // call waits for bulk memory: Sends are signaled so that what they hold
  // comes back promptly (ConnBase::post).
  bool pools_low() const {
    return shares->waiters() != 0 || send_bufs->out() >= send_bufs_low || srv_calls.out() >= srv_calls_low;
  }
  // Three quarters of each pool's most, rounded up (out >= low is
  // out * 4 >= most * 3), set once the pools are made.
  uint32_t send_bufs_low = 0, srv_calls_low = 0;
  static uint32_t three_quarters(uint32_t most) { return static_cast<uint32_t>((uint64_t{most} * 3 + 3) / 4); }
  bool memory_moved() const;

  // Wait mode (engine_wait.cc): after prepare_wait() said idle, the first
  // poll() consumes the wake-up (acks and disarms the devices, reads their
  // connection events); returns the events handled.
  int finish_wait();

  // ---- observability (engine_stats.cc)
  ProcCounters* proc_counters(uint32_t prog, uint32_t vers, uint32_t proc, bool server);
  void publish_snapshot();
  StatsView fixed_view() const;
  // Accounting (engine_testing.h): what is out of its pools now.
  PoolAudit audit() const;

  EngineOptions opt;
  EngineStats st;
  RegistrarStats reg_st;  // every registrar of this engine counts here
  std::unique_ptr<mem::Arena> arena;
  std::vector<std::unique_ptr<DeviceCtx>> devices;
  // Server connections held per peer, and how many reaped ones are not yet
  // reclaimed (before conns: a connection leaves them when destroyed).
  PeerConns peers;
  uint32_t reaping = 0;
  // The client connections by when their timers are next due (before
  // conns: a connection leaves it when destroyed).
  ClientTimers timers;
  std::vector<ClientConn*> timers_due;  // run_timers' scratch
  // Connections by slot (wr_ids name the slot); null slots are free.
  std::vector<std::unique_ptr<ConnBase>> conns;
  std::vector<uint32_t> free_slots;
  uint32_t nconns = 0;
  // Client connections. Their timers (deadlines, keepalive, reconnects)
  // run from poll()'s millisecond tick, for those due (timers).
  std::vector<ClientConn*> clients;
  // The earliest time a client's tick has work (ticks; 0: none), for wait
  // mode; next_timer_tick() also counts the pull/push deadlines.
  uint64_t next_client_tick() const;
  uint64_t next_timer_tick() const;
  // Receive queues by id (MsgBuf::queue names it).
  std::vector<RecvQueue*> queues;
  std::vector<uint16_t> free_queue_ids;
  std::vector<RecvQueue*> to_post;  // queues with buffers to post
  HandlerTable handlers;
  std::vector<std::pair<void*, size_t>> user_regions_;  // registered on devices opened later too
  // The shared pools.
  std::unique_ptr<MsgBufPool> send_bufs, recv_bufs;
  std::unique_ptr<BulkPool> bulk;
  SlabTable<Request> requests;
  SlabTable<SrvCall> srv_calls;
  uint32_t srv_call_cap = 0;
  bool poison = false;  // test builds: recycled buffers are poisoned
  // The bulk pool's per-peer shares, and the server calls waiting for
  // memory in their peers' queues; what the pools looked like when the
  // call chosen last failed (retried only once something came back).
  std::unique_ptr<BulkShares> shares;
  uint64_t wait_bulk_gen = 0;
  uint32_t wait_send_free = 0;
  // Server calls whose peer must complete a pull or a push, by deadline;
  // the bound in ticks (0: none).
  RwDeadlines rw_due;
  uint64_t rw_timeout_ticks = 0;
  // The shorter of EngineOptions::keepalive_ms and keepalive_idle_ms, in
  // ticks (0: no keepalive): how long the timers may leave a connection
  // that is up without a look (ClientConn::refile_at).
  uint64_t keepalive_look_ticks = 0;
  // Received calls of several peers waiting for their turn (peer_service.h).
  // One call per peer per round while another peer waits: the smallest
  // turn, so another peer's call waits behind at most one of each other's.
  static constexpr uint32_t kServiceQuantum = 1;
  PeerService service{0, kServiceQuantum};
  // A batch of receives was served at once, outside the service order,
  // after its last turn (served_alone: the connection of the latest, which
  // was its peer's; nullptr when unknown or reclaimed): that peer was served
  // last, and yields the next turn to peers that waited (peer_service.h).
  // Two stores per batch on poll()'s common path; read only by a turn.
  ConnBase* served_alone = nullptr;
  bool alone_since = false;
  // Connections with work waiting for resources, in the order they asked.
  using ServiceList = IntrusiveList<ConnBase, &ConnBase::service_link>;
  ServiceList service_list;
  // The scratch chain every post is built in (one thread, one at a time).
  WrChain chain;
  // The chunk lists a call is marshaled with (ClientConn::send), scratch
  // like the chain: ~2 KiB that a frame would construct on every call.
  ChunkLists chunks;
  // The receive batch poll() is dispatching: its number (bumped per batch,
  // and after it, so that nothing outside a batch matches) and the index of
  // the completion being dispatched. A connection remembers the last index
  // of its own in the batch (ConnBase::rx_*): more_in_batch() lets a server
  // leave a reply unsignaled when another call of the same connection is
  // already in hand (see ServerConn::post_reply).
  uint64_t rx_batch = 0;  // 64 bits: a connection's old mark never comes round again
  int rx_pos = 0;
  bool more_in_batch(const ConnBase* c) const { return c->rx_batch == rx_batch && c->rx_last > rx_pos; }
  uint64_t polls = 0;
  // A recent reading of the clock (ticks), for what needs only
  // millisecond precision (a connection's last activity: keepalive, idle
  // time): poll() reads the clock every kClockPasses passes, and a round
  // trip's measurement refreshes it. Reading the TSC costs ~14 ns on this
  // project's VMs, which per pass and per message was ~10% of a depth-32
  // RPC's time (perf, tern-perf --rpc --qd 32).
  static constexpr uint32_t kClockPasses = 8;
  uint64_t now_tick = 0;
  // Breakdown (EngineOptions::breakdown): what connections already gone
  // measured, client side [0] and server side [1] (merged at teardown).
  std::unique_ptr<Breakdown> bd_gone[2];
  std::unique_ptr<CallTrace> trace;  // EngineOptions::trace_every; null when off
  uint32_t clock_skip = 0;
  uint64_t next_conn_id = 1;
  double ns_per_tick = 1.0;
  uint64_t last_cm_tick = 0, cm_interval_ticks = 0;
  bool cm_due = false;  // a connection just failed: read connection events in this poll()
  bool shutting_down = false;
  // The counters of (prog, vers, proc) on one side, made on first use. The
  // client's table is bounded by kMaxProcs (further procedures share one
  // entry); the server's has an entry per handler, plus one for calls no
  // handler serves, so no peer can grow it.
  static constexpr size_t kMaxProcs = 256;
  std::unordered_map<uint64_t, std::unique_ptr<ProcCounters>> procs_;
  std::vector<ProcCounters*> proc_order_;
  ProcCounters* unknown_proc_ = nullptr;
  // Wait mode.
  struct WaitState {
    int epfd = -1;             // holds every device's wait fd; made on first use
    size_t devices_added = 0;  // devices[0..devices_added) are in epfd
    bool armed = false;        // prepare_wait() armed the devices; poll() acks
    bool rechecking = false;   // prepare_wait()'s own poll(): keep them armed
    int timer_fd = -1;         // the clients' next tick, for a sleeping host
    uint64_t timer_at = 0;     // CLOCK_MONOTONIC ns it is armed for (0: disarmed)
    size_t pollers_added = 0;  // pollers[0..pollers_added) have their wake fd in epfd
    ~WaitState();
  } waiting;
  // The host's pollers (add_poller), run at the end of every poll().
  struct HostPoller {
    Poller fn;
    void* ctx;
    int wake_fd;
  };
  std::vector<HostPoller> pollers;
  // Cross-thread snapshots (stats_json_snapshot).
  std::atomic<bool> snapshot_wanted{false};
  std::mutex snap_mu;
  std::condition_variable snap_cv;
  std::string snap_json;
  uint64_t snap_seq = 0, snap_ns = 0;
  // Telemetry: "engine" source (its id names this engine's connections and
  // procedures); last member, so it is unregistered first.
  std::string tel_id;
  telemetry::Source tsrc;
};

// Inline here (it needs the engine): every call's completion and every
// reply records its round trip.
inline void ConnBase::record_rtt(ProcCounters* pc, uint64_t t0, bool error) {
  uint64_t now = now_ticks();
  t_last = eng->now_tick = now;
  auto ns = static_cast<uint64_t>(static_cast<double>(now - t0) * eng->ns_per_tick);
  rtt.record(ns);
  if (error) cs.errors.add();
  if (pc != nullptr) {
    pc->rtt.record(ns);
    if (error) pc->errors.add();
  }
}

inline void ConnBase::on_receive(MsgBuf* buf, const rdma::Wc& wc) {
  if (TERN_UNLIKELY(wc.status != rdma::WcStatus::kSuccess || life != State::kReady) && !receive_unusual(buf, wc))
    return;
  buf->len = wc.byte_len;
  buf->wc_flags = wc.flags;
  buf->inv_rkey = wc.invalidated_rkey;
  cs.recvs.add();
  cs.bytes_received.add(wc.byte_len);
  t_last = eng->now_tick;  // coarse: keepalive and idle time need no more
  on_message(buf);
}

inline void ConnBase::give_back(MsgBuf* buf) {
  TERN_ASSERT(buf->where == MsgBuf::Where::kHeld);
  RecvQueue* q = eng->queues[buf->queue];
  TERN_ASSERT(q != nullptr);
  q->give_back(buf);
  // A queue of this connection's own is posted to only while its QP can
  // take receives; a QP in error would flush them straight back.
  if (q->shared() || life == State::kReady || life == State::kConnecting) eng->queue_needs_post(q);
}

}  // namespace tern::rpc
