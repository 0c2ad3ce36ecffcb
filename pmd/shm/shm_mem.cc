// Protection domain and MR table. The table is private memory of the owner:
// a peer reaches an entry only by naming an rkey, and every such access is
// checked here (entry in use, key byte, access rights, range).
#include <cinttypes>

#include "base/log.h"
#include "mem/memfd.h"
#include "shm/shm_internal.h"

namespace tern::shm {

ShmPd::~ShmPd() {
  for (size_t i = 1; i < mrs_.size(); ++i) TERN_ASSERT(!mrs_[i].in_use, "PD destroyed with MR %zu alive", i);
}

uint32_t ShmPd::alloc_index() {
  forget_key();  // the entry is about to change, and the table may move
  if (!free_.empty()) {
    uint32_t i = free_.back();
    free_.pop_back();
    return i;
  }
  mrs_.emplace_back();
  return static_cast<uint32_t>(mrs_.size() - 1);
}

void ShmPd::free_index(uint32_t index) {
  forget_key();
  MrEntry& e = mrs_[index];
  // The key byte survives reuse and moves on, so a stale rkey for the old MR
  // does not match the next MR at this index.
  uint8_t key = static_cast<uint8_t>(e.key + 1);
  e = MrEntry();
  e.key = key;
  free_.push_back(index);
}

Result<std::unique_ptr<Mr>> ShmPd::reg_mr(void* addr, uint64_t length, uint32_t access) {
  if (addr == nullptr || length == 0)
    return make_error(Errc::kInvalidArgument, "reg_mr: empty range");
  if ((access & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)) != 0)
    return make_error(Errc::kInvalidArgument, "reg_mr: unknown access bits 0x%x", access);
  if ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite))
    return make_error(Errc::kInvalidArgument, "reg_mr: remote write needs local write (as in verbs)");
  if (length > dev_->caps().max_mr_size)
    return make_error(Errc::kInvalidArgument, "reg_mr: %" PRIu64 " bytes is over max_mr_size", length);
  auto seg = mem::find_segment(addr, length);
  // Peers refuse memfds that could be resized under their mapping: find out
  // now, not when the first descriptor names this memory.
  if (seg && !mem::check_peer_memfd(seg->fd, seg->length).is_ok())
    return make_error(Errc::kUnsupported,
                      "reg_mr: the memfd behind %p is not sealed against resizing (F_SEAL_SHRINK, F_SEAL_GROW, "
                      "F_SEAL_SEAL), and peers refuse such memory; use a tern::mem::Arena",
                      addr);
  if (!seg)
    return make_error(Errc::kUnsupported,
                      "reg_mr: pmd/shm can register only memory inside a tern::mem::Arena (memfd-backed, so the "
                      "peer process can map it); %p+%" PRIu64 " is not",
                      addr, length);
  uint32_t si = 0;
  while (si < segs_.size() && segs_[si].id != seg->id) ++si;
  if (si == segs_.size()) {
    if (segs_.size() >= kMaxSegments)
      return make_error(Errc::kNoResources, "reg_mr: more than %u memory segments in one PD", kMaxSegments);
    segs_.push_back(*seg);
  }
  uint32_t idx = alloc_index();
  if (idx >= (1u << 24)) {
    free_index(idx);
    return make_error(Errc::kNoResources, "reg_mr: MR table full");
  }
  MrEntry& e = mrs_[idx];
  e.in_use = true;
  e.fast = false;
  e.valid = true;
  e.access = access;
  e.iova = reinterpret_cast<uint64_t>(addr);
  e.length = length;
  e.host = static_cast<uint8_t*>(addr);
  e.seg = si;
  e.seg_base = static_cast<uint8_t*>(seg->base);
  return std::unique_ptr<Mr>(new ShmMr(this, idx, e.key, e.iova, length, access));
}

Result<std::unique_ptr<FastMr>> ShmPd::alloc_fast_mr(uint32_t max_depth) {
  if (!dev_->caps().fast_reg)
    return make_error(Errc::kUnsupported, "alloc_fast_mr: this shm device has no fast registration (fast_reg=0)");
  if (max_depth == 0 || max_depth > dev_->caps().max_fast_reg_depth)
    return make_error(Errc::kInvalidArgument, "alloc_fast_mr: depth %u not in [1, %u]", max_depth,
                      dev_->caps().max_fast_reg_depth);
  uint32_t idx = alloc_index();
  if (idx >= (1u << 24)) {
    free_index(idx);
    return make_error(Errc::kNoResources, "alloc_fast_mr: MR table full");
  }
  MrEntry& e = mrs_[idx];
  e.in_use = true;
  e.fast = true;
  e.valid = false;
  e.max_depth = max_depth;
  return std::unique_ptr<FastMr>(new ShmFastMr(this, idx, max_depth));
}

const MrEntry* ShmPd::lookup_remote(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
                                    uint32_t qpn) const {
  constexpr uint32_t kRemote = kAccessRemoteRead | kAccessRemoteWrite;
  if (rkey == 0 || (need & kRemote) == 0) return nullptr;
  const MrEntry* e = lookup_local(rkey, addr, len, need);
  if (e == nullptr) return nullptr;
  // A fast registration answers only on the QP that made it, as a type-2
  // window does: a peer on another connection cannot use a key it learned
  // (or guessed) there.
  if (e->fast && dev_->config().qp_bound && e->qpn != qpn) return nullptr;
  return e;
}

ShmMr::ShmMr(ShmPd* pd, uint32_t index, uint8_t key, uint64_t addr, uint64_t len, uint32_t access)
    : pd_(pd), index_(index) {
  addr_ = addr;
  length_ = len;
  access_ = access;
  lkey_ = make_rkey(index, key);
  // A local-only registration has no rkey: lookup_remote refuses it whatever
  // key a peer names, and 0 says there is nothing to advertise.
  rkey_ = (access & (kAccessRemoteRead | kAccessRemoteWrite)) != 0 ? lkey_ : 0;
}

ShmMr::~ShmMr() { pd_->free_index(index_); }

ShmFastMr::ShmFastMr(ShmPd* pd, uint32_t index, uint32_t max_depth) : pd_(pd) {
  max_depth_ = max_depth;
  rkey_ = make_rkey(index, pd->entry(index)->key);
}

ShmFastMr::~ShmFastMr() { pd_->free_index(index()); }

}  // namespace tern::shm
