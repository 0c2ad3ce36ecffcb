// A small NFS client over one Tern RPC-over-RDMA connection: NULL (v3 and
// v4) and NFSv4.0 COMPOUNDs for path lookup, attributes, READ and WRITE with
// their data in RDMA chunks (zero copy, RFC 8267). No OPEN or SETCLIENTID:
// READ uses the READ-bypass stateid and WRITE the anonymous one (RFC 7530
// §9.1.4.3), which is enough for a tool or a test, not for a coherent cache.
//
// The client owns its Engine and drives it: synchronous calls poll until
// their reply arrives or their deadline passes; read_async() lets a caller
// keep several READs in flight and poll() them. Single-threaded, like the
// engine.
//
// Failures, as the Linux client rides them out (docs/nfs-interop.md,
// "Deadlines, NFS4ERR_DELAY and lost connections"):
// - Every operation (a synchronous call, or one read_async READ) has a
//   deadline, timeout_ms after it began, which bounds everything below. Each
//   RPC carries what is left of it as Call::timeout_ns, so the engine ends a
//   call that gets no reply with kTimedOut -- and only once the server can no
//   longer reach the call's memory (its registrations fenced): a READ's
//   buffer is never handed back while a late RDMA WRITE can still land in it.
// - NFS4ERR_DELAY (the server is busy with the file: RFC 7530 §13.1.1.3) is
//   retried after delay_min_ms, doubling to delay_max_ms, until the deadline.
// - A lost connection re-establishes itself (the engine's reconnect) and the
//   calls in flight are sent again with their xids. A call the engine gives
//   up on (kDisconnected: its connection failed for good, or reconnect is
//   off) is issued again on a new connection, while the deadline allows:
//   NULL, LOOKUP, GETATTR, READ and COMMIT are idempotent, and a WRITE sent
//   twice writes the same bytes at the same offset again; and the client
//   holds no NFSv4 state (no SETCLIENTID, no OPEN: special stateids) that a
//   new connection would have to establish again.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../base/result.h"
#include "../engine/engine.h"
#include "compound_res.h"
#include "fattr4.h"
#include "nfs4_types.h"

namespace tern::nfs {

struct NfsClientOptions {
  // Engine::connect's device spec, e.g. "verbs:dev=rxe0,addr=169.254.77.1,port=20049".
  std::string spec;
  rpc::EngineOptions engine;
  // Deadline of each operation (retries included), and for connecting.
  uint32_t timeout_ms = 10000;
  // NFS4ERR_DELAY: the first wait before the operation is sent again, and
  // the most it doubles to (RFC 7530 §13.1.1.3). Also the pause before an
  // operation whose connection failed for good goes out on a new one.
  uint32_t delay_min_ms = 100;
  uint32_t delay_max_ms = 2000;
  // How long WRITE keeps retrying while the server is in its grace period
  // (NFS4ERR_GRACE: Linux nfsd refuses the anonymous stateid then).
  uint32_t grace_wait_ms = 30000;
  // AUTH_SYS identity (an export's root squashing applies as usual).
  uint32_t uid = 0, gid = 0;
  std::string machine = "tern";
  // Sleep in the engine's wait mode when there is nothing to do, instead of
  // busy-polling a core (a tool waiting on a server: tern-nfs-read). Costs a
  // wake-up per reply (docs/tuning.md); a device without wait mode spins.
  bool wait = false;
};

// What a path lookup found.
struct NfsFile {
  FileHandle fh;
  Fattr4 attrs;
};

// One READ's outcome, for read_async.
struct ReadDone {
  Status status;        // transport, RPC or decoding failure, or the READ's nfsstat4
  uint64_t offset = 0;
  uint32_t count = 0;   // bytes that landed in the buffer
  bool eof = false;
  uint64_t latency_ns = 0;
  // How it got there: times the engine sent it again after a connection
  // loss, NFS4ERR_DELAY answers waited out, times issued anew after its
  // connection failed for good.
  uint32_t retransmits = 0;
  uint32_t delay_retries = 0;
  uint32_t reissues = 0;
};

// What the client rode out since it was created (the engine's own counters
// -- reconnects, retransmits, keepalive_probes -- are in engine().stats()).
struct NfsClientStats {
  uint64_t operations = 0;     // synchronous calls and READs begun
  uint64_t delay_retries = 0;  // NFS4ERR_DELAY answers waited out
  uint64_t retransmits = 0;    // RPCs the engine sent again after a loss (CallReply::retransmits)
  uint64_t reissues = 0;       // RPCs issued anew after their connection failed for good
  uint64_t new_connections = 0;  // connections made to replace a failed one
  uint64_t timeouts = 0;       // operations that ended at their deadline
};
using ReadCallback = void (*)(void* ctx, const ReadDone& done);

class NfsClient {
 public:
  // Creates the engine, connects and waits until the connection is up.
  static Result<std::unique_ptr<NfsClient>> connect(const NfsClientOptions& opt);
  ~NfsClient();

  rpc::Engine& engine() { return *eng_; }
  // The current connection (after one failed for good, its replacement).
  rpc::Connection& connection() { return *conn_; }
  const NfsClientStats& stats() const { return stats_; }
  // Registered memory for READ and WRITE buffers (Engine::alloc).
  uint8_t* alloc(size_t len) { return static_cast<uint8_t*>(eng_->alloc(len, 4096)); }

  // NULL of NFS version 3 or 4.
  Status null(uint32_t vers);

  // PUTROOTFH, LOOKUP per component, GETFH, GETATTR(attrs). A missing
  // component fails with kNotFound and names it ("LOOKUP \"x\" in /a/x/y:
  // NFS4ERR_NOENT (2)").
  Result<NfsFile> lookup(std::string_view path, AttrSet attrs);
  // PUTFH, GETATTR.
  Result<Fattr4> getattr(const FileHandle& fh, AttrSet attrs);

  // PUTFH, READ of buf.size() bytes at offset into buf (registered memory,
  // at most EngineOptions::max_bulk) through a write chunk.
  Result<Read4Res> read(const FileHandle& fh, uint64_t offset, std::span<uint8_t> buf);
  // The same, asynchronously, with its own deadline (timeout_ms from now):
  // 0, or an errno as Connection::call returns for a call it refuses
  // outright (EINVAL: unregistered memory, EMSGSIZE, ENOTSUP). cb runs exactly once,
  // inside poll() (never inside read_async), unless the client is destroyed
  // first: then it does not run.
  int read_async(const FileHandle& fh, uint64_t offset, std::span<uint8_t> buf, ReadCallback cb, void* ctx);
  // One pass of the engine, then what is due: operations whose retry time
  // came, deadlines of operations waiting for a connection, a new connection
  // when the current one failed for good. With NfsClientOptions::wait, a
  // pass that found nothing sleeps until something happens (at most 50 ms,
  // and not past the next retry).
  int poll();
  // Operations begun and not yet completed (in flight or waiting to be
  // sent again).
  uint32_t outstanding() const { return live_; }
  // Makes a new connection now if the current one failed for good, and
  // waits (up to timeout_ms) until it is up. Operations do this themselves;
  // this is for a caller that wants to know.
  Status reconnect();

  // PUTFH, WRITE of data (registered memory) at offset through a read chunk,
  // the anonymous stateid; retries NFS4ERR_GRACE for grace_wait_ms, saying so
  // once on the log. Returns what the server says it wrote and committed.
  Result<Write4Res> write(const FileHandle& fh, uint64_t offset, std::span<const uint8_t> data, StableHow stable);
  // PUTFH, COMMIT.
  Result<Verifier> commit(const FileHandle& fh, uint64_t offset, uint32_t count);

 private:
  struct Slot;
  explicit NfsClient(const NfsClientOptions& opt);
  Slot* take_slot();
  void put_slot(Slot* s);
  // Sends s (again) with what is left of its deadline, or queues it for
  // poll() (no usable connection, backlog full), or finishes it.
  void issue(Slot* s);
  // Connection::call for s with what is left of its deadline: its errno.
  int send(Slot* s, uint64_t now);
  // s waits until `at` (NFS4ERR_DELAY backoff, a new connection), then poll()
  // issues it.
  void defer(Slot* s, uint64_t at);
  // s is over: a synchronous caller sees done; an asynchronous READ's
  // callback runs (and the slot is freed).
  void finish(Slot* s, Status st);
  // poll()'s part: due retries, expired waits, replacing a failed connection.
  void service();
  static void on_done(void* ctx, const rpc::CallReply& r);
  // A completed synchronous call; the results are a copy (the engine's
  // view lives only as long as the callback).
  struct SyncReply {
    uint32_t bulk_recv_len;
    std::vector<uint8_t> results;
  };
  // Issues a call and polls until it completes, with its deadline, DELAY
  // retries and reissues; a call that did not succeed at the RPC level is an
  // error naming `what`.
  Result<SyncReply> call_sync(uint32_t vers, uint32_t proc, std::span<const uint8_t> args,
                              std::span<const uint8_t> bulk_send, std::span<uint8_t> bulk_recv, const char* what);
  // An NFSv4 COMPOUND with these arguments and chunks, through call_sync.
  Result<SyncReply> compound(std::span<const uint8_t> args, std::span<const uint8_t> bulk_send,
                             std::span<uint8_t> bulk_recv, const char* what);
  Result<Write4Res> write_once(const FileHandle& fh, uint64_t offset, std::span<const uint8_t> data,
                               StableHow stable, Nfs4Stat* stat);

  NfsClientOptions opt_;
  std::unique_ptr<rpc::Engine> eng_;
  rpc::Connection* conn_ = nullptr;
  rpc::AuthSys auth_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_;
  std::vector<Slot*> deferred_;  // waiting for their time or a connection
  uint32_t live_ = 0;
  uint64_t next_connect_ns_ = 0;  // no new connection before this
  bool closing_ = false;          // the destructor runs: no retries, no callbacks
  NfsClientStats stats_;
};

}  // namespace tern::nfs
