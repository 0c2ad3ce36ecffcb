// The engine's private classes. Control path: engine.cc (create, connect,
// listen, CM events, teardown). Datapath: client.cc (marshal, send, reply
// handling), server.cc (receive, pull read chunks, dispatch, reply),
// wire.cc (header encoding/decoding through lib/rpcrdma and lib/oncrpc).
//
// Ownership rules (the 2026 xprtrdma patch set's invariants, as Tern keeps them):
//  I1 A ReplyBuf is owned by the device from post_recv to its completion, then
//     by the CPU until it is reposted; a ReplyBuf waiting to be reposted is
//     attached to no request.
//  I2 While req->reply == rep, rep is not reposted: the request detaches it
//     (reply = nullptr) before handing it back.
//  I3 A call completes only after every MR it registered is invalidated
//     (LOCAL_INV chain completed, or the peer's Send With Invalidate).
//  I4 A request returns to its pool only when both owners let go: the RPC
//     owner (until the completion callback has run) and the Send owner (until
//     a signaled Send completion walked past its send context, or teardown).
//  I5 A request in the pool has no owner, no reply, no MRs, no send context.
// Each is asserted where it is locally checkable (TERN_ASSERT, on in tests).
#pragma once

#include <cstdint>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/conn_stats.h"
#include "engine/engine.h"
#include "engine/frwr_registrar.h"
#include "engine/object_pool.h"
#include "engine/send_ctx_ring.h"
#include "engine/wr_chain.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "telemetry/registry.h"

namespace tern::rpc {

class EngineImpl;
class Conn;

// wr_id tags: what a completion is about.
enum class WrTag : uint64_t { kSend = 1, kInv = 2, kRead = 3, kRecv = 4, kDrain = 5 };
inline uint64_t make_wr_id(WrTag t, uint64_t v) { return (static_cast<uint64_t>(t) << 56) | (v & ((1ull << 56) - 1)); }
inline WrTag wr_tag(uint64_t id) { return static_cast<WrTag>(id >> 56); }
inline uint64_t wr_val(uint64_t id) { return id & ((1ull << 56) - 1); }

// A posted receive buffer.
struct ReplyBuf {
  uint8_t* buf = nullptr;
  uint32_t cap = 0;
  uint32_t len = 0;        // bytes received
  uint32_t index = 0;
  bool posted = false;     // owned by the device
  void* owner = nullptr;   // the request/server call it is attached to (I1, I2)
  uint8_t wc_flags = 0;
  uint32_t invalidated_rkey = 0;
};

// Registered memory the engine knows, for lkey lookup of user buffers.
struct Region {
  uint64_t addr, len;
  std::unique_ptr<rdma::Mr> mr;
};

// A decoded RPC-over-RDMA chunk list, in segments.
struct ReadSeg {
  uint32_t position;
  RdmaSegment seg;
};
inline constexpr int kMaxChunkSegs = 16;

// ---------------------------------------------------------------- client request

struct Request {
  enum class State : uint8_t { kFree, kBacklog, kSent, kInvalidating };
  State state = State::kFree;
  bool rpc_owner = false;   // I4
  bool send_owner = false;  // I4
  uint32_t slot = 0;
  uint32_t xid = 0;
  Call call{};
  std::vector<uint8_t> args_copy;  // the inline arguments, owned until marshaled
  AuthSys auth_copy;               // the credentials, owned until marshaled (call.auth points here)
  uint8_t* sendbuf = nullptr;      // registered, inline_send bytes
  uint8_t* replybuf = nullptr;     // registered, max_reply bytes (reply chunk)
  EngineMr* mrs = nullptr;         // registered for this call (I3)
  ReplyBuf* reply = nullptr;       // attached receive (I2)
  uint64_t inv_seq = 0;            // SqBudget sequence of the LOCAL_INV chain
  CallReply result{};
  bool refused = false;            // its memory could not be registered: fails from the backlog
  uint64_t t_call = 0;             // ticks at call(), for the RTT
  ProcCounters* pc = nullptr;      // this procedure's counters (EngineImpl::proc_counters)
  Request* next = nullptr;         // backlog link
};

// ---------------------------------------------------------------- server call

class SrvCall final : public ServerCall {
 public:
  uint32_t xid() const override { return xid_; }
  uint32_t prog() const override { return prog_; }
  uint32_t vers() const override { return vers_; }
  uint32_t proc() const override { return proc_; }
  std::span<const uint8_t> args() const override { return args_; }
  std::span<const uint8_t> bulk() const override { return {bulk_buf_, bulk_len_}; }
  uint32_t bulk_capacity() const override;
  std::span<uint8_t> bulk_buffer(uint32_t len) override;
  Status reply(std::span<const uint8_t> results, std::span<const uint8_t> bulk) override;
  Status reply_error(AcceptStat stat) override;

  enum class State : uint8_t { kFree, kReading, kInHandler, kReplied };
  State state = State::kFree;
  Conn* conn = nullptr;
  uint32_t index = 0;
  bool handler_owner = false;  // until reply()
  bool send_owner = false;     // until the reply's Send completes
  uint32_t xid_ = 0, prog_ = 0, vers_ = 0, proc_ = 0;
  uint32_t client_credits = 0;
  std::span<const uint8_t> args_;
  ReplyBuf* rep = nullptr;     // holds the call's bytes until reply
  uint8_t* bulk_buf_ = nullptr;  // registered, max_bulk (read chunk data / bulk results)
  uint8_t* reply_area = nullptr; // registered, max_reply: a reply too large to send inline
  uint32_t bulk_len_ = 0;
  uint8_t* sendbuf = nullptr;    // registered, inline_send
  int nread = 0;
  ReadSeg reads[kMaxChunkSegs];
  int nwrite = 0;                // segments of the client's first write chunk
  RdmaSegment writes[kMaxChunkSegs];
  int nreply = 0;                // segments of the client's reply chunk
  RdmaSegment replies[kMaxChunkSegs];
  uint32_t inv_rkey = 0;         // for Send With Invalidate, 0: none
  bool nomsg = false;            // the call itself came in the read chunk
  Handler handler = nullptr;
  void* handler_ctx = nullptr;
  uint64_t t_recv = 0;           // ticks when its message arrived, for the RTT
  ProcCounters* pc = nullptr;    // the handler's procedure counters, or the engine's "unknown"
};

// ---------------------------------------------------------------- protection

// How a client makes its call memory reachable by the server (chunks).
enum class ChunkReg : uint8_t {
  kFastReg,   // per-call fast registration, invalidated before the call completes
  kRegCache,  // cached reg_mr per chunk, reachable until evicted: trusted peers only
  kNone,      // neither is allowed: calls that need chunks are refused (ENOTSUP)
};

// A protection domain and what lives in it: the long-lived registrations
// (the arena, the host's memory), which are local only and give buffers
// their lkeys, and the registrar whose per-call fast registrations are the
// only memory a peer can reach. A device's connections share one when fast
// registrations are QP-bound (a window's rkey works only on its own QP); when
// they are PD-wide (mlx5 mkeys) each client connection gets its own, so that
// a server cannot use an rkey made for a call to another server.
struct PdCtx {
  std::unique_ptr<rdma::Pd> pd;
  std::vector<Region> regions;
  std::unique_ptr<FrwrRegistrar> reg;  // null with ChunkReg::kNone
  ~PdCtx();
  // The registration holding [p, p+len), or nullptr.
  const Region* find(const void* p, uint64_t len) const;
  // Registers [addr, addr+len) for local access only.
  Status add_region(void* addr, size_t len);
};

// ---------------------------------------------------------------- device context

struct DeviceCtx {
  std::string spec;
  std::unique_ptr<rdma::Device> dev;
  std::unique_ptr<PdCtx> shared;  // server connections, and clients when registrations are QP-bound
  std::unique_ptr<rdma::Cq> scq, rcq;
  bool listening = false;
  ChunkReg chunk_reg = ChunkReg::kFastReg;
  // Client connections get a PdCtx of their own (fast registrations are
  // PD-wide on this device).
  bool pd_per_conn = false;
  // RFC 8797 remote invalidation offered on this device's connections.
  bool offer_inv = false;
  bool warned_no_chunks = false;
};

// ---------------------------------------------------------------- connection

class Conn final : public Connection {
 public:
  Conn(EngineImpl* eng, DeviceCtx* dc, bool server);
  ~Conn() override;

  bool ready() const override { return state == State::kReady; }
  bool failed() const override { return state == State::kDraining || state == State::kDead; }
  Status error() const override { return why; }
  ConnectionInfo info() const override;
  int call(const Call& c) override;
  uint32_t outstanding() const override { return in_flight; }
  ConnectionStats stats() const override;
  void close() override;

  Status setup_queues();
  // "client connection to pid 1234 uid 0 (shm:path=...)": who, for log lines.
  std::string peer_name() const;
  // The peer broke the protocol: one warning naming it and saying why, then
  // the connection is torn down (its calls fail; other connections go on).
  void protocol_error(Status why);
  // Registered memory for this connection, from the engine; given back when
  // the connection is destroyed, so connections come and go without the
  // arena running dry.
  uint8_t* block(size_t size, size_t align);
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  bool user_closed = false;  // client: close() called; reclaimed once dead
  void on_established(std::span<const uint8_t> peer_pdata);
  void on_disconnected(Status reason);
  // Datapath, from EngineImpl::poll.
  void on_send_wc(const rdma::Wc& wc);
  void on_recv_wc(const rdma::Wc& wc);
  int flush_backlog();
  void repost_recvs();
  bool drained() const { return sq_drained && rq_drained; }
  void finish_teardown();

  // client.cc
  int marshal_and_send(Request* req);
  void handle_reply(ReplyBuf* rep);
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
  // A reply for `r` that cannot be used: the call fails with `status`
  // (after its registrations are invalidated) instead of waiting for ever.
  void fail_reply(Request* r, ReplyBuf* rep, CallStatus status);
  // The common end of a reply: registrations invalidated, then complete.
  void finish_reply(Request* r);
  void complete(Request* req);
  void maybe_free(Request* req);
  // server.cc
  void handle_call(ReplyBuf* rep);
  void dispatch(SrvCall* sc);
  Status send_reply(SrvCall* sc, std::span<const uint8_t> results, std::span<const uint8_t> bulk, int accept);
  // Appends RDMA WRITEs placing `len` bytes at `src` (under `lkey`) into the
  // peer's segments in order, each taking what fits. Returns the bytes
  // placed; written[i], if given, gets segment i with the length it took.
  uint64_t push_into(const uint8_t* src, uint64_t len, uint32_t lkey, const RdmaSegment* segs, int nsegs,
                     RdmaSegment* written);
  void send_rdma_error(ReplyBuf* rep, uint32_t xid, bool vers);
  void server_read_done(const rdma::Wc& wc);
  bool calls_idle() const { return calls.all_free(); }
  void maybe_free(SrvCall* sc);
  // both
  bool post_chain(WrChain& chain, int send_index, void* send_owner);
  // Appends a Send of [buf, buf+len) (registered memory) to `chain`.
  rdma::SendWr& add_send(const uint8_t* buf, size_t len);
  // A signaled Send completed (or teardown): the Send owner of `owner` lets go.
  void release_send_owner(void* owner);
  // Server: gives `sc` back unserved and answers its call with ERR_CHUNK.
  void refuse_call(SrvCall* sc, ReplyBuf* rep, uint32_t xid);

  enum class State : uint8_t { kConnecting, kReady, kDraining, kDead };
  State state = State::kConnecting;
  // Observability (conn_stats.h): written only by the engine's thread.
  uint64_t id = 0;
  ConnCounters cs;
  Histogram rtt;
  uint64_t t_created = 0, t_established = 0, t_last = 0;  // ticks
  // Records one finished call's RTT on the connection and its procedure.
  void record_rtt(ProcCounters* pc, uint64_t t0, bool error);
  Status why;
  EngineImpl* eng;
  DeviceCtx* dc;
  bool server;
  PdCtx* pdc = nullptr;            // dc->shared, or own_pd
  std::unique_ptr<PdCtx> own_pd;   // DeviceCtx::pd_per_conn
  std::unique_ptr<rdma::Qp> qp;

  // Negotiated (RFC 8797).
  uint32_t inline_send = 1024, inline_recv = 1024;
  bool remote_inv = false;  // ConnectionInfo::remote_invalidation

  std::unique_ptr<SendCtxRing> ring;
  std::vector<uint64_t> ring_seq;  // SqBudget sequence per send context
  std::unique_ptr<SqBudget> sq;
  WrChain chain;
  std::vector<ReplyBuf> reps;
  std::vector<ReplyBuf*> to_repost;
  uint32_t recvs_posted = 0;
  bool sq_drained = false, rq_drained = false;
  bool sq_marker = false, rq_marker = false;  // drain markers posted
  void post_drain_markers();

  // Client.
  ObjectPool<Request> reqs;
  Request* backlog_head = nullptr;
  Request* backlog_tail = nullptr;
  uint32_t backlog_len = 0;
  uint32_t credits = 1;      // granted by the server; RFC 8166 starts at one
  uint32_t in_flight = 0;    // sent, awaiting reply (bounded by credits)
  uint32_t next_xid = 1;
  uint32_t slot_bits = 10;   // low bits of an xid name the request slot

  // Server.
  ObjectPool<SrvCall> calls;
  std::vector<uint64_t> ring_seq_reads_;  // SqBudget sequence of each call's READ chain
  // Calls received while every SrvCall was still held (by a handler or an
  // unsignaled reply Send): served as calls free up, never dropped. Bounded
  // by the receive queue, since their buffers are not reposted meanwhile.
  std::deque<ReplyBuf*> deferred;
  int serve_deferred();
  // Telemetry (docs/observability.md): "conn" source "<engine>.<id>" while
  // established; its provider reads only counters, the histogram and
  // peer_fixed. Last member: unregistered before anything it reads goes.
  std::string peer_fixed;
  void register_telemetry();
  telemetry::Source tsrc;
};

// ---------------------------------------------------------------- engine

struct HandlerEntry {
  uint32_t prog, vers, proc;
  Handler h;
  void* ctx;
  ProcCounters* pc;
};


class EngineImpl final : public Engine {
 public:
  explicit EngineImpl(const EngineOptions& o) : opt(o) {}
  ~EngineImpl() override;
  int poll() override;
  int wait_fd() override;
  Result<bool> prepare_wait() override;
  Result<bool> wait(int timeout_ms) override;
  void* alloc(size_t len, size_t align) override;
  Status register_memory(void* addr, size_t len) override;
  Result<Connection*> connect(std::string_view spec) override;
  Status listen(std::string_view spec) override;
  void handle(uint32_t prog, uint32_t vers, uint32_t proc, Handler h, void* ctx) override;
  const EngineStats& stats() const override { return st; }
  StatsView stats_view() const override;
  std::vector<ConnectionStats> connection_stats() const override;
  std::vector<ProcedureStats> procedure_stats() const override;
  std::string stats_json() const override;
  std::string stats_json_snapshot(int wait_ms) override;
  // Another thread asked for a snapshot: publish one (from poll()).
  void publish_snapshot();
  std::atomic<bool> snapshot_wanted{false};
  std::mutex snap_mu;
  std::condition_variable snap_cv;
  std::string snap_json;
  uint64_t snap_seq = 0, snap_ns = 0;
  // The counters of (prog, vers, proc) on one side, made on first use. The
  // client's table is bounded by kMaxProcs (further procedures share one
  // entry); the server's has an entry per handler, plus one for calls no
  // handler serves, so no peer can grow it.
  ProcCounters* proc_counters(uint32_t prog, uint32_t vers, uint32_t proc, bool server);
  static constexpr size_t kMaxProcs = 256;
  std::unordered_map<uint64_t, std::unique_ptr<ProcCounters>> procs_;
  std::vector<ProcCounters*> proc_order_;  // in creation order, for readers
  ProcCounters* unknown_proc_ = nullptr;
  uint64_t next_conn_id = 1;
  double ns_per_tick = 1.0;

  Result<DeviceCtx*> device(std::string_view spec);
  // A protection domain on dc's device with the arena and the host's
  // regions registered (local only) and a registrar of dc->chunk_reg's kind.
  Result<std::unique_ptr<PdCtx>> make_pd_ctx(DeviceCtx* dc);
  // Connection events of dc's device, handled; returns how many.
  int poll_cm(DeviceCtx* dc);
  // Wait mode (engine_wait.cc): after prepare_wait() said idle, the first
  // poll() consumes the wake-up (acks and disarms the devices, reads their
  // connection events); returns the events handled.
  int finish_wait();
  // The handler, or nullptr with *stat saying what to answer (PROG_UNAVAIL,
  // PROG_MISMATCH with the versions served in *low..*high, PROC_UNAVAIL).
  const HandlerEntry* find_handler(uint32_t prog, uint32_t vers, uint32_t proc, AcceptStat* stat, uint32_t* low,
                                   uint32_t* high) const;

  EngineOptions opt;
  EngineStats st;
  RegistrarStats reg_st;  // every registrar of this engine counts here
  std::unique_ptr<mem::Arena> arena;
  std::vector<std::unique_ptr<DeviceCtx>> devices;
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<HandlerEntry> handlers;
  std::vector<std::pair<void*, size_t>> user_regions_;  // registered on devices opened later too
  uint64_t polls = 0;
  // Blocks given back by destroyed connections, reused by size before the
  // arena is carved further.
  uint8_t* take_block(size_t size, size_t align);
  void give_back(uint8_t* p, size_t size);
  std::vector<std::pair<size_t, uint8_t*>> spare;
  uint64_t last_cm_tick = 0, cm_interval_ticks = 0;
  // Wait mode.
  struct WaitState {
    int epfd = -1;             // holds every device's wait fd; made on first use
    size_t devices_added = 0;  // devices[0..devices_added) are in epfd
    bool armed = false;        // prepare_wait() armed the devices; poll() acks
    bool rechecking = false;   // prepare_wait()'s own poll(): keep them armed
    ~WaitState();
  } waiting;
  // The engine-level counters that live as long as the engine (no device
  // or connection lists): what another thread may read.
  StatsView fixed_view() const;
  // Telemetry: "engine" source (its id names this engine's connections and
  // procedures); last member, so it is unregistered first.
  std::string tel_id;
  telemetry::Source tsrc;
};

}  // namespace tern::rpc
