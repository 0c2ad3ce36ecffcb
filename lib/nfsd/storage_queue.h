// File I/O off the engine's thread: the storage operations a call waits on
// the device for (a READ the page cache did not hold, a FILE_SYNC or
// DATA_SYNC WRITE, COMMIT's fsync) are queued here and completed from the
// engine's loop, so that no client's disk wait is another client's wait.
//
// One StorageQueue per engine, used from that engine's thread only (submit,
// poll). Backends, picked at create():
//   - io_uring (liburing): one ring; what a poll pass started is submitted
//     in one io_uring_submit, completions are reaped from the ring without
//     a system call. Every SQE carries IOSQE_ASYNC: a buffered write with
//     RWF_SYNC or an fsync must not run inline in io_uring_submit (which
//     would block the loop just as pwritev2 did).
//   - a small pool of worker threads, when the kernel or the build has no
//     io_uring (io_uring_setup says ENOSYS, EPERM: seccomp, a disabled
//     sysctl, a container).
//   - synchronous, on the caller's thread (what tern-nfsd did before:
//     --storage sync, and a baseline for benchmarks).
// Completions of the first two signal an eventfd (wake_fd()), which joins
// the engine's wait set (Engine::add_poller): an idle engine with storage
// in flight sleeps and wakes for either.
//
// Each operation owns its descriptor from submit() to its completion (the
// caller passes a dup): a descriptor cache may close its copy meanwhile,
// and io_uring's workers look a plain descriptor up when they run, so a
// closed and reused number would name another file.
//
// Identity: operations run with the process's credentials, as the
// synchronous path's pread/pwritev2/fsync did: the descriptor is the
// server's own, and the caller's right to read or write the file was
// checked (against its squashed credential) before anything was submitted.
// A denied call never reaches this queue (docs/nfs-gateway.md, "Storage").
//
// Back-pressure: at most max_in_flight operations run at once on an
// engine, and a peer (ServerCall::peer_id) runs at most its share --
// fair_share(max_in_flight, peers with work) capped at max_per_peer. What a
// bound holds back waits in its peer's queue, served round-robin across
// peers as slots free up; submit() never blocks and never fails.
//
// A shared operation (submit_shared: the group commit's sync of a file,
// sync_batch.h) answers calls of several peers. It waits for none of their
// shares, only for the engine's bound (ahead of the peers' queued
// operations), and while it runs it is charged to each of them: it counts
// in every one's in-flight number, so that their own next operations wait
// for their shares. Charged to one of them (the one whose call came first,
// as it once was), the others waited for that one's share: one peer
// waiting for another. So a peer's count may pass its share by the shared
// operations it is in (one sync per file at a time); it cannot start one
// of its own then, and every shared operation needs a call of a peer that
// went through that peer's share first (sync_batch.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/process_key.h"
#include "base/stats.h"
#include "nfsd/client_table.h"

namespace tern::nfsd {

// kCallerOp: a name-space call run as its caller under an io_uring
// personality (caller_op.h, personality_cache.h); io_uring backend only
// (runs_caller_ops()). kReserve: nothing is run; it takes its turn under
// the bounds like any operation and completes at once (res 0), so that
// what follows it starts no faster than its peer's share allows (a COMMIT
// before it joins its file's sync, sync_batch.h).
enum class StorageKind : uint8_t { kRead, kWrite, kFsync, kCallerOp, kReserve };

struct StorageReq {
  StorageKind kind = StorageKind::kRead;
  int fd = -1;  // owned by the queue from submit(): closed after done ran
  uint64_t offset = 0;
  uint8_t* buf = nullptr;  // read into / write from (valid until done)
  size_t len = 0;
  int rw_flags = 0;  // a write's RWF_SYNC or RWF_DSYNC; kFsync: kFsyncDataOnly or 0
  // kCallerOp: prep(op, sqe) fills the SQE (CallerOp::prep); personality
  // (> 0) is the caller's. fd is -1 (nothing to own); res is 0 or -errno.
  void (*prep)(const void* op, void* sqe) = nullptr;
  const void* op = nullptr;
  uint16_t personality = 0;
  // Runs exactly once, on the engine's thread, from poll() (inline from
  // submit() in synchronous mode): res is the bytes moved (0 for fsync) or
  // -errno. fd is still open then (the caller may fstat it).
  void (*done)(void* ctx, const StorageReq& r, int64_t res) = nullptr;
  void* ctx = nullptr;
};

// kFsync's rw_flags: fdatasync rather than fsync (sync_batch.h).
constexpr int kFsyncDataOnly = 1;

struct StorageOptions {
  enum class Mode : uint8_t { kAuto, kUring, kThreads, kSync };
  Mode mode = Mode::kAuto;  // kAuto: io_uring, else threads
  uint32_t max_in_flight = 64;
  uint32_t max_per_peer = 16;
  uint32_t threads = 4;  // the worker pool's size
  // Tests only. fault: called (on whatever thread runs the operation)
  // before it runs; a nonzero errno fails it with that instead (as a
  // device's EIO would). hold: while true, finished operations are kept in
  // flight, not delivered (synchronous mode: the operation waits before it
  // runs, as a slow device would keep the thread); a kReserve, which never
  // goes to the device, is not held.
  int (*fault)(void* ctx, const StorageReq& r) = nullptr;
  void* fault_ctx = nullptr;
  const std::atomic<bool>* hold = nullptr;
  // hold_if (asynchronous backends): a finished operation for which it
  // returns true (asked with fault_ctx, on the engine's thread) is kept in
  // flight, not delivered, until it returns false: a device slow for some
  // operations only, while the others complete.
  bool (*hold_if)(void* ctx, const StorageReq& r) = nullptr;
};

struct StorageStats {
  Counter submitted;   // operations given to submit()
  Counter started;     // handed to the backend (kReserve is not)
  Counter completed;   // done() ran
  // Finished by the backend and reaped by poll(), delivered or still held
  // (StorageOptions::hold): a test that must release many completions in
  // one pass waits for this before it lifts the hold.
  Counter reaped;
  Counter queued;      // had to wait for a bound (per-engine or per-peer)
  Counter failed;      // completed with an error
  // Gauges.
  Counter in_flight, waiting;
  // The most operations one peer had in flight at once.
  Counter peer_peak;
};

class StorageQueue {
 public:
  // Never fails: a backend that cannot start gives way to the next (the
  // reason is logged once).
  static std::unique_ptr<StorageQueue> create(const StorageOptions& opt);
  ~StorageQueue();
  StorageQueue(const StorageQueue&) = delete;
  StorageQueue& operator=(const StorageQueue&) = delete;

  // Queues r on behalf of `peer`; r.done runs later, from poll().
  void submit(std::string_view peer, const StorageReq& r);
  // Queues r on behalf of every one of `peers` (each once): started when
  // the engine has room, before any queued operation of a peer; charged to
  // all of them until its completion. Asynchronous backends only.
  void submit_shared(std::vector<std::string> peers, const StorageReq& r);
  // From the engine's loop: starts what the bounds allow (one submission),
  // delivers what completed. Returns the number of completions delivered
  // plus operations started.
  int poll();
  // Blocks until nothing is queued or in flight, delivering every
  // completion (shutdown: the calls still get their replies).
  void drain();
  bool idle() const { return in_flight_ == 0 && waiting_ == 0; }
  // Whether poll() has anything to do: an operation in flight (completions
  // to reap), one waiting for a bound, or SQEs not yet submitted. Inline,
  // for the engine's poller: the engine runs it on every pass, and a
  // cached READ (answered with no hand-off) takes several passes, so an
  // idle queue must cost a load or two there, not a call.
  bool busy() const { return in_flight_ != 0 || waiting_ != 0 || to_submit_ != 0; }
  // An eventfd signalled by completions (-1 in synchronous mode).
  int wake_fd() const { return efd_; }
  // "io_uring", "threads" or "sync".
  const char* backend() const;
  bool asynchronous() const { return backend_ != Backend::kSync; }
  // Whether kCallerOp operations can be submitted (the io_uring backend).
  bool runs_caller_ops() const { return backend_ == Backend::kUring; }
  // Registers the calling thread's credentials as a personality of the
  // ring: its id (> 0), or -errno. Any thread (a CallerPool worker acting
  // as the caller); io_uring_register is the kernel's to serialize.
  int register_personality();
  // From the engine's thread, when no queued operation uses id any more.
  void unregister_personality(int id);
  const StorageStats& stats() const { return st_; }

 private:
  struct Peer;
  struct Slot {  // an operation handed to the backend
    StorageReq req;
    Peer* peer = nullptr;  // null: a shared operation (submit_shared)...
    std::vector<Peer*> shared;  // ... charged to these
    int64_t res = 0;
  };
  struct Peer {
    std::string_view id;  // its key in peers_ (client_table.h)
    std::deque<StorageReq> waiting;
    uint32_t in_flight = 0;
    bool ready = false;   // in ready_ (has waiting operations)
    bool active = false;  // has work (in flight, waiting): counted in peers_.active()
  };
  struct Uring;    // the io_uring backend (storage_queue.cc)
  struct Threads;  // the worker pool

  explicit StorageQueue(const StorageOptions& opt);
  bool start_uring();
  void start_threads();
  uint32_t share() const;
  // p null: a shared operation, charged to `shared`.
  void start(Peer* p, const StorageReq& r, std::vector<Peer*> shared = {});
  int start_ready();
  void finish(Slot* s);
  struct Shared {
    std::vector<std::string> peers;
    StorageReq req;
  };
  void start_shared(Shared& s);
  // After p's in-flight count dropped: marks an idle peer so (kept for its
  // next operation: client_table.h), or puts one with waiting operations
  // back in the round-robin.
  void settle(Peer* p);
  int deliver();
  void idle_peer(Peer* p);
  static int64_t run_now(const StorageOptions& opt, const StorageReq& r);

  StorageOptions opt_;
  enum class Backend : uint8_t { kUring, kThreads, kSync } backend_ = Backend::kSync;
  int efd_ = -1;
  std::unique_ptr<Uring> uring_;
  std::unique_ptr<Threads> threads_;
  // Peers with work, and idle ones kept for their next operation, up to
  // max(64, max_in_flight) (client_table.h); only active ones share.
  ClientTable<Peer> peers_;
  std::deque<Peer*> ready_;  // peers with waiting operations, round-robin
  std::deque<Shared> shared_;  // shared operations waiting for room
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_;
  std::vector<Slot*> held_;        // reaped, not yet delivered (or held: opt_.hold)
  std::vector<Slot*> delivering_;  // being delivered by deliver()
  uint32_t in_flight_ = 0;
  uint32_t waiting_ = 0;
  // SQEs in the ring not yet submitted: prepared this pass, or left by a
  // submission that failed (they go with the next one).
  uint32_t to_submit_ = 0;
  StorageStats st_;
};

}  // namespace tern::nfsd
