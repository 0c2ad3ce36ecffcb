// The NFSv3 service of one engine: handlers for every procedure of program
// 100003 version 3 (RFC 1813), serving the exports of an ExportTable. One
// Nfs3Server per engine, on the engine's thread; the table and the
// ReplyCache are shared by all of them.
//
// The export of a call is the one its (first) handle names by its export
// id (export_table.h): an id no export has is NFS3ERR_STALE; a caller the
// export does not list (ExportOptions::clients, matched against the
// connection's peer, client_spec.h) gets NFS3ERR_ACCES; otherwise the call
// acts with that client's options (ro/rw, squashing). A call whose second
// handle (RENAME, LINK) is of another export gets NFS3ERR_XDEV. Following a
// PublishedExports, the server switches to a newly published table between
// calls (published_exports.h) and drops its cached descriptors then.
//
// Each call: its credential (squashed), its arguments decoded (garbage:
// GARBAGE_ARGS), its handles resolved through this thread's FdCache, the
// work done with system calls on descriptors beneath the export's root
// (names are single components: no "/", and ".." never leaves the root),
// and the results encoded. What waits for the device -- a READ the page
// cache cannot serve at once, a FILE_SYNC/DATA_SYNC WRITE, COMMIT -- goes
// through this engine's StorageQueue (storage_queue.h) and is answered from
// its completion, which the engine polls (Engine::add_poller): the engine's
// thread never waits for the disk for those. Data moves as RPC-over-RDMA moves it: a READ's
// bytes are read straight into the buffer the engine RDMA-writes into the
// client's write chunk, a WRITE's bytes come from the read chunk the engine
// pulled; large READDIR(PLUS) results go through the client's reply chunk
// (the engine does that). Non-idempotent procedures go through the
// ReplyCache, so that a retransmission -- to this process or to the next
// one -- gets the first reply.
//
// Permissions: reading and writing a file's data, looking a name up,
// listing a directory and ACCESS are checked here against the mode bits
// (with nfsd's owner override: the owner may read and write its file
// whatever the mode, as it may through a descriptor it opened before a
// chmod); everything that changes the name space or attributes runs as the
// caller, on a worker of this engine's CallerPool (caller_pool.h), and the
// kernel checks it; the call is answered from the job's result, which the
// engine polls, so the engine's thread never waits for it. POSIX ACLs are
// not consulted.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/stats.h"
#include "engine/engine.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs3_types.h"
#include <functional>

#include "nfsd/caller_op.h"
#include "nfsd/caller_pool.h"
#include "nfsd/creds.h"
#include "nfsd/export.h"
#include "nfsd/export_table.h"
#include "nfsd/fd_cache.h"
#include "nfsd/personality_cache.h"
#include "nfsd/published_exports.h"
#include "nfsd/reply_cache.h"
#include "nfsd/storage_queue.h"
#include "nfsd/sync_batch.h"

namespace tern::nfsd {

struct ServerConfig {
  // FSINFO's transfer sizes; READ and WRITE are held to rtmax/wtmax (and
  // to the engine's max_bulk).
  uint32_t rtmax = 1u << 20;
  uint32_t wtmax = 1u << 20;
  uint32_t dtpref = 64u << 10;
  // The write verifier WRITE and COMMIT return: it must change when the
  // server restarts, so that a client sends its uncommitted writes again.
  nfs::Verf3 write_verf;
  size_t fd_cache = 1024;
  // Tests only (tern-nfsd --test-crash-after): SIGKILL this process right
  // after recording the reply of the n-th call of this procedure in the
  // reply cache, before sending it.
  int crash_after_proc = -1;
  uint32_t crash_after_n = 0;
  // Tests in one process: called instead of SIGKILL, and the call is then
  // dropped unanswered, as if the process had died.
  void (*on_crash)(void* ctx) = nullptr;
  void* on_crash_ctx = nullptr;
  // Where file I/O waits (storage_queue.h): READs the page cache cannot
  // serve at once, FILE_SYNC/DATA_SYNC WRITEs and COMMITs go through a
  // StorageQueue and are answered from its completion.
  StorageOptions storage;
  // A READ tries the page cache without waiting (RWF_NOWAIT) before it
  // goes to the queue. Off: every READ goes through the queue (tests).
  bool read_nowait = true;
  // Benchmarks only: UNSTABLE WRITEs on the engine's thread (a plain
  // pwritev2), as before they went through the StorageQueue.
  bool unstable_inline = false;
  // Where what runs as the caller runs (caller_pool.h).
  CallerPoolOptions callers;
  // MKDIR, SYMLINK, REMOVE, RMDIR, RENAME and LINK of an identity that has
  // an io_uring personality run on the storage ring under it (caller_op.h)
  // instead of on the pool; the identity's first call registers one.
  // Needs the io_uring backend. At most `personalities` identities per
  // engine (personality_cache.h). Off by default: it saves the pool's
  // futex and eventfd calls but not the wake-up of a worker (io_uring runs
  // these on its io-wq workers), and in the rxe VM it was no faster
  // (docs/nfs-gateway.md, "Metadata storm").
  bool caller_ring = false;
  uint32_t personalities = 64;
  // Stable WRITEs and COMMITs share one fsync per file (sync_batch.h)
  // when the storage queue is asynchronous. Off: a stable WRITE is written
  // with RWF_SYNC/RWF_DSYNC and a COMMIT is its own fsync, as before
  // (tern-nfsd --group-commit off: a baseline).
  bool group_commit = true;
};

// A verifier no earlier run of the server has used: its start time in
// nanoseconds and random bits.
nfs::Verf3 new_write_verifier();

// Counters, one writer (the engine's thread), readable from any thread.
struct Nfs3Stats {
  Counter calls[nfs::kNfs3ProcCount];
  Counter errors;              // replies with a status other than NFS3_OK
  Counter garbage;             // GARBAGE_ARGS answers
  Counter drc_replays;         // answered from the reply cache
  Counter drc_drops;           // dropped: another copy in progress
  Counter read_bytes, write_bytes;
  Counter read_chunk_replies;  // READs answered through a write chunk
  Counter swept;               // cached descriptors of removed objects closed
  Counter refused;             // NFS3ERR_ACCES: the caller is not on the export's list
  Counter tables;              // export tables taken up after the first (reloads)
  Counter read_nowait;         // READs the page cache served at once (RWF_NOWAIT; tmpfs: pread)
  Counter storage_deferred;    // calls answered from a storage completion
  Counter caller_deferred;     // jobs run as the caller (CallerPool)
  Counter caller_ring;         // calls run as the caller on the storage ring (a personality)
  Counter personalities;       // gauge: identities with a personality
  Counter personality_failed;  // registrations the kernel refused (then: the pool only)
  Counter write_nowait;        // UNSTABLE WRITEs done at once (RWF_NOWAIT)
};

class Nfs3Server {
 public:
  // `drc` may be null (no reply cache). One export, which the caller
  // keeps alive for the server's life.
  Nfs3Server(const Export& exp, ReplyCache* drc, const ServerConfig& cfg);
  // The table `pub` holds, and each one published after it.
  Nfs3Server(const PublishedExports& pub, ReplyCache* drc, const ServerConfig& cfg);
  // Waits for the storage operations in flight (their calls are answered).
  ~Nfs3Server();
  Nfs3Server(const Nfs3Server&) = delete;
  Nfs3Server& operator=(const Nfs3Server&) = delete;

  // Registers the handlers of every procedure on `eng`.
  void attach(rpc::Engine& eng);
  // Housekeeping from the engine's loop now and then (about once a second):
  // takes up a newly published export table, closes cached descriptors of
  // removed files.
  void tick();
  // The generation of the export table this server serves now.
  uint64_t table_generation() const { return gen_; }
  const Nfs3Stats& stats() const { return st_; }
  const FdCache& fd_cache() const { return fds_; }
  const StorageQueue& storage() const { return *io_; }
  // Whether a caller job or a storage operation is in flight (engine's thread).
  bool work_in_flight() const { return !callers_->idle() || !io_->idle(); }
  // Null when stable WRITEs sync one by one (ServerConfig::group_commit).
  const SyncBatches* sync_batches() const { return syncs_.get(); }
  const CallerPool& callers() const { return *callers_; }

 private:
  struct Op;       // one call being served (nfs3_op.h)
  struct Pending;  // one call waiting for its storage operation (nfs3_op.h)
  static void on_call(void* ctx, rpc::ServerCall* c);
  static int poll_storage(void* ctx);
  static int poll_callers(void* ctx);
  // Records a non-idempotent call's results in the reply cache and sends
  // them (or SYSTEM_ERR when they did not fit).
  void reply_to(rpc::ServerCall* c, bool cached, const ReplyKey& key, const xdr::XdrWriter& w,
                std::span<const uint8_t> bulk);
  // The call goes on in a storage operation: its DRC key and the export
  // table move into the Pending, and serve() leaves the reply to
  // finish_io().
  Pending* defer(Op& op);
  void submit_io(Op& op, Pending* p, StorageKind kind, int fd, uint64_t off, uint8_t* buf, size_t len, int flags);
  static void on_io(void* ctx, const StorageReq& r, int64_t res);
  // False: the call goes on (a stable WRITE joined its file's next sync).
  bool finish_io(Pending& p, const StorageReq& r, int64_t res);
  // A stable WRITE's or COMMIT's answer from its batch's sync (sync_batch.h).
  static void on_synced(void* ctx, int fd, int err);
  void finish_synced(Pending& p, int fd, int err);
  // Serves a call through its procedure's entry of kProcs (nfs3_procs.cc).
  void serve(rpc::ServerCall* c);

  // What the reply cache does with a procedure's calls.
  enum class Cache : uint8_t {
    kNone,    // nothing: a retransmission runs again (idempotent)
    // Non-idempotent: a retransmission is answered with the first run's
    // reply, which is recorded before it leaves (reply_to).
    kRecord,
  };
  // One NFSv3 procedure as this server serves it.
  struct Proc {
    nfs::Nfs3Proc proc;  // its number: the entry's index (checked)
    // Decodes the arguments, does the work and encodes the results into
    // op.w, or defers the answer to a completion (op.pending); false: the
    // arguments were garbage. Null: a void procedure (NULL), answered at
    // once with no results.
    bool (*serve)(Nfs3Server& s, Op& op);
    Cache cache;
  };
  // Every procedure of program 100003 version 3, at its number (nfs3_procs.cc).
  static const Proc kProcs[nfs::kNfs3ProcCount];

  // The procedures (nfs3_attr.cc, nfs3_io.cc, nfs3_names.cc, nfs3_dir.cc).
  bool proc_getattr(Op& op);
  bool proc_setattr(Op& op);
  bool proc_access(Op& op);
  bool proc_fsstat(Op& op);
  bool proc_fsinfo(Op& op);
  bool proc_pathconf(Op& op);
  bool proc_read(Op& op);
  bool proc_write(Op& op);
  bool proc_commit(Op& op);
  bool proc_readlink(Op& op);
  bool proc_lookup(Op& op);
  bool proc_create(Op& op);
  bool proc_mkdir(Op& op);
  bool proc_symlink(Op& op);
  bool proc_mknod(Op& op);
  // REMOVE (dir false) and RMDIR (true).
  bool proc_remove(Op& op, bool dir);
  bool proc_rename(Op& op);
  bool proc_link(Op& op);
  bool proc_readdir(Op& op, bool plus);

  // ---- helpers (nfs3_server.cc)
  // Takes up the published table when its generation moved.
  void follow_table();
  // The cached entry for a handle, opened if needed (as root). The first
  // handle of a call picks its export, checks the caller against the
  // export's list and sets op's options and credential; a later one must
  // name the same export (kXdev).
  nfs::Nfs3Stat resolve(Op& op, const nfs::Fh3& fh, FdCache::Entry** e);
  // resolve() and fstat, and a check that the object still has a name.
  nfs::Nfs3Stat resolve_stat(Op& op, const nfs::Fh3& fh, FdCache::Entry** e, struct stat* st);
  // The descriptor for reading (or writing) a regular file's data.
  int io_fd(FdCache::Entry* e, bool write);
  // What the call does once a job run as the caller finished: encodes the
  // results into op.w (the call is answered then), or continues in another
  // job (as_caller again). Runs on the engine's thread.
  using Then = std::function<void(Op& op, nfs::Nfs3Stat s)>;
  // Runs job (which returns an nfsstat3) as the caller, for what the kernel
  // checks: on a CallerPool worker, never on the engine's thread
  // (caller_pool.h); then then(op, its status) from the engine's poll. The
  // call is deferred (op.pending): a cached descriptor the job uses must be
  // lent to it (FdCache::lend: the cache may close its entry meanwhile).
  void as_caller(Op& op, std::function<nfs::Nfs3Stat()> job, Then then);
  // defer() for a job that runs as the caller (as_caller, as_caller_op):
  // the caller's identity and what follows the job go with it.
  Pending* defer_as_caller(Op& op, Then then);
  static void on_caller(void* ctx, nfs::Nfs3Stat s);
  // A name-space system call as the caller (caller_op.h): on the storage
  // ring under the caller's personality when it has one, else on the pool
  // (as_caller), where the worker acting as the caller also registers the
  // personality for the next ones. then(op, status) as for as_caller. The
  // descriptors c names must stay open until then runs (then keeps them).
  void as_caller_op(Op& op, std::shared_ptr<CallerOp> c, Then then);
  static void on_caller_op(void* ctx, const StorageReq& r, int64_t res);
  static void unregister_personality(void* ctx, int id);
  void finish_caller(Pending* p, nfs::Nfs3Stat s);
  static nfs::Fattr3 fattr(const Op& op, const struct stat& st);
  static nfs::WccAttr wcc_attr(const struct stat& st);
  // The handle of `fd` in op's export (which the caller keeps or closes), cached.
  nfs::Nfs3Stat handle_and_cache(const Op& op, int fd, nfs::Fh3* fh);
  // Whether the caller may read/write/execute by the mode bits (R=4, W=2, X=1).
  bool may(const Op& op, const struct stat& st, int want) const;
  // A name a client may create, remove or rename: kOk, kNametoolong,
  // kAccess ('/' or NUL in it), kInval (empty), kExist ("." or "..").
  static nfs::Nfs3Stat check_name(std::string_view name);
  // Applies everything in `sa` but the mode (which creation applied) and
  // what skip_mode says: ownership, size, times, as the caller.
  // k(op, status) follows (at once when nothing runs as the caller).
  void apply_sattr(Op& op, FdCache::Entry* e, const struct stat& st, const nfs::Sattr3& sa, bool with_mode,
                   Then k);
  // The start of CREATE, MKDIR, SYMLINK and MKNOD: the directory the object
  // goes into and its attributes before, and the checks every one of them
  // makes (a directory, a writable export, a name a client may create),
  // then `own`, the procedure's own verdict on its arguments. False when
  // the call is answered already: the handle names no directory (the reply
  // is its status alone), or a check refused it (finish_create's reply).
  bool begin_create(Op& op, const nfs::Fh3& dir, std::string_view name, nfs::Nfs3Stat own, FdCache::Entry** d,
                    struct stat* dst);
  // What a creating call asked to set beyond what creating the object set
  // (`fd`: the new object, still owned by the caller); kOk when `rest` sets
  // nothing. k(op, status) follows.
  void set_after_create(Op& op, int fd, const nfs::Sattr3& rest, Then k);
  // The end of CREATE, MKDIR, SYMLINK and MKNOD: fills the handle and
  // attributes of what was made (or found, for UNCHECKED/EXCLUSIVE) and the
  // directory's, and encodes the reply.
  void finish_create(Op& op, int dirfd, const struct stat& dir_before, int objfd, nfs::Nfs3Stat status);
  // The middle of CREATE, MKDIR, SYMLINK and MKNOD: make() runs as the
  // caller on the directory's descriptor (d's, lent to the job),
  // then what creating did not set (MakeJob::rest), then finish_create.
  struct MakeJob;
  void make_as_caller(Op& op, FdCache::Entry* d, const struct stat& dst, std::shared_ptr<MakeJob> j,
                      std::function<nfs::Nfs3Stat(MakeJob&)> make);
  // MKDIR and SYMLINK: c (its dirfd set here, to d's, lent) runs as
  // the caller (as_caller_op), then what it made is opened (O_PATH |
  // open_flags) and goes on as make_as_caller's does.
  void make_by_op(Op& op, FdCache::Entry* d, const struct stat& dst, std::shared_ptr<MakeJob> j,
                  std::shared_ptr<CallerOp> c, int open_flags);

  const PublishedExports* pub_ = nullptr;  // null: one fixed table
  std::shared_ptr<const ExportTable> table_;
  uint64_t gen_ = 0;
  // The last caller's address, parsed from its peer id (one entry: most
  // calls in a row come from the same connection).
  std::string last_peer_;
  ClientAddr last_addr_;
  ReplyCache* drc_;
  ServerConfig cfg_;
  FdCache fds_;
  std::unique_ptr<StorageQueue> io_;
  std::unique_ptr<CallerPool> callers_;
  // After io_ (destroyed before it: it gives its ids back to the ring).
  std::unique_ptr<PersonalityCache> personas_;
  bool personas_off_ = false;  // a registration failed: the pool only from then on
  std::unique_ptr<SyncBatches> syncs_;  // after io_: its syncs complete through io_
  Nfs3Stats st_;
  uint32_t crash_count_ = 0;
  std::vector<uint8_t> res_;     // the results being encoded
  std::vector<uint8_t> inline_;  // READ data sent inline (no write chunk offered)
  std::vector<uint8_t> dents_;   // getdents64 buffer
  std::vector<uint8_t> cached_;  // a reply cache hit
  uint32_t max_results_ = 0;
  // Whether an UNSTABLE WRITE tries RWF_NOWAIT first: off once the file
  // system said EOPNOTSUPP (ext4's buffered writes, for one).
  bool write_nowait_ = true;
  // Whether the file system of device `dev` (fd one of its files) keeps its
  // files' data in memory (tmpfs, ramfs), remembered per device (bounded).
  bool memory_backed(dev_t dev, int fd);
  std::vector<std::pair<dev_t, bool>> memory_devs_;
};

}  // namespace tern::nfsd
