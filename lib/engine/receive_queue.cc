#include "engine/receive_queue.h"

#include <algorithm>

#include "engine/wr_id.h"

namespace tern::rpc {

using namespace tern::rdma;

uint32_t RecvQueue::grow(uint32_t n) {
  uint32_t took = 0;
  while (took < n && owned_ < target_) {
    MsgBuf* b = bufs_->get();
    if (b == nullptr) break;
    b->queue = id_;
    mine_.push_back(b);
    ++owned_;
    ++took;
    give_back(b);
  }
  if (took > 0) grants_.resize(grants_.total() + took);
  return took;
}

uint32_t RecvQueue::post(Counter* posted_counter, Counter* batches_counter) {
  if (pending_.size() == 1) {
    // One buffer, the usual case at low load (one receive back per pass):
    // the loop below with n = 1, without its batching.
    MsgBuf* b = pending_[0];
    // I1: a buffer on its way back to the device is attached to nothing.
    TERN_ASSERT(b->where == MsgBuf::Where::kQueued && b->queue == id_);
    Sge sge{reinterpret_cast<uint64_t>(b->data), b->cap, lkey_};
    RecvWr wr{recv_wr_id(b->index), &sge, 1};
    b->where = MsgBuf::Where::kPosted;
    int err = 0;
    const int got = srq_ != nullptr ? srq_->post_recv(&wr, 1, &err) : qp_->post_recv(&wr, 1, &err);
    batches_counter->add();
    if (got < 1) {
      b->where = MsgBuf::Where::kQueued;  // refused: it stays queued
      return 0;
    }
    ++posted_;
    posted_counter->add();
    pending_.clear();
    return 1;
  }
  // Receives go back in batches: one post_recv (one doorbell) for many.
  RecvWr* wrs = wrs_.get();
  Sge* sges = sges_.get();
  MsgBuf* const* pend = pending_.data();
  const size_t total = pending_.size();
  size_t done = 0;
  while (done < total) {
    const int n = static_cast<int>(std::min<size_t>(kBatch, total - done));
    for (int i = 0; i < n; ++i) {
      MsgBuf* b = pend[done + i];
      // I1: a buffer on its way back to the device is attached to nothing.
      TERN_ASSERT(b->where == MsgBuf::Where::kQueued && b->queue == id_);
      sges[i] = Sge{reinterpret_cast<uint64_t>(b->data), b->cap, lkey_};
      wrs[i] = RecvWr{recv_wr_id(b->index), &sges[i], 1};
      b->where = MsgBuf::Where::kPosted;
    }
    int err = 0;
    int got = srq_ != nullptr ? srq_->post_recv(wrs, n, &err) : qp_->post_recv(wrs, n, &err);
    if (got < 0) got = 0;
    for (int i = got; i < n; ++i) pend[done + i]->where = MsgBuf::Where::kQueued;
    posted_ += static_cast<uint32_t>(got);
    posted_counter->add(static_cast<uint64_t>(got));
    batches_counter->add();
    done += static_cast<size_t>(got);
    if (got < n) break;
  }
  if (done == total) pending_.clear();
  else pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  return static_cast<uint32_t>(done);
}

uint32_t RecvQueue::release_all() {
  uint32_t dropped = 0;
  for (MsgBuf* b : mine_) {
    if (b->where == MsgBuf::Where::kHeld) continue;  // a call still holds it: it comes back through give_back
    if (b->where == MsgBuf::Where::kPosted) ++dropped;
    b->where = MsgBuf::Where::kHeld;
    bufs_->put(b);
    --owned_;
  }
  mine_.erase(std::remove_if(mine_.begin(), mine_.end(), [](MsgBuf* b) { return b->where == MsgBuf::Where::kPool; }),
              mine_.end());
  pending_.clear();
  posted_ = 0;
  return dropped;
}

}  // namespace tern::rpc
