#include "engine/duplicate_cache.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "base/check.h"
#include "base/fair_share.h"
#include "base/process_key.h"

namespace tern::rpc {

size_t DuplicateCache::PeerHash::operator()(std::string_view s) const { return KeyedStringHash()(s); }

size_t DuplicateCache::KeyHash::operator()(const Key& k) const {
  // Every field, under the process's key: a peer that cannot compute it
  // cannot choose xids or arguments that share a bucket.
  SipHasher h(process_key());
  h.update_u64(k.peer->hash);
  h.update_u64(uint64_t{k.xid} << 32 | k.proc);
  h.update_u64(uint64_t{k.prog} << 32 | k.vers);
  h.update_u64(k.digest);
  return static_cast<size_t>(h.finish());
}

DuplicateCache::Peer* DuplicateCache::find_peer(std::string_view id) {
  // Calls come in runs from one peer: compare with the last one before
  // hashing the identity.
  if (last_ != nullptr && *last_->id == id) return last_;
  auto it = peers_.find(id);
  if (it == peers_.end()) return nullptr;
  last_ = &it->second;
  return last_;
}

DuplicateCache::Peer* DuplicateCache::peer_for(std::string_view id) {
  if (Peer* p = find_peer(id)) return p;
  auto [it, _] = peers_.emplace(std::string(id), Peer{});
  Peer* p = &it->second;
  p->id = &it->first;
  p->hash = PeerHash()(id);
  p->rank = rank_.emplace(0, p).first;
  last_ = p;
  return p;
}

DuplicateCache::Key DuplicateCache::key_of(const ServerCall& c, Peer* p) const {
  return Key{p, c.xid(), c.prog(), c.vers(), c.proc(), c.args_digest()};
}

size_t DuplicateCache::peer_entries(std::string_view peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.finished;
}

size_t DuplicateCache::longest_chain() const {
  size_t most = 0;
  for (size_t b = 0; b < map_.bucket_count(); ++b) most = std::max(most, map_.bucket_size(b));
  return most;
}

void DuplicateCache::set_finished(Peer* p, size_t n) {
  p->finished = n;
  auto node = rank_.extract(p->rank);
  node.value().first = n;
  p->rank = rank_.insert(std::move(node)).position;
}

void DuplicateCache::drop_if_empty(Peer* p) {
  if (p->finished != 0 || p->in_progress != 0) return;
  rank_.erase(p->rank);
  if (last_ == p) last_ = nullptr;
  peers_.erase(peers_.find(std::string_view(*p->id)));
}

DuplicateCache::~DuplicateCache() {
  // The held retransmissions go back in an order set by the calls, not by
  // the map's, which follows the peers' addresses (a Key hashes its Peer
  // pointer): dropping returns buffers to the engine's pools, and a
  // simulated schedule (tests/sim) must replay the same in any process.
  std::vector<std::pair<const Key*, Entry*>> held;
  for (auto& [k, e] : map_)
    if (!e.held.empty()) held.emplace_back(&k, &e);
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) {
    const Key& x = *a.first;
    const Key& y = *b.first;
    return std::tie(*x.peer->id, x.xid, x.prog, x.vers, x.proc, x.digest) <
           std::tie(*y.peer->id, y.xid, y.prog, y.vers, y.proc, y.digest);
  });
  for (auto& [k, e] : held)
    for (ServerCall* c : e->held) c->drop();
}

DuplicateCache::Found DuplicateCache::begin(ServerCall* c, std::vector<uint8_t>* results) {
  Peer* p = peer_for(c->peer_id());
  auto [it, added] = map_.try_emplace(key_of(*c, p));  // one hash, found or entered
  if (added) {
    ++misses_;
    it->second.lru = p->lru.end();
    ++p->in_progress;
    if (map_.size() > max_) evict(p);
    return Found::kNew;
  }
  if (!it->second.done) {
    ++in_progress_;
    it->second.held.push_back(c);
    return Found::kInProgress;
  }
  ++hits_;
  *results = it->second.results;
  p->lru.splice(p->lru.begin(), p->lru, it->second.lru);
  return Found::kDone;
}

void DuplicateCache::finish_entry(Map::iterator it, Peer* p) {
  Entry& e = it->second;
  e.done = true;
  --p->in_progress;
  p->lru.push_front(&it->first);
  e.lru = p->lru.begin();
  set_finished(p, p->finished + 1);
}

void DuplicateCache::done(const ServerCall& c, std::span<const uint8_t> results) {
  Peer* p = peer_for(c.peer_id());
  Key k = key_of(c, p);
  auto it = map_.find(k);
  if (it == map_.end()) {
    // Not begun, or forgotten since: kept all the same, as finished.
    it = map_.emplace(k, Entry{}).first;
    ++p->in_progress;
  }
  Entry& e = it->second;
  e.results.assign(results.begin(), results.end());
  std::vector<ServerCall*> held;
  held.swap(e.held);
  if (!e.done)
    finish_entry(it, p);
  else
    p->lru.splice(p->lru.begin(), p->lru, e.lru);
  if (map_.size() > max_) evict(p);  // may end p
  // After the entry is settled: a reply may fail, never reenter the cache.
  for (ServerCall* h : held) (void)h->reply(results);
}

void DuplicateCache::forget(const ServerCall& c) {
  Peer* p = find_peer(c.peer_id());
  if (p == nullptr) return;
  auto it = map_.find(key_of(c, p));
  if (it == map_.end()) return;
  std::vector<ServerCall*> held;
  held.swap(it->second.held);
  if (it->second.done) {
    p->lru.erase(it->second.lru);
    set_finished(p, p->finished - 1);
  } else {
    --p->in_progress;
  }
  map_.erase(it);
  drop_if_empty(p);
  for (ServerCall* h : held) (void)h->reply_error(AcceptStat::kSystemErr);
}

void DuplicateCache::evict(Peer* inserting) {
  // A finished entry goes, never a call in progress.
  while (map_.size() > max_) {
    Peer* v;
    if (inserting != nullptr && evicts_its_own(inserting->finished, max_, peers_.size())) {
      v = inserting;
      ++evicted_own_;
    } else {
      v = rank_.rbegin()->second;  // the peer holding the most
      if (v->finished == 0) return;  // all in progress
      if (v == inserting)
        ++evicted_own_;
      else
        ++evicted_other_;
    }
    const Key* k = v->lru.back();
    v->lru.pop_back();
    auto it = map_.find(*k);
    TERN_ASSERT(it != map_.end() && it->second.done, "duplicate cache: an LRU entry that is not a finished entry");
    map_.erase(it);
    set_finished(v, v->finished - 1);
    if (v == inserting && v->finished == 0 && v->in_progress == 0) inserting = nullptr;
    drop_if_empty(v);
  }
}

}  // namespace tern::rpc
