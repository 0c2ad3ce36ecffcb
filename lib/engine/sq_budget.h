// SqBudget: how many send-queue slots are in use, so that the engine never
// posts more WRs than the queue holds (a post past the depth fails, and on
// some devices puts the QP in error).
//
// Unsignaled WRs produce no completion, so a slot cannot be freed when its WR
// finishes; it is freed when a later signaled WR completes, since strong
// send-queue ordering makes that completion cover every earlier WR. So each
// posted chain gets a sequence number: the count of WRs posted up to and
// including it. The send-context ring (send_ctx_ring.h) stores it with the
// chain's context, and the completion that walks past that context retires
// everything up to it.
#pragma once

#include <cstdint>

namespace tern::rpc {

class SqBudget {
 public:
  explicit SqBudget(uint32_t depth) : depth_(depth) {}
  uint32_t depth() const { return depth_; }
  // Whether n more WRs fit.
  bool room(uint32_t n) const { return posted_ + n - retired_ <= depth_; }
  // n WRs posted; returns the sequence to store with their context.
  uint64_t post(uint32_t n) {
    posted_ += n;
    return posted_;
  }
  // Every WR up to sequence `seq` is done (a completion covered it).
  void retire(uint64_t seq) {
    if (seq > retired_ && seq <= posted_) retired_ = seq;
  }
  // Teardown: the queue is drained.
  void retire_all() { retired_ = posted_; }
  uint64_t outstanding() const { return posted_ - retired_; }

 private:
  uint32_t depth_;
  uint64_t posted_ = 0, retired_ = 0;
};

}  // namespace tern::rpc
