#include "engine/duplicate_cache.h"

namespace tern::rpc {

DuplicateCache::Key DuplicateCache::key_of(const ServerCall& c) {
  return Key{std::string(c.peer_id()), c.xid(), c.prog(), c.vers(), c.proc(), c.args_digest()};
}

DuplicateCache::~DuplicateCache() {
  for (auto& [k, e] : map_)
    for (ServerCall* c : e.held) c->drop();
}

DuplicateCache::Found DuplicateCache::begin(ServerCall* c, std::vector<uint8_t>* results) {
  Key k = key_of(*c);
  auto it = map_.find(k);
  if (it == map_.end()) {
    ++misses_;
    Entry e;
    e.lru = lru_.end();
    map_.emplace(std::move(k), std::move(e));
    if (map_.size() > max_) evict();
    return Found::kNew;
  }
  if (!it->second.done) {
    ++in_progress_;
    it->second.held.push_back(c);
    return Found::kInProgress;
  }
  ++hits_;
  *results = it->second.results;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return Found::kDone;
}

void DuplicateCache::done(const ServerCall& c, std::span<const uint8_t> results) {
  Key k = key_of(c);
  auto it = map_.find(k);
  if (it == map_.end()) it = map_.emplace(k, Entry{}).first;
  Entry& e = it->second;
  e.results.assign(results.begin(), results.end());
  std::vector<ServerCall*> held;
  held.swap(e.held);
  if (!e.done) {
    e.done = true;
    lru_.push_front(k);
    e.lru = lru_.begin();
  } else {
    lru_.splice(lru_.begin(), lru_, e.lru);
  }
  if (map_.size() > max_) evict();
  // After the entry is settled: a reply may fail, never reenter the cache.
  for (ServerCall* h : held) (void)h->reply(results);
}

void DuplicateCache::forget(const ServerCall& c) {
  auto it = map_.find(key_of(c));
  if (it == map_.end()) return;
  std::vector<ServerCall*> held;
  held.swap(it->second.held);
  if (it->second.done) lru_.erase(it->second.lru);
  map_.erase(it);
  for (ServerCall* h : held) (void)h->reply_error(AcceptStat::kSystemErr);
}

void DuplicateCache::evict() {
  // The least recently used finished entry; calls in progress stay.
  while (map_.size() > max_ && !lru_.empty()) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
}

}  // namespace tern::rpc
