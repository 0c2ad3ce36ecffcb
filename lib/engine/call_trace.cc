#include "engine/call_trace.h"

#include <unistd.h>

#include <cstdio>

#include "base/json.h"

namespace tern::rpc {

CallTrace::CallTrace(uint32_t every, uint32_t capacity, double ns_per_tick, uint64_t tick0, uint64_t mono_ns0)
    : every_(every == 0 ? 1 : every), ring_(capacity == 0 ? 1 : capacity), ns_per_tick_(ns_per_tick),
      tick0_(tick0), mono0_(mono_ns0) {}

void CallTrace::add(const Record& r) {
  Record& slot = ring_[sampled_ % ring_.size()];
  slot = r;
  // Missing stamps take the previous one: a stage that did not happen (no
  // pull, no invalidation) is 0 long, and a stamp never goes backwards.
  for (int i = 1; i < 5; ++i)
    if (slot.t[i] < slot.t[i - 1]) slot.t[i] = slot.t[i - 1];
  ++sampled_;
}

std::string CallTrace::chrome_json(uint32_t engine_id) const {
  static constexpr const char* kClient[] = {"queue", "wire", "invalidate", "complete"};
  static constexpr const char* kServer[] = {"pull", "wait", "handler", "post"};
  auto us = [&](uint64_t tick) {
    // Signed: a stamp taken before the trace began (tick0) is still placed.
    double ns = static_cast<double>(static_cast<int64_t>(tick - tick0_)) * ns_per_tick_;
    return (static_cast<double>(mono0_) + ns) / 1000.0;
  };
  std::string out;
  JsonWriter w(out);
  w.begin_object().key("traceEvents").begin_array();
  // pid: the process, so that a client's and a server's files opened
  // together are two processes; tid: engine and connection, unique within it.
  const uint64_t pid = static_cast<uint64_t>(getpid());
  char name[64];
  std::snprintf(name, sizeof name, "tern (pid %d)", static_cast<int>(pid));
  w.begin_object().str("name", "process_name").str("ph", "M").u64("pid", pid);
  w.key("args").begin_object().str("name", name).end_object().end_object();
  size_t n = sampled_ < ring_.size() ? sampled_ : ring_.size();
  uint64_t first = sampled_ - n;
  for (uint64_t k = first; k < sampled_; ++k) {
    const Record& r = ring_[k % ring_.size()];
    auto event = [&](const char* nm, uint64_t from, uint64_t to) {
      double ts = us(from);  // from <= to: add() made the stamps non-decreasing
      w.begin_object().str("name", nm).str("cat", r.server ? "server" : "client").str("ph", "X");
      w.f64("ts", ts).f64("dur", static_cast<double>(to - from) * ns_per_tick_ / 1000.0).u64("pid", pid).u64("tid", uint64_t{engine_id} * 1'000'000 + r.conn);
      w.key("args").begin_object().u64("call", k).u64("engine", engine_id).u64("conn", r.conn).u64("xid", r.xid).u64("prog", r.prog).u64("vers", r.vers);
      w.u64("proc", r.proc).str("side", r.server ? "server" : "client").end_object();
      w.end_object();
    };
    event("call", r.t[0], r.t[4]);
    const char* const* names = r.server ? kServer : kClient;
    for (int s = 0; s < 4; ++s) {
      if (r.server && s == 0 && !r.pulled) continue;  // no read chunks: no pull stage
      event(names[s], r.t[s], r.t[s + 1]);
    }
  }
  w.end_array().str("displayTimeUnit", "ns");
  w.key("otherData").begin_object().u64("sampled", sampled_).u64("dropped", dropped()).u64("every", every_);
  w.end_object().end_object();
  return out;
}

}  // namespace tern::rpc
