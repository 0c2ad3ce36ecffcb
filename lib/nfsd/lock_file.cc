#include "nfsd/lock_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace tern::nfsd {

namespace {

pid_t pid_in(int fd) {
  char buf[32] = {};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return -1;
  char* end = nullptr;
  long v = std::strtol(buf, &end, 10);
  return end != buf && v > 0 ? static_cast<pid_t>(v) : -1;
}

}  // namespace

Result<std::unique_ptr<LockFile>> LockFile::acquire(const std::string& path, const std::string& what, mode_t mode) {
  std::unique_ptr<LockFile> l(new LockFile());
  l->path_ = path;
  l->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
  if (l->fd_ < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot open %s", path.c_str());
  struct stat st;
  if (fstat(l->fd_, &st) != 0 || !S_ISREG(st.st_mode))
    return make_error(Errc::kInvalidArgument, "%s is not a regular file", path.c_str());
  if (flock(l->fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return make_sys_error(Errc::kInvalidArgument, errno, "cannot lock %s", path.c_str());
    // The holder writes its pid right after it locks: a pid that is not
    // there yet is a holder still starting.
    const pid_t holder = pid_in(l->fd_);
    const std::string who = holder > 0 ? "pid " + std::to_string(holder) : "a process still starting";
    return make_error(Errc::kBadState, "%s is in use by another tern-nfsd (%s, lock %s)", what.c_str(),
                      who.c_str(), path.c_str());
  }
  return l;
}

LockFile::~LockFile() {
  if (fd_ >= 0) close(fd_);
}

Status LockFile::write_pid() {
  const std::string s = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, s.data(), s.size(), 0) != static_cast<ssize_t>(s.size()))
    return make_sys_error(Errc::kInvalidArgument, errno, "cannot write %s", path_.c_str());
  return Status::ok();
}

void LockFile::remove() {
  // Still ours: nobody else can hold it, so nobody loses a lock to this unlink.
  (void)unlink(path_.c_str());
}

pid_t LockFile::holder_of(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  const pid_t p = pid_in(fd);
  close(fd);
  return p;
}

}  // namespace tern::nfsd
