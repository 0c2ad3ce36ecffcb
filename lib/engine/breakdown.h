// Breakdown: where a connection's round trips go, stage by stage, into one
// fixed-memory histogram per stage (EngineOptions::breakdown; tern-perf
// --breakdown prints it). Off by default: then a connection has none, and
// each stage costs the datapath one predictable branch on a null pointer.
// On, it costs one TSC reading per stage (~14 ns on this project's VMs) and
// ~8 KiB of histogram per stage per connection.
//
// Client stages of a call, each from the end of the previous one:
//   queue       call() accepted it -> its Send posted (backlog, credits,
//               registration)
//   wire        Send posted -> its reply received (the peer's whole share:
//               transmission both ways and the server)
//   invalidate  reply received -> its registrations fenced (LOCAL_INV
//               completed; 0 when the server invalidated them or there
//               were none)
//   complete    fenced -> its callback called
// plus, not on the round trip's path:
//   send_done   Send posted -> its completion seen (with batched signaling,
//               when a later signaled completion walked past it)
// Server stages of a call:
//   pull        received -> its read chunks pulled (RDMA READ; calls
//               without read chunks are not counted)
//   wait        received or pulled -> its handler called (memory, queueing)
//   handler     handler called -> reply() called
//   post        reply() -> its reply posted (room in the send queue)
// Both sides also keep `total`: the sum, as the connection's rtt figure.
#pragma once

#include <cstdint>
#include <memory>

#include "base/histogram.h"
#include "engine/call_trace.h"

namespace tern::rpc {

enum class Stage : uint8_t {
  // client
  kQueue,
  kWire,
  kInvalidate,
  kComplete,
  kSendDone,
  // server
  kPull,
  kWait,
  kHandler,
  kPost,
  // both
  kTotal,
  kCount,
};

inline const char* stage_name(Stage s) {
  switch (s) {
    case Stage::kQueue: return "queue";
    case Stage::kWire: return "wire";
    case Stage::kInvalidate: return "invalidate";
    case Stage::kComplete: return "complete";
    case Stage::kSendDone: return "send_done";
    case Stage::kPull: return "pull";
    case Stage::kWait: return "wait";
    case Stage::kHandler: return "handler";
    case Stage::kPost: return "post";
    case Stage::kTotal: return "total";
    case Stage::kCount: break;
  }
  return "?";
}

// The stages a side reports, in round-trip order.
inline constexpr Stage kClientStages[] = {Stage::kQueue, Stage::kWire, Stage::kInvalidate, Stage::kComplete,
                                          Stage::kTotal, Stage::kSendDone};
inline constexpr Stage kServerStages[] = {Stage::kPull, Stage::kWait, Stage::kHandler, Stage::kPost, Stage::kTotal};

struct Breakdown {
  explicit Breakdown(double ns_per_tick) : ns_per_tick_(ns_per_tick) {}
  // The interval [from, to] in ticks; nothing when either end is missing.
  void record(Stage s, uint64_t from, uint64_t to) {
    if (from == 0 || to < from) return;
    h[static_cast<int>(s)].record(static_cast<uint64_t>(static_cast<double>(to - from) * ns_per_tick_));
  }
  const Histogram& of(Stage s) const { return h[static_cast<int>(s)]; }
  // The engine's sampled per-call trace (EngineOptions::trace_every), or
  // null: the one extra branch a call pays with the breakdown on.
  CallTrace* trace = nullptr;
  void merge(const Breakdown& o) {
    for (int i = 0; i < static_cast<int>(Stage::kCount); ++i) h[i].merge(o.h[i]);
  }

 private:
  double ns_per_tick_;
  Histogram h[static_cast<int>(Stage::kCount)];
};

}  // namespace tern::rpc
