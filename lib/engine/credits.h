// Credits (RFC 8166 §3.3.1): how many calls a client may have outstanding on
// a connection, which the server grants in every reply so that it never
// receives more calls than it has receive buffers posted for.
//
// Client side, CreditWindow: a connection starts with one credit (the RFC's
// default until the first reply), follows each reply's grant (at least one,
// never more than it asked for), and sends a call only while fewer than the
// grant are outstanding; the rest wait in the backlog.
//
// Server side, GrantPolicy: the grants of all connections drawing on one
// pool of receive buffers (a device's shared receive queue, or one
// connection's own receive queue) never add up to more buffers than the pool
// has. Each connection holds at least one credit from the moment it is
// admitted (a connection that cannot be given one is refused). Grants follow
// load: a call's own credit field says how many the client would like (RFC
// 8166 §3.3.1; a Tern client, like Linux's, asks for its whole window, since
// a grant can only travel in a reply and a server may hold calls), and the
// next reply grants that much, up to the per-connection maximum, while the
// pool has credits to spare.
//
// Fairly among peers (a peer: the client as it stays across reconnects,
// however many connections it opens). A peer's fair share is the pool over
// the peers holding credits; within it a peer's connections grow whenever
// the pool has room. Beyond it a peer borrows idle credits
// (work-conserving: alone it may use the pool) only while no other peer
// wants credits it was not granted, and never the last lend reserve, which
// stays for a peer that arrives while another holds the rest: that peer is
// granted at once, and the holder's grants come down as it is answered. So
// one peer asking for 0xffffffff on many connections holds no more than its
// share while others want credits.
//
// Grants only come down in replies, and by one per reply: the client may
// still have the old grant's worth of calls in flight when it reads the new
// one, and only a decrement of one keeps that within the new grant (its
// reply's own call is already here). That is also why a server can check
// every arriving call strictly: a client with more calls outstanding than
// its grant broke the protocol. A grant falls when the client asks for
// less, and when another peer wants credits and its peer holds more than its
// share. Credits beyond a peer's share (borrowed), and every grant while the
// pool is out, follow use: the goal is at most twice the calls the
// connection has outstanding at the reply, so a busy connection doubles and
// a quiet one comes down, and a connection that goes quiet keeps about twice
// what it last used (an idle one cannot be lowered: no reply goes to it).
// Within its peer's share a grant follows the client's request, not its use:
// a server that answers each call as it arrives sees one outstanding however
// deep the client's backlog, and a Tern client's request already says what
// it has in flight and waiting (a Linux client's asks for its maximum,
// bounded then by the share). What idle connections may hold is bounded
// instead by how they got it: within their peer's share, or borrowed while
// nobody else wanted and never the lend reserve. And so that idle connections cannot crowd out new ones the
// pool keeps one credit in reserve for every connection that may still come
// (up to EngineOptions::max_connections); grants grow only from what is left.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/check.h"


namespace tern::rpc {

class CreditWindow {
 public:
  explicit CreditWindow(uint32_t max) : max_(max) {}
  uint32_t granted() const { return granted_; }
  uint32_t in_flight() const { return in_flight_; }
  uint32_t max() const { return max_; }
  bool can_send() const { return in_flight_ < granted_; }
  void sent() { ++in_flight_; }
  // A reply (or the loss of the connection) ended a call in flight.
  void answered() {
    if (in_flight_ > 0) --in_flight_;
  }
  // A reply's credit value: at least one, never more than we asked for.
  void grant(uint32_t g) { granted_ = std::clamp<uint32_t>(g, 1, max_); }
  // A new connection (or a reconnect) starts over.
  void reset() { granted_ = 1, in_flight_ = 0; }

 private:
  uint32_t max_;
  uint32_t granted_ = 1;  // RFC 8166: one until the server says more
  uint32_t in_flight_ = 0;
};

// One peer's part of a GrantPolicy: every connection of one client as it
// stays across its reconnects (ServerConn::peer_key: the process on
// pmd/shm, the address on verbs), however many it opens.
struct PeerCredits {
  std::string key;
  uint32_t conns = 0;   // its admitted connections
  uint32_t held = 0;    // the credits granted to them, all together
  uint32_t hungry = 0;  // of them, those whose last grant was less than they asked for
};

// One connection's share of a GrantPolicy.
struct ConnGrant {
  uint32_t granted = 0;    // the grant in the last reply (1 before any)
  uint32_t unreplied = 0;  // calls received and not yet answered
  bool admitted = false;
  bool hungry = false;     // its last grant was less than it asked for
  PeerCredits* peer = nullptr;
};

class GrantPolicy {
 public:
  // `buffers`: receive buffers the pool holds now; `max_per_conn`: the most
  // one connection is granted. The pool may grow later (resize), up to
  // `capacity` (0: what it holds now).
  GrantPolicy(uint32_t buffers, uint32_t max_per_conn, uint32_t capacity = 0)
      : free_(buffers), total_(buffers), max_(max_per_conn), capacity_(std::max(capacity, buffers)) {
    reshare();
  }
  ~GrantPolicy() = default;
  GrantPolicy(const GrantPolicy&) = delete;
  GrantPolicy& operator=(const GrantPolicy&) = delete;

  uint32_t total() const { return total_; }
  uint32_t free() const { return free_; }
  uint32_t max_per_conn() const { return max_; }
  uint32_t capacity() const { return capacity_; }

  // Keep one credit for each of up to `n` connections not yet admitted.
  void set_reserve(uint32_t n) {
    reserve_ = std::min(n, capacity_);
    reshare();
  }
  // Credits a peer beyond its fair share may not borrow: they stay for
  // peers within theirs, so that one arriving while another holds the rest
  // is granted at once (the holder's grants can fall only as it is answered).
  void set_lend_reserve(uint32_t n) {
    lend_reserve_ = n;
    reshare();
  }
  uint32_t lend_reserve() const { return lend_reserve_; }

  // A new connection of `peer` takes one credit. False: the pool cannot give
  // one, and the connection must be refused.
  bool admit(ConnGrant* c, std::string_view peer = {}) {
    if (free_ == 0) return false;
    --free_;
    ++admitted_;
    c->granted = 1;
    c->unreplied = 0;
    c->admitted = true;
    c->hungry = false;
    auto [it, made] = peers_.try_emplace(std::string(peer));
    if (made) {
      it->second = std::make_unique<PeerCredits>();
      it->second->key = it->first;
    }
    c->peer = it->second.get();
    ++c->peer->conns;
    ++c->peer->held;
    reshare();
    return true;
  }
  // The connection is gone: its credits go back.
  void leave(ConnGrant* c) {
    if (!c->admitted) return;
    free_ += c->granted;
    --admitted_;
    PeerCredits* p = c->peer;
    set_hungry(c, false);
    p->held -= c->granted;
    c->granted = 0;
    c->admitted = false;
    c->peer = nullptr;
    if (--p->conns == 0) {
      const std::string key = p->key;  // not a reference into the node it erases
      peers_.erase(key);
    }
    reshare();
  }
  // Credits a grant or a reservation may still take, the reserve for
  // connections yet to come kept back: what is free now and what the pool
  // can still grow by.
  uint32_t spare() const {
    const uint32_t keep = keep_for_newcomers();
    const uint32_t room = free_ + (capacity_ - total_);
    return room > keep ? room - keep : 0;
  }
  // The credits the peers share: the pool at its full size, less the first
  // credits kept for connections yet to come.
  uint32_t shared() const {
    const uint32_t keep = keep_for_newcomers();
    return capacity_ > keep ? capacity_ - keep : 0;
  }
  // p's fair share: the shared credits over the peers holding any (each
  // holds one per connection at least), never more than they less the lend
  // reserve, never less than one per connection it has.
  uint32_t share_of(const PeerCredits* p) const { return std::max(share_, p->conns); }
  // Whether a peer other than p wants credits it was not granted.
  bool contested_for(const PeerCredits* p) const { return wanting_ > (p->hungry > 0 ? 1u : 0u); }
  uint32_t peers() const { return static_cast<uint32_t>(peers_.size()); }
  uint32_t peers_wanting() const { return wanting_; }
  const PeerCredits* peer(std::string_view key) const {
    auto it = peers_.find(std::string(key));
    return it == peers_.end() ? nullptr : it->second.get();
  }

  // A call arrived. False: the client has more outstanding than it was
  // granted (a protocol error; the call is not counted).
  bool on_call(ConnGrant* c) {
    if (c->unreplied + 1 > c->granted) return false;
    ++c->unreplied;
    return true;
  }
  // The grant to send in a reply to one of c's calls (still counted in
  // c->unreplied), whose credit field asked for `wanted`; recorded as c's
  // grant. Grows only into buffers that are posted (free now): the caller
  // grows the pool first when it can.
  //
  // The goal is what the client asks for (at most max_per_conn) -- and,
  // while c's peer is beyond its fair share or the pool is out, no more
  // than twice the calls c has outstanding: a busy connection doubles, a
  // quiet one comes down to what it uses. Growth toward the goal: within
  // the peer's fair share whenever the pool has it; beyond the share
  // (borrowed) only while no other peer wants credits, and never the lend
  // reserve. Fall, by one
  // per reply (the client may have the old grant's calls in flight, the
  // head of this file says why one): when the grant is above the goal, or
  // another peer wants credits and c's peer holds more than its share.
  uint32_t grant_for_reply(ConnGrant* c, uint32_t wanted) {
    // A connection that left (drained) holds nothing, but a call it received
    // after its loss was seen -- a receive completed before the QP's error,
    // polled late -- can still be answered by its handler: the reply cannot
    // arrive, and must not touch the pool's counts or a peer that is gone.
    if (TERN_UNLIKELY(!c->admitted)) return 1;
    const uint32_t target = std::clamp<uint32_t>(wanted, 1, max_);
    PeerCredits* p = c->peer;
    const uint32_t sp = spare();
    const uint32_t share = share_of(p);
    const bool over = p->held > share;
    // The common case, a connection granted what it asks for, its peer
    // within its share and the pool not out: nothing changes.
    if (TERN_LIKELY(target == c->granted && !over && sp != 0 && !c->hungry)) return c->granted;
    return regrant(c, target, p, sp, share, over);
  }
  // A call was answered (its reply posted) or dropped unanswered.
  void on_replied(ConnGrant* c) {
    if (c->unreplied > 0) --c->unreplied;
  }
  // A client call in flight reserves one buffer for its reply: the pool is
  // shared with the server's grants when an engine both serves and calls on
  // one device. False: none posted and spare now (grow, or the call waits).
  bool reserve() {
    if (spare() == 0 || free_ == 0) return false;
    --free_;
    return true;
  }
  void unreserve() { ++free_; }
  // The pool holds `buffers` now (it grew, or could not be filled).
  void resize(uint32_t buffers) {
    if (buffers >= total_) free_ += buffers - total_;
    else free_ -= std::min(free_, total_ - buffers);
    total_ = buffers;
    capacity_ = std::max(capacity_, buffers);
    reshare();
  }

 private:
  // grant_for_reply's uncommon case: the grant moves. Out of line, so that
  // the common case inlined into the reply's path saves no registers.
  [[gnu::noinline]] uint32_t regrant(ConnGrant* c, uint32_t target, PeerCredits* p, uint32_t sp, uint32_t share,
                                     bool over) {
    const bool contested = contested_for(p);
    uint32_t goal = target;
    if (over || sp == 0) goal = std::min(goal, std::max<uint32_t>(2 * c->unreplied, 1));
    const uint32_t can = std::min(sp, free_);
    uint32_t add = 0;
    if (goal > c->granted && can > 0) {
      const uint32_t within = share > p->held ? share - p->held : 0;
      const uint32_t lend = !contested && can > lend_reserve_ ? can - lend_reserve_ : 0;
      add = std::min({goal - c->granted, can, std::max(within, lend)});
    }
    if (add > 0) {
      c->granted += add;
      p->held += add;
      free_ -= add;
    } else if (c->granted > 1 && (goal < c->granted || (contested && over))) {
      --c->granted;
      --p->held;
      ++free_;
    }
    set_hungry(c, target > c->granted);
    return c->granted;
  }
  uint32_t keep_for_newcomers() const { return reserve_ > admitted_ ? reserve_ - admitted_ : 0; }
  // The fair share (share_of without the floor of one credit per
  // connection): the shared credits over the peers holding any, never more
  // than they less the lend reserve. It changes only on the control path
  // (a connection admitted or gone, the pool resized, a reserve set).
  void reshare() {
    const uint32_t n = std::max<uint32_t>(1, static_cast<uint32_t>(peers_.size()));
    const uint32_t all = shared();
    const uint32_t cap = all > lend_reserve_ ? all - lend_reserve_ : 0;
    share_ = std::min(all / n, cap);
  }
  void set_hungry(ConnGrant* c, bool h) {
    if (h == c->hungry) return;
    c->hungry = h;
    PeerCredits* p = c->peer;
    if (h) {
      if (p->hungry++ == 0) ++wanting_;
    } else {
      if (--p->hungry == 0) --wanting_;
    }
  }

  uint32_t free_, total_, max_, capacity_;
  uint32_t reserve_ = 0, admitted_ = 0, lend_reserve_ = 0;
  uint32_t wanting_ = 0;  // peers with a connection that wants more than it holds
  uint32_t share_ = 0;    // reshare()
  std::unordered_map<std::string, std::unique_ptr<PeerCredits>> peers_;
};

}  // namespace tern::rpc
