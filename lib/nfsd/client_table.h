// The clients of a per-engine queue (the storage queue, the caller pool):
// an entry per client with work, and idle ones kept for their next work.
//
// Why keep idle entries: a client with one operation at a time would have
// its entry (a node, its key, a deque's buffers) made and dropped for every
// operation -- some 1,400 instructions of malloc and hashing each
// (bench/storage_queue_cost.cc). Only active entries count for a fair share
// (active()), so a kept idle client takes no share from the next one. Idle
// entries are kept up to a bound, then all erased at once: the sweep is paid
// for by the operations before it.
//
// Looked up by a call's peer id without making a string, under the
// process's keyed hash (a peer names itself); the entry found last is
// compared first, since one client's operations come in runs (a burst of
// WRITEs, a READ's continuation) and a compare is cheaper than the hash.
//
// Entry needs `std::string_view id` (set here to its key, which a node keeps
// stable) and `bool active`. Engine thread only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/process_key.h"

namespace tern::nfsd {

template <class Entry>
class ClientTable {
 public:
  // kept_idle: how many idle entries are kept before a sweep erases them.
  explicit ClientTable(uint32_t kept_idle) : kept_idle_(kept_idle) {}

  // The client's entry, made on first use; counted as active (every caller
  // gives it work at once).
  Entry* get(std::string_view id) {
    Entry* e = last_;
    if (e == nullptr || e->id != id) {
      auto it = entries_.find(id);
      if (it == entries_.end()) {
        it = entries_.emplace(std::string(id), Entry{}).first;
        it->second.id = it->first;
      }
      e = last_ = &it->second;
    }
    if (!e->active) {
      e->active = true;
      ++active_;
    }
    return e;
  }

  // e has no work left: kept, marked idle. When more than kept_idle idle
  // entries are kept, every idle one is erased -- nothing points at an idle
  // entry but last_ (the owner's operations, queues and round-robin hold
  // active ones only), so the caller's pointers stay valid.
  void idle(Entry* e) {
    if (!e->active) return;
    e->active = false;
    --active_;
    if (entries_.size() - active_ <= kept_idle_) return;
    last_ = nullptr;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.active) ++it;
      else it = entries_.erase(it);
    }
  }

  uint32_t active() const { return active_; }  // clients with work: what a fair share divides among
  size_t size() const { return entries_.size(); }

 private:
  std::unordered_map<std::string, Entry, KeyedStringHash, StringViewEq> entries_;
  Entry* last_ = nullptr;  // the one get() found last (null after a sweep)
  uint32_t active_ = 0;
  uint32_t kept_idle_;
};

}  // namespace tern::nfsd
