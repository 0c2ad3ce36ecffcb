// One name-space system call a caller's NFS call makes -- mkdirat,
// symlinkat, unlinkat, renameat, linkat -- described so that it can run
// either as a system call on a CallerPool worker acting as the caller
// (run_now) or as io_uring's own operation on the engine's storage ring
// under the caller's registered personality (prep; storage_queue.h,
// personality_cache.h).
//
// Why both: a personality must first be registered by a thread that acts
// as the caller (io_uring takes the registering thread's credentials), and
// only a pool worker may act as someone else (caller_pool.h: the engine's
// own thread must keep the process's credentials for the RDMA device
// files). So a caller's first call runs on the pool and registers one; the
// next ones go to the ring, whose completions the engine already polls:
// no worker thread to wake, no mutex, no eventfd written and read for each
// call (docs/nfs-gateway.md, "Calls that run as the caller").
//
// The descriptors are not owned: whoever submits keeps them open until the
// call completes. The strings are the op's own: io_uring reads them when
// the SQE is submitted, which may be a later poll pass (a per-peer bound
// held it back).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace tern::nfsd {

enum class CallerOpKind : uint8_t { kMkdir, kSymlink, kUnlink, kRename, kLink };

struct CallerOp {
  CallerOpKind kind = CallerOpKind::kMkdir;
  int dirfd = -1;     // the directory the name is in (rename: the source's)
  std::string name;   // one component
  int dirfd2 = -1;    // rename: the target's directory
  // rename: the target name; symlink: the link's contents; link: the
  // existing object, as /proc/self/fd/N of a descriptor of it.
  std::string name2;
  mode_t mode = 0;    // mkdir
  int flags = 0;      // unlink: AT_REMOVEDIR or 0

  // The system call, on this thread and with its credentials: 0 or -errno.
  int run_now() const;
  // Fills an io_uring SQE (struct io_uring_sqe*, void here so that this
  // header needs no liburing) for the same call. Only when built with
  // liburing; the caller sets the personality after.
  void prep(void* sqe) const;
};

}  // namespace tern::nfsd
