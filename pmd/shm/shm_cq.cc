#include <algorithm>

#include "shm/shm_internal.h"

namespace tern::shm {

ShmCq::~ShmCq() { TERN_ASSERT(qps_.empty(), "CQ destroyed while %zu QPs use it", qps_.size()); }

void ShmCq::detach(ShmQp* qp) { qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end()); }

int ShmCq::poll(Wc* wc, int max) {
  // Software RDMA has no engine of its own: whoever polls moves the data.
  for (ShmQp* qp : qps_) qp->progress();
  int n = 0;
  while (n < max && count_ > 0) {
    wc[n++] = ring_[head_];
    if (++head_ == cap_) head_ = 0;
    --count_;
  }
  return n;
}

}  // namespace tern::shm
