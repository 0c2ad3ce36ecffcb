// The engine's own classes: EngineImpl -- its connections' core
// (conn_core.h) plus devices, CM, the connection table and control -- and
// where each part of it lives. No connection file includes this header:
// connections see the engine only as a ConnCore and its ConnControl.
//
//   engine.cc            control path: create, devices and PDs, memory, handlers, connect/listen, CM events
//   engine_admission.cc  which peer may take a slot of the connection table; reaping idle ones for fairness
//   listen_group.cc      several engines serving one address (ListenGroup): connection requests dealt out
//   engine_poll.cc       datapath dispatch: poll() -- completions to their connection and object in O(1),
//                        the memory queue, the pull/push deadlines, the service list, receive reposts, reaping
//   engine_wait.cc       wait mode (sleep instead of spin)
//   engine_stats.cc      counters, snapshots, JSON, telemetry
//   conn_core.h          what connections may use of the engine, and why it is narrow
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
#include "engine/client_conn.h"
#include "engine/conn_admission.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/device_ctx.h"
#include "engine/engine.h"
#include "engine/server_call_machine.h"
#include "engine/server_conn.h"
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

// The engine: its connections' core (conn_core.h: pools, scratch, clock,
// counters, the small scheduler), which it is, plus what connections do not
// see: devices and CM events, listening and admission, the connection
// table, wait mode, telemetry. It answers connections' control-path
// requests as their ConnControl.
class alignas(64) EngineImpl final : public Engine, public ConnCore, private ConnControl {
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
  // The device's shared receive queue and its pool, if it has SRQs and
  // none is made yet (engine.cc: when its connections would use one).
  void make_shared_recv(DeviceCtx* dc);
  void handle(uint32_t prog, uint32_t vers, uint32_t proc, Handler h, void* ctx, Placer place) override;
  void add_poller(Poller fn, void* ctx, int wake_fd) override;
  const EngineStats& stats() const override { return engine_stats; }
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
  // regions registered (local only) and a registrar of dc->chunk_reg's kind
  // (ConnControl::make_pd_ctx, below).
  // Connection events of dc's device, handled; returns how many.
  int poll_cm(DeviceCtx* dc);
  void accept_request(DeviceCtx* dc, const rdma::CmEvent& ev);
  // A listen group's request: accepted here, or handed to the member whose
  // turn it is (listen_group.h). And the requests handed to this engine.
  void deal_request(DeviceCtx* dc, const rdma::CmEvent& ev);
  int adopt_requests(DeviceCtx* dc);
  // A slot in the connection table for c (wr_ids name it).
  void enter(ConnBase* c);
  // Fences and completes every outstanding call (destruction).
  void shutdown();

  // ---- connection admission (conn_admission.h, engine_admission.cc)
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
  // pass's turn of what waits, from serve_connections();
  // ConnCore::release_held() serves what waits of one connection at once.
  void hold_or_take(const rdma::Wc& wc, ConnBase* c, int pos);
  int serve_held();
  // Server calls waiting for memory (ConnCore::wait_for_memory), served
  // when something came back.
  int serve_memory_waiters();
  // Server calls whose pull or push their peer did not complete within
  // server_rw_timeout_ms: their connections are dropped (rw_deadline.h).
  int expire_rw(uint64_t now);
  // poll()'s rarer parts, out of its way: the service list (connections
  // with work waiting for resources, and reclaiming), and the millisecond
  // timers (connection events, the clients' deadlines and keepalives).
  int serve_connections();
  // Posts the receive buffers of the queues on to_post; those that may wait
  // for a batch (RecvQueue::may_defer) stay on it unless `all`.
  void post_receives(bool all);
  int run_timers();
  bool memory_moved() const;

  // Wait mode (engine_wait.cc): after prepare_wait() said idle, the first
  // poll() consumes the wake-up (acks and disarms the devices, reads their
  // connection events); returns the events handled.
  int finish_wait();

  // ---- observability (engine_stats.cc)
  void publish_snapshot();
  StatsView fixed_view() const;
  // Accounting (engine_testing.h): what is out of its pools now.
  PoolAudit audit() const;

  // ---- ConnControl: what connections ask of the control path
  Result<std::unique_ptr<PdCtx>> make_pd_ctx(DeviceCtx* dc) override;  // engine.cc
  void dispatch_left(DeviceCtx* dc, const rdma::Wc& wc) override { dispatch_recv(dc, wc); }
  void server_gone(const std::string& peer, bool in_peer_table, bool reaped) override;  // engine_admission.cc
  ProcCounters* add_proc_counters(uint64_t key, uint32_t prog, uint32_t vers, uint32_t proc,
                                  bool server) override;  // engine_stats.cc
  EngineMr* registration_elsewhere(const ConnBase* me, const PdCtx* pd_ctx, uint32_t rkey) override;  // engine.cc
  const std::string& telemetry_id() const override { return tel_id; }

  // ---- the pass's own fields, first: they follow ConnCore's hot part, the
  // end of that base (conn_core.h's layout note), so that a pass at depth 1
  // reads a few adjacent lines of the engine (hot_fields_test.cc).
  // Wait mode. What every pass reads first (armed, and the pollers' marks
  // it clears or sets).
  struct WaitState {
    bool armed = false;        // prepare_wait() armed the devices; poll() acks
    bool rechecking = false;   // prepare_wait()'s own poll(): keep them armed
    // What wait()'s epoll_wait said fired, for finish_wait() to read only
    // those pollers' eventfds (poller i: bit i), and those of pollers that
    // found work since the last drain. Unknown (false) after a wake-up
    // wait() did not see (a host sleeping on wait_fd() itself, the second
    // look): finish_wait() then reads every one.
    // pollers_drained: read by this pass's finish_wait(), so work their
    // poller finds in this pass was signalled before that read (or after
    // it, and then the fd ends the next sleep at once): not marked worked.
    bool fired_known = false;
    uint64_t pollers_drained = 0, pollers_worked = 0, pollers_fired = 0;
    int epfd = -1;             // holds every device's wait fd; made on first use
    int timer_fd = -1;         // the clients' next tick, for a sleeping host
    size_t devices_added = 0;  // devices[0..devices_added) are in epfd
    uint64_t timer_at = 0;     // the tick it is armed for (0: disarmed)
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
  // A batch of receives was served at once, outside the service order,
  // after its last turn (served_alone: the connection of the latest, which
  // was its peer's; nullptr when unknown or reclaimed): that peer was served
  // last, and yields the next turn to peers that waited (peer_service.h).
  // Two stores per batch on poll()'s common path; read only by a turn.
  ConnBase* served_alone = nullptr;
  bool alone_since = false;
  // Another thread wants a stats snapshot (telemetry): one relaxed load per
  // pass; set only when one is asked for.
  std::atomic<bool> snapshot_wanted{false};
  // poll() reads the clock into ConnCore::now_tick every kClockPasses passes.
  static constexpr uint32_t kClockPasses = 8;
  uint32_t clock_skip = 0;
  uint64_t polls = 0;
  uint64_t last_cm_tick = 0, cm_interval_ticks = 0;
  RegistrarStats reg_st;  // every registrar of this engine counts here (before devices: theirs count into it)
  std::vector<std::unique_ptr<DeviceCtx>> devices;
  // Connections by slot (wr_ids name the slot); null slots are free. Every
  // send completion reads it, hence next to devices. Destroyed first by
  // ~EngineImpl (conns.clear()), whatever their order here: a connection
  // leaves peers, below, when destroyed.
  std::vector<std::unique_ptr<ConnBase>> conns;
  // ---- colder
  std::vector<uint32_t> free_slots;
  uint32_t nconns = 0;
  // Server connections held per peer, and how many reaped ones are not yet
  // reclaimed.
  PeerConns peers;
  uint32_t reaping = 0;
  std::vector<ClientConn*> timers_due;  // run_timers' scratch
  // Client connections. Their timers (deadlines, keepalive, reconnects)
  // run from poll()'s millisecond tick, for those due (timers).
  std::vector<ClientConn*> clients;
  // The earliest time a client's tick has work (ticks; 0: none), for wait
  // mode; next_timer_tick() also counts the pull/push deadlines.
  uint64_t next_client_tick() const;
  uint64_t next_timer_tick() const;
  std::vector<std::pair<void*, size_t>> user_regions_;  // registered on devices opened later too
  // Cross-thread snapshots (stats_json_snapshot; snapshot_wanted is above).
  std::mutex snap_mu;
  std::condition_variable snap_cv;
  std::string snap_json;
  uint64_t snap_seq = 0, snap_ns = 0;
  // Telemetry: "engine" source (its id names this engine's connections and
  // procedures); last member, so it is unregistered first.
  std::string tel_id;
  telemetry::Source tsrc;
};

}  // namespace tern::rpc
