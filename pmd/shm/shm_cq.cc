#include <algorithm>

#include "base/clock.h"
#include "shm/shm_internal.h"

namespace tern::shm {

ShmCq::ShmCq(ShmDevice* dev, uint32_t capacity)
    : dev_(dev), ring_(capacity), cap_(capacity), net_ticks_(ticks_from_ns(kSafetyNetNs)) {
  net_tick_ = now_ticks();
}

ShmCq::~ShmCq() { TERN_ASSERT(qps_.empty(), "CQ destroyed while %zu QPs use it", qps_.size()); }

void ShmCq::detach(ShmQp* qp) { qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end()); }

void ShmCq::safety_net() {
  const uint64_t now = now_ticks();
  if (now - net_tick_ < net_ticks_) return;
  net_tick_ = now;
  for (ShmQp* qp : qps_) qp->mark_active();
}

int ShmCq::poll(Wc* wc, int max) {
  // Software RDMA has no engine of its own: whoever polls moves the data,
  // for the QPs that have work (shm_link.cc): those the peers flagged in
  // our links, and those with local work queued.
  if (TERN_UNLIKELY((++polls_ & 63) == 0)) safety_net();  // the clock every 64th poll only
  dev_->run_ready();
  int n = 0;
  while (n < max && count_ > 0) {
    wc[n++] = ring_[head_];
    if (++head_ == cap_) head_ = 0;
    --count_;
  }
  return n;
}

}  // namespace tern::shm
