// Which peer gives up an entry when a bounded cache shared by several peers
// is full (the duplicate request caches: engine/duplicate_cache.h,
// nfsd/reply_cache.h).
//
// The rule: a cache of `capacity` entries held by `active` peers gives each
// a fair share of capacity / active (at least one). A peer that inserts
// while it holds its share or more evicts one of its own entries; any other
// peer's insert evicts from the peer holding the most. So one peer's
// traffic cannot push out another peer's entries while that peer stays
// within its share, and a peer alone (or with quiet company) may use the
// whole cache: the rule only bites when the cache is full.
#pragma once

#include <cstddef>
#include <set>
#include <utility>

namespace tern {

inline size_t fair_share(size_t capacity, size_t active) {
  const size_t s = active == 0 ? capacity : capacity / active;
  return s == 0 ? 1 : s;
}

// Whether an inserting peer that holds `held` entries evicts its own.
inline bool evicts_its_own(size_t held, size_t capacity, size_t active) {
  return held > 0 && held >= fair_share(capacity, active);
}

// The peers ranked by how many entries they hold, so that the one holding
// the most is found in O(1) and a count changes in O(log peers) with no
// allocation. T is the caller's per-peer record, which keeps its Handle.
template <class T>
class HoldingRank {
 public:
  using Set = std::set<std::pair<size_t, T*>>;
  using Handle = typename Set::iterator;

  Handle add(T* peer, size_t held = 0) { return set_.emplace(held, peer).first; }
  void remove(Handle h) { set_.erase(h); }
  // The peer's count is now `held`; returns its new handle.
  Handle update(Handle h, size_t held) {
    auto node = set_.extract(h);
    node.value().first = held;
    return set_.insert(std::move(node)).position;
  }
  // The peer holding the most (nullptr when none is ranked).
  T* most() const { return set_.empty() ? nullptr : set_.rbegin()->second; }
  size_t size() const { return set_.size(); }

 private:
  Set set_;
};

}  // namespace tern
