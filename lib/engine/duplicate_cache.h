// DuplicateCache: a server-side duplicate request cache, as nfsd keeps one,
// for the upper layer's handlers. A client whose connection was lost sends
// its calls again, with the same xid, on the new connection; a call that is
// not idempotent (create, remove, rename, an append) must not run twice.
// The cache recognises a retransmission by (client, xid, program, version,
// procedure, a digest of the arguments) -- ServerCall::peer_id(), xid(),
// args_digest() -- and hands back the reply it got the first time.
//
//   DuplicateCache drc(4096);
//   void handle_create(void* ctx, ServerCall* c) {
//     std::vector<uint8_t> cached;
//     switch (drc.begin(c, &cached)) {
//       case DuplicateCache::Found::kDone: (void)c->reply(cached); return;  // answered before
//       case DuplicateCache::Found::kInProgress: return;  // the cache answers it with the first copy
//       case DuplicateCache::Found::kNew: break;
//     }
//     ... do it, encode `results` ...
//     drc.done(*c, results);  // before reply(): reply() ends c
//     (void)c->reply(results);
//   }
//
// A retransmission that arrives while its first copy is still being served
// (a handler that answers later) is held by the cache and answered with the
// first copy's results when done() is called; forget() answers it with
// SYSTEM_ERR. Only inline results are kept (bulk results through write
// chunks are not: cache calls whose results fit inline, as nfsd caches small
// replies). Single-threaded, like the engine it serves; destroy it before the
// engine (held calls are dropped then).
//
// Bounded, and partitioned per peer: past max_entries a finished entry goes,
// chosen so that no peer's traffic can push out another peer's entries
// while that peer keeps within its fair share (max_entries / peers holding
// entries). A peer that inserts while it holds its share or more loses its
// own least recently used entry; otherwise the peer holding the most loses
// its least recently used one. A peer alone may use the whole cache (the
// rule only bites when it is full). Calls in progress are never evicted
// (the engine's credits bound them). The peer table holds only peers with
// entries, so it is bounded by the entries.
//
// Peers choose the xids and arguments, so the digest and the table's hash
// are keyed with a random per-process key (SipHash-2-4): a peer cannot aim a
// call at another's entry nor pile its own entries into one hash chain. A
// hit compares the whole key (peer, xid, program, version, procedure,
// digest), never the hash alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine.h"

namespace tern::rpc {

class DuplicateCache {
 public:
  explicit DuplicateCache(size_t max_entries = 4096) : max_(max_entries) {}
  ~DuplicateCache();
  DuplicateCache(const DuplicateCache&) = delete;
  DuplicateCache& operator=(const DuplicateCache&) = delete;

  enum class Found : uint8_t {
    kNew,         // not seen: now entered as in progress; call done() when it is answered
    kInProgress,  // seen and still being served: the cache holds this copy and answers it
    kDone,        // answered before: *results holds the reply's results
  };
  Found begin(ServerCall* c, std::vector<uint8_t>* results);
  // The call's results, kept for a retransmission to find; copies of it
  // held meanwhile are answered with them now.
  void done(const ServerCall& c, std::span<const uint8_t> results);
  // The call failed before it changed anything: forget it (held copies get
  // SYSTEM_ERR).
  void forget(const ServerCall& c);

  size_t size() const { return map_.size(); }
  size_t max_entries() const { return max_; }
  // Peers holding entries now, and how many finished entries one holds.
  size_t peers() const { return peers_.size(); }
  size_t peer_entries(std::string_view peer) const;
  // The longest hash chain of the table (walks every bucket: for tests and
  // diagnostics, not for the datapath).
  size_t longest_chain() const;
  uint64_t hits() const { return hits_; }
  uint64_t in_progress_hits() const { return in_progress_; }
  uint64_t misses() const { return misses_; }
  // Finished entries evicted: those of the peer that was inserting, and
  // those of another peer (the one holding the most).
  uint64_t evicted_own() const { return evicted_own_; }
  uint64_t evicted_other() const { return evicted_other_; }

 private:
  struct Peer;
  struct Key {
    Peer* peer;  // unique per identity while it has entries: equal pointers, equal peers
    uint32_t xid, prog, vers, proc;
    uint64_t digest;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  // base/process_key.h's KeyedStringHash and StringViewEq, declared here
  // because this header is public and those are not.
  struct PeerHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const;
  };
  struct PeerEq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  };
  using Rank = std::set<std::pair<size_t, Peer*>>;
  struct Peer {
    const std::string* id = nullptr;  // its key in peers_
    uint64_t hash = 0;        // keyed hash of the identity, folded into entries' hashes
    size_t finished = 0;      // entries in lru
    size_t in_progress = 0;
    std::list<const Key*> lru;  // finished entries, most recent at the front
    Rank::iterator rank;
  };
  struct Entry {
    bool done = false;
    std::vector<uint8_t> results;
    std::list<const Key*>::iterator lru;
    std::vector<ServerCall*> held;  // retransmissions that came while it was in progress
  };
  using Map = std::unordered_map<Key, Entry, KeyHash>;
  using PeerMap = std::unordered_map<std::string, Peer, PeerHash, PeerEq>;

  Peer* find_peer(std::string_view id);
  Peer* peer_for(std::string_view id);
  Key key_of(const ServerCall& c, Peer* p) const;
  void set_finished(Peer* p, size_t n);
  void drop_if_empty(Peer* p);
  void finish_entry(Map::iterator it, Peer* p);
  void evict(Peer* inserting);

  size_t max_;
  Map map_;
  PeerMap peers_;
  Rank rank_;  // peers by finished entries: the one holding the most last
  Peer* last_ = nullptr;  // the peer of the last call (calls come in runs)
  uint64_t hits_ = 0, in_progress_ = 0, misses_ = 0, evicted_own_ = 0, evicted_other_ = 0;
};

}  // namespace tern::rpc
