// PersonalityCache: identities to io_uring personalities, bounded, LRU.
// See personality_cache.h.
#include "nfsd/personality_cache.h"

namespace tern::nfsd {

PersonalityCache::PersonalityCache(size_t max, Unregister unregister, void* ctx)
    : max_(max == 0 ? 1 : max), unregister_(unregister), ctx_(ctx) {}

PersonalityCache::~PersonalityCache() {
  for (const Entry& e : live_) unregister_(ctx_, e.id);
  for (const Entry& e : retired_) unregister_(ctx_, e.id);
}

int PersonalityCache::acquire(const Cred& c) {
  // A handful of identities per engine: a linear search is cheaper than a hash of the groups.
  for (Entry& e : live_)
    if (e.cred == c) {
      ++e.uses;
      e.last = ++tick_;
      return e.id;
    }
  return 0;
}

void PersonalityCache::release(int id) {
  for (Entry& e : live_)
    if (e.id == id) {
      if (e.uses > 0) --e.uses;
      return;
    }
  for (size_t i = 0; i < retired_.size(); ++i)
    if (retired_[i].id == id) {
      if (retired_[i].uses > 0 && --retired_[i].uses > 0) return;
      unregister_(ctx_, id);
      retired_[i] = retired_.back();
      retired_.pop_back();
      return;
    }
}

void PersonalityCache::add(const Cred& c, int id) {
  if (id <= 0) return;
  for (const Entry& e : live_)
    if (e.cred == c) {
      unregister_(ctx_, id);
      return;
    }
  if (live_.size() >= max_) {
    size_t lru = 0;
    for (size_t i = 1; i < live_.size(); ++i)
      if (live_[i].last < live_[lru].last) lru = i;
    if (live_[lru].uses == 0) unregister_(ctx_, live_[lru].id);
    else retired_.push_back(live_[lru]);
    live_[lru] = live_.back();
    live_.pop_back();
  }
  live_.push_back(Entry{c, id, 0, ++tick_});
}

}  // namespace tern::nfsd
