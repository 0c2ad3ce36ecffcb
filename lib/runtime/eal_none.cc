// The runtime of a build without DPDK (-Deal=disabled): no EAL to start or
// attach to, so no Runtime can exist. start() and attach() say so, and the
// members of Runtime are never reached; hosts run engines on their own
// threads (pin_current_thread, pin.cc).
#include "base/check.h"
#include "base/log.h"
#include "runtime/eal.h"

namespace tern::runtime {

struct Runtime::Launched {};

namespace {
Status no_eal() {
  return make_error(Errc::kUnsupported,
                    "this Tern was built without the EAL runtime (-Deal=disabled): run engines on threads of "
                    "your own (pin_current_thread), or rebuild with DPDK");
}

[[noreturn]] void unreachable(const char* what) {
  detail::check_failed("CHECK", __FILE__, __LINE__, what, "Runtime::%s without EAL: no Runtime can exist", what);
}
}  // namespace

Runtime::Runtime() = default;

// A bad TERN_LOG_LEVEL is reported first, as the EAL build does.
Result<std::unique_ptr<Runtime>> Runtime::start(const EalOptions&) {
  TERN_TRY(log_init());
  return no_eal();
}
Result<std::unique_ptr<Runtime>> Runtime::attach() { return no_eal(); }

// Unreachable: there is no way to construct a Runtime in this build.
Runtime::~Runtime() = default;
unsigned Runtime::main_lcore() const { unreachable("main_lcore"); }
std::vector<unsigned> Runtime::worker_lcores() const { unreachable("worker_lcores"); }
Status Runtime::launch(unsigned, std::function<int()>) { unreachable("launch"); }
int Runtime::wait_all() { unreachable("wait_all"); }

}  // namespace tern::runtime
