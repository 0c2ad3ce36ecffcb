// PeerService: the order in which a server engine serves received calls when
// more than one peer has calls waiting (docs/engine.md, "Service order").
//
// A peer is the client as it stays across its reconnects (bulk_share.h): one
// process on pmd/shm, one address on verbs. poll() takes up to 32 receive
// completions per device per pass; handled in arrival order, a peer keeping
// many calls in flight puts all of them ahead of another peer's one call, and
// that call's reply leaves only after every one of them (measured: a good
// client's echo p99 14.6x its solo figure under a 16-deep flood).
//
// The rule, per poll pass: when the receives in hand (this pass's and those
// held from earlier passes) belong to one peer, all of them are served now,
// in order -- nothing is held back, so a lone peer pays nothing. When they
// belong to several, this pass's turn is chosen by who was served last:
//  - when some of those peers waited (were not served in the last turn or
//    batch) and others were served there, the turn is one round of the
//    peers that waited, `quantum` calls each, and ends: the peers served
//    last sit this pass out and have the next turn (they waited then). So
//    the pass that serves a newly arrived peer's call ends right after it
//    instead of serving another peer's call behind it -- which a thread
//    that polls the client after the server's pass pays for in full
//    (measured: echo p99 4.8x its solo figure under a 16-deep flood with
//    one flood call served next to the echo);
//  - otherwise (all waited, or all were served last) they are served in
//    rounds, `quantum` calls per peer per round in a fixed ring order, for
//    as long as at least two peers still have calls; what is left of the
//    last busy peer is held for the next pass.
// A peer with calls is thus served at least every other turn, and a turn
// serves at most one round of the others before a peer that waited. Each
// peer's calls keep their arrival order (a connection's calls are never
// reordered). The engine says which peer a batch served outside this
// order (one peer's receives, served at once) belonged to (plan()'s
// arguments): that peer was served last.
//
// A held receive is a completed Wc with the connection it arrived on (QP
// numbers and connection slots are reused, so it is never looked up again):
// the engine takes a connection's held receives out before the connection is
// reclaimed (release()). Storage is one entry per receive buffer, indexed by
// the buffer's index and made on the first hold, so holding allocates nothing
// per receive and can never run out: a buffer is held at most once.
#pragma once

#include <cstdint>
#include <memory>

#include "base/intrusive_list.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

class ConnBase;

// A peer's place in the service order (one per PeerShare): its held
// receives, oldest first.
struct ServiceQueue {
  uint32_t head = UINT32_MAX, tail = UINT32_MAX;
  uint32_t count = 0;
  uint64_t served = 0;          // the turn (PeerService::plan) it was last served in
  ListLink<ServiceQueue> link;  // on the ring of peers with receives held
};

class PeerService {
 public:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Held {
    rdma::Wc wc;
    ConnBase* conn = nullptr;
    uint32_t next = kNil;
  };

  // capacity: the receive buffers there can ever be (their indices are
  // below it); quantum: calls per peer per round.
  PeerService(uint32_t capacity, uint32_t quantum);
  ~PeerService();
  PeerService(const PeerService&) = delete;
  PeerService& operator=(const PeerService&) = delete;

  // The buffer count, once the engine knows it (before anything is held).
  void set_capacity(uint32_t capacity);

  bool empty() const { return held_ == 0; }
  uint32_t held() const { return held_; }
  // Peers with receives held.
  size_t peers() const { return ring_.size(); }

  // Receive buffer `index` (completed, now held by the engine) waits in
  // peer p's queue. False when index is out of range (then the caller
  // serves it at once).
  bool hold(ServiceQueue* p, uint32_t index, const rdma::Wc& wc, ConnBase* c);
  // This pass's turn: the held receives to serve now, in order (their
  // buffer indices in order()[0..n)); they leave their queues. Returns n.
  // batch_since: receives were served outside this order (a batch of one
  // peer's, all at once) after the last turn -- the latest of them of peer
  // `batch_peer` (nullptr: none known), which was then served last.
  uint32_t plan(bool batch_since, const ServiceQueue* batch_peer);
  // Every held receive of connection c (of all, with c == nullptr), oldest
  // first, in order()[0..n); they leave their queues. Returns n.
  uint32_t release(const ConnBase* c);
  const uint32_t* order() const { return order_.get(); }
  // A connection with a receive held (!empty()).
  ConnBase* any_conn() const { return held_at_[ring_.front()->head].conn; }
  const Held& at(uint32_t index) const { return held_at_[index]; }

 private:
  uint32_t pop(ServiceQueue* p);

  uint32_t capacity_, quantum_;
  uint32_t held_ = 0;
  uint64_t turn_ = 0;  // plans made (a turn's number; 0: none yet)
  std::unique_ptr<Held[]> held_at_;  // by buffer index, made on first hold
  std::unique_ptr<uint32_t[]> order_;  // what plan() or release() chose
  IntrusiveList<ServiceQueue, &ServiceQueue::link> ring_;
};

}  // namespace tern::rpc
