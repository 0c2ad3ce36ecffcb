/*
 * Tern's C API: ONC RPC over RPC-over-RDMA Version 1 (RFC 8166, RFC 8797),
 * one engine per thread, driven by the host's poll loop. A thin layer over
 * the C++ API (lib/engine/engine.h); docs/c-api.md explains the model.
 *
 * Threading. An engine has no thread of its own and never blocks. Every
 * function taking a tern_engine, tern_conn or tern_server_call must be called
 * from the one thread that drives that engine (the thread that calls
 * tern_engine_poll()); engines on different threads share nothing. Call
 * completions and server handlers run only inside tern_engine_poll(), on that
 * thread. The functions that take no handle (names, errors, option
 * defaults, logging) may be called from any thread; a tern_arena from one
 * thread at a time.
 *
 * Lifetimes. Every pointer the library hands to a callback (a reply's
 * results, a call's arguments and bulk data) is valid only during that
 * callback unless said otherwise. Handles:
 *   tern_engine       from tern_engine_create() to tern_engine_destroy().
 *   tern_conn         from tern_engine_connect() to tern_conn_close(), which
 *                     every connection needs, failed ones too; the engine
 *                     reclaims it later. Never use it after close.
 *   tern_server_call  from the handler that receives it until a successful
 *                     reply (or one failing with -ENOTCONN); it may be kept
 *                     and answered from a later poll of the same engine.
 *
 * Errors. Functions returning int return 0 (or a count) on success and a
 * negative errno on failure; the errno says what to do next:
 *   -EINVAL        a wrong argument: fix the call
 *   -ENOTSUP       the device or configuration cannot do this
 *   -EAGAIN        out of queue slots, credits or memory for now: poll, retry
 *                  (or give the engine more: tern_engine_opts)
 *   -ENOTCONN      the connection is not (or no longer) usable
 *   -ETIMEDOUT     nothing happened in time
 *   -EPROTO        the peer refused or broke the protocol
 *   -ENOENT        no such device, driver or object
 *   -EALREADY      the object is not in a state that allows this
 *   -EMSGSIZE      a call's bulk data or expected results are too large
 *   -ENOTRECOVERABLE  a bug in Tern: report it
 * A failing function (but tern_conn_call, on the datapath) also leaves a
 * human-readable reason in tern_last_error() (per thread, like errno). No
 * C++ exception ever crosses this API; like the rest of Tern, the library
 * aborts when the C++ heap is exhausted and when an internal invariant
 * breaks.
 */
#ifndef TERN_TERN_H
#define TERN_TERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* No C++ exception leaves the library; from C++ the functions say so.
 * Callbacks run inside them: a C++ callback must not throw either. */
#if defined(__cplusplus) && __cplusplus >= 201103L
#define TERN_NOEXCEPT noexcept
#else
#define TERN_NOEXCEPT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's API; tern_c_api_version() says which version
 * the library linked in was built with. */
#define TERN_C_API_VERSION 2
uint32_t tern_c_api_version(void) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ handles */

typedef struct tern_engine tern_engine;
typedef struct tern_conn tern_conn;
typedef struct tern_server_call tern_server_call;
typedef struct tern_arena tern_arena;

/* ------------------------------------------------------------------ errors */

/* A short description of a value returned by a tern_* function (0 or a
 * negative errno). Never NULL; the string is static. */
const char* tern_strerror(int rc) TERN_NOEXCEPT;

/* Why the most recent failing tern_* call on this thread failed
 * ("kind: message (errno N: ...)"); "" if none has. Valid until the next
 * failing call on this thread. tern_conn_call() does not set it (it is on the
 * datapath: its return value says all). */
const char* tern_last_error(void) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ engine options */

/* How a call's chunks are registered. */
typedef enum tern_registration {
  /* Fast registration (FRWR, memory windows, UMR) when the device has it;
   * else the registration cache when trusted_peers is set; else calls that
   * need chunks are refused with -ENOTSUP. */
  TERN_REGISTRATION_AUTO = 0,
  /* Each chunk registered with reg_mr and cached (max_mrs entries); needs
   * trusted_peers: registrations outlive their calls, so the peer keeps
   * access to those pages, and remote invalidation is not offered. */
  TERN_REGISTRATION_CACHE = 1
} tern_registration;

/* Engine options. Fill with tern_engine_opts_init(), then change fields: the
 * struct may grow at its end in later versions, and `size` tells the library
 * how much of it the caller knows. */
typedef struct tern_engine_opts {
  size_t size; /* set by tern_engine_opts_init: sizeof(tern_engine_opts) */
  /* Registered memory for send/receive buffers and tern_engine_alloc(). A
   * server needs (credits + send_batch + 1) x (max_bulk + max_reply) of it
   * per connection. Default 128 MiB. */
  size_t arena_bytes;
  /* Inline thresholds this end offers (RFC 8797 private data), in
   * [1024, 262144]; the effective ones are negotiated per connection.
   * Default 4096 each. */
  uint32_t inline_send;
  uint32_t inline_recv;
  /* Server: credits granted (receive buffers per connection). Client: most
   * calls kept outstanding per connection. In [1, 1024]; default 32. */
  uint32_t credits;
  /* Client: calls that may wait for a credit on each connection; default 1024. */
  uint32_t backlog;
  /* Largest bulk transfer in one chunk (default 1 MiB) and largest reply
   * through a reply chunk (default 64 KiB). */
  uint32_t max_bulk;
  uint32_t max_reply;
  /* Fast registration: pages per MR (capped by the device; default 256) and
   * MRs per engine (default 1024). */
  uint32_t frwr_depth;
  uint32_t max_mrs;
  /* One signaled Send per this many; default 16. */
  uint32_t send_batch;
  tern_registration registration; /* default TERN_REGISTRATION_AUTO */
  /* Offer to receive Send With Invalidate (RFC 8797); default true. */
  bool remote_invalidation;
  /* The host trusts every peer with its chunk memory after the calls that
   * offered it, as the registration cache requires; default false
   * (docs/security.md). */
  bool trusted_peers;

  /* ---- since TERN_C_API_VERSION 2: recovery (docs/engine.md, "Recovery") */
  /* A client connection that was up and is lost re-establishes itself:
   * attempts back off from reconnect_min_ms (default 10), doubling to
   * reconnect_max_ms (2000), each with +-25% jitter; after
   * reconnect_give_up_ms (60000; 0: never) without success it fails for
   * good. Calls in flight at the loss are sent again on the new connection
   * with the same xid, unless tern_call.no_retry. false: a lost connection
   * fails its calls with TERN_CALL_DISCONNECTED. Default true. */
  bool reconnect;
  uint32_t reconnect_min_ms;
  uint32_t reconnect_max_ms;
  uint32_t reconnect_give_up_ms;
  /* A connect attempt with no answer for this long fails; default 5000. */
  uint32_t connect_timeout_ms;
  /* Keepalive (RDMA has none): a client connection with calls outstanding
   * that has received nothing for keepalive_ms (default 5000), or idle for
   * keepalive_idle_ms (30000), is probed with an RPC NULL call; a probe
   * unanswered for keepalive_timeout_ms (5000) declares the connection dead
   * (then it reconnects). 0: that check is off. */
  uint32_t keepalive_ms;
  uint32_t keepalive_idle_ms;
  uint32_t keepalive_timeout_ms;
} tern_engine_opts;

/* Fills *opts with the defaults and sets opts->size = size, which must be
 * sizeof(tern_engine_opts) as the caller sees it. */
void tern_engine_opts_init(tern_engine_opts* opts, size_t size) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ engine */

/* Creates an engine with `opts` (NULL: defaults). 0 and *engine set, or
 * -EINVAL (bad options), -EAGAIN (no memory for the arena). */
int tern_engine_create(const tern_engine_opts* opts, tern_engine** engine) TERN_NOEXCEPT;

/* Destroys the engine and everything it owns: its connections, their
 * registrations and memory, tern_engine_alloc() buffers. Calls still
 * outstanding complete inside it, once each, with TERN_CALL_DISCONNECTED
 * (after their registrations are fenced); state-change callbacks do not
 * run. NULL is ignored. */
void tern_engine_destroy(tern_engine* engine) TERN_NOEXCEPT;

/* One pass over every queue and connection; runs the callbacks that are due.
 * Returns how much work it did (0: idle), so a reactor can tell busy from
 * idle (SPDK's SPDK_POLLER_BUSY / SPDK_POLLER_IDLE). */
int tern_engine_poll(tern_engine* engine) TERN_NOEXCEPT;

/* Registered memory for bulk buffers, carved from the engine's arena and kept
 * until the engine is destroyed (it is never given back). `align` is a power
 * of two, 0 for 4096. NULL when the arena is full (tern_last_error says). */
void* tern_engine_alloc(tern_engine* engine, size_t len, size_t align) TERN_NOEXCEPT;

/* Registers the host's own memory for bulk buffers (zero copy). The shm
 * driver can register only shareable memory: carve it from a tern_arena.
 * The memory must outlive the engine. 0 or a negative errno. */
int tern_engine_register_memory(tern_engine* engine, void* addr, size_t len) TERN_NOEXCEPT;

/* Client: starts connecting to a server at `device_spec` ("driver:key=value,
 * ...", e.g. "shm:path=/run/tern.sock"). 0 and *conn set; then poll until
 * tern_conn_ready() or tern_conn_failed(). -ENOENT: no such driver; -EINVAL:
 * a malformed spec; others from the device. */
int tern_engine_connect(tern_engine* engine, const char* device_spec, tern_conn** conn) TERN_NOEXCEPT;

/* Server: serves calls at `device_spec` with the registered handlers. */
int tern_engine_listen(tern_engine* engine, const char* device_spec) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ statistics */

/* Visits every counter of the engine, in a stable order, by name (docs/
 * engine.md lists them: "calls", "replies", "read_chunks", "rdma_reads",
 * ...). `name` is valid during the callback. Returns how many it visited. */
typedef void (*tern_stat_fn)(void* ctx, const char* name, uint64_t value);
int tern_engine_stats(const tern_engine* engine, tern_stat_fn fn, void* ctx) TERN_NOEXCEPT;

/* One counter by name: 0 and *value set, or -ENOENT. */
int tern_engine_stat(const tern_engine* engine, const char* name, uint64_t* value) TERN_NOEXCEPT;

/* Everything the engine can tell as one JSON document (docs/observability.md):
 * the counters above, each device's driver counters, every connection
 * (counters, RTT percentiles) and every procedure. Writes at most len bytes
 * including the terminating NUL into buf and returns the document's length
 * (without the NUL), as snprintf does: a return >= len means it was cut;
 * call again with a larger buffer. On the engine's thread only. */
size_t tern_engine_stats_json(const tern_engine* engine, char* buf, size_t len) TERN_NOEXCEPT;

/* The same document from any thread (a monitoring thread): the engine's
 * thread makes it at its next tern_engine_poll, which this waits up to
 * wait_ms for; otherwise the last one made is returned, its
 * "snapshot_age_ms" saying how old. Returns 0 if there never was one. */
size_t tern_engine_stats_json_snapshot(tern_engine* engine, int wait_ms, char* buf, size_t len) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ client calls */

/* How a call ended. Values may be added at the end: treat an unknown one as a
 * failure. */
typedef enum tern_call_status {
  TERN_CALL_OK = 0,
  /* The connection was lost or closed before the reply: the call may or may
   * not have run. */
  TERN_CALL_DISCONNECTED = 1,
  /* The server's accept_stat (RFC 5531). */
  TERN_CALL_PROG_UNAVAIL = 2,
  TERN_CALL_PROG_MISMATCH = 3,
  TERN_CALL_PROC_UNAVAIL = 4,
  TERN_CALL_GARBAGE_ARGS = 5,
  TERN_CALL_SYSTEM_ERR = 6,
  /* MSG_DENIED: RPC version mismatch or authentication error. */
  TERN_CALL_DENIED = 7,
  /* The server answered RDMA_ERROR (ERR_VERS or ERR_CHUNK). */
  TERN_CALL_RDMA_ERROR = 8,
  /* The reply could not be decoded. */
  TERN_CALL_BAD_REPLY = 9,
  /* The results did not fit where the call said they would. */
  TERN_CALL_TOO_LARGE = 10,
  /* The call's bulk memory could not be registered; nothing was sent. */
  TERN_CALL_NO_REGISTRATION = 11,
  /* Its tern_call.timeout_ns passed first (it may or may not have run). It
   * completes only once the server can no longer reach its bulk memory. */
  TERN_CALL_TIMED_OUT = 12,
  /* tern_conn_cancel() (it may or may not have run); same fencing. */
  TERN_CALL_CANCELLED = 13
} tern_call_status;

/* "ok", "disconnected", "procedure unavailable", ...; never NULL. */
const char* tern_call_status_name(tern_call_status status) TERN_NOEXCEPT;

/* What a call's completion callback receives; valid only during it. */
typedef struct tern_call_reply {
  tern_call_status status;
  uint32_t xid;
  /* XDR-encoded results (after the RPC reply header). */
  const uint8_t* results;
  size_t results_len;
  /* Bytes the server placed into the call's bulk_recv. */
  uint32_t bulk_recv_len;
  /* Since version 2: times the call was sent again on a new connection
   * after a loss. */
  uint32_t retransmits;
} tern_call_reply;

typedef void (*tern_call_done_fn)(void* ctx, const tern_call_reply* reply);

/* AUTH_SYS credentials (RFC 5531). */
#define TERN_AUTH_SYS_MAX_GIDS 16
#define TERN_AUTH_SYS_MAX_MACHINE 255
typedef struct tern_auth_sys {
  uint32_t stamp;
  /* NUL-terminated, at most TERN_AUTH_SYS_MAX_MACHINE bytes; NULL or ""
   * sends AUTH_NONE instead. */
  const char* machine;
  uint32_t uid;
  uint32_t gid;
  uint32_t ngids; /* at most TERN_AUTH_SYS_MAX_GIDS */
  uint32_t gids[TERN_AUTH_SYS_MAX_GIDS];
} tern_auth_sys;

/* One call. Zero means "none" or "default" for every field but `size`, so
 * `tern_call c = {.size = sizeof c, ...}` is a valid start. The struct may
 * grow at its end; `size` says how much of it the caller knows. It is read
 * only during tern_conn_call(): it, the arguments and the credentials may be
 * reused as soon as that returns. */
typedef struct tern_call {
  size_t size; /* sizeof(tern_call) */
  uint32_t prog;
  uint32_t vers;
  uint32_t proc;
  /* Largest results expected; when more than fits inline, the engine offers
   * a reply chunk (up to tern_engine_opts.max_reply). */
  uint32_t max_results;
  /* XDR-encoded arguments, sent inline (copied by tern_conn_call). */
  const void* args;
  size_t args_len;
  /* Bulk argument data, zero copy: sent as a read chunk, which the server
   * pulls with RDMA READ. Must lie in registered memory (tern_engine_alloc,
   * tern_engine_register_memory) and stay untouched until the call is done. */
  const void* bulk_send;
  size_t bulk_send_len;
  /* Room for bulk results, zero copy: offered as a write chunk, which the
   * server fills with RDMA WRITE. Same memory rules. */
  void* bulk_recv;
  size_t bulk_recv_len;
  /* NULL: AUTH_NONE. Copied by tern_conn_call. */
  const tern_auth_sys* auth;
  /* Required. Runs exactly once, inside a later tern_engine_poll(), if and
   * only if tern_conn_call() returned 0 — also when the connection is lost
   * or closed (TERN_CALL_DISCONNECTED). */
  tern_call_done_fn done;
  void* ctx;
  /* ---- since TERN_C_API_VERSION 2 */
  /* Completes with TERN_CALL_TIMED_OUT when no reply came within this many
   * nanoseconds of tern_conn_call() (0: no deadline). A call still waiting
   * for a credit expires without being sent; one in flight completes once
   * every registration it made is fenced (the connection may be dropped
   * and re-established for that, as Linux's client does). */
  uint64_t timeout_ns;
  /* Not sent again after a connection loss: completes with
   * TERN_CALL_DISCONNECTED instead (a call that must not run twice, to a
   * server without a duplicate request cache). */
  bool no_retry;
} tern_call;

/* ------------------------------------------------------------------ connections */

typedef struct tern_conn_info {
  size_t size; /* set by the caller: sizeof(tern_conn_info) */
  /* Negotiated inline thresholds. */
  uint32_t inline_send;
  uint32_t inline_recv;
  /* Client: the last credit grant. Server: what it grants. */
  uint32_t credits;
  /* Client: the server may invalidate our rkeys (we offered it to an RFC
   * 8797 peer). Server: we may (the client offered it). */
  bool remote_invalidation;
} tern_conn_info;

/* A client connection's state (since version 2). */
typedef enum tern_conn_state {
  TERN_CONN_CONNECTING = 0,   /* the first connect is under way */
  TERN_CONN_READY = 1,        /* connected: calls flow */
  TERN_CONN_RECONNECTING = 2, /* lost, re-establishing itself: calls wait (or expire) */
  TERN_CONN_FAILED = 3,       /* lost for good (refused, unreachable, gave up, or reconnect off) */
  TERN_CONN_CLOSED = 4        /* tern_conn_close() was called */
} tern_conn_state;

/* "connecting", "ready", ...; never NULL. */
const char* tern_conn_state_name(tern_conn_state state) TERN_NOEXCEPT;

/* Connected and usable. */
bool tern_conn_ready(const tern_conn* conn) TERN_NOEXCEPT;
/* Where the connection is (since version 2). */
tern_conn_state tern_conn_get_state(const tern_conn* conn) TERN_NOEXCEPT;

/* A client connection changed state: inside tern_engine_poll(), on the
 * engine's thread, never during tern_engine_destroy() or tern_conn_close().
 * `err` is 0, or a negative errno saying why it left READY (or failed),
 * with the reason as text in `why` (valid during the call; "" when err is
 * 0). */
typedef void (*tern_conn_state_fn)(void* ctx, tern_conn* conn, tern_conn_state from, tern_conn_state to, int err,
                                   const char* why);
/* State changes of `conn` reach fn (NULL: none); 0 or -EINVAL. */
int tern_conn_on_state_change(tern_conn* conn, tern_conn_state_fn fn, void* ctx) TERN_NOEXCEPT;
/* Disconnected, refused or lost: close it and make a new one. */
bool tern_conn_failed(const tern_conn* conn) TERN_NOEXCEPT;
/* Why it failed: 0 if it has not, else a negative errno, and the reason as
 * text into buf (truncated to len, always NUL-terminated when len > 0; buf
 * may be NULL when len is 0). */
int tern_conn_error(const tern_conn* conn, char* buf, size_t len) TERN_NOEXCEPT;
/* Fills the first info->size bytes of *info. 0 or -EINVAL. */
int tern_conn_info_get(const tern_conn* conn, tern_conn_info* info) TERN_NOEXCEPT;

/* Client: issues a call. 0 (then call->done runs exactly once, from a later
 * poll), or -EAGAIN (backlog full: poll and retry), -ENOTCONN (not ready, or
 * failed), -EINVAL (no callback, inline arguments over the inline threshold,
 * bulk memory the engine did not register, bad credentials, a `size` too
 * small), -EMSGSIZE (bulk data over max_bulk or more segments than a chunk
 * holds, max_results over max_reply), -ENOTSUP (the call needs chunks and
 * the device has no fast registration while trusted_peers is off). */
int tern_conn_call(tern_conn* conn, const tern_call* call) TERN_NOEXCEPT;

/* The same, and the call's xid into *xid (for tern_conn_cancel). While the
 * connection is re-establishing itself, calls are accepted and wait. */
int tern_conn_call_xid(tern_conn* conn, const tern_call* call, uint32_t* xid) TERN_NOEXCEPT;

/* Client: cancels the call with this xid. It completes with
 * TERN_CALL_CANCELLED from a later poll, once every registration it made is
 * fenced. 0, or -ENOENT (no such call outstanding on this connection). */
int tern_conn_cancel(tern_conn* conn, uint32_t xid) TERN_NOEXCEPT;

/* Client: calls sent and not yet answered. Calls waiting in the backlog for
 * a credit are not counted: the count never exceeds the server's grant. */
uint32_t tern_conn_outstanding(const tern_conn* conn) TERN_NOEXCEPT;

/* Done with this connection: a graceful close if it is up; outstanding calls
 * complete with TERN_CALL_DISCONNECTED from later polls. The engine reclaims
 * the connection, so `conn` must not be used after this. Close failed
 * connections too. */
void tern_conn_close(tern_conn* conn) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ server calls */

/* RFC 5531 accept_stat values, for tern_server_call_reply_error. */
typedef enum tern_accept_stat {
  TERN_ACCEPT_SUCCESS = 0,
  TERN_ACCEPT_PROG_UNAVAIL = 1,
  TERN_ACCEPT_PROG_MISMATCH = 2,
  TERN_ACCEPT_PROC_UNAVAIL = 3,
  TERN_ACCEPT_GARBAGE_ARGS = 4,
  TERN_ACCEPT_SYSTEM_ERR = 5
} tern_accept_stat;

/* Receives each call for the (prog, vers, proc) it was registered for, inside
 * tern_engine_poll(). It may reply at once or keep `call` and reply from a
 * later poll of the same engine. */
typedef void (*tern_handler_fn)(void* ctx, tern_server_call* call);

/* Server: `handler` serves (prog, vers, proc); a second registration of the
 * same triple replaces the first. Calls for programs, versions or procedures
 * nobody registered get PROG_UNAVAIL, PROG_MISMATCH or PROC_UNAVAIL. 0 or
 * -EINVAL (no handler). */
int tern_engine_handle(tern_engine* engine, uint32_t prog, uint32_t vers, uint32_t proc, tern_handler_fn handler,
                       void* ctx) TERN_NOEXCEPT;

uint32_t tern_server_call_xid(const tern_server_call* call) TERN_NOEXCEPT;
uint32_t tern_server_call_prog(const tern_server_call* call) TERN_NOEXCEPT;
uint32_t tern_server_call_vers(const tern_server_call* call) TERN_NOEXCEPT;
uint32_t tern_server_call_proc(const tern_server_call* call) TERN_NOEXCEPT;
/* The XDR-encoded arguments; *len set. Valid until the call is answered. */
const uint8_t* tern_server_call_args(const tern_server_call* call, size_t* len) TERN_NOEXCEPT;
/* The read chunk's data, already pulled by the engine (*len 0 if none).
 * Valid until the call is answered. */
const uint8_t* tern_server_call_bulk(const tern_server_call* call, size_t* len) TERN_NOEXCEPT;
/* Room the client offered for bulk results (its write chunk), in bytes. */
uint32_t tern_server_call_bulk_capacity(const tern_server_call* call) TERN_NOEXCEPT;
/* A registered buffer of `len` bytes for bulk results, valid until the reply
 * is sent. NULL if len is over tern_server_call_bulk_capacity(). `len` must
 * also be at most the engine's max_bulk (a caller's bug: Tern aborts). */
void* tern_server_call_bulk_buffer(tern_server_call* call, uint32_t len) TERN_NOEXCEPT;

/* Answers the call: XDR results (inline, or through the client's reply chunk
 * when large) and `bulk` (registered memory, e.g. from
 * tern_server_call_bulk_buffer) pushed into the client's write chunk.
 * 0: sent, `call` is gone. -ENOTCONN: the connection is gone, and so is
 * `call`. -EINVAL (bulk over the capacity, or not registered) and -EAGAIN
 * (no send slot: poll and retry): `call` still waits for its answer. */
int tern_server_call_reply(tern_server_call* call, const void* results, size_t results_len, const void* bulk,
                           size_t bulk_len) TERN_NOEXCEPT;
/* Answers with an accept_stat other than TERN_ACCEPT_SUCCESS (-EINVAL for
 * that or an unknown value, and the call still waits). Otherwise as
 * tern_server_call_reply. */
int tern_server_call_reply_error(tern_server_call* call, tern_accept_stat stat) TERN_NOEXCEPT;

/* Since version 2. Answers nothing: the call is released unanswered (a
 * duplicate of a call still being served: its client sends it again if it
 * must). `call` is gone after this. */
void tern_server_call_drop(tern_server_call* call) TERN_NOEXCEPT;
/* Who sent it, the same across its client's reconnects ("pid 1234 uid
 * 1000" on shm, an address on verbs): NUL-terminated into buf (truncated to
 * len); returns its length as snprintf does. */
size_t tern_server_call_peer_id(const tern_server_call* call, char* buf, size_t len) TERN_NOEXCEPT;
/* A 64-bit digest of the call's arguments, inline and read chunks: with the
 * xid and the peer, what a duplicate request cache keys on. Keyed
 * (SipHash-2-4 under a random per-process key): a peer cannot choose
 * arguments that collide, and digests are comparable only within one
 * process. */
uint64_t tern_server_call_args_digest(const tern_server_call* call) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ shareable memory */

/* An arena of registered-memory candidates: one memfd mapping (on hugepages
 * when free ones exist) that the shm driver's peer can map, which is the only
 * memory pmd/shm registers. For tern_engine_register_memory(): carve
 * buffers from it, register the arena's whole range once. */
int tern_arena_create(size_t size, const char* name, tern_arena** arena) TERN_NOEXCEPT;
/* Frees the mapping. Only after every engine that registered it is destroyed. */
void tern_arena_destroy(tern_arena* arena) TERN_NOEXCEPT;
void* tern_arena_base(const tern_arena* arena) TERN_NOEXCEPT;
size_t tern_arena_size(const tern_arena* arena) TERN_NOEXCEPT;
/* `size` bytes aligned to `align` (a power of two, 0 for 64), never given
 * back; NULL when full. */
void* tern_arena_alloc(tern_arena* arena, size_t size, size_t align) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ logging */

typedef enum tern_log_level {
  TERN_LOG_ERROR = 0,
  TERN_LOG_WARN = 1,
  TERN_LOG_INFO = 2,
  TERN_LOG_DEBUG = 3
} tern_log_level;

/* Messages up to `level` are logged (default: TERN_LOG_LEVEL in the
 * environment, else warn). Process-wide. */
void tern_log_set_level(tern_log_level level) TERN_NOEXCEPT;

/* Where log lines go instead of stderr (NULL: back to stderr). `line` has no
 * prefix or newline and is valid only during the call. The sink runs on
 * whichever thread logs, so it must be thread-safe. Once this returns, the
 * previous sink is not running and will not run again. Process-wide. */
typedef void (*tern_log_fn)(void* ctx, tern_log_level level, const char* component, const char* line);
void tern_log_set_sink(tern_log_fn sink, void* ctx) TERN_NOEXCEPT;

/* ------------------------------------------------------------------ telemetry */

/* Answers telemetry requests (docs/observability.md: /tern/engines,
 * /tern/engine,ID, /tern/conns, /tern/conn,ID, /tern/procs, ...) on a Unix
 * socket at `path` (NULL or "": $TERN_TELEMETRY_SOCK), from a thread of the
 * library's own, so the host needs no poll for it: `tern-stats -s PATH`
 * and DPDK's dpdk-telemetry.py read every engine's counters there. One per
 * process. 0, or -EINVAL (no path, or one that cannot be listened on),
 * -EALREADY (one is open, or another live process answers on `path`). A
 * socket file left by a dead process is replaced. */
int tern_telemetry_open(const char* path) TERN_NOEXCEPT;

/* Stops answering and removes the socket file; nothing when none is open.
 * Once it returns, no telemetry request runs. */
void tern_telemetry_close(void) TERN_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TERN_TERN_H */
