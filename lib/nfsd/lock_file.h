// A file locked with flock() for as long as this object lives, holding the
// holder's pid: how one tern-nfsd keeps others off its state directory and
// its pidfile.
//
// flock() locks belong to the open file description, so the lock is
// released by the kernel whenever the process dies, however it dies (no
// stale lock after a SIGKILL), and a second acquire() in the same process
// conflicts too (tests run two "instances" in one process). The file is
// never removed while locked by someone else: removing it would let a
// third process lock a new file of the same name while the holder still
// holds the old one.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/result.h"

namespace tern::nfsd {

class LockFile {
 public:
  // Opens (creating, mode 0644 or `mode`) and locks `path`. kBadState when
  // another holder has it, the message naming its pid and `what` ("the state
  // directory /var/lib/tern-nfsd") and saying what to do.
  static Result<std::unique_ptr<LockFile>> acquire(const std::string& path, const std::string& what,
                                                   mode_t mode = 0644);
  ~LockFile();
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

  // Writes this process's pid into the file ("1234\n"), replacing what was there.
  Status write_pid();
  // Removes the file while still holding it (a clean exit's pidfile); the
  // lock goes with the descriptor at destruction.
  void remove();
  const std::string& path() const { return path_; }

  // The pid written in a lock file, or -1 (tests and error messages).
  static pid_t holder_of(const std::string& path);

 private:
  LockFile() = default;
  std::string path_;
  int fd_ = -1;
};

}  // namespace tern::nfsd
