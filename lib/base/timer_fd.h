// Arming a timerfd (CLOCK_MONOTONIC): how the engine's wait mode and the
// drivers' (pmd/shm, pmd/verbs) end a sleep at a deadline of theirs.
#pragma once

#include <cstdint>

#include "base/result.h"

namespace tern {

// Arms `fd` to fire `ns` nanoseconds from now, or, with `absolute`, when
// CLOCK_MONOTONIC reads `ns`; 0 disarms it. `who` names the caller in the
// error ("shm: timerfd_settime").
Status arm_timer_fd(int fd, uint64_t ns, bool absolute, const char* who);

}  // namespace tern
