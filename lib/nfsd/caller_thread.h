// A thread that runs file-system work as the caller of an NFS call.
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
// creating, removing, renaming, linking, changing modes, owners and times --
// runs here, one job at a time, while the engine thread waits for it (its
// handlers are synchronous). Descriptors are the process's: what the job
// opens the engine thread uses after.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>

#include "nfs/nfs3_types.h"
#include "nfsd/creds.h"

namespace tern::nfsd {

class CallerThread {
 public:
  CallerThread();
  ~CallerThread();
  CallerThread(const CallerThread&) = delete;
  CallerThread& operator=(const CallerThread&) = delete;

  // Runs fn() on the thread acting as c and returns its status (errno must
  // be read inside fn: it is the thread's); kServerfault when the thread
  // cannot act as c.
  template <typename F>
  nfs::Nfs3Stat run(const Cred& c, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    return run_raw(c, [](void* p) { return (*static_cast<Fn*>(p))(); }, &fn);
  }
  uint64_t jobs() const { return jobs_; }

 private:
  nfs::Nfs3Stat run_raw(const Cred& c, nfs::Nfs3Stat (*fn)(void*), void* ctx);
  void loop();

  // The one job slot: kIdle -> kJob (the engine thread) -> kDone (this
  // thread) -> kIdle (the engine thread took the result); kStop ends it.
  enum class Slot : uint8_t { kIdle, kJob, kDone, kStop };
  std::mutex mu_;
  std::condition_variable cv_;
  Slot slot_ = Slot::kIdle;
  const Cred* cred_ = nullptr;
  nfs::Nfs3Stat (*fn_)(void*) = nullptr;
  void* ctx_ = nullptr;
  nfs::Nfs3Stat result_ = nfs::Nfs3Stat::kOk;
  uint64_t jobs_ = 0;  // the engine thread's count
  std::thread th_;
};

}  // namespace tern::nfsd
