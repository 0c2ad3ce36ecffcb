// The process's telemetry registry: objects (engines, connections,
// procedures, driver devices) register as *sources* under a kind, and
// exporters turn requests into calls of their providers.
//
// A kind "engine" gives two commands:
//   /tern/engines[,PREFIX]   the ids of every engine source (with PREFIX:
//                            those whose id starts with "PREFIX.")
//   /tern/engine,ID          what engine ID's provider says
// so an engine registers as "engine" id "0", its connections as "conn" ids
// "0.1", "0.2", ..., and "/tern/conns,0" lists the connections of engine 0.
// Built in: "/" (the commands), "/help,CMD" and "/info" (version, pid).
//
// Threads: register and unregister from any thread. Providers run on the
// exporter's thread (the host's poll thread for the Unix socket, DPDK's
// telemetry thread under EAL) with the registry lock held, so once a Source
// is destroyed its provider is not running and never runs again. A provider
// therefore reads only what is safe to read from another thread: Counters and
// Histograms (single writer, relaxed atomics) and fields its owner does not
// change while the source is registered. It must not call into the registry.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "../base/result.h"
#include "reply.h"

namespace tern::telemetry {

using Provider = void (*)(void* ctx, Reply* out);

// A registration; unregisters when destroyed (or reset()). Move-only.
class Source {
 public:
  Source() = default;
  ~Source() { reset(); }
  Source(Source&& o) noexcept : kind_(std::move(o.kind_)), id_(std::move(o.id_)) { o.id_.clear(); }
  Source& operator=(Source&& o) noexcept;
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  bool registered() const { return !id_.empty(); }
  const std::string& kind() const { return kind_; }
  const std::string& id() const { return id_; }
  void reset();

 private:
  friend Result<Source> register_source(std::string_view, std::string_view, Provider, void*);
  std::string kind_, id_;
};

// kind: [a-z0-9_]+; id: printable, no ',' or whitespace; empty id: the
// smallest unused integer of that kind ("0", "1", ...). kInvalidArgument for
// bad names, kBadState when the id is taken.
Result<Source> register_source(std::string_view kind, std::string_view id, Provider fn, void* ctx);

// Runs one command. False when there is no such command; a known command
// with a bad or unknown parameter leaves `out` empty (JSON null).
bool run_command(std::string_view cmd, std::string_view params, Reply* out);
// A whole request, "CMD" or "CMD,PARAMS", answered as DPDK telemetry v2
// does: {"CMD": value}, with null for an unknown command or parameter.
std::string handle_request(std::string_view request);
// Every command, sorted.
std::vector<std::string> commands();

// For an exporter that must register commands one by one (rte_telemetry):
// `fn` is called for every command that exists now, then for each new one
// (with the registry lock held, so it must not call back into the registry).
// One listener per process; nullptr removes it.
using CommandListener = void (*)(void* ctx, const std::string& cmd, const std::string& help);
void set_command_listener(CommandListener fn, void* ctx);

// The greeting both exporters send, and /info: {"version": ..., "pid": ...,
// "max_output_len": ...}.
constexpr size_t kMaxOutputLen = 16384;  // DPDK's own limit, so dpdk-telemetry.py reads whole replies
std::string info_json();

}  // namespace tern::telemetry
