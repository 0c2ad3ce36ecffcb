#include "engine/reg_cache.h"

#include "base/check.h"
#include "base/log.h"
#include "base/reclaim_hook.h"

namespace tern::rpc {

using namespace tern::rdma;

struct RegCacheEntry {
  RegCache::Key key;
  std::unique_ptr<Mr> mr;
  uint32_t holds = 0;
  uint64_t last_use = 0;
};

RegCache::RegCache(Pd* pd, uint32_t page_size, uint32_t max_entries, Counter* rkeys_live)
    : pd_(pd), page_mask_(~(uint64_t{page_size} - 1)), max_entries_(max_entries), rkeys_live_(rkeys_live) {
  TERN_REQUIRE(page_size >= 512 && (page_size & (page_size - 1)) == 0 && max_entries >= 1, "bad RegCache geometry");
  by_key_.reserve(max_entries);
}

RegCache::~RegCache() { rkeys_live_->sub(by_key_.size()); }

EngineMr* RegCache::acquire(uint64_t addr, uint64_t len, uint32_t access, bool* refused) {
  TERN_ASSERT(len > 0 && len <= UINT32_MAX);
  *refused = false;
  if (free_holds_.empty()) {
    // Holds come in blocks; a block is never freed before the cache.
    constexpr int kBlock = 64;
    hold_blocks_.push_back(std::make_unique<EngineMr[]>(kBlock));
    for (int i = 0; i < kBlock; ++i) free_holds_.push_back(&hold_blocks_.back()[i]);
  }
  const Key key{addr & page_mask_, (addr + len - 1 + ~page_mask_ + 1) & page_mask_, access};
  RegCacheEntry* e;
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    e = it->second.get();
    st_.hits.add();
  } else {
    if (by_key_.size() >= max_entries_ && !evict_one()) {
      st_.full.add();
      return nullptr;
    }
    // Pages, not bytes: the next call on the same buffer hits even if its
    // length differs within the last page.
    auto mr = pd_->reg_mr(reinterpret_cast<void*>(key.start), key.end - key.start, access | kAccessLocalWrite);
    if (!mr) {
      st_.registrations_failed.add();
      *refused = true;
      TERN_LOG(kWarn, "engine", "registration cache: reg_mr of %llu bytes failed: %s",
               static_cast<unsigned long long>(key.end - key.start), mr.status().to_string().c_str());
      return nullptr;
    }
    auto owned = std::make_unique<RegCacheEntry>();
    owned->key = key;
    owned->mr = std::move(mr).value();
    e = owned.get();
    by_key_.emplace(key, std::move(owned));
    rkeys_live_->add();
    st_.misses.add();
  }
  if (e->holds++ == 0) ++in_use_;
  e->last_use = ++tick_;
  EngineMr* h = free_holds_.back();
  free_holds_.pop_back();
  h->cached = e;
  h->rkey = e->mr->rkey();
  h->iova = addr;  // a plain MR is addressed by virtual address
  h->length = static_cast<uint32_t>(len);
  h->registered = false;
  h->next = nullptr;
  return h;
}

void RegCache::release(EngineMr* h) {
  TERN_ASSERT(h->cached != nullptr && h->cached->holds > 0);
  if (--h->cached->holds == 0) --in_use_;
  h->cached = nullptr;
  h->next = nullptr;
  free_holds_.push_back(h);
}

bool RegCache::evict_one() {
  auto victim = by_key_.end();
  for (auto it = by_key_.begin(); it != by_key_.end(); ++it)
    if (it->second->holds == 0 && (victim == by_key_.end() || it->second->last_use < victim->second->last_use))
      victim = it;
  if (victim == by_key_.end()) return false;
  // Its pages leave the cache: no WR of ours may still name them through it.
  note_reclaimed(reinterpret_cast<const void*>(victim->second->key.start),
                 victim->second->key.end - victim->second->key.start, "registration cache");
  by_key_.erase(victim);  // the Mr's destructor deregisters it
  rkeys_live_->sub();
  st_.evictions.add();
  return true;
}

}  // namespace tern::rpc
