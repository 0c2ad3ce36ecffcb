// CallerOp: the system call, and io_uring's operation for it. See caller_op.h.
#include "nfsd/caller_op.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#if TERN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace tern::nfsd {

int CallerOp::run_now() const {
  int rc = -1;
  switch (kind) {
    case CallerOpKind::kMkdir: rc = mkdirat(dirfd, name.c_str(), mode); break;
    case CallerOpKind::kSymlink: rc = symlinkat(name2.c_str(), dirfd, name.c_str()); break;
    case CallerOpKind::kUnlink: rc = unlinkat(dirfd, name.c_str(), flags); break;
    case CallerOpKind::kRename: rc = renameat(dirfd, name.c_str(), dirfd2, name2.c_str()); break;
    case CallerOpKind::kLink: rc = linkat(AT_FDCWD, name2.c_str(), dirfd, name.c_str(), AT_SYMLINK_FOLLOW); break;
  }
  return rc == 0 ? 0 : -errno;
}

void CallerOp::prep(void* s) const {
#if TERN_HAVE_LIBURING
  auto* sqe = static_cast<io_uring_sqe*>(s);
  switch (kind) {
    case CallerOpKind::kMkdir: io_uring_prep_mkdirat(sqe, dirfd, name.c_str(), mode); break;
    case CallerOpKind::kSymlink: io_uring_prep_symlinkat(sqe, name2.c_str(), dirfd, name.c_str()); break;
    case CallerOpKind::kUnlink: io_uring_prep_unlinkat(sqe, dirfd, name.c_str(), flags); break;
    case CallerOpKind::kRename: io_uring_prep_renameat(sqe, dirfd, name.c_str(), dirfd2, name2.c_str(), 0); break;
    case CallerOpKind::kLink:
      io_uring_prep_linkat(sqe, AT_FDCWD, name2.c_str(), dirfd, name.c_str(), AT_SYMLINK_FOLLOW);
      break;
  }
#else
  (void)s;
#endif
}

}  // namespace tern::nfsd
