// fs-shutdown DIR: shuts down the ext4 or XFS file system DIR is on the way
// a power cut would leave it -- what reached the device stays, what is only
// in memory is dropped: dirty page-cache data is never written back, and the
// journal is not flushed (the "no log flush" level of the file system's
// shutdown ioctl, the technique xfstests' "godown" uses to test recovery).
// Every later access to the file system fails with EIO until it is
// unmounted; mounting it again replays the journal as after a crash.
//
// ext4 (EXT4_IOC_SHUTDOWN) and XFS (XFS_IOC_GOINGDOWN) share the request
// number and the flag values; neither is in the kernel's exported headers,
// hence the definitions here. Exit 0 when the file system went down, 1 with
// the errno otherwise (e.g. ENOTTY: a file system without the ioctl).
#include <fcntl.h>
#include <linux/ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {
constexpr unsigned long kShutdown = _IOR('X', 125, uint32_t);
constexpr uint32_t kNoLogFlush = 0x2;  // neither data nor the journal
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fs-shutdown DIR\n");
    return 2;
  }
  const int fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "fs-shutdown: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  uint32_t flags = kNoLogFlush;
  if (ioctl(fd, kShutdown, &flags) != 0) {
    std::fprintf(stderr, "fs-shutdown: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  close(fd);
  return 0;
}
