// A small NFS client over one Tern RPC-over-RDMA connection: NULL (v3 and
// v4) and NFSv4.0 COMPOUNDs for path lookup, attributes, READ and WRITE with
// their data in RDMA chunks (zero copy, RFC 8267). No OPEN or SETCLIENTID:
// READ uses the READ-bypass stateid and WRITE the anonymous one (RFC 7530
// §9.1.4.3), which is enough for a tool or a test, not for a coherent cache.
//
// The client owns its Engine and drives it: synchronous calls poll until
// their reply arrives or the timeout passes; read_async() lets a caller keep
// several READs in flight and poll() them. Single-threaded, like the engine.
//
// A synchronous call that times out never returns while the server can
// still reach its memory: the client closes the connection and waits until
// the call's registrations are fenced (the QP drained, its MRs destroyed),
// then returns kTimedOut; the next call reconnects.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/engine.h"
#include "nfs/compound_res.h"
#include "nfs/fattr4.h"
#include "nfs/nfs4_types.h"

namespace tern::nfs {

struct NfsClientOptions {
  // Engine::connect's device spec, e.g. "verbs:dev=rxe0,addr=169.254.77.1,port=20049".
  std::string spec;
  rpc::EngineOptions engine;
  // Per call, and for connecting.
  uint32_t timeout_ms = 10000;
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
};
using ReadCallback = void (*)(void* ctx, const ReadDone& done);

class NfsClient {
 public:
  // Creates the engine, connects and waits until the connection is up.
  static Result<std::unique_ptr<NfsClient>> connect(const NfsClientOptions& opt);
  ~NfsClient();

  rpc::Engine& engine() { return *eng_; }
  // The current connection (after a timed-out call, the one reconnect() made).
  rpc::Connection& connection() { return *conn_; }
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
  // The same, asynchronously: 0, or an errno as Connection::call returns
  // (EAGAIN: too many outstanding). cb runs inside poll().
  int read_async(const FileHandle& fh, uint64_t offset, std::span<uint8_t> buf, ReadCallback cb, void* ctx);
  // One pass of the engine; with NfsClientOptions::wait, a pass that found
  // nothing sleeps until something happens (at most 50 ms).
  int poll();
  uint32_t outstanding() const { return conn_ != nullptr ? conn_->outstanding() : 0; }
  // Connects again if the connection is gone (a timed-out call closes it;
  // synchronous calls do this themselves).
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
  // s timed out: close the connection and poll until the engine completes
  // s, which it does only once s's memory can no longer be reached.
  void fence(Slot* s);
  static void on_done(void* ctx, const rpc::CallReply& r);
  // A completed synchronous call; the results are a copy (the engine's
  // view lives only as long as the callback).
  struct SyncReply {
    rpc::CallStatus status;
    uint32_t bulk_recv_len;
    std::vector<uint8_t> results;
  };
  // Issues c and polls until it completes; a call that did not succeed at
  // the RPC level is an error naming `what`.
  Result<SyncReply> call_sync(rpc::Call c, const char* what);
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
};

}  // namespace tern::nfs
