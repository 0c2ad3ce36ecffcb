// Threads that run file-system work as the caller of an NFS call, off the
// engine's thread, answered from the engine's loop.
//
// Why not the engine's own thread: a thread whose credentials change can no
// longer use the RDMA device files it shares with the engine. The kernel's
// uverbs and rdma_cm refuse write() from a thread whose credentials are not
// the very ones that opened the file (ib_safe_file_access compares the cred
// pointers, and any setfsuid/setgroups makes a new one), and rxe posts
// every WR through write(): an engine thread that once acted as a caller
// saw post_send fail with EACCES and lost its connections. So the engine
// thread keeps the process's credentials (it also needs CAP_DAC_READ_SEARCH
// for open_by_handle_at), and what the kernel must check as the caller --
// creating, removing, renaming, linking, changing modes, owners, sizes and
// times -- runs on a worker of this pool, which switches its own
// file-system identity (ThreadCreds: raw per-thread system calls, skipped
// when the worker already acts as that caller; a switch that fails fails
// the job with NFS3ERR_SERVERFAULT, never runs it as someone else).
//
// Why not wait for the worker: the job can wait for the disk (a directory
// block read, a journal commit, a truncate freeing extents), and the engine
// thread serves every other client meanwhile. submit() hands the job over
// and returns; the engine's poll() (Engine::add_poller, with wake_fd() in
// its wait set so that wait mode keeps working) delivers the result and the
// job's done() runs there, on the engine's thread: everything that lives on
// that thread (descriptor cache, reply cache) is touched only there.
//
// Back-pressure as the StorageQueue's: at most max_in_flight jobs run at
// once, a peer at most its fair share of them (capped at max_per_peer);
// what a bound holds waits in its peer's queue, served round-robin.
// submit() never blocks and never fails.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/process_key.h"
#include "base/stats.h"
#include "nfs/nfs3_types.h"
#include "nfsd/client_table.h"
#include "nfsd/creds.h"

namespace tern::nfsd {

struct CallerJob {
  Cred cred;
  // Runs on a worker acting as cred (errno is the worker's: read it inside).
  std::function<nfs::Nfs3Stat()> fn;
  // Runs exactly once, on the engine's thread, from poll(): s is fn's
  // status, or kServerfault when the worker could not act as cred.
  void (*done)(void* ctx, nfs::Nfs3Stat s) = nullptr;
  void* ctx = nullptr;
};

struct CallerPoolOptions {
  uint32_t threads = 4;
  uint32_t max_in_flight = 32;
  uint32_t max_per_peer = 8;
  // Tests only: while true, a worker holds the job it took before running it.
  const std::atomic<bool>* hold = nullptr;
};

struct CallerPoolStats {
  Counter submitted, completed, queued;
  Counter in_flight;   // gauge
  Counter peer_peak;   // the most jobs one peer had running at once
};

class CallerPool {
 public:
  explicit CallerPool(const CallerPoolOptions& opt);
  // Delivers what is in flight first (drain()).
  ~CallerPool();
  CallerPool(const CallerPool&) = delete;
  CallerPool& operator=(const CallerPool&) = delete;

  // From the engine's thread: queues the job on behalf of `peer`.
  void submit(std::string_view peer, CallerJob job);
  // From the engine's loop: delivers finished jobs (their done() may submit
  // more) and starts what the bounds allow. Returns the work done.
  int poll();
  // Whether poll() has anything to do (inline: the engine's poller asks on
  // every pass): finished jobs to deliver, or queued ones a bound held.
  bool busy() const { return ndone_.load(std::memory_order_acquire) != 0 || !ready_.empty(); }
  // Until nothing is queued or running, delivering every result (shutdown).
  void drain();
  bool idle() const { return in_flight_ == 0 && waiting_ == 0; }
  int wake_fd() const { return efd_; }
  const CallerPoolStats& stats() const { return st_; }

 private:
  struct Peer;
  struct Job {
    CallerJob j;
    Peer* peer = nullptr;
    nfs::Nfs3Stat res = nfs::Nfs3Stat::kOk;
  };
  struct Peer {
    std::string_view id;  // its key in peers_ (client_table.h)
    std::deque<Job*> waiting;
    uint32_t in_flight = 0;
    bool ready = false;
    bool active = false;  // has work (running, waiting): counted in peers_.active()
  };
  uint32_t share() const;
  // After a job of p's was delivered: p idle is kept, marked so.
  void settle(Peer* p);
  void start(Job* j);
  int start_ready();
  void worker();

  CallerPoolOptions opt_;
  int efd_ = -1;
  // Engine thread. Idle peers' entries are kept for their next job, up to
  // max(64, max_in_flight); only active ones share the pool (client_table.h).
  ClientTable<Peer> peers_;
  std::deque<Peer*> ready_;
  uint32_t in_flight_ = 0, waiting_ = 0;
  // Shared with the workers.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> jobs_;
  std::vector<Job*> done_;
  std::atomic<uint32_t> ndone_{0};
  bool stop_ = false;
  std::vector<Job*> delivering_;
  std::vector<std::thread> workers_;
  CallerPoolStats st_;
};

}  // namespace tern::nfsd
