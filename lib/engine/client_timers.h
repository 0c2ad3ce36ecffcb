// ClientTimers: the client connections whose timers (call deadlines,
// keepalive, connect timeouts, reconnect attempts; ClientConn::tick) come
// due, earliest first, so that the engine's millisecond tick visits only
// the connections with something due -- not every client connection every
// millisecond, which at a thousand connections cost about one visit per
// call.
//
// A binary min-heap on ClientConn::timer_at, each connection knowing its
// place (ClientConn::timer_pos) so that an earlier time moves it in
// O(log n). The time a connection is filed under is never later than the
// first thing its tick has to do: it is what next_tick() said after its
// last visit, lowered by whatever could bring something earlier since (a
// new call's deadline, calls going in flight, a state change: due()). A
// visit that finds nothing due only files the connection again. A
// connection filed too early costs one visit; one filed too late would
// miss a deadline, so every change that can bring a time earlier calls
// due() (client_call.cc, client_recovery.cc, conn_lifecycle.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tern::rpc {

class ClientConn;

class ClientTimers {
 public:
  static constexpr uint32_t kNotFiled = UINT32_MAX;

  // Something of c's may be due at `at` (ticks): filed by then at the latest.
  void due(ClientConn* c, uint64_t at);
  // c's first time is exactly `at` (0: nothing due): after a visit.
  void file(ClientConn* c, uint64_t at);
  void remove(ClientConn* c);
  // Takes every connection due by `now` off the heap, into *out (in no
  // particular order). Each is filed again after its visit.
  void take_due(uint64_t now, std::vector<ClientConn*>* out);
  // The earliest time filed (0: none).
  uint64_t first() const;
  size_t size() const { return heap_.size(); }

 private:
  void up(uint32_t i);
  void down(uint32_t i);
  void place(uint32_t i, ClientConn* c);

  std::vector<ClientConn*> heap_;
};

}  // namespace tern::rpc
