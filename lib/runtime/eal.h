// The EAL-backed runtime: starts DPDK's EAL (or attaches to one the host
// already started), launches one engine function per lcore, pinned, and stops
// them cleanly. Engines themselves never need it: an SPDK-like host with no
// EAL at all just calls the engine's poll() from a thread it owns.
//
// DPDK allows one rte_eal_init per process, and a failed one cannot be retried
// (22.11 keeps option-parsing state across attempts), so start() succeeds at
// most once per process; every later start() fails with Errc::kBadState.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../base/result.h"

namespace tern::runtime {

enum class HugeMode : uint8_t {
  kAuto,  // hugepages when free ones exist (EAL --in-memory), else --no-huge
  kOff,   // always --no-huge
  kOn,    // require hugepages
};

struct EalOptions {
  std::string lcores = "0-1";  // EAL -l list
  HugeMode huge = HugeMode::kAuto;
  size_t memory_mb = 64;                      // -m with --no-huge (EAL heap; Tern's arenas are separate)
  std::string file_prefix;                    // empty: --no-shconf (several primaries on one host)
  std::string log_level = "lib.eal:warning";  // empty: EAL's default
  // DPDK's telemetry socket ($RUNTIME_DIRECTORY or /var/run, then
  // dpdk/<file_prefix or "rte">/dpdk_telemetry.v2), with Tern's commands
  // (runtime/telemetry_export.h): dpdk-telemetry.py -f <file_prefix>. Two
  // processes need different file prefixes for both to have one.
  bool telemetry = false;
  // Appended last. Options that make EAL print help and exit(), such as
  // --help, are refused by start() so that it never ends the process.
  std::vector<std::string> extra_args;
};

// The EAL argument vector EalOptions produces on this machine (for logs/tests).
// kAuto reads the free hugepage count now; kOn yields --in-memory even when
// none are free (start() is what fails then).
std::vector<std::string> eal_args(const EalOptions& opt, const char* prog = "tern");

// Not thread-safe: use a Runtime from one control thread, normally the EAL
// main lcore, which is the thread that called start().
class Runtime {
 public:
  // Calls rte_eal_init; fails cleanly (no exit()) if EAL refuses.
  static Result<std::unique_ptr<Runtime>> start(const EalOptions& opt);
  // The host already ran rte_eal_init (SPDK-like targets), or start() did in
  // this process: use its lcores, and leave rte_eal_cleanup to the owner.
  // Tern's telemetry commands are registered with the host's rte_telemetry.
  // DPDK 22.11 exposes no "initialised" flag, so a host's EAL is recognised by
  // what only a successful rte_eal_init sets (lcores detected, IOVA mode
  // chosen); a host that ran rte_eal_cleanup cannot be told apart, and
  // attaching after that is the host's mistake.
  static Result<std::unique_ptr<Runtime>> attach();
  // Requests stop and waits for launched lcores; rte_eal_cleanup if this
  // Runtime started EAL. Rings, stacks and mempools must be freed before that
  // (EAL crashes otherwise), and Runtimes attached to this one destroyed
  // first (checked).
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  bool owns_eal() const { return owns_eal_; }
  unsigned main_lcore() const;
  std::vector<unsigned> worker_lcores() const;

  // Runs fn on an idle worker lcore (pinned by EAL). fn returns 0 on success
  // and should return once stop_requested() is true.
  Status launch(unsigned lcore, std::function<int()> fn);
  // Waits for every function this Runtime launched; returns the first
  // non-zero result in launch order (or 0).
  int wait_all();

  // Cooperative stop flag for engine loops.
  void request_stop() { stop_.store(true, std::memory_order_release); }
  bool stop_requested() const { return stop_.load(std::memory_order_acquire); }

 private:
  Runtime();
  bool owns_eal_ = false;
  std::atomic<bool> stop_{false};
  struct Launched;
  std::vector<std::unique_ptr<Launched>> launched_;
};

// For hosts without EAL: pins the calling thread to `cpu`.
Status pin_current_thread(unsigned cpu);

}  // namespace tern::runtime
