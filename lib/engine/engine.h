// Tern's RPC engine: ONC RPC over RPC-over-RDMA Version 1 (RFC 8166, RFC 8797),
// one engine per lcore, driven by the host's poll loop.
//
// An Engine owns everything its connections use (devices, queues, memory,
// request pools, MRs) and shares nothing with other engines. It has no thread
// of its own and never blocks: the host calls poll() in its loop, and every
// callback (call completions, server handlers) runs inside poll() on that
// thread. No call on an engine is safe from another thread, except
// MrFreeList::put_remote inside the engine.
//
// Client:
//   auto eng = Engine::create(opts);
//   Connection* c = eng->connect("shm:path=/run/tern.sock").value();
//   while (!c->ready()) eng->poll();
//   c->call(Call{...});             // completes through call.done, inside poll()
// Server:
//   eng->handle(prog, vers, proc, handler, ctx);
//   eng->listen("shm:path=/run/tern.sock");
//   for (;;) eng->poll();           // handlers reply at once or later
// A host that would rather sleep than spin when idle uses wait mode:
//   for (;;) if (eng->poll() == 0) (void)eng->wait(100);
// or puts wait_fd() in its own epoll set (see "wait mode" below).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../base/result.h"
#include "../base/stats.h"

namespace tern::rpc {

// ---------------------------------------------------------------- options

struct EngineOptions {
  // Registered memory for every buffer the engine owns: message buffers
  // (send and receive), the bulk pool, Engine::alloc. Pools are carved from
  // it as they are first used. Per-connection memory: docs/engine.md.
  size_t arena_bytes = 128u << 20;
  // Inline thresholds this end offers (RFC 8797 private data); the effective
  // ones are negotiated per connection (1024 when the peer says nothing).
  uint32_t inline_send = 4096;
  uint32_t inline_recv = 4096;
  // Server: the most credits granted to one connection (grants follow load,
  // from 1 up to this; docs/engine.md "Credits"). Client: the most calls
  // this end keeps outstanding per connection (the server's grant decides).
  uint32_t credits = 32;
  // Server: the receive credits of a device's shared receive queue are
  // shared fairly among peers (a peer: a client process on pmd/shm, an
  // address on verbs, however many connections it opens). A peer beyond its
  // fair share (the queue over the peers holding credits) borrows idle
  // credits only while no other peer wants more than it was granted, and
  // never the last credit_lend_reserve, which stay for peers within their
  // share: one that arrives while another holds the rest is granted at once.
  // 0: two full grants (2 x credits), at most a quarter of the queue
  // (docs/engine.md "Credits", docs/security.md "One peer among many").
  uint32_t credit_lend_reserve = 0;
  // Client: calls that may wait for a credit on each connection.
  uint32_t backlog = 1024;
  // Largest bulk transfer in one chunk and largest reply via reply chunk.
  uint32_t max_bulk = 1u << 20;
  uint32_t max_reply = 64u << 10;
  // Client: the largest call message (RPC header and inline arguments) this
  // end sends; one larger than the inline threshold goes as RDMA_NOMSG with
  // a position-zero read chunk (RFC 8166 §3.5.3). Server: the largest such
  // message it pulls.
  uint32_t max_long_call = 64u << 10;
  // FRWR: pages per MR (capped by the device), MRs per engine.
  uint32_t frwr_depth = 256;
  uint32_t max_mrs = 1024;
  // Offer to receive Send With Invalidate (RFC 8797's I flag). A client that
  // offers it lets the server invalidate a call's rkey with its reply; a
  // server uses it when the client offered it.
  bool remote_invalidation = true;
  // How chunks are registered. kAuto: fast registration (FRWR / memory
  // windows / UMR) when the device has it; else the registration cache if
  // trusted_peers, else calls that need chunks are refused (ENOTSUP).
  // kRegCache (needs trusted_peers): each chunk registered with reg_mr and
  // cached (max_mrs entries); registrations outlive their calls, so the peer
  // keeps access to those pages and remote invalidation is not offered
  // (reg_cache.h).
  enum class Registration : uint8_t { kAuto, kRegCache };
  Registration registration = Registration::kAuto;
  // The host trusts every peer it connects to with its chunk memory after
  // the calls that offered them, as the registration cache requires. Off by
  // default: without it a peer reaches a call's memory only until the call
  // completes (docs/security.md).
  bool trusted_peers = false;
  // Time every call's stages into per-connection histograms
  // (ConnectionStats::breakdown; tern-perf --breakdown). Off: no memory and
  // one untaken branch per stage; on: a TSC reading per stage (~14 ns on
  // the project's VMs) and ~8 KiB per stage per connection.
  bool breakdown = false;
  // Trace one call in this many per side, stage by stage, into a ring of
  // trace_capacity records (the oldest overwritten), read as Chrome
  // trace-event JSON by trace_json() / write_trace() (call_trace.h,
  // docs/observability.md). 0: off. On, it also turns the breakdown's
  // stamps on (the trace is made of them).
  uint32_t trace_every = 0;
  uint32_t trace_capacity = 4096;
  // One signaled Send per this many.
  uint32_t send_batch = 16;
  // Connections this engine holds at once (accepted and made). A connection
  // request past it is refused with one log line.
  uint32_t max_connections = 1024;
  // Server connections one peer -- Qp::peer_host(): a process on pmd/shm,
  // an address on pmd/verbs -- may hold on this engine at once; a request
  // past it is refused (the client's error says so: EDQUOT). 0: no limit of
  // its own, so that one peer may use the whole table while nobody else
  // wants it (work-conserving: one client with 1,024 connections, as
  // tern-scale opens, is served); idle_reap_ms below makes room for a newcomer
  // then. Set it when the peers are known and one must never hold more.
  uint32_t max_connections_per_peer = 0;
  // Fairness when the table is full (max_connections held): a connection
  // request from a peer holding fewer than its fair share (max_connections
  // over the peers holding connections, the newcomer included) closes an
  // idle connection of the peer holding the most beyond its share, and is
  // accepted. Idle: no call of it being served or held by a handler, and
  // nothing received or sent for idle_reap_ms. A peer with calls in flight
  // is never reaped; when nothing is idle the request is refused (EAGAIN
  // on the client). 10 s: a third of a Tern client's keepalive_idle_ms, so
  // an idle client's keepalive probes alone do not make a hoard unreapable,
  // and far above the gaps between calls of a working client. 0: never.
  uint32_t idle_reap_ms = 10000;
  // Receive buffers (inline_recv bytes each) per device, posted to its
  // shared receive queue and drawn on by every connection there: the
  // server's grants never add up to more, and each client call in flight
  // reserves one for its reply. 0: arena_bytes / 8 worth, at most 4096.
  uint32_t recv_buffers = 0;
  // Send buffers (inline_send bytes each), shared by every connection: one
  // per call being marshaled or whose Send is not yet known complete, one
  // per server call being answered. 0: recv_buffers + 1024 worth, at most
  // arena_bytes / 4.
  uint32_t send_buffers = 0;
  // The bulk pool: read-chunk destinations, bulk results and reply-chunk
  // staging of server calls, long-call staging of client calls. Calls that
  // find it empty wait (they never fail for it). 0: arena_bytes / 2.
  size_t bulk_pool_bytes = 0;
  // Server: the bulk pool is shared fairly among peers (a peer: a client
  // process on pmd/shm, an address on verbs, however many connections it
  // opens). A peer beyond its fair share (the pool over the peers using it)
  // borrows idle memory only while no other peer waits, and never the last
  // bulk_pool_reserve_bytes, which stay free for peers within their share:
  // one that arrives while another has filled the pool is served at once.
  // 0: an eighth of the pool, at least one max_bulk block, at most half
  // (docs/security.md, "One peer among many").
  size_t bulk_pool_reserve_bytes = 0;
  // Server: a pull (the RDMA READs of a call's read chunks) or a push (the
  // WRITEs into its write and reply chunks and the reply's Send), or the
  // signaled Send of any other reply, that its peer has not completed after
  // this long drops the connection, with one warning naming the peer; the
  // call's bulk memory, send buffer and the connection's credits come back
  // once the drain proves the device done with them. It bounds how long one
  // stalled peer -- one that never takes its replies -- holds pool memory
  // and receive credits. 0: no bound.
  uint32_t server_rw_timeout_ms = 5000;
  // Client requests (calls accepted and not yet released) in the whole
  // engine; call() answers EAGAIN past it.
  uint32_t max_calls = 65536;

  // ---- recovery (docs/engine.md, "Recovery"; docs/reliability.md)
  // A client connection that was up and is lost re-establishes itself:
  // attempts back off from reconnect_min_ms, doubling to reconnect_max_ms,
  // each with +-25% jitter; after reconnect_give_up_ms without success it
  // fails for good (0: never gives up). Calls in flight at the loss are sent
  // again on the new connection with the same xid, unless Call::no_retry.
  // Off: a lost connection fails its calls with kDisconnected (the host
  // connects anew).
  bool reconnect = true;
  uint32_t reconnect_min_ms = 10;
  uint32_t reconnect_max_ms = 2000;
  uint32_t reconnect_give_up_ms = 60000;
  // A connect attempt with no answer for this long fails.
  uint32_t connect_timeout_ms = 5000;
  // RDMA connections have no keepalive of their own. A client connection
  // with calls outstanding that has received nothing for keepalive_ms, or
  // that has been idle for keepalive_idle_ms, is probed with an RPC NULL
  // call (of the program it last called); a probe unanswered for
  // keepalive_timeout_ms -- or calls outstanding with no credit to probe
  // with and nothing received for keepalive_ms + keepalive_timeout_ms --
  // declares the connection dead (then it reconnects). 0: off.
  uint32_t keepalive_ms = 5000;
  uint32_t keepalive_idle_ms = 30000;
  uint32_t keepalive_timeout_ms = 5000;
};

// ---------------------------------------------------------------- client calls

enum class CallStatus : uint8_t {
  kOk = 0,
  kDisconnected,  // connection lost before the reply: the call may or may not have run
  kProgUnavail,   // server's accept_stat values (RFC 5531)
  kProgMismatch,
  kProcUnavail,
  kGarbageArgs,
  kSystemErr,
  kDenied,        // MSG_DENIED: RPC version mismatch or authentication error
  kRdmaError,     // the server answered RDMA_ERROR (ERR_VERS or ERR_CHUNK)
  kBadReply,      // the reply could not be decoded
  kTooLarge,      // the results did not fit where the call said they would
  kNoRegistration,  // the call's bulk memory could not be registered (registration
                    // cache: the device refused reg_mr; the log says why). Never sent.
  kTimedOut,        // its Call::timeout_ns passed first (it may or may not have run)
  kCancelled,       // Connection::cancel() (it may or may not have run)
};

// Read and write chunks a call may carry (bulk_send and bulk_recv included).
inline constexpr uint32_t kMaxCallReadChunks = 4;
inline constexpr uint32_t kMaxCallWriteChunks = 4;
const char* call_status_name(CallStatus s);

struct CallReply {
  CallStatus status;
  uint32_t xid;
  // XDR-encoded results (after the RPC reply header); valid only during the callback.
  std::span<const uint8_t> results;
  // Bytes the server placed into Call::bulk_recv.
  uint32_t bulk_recv_len;
  // Bytes it placed into each write chunk: bulk_recv first, then each of
  // Call::write_chunks; nwrites of them.
  uint32_t nwrites = 0;
  uint32_t write_lens[kMaxCallWriteChunks] = {};
  // Times it was sent again on a new connection after a loss.
  uint32_t retransmits = 0;
};

using CallDone = void (*)(void* ctx, const CallReply& reply);

// AUTH_SYS credentials (RFC 5531); an empty machine name means AUTH_NONE.
struct AuthSys {
  uint32_t stamp = 0;
  std::string machine;
  uint32_t uid = 0, gid = 0;
  uint32_t gids[16] = {};
  uint32_t ngids = 0;
};

// A read chunk (RFC 8166 §3.4.5): bulk data the server pulls with RDMA
// READ, placed in the call's XDR stream as if inserted at byte `position` of
// the arguments (a multiple of 4, at most args.size()).
struct ReadChunk {
  std::span<const uint8_t> data;
  uint32_t position = 0;
};

struct Call {
  uint32_t prog = 0, vers = 0, proc = 0;
  // XDR-encoded arguments (copied at call()). Sent inline when the whole call
  // fits the negotiated inline threshold, else as RDMA_NOMSG: the call
  // message goes through a position-zero read chunk the server pulls (up to
  // EngineOptions::max_long_call bytes).
  std::span<const uint8_t> args;
  // Bulk argument data (zero copy): sent as a read chunk, which the server
  // pulls with RDMA READ. Must lie in memory the engine registered
  // (Engine::alloc or Engine::register_memory) and stay untouched until done.
  std::span<const uint8_t> bulk_send;
  // More read chunks, each at its own position (registered memory, zero
  // copy; copied descriptors, the data itself must stay untouched until
  // done). With bulk_send, at most kMaxCallReadChunks in all.
  std::span<const ReadChunk> read_chunks;
  // Space for bulk results (zero copy): offered as a write chunk, which the
  // server fills with RDMA WRITE. Same memory rules.
  std::span<uint8_t> bulk_recv;
  // More write chunks after bulk_recv (one per DDP-eligible result, in
  // order); with bulk_recv at most kMaxCallWriteChunks in all.
  std::span<const std::span<uint8_t>> write_chunks;
  // Largest results expected; when more than fits inline the engine offers a
  // reply chunk (up to EngineOptions::max_reply).
  uint32_t max_results = 0;
  // Copied at call(), as the arguments are: it need not outlive call().
  const AuthSys* auth = nullptr;
  CallDone done = nullptr;
  void* ctx = nullptr;
  // Completes with kTimedOut when no reply came within this many
  // nanoseconds of call() (0: no deadline). A call still waiting to be sent
  // expires without spending a credit; one in flight completes once every
  // registration it made is fenced (docs/engine.md, "Deadlines").
  uint64_t timeout_ns = 0;
  // Not sent again after a connection loss: completes with kDisconnected
  // instead (a call that must not run twice, to a server with no duplicate
  // request cache).
  bool no_retry = false;
};

// ---------------------------------------------------------------- server calls

enum class AcceptStat : uint8_t { kSuccess = 0, kProgUnavail, kProgMismatch, kProcUnavail, kGarbageArgs, kSystemErr };

// A read chunk as the handler sees it: its data, already pulled, and where
// it belongs in the XDR arguments (ServerCall::args()).
struct ReadChunkData {
  uint32_t position;
  std::span<const uint8_t> data;
};

// One incoming call, valid from the handler until reply() (which may come
// later, from any poll() of the same engine).
class ServerCall {
 public:
  virtual ~ServerCall() = default;
  virtual uint32_t xid() const = 0;
  virtual uint32_t prog() const = 0;
  virtual uint32_t vers() const = 0;
  virtual uint32_t proc() const = 0;
  // The inline XDR arguments (without the read chunks' data).
  virtual std::span<const uint8_t> args() const = 0;
  // The call's ONC RPC header as it came (xid through the verifier, RFC
  // 5531 §9): what an upper layer reads the credential from
  // (oncrpc::decode_call: AUTH_SYS uid, gid, groups). The engine has
  // already checked that it decodes. Valid until reply() or drop().
  virtual std::span<const uint8_t> rpc_header() const = 0;
  // The first read chunk's data, already pulled by the engine (empty if none).
  virtual std::span<const uint8_t> bulk() const = 0;
  // Every read chunk, by increasing position.
  virtual std::span<const ReadChunkData> read_chunks() const = 0;
  // Write chunks the client offered, and the room in each.
  virtual uint32_t write_chunk_count() const = 0;
  virtual uint32_t write_chunk_capacity(uint32_t chunk) const = 0;
  // Room the client offered for bulk results in its first write chunk.
  uint32_t bulk_capacity() const { return write_chunk_count() > 0 ? write_chunk_capacity(0) : 0; }
  // A registered buffer for the results of write chunk `chunk`, of up to
  // its capacity, valid until the reply's Send completes. Handlers without
  // a Placer get it from memory the engine set aside before they ran (it
  // never fails for want of memory); with a Placer (which brings its own
  // memory) it is taken from the bulk pool now and may come back empty.
  virtual std::span<uint8_t> write_chunk_buffer(uint32_t chunk, uint32_t len) = 0;
  std::span<uint8_t> bulk_buffer(uint32_t len) { return write_chunk_buffer(0, len); }
  // Sends XDR results (inline, or through the client's reply chunk when
  // large) and pushes `bulk` (registered memory: bulk_buffer(), or the
  // host's own) into the client's first write chunk.
  virtual Status reply(std::span<const uint8_t> results, std::span<const uint8_t> bulk = {}) = 0;
  // The same with one bulk span per write chunk, in order (fewer than the
  // client offered: the rest are returned empty).
  virtual Status reply_chunks(std::span<const uint8_t> results, std::span<const std::span<const uint8_t>> bulk) = 0;
  virtual Status reply_error(AcceptStat stat) = 0;
  // Answers nothing: the call is released unanswered (a duplicate of a
  // call still being served: the client sends it again if it must). Its
  // client's credit stays taken until that client's own recovery.
  virtual void drop() = 0;
  // Who sent it, the same across its client's reconnects: its process on
  // shm ("pid 1234 uid 1000"), its address on verbs ("169.254.77.1"). With
  // xid() and args_digest(), what a duplicate request cache keys on
  // (engine/duplicate_cache.h), as nfsd's does.
  virtual std::string_view peer_id() const = 0;
  // A digest of the call's arguments: the inline ones and the read
  // chunks' data, so that a retransmission can be told from another call
  // that happens to reuse an xid. Keyed (SipHash-2-4 under a random key
  // made once per process): a peer cannot compute it, so it cannot choose
  // arguments that collide with another call's; the same call gives the
  // same digest only within one process.
  virtual uint64_t args_digest() const = 0;
};

using Handler = void (*)(void* ctx, ServerCall* call);

// Handler-directed placement, for targets that move data between the wire
// and their own buffers with no copy (SPDK-like): called before read chunk
// `chunk` (of `len` bytes) of `call` is pulled, with the call's header and
// inline arguments already readable. Return registered memory (Engine::alloc
// or Engine::register_memory) of at least len bytes that stays valid until
// the handler replies, or an empty span to let the engine use its bulk pool.
// The handler then finds the data there (read_chunks()).
using Placer = std::span<uint8_t> (*)(void* ctx, ServerCall* call, uint32_t chunk, uint32_t len);

// ---------------------------------------------------------------- connections

struct ConnectionInfo {
  uint32_t inline_send, inline_recv;  // negotiated
  // Client: the server may invalidate our rkeys (we offered it to an RFC
  // 8797 peer). Server: we may (the client offered it).
  bool remote_invalidation;
  uint32_t credits;                   // client: last grant; server: what it grants
};

// ---------------------------------------------------------------- observability

// A latency distribution in nanoseconds (fixed-memory histogram:
// percentiles within 1.6%).
struct LatencySummary {
  uint64_t count = 0, min = 0, mean = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, max = 0;
};

// A snapshot of one connection, as xprtrdma's mountstats "xprt: rdma" line
// shows a transport. Counter names are documented in docs/observability.md;
// those prefixed "qp." are the driver's counters for this connection's QP.
struct ConnectionStats {
  uint64_t id = 0;           // engine-unique, never reused; log lines say "conn <id>"
  bool server = false;       // accepted by this engine's listen()
  std::string peer;          // who is at the other end ("pid 12 uid 0 qp 3 (shm:path=...)")
  // The connection's phase (engine/conn_machine.h): "connecting", "ready",
  // "draining", "dead"; a client's also "draining-to-reconnect", "backoff",
  // "port-down", "reconnecting".
  const char* state = "";
  uint64_t connect_ns = 0;   // connect() (or the request) to established; 0 until then
  uint64_t age_ns = 0;       // since established
  uint64_t idle_ns = 0;      // since the last message sent or received
  uint32_t outstanding = 0;  // client: calls sent, awaiting reply; server: calls being served
  uint32_t credits = 0;
  std::vector<std::pair<const char*, uint64_t>> counters;
  LatencySummary rtt;        // client: call() to completion; server: receive to reply posted
  // With EngineOptions::breakdown: each stage of the round trip (client:
  // queue, wire, invalidate, complete, total, send_done; server: pull,
  // wait, handler, post, total -- docs/observability.md), in that order.
  // Empty otherwise.
  std::vector<std::pair<const char*, LatencySummary>> breakdown;
};

// One procedure on one side of this engine. Client: procedures it called;
// server: procedures it has handlers for (calls for others count under
// prog = vers = proc = 0xffffffff, so a peer cannot grow this table).
struct ProcedureStats {
  uint32_t prog = 0, vers = 0, proc = 0;
  bool server = false;
  uint64_t ops = 0, errors = 0, bytes_sent = 0, bytes_received = 0;
  LatencySummary rtt;
};

// A client connection's state, as the host sees it (Connection::state()).
enum class ConnState : uint8_t {
  kConnecting,    // the first connect is under way
  kReady,         // connected: calls flow
  kReconnecting,  // lost, and re-establishing itself: calls wait (or expire)
  kFailed,        // lost for good (refused, unreachable, gave up, or reconnect off)
  kClosed,        // close() was called
};
const char* conn_state_name(ConnState s);

class Connection;
// A client connection changed state; `why` says why it left kReady (or
// failed). Called inside poll(), on the engine's thread; not while the
// engine is being destroyed.
using StateCallback = void (*)(void* ctx, Connection* conn, ConnState from, ConnState to, const Status& why);

class Connection {
 public:
  virtual ~Connection() = default;
  virtual bool ready() const = 0;      // connected and usable
  virtual bool failed() const = 0;     // lost for good (or closed): make a new one
  virtual Status error() const = 0;    // why, when failed() (or why the last loss)
  virtual ConnectionInfo info() const = 0;
  virtual ConnState state() const { return ready() ? ConnState::kReady : failed() ? ConnState::kFailed : ConnState::kConnecting; }
  // Client: issues a call. 0, or EAGAIN (backlog full), ENOTCONN (not yet
  // connected, or failed), EINVAL (malformed: unregistered bulk memory, bad
  // chunk positions), EMSGSIZE (over max_bulk, max_long_call or a chunk
  // list's segments), ENOTSUP (the call needs chunks, and the device has no
  // fast registration while EngineOptions::trusted_peers is off). While the
  // connection is re-establishing itself calls are accepted and wait.
  // Completion always arrives through call.done once call() returned 0,
  // even if the connection is lost. *xid, if given, is the call's xid (for
  // cancel()).
  virtual int call(const Call& call, uint32_t* xid = nullptr) = 0;
  // Client: cancels the call with this xid. It completes with kCancelled,
  // once every registration it made is fenced (maybe from a later poll()).
  // 0, or ENOENT (no such call outstanding on this connection).
  virtual int cancel(uint32_t xid) { (void)xid; return ENOENT; }
  // Client: state changes reach `cb` (nullptr: none).
  virtual void on_state_change(StateCallback cb, void* ctx) { (void)cb, (void)ctx; }
  virtual uint32_t outstanding() const = 0;
  virtual ConnectionStats stats() const = 0;
  // Done with this connection: a graceful close if it is up; outstanding
  // calls complete with kDisconnected. The engine then reclaims the
  // connection and its memory from a later poll(), so the pointer must not
  // be used after close(). Call it on failed connections too.
  virtual void close() = 0;
};

// ---------------------------------------------------------------- several engines, one address

// Engines that serve one address together: one engine per lcore, and the
// connections -- a client's nconnect=N among them -- spread over them.
// Each engine calls listen(spec, group) with the same spec. The first one
// listens on the device; each connection request it receives is dealt to
// the group's engines in turn, and the engine whose turn it is accepts it
// on its own device (its own queues, protection domain and memory), as if
// it had arrived there: from then on the connection is that engine's alone.
// An engine picks up the requests dealt to it in its poll() (within a
// millisecond, or at once when it sleeps in wait mode). The group itself is
// thread-safe; each member keeps it alive, and leaves it when its engine is
// destroyed (requests dealt to it and not yet picked up are refused; when
// the listening engine goes, no new connection comes to the others).
// Drivers hand requests over with Device::detach/adopt (pmd/shm,
// pmd/verbs); with another driver the listening engine accepts them all.
class ListenGroup {
 public:
  static std::shared_ptr<ListenGroup> create();
  virtual ~ListenGroup() = default;
  // Connection requests dealt to each member so far, in the order they joined.
  virtual std::vector<uint64_t> dealt() const = 0;
};

// ---------------------------------------------------------------- the engine

struct EngineStats {
  Counter calls, replies, backlogged, sends, sends_signaled, recvs_posted, recv_batches;
  Counter read_chunks, write_chunks, reply_chunks, rdma_reads, rdma_writes;
  Counter local_inv_chains, remote_invalidations, rdma_errors_sent, rdma_errors_received;
  Counter bad_headers, credit_waits, disconnects, calls_deferred;
  // Connections this engine dropped because the peer broke the protocol.
  Counter protocol_errors;
  // Replies that failed their call (kBadReply) because they could not be
  // decoded, or answered with an obsolete or unknown procedure or version.
  Counter bad_replies;
  // A gauge: registrations a peer can reach right now (fast registrations
  // not yet proved invalid, and registration-cache entries). 0 at idle
  // without the registration cache.
  Counter rkeys_live;
  // Connection requests refused because max_connections were held (and
  // nothing could be reaped), their peer held max_connections_per_peer, or
  // the receive pool could not grant one more connection its first credit.
  Counter connections_refused;
  // Of those, refused because their peer held max_connections_per_peer; and
  // idle connections closed to make room for a peer under its fair share
  // (EngineOptions::idle_reap_ms).
  Counter connections_refused_peer_limit, connections_reaped;
  // Gauges: connections held now; client calls and server calls waiting
  // for bulk pool memory, send buffers or receive reservations now.
  Counter connections;
  Counter waiting_for_memory;
  // Calls whose wait for memory began (they waited, they did not fail).
  Counter memory_waits;
  // Client calls sent as RDMA_NOMSG (long calls).
  Counter long_calls;
  // Recovery (docs/engine.md, "Recovery"): connections re-established,
  // attempts made, calls sent again after a loss, replies that came after
  // their call timed out or was cancelled, keepalive probes sent and
  // connections they (or silence) declared dead, connections declared dead
  // for any reason, cancels.
  Counter reconnects, reconnect_attempts, retransmits, late_replies, keepalive_probes, keepalive_failures;
  Counter declared_dead, cancels;
  // Client connections the millisecond tick looked at for deadlines,
  // keepalive, connect timeouts and reconnects (only those with something
  // due: docs/engine.md, "Timers").
  Counter timer_visits;
  // Server calls a handler released unanswered (ServerCall::drop).
  Counter calls_dropped;
  // Connections dropped because their peer did not complete a pull or a
  // push, or to take a signaled reply, within EngineOptions::server_rw_timeout_ms.
  Counter rw_timeouts;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& opt);
  virtual ~Engine() = default;

  // One pass over every queue and connection. Returns how much work it did
  // (completions, connection events, calls sent from the backlog; 0: idle),
  // so a host reactor can tell busy from idle.
  virtual int poll() = 0;

  // ---- wait mode: sleep while idle instead of spinning (engine_wait.cc)
  //
  // An engine busy-polls by default. A host that wants the core back while
  // nothing happens follows this protocol, on the engine's thread:
  //
  //   for (;;) {
  //     if (eng->poll() > 0) continue;          // 1. busy: keep polling
  //     auto idle = eng->prepare_wait();        // 2. idle: arm, and look once more
  //     if (!idle || !*idle) continue;          //    work came meanwhile (or no wait mode)
  //     epoll_wait(<a set holding eng->wait_fd()>, ..., timeout);   // 3. sleep
  //   }                                         // 4. the next poll() consumes the wake-up
  //
  // prepare_wait() arms every completion queue (and pmd/shm's doorbells, and
  // the drivers' timers), then polls once more: a completion that arrived
  // before the arm raises no notification, so this second look is what
  // makes the sleep safe. It returns false when that look found work -- the
  // host must poll again, not sleep -- and true when nothing can happen now
  // without wait_fd() becoming readable: a completion, a connection event, a
  // driver deadline. The host's own timers are its business (the epoll
  // timeout). Calls made between prepare_wait() and the sleep are fine: the
  // armed queues wake the fd for their completions. Waking costs a few
  // microseconds of latency per sleep (docs/performance.md, "Wait mode").
  //
  // wait_fd(): an epoll fd of the engine's devices' wait fds; poll or epoll
  // it for EPOLLIN, never read it. -1 when a device has no wait mode (then
  // prepare_wait() says kUnsupported). Devices opened later join it at the
  // next prepare_wait().
  virtual int wait_fd() = 0;
  virtual Result<bool> prepare_wait() = 0;
  // For simple hosts: prepare_wait(), and if it says idle, sleeps on
  // wait_fd() for up to timeout_ms (-1: until something happens). True if it
  // slept (woken or timed out), false if there was work; then poll().
  virtual Result<bool> wait(int timeout_ms) = 0;

  // Registered memory for bulk buffers (zero copy), from the engine's arena.
  virtual void* alloc(size_t len, size_t align = 4096) = 0;
  // Registers the host's own memory for bulk buffers. pmd/shm needs memory it
  // can share (a tern::mem::Arena); other drivers take any memory.
  virtual Status register_memory(void* addr, size_t len) = 0;

  // Client: starts connecting to a server; poll() until ready() or failed().
  virtual Result<Connection*> connect(std::string_view device_spec) = 0;
  // Server: serve calls at this address with the registered handlers.
  virtual Status listen(std::string_view device_spec) = 0;
  // The same, together with the other engines of `group` (see ListenGroup;
  // a null group is listen(device_spec)). kInvalidArgument: the group
  // serves another spec.
  virtual Status listen(std::string_view device_spec, const std::shared_ptr<ListenGroup>& group) = 0;
  // Serve (prog, vers, proc) with h; `place`, if given, decides where that
  // procedure's read chunks land (see Placer). A later call replaces it.
  virtual void handle(uint32_t prog, uint32_t vers, uint32_t proc, Handler h, void* ctx, Placer place = nullptr) = 0;
  // A host's own completions polled in the engine's loop (e.g. tern-nfsd's
  // storage ring, nfsd/storage_queue.h): fn runs once per poll(), after the
  // calls of that pass were handed to their handlers (so that what they
  // started goes out in one batch), and returns how much work it did (> 0
  // keeps a host from sleeping). `wake_fd` (an eventfd, or -1) joins
  // wait_fd()'s set, so that a sleeping engine wakes for the host's
  // completions too; the engine drains it when it wakes (the host must look
  // at its completions after each drain: fn runs in that same poll()).
  // Pollers do not run once the engine is being destroyed: a host may
  // destroy what it polls first (with its work done).
  using Poller = int (*)(void* ctx);
  virtual void add_poller(Poller fn, void* ctx, int wake_fd = -1) = 0;

  virtual const EngineStats& stats() const = 0;
  // EngineStats and the registrars' MR counters (mrs_allocated,
  // mrs_destroyed, mrs_orphaned: destroyed because a connection was lost with
  // their state unknown, out_of_mrs), by name.
  virtual StatsView stats_view() const = 0;
  // Every connection this engine holds (clients it made and servers' peers).
  virtual std::vector<ConnectionStats> connection_stats() const = 0;
  // With EngineOptions::breakdown: the stages of every call this engine
  // made (server false) or served (true), over all its connections, those
  // already gone included; as ConnectionStats::breakdown. Empty when off.
  virtual std::vector<std::pair<const char*, LatencySummary>> breakdown(bool server) const = 0;
  virtual std::vector<ProcedureStats> procedure_stats() const = 0;
  // Everything above plus each device's driver counters, as one JSON
  // document (docs/observability.md): what telemetry and tools read.
  virtual std::string stats_json() const = 0;
  // The one call that is safe from any thread (a telemetry or monitoring
  // thread): asks the engine's thread for stats_json() at its next poll()
  // and waits up to wait_ms for it. If the engine does not poll in time, it
  // returns the last snapshot it published (its "snapshot_age_ms" says how
  // old), or "" if there never was one.
  virtual std::string stats_json_snapshot(int wait_ms) = 0;
  // With EngineOptions::trace_every: the sampled calls' stages as Chrome
  // trace-event JSON (chrome://tracing, ui.perfetto.dev); with it off, a
  // trace with no events. write_trace() writes it to PATH.tmp.<pid> and
  // renames it over PATH. Engine thread, like the calls above.
  virtual std::string trace_json() const = 0;
  virtual Status write_trace(const std::string& path) const = 0;
};

}  // namespace tern::rpc
