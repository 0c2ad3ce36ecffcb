#include "base/timer_fd.h"

#include <sys/timerfd.h>

#include <cerrno>
#include <ctime>

namespace tern {

Status arm_timer_fd(int fd, uint64_t ns, bool absolute, const char* who) {
  itimerspec its{};  // all zero: disarmed
  its.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
  its.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
  if (timerfd_settime(fd, absolute ? TFD_TIMER_ABSTIME : 0, &its, nullptr) != 0)
    return make_sys_error(Errc::kInternal, errno, "%s: timerfd_settime", who);
  return Status::ok();
}

}  // namespace tern
