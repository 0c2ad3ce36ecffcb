#include "runtime/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>

#include "base/clock.h"
#include "base/log.h"
#include "mem/arena.h"
#include "runtime/telemetry_export.h"

namespace tern::runtime {

struct Runtime::Launched {
  unsigned lcore;
  std::function<int()> fn;
  // Our own record of the function's result, rather than EAL's: a later
  // launch onto the same idle lcore would overwrite EAL's single per-lcore
  // result. `done` is stored with release after `result`, and the waiter
  // acquires it, so the result is ordered by Tern's own code and not by EAL's
  // (uninstrumented) lcore state.
  int result = 0;
  std::atomic<bool> done{false};

  static int run(void* arg) {
    auto* l = static_cast<Launched*>(arg);
    int r = l->fn();
    l->result = r;
    // After this store the waiter may free *l: touch nothing of it past here.
    l->done.store(true, std::memory_order_release);
    return r;
  }

  // rte_eal_wait_lcore spins (rte_pause) until the lcore is idle. The thread
  // that waits is the main lcore, which on a small machine shares a core with
  // an engine; spinning there steals the engine's cycles (measured on this
  // 2-core VM: tern-perf --eal latency mode went from 129k to 307k round
  // trips/s when the waiting main thread slept instead). Sleep until the
  // function has returned, then let EAL collect the lcore, which by then no
  // longer makes it wait.
  int wait() {
    while (!done.load(std::memory_order_acquire)) usleep(200);
    rte_eal_wait_lcore(lcore);
    return result;
  }
};

namespace {

// EAL can be initialised once per process, and a failed attempt cannot be
// retried (22.11 remembers it already parsed -l and rejects the second one), so
// the process-wide state only moves forward.
enum class EalState { kNone, kOwned, kFailed, kCleanedUp };

struct Process {
  std::mutex mu;
  EalState state = EalState::kNone;
  int live = 0;  // Runtime objects alive (the owner and any attached ones)
};
Process& process() {
  static Process p;
  return p;
}

// What a successful rte_eal_init leaves behind and nothing else sets: the lcore
// count (rte_eal_cpu_init) and an IOVA mode other than "don't care" (chosen
// after argument parsing and the bus scan). Both are zero before init.
bool eal_looks_initialised() { return rte_lcore_count() > 0 && rte_eal_iova_mode() != RTE_IOVA_DC; }

bool is_prefix_of(std::string_view s, std::string_view full, size_t min_len) {
  return s.size() >= min_len && full.substr(0, s.size()) == s;
}

// EAL answers these by printing and calling exit(); getopt_long also accepts
// unambiguous abbreviations (--he) and clustered short options (-vh).
bool makes_eal_exit(std::string_view arg, std::string_view prev) {
  if (arg.size() >= 2 && arg[0] == '-' && arg[1] != '-') {
    std::string_view cluster = arg.substr(1);
    return cluster.find_first_not_of("hv") == std::string_view::npos &&
           cluster.find('h') != std::string_view::npos;
  }
  if (is_prefix_of(arg, "--help", 4)) return true;
  size_t eq = arg.find('=');
  if (eq != std::string_view::npos)
    return is_prefix_of(arg.substr(0, eq), "--log-level", 4) && arg.substr(eq + 1) == "help";
  return arg == "help" && is_prefix_of(prev, "--log-level", 4);
}

Errc errc_from_rte_errno(int e) {
  switch (e) {
    case EINVAL: return Errc::kInvalidArgument;
    case EALREADY: return Errc::kBadState;
    case ENOMEM:
    case EACCES:
    case EAGAIN: return Errc::kNoResources;
    case ENOTSUP: return Errc::kUnsupported;
    case ENODEV: return Errc::kNotFound;
    default: return Errc::kInternal;
  }
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string enabled_lcores() {
  std::string s;
  unsigned i;
  RTE_LCORE_FOREACH(i) {
    if (!s.empty()) s += ',';
    s += std::to_string(i);
  }
  return s.empty() ? "none" : s;
}

}  // namespace

Runtime::Runtime() = default;

Result<std::unique_ptr<Runtime>> Runtime::start(const EalOptions& opt) {
  Process& p = process();
  std::lock_guard<std::mutex> g(p.mu);
  switch (p.state) {
    case EalState::kOwned:
      return make_error(Errc::kBadState,
                        "EAL is already running in this process (a process can start it only once); "
                        "use Runtime::attach()");
    case EalState::kFailed:
      return make_error(Errc::kBadState,
                        "an earlier rte_eal_init in this process failed, and DPDK cannot retry it in the "
                        "same process");
    case EalState::kCleanedUp:
      return make_error(Errc::kBadState,
                        "EAL was started and cleaned up in this process; DPDK cannot initialise it again");
    case EalState::kNone: break;
  }
  // An unknown TERN_LOG_LEVEL is the host's mistake to hear about, not to
  // have ignored (base/log.h).
  if (Status st = log_init(); !st.is_ok()) return st;
  if (eal_looks_initialised())
    return make_error(Errc::kBadState, "EAL was already initialised by the host; use Runtime::attach()");

  if (opt.lcores.empty())
    return make_error(Errc::kInvalidArgument, "EalOptions.lcores is empty (want e.g. \"0-1\")");
  if (opt.huge == HugeMode::kOn && mem::free_hugepages_2m() == 0)
    return make_error(Errc::kNoResources,
                      "HugeMode::kOn but no 2 MiB hugepages are free "
                      "(/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages is 0); reserve some with "
                      "'echo N > /proc/sys/vm/nr_hugepages' or use HugeMode::kAuto/kOff");
  if (opt.huge != HugeMode::kOn && opt.memory_mb == 0)
    return make_error(Errc::kInvalidArgument,
                      "EalOptions.memory_mb is 0 (the --no-huge heap needs some memory)");

  // EAL may keep pointers into argv, so the strings live as long as the process.
  static auto* argv_store = new std::vector<std::string>();
  *argv_store = eal_args(opt);
  for (size_t i = 1; i < argv_store->size(); ++i) {
    if (makes_eal_exit((*argv_store)[i], (*argv_store)[i - 1]))
      return make_error(Errc::kInvalidArgument,
                        "EAL argument '%s' makes EAL print help and exit the process; not passing it",
                        (*argv_store)[i].c_str());
  }
  std::vector<char*> argv;
  for (auto& s : *argv_store) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::string cmdline = join(*argv_store);

  uint64_t t0 = monotonic_ns();
  int rc = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  uint64_t t1 = monotonic_ns();
  if (rc < 0) {
    int e = rte_errno;
    // EALREADY: someone initialised EAL behind our back without it looking
    // initialised yet (concurrently); anything else used up the one attempt.
    if (e != EALREADY) p.state = EalState::kFailed;
    return make_sys_error(errc_from_rte_errno(e), e, "rte_eal_init failed (EAL printed why above); args: %s",
                          cmdline.c_str());
  }
  p.state = EalState::kOwned;
  if (opt.telemetry) export_telemetry_to_eal();
  // rte_eal_init returns how many arguments it consumed; getopt moved the rest
  // (words that are not options) to the end, where nobody reads them.
  if (rc + 1 < static_cast<int>(argv.size() - 1))
    TERN_LOG(kWarn, "runtime", "EAL ignored %d argument(s) that are not EAL options; args: %s",
             static_cast<int>(argv.size() - 1) - (rc + 1), cmdline.c_str());
  TERN_LOG(kInfo, "runtime", "EAL started in %.1f ms (main lcore %u, %u lcores, %s): %s",
           static_cast<double>(t1 - t0) / 1e6, rte_get_main_lcore(), rte_lcore_count(),
           rte_eal_has_hugepages() ? "hugepages" : "no hugepages", cmdline.c_str());

  std::unique_ptr<Runtime> rt(new Runtime());
  rt->owns_eal_ = true;
  p.live++;
  return rt;
}

Result<std::unique_ptr<Runtime>> Runtime::attach() {
  Process& p = process();
  std::lock_guard<std::mutex> g(p.mu);
  switch (p.state) {
    case EalState::kOwned: break;
    case EalState::kFailed:
      return make_error(Errc::kBadState, "cannot attach: rte_eal_init failed earlier in this process");
    case EalState::kCleanedUp:
      return make_error(Errc::kBadState, "cannot attach: EAL was cleaned up in this process");
    case EalState::kNone:
      if (!eal_looks_initialised())
        return make_error(Errc::kBadState,
                          "cannot attach: EAL is not initialised in this process (the host must call "
                          "rte_eal_init first, or use Runtime::start)");
      break;
  }
  export_telemetry_to_eal();
  std::unique_ptr<Runtime> rt(new Runtime());
  p.live++;
  TERN_LOG(kDebug, "runtime", "attached to EAL (main lcore %u, lcores %s)", rte_get_main_lcore(),
           enabled_lcores().c_str());
  return rt;
}

Runtime::~Runtime() {
  request_stop();
  for (const auto& l : launched_) {
    if (l->wait() != 0)
      TERN_LOG(kWarn, "runtime", "function on lcore %u returned %d, never collected by wait_all()", l->lcore,
               l->result);
  }
  launched_.clear();

  Process& p = process();
  std::lock_guard<std::mutex> g(p.mu);
  p.live--;
  if (!owns_eal_) return;
  TERN_REQUIRE(p.live == 0,
               "the Runtime that started EAL is destroyed while %d attached Runtime(s) still exist; "
               "destroy them first",
               p.live);
  int rc = rte_eal_cleanup();
  p.state = EalState::kCleanedUp;
  if (rc != 0)
    TERN_LOG(kWarn, "runtime", "rte_eal_cleanup failed: %s", std::strerror(rte_errno));
  else
    TERN_LOG(kInfo, "runtime", "EAL cleaned up");
}

unsigned Runtime::main_lcore() const { return rte_get_main_lcore(); }

std::vector<unsigned> Runtime::worker_lcores() const {
  std::vector<unsigned> v;
  unsigned i;
  RTE_LCORE_FOREACH_WORKER(i) { v.push_back(i); }
  return v;
}

Status Runtime::launch(unsigned lcore, std::function<int()> fn) {
  if (!fn) return make_error(Errc::kInvalidArgument, "launch on lcore %u: empty function", lcore);
  if (lcore >= RTE_MAX_LCORE || !rte_lcore_is_enabled(lcore))
    return make_error(Errc::kInvalidArgument, "lcore %u is not an EAL lcore (EAL lcores: %s)", lcore,
                      enabled_lcores().c_str());
  if (lcore == rte_get_main_lcore())
    return make_error(Errc::kInvalidArgument,
                      "lcore %u is the main lcore; run the function on the calling thread instead", lcore);
  // Checked first for a clear message; remote_launch re-checks atomically.
  if (rte_eal_get_lcore_state(lcore) != WAIT)
    return make_error(Errc::kBadState, "lcore %u is busy: a function launched earlier is still running",
                      lcore);

  auto l = std::make_unique<Launched>();
  l->lcore = lcore;
  l->fn = std::move(fn);
  int rc = rte_eal_remote_launch(&Launched::run, l.get(), lcore);
  if (rc == -EBUSY)
    return make_error(Errc::kBadState, "lcore %u is busy: a function launched earlier is still running",
                      lcore);
  if (rc != 0)
    return make_sys_error(Errc::kInternal, -rc, "rte_eal_remote_launch onto lcore %u failed", lcore);
  launched_.push_back(std::move(l));
  return Status::ok();
}

int Runtime::wait_all() {
  int first = 0;
  for (const auto& l : launched_) {
    int r = l->wait();
    if (first == 0) first = r;
  }
  launched_.clear();
  return first;
}

}  // namespace tern::runtime
