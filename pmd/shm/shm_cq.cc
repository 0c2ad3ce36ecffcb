#include <algorithm>

#include "base/clock.h"
#include "shm/shm_internal.h"

namespace tern::shm {

ShmCq::ShmCq(ShmDevice* dev, uint32_t capacity)
    : dev_(dev),
      ring_(capacity),
      cap_(capacity),
      net_ticks_(ticks_from_ns(kSafetyNetNs / kNetSlices)),
      sweep_ticks_(net_ticks_) {
  net_tick_ = sweep_tick_ = now_ticks();
}

ShmCq::~ShmCq() { TERN_ASSERT(qps_.empty(), "CQ destroyed while %zu QPs use it", qps_.size()); }

void ShmCq::attach(ShmQp* qp) {
  qp->at_in(this) = static_cast<uint32_t>(qps_.size());
  qps_.push_back(qp);
  net_seen_.push_back(qp->visit_count());  // the first look visits it, unless a poll has by then
}

void ShmCq::detach(ShmQp* qp) {
  // In O(1), keeping what the safety net's round robin holds: the QPs
  // before net_next_ have been looked at in this round, those from it on
  // have not. The last QP (not yet looked at, unless the round is done)
  // fills a hole after net_next_ directly; a hole before it is filled by
  // the last QP looked at, whose place the last QP takes, and the round's
  // boundary moves back one. A plain swap with the last would put a QP not
  // yet looked at among those that were: it would wait a round more.
  const size_t i = qp->at_in(this), n = qps_.size();
  TERN_CHECK(i < n && qps_[i] == qp, "QP not attached to this CQ");
  auto move = [&](size_t from, size_t to) {
    if (from == to) return;  // else the stale entry left at `from` would be given index `from` back
    qps_[to] = qps_[from];
    net_seen_[to] = net_seen_[from];
    qps_[to]->at_in(this) = static_cast<uint32_t>(to);
  };
  const size_t p = std::min(net_next_, n);
  if (i < p) {
    move(p - 1, i);
    move(n - 1, p - 1);
    net_next_ = p - 1;
  } else {
    move(n - 1, i);
  }
  qps_.pop_back();
  net_seen_.pop_back();
}

void ShmCq::safety_net() {
  const uint64_t now = now_ticks();
  if (now - sweep_tick_ >= sweep_ticks_) {
    sweep_tick_ = now;
    dev_->sweep_watched();
  }
  if (now - net_tick_ < net_ticks_) return;
  net_tick_ = now;
  // One slice, round robin: each QP is looked at once per kSafetyNetNs, in
  // slices of at most kNetLookMax (the next slice's time follows the CQ's
  // size now; disable_safety_net() keeps it at never). A poll that comes
  // late makes up nothing: on a CQ of thousands of QPs, whose slices fall
  // due faster than every 64th poll comes here, the round stretches
  // instead (at 10,000 QPs, 1,250 slices: ~25 ms at a poll a microsecond).
  // Making them up was tried: 32 looks at once put the echo's p99 beside a
  // held connection table back at 3-4x its solo figure.
  const size_t n = qps_.size();
  const size_t slices = std::max<size_t>(kNetSlices, (n + kNetLookMax - 1) / kNetLookMax);
  if (net_ticks_ != UINT64_MAX) net_ticks_ = ticks_from_ns(kSafetyNetNs / slices);
  for (size_t k = (n + slices - 1) / slices; k > 0; --k) {
    if (net_next_ >= n) net_next_ = 0;
    ShmQp* qp = qps_[net_next_];
    // Visited since the last look: that visit saw all the QP had then.
    // Else visited now; that visit counts as seen.
    uint32_t v = qp->visit_count();
    if (v == net_seen_[net_next_]) {
      qp->look_at_cons();  // what no notification told us of, cons included
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
