// CallTrace: the stages of a sampled subset of calls, one record per call,
// exported as Chrome trace-event JSON (chrome://tracing and Perfetto read
// it), so that one slow call can be looked at stage by stage where the
// breakdown (breakdown.h) only has each stage's distribution.
//
// EngineOptions::trace_every = N samples one call in N on each side
// (client: calls completed with a reply; server: replies posted), into a
// ring of trace_capacity records: when it is full the oldest is overwritten
// (dropped() counts them), so memory is fixed (~100 B per record) and the
// trace holds the most recent samples. Stamps are the breakdown's, so tracing
// turns the breakdown's stamps on; the sampling costs the datapath one
// counter compare per call on top of it, and nothing when trace_every is 0
// (the hook sits inside the breakdown's own untaken branch).
//
// Engine thread only, like the engine's other calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tern::rpc {

class CallTrace {
 public:
  // Stamps (ticks) of one call; a missing stamp (0) is taken as the one
  // before it, so every stage has a duration >= 0 and stages stay in order.
  struct Record {
    uint64_t conn = 0;
    uint32_t xid = 0, prog = 0, vers = 0, proc = 0;
    bool server = false;
    bool pulled = false;  // server: the call had read chunks (a pull stage)
    // client: t_call, posted, received, fenced, completed
    // server: received, pulled, handler called, reply() called, posted
    uint64_t t[5] = {};
  };

  CallTrace(uint32_t every, uint32_t capacity, double ns_per_tick, uint64_t tick0, uint64_t mono_ns0);

  // True once every `every` calls of a side: one increment and compare.
  bool due(bool server) {
    if (++seen_[server] < every_) return false;
    seen_[server] = 0;
    return true;
  }
  void add(const Record& r);

  uint64_t sampled() const { return sampled_; }
  uint64_t dropped() const { return sampled_ > ring_.size() ? sampled_ - ring_.size() : 0; }

  // {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}:
  // per call an "X" event named "call" spanning it and one "X" event per
  // stage (client: queue, wire, invalidate, complete; server: pull when it
  // had read chunks, wait, handler, post), on pid = the process, tid =
  // engine * 1,000,000 + connection, all carrying args.call (the sample's
  // number), engine, conn, xid, prog, vers, proc.
  // Times are CLOCK_MONOTONIC microseconds, so two engines' traces of one
  // machine line up.
  std::string chrome_json(uint32_t engine_id) const;

 private:
  uint32_t every_;
  uint32_t seen_[2] = {0, 0};
  std::vector<Record> ring_;
  uint64_t sampled_ = 0;  // ever added; the newest is at (sampled_ - 1) % size
  double ns_per_tick_;
  uint64_t tick0_, mono0_;
};

}  // namespace tern::rpc
