// Destroys rdma_cm ids off the engine's thread.
//
// Why: rdma_destroy_id does not return until the kernel's connection manager
// has let go of the id, and that can take as long as the CM likes: in the rxe
// VM, destroying a connected id blocked for 20-65 s at a time (the guest
// logged cm_destroy_id_wait_timeout every 10 s meanwhile). Called from the
// engine's poll loop, that wait stopped every connection of the engine and
// left new clients' connection requests to time out. Here the engine hands
// the id over and goes on; one thread per device destroys ids in the order
// handed over. A slow destroy then delays only the ids behind it, which
// nothing waits for: the engine already forgot them.
//
// An id handed over must be one whose events the engine no longer wants
// (context cleared, see VerbsDevice::reap_cm_id) and whose QP, if any, is
// not attached through rdma_create_qp. The event channel stays open until
// the reaper is stopped (the device's destructor stops it first).
#pragma once

#include <rdma/rdma_cma.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <pthread.h>

namespace tern::verbs {

class CmReaper {
 public:
  CmReaper() = default;
  ~CmReaper() { stop(); }
  CmReaper(const CmReaper&) = delete;
  CmReaper& operator=(const CmReaper&) = delete;

  // Hands `id` over; it is destroyed soon on the reaper's thread (started at
  // the first hand-off). Never blocks on the CM. If the thread cannot be
  // started, the id is destroyed here, as before.
  void reap(rdma_cm_id* id);
  // Destroys what is still queued and joins the thread. Blocks as long as
  // those destroys do: for the device's destructor only.
  void stop();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<rdma_cm_id*> queue_;
  bool stopping_ = false;
  bool started_ = false;
  pthread_t native_{};
};

}  // namespace tern::verbs
