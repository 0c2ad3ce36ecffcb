// The EAL-backed runtime: starts DPDK's EAL (or attaches to one the host
// already started), launches one engine function per lcore, pinned, and stops
// them cleanly. Engines themselves never need it: an SPDK-like host with no
// EAL at all just calls the engine's poll() from a thread it owns.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"

namespace tern::runtime {

enum class HugeMode : uint8_t {
  kAuto,  // hugepages when free ones exist (EAL --in-memory), else --no-huge
  kOff,   // always --no-huge
  kOn,    // require hugepages
};

struct EalOptions {
  std::string lcores = "0-1";  // EAL -l list
  HugeMode huge = HugeMode::kAuto;
  size_t memory_mb = 64;       // -m with --no-huge (EAL heap; Tern's arenas are separate)
  std::string file_prefix;     // empty: --no-shconf (several primaries on one host)
  std::string log_level = "lib.eal:warning";
  std::vector<std::string> extra_args;
};

// The EAL argument vector EalOptions produces on this machine (for logs/tests).
std::vector<std::string> eal_args(const EalOptions& opt, const char* prog = "tern");

class Runtime {
 public:
  // Calls rte_eal_init; fails cleanly (no exit()) if EAL refuses.
  static Result<std::unique_ptr<Runtime>> start(const EalOptions& opt);
  // The host already ran rte_eal_init (SPDK-like targets): use its lcores, and
  // leave rte_eal_cleanup to the host.
  static Result<std::unique_ptr<Runtime>> attach();
  ~Runtime();  // waits for launched lcores; rte_eal_cleanup if we started EAL

  unsigned main_lcore() const;
  std::vector<unsigned> worker_lcores() const;

  // Runs fn on a worker lcore (pinned by EAL). fn returns 0 on success.
  Status launch(unsigned lcore, std::function<int()> fn);
  // Waits for every launched function; returns the first non-zero result (or 0).
  int wait_all();

  // Cooperative stop flag for engine loops.
  void request_stop() { stop_.store(true, std::memory_order_release); }
  bool stop_requested() const { return stop_.load(std::memory_order_acquire); }

 private:
  Runtime() = default;
  bool owns_eal_ = false;
  std::atomic<bool> stop_{false};
  struct Launched;
  std::vector<std::unique_ptr<Launched>> launched_;
};

// For hosts without EAL: pins the calling thread to `cpu`.
Status pin_current_thread(unsigned cpu);

}  // namespace tern::runtime
