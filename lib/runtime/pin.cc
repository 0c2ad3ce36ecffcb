// Pinning for hosts that run engines on their own threads, EAL or not.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "runtime/eal.h"

namespace tern::runtime {

Status pin_current_thread(unsigned cpu) {
  if (cpu >= CPU_SETSIZE)
    return make_error(Errc::kInvalidArgument, "cannot pin to cpu %u: above CPU_SETSIZE (%d)", cpu,
                      CPU_SETSIZE);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0)
    return make_sys_error(Errc::kInvalidArgument, rc, "cannot pin thread to cpu %u (%ld cpus online)", cpu,
                          sysconf(_SC_NPROCESSORS_ONLN));
  return Status::ok();
}

}  // namespace tern::runtime
