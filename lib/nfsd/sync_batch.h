// tern-nfsd's group commit: one fsync per file for a batch of stable WRITEs
// (and COMMITs), instead of one journal commit each.
//
// Why: a FILE_SYNC WRITE written with pwritev2(RWF_SYNC) waits out its own
// sync inside the write. io_uring runs buffered writes to one file one at a
// time on its workers (it hashes them by inode so that they do not fight
// over the inode lock), so a file's stable WRITEs went to the device one
// sync after another: on a 2 ms device ~31 WRITEs/s per file, half of what
// knfsd's threads get with jbd2 sharing their commits (docs/nfs-gateway.md,
// "IOPS on slow storage"). Here a stable WRITE is written without RWF_SYNC
// (a copy into the page cache) and then waits, with every other WRITE of the
// file written meanwhile, for one fsync of the file.
//
// The rule: a waiter (a stable WRITE whose write completed, or a COMMIT)
// joins the file's *next* sync, one that starts after it joined; it is
// answered from that sync's completion, never before. So a WRITE's reply
// never precedes a sync that covers its data, and a COMMIT's covers every
// WRITE answered before the COMMIT arrived. At most one sync per file runs
// at a time; what joins meanwhile waits for the next. A sync starts at the
// end of the engine's poll pass in which its first waiter joined (flush(),
// from the storage poller: every WRITE whose completion that pass
// delivered shares it), or in the pass in which the file's running sync
// completed -- never later, so no waiter waits for another client's
// WRITEs to come. Files are independent: one file's sync holds nobody
// else's WRITEs.
//
// Which sync: fsync when any waiter is a FILE_SYNC WRITE or a COMMIT --
// FILE_SYNC promises the data and the file's metadata (size, mtime) on
// stable storage, as RWF_SYNC did, and knfsd's COMMIT is an fsync too;
// fdatasync when every waiter is a DATA_SYNC WRITE (the data, and the
// metadata needed to read it back: size and block allocation).
//
// Errors: a sync that fails fails every waiter of its batch with its errno
// (NFS3ERR_IO for EIO): the kernel does not say which pages failed, so no
// waiter's data can be called durable. The kernel reports a writeback error
// once per open file, so the Nfs3Server also changes its write verifier then
// (UNSTABLE data a later COMMIT would call durable may be what was lost).
//
// Whose sync: a batch's waiters may be calls of several peers (clients
// writing one file), and its one sync answers all of them. It goes through
// the engine's StorageQueue as a shared operation (asynchronous: its
// backend must not be kSync, whose inline completions would answer in the
// middle of a WRITE's own handler), charged to every peer with a waiter in
// it and waiting for none of their bounds, only for the engine's. Charged
// to the peer whose waiter opened the batch, as it once was, it waited
// behind that peer's share: another client's FILE_SYNC WRITE to the same
// file stayed unanswered while the first client's READs were on a slow
// device (nfsd_sync_batch_peers_test.cc). Every bound keeps its meaning: a
// peer's syncs count in its in-flight number, so its own next operations
// wait for its share, and a sync needs a waiter that got through its
// peer's bound first -- a stable WRITE's write, a COMMIT's reservation
// (StorageKind::kReserve) -- so a peer cannot start syncs faster than its
// share lets its operations start.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/stats.h"
#include "nfsd/storage_queue.h"

namespace tern::nfsd {

// A file, by its inode: every descriptor of it syncs the same data.
struct SyncKey {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const SyncKey&) const = default;
};

struct SyncStats {
  Counter syncs;     // fsync/fdatasync operations the batches started
  Counter waiters;   // stable WRITEs and COMMITs answered from a batch's sync
  Counter failed;    // syncs that failed (every waiter of theirs got the error)
  Counter largest;   // the most waiters one sync answered
};

class SyncBatches {
 public:
  // Answered from the sync's completion: fd is the synced file (open while
  // done runs: its attributes after), err 0 or the sync's errno.
  struct Waiter {
    void (*done)(void* ctx, int fd, int err) = nullptr;
    void* ctx = nullptr;
  };

  explicit SyncBatches(StorageQueue& q);
  ~SyncBatches();
  SyncBatches(const SyncBatches&) = delete;
  SyncBatches& operator=(const SyncBatches&) = delete;

  // w joins the file's next sync: a stable WRITE once its data was written
  // (full: FILE_SYNC, an fsync; else DATA_SYNC, fdatasync), a COMMIT (full)
  // once its reservation went through its peer's bound. `peer` (the
  // call's) is charged for the sync while it runs. fd: a descriptor of
  // the file (duplicated for the sync). 0, or an errno when it could not join (the caller answers with
  // it at once).
  int join(const SyncKey& k, std::string_view peer, int fd, bool full, const Waiter& w);
  // Starts the syncs that are due (the end of a poll pass): what this pass
  // joined, and the next batch of files whose sync completed. Returns how
  // many started; their operations go out with the queue's next poll().
  int flush();
  // Whether flush() would start any (inline: the engine's poller asks on
  // every pass).
  bool has_due() const { return !due_.empty(); }

  const SyncStats& stats() const { return st_; }
  bool idle() const { return files_.empty(); }

 private:
  struct KeyHash {
    size_t operator()(const SyncKey& k) const {
      return std::hash<uint64_t>()(static_cast<uint64_t>(k.ino) * 0x9e3779b97f4a7c15ull ^ k.dev);
    }
  };
  struct File {
    SyncBatches* owner = nullptr;
    SyncKey key;
    // The next sync's waiters, what it must be, its descriptor (owned) and
    // the peers it is charged to (each once); due: in due_.
    std::vector<Waiter> next;
    bool next_full = false;
    int next_fd = -1;
    std::vector<std::string> next_peers;
    bool due = false;
    // The running sync's waiters.
    bool syncing = false;
    std::vector<Waiter> running;
  };

  void make_due(File* f);
  void start(File* f);
  static void on_sync(void* ctx, const StorageReq& r, int64_t res);

  StorageQueue& q_;
  // Node-based: a File's address is its sync's context while it runs, and
  // in due_ until it starts (a File with waiters is never erased).
  std::unordered_map<SyncKey, File, KeyHash> files_;
  std::vector<File*> due_;
  SyncStats st_;
};

}  // namespace tern::nfsd
