#include "mem/memfd.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tern::mem {

static_assert(kSharedMemfdSeals == (F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW), "seal bits changed");

Result<int> create_sealed_memfd(const char* name, size_t size, bool huge) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (huge) flags |= MFD_HUGETLB | MFD_HUGE_2MB;
  int fd = memfd_create(name, flags);
  if (fd < 0) return make_sys_error(Errc::kNoResources, errno, "memfd_create(%s)", name);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int e = errno;
    close(fd);
    return make_sys_error(Errc::kNoResources, e, "ftruncate(%s, %zu)", name, size);
  }
  if (fcntl(fd, F_ADD_SEALS, kSharedMemfdSeals) != 0) {
    int e = errno;
    close(fd);
    return make_sys_error(Errc::kUnsupported, e, "sealing memfd %s", name);
  }
  return fd;
}

Status check_peer_memfd(int fd, uint64_t min_size) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return make_sys_error(Errc::kRemoteError, errno, "fstat of the peer's fd");
  if (!S_ISREG(sb.st_mode)) return make_error(Errc::kRemoteError, "the peer's fd is not a memfd (not a regular file)");
  // F_GET_SEALS fails with EINVAL on files that cannot be sealed: not a memfd.
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return make_sys_error(Errc::kRemoteError, errno, "the peer's fd is not a sealable memfd");
  if ((seals & kSharedMemfdSeals) != kSharedMemfdSeals)
    return make_error(Errc::kRemoteError,
                      "the peer's memfd is not sealed against resizing (seals 0x%x, need 0x%x: it could shrink it "
                      "under our mapping)",
                      seals, kSharedMemfdSeals);
  if (static_cast<uint64_t>(sb.st_size) < min_size)
    return make_error(Errc::kRemoteError, "the peer's memfd has %lld bytes, it announced %llu",
                      static_cast<long long>(sb.st_size), static_cast<unsigned long long>(min_size));
  return Status::ok();
}

}  // namespace tern::mem
