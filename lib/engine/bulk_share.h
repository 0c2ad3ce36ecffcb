// BulkShares: the bulk pool divided among peers, and the queue of server
// calls waiting for it.
//
// A peer is the client as it stays across its reconnects (ServerConn::
// peer_key: the process on pmd/shm, the address on verbs), however many
// connections it opens: a peer that opens 150 connections is one peer with
// 150 connections, not 150 peers. Each holds pool bytes through its server
// calls (read-chunk destinations, write-chunk results, reply staging).
//
// The rules, for a call of peer P that needs `need` bytes:
// - A peer that holds nothing may always take one call's worth: every peer
//   makes progress, whatever the others hold.
// - Its fair share is the pool divided by the peers that hold or wait for
//   memory (P counted), and never more than the pool less the reserve. A
//   call that keeps P within it may take memory whenever it is free.
// - Beyond its share a peer borrows idle memory (work-conserving), but only
//   while no other peer waits, and never the last `reserve` bytes: those
//   are kept so that a peer arriving while another has filled the pool finds
//   memory at once instead of waiting for the hog to let go.
// - Calls that may not take memory now wait in their peer's queue (FIFO
//   per peer). The peers with waiting calls are served by deficit round
//   robin in bytes (each turn adds `quantum` bytes of credit; a call is
//   served when its peer's credit covers it), passing over peers beyond
//   their share while a peer within its share waits. The call chosen waits
//   at the head until the pool has room for it, so that a large call is
//   never starved by small ones.
//
// Costs: taking or returning memory O(1); a grant O(peers waiting). Peers
// are made and forgotten with their connections (the control path); the
// datapath allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/intrusive_list.h"
#include "engine/peer_service.h"
#include "engine/server_call.h"

namespace tern::rpc {

struct PeerShare {
  std::string key;
  uint32_t conns = 0;  // connections attached
  size_t held = 0;     // pool bytes its server calls hold now
  int64_t deficit = 0; // deficit round robin: bytes it may still be granted this turn
  bool active = false; // holds or waits for memory: counted among the peers sharing the pool
  IntrusiveList<SrvCall, &SrvCall::wait_link> waiting;
  ListLink<PeerShare> ring_link;  // on the ring of peers with calls waiting
  // Its place in the order received calls are served in (peer_service.h).
  ServiceQueue svc;
};

class BulkShares {
 public:
  // capacity: the pool's bytes; reserve: what a peer beyond its share may
  // not borrow; quantum: the bytes one round robin turn adds.
  BulkShares(size_t capacity, size_t reserve, size_t quantum);
  ~BulkShares();

  // ---- peers (control path)
  PeerShare* attach(std::string_view key);
  void detach(PeerShare* p);
  size_t peers() const { return peers_.size(); }

  // ---- accounting
  void charge(PeerShare* p, size_t bytes) {
    p->held += bytes;
    update(p);
  }
  void credit(PeerShare* p, size_t bytes) {
    TERN_ASSERT(p->held >= bytes);
    p->held -= bytes;
    update(p);
  }
  // P's fair share now (P counted among the peers sharing the pool).
  size_t share_of(const PeerShare* p) const;
  // Whether a call of p that needs `need` pool bytes may take them now,
  // with `free_bytes` free in the pool. `turn`: the queue chose it (pick());
  // otherwise it just arrived, and waits if others must go first.
  bool may_take(const PeerShare* p, size_t need, size_t free_bytes, bool turn) const;

  // ---- the queue
  // A call of p waits (sc->pool_need says what it needs).
  void enqueue(PeerShare* p, SrvCall* sc);
  // It leaves the queue: served (its peer's credit pays for it) or not
  // (its connection is gone).
  void dequeue(PeerShare* p, SrvCall* sc, bool served);
  bool any_waiting() const { return !ring_.empty(); }
  uint32_t waiters() const { return waiters_; }
  // The peer whose head call is served next (any_waiting() must hold).
  PeerShare* pick();

  size_t capacity() const { return capacity_; }
  size_t reserve() const { return reserve_; }

 private:
  // What a waiting call costs in the round robin: its bytes, and a page for
  // the call itself, so that calls needing no pool memory (waiting for a
  // send buffer) still take turns.
  static size_t cost(const SrvCall* sc) { return sc->pool_need + 4096; }
  bool within_share(const PeerShare* p, size_t need) const {
    return p->held == 0 || p->held + need <= share_of(p);
  }
  // A waiting peer other than `not_p` whose head call keeps it within its share.
  bool eligible_waiter(const PeerShare* not_p) const;
  void update(PeerShare* p) {
    const bool a = p->held > 0 || !p->waiting.empty();
    if (a != p->active) {
      p->active = a;
      if (a) ++active_;
      else --active_;
    }
  }

  size_t capacity_, reserve_, quantum_;
  uint32_t active_ = 0;   // peers that hold or wait for memory
  uint32_t waiters_ = 0;  // calls waiting, all peers
  IntrusiveList<PeerShare, &PeerShare::ring_link> ring_;
  std::unordered_map<std::string, std::unique_ptr<PeerShare>> peers_;
};

}  // namespace tern::rpc
