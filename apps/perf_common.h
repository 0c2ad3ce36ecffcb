// What tern-perf's modes share: the parsed command line, device specs for
// several engines, the sizes of a sweep, CPU-share metering, and running one
// function per engine on its own pinned thread (or EAL lcore) while the main
// thread reports progress. Results are written by perf_report.h.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "cli_args.h"
#include "runtime/eal.h"

namespace tern::apps {

enum class BulkDir : uint8_t {
  kRead,   // client -> server: the call offers a read chunk, the server pulls it (RDMA READ)
  kWrite,  // server -> client: the call offers a write chunk, the server fills it (RDMA WRITE)
};

struct Options {
  bool server = false;
  bool rpc = false;  // the RPC engine instead of raw driver SENDs
  std::string dev = "shm:path=/tmp/tern-perf.sock";
  std::string mode = "lat";  // lat | bw
  uint32_t size = 32;
  bool size_set = false;
  uint32_t qd = 1;
  double seconds = 2.0;
  uint64_t iters = 0;  // 0: run for `seconds`
  // Warm-up: it ends after `warmup` requests or `warmup_s` seconds, whichever
  // comes first (UINT64_MAX: time only; 0 s: count only). The default bounds
  // it both ways so that large requests do not warm up for minutes.
  uint64_t warmup = 1000;
  double warmup_s = 1.0;
  std::vector<unsigned> lcores;  // empty: do not pin
  bool use_eal = false;
  // Telemetry: the Unix socket to answer /tern/... on (--telemetry PATH, else
  // $TERN_TELEMETRY_SOCK; none when both are empty). Under --eal, DPDK's own
  // telemetry socket is on as well (eal_telemetry()).
  std::string telemetry;
  bool once = false;
  bool quiet = false;
  // Outputs ("-": stdout; the human report then goes to stderr).
  OutFile json, csv;
  std::string plot;        // PNG of the latency distribution, drawn by gnuplot
  bool histogram = false;  // print the latency histogram
  bool engine_stats = false;  // --rpc: the engines' stats_json() on stderr at the end
  bool breakdown = false;     // --rpc: time each stage of every call; print where the round trip goes
  bool wait = false;       // --rpc: sleep in the engine's wait mode when idle
  std::string metrics;     // --metrics PORT|ADDR:PORT|FILE: Prometheus (telemetry/metrics_exporter.h)
  std::string trace;       // --rpc --trace FILE: one call in 64 per engine, stage by stage (Chrome trace JSON)
  bool sweep = false;      // -a: every power-of-two size up to the top one
  // RPC mode.
  uint32_t bulk = 0;  // bytes per call through a chunk; 0: inline echo
  BulkDir bulk_dir = BulkDir::kRead;
  uint32_t engines = 1;
  uint32_t check_every = 64;  // every Nth call (and every warm-up call) is checked byte for byte
  double timeout = 5.0;       // seconds without any completion before giving up
  uint32_t credits = 32;      // server: credits granted per connection
  uint32_t max_bulk = 1u << 20;  // server: largest chunk accepted or filled
  uint32_t clients = 4;          // server: connections per engine at once
  // Set by main, not by a flag: run once when every engine has stopped
  // polling and none has been destroyed yet (run_engines), on one of their
  // threads. --metrics FILE writes its last file there, so that it holds
  // the engines' final counters rather than an exposition without engines.
  std::function<void()> at_end;
};

// The sizes one client run measures: just `top` (--size, or --bulk), or with
// -a every power of two from `smallest` up to `top`, and `top` itself when it
// is not one.
std::vector<uint32_t> sweep_sizes(const Options& o, uint32_t smallest, uint32_t top);

// How much of the wall clock the calling thread had a CPU for, between
// start() and stop(): on a busy machine a poller is preempted, and its
// figures say more about the machine than about Tern.
struct CpuMeter {
  uint64_t wall0 = 0, cpu0 = 0, invol0 = 0;
  double share = -1;       // CPU time / wall time; -1 until stop()
  uint64_t preempted = 0;  // involuntary context switches
  double seconds = 0;      // wall time metered
  void start();
  // Says whether the figures are worth a warning: a share under 90% of a
  // run long enough for the share to mean something.
  bool judged() const { return share >= 0 && seconds >= 0.2; }
  bool busy() const { return judged() && share < 0.9; }
  void stop();
};

// tern-perf's RPC modes (perf_rpc.cc).
int run_rpc_server(const Options& o);
int run_rpc_client(const Options& o);

// The device spec engine i uses: engine 0 the given one, engine i > 0 the same
// with ".i" appended to its path= value (shm:path=/tmp/p.sock -> /tmp/p.sock.1).
Result<std::string> engine_spec(const std::string& spec, uint32_t i);

// The CPU engine i is pinned to, or -1 (unpinned): --lcore lists one CPU per
// engine, or a first CPU from which the others follow (wrapping around the
// CPUs online).
int engine_cpu(const Options& o, uint32_t i);

// --eal: EAL with rte_telemetry on, under a file prefix of its own
// ("tern-perf-PID", so a server and a client on one host each have a socket;
// with --no-shconf, so nothing but that socket is made there); says where on
// stderr unless --quiet. Call after setting extra_args.
void eal_telemetry(const Options& o, runtime::EalOptions* eo);

// Set to make every engine loop and the monitor wind down: a signal, a failed
// engine, an engine that could not be launched.
extern std::atomic<bool> g_stop;

// Runs bodies[i] for every engine, each pinned to engine_cpu(i) on its own
// thread (or launched on that EAL lcore with --eal), and monitor() on the
// calling thread meanwhile. A body returns with its engine still alive (done
// polling); once every body has returned, o.at_end runs, and then each
// thread runs its teardowns[i] (destroys its engine: an engine goes on the
// thread that made it). Returns the first non-zero result of the bodies in
// engine order, else monitor()'s.
int run_engines(const Options& o, std::vector<std::function<int()>> bodies,
                std::vector<std::function<void()>> teardowns, const std::function<int()>& monitor);

}  // namespace tern::apps
