// pmd/shm: what an idle connection gives back. A server holding a thousand
// connections, most of them idle at any moment, must not pay for each what
// its busiest moment needed (docs/shm-driver.md, "Memory per connection").
// Two things grow with use and are given back here, on the control path
// (the device's sweep every kIdleSweepNs, from poll_cm and arm_wait), never
// on the datapath:
//
//  - the send queue array (ShmQp::sq_), which doubles while WRs are
//    outstanding: an idle QP's is freed (the next post makes a small one);
//  - the pages of our outbound ring's slots in the connection area, which
//    every descriptor we publish touches in turn until the whole ring is
//    resident: an idle QP punches them out of the memfd (MADV_REMOVE), so
//    the system has them back; the next descriptor written faults in a
//    zeroed page. The peer's driver does the same with its own ring.
//
// Punching our outbound slots is safe because nobody reads them any more:
// every descriptor we published has been executed (the peer's consumer
// index is past it: it reads only the slot at its index, and a punched
// page's seq word is 0, which no descriptor ever has) and retired by us (a
// READ's grant, which the peer writes into the slot, has been read). A peer that reads or writes them anyway
// finds zeros or writes into a page we never look at; a peer's slots,
// which it may be filling right now, are never punched by us. Nothing of
// the protocol changes: a peer that does not punch its own ring still works
// with one that does.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "shm/shm_internal.h"

namespace tern::shm {

void ShmDevice::sweep_idle() {
  if (qps_.empty()) return;
  const uint64_t now = monotonic_ns();
  if (now < next_sweep_ns_) return;
  next_sweep_ns_ = now + kIdleSweepNs;
  for (ShmQp* qp : qps_) qp->trim_if_idle(now);
}

void ShmQp::trim_if_idle(uint64_t now) {
  // Activity: a WR posted, a descriptor published or executed. All three
  // indices only move forward, so "unchanged" means "nothing happened".
  if (sq_tail_ != seen_tail_ || out_prod_ != seen_prod_ || in_cons_ != seen_cons_) {
    seen_tail_ = sq_tail_, seen_prod_ = out_prod_, seen_cons_ = in_cons_;
    active_ns_ = now;
    trimmed_ = false;
    return;
  }
  if (trimmed_ || now - active_ns_ < kIdleTrimNs) return;
  // Connected, nothing outstanding: every WR retired, so every descriptor
  // we published was executed and retired (out_done_ == out_prod_).
  if (state_ != QpState::kRts || sq_head_ != sq_tail_ || out_done_ != out_prod_) return;
  trimmed_ = true;
  st_.idle_trims.add();
  if (sq_cap_ > 0) {
    // Empty: nothing to move. The next post makes a kSqInitial one again
    // (grow_sq); ~4.7 KiB per idle QP otherwise.
    sq_.reset();
    sq_cap_ = sq_mask_ = sq_limit_ = 0;
  }
  if (out_slots_ == nullptr || vanished_) return;
  // The whole pages inside our outbound slots; the pages they share with
  // the area's header or the peer's slots stay.
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(out_slots_);
  const uintptr_t hi = lo + static_cast<uintptr_t>(slots_) * sizeof(ShmDesc);
  const uintptr_t a = (lo + page - 1) & ~(page - 1), b = hi & ~(page - 1);
  // Best effort: if the kernel refuses, the pages simply stay.
  if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_REMOVE);
}

}  // namespace tern::shm
