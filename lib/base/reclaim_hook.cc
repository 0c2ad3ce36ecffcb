#include "base/reclaim_hook.h"

namespace tern {

namespace detail {
ReclaimHook g_reclaim_hook = nullptr;
}

void set_reclaim_hook(ReclaimHook hook) { detail::g_reclaim_hook = hook; }

}  // namespace tern
