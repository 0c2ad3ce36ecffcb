// RecvQueue: the receive buffers posted to one receive queue -- a device's
// shared receive queue, which every connection of the engine on that device
// draws from, or, on a device without SRQs (or a connection in a protection
// domain of its own), one QP's own receive queue -- and the grant policy
// (credits.h) that keeps what peers may send within what is posted.
//
// Buffers come from the engine's MsgBufPool up to `target`, go to the
// device in batches (one post_recv per 64: one doorbell for many; a few
// may wait for a later pass's batch while free credits cover them), come back
// with a receive completion, are held by the call or reply they carry, and
// are queued to be posted again once that is done.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/stats.h"
#include "engine/credits.h"
#include "engine/msg_buf.h"
#include "engine/wr_id.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

// wr_id of a receive: the buffer's index in the pool (wr_id.h).
inline uint64_t recv_wr_id(uint32_t buf_index) { return make_wr_id(WrKind::kRecv, 0, buf_index); }

class RecvQueue {
 public:
  // Posts to `srq`, or to `qp` when srq is null. `id` goes into each
  // buffer (MsgBuf::queue) so that a completion finds its queue.
  // `lkey`: the arena's registration in the PD of the SRQ or QP.
  RecvQueue(MsgBufPool* bufs, uint32_t target, uint32_t max_grant, rdma::Srq* srq, rdma::Qp* qp, uint16_t id,
            uint32_t lkey)
      : bufs_(bufs), target_(target), srq_(srq), qp_(qp), id_(id), lkey_(lkey), grants_(0, max_grant, target) {}

  // Takes buffers from the pool up to `target` (those the pool can give) and
  // queues them. Returns how many it holds in all.
  uint32_t fill() { return grow(target_); }
  // Takes up to n more buffers (never beyond `target`) and adds them to the
  // grant budget. A connection's own queue starts small and grows as its
  // peer's load asks for credits (server) or its calls in flight for
  // receive reservations (client). Returns how many it took.
  uint32_t grow(uint32_t n);
  // A buffer this queue posted is done with: it goes back to the device.
  void give_back(MsgBuf* b) {
    b->where = MsgBuf::Where::kQueued;
    pending_.push_back(b);
  }
  // Posts what is queued (batched). Returns how many were posted; a
  // refusal leaves the rest queued.
  uint32_t post(Counter* posted_counter, Counter* batches_counter);
  // A receive completion took b off the device.
  void completed(MsgBuf* b) {
    TERN_ASSERT(b->where == MsgBuf::Where::kPosted && b->queue == id_);
    b->where = MsgBuf::Where::kHeld;
    --posted_;
  }
  // Teardown (the QP or SRQ is destroyed, so nothing is posted any more):
  // every buffer this queue holds that is not held by a call goes back to
  // the pool; returns how many were still posted (dropped by the device).
  uint32_t release_all();

  // Whether the buffers queued may wait for a later pass rather than be
  // posted at the end of this one: fewer than a batch of them, and no more
  // than the queue's credits neither granted nor reserved (grants().free()).
  // Every credit granted and every reply reserved still has a receive
  // posted then (posted >= owned - held - free), the promise cover_grants()
  // keeps mid-pass; so at depth 1, where a pass gives one buffer back, one
  // post_recv (one doorbell) carries a batch instead of one per message.
  bool may_defer() const { return pending_.size() < kDeferBatch && pending_.size() <= grants_.free(); }
  // A grant or a reservation just took the free credits below what waits
  // to be posted: it must be posted before the message the credit allows.
  bool must_post() const { return pending_.size() > grants_.free(); }
  static constexpr uint32_t kDeferBatch = 16;

  uint32_t posted() const { return posted_; }
  // Buffers given back and not yet posted again.
  uint32_t pending() const { return static_cast<uint32_t>(pending_.size()); }
  uint32_t owned() const { return owned_; }
  uint32_t target() const { return target_; }
  uint16_t id() const { return id_; }
  bool shared() const { return srq_ != nullptr; }
  GrantPolicy& grants() { return grants_; }
  void set_qp(rdma::Qp* qp) { qp_ = qp; }
  bool in_post_list = false;  // on the engine's list of queues with buffers to post

 private:
  MsgBufPool* bufs_;
  uint32_t target_;
  rdma::Srq* srq_;
  rdma::Qp* qp_;
  uint16_t id_;
  uint32_t lkey_;
  GrantPolicy grants_;
  uint32_t posted_ = 0, owned_ = 0;
  std::vector<MsgBuf*> pending_;
  std::vector<MsgBuf*> mine_;  // every buffer this queue took from the pool
  // Scratch for one post_recv call, kept so that a post builds only the
  // WRs it posts (arrays on the stack were constructed whole every time).
  static constexpr int kBatch = 64;
  std::unique_ptr<rdma::RecvWr[]> wrs_{new rdma::RecvWr[kBatch]};
  std::unique_ptr<rdma::Sge[]> sges_{new rdma::Sge[kBatch]};
};

}  // namespace tern::rpc
