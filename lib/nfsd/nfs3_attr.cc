// Attributes and file-system information: GETATTR, SETATTR, ACCESS,
// FSSTAT, FSINFO, PATHCONF.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

#include "nfs/nfs3_args.h"
#include "nfsd/nfs3_op.h"

namespace tern::nfsd {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

namespace {

timespec to_timespec(TimeHow how, const NfsTime3& t) {
  timespec ts{};
  switch (how) {
    case TimeHow::kDontChange: ts.tv_nsec = UTIME_OMIT; break;
    case TimeHow::kServerTime: ts.tv_nsec = UTIME_NOW; break;
    case TimeHow::kClientTime:
      ts.tv_sec = t.seconds;
      // A client's nanoseconds over 999999999 would make utimensat fail.
      ts.tv_nsec = t.nseconds < 1'000'000'000u ? t.nseconds : 999'999'999;
      break;
  }
  return ts;
}

}  // namespace

void Nfs3Server::apply_sattr(Op& op, FdCache::Entry* e, const struct stat& st, const Sattr3& sa, bool with_mode,
                             Then k) {
  bool truncate = false;
  if (sa.set_size) {
    if (S_ISDIR(st.st_mode)) return k(op, Nfs3Stat::kIsdir);
    if (!S_ISREG(st.st_mode)) return k(op, Nfs3Stat::kInval);
    // Owner override, as for WRITE: a file's owner may size it whatever its mode.
    if (st.st_uid != op.cred.uid && !may(op, st, 2)) return k(op, Nfs3Stat::kAccess);
    if (static_cast<uint64_t>(st.st_size) != sa.size) {
      if (sa.size > static_cast<uint64_t>(INT64_MAX)) return k(op, Nfs3Stat::kFbig);
      truncate = true;
    }
  }
  const bool owner = sa.set_uid || sa.set_gid;
  const bool times = sa.atime_how != TimeHow::kDontChange || sa.mtime_how != TimeHow::kDontChange;
  const bool mode = with_mode && sa.set_mode && !S_ISLNK(st.st_mode);  // a symlink has no mode of its own
  if (!truncate && !owner && !times && !mode) return k(op, Nfs3Stat::kOk);
  // The cache's descriptors, lent to the job: the cache may close its
  // entry before the job runs (fd_cache.h).
  struct Job {
    OwnedFd path, io;
    Sattr3 sa;
  };
  auto j = std::make_shared<Job>();
  j->sa = sa;
  if (truncate) {
    // Opened as the server (the owner override above): a truncate through a
    // descriptor open for writing is not checked again, whoever does it.
    const int fd = io_fd(e, true);
    if (fd < 0) return k(op, nfs3_stat_from_errno(errno));
    fds_.lend(fd, &j->io);
  }
  fds_.lend(e->path_fd, &j->path);
  as_caller(
      op,
      [j, truncate, owner, times, mode] {
        const Sattr3& sa = j->sa;
        const int fd = j->path.fd;
        // Freeing a large file's extents can wait for the disk: here, not on the engine.
        if (truncate && ftruncate(j->io.fd, static_cast<off_t>(sa.size)) != 0) return nfs3_stat_from_errno(errno);
        if (mode) {
          // chmod through the descriptor's /proc link: the object itself, and
          // the kernel checks that the caller owns it.
          char path[40];
          snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
          if (chmod(path, sa.mode & 07777) != 0) return nfs3_stat_from_errno(errno);
        }
        if (owner) {
          const uid_t u = sa.set_uid ? sa.uid : static_cast<uid_t>(-1);
          const gid_t g = sa.set_gid ? sa.gid : static_cast<gid_t>(-1);
          if (fchownat(fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return nfs3_stat_from_errno(errno);
        }
        if (times) {
          timespec ts[2] = {to_timespec(sa.atime_how, sa.atime), to_timespec(sa.mtime_how, sa.mtime)};
          if (utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) return nfs3_stat_from_errno(errno);
        }
        return Nfs3Stat::kOk;
      },
      std::move(k));
}

bool Nfs3Server::proc_getattr(Op& op) {
  GetattrArgs a;
  if (!decode(op.call->args(), &a)) return false;
  GetattrRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.obj, &e, &st);
  if (r.status == Nfs3Stat::kOk) r.attr = fattr(op, st);
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_setattr(Op& op) {
  SetattrArgs a;
  if (!decode(op.call->args(), &a)) return false;
  WccRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.obj, &e, &st);
  if (r.status != Nfs3Stat::kOk) {
    encode(op.w, r);
    return true;
  }
  r.wcc.before = wcc_attr(st);
  // The attributes after are the object's, through the cache's descriptor
  // lent to the call (its entry may be gone by the time the job finished).
  auto obj = std::make_shared<OwnedFd>();
  fds_.lend(e->path_fd, obj.get());
  Then k = [this, r, obj](Op& op, Nfs3Stat s) mutable {
    r.status = s;
    struct stat after;
    if (obj->fd >= 0 && fstat(obj->fd, &after) == 0) r.wcc.after = fattr(op, after);
    encode(op.w, r);
  };
  if (op.read_only) return k(op, Nfs3Stat::kRofs), true;
  if (a.check_ctime && (static_cast<uint32_t>(st.st_ctim.tv_sec) != a.guard_ctime.seconds ||
                        static_cast<uint32_t>(st.st_ctim.tv_nsec) != a.guard_ctime.nseconds))
    return k(op, Nfs3Stat::kNotSync), true;
  apply_sattr(op, e, st, a.attr, true, std::move(k));
  return true;
}

bool Nfs3Server::proc_access(Op& op) {
  AccessArgs a;
  if (!decode(op.call->args(), &a)) return false;
  AccessRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.obj, &e, &st);
  if (r.status == Nfs3Stat::kOk) {
    r.attr = fattr(op, st);
    uint32_t ok = 0;
    const bool dir = S_ISDIR(st.st_mode);
    if (may(op, st, 4)) ok |= kAccessRead;
    if (may(op, st, 2)) ok |= kAccessModify | kAccessExtend | (dir ? kAccessDelete : 0);
    if (may(op, st, 1)) ok |= dir ? kAccessLookup : kAccessExecute;
    if (op.read_only) ok &= ~(kAccessModify | kAccessExtend | kAccessDelete);
    r.access = a.access & ok;
  }
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_fsstat(Op& op) {
  FsArgs a;
  if (!decode(op.call->args(), &a)) return false;
  FsstatRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.obj, &e, &st);
  struct statvfs vfs;
  if (r.status == Nfs3Stat::kOk) {
    r.attr = fattr(op, st);
    if (fstatvfs(e->path_fd, &vfs) != 0) {
      r.status = nfs3_stat_from_errno(errno);
    } else {
      const uint64_t bs = vfs.f_frsize != 0 ? vfs.f_frsize : vfs.f_bsize;
      r.tbytes = vfs.f_blocks * bs;
      r.fbytes = vfs.f_bfree * bs;
      r.abytes = vfs.f_bavail * bs;
      r.tfiles = vfs.f_files;
      r.ffiles = vfs.f_ffree;
      r.afiles = vfs.f_favail;
      r.invarsec = 0;
    }
  }
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_fsinfo(Op& op) {
  FsArgs a;
  if (!decode(op.call->args(), &a)) return false;
  FsinfoRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.obj, &e, &st);
  if (r.status == Nfs3Stat::kOk) {
    r.attr = fattr(op, st);
    r.rtmax = r.rtpref = cfg_.rtmax;
    r.wtmax = r.wtpref = cfg_.wtmax;
    r.rtmult = r.wtmult = 4096;
    r.dtpref = cfg_.dtpref;
    r.maxfilesize = static_cast<uint64_t>(INT64_MAX);
    r.time_delta = {0, 1};
    r.properties = kFsfLink | kFsfSymlink | kFsfHomogeneous | kFsfCanSetTime;
  }
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_pathconf(Op& op) {
  FsArgs a;
  if (!decode(op.call->args(), &a)) return false;
  PathconfRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.obj, &e, &st);
  if (r.status == Nfs3Stat::kOk) {
    r.attr = fattr(op, st);
    long links = fpathconf(e->path_fd, _PC_LINK_MAX);
    r.linkmax = links > 0 && links < INT32_MAX ? static_cast<uint32_t>(links) : 65000;
    struct statvfs vfs;
    r.name_max = fstatvfs(e->path_fd, &vfs) == 0 && vfs.f_namemax > 0 && vfs.f_namemax < kNfs3MaxName
                     ? static_cast<uint32_t>(vfs.f_namemax)
                     : kNfs3MaxName;
    r.no_trunc = true;
    r.chown_restricted = true;
    r.case_insensitive = false;
    r.case_preserving = true;
  }
  encode(op.w, r);
  return true;
}

}  // namespace tern::nfsd
