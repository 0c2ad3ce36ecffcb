#include "engine/frwr_registrar.h"

#include <algorithm>

#include "base/log.h"

namespace tern::rpc {

using namespace tern::rdma;

FrwrRegistrar::FrwrRegistrar(Pd* pd, uint32_t depth, uint32_t page_size, uint32_t max_mrs, bool zero_based,
                             Counter* rkeys_live)
    : pd_(pd), depth_(depth), page_size_(page_size), max_mrs_(max_mrs), zero_based_(zero_based),
      rkeys_live_(rkeys_live) {
  TERN_REQUIRE(depth >= 1 && page_size >= 512 && (page_size & (page_size - 1)) == 0, "bad FRWR geometry");
  TERN_REQUIRE(rkeys_live != nullptr, "FrwrRegistrar needs the engine's rkeys_live gauge");
  free_.reserve(max_mrs);
  all_.reserve(std::min<uint32_t>(max_mrs, 4096));
}

FrwrRegistrar::~FrwrRegistrar() {
  // Destroying the MRs ends whatever registration they still carried.
  for (EngineMr* m : all_) {
    if (m->registered) unregistered(m);
    delete m;
  }
}

void FrwrRegistrar::unregistered(EngineMr* m) {
  TERN_ASSERT(m->registered);
  m->registered = false;
  m->invalidating = false;
  rkeys_live_->sub();
}

void FrwrRegistrar::forget(EngineMr* m) {
  TERN_ASSERT(m->slot < all_.size() && all_[m->slot] == m);
  all_[m->slot] = all_.back();
  all_[m->slot]->slot = m->slot;
  all_.pop_back();
  delete m;
  st_->mrs_destroyed.add();
}

uint32_t FrwrRegistrar::segments_for(uint64_t addr, uint64_t len) const {
  if (len == 0) return 0;
  uint64_t first = addr / page_size_, last = (addr + len - 1) / page_size_;
  uint64_t pages = last - first + 1;
  return static_cast<uint32_t>((pages + depth_ - 1) / depth_);
}

EngineMr* FrwrRegistrar::take() {
  if (EngineMr* m = free_.get()) return m;
  if (all_.size() >= max_mrs_) return nullptr;
  // Created on demand, so a connection loss (which destroys MRs) costs only
  // what is used again.
  auto r = pd_->alloc_fast_mr(depth_);
  if (!r) {
    TERN_LOG(kWarn, "engine", "alloc_fast_mr(%u) failed: %s", depth_, r.status().to_string().c_str());
    return nullptr;
  }
  auto* m = new EngineMr();
  m->mr = std::move(r).value();
  m->slot = static_cast<uint32_t>(all_.size());
  all_.push_back(m);
  st_->mrs_created.add();
  return m;
}

int FrwrRegistrar::map(uint64_t addr, uint64_t len, uint32_t lkey, uint32_t access, WrChain& chain,
                       RdmaSegment* segs, int max_segs, EngineMr** list) {
  int need = static_cast<int>(segments_for(addr, len));
  if (need > max_segs || !chain.room(need)) return kNoResources;
  EngineMr* taken[WrChain::kMaxWrs];
  for (int i = 0; i < need; ++i) {
    taken[i] = take();
    if (taken[i] == nullptr) {
      for (int j = 0; j < i; ++j) free_.put(taken[j]);
      st_->out_of_mrs.add();
      return kNoResources;
    }
  }
  // Split at `depth`-page boundaries: every piece but the first starts on a page.
  uint64_t pos = addr, end = addr + len;
  for (int i = 0; i < need; ++i) {
    uint64_t limit = (pos / page_size_ + depth_) * page_size_;
    uint64_t piece_end = std::min(end, limit);
    EngineMr* m = taken[i];
    m->rkey = m->mr->bump_rkey();
    // The offset the peer uses: where the registration's first byte is.
    m->iova = zero_based_ ? 0 : pos;
    m->length = static_cast<uint32_t>(piece_end - pos);
    m->registered = true;
    m->invalidating = false;
    m->exposed = true;
    rkeys_live_->add();
    SendWr& w = chain.add();
    w.opcode = WrOpcode::kRegMr;
    w.reg.mr = m->mr.get();
    w.reg.addr = pos;
    w.reg.length = m->length;
    w.reg.lkey = lkey;
    w.reg.access = access;
    w.reg.rkey = m->rkey;
    segs[i] = RdmaSegment{m->rkey, m->length, m->iova};
    m->next = *list;
    *list = m;
    pos = piece_end;
    st_->reg_wrs.add();
  }
  return need;
}

void FrwrRegistrar::remote_invalidated(EngineMr* m) {
  TERN_ASSERT(m->registered && !m->invalidating);
  unregistered(m);
  st_->remote_invalidated.add();
}

int FrwrRegistrar::invalidate(EngineMr* list, WrChain& chain) {
  int n = 0;
  for (EngineMr* m = list; m != nullptr; m = m->next) {
    if (!m->registered) continue;
    m->invalidating = true;
    SendWr& w = chain.add();
    w.opcode = WrOpcode::kLocalInv;
    w.invalidate_rkey = m->rkey;
    ++n;
    st_->local_inv_wrs.add();
  }
  return n;
}

void FrwrRegistrar::release(EngineMr** list) {
  while (EngineMr* m = *list) {
    *list = m->next;
    // The LOCAL_INV chain completed (or, for an MR whose REG_MR was never
    // posted, there was nothing to reach): either way it is unreachable now.
    if (m->registered) unregistered(m);
    bool exposed = m->exposed;
    m->exposed = false;
    if (exposed && !m->mr->retire()) {
      forget(m);  // the driver could not make it safe to reuse (FastMr::retire)
      continue;
    }
    free_.put(m);
  }
}

void FrwrRegistrar::destroy(EngineMr** list) {
  while (EngineMr* m = *list) {
    *list = m->next;
    // The QP is drained, so no WR of ours still uses it, and destroying the
    // MR ends its registration whatever state the device left it in.
    if (m->registered) unregistered(m);
    forget(m);
    st_->mrs_orphaned.add();
  }
}

}  // namespace tern::rpc
