#include <algorithm>

#include "base/clock.h"
#include "shm/shm_internal.h"

namespace tern::shm {

ShmCq::ShmCq(ShmDevice* dev, uint32_t capacity)
    : dev_(dev), ring_(capacity), cap_(capacity), net_ticks_(ticks_from_ns(kSafetyNetNs / kNetSlices)) {
  net_tick_ = now_ticks();
}

ShmCq::~ShmCq() { TERN_ASSERT(qps_.empty(), "CQ destroyed while %zu QPs use it", qps_.size()); }

void ShmCq::attach(ShmQp* qp) {
  qps_.push_back(qp);
  net_seen_.push_back(qp->visit_count());  // the first look visits it, unless a poll has by then
}

void ShmCq::detach(ShmQp* qp) {
  for (size_t i = 0; i < qps_.size(); ++i)
    if (qps_[i] == qp) {
      qps_.erase(qps_.begin() + static_cast<std::ptrdiff_t>(i));
      net_seen_.erase(net_seen_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
}

void ShmCq::safety_net() {
  const uint64_t now = now_ticks();
  if (now - net_tick_ < net_ticks_) return;
  net_tick_ = now;
  dev_->sweep_watched();
  // One slice, round robin: each QP is looked at once per kNetSlices slices.
  const size_t n = qps_.size();
  for (size_t k = (n + kNetSlices - 1) / kNetSlices; k > 0; --k) {
    if (net_next_ >= n) net_next_ = 0;
    ShmQp* qp = qps_[net_next_];
    // Visited since the last look: that visit saw all the QP had then.
    // Else visited now; that visit counts as seen.
    uint32_t v = qp->visit_count();
    if (v == net_seen_[net_next_]) {
      qp->mark_active();
      ++v;
    }
    net_seen_[net_next_++] = v;
  }
}

int ShmCq::poll(Wc* wc, int max) {
  // Software RDMA has no engine of its own: whoever polls moves the data,
  // for the QPs that have work (shm_link.cc): those the peers flagged in
  // our links, and those with local work queued.
  if (TERN_UNLIKELY((++polls_ & 63) == 0)) safety_net();  // the clock every 64th poll only
  dev_->run_ready(this);
  int n = 0;
  while (n < max && count_ > 0) {
    wc[n++] = ring_[head_];
    if (++head_ == cap_) head_ = 0;
    --count_;
  }
  return n;
}

}  // namespace tern::shm
