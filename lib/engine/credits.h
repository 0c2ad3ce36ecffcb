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
// next reply grants that much, up to
// the per-connection maximum, while the pool has credits to spare. A grant
// above what the client asks for, or held while the pool runs out and the
// client uses less than half of it, falls by one per reply: the client may
// still have the old grant's worth of calls in flight when it reads the new
// one, and only a decrement of one keeps that within the new grant (its
// reply's own call is already here). That is also why a server can check
// every arriving call strictly: a client with more calls outstanding than
// its grant broke the protocol. An idle connection keeps the grant it has
// (only a reply can lower it), so that idle connections cannot crowd out
// new ones the pool keeps one credit in reserve for every connection that
// may still come (up to EngineOptions::max_connections), and grants grow
// only from what is left.
#pragma once

#include <algorithm>
#include <cstdint>

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

// One connection's share of a GrantPolicy.
struct ConnGrant {
  uint32_t granted = 0;    // the grant in the last reply (1 before any)
  uint32_t unreplied = 0;  // calls received and not yet answered
  bool admitted = false;
};

class GrantPolicy {
 public:
  // `buffers`: receive buffers the pool holds now; `max_per_conn`: the most
  // one connection is granted. The pool may grow later (resize), up to
  // `capacity` (0: what it holds now).
  GrantPolicy(uint32_t buffers, uint32_t max_per_conn, uint32_t capacity = 0)
      : free_(buffers), total_(buffers), max_(max_per_conn), capacity_(std::max(capacity, buffers)) {}

  uint32_t total() const { return total_; }
  uint32_t free() const { return free_; }
  uint32_t max_per_conn() const { return max_; }
  uint32_t capacity() const { return capacity_; }

  // Keep one credit for each of up to `n` connections not yet admitted.
  void set_reserve(uint32_t n) { reserve_ = std::min(n, capacity_); }
  // A new connection takes one credit. False: the pool cannot give one, and
  // the connection must be refused.
  bool admit(ConnGrant* c) {
    if (free_ == 0) return false;
    --free_;
    ++admitted_;
    c->granted = 1;
    c->unreplied = 0;
    c->admitted = true;
    return true;
  }
  // The connection is gone: its credits go back.
  void leave(ConnGrant* c) {
    if (!c->admitted) return;
    free_ += c->granted;
    --admitted_;
    c->granted = 0;
    c->admitted = false;
  }
  // Credits a grant or a reservation may still take, the reserve for
  // connections yet to come kept back: what is free now and what the pool
  // can still grow by.
  uint32_t spare() const {
    const uint32_t keep = reserve_ > admitted_ ? reserve_ - admitted_ : 0;
    const uint32_t room = free_ + (capacity_ - total_);
    return room > keep ? room - keep : 0;
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
  uint32_t grant_for_reply(ConnGrant* c, uint32_t wanted) {
    const uint32_t target = std::clamp<uint32_t>(wanted, 1, max_);
    const uint32_t sp = spare();
    const uint32_t can = std::min(sp, free_);
    if (target > c->granted && can > 0) {
      uint32_t add = std::min(target - c->granted, can);
      c->granted += add;
      free_ -= add;
    } else if (c->granted > 1 && (target < c->granted || (sp == 0 && c->unreplied * 2 < c->granted))) {
      --c->granted;
      ++free_;
    }
    return c->granted;
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
  }

 private:
  uint32_t free_, total_, max_, capacity_;
  uint32_t reserve_ = 0, admitted_ = 0;
};

}  // namespace tern::rpc
