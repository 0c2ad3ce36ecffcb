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
// replies). Bounded: past max_entries the least recently used finished entry
// goes. Single-threaded, like the engine it serves; destroy it before the
// engine (held calls are dropped then).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

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
  uint64_t hits() const { return hits_; }
  uint64_t in_progress_hits() const { return in_progress_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Key {
    std::string peer;
    uint32_t xid, prog, vers, proc;
    uint64_t digest;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = std::hash<std::string>()(k.peer) ^ (uint64_t{k.xid} * 0x9E3779B97F4A7C15ull) ^ k.digest;
      return static_cast<size_t>(h ^ (uint64_t{k.prog} << 17) ^ (uint64_t{k.proc} << 7) ^ k.vers);
    }
  };
  struct Entry {
    bool done = false;
    std::vector<uint8_t> results;
    std::list<Key>::iterator lru;
    std::vector<ServerCall*> held;  // retransmissions that came while it was in progress
  };
  static Key key_of(const ServerCall& c);
  void evict();

  size_t max_;
  std::unordered_map<Key, Entry, KeyHash> map_;
  std::list<Key> lru_;  // finished entries, most recent at the front
  uint64_t hits_ = 0, in_progress_ = 0, misses_ = 0;
};

}  // namespace tern::rpc
