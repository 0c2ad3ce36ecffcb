// The name space: LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR,
// RENAME, LINK.
//
// Every name is one component: check_name() refuses "/" and NUL in it, and
// "." and ".." are LOOKUP's alone, where ".." of the export's root is the
// root itself and any other ".." is proved to lie beneath it. Lookups
// themselves go through openat2() with RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS
// and RESOLVE_NO_XDEV as well (a symlink is returned as itself, never
// followed; a file system mounted inside the export is not entered), and
// everything that creates or removes a name runs as the caller (on a
// CallerPool worker, caller_pool.h); LOOKUP checks search permission itself.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>

#include "nfs/nfs3_args.h"
#include "nfsd/nfs3_op.h"

namespace tern::nfsd {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

namespace {

// openat() of one name beneath dirfd, never following a symlink and never
// leaving dirfd's file system. -1 with errno on failure.
int open_beneath(int dirfd, const char* name, uint64_t flags) {
  static std::atomic<bool> no_openat2{false};  // engine and caller threads both look
  if (!no_openat2.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = flags | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    long fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
    no_openat2.store(true, std::memory_order_relaxed);  // before Linux 5.6: one component with O_NOFOLLOW is beneath already
  }
  return openat(dirfd, name, static_cast<int>(flags) | O_NOFOLLOW | O_CLOEXEC);
}

// For REMOVE, RMDIR and the source of RENAME: "." and ".." are refused as
// nfsd refuses them.
Nfs3Stat check_victim(std::string_view name, bool dir) {
  if (name == ".") return Nfs3Stat::kInval;
  if (name == "..") return dir ? Nfs3Stat::kNotempty : Nfs3Stat::kInval;
  return Nfs3Stat::kOk;
}

}  // namespace

bool Nfs3Server::proc_lookup(Op& op) {
  LookupArgs a;
  if (!decode(op.call->args(), &a)) return false;
  LookupRes r;
  FdCache::Entry* d = nullptr;
  struct stat dst;
  r.status = resolve_stat(op, a.what.dir, &d, &dst);
  if (r.status != Nfs3Stat::kOk) {
    encode(op.w, r);
    return true;
  }
  r.dir_attr = fattr(op, dst);
  const std::string_view name = a.what.name;
  if (!S_ISDIR(dst.st_mode)) {
    r.status = Nfs3Stat::kNotdir;
  } else if (name == "." || (name == ".." && op.exp->is_root(dst))) {
    // "." is the directory; ".." of the root is the root (nothing above it is served).
    r.obj = name == "." ? a.what.dir : op.exp->root_fh();
    r.obj_attr = fattr(op, dst);
    if (name == ".." && !(r.obj == a.what.dir)) {
      struct stat rst;
      if (fstat(op.exp->root_fd(), &rst) == 0) r.obj_attr = fattr(op, rst);
    }
  } else if (!may(op, dst, 1)) {
    r.status = Nfs3Stat::kAccess;  // no search permission in the directory
  } else if (name == "..") {
    // The parent, once it is proved to be beneath the root: walk up from it
    // until the root (a directory moved out of the export since its handle
    // was given fails here).
    int fd = openat(d->path_fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) r.status = nfs3_stat_from_errno(errno);
    if (fd >= 0) {
      bool beneath = false;
      int cur = dup(fd);
      for (int depth = 0; cur >= 0 && depth < 4096; ++depth) {
        struct stat cst, ust;
        if (fstat(cur, &cst) != 0 || !op.exp->same_fs(cst)) break;
        if (op.exp->is_root(cst)) {
          beneath = true;
          break;
        }
        int up = openat(cur, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
        close(cur);
        cur = up;
        // The top of the file system ("/"'s parent is itself): not beneath.
        if (cur >= 0 && fstat(cur, &ust) == 0 && ust.st_ino == cst.st_ino && ust.st_dev == cst.st_dev) break;
      }
      if (cur >= 0) close(cur);
      struct stat pst;
      if (!beneath || fstat(fd, &pst) != 0) {
        close(fd);
        r.status = Nfs3Stat::kAccess;
      } else {
        r.obj_attr = fattr(op, pst);
        r.status = handle_and_cache(op, fd, &r.obj);
      }
    }
  } else if ((r.status = check_name(name)) == Nfs3Stat::kOk) {
    const CName n(name);
    int fd = open_beneath(d->path_fd, n.s, O_PATH);
    struct stat ost;
    if (fd < 0) {
      // EXDEV: a file system mounted there, which is not served.
      r.status = errno == EXDEV ? Nfs3Stat::kAccess : nfs3_stat_from_errno(errno);
    } else if (fstat(fd, &ost) != 0) {
      r.status = nfs3_stat_from_errno(errno);
      close(fd);
    } else {
      r.obj_attr = fattr(op, ost);
      r.status = handle_and_cache(op, fd, &r.obj);
    }
  }
  if (r.status != Nfs3Stat::kOk) r.obj_attr.reset();
  encode(op.w, r);
  return true;
}

namespace {

// What every creating procedure checks first: the directory is one, the
// export is writable, the name is one a client may create.
Nfs3Stat creatable(const struct stat& dst, bool read_only, Nfs3Stat name) {
  if (!S_ISDIR(dst.st_mode)) return Nfs3Stat::kNotdir;
  if (read_only) return Nfs3Stat::kRofs;
  return name;
}

}  // namespace

bool Nfs3Server::begin_create(Op& op, const Fh3& dir, std::string_view name, Nfs3Stat own, FdCache::Entry** d,
                              struct stat* dst) {
  Nfs3Stat s = resolve_stat(op, dir, d, dst);
  if (s != Nfs3Stat::kOk) {
    CreateRes r;
    r.status = s;
    encode(op.w, r);
    return false;
  }
  s = creatable(*dst, op.read_only, check_name(name));
  if (s == Nfs3Stat::kOk) s = own;
  if (s == Nfs3Stat::kOk) return true;
  finish_create(op, (*d)->path_fd, *dst, -1, s);
  return false;
}

void Nfs3Server::set_after_create(Op& op, int fd, const Sattr3& rest, Then k) {
  if (!rest.any()) return k(op, Nfs3Stat::kOk);
  // Through the descriptor cache, as SETATTR does: apply_sattr() works on
  // an entry (a handle_and_cache(op, ) failure has closed its duplicate).
  Fh3 fh;
  FdCache::Entry* e = nullptr;
  struct stat ost;
  int keep = dup(fd);
  if (keep >= 0 && handle_and_cache(op, keep, &fh) == Nfs3Stat::kOk && (e = fds_.find(fh)) != nullptr &&
      fstat(e->path_fd, &ost) == 0)
    return apply_sattr(op, e, ost, rest, false, std::move(k));
  k(op, Nfs3Stat::kOk);
}

struct Nfs3Server::MakeJob {
  OwnedFd dir;
  int fd = -1;  // what make() made or found
  bool existed = false;
  bool set_rest = true;
  Sattr3 rest;
  MakeJob() = default;
  MakeJob(const MakeJob&) = delete;
  MakeJob& operator=(const MakeJob&) = delete;
  ~MakeJob() {
    if (fd >= 0) close(fd);
  }
};

void Nfs3Server::make_as_caller(Op& op, FdCache::Entry* d, const struct stat& dst, std::shared_ptr<MakeJob> j,
                                std::function<Nfs3Stat(MakeJob&)> make) {
  fds_.lend(d->path_fd, &j->dir);
  as_caller(
      op, [j, make = std::move(make)] { return make(*j); },
      [this, j, dst](Op& op, Nfs3Stat s) {
        Then fin = [this, j, dst](Op& op, Nfs3Stat s) {
          const int fd = std::exchange(j->fd, -1);
          finish_create(op, j->dir.fd, dst, s == Nfs3Stat::kOk ? fd : -1, s);
          if (s != Nfs3Stat::kOk && fd >= 0) close(fd);
        };
        if (s == Nfs3Stat::kOk && j->set_rest) return set_after_create(op, j->fd, j->rest, std::move(fin));
        fin(op, s);
      });
}

void Nfs3Server::make_by_op(Op& op, FdCache::Entry* d, const struct stat& dst, std::shared_ptr<MakeJob> j,
                            std::shared_ptr<CallerOp> c, int open_flags) {
  fds_.lend(d->path_fd, &j->dir);
  c->dirfd = j->dir.fd;
  as_caller_op(op, c, [this, j, c, dst, open_flags](Op& op, Nfs3Stat s) {
    // What the caller made, opened by the server for its handle and
    // attributes (O_PATH: nothing is read or written through it), as
    // LOOKUP opens a name; the caller could search the directory, it made
    // a name in it.
    if (s == Nfs3Stat::kOk && (j->fd = open_beneath(j->dir.fd, c->name.c_str(), O_PATH | open_flags)) < 0)
      s = nfs3_stat_from_errno(errno);
    Then fin = [this, j, dst](Op& op, Nfs3Stat s) {
      const int fd = std::exchange(j->fd, -1);
      finish_create(op, j->dir.fd, dst, s == Nfs3Stat::kOk ? fd : -1, s);
      if (s != Nfs3Stat::kOk && fd >= 0) close(fd);
    };
    if (s == Nfs3Stat::kOk && j->set_rest) return set_after_create(op, j->fd, j->rest, std::move(fin));
    fin(op, s);
  });
}

// The common end of CREATE, MKDIR, SYMLINK and MKNOD: `objfd` (owned; -1
// when status failed) is what was made or found.
void Nfs3Server::finish_create(Op& op, int dirfd, const struct stat& dir_before, int objfd, Nfs3Stat status) {
  CreateRes r;
  r.status = status;
  r.dir_wcc.before = wcc_attr(dir_before);
  if (status == Nfs3Stat::kOk) {
    struct stat ost;
    if (fstat(objfd, &ost) == 0) r.obj_attr = fattr(op, ost);
    Fh3 fh;
    // A handle the file system cannot give is not an error: the client
    // looks the name up then.
    if (handle_and_cache(op, objfd, &fh) == Nfs3Stat::kOk) r.obj = fh;
  } else if (objfd >= 0) {
    close(objfd);
  }
  struct stat after;
  if (fstat(dirfd, &after) == 0) r.dir_wcc.after = fattr(op, after);
  encode(op.w, r);
}

bool Nfs3Server::proc_create(Op& op) {
  CreateArgs a;
  if (!decode(op.call->args(), &a)) return false;
  FdCache::Entry* d = nullptr;
  struct stat dst;
  if (!begin_create(op, a.where.dir, a.where.name, Nfs3Stat::kOk, &d, &dst)) return true;
  auto j = std::make_shared<MakeJob>();
  j->set_rest = a.how != CreateMode::kExclusive;
  make_as_caller(op, d, dst, j, [n = CName(a.where.name), how = a.how, attr = a.attr, verf = a.verf](MakeJob& j) {
    const int dirfd = j.dir.fd;
    const mode_t mode = how == CreateMode::kExclusive ? 0 : attr.set_mode ? (attr.mode & 07777) : 0644;
    j.fd = openat(dirfd, n.s, O_CREAT | O_EXCL | O_RDONLY | O_NOFOLLOW | O_CLOEXEC, mode);
    j.rest = attr;
    uint32_t v0, v1;
    std::memcpy(&v0, verf.data, 4);
    std::memcpy(&v1, verf.data + 4, 4);
    if (j.fd < 0 && errno == EEXIST && how != CreateMode::kGuarded) {
      // UNCHECKED: the file that is there (only its size is set, as nfsd
      // does); EXCLUSIVE: the one an earlier copy of this call made, if
      // its times hold this call's verifier.
      j.existed = true;
      j.rest = Sattr3{.set_size = attr.set_size, .size = attr.size};
      j.fd = open_beneath(dirfd, n.s, O_PATH);
      struct stat ost;
      if (j.fd < 0 || fstat(j.fd, &ost) != 0) return nfs3_stat_from_errno(errno);
      if (!S_ISREG(ost.st_mode) ||
          (how == CreateMode::kExclusive &&
           !(static_cast<uint32_t>(ost.st_mtim.tv_sec) == v0 && static_cast<uint32_t>(ost.st_atim.tv_sec) == v1)))
        return Nfs3Stat::kExist;
      return Nfs3Stat::kOk;
    }
    if (j.fd < 0) return nfs3_stat_from_errno(errno);
    if (how == CreateMode::kExclusive) {
      // The verifier goes into the times (as nfsd keeps it), where a
      // retransmission finds it; the client sets the real ones after.
      timespec ts[2] = {{static_cast<time_t>(v1), 0}, {static_cast<time_t>(v0), 0}};
      if (futimens(j.fd, ts) != 0) return nfs3_stat_from_errno(errno);
    }
    return Nfs3Stat::kOk;
  });
  return true;
}

bool Nfs3Server::proc_mkdir(Op& op) {
  MkdirArgs a;
  if (!decode(op.call->args(), &a)) return false;
  FdCache::Entry* d = nullptr;
  struct stat dst;
  if (!begin_create(op, a.where.dir, a.where.name, Nfs3Stat::kOk, &d, &dst)) return true;
  auto j = std::make_shared<MakeJob>();
  j->rest = a.attr;
  j->rest.set_mode = false;
  j->rest.set_size = false;
  const mode_t mode = a.attr.set_mode ? (a.attr.mode & 07777) : 0755;
  auto c = std::make_shared<CallerOp>();
  c->kind = CallerOpKind::kMkdir;
  c->name = std::string(a.where.name);
  c->mode = mode;
  make_by_op(op, d, dst, j, std::move(c), O_DIRECTORY);
  return true;
}

bool Nfs3Server::proc_symlink(Op& op) {
  SymlinkArgs a;
  if (!decode(op.call->args(), op.call->read_chunks(), &a)) return false;
  // The target is only stored: a client resolves it, the server never
  // follows it. It must be a C string of at most PATH_MAX - 1 bytes.
  Nfs3Stat target = Nfs3Stat::kOk;
  if (a.target.empty() || a.target.find('\0') != std::string_view::npos) target = Nfs3Stat::kInval;
  else if (a.target.size() >= kNfs3MaxPath) target = Nfs3Stat::kNametoolong;
  FdCache::Entry* d = nullptr;
  struct stat dst;
  if (!begin_create(op, a.where.dir, a.where.name, target, &d, &dst)) return true;
  auto j = std::make_shared<MakeJob>();
  j->rest = a.attr;
  j->rest.set_mode = false;  // a symlink's mode means nothing on Linux
  j->rest.set_size = false;
  auto c = std::make_shared<CallerOp>();
  c->kind = CallerOpKind::kSymlink;
  c->name = std::string(a.where.name);
  c->name2 = std::string(a.target);
  make_by_op(op, d, dst, j, std::move(c), 0);
  return true;
}

bool Nfs3Server::proc_mknod(Op& op) {
  MknodArgs a;
  if (!decode(op.call->args(), &a)) return false;
  mode_t type = 0;
  switch (a.type) {
    case FileType::kFifo: type = S_IFIFO; break;
    case FileType::kSock: type = S_IFSOCK; break;
    case FileType::kChr: type = S_IFCHR; break;
    case FileType::kBlk: type = S_IFBLK; break;
    default: break;
  }
  FdCache::Entry* d = nullptr;
  struct stat dst;
  const Nfs3Stat known = type == 0 ? Nfs3Stat::kBadtype : Nfs3Stat::kOk;
  if (!begin_create(op, a.where.dir, a.where.name, known, &d, &dst)) return true;
  // Device nodes need CAP_MKNOD, which only a caller acting as root has:
  // the kernel decides. The server itself never opens them (READ and
  // WRITE serve regular files only).
  const mode_t mode = type | (a.attr.set_mode ? (a.attr.mode & 07777) : 0644);
  const dev_t dev = makedev(a.major, a.minor);
  auto j = std::make_shared<MakeJob>();
  j->set_rest = false;
  make_as_caller(op, d, dst, j, [n = CName(a.where.name), mode, dev](MakeJob& j) {
    if (mknodat(j.dir.fd, n.s, mode, dev) != 0) return nfs3_stat_from_errno(errno);
    if ((j.fd = open_beneath(j.dir.fd, n.s, O_PATH)) < 0) return nfs3_stat_from_errno(errno);
    return Nfs3Stat::kOk;
  });
  return true;
}

namespace {

// The handle a name has now, to drop its descriptor from the cache once the
// name is gone (so that a removed file's space comes back at once).
bool handle_of_name(const Export& exp, int dirfd, const char* name, Fh3* fh) {
  int fd = open_beneath(dirfd, name, O_PATH);
  if (fd < 0) return false;
  bool ok = exp.handle_of(fd, fh) == Nfs3Stat::kOk;
  close(fd);
  return ok;
}

}  // namespace

bool Nfs3Server::proc_remove(Op& op, bool dir) {
  RemoveArgs a;
  if (!decode(op.call->args(), &a)) return false;
  WccRes r;
  FdCache::Entry* d = nullptr;
  struct stat dst;
  r.status = resolve_stat(op, a.what.dir, &d, &dst);
  if (r.status != Nfs3Stat::kOk) {
    encode(op.w, r);
    return true;
  }
  r.wcc.before = wcc_attr(dst);
  auto dirfd = std::make_shared<OwnedFd>();
  fds_.lend(d->path_fd, dirfd.get());
  Fh3 gone;
  bool known = false;
  Nfs3Stat s = check_victim(a.what.name, dir);
  if (s == Nfs3Stat::kOk) s = creatable(dst, op.read_only, check_name(a.what.name));
  const CName n(a.what.name);
  if (s == Nfs3Stat::kOk) known = handle_of_name(*op.exp, d->path_fd, n.s, &gone);
  Then k = [this, r, dirfd, known, gone](Op& op, Nfs3Stat s) mutable {
    if (s == Nfs3Stat::kOk && known) fds_.erase(gone);
    r.status = s;
    struct stat after;
    if (dirfd->fd >= 0 && fstat(dirfd->fd, &after) == 0) r.wcc.after = fattr(op, after);
    encode(op.w, r);
  };
  if (s != Nfs3Stat::kOk) return k(op, s), true;
  auto c = std::make_shared<CallerOp>();
  c->kind = CallerOpKind::kUnlink;
  c->dirfd = dirfd->fd;  // open until k ran: k holds dirfd
  c->name = n.s;
  c->flags = dir ? AT_REMOVEDIR : 0;
  as_caller_op(op, std::move(c), std::move(k));
  return true;
}

bool Nfs3Server::proc_rename(Op& op) {
  RenameArgs a;
  if (!decode(op.call->args(), &a)) return false;
  RenameRes r;
  FdCache::Entry* from = nullptr;
  FdCache::Entry* to = nullptr;
  struct stat fst, tst;
  r.status = resolve_stat(op, a.from.dir, &from, &fst);
  if (r.status != Nfs3Stat::kOk) {
    encode(op.w, r);
    return true;
  }
  r.from_wcc.before = wcc_attr(fst);
  // Resolving the second may evict the first from a full cache, and the job
  // outlives both entries: both descriptors lent to it.
  auto from_fd = std::make_shared<OwnedFd>();
  fds_.lend(from->path_fd, from_fd.get());
  auto to_fd = std::make_shared<OwnedFd>();
  Fh3 replaced;
  bool known = false;
  r.status = resolve_stat(op, a.to.dir, &to, &tst);
  Nfs3Stat s = r.status;
  const CName fn(a.from.name), tn(a.to.name);
  if (r.status == Nfs3Stat::kOk) {
    r.to_wcc.before = wcc_attr(tst);
    s = check_victim(a.from.name, false);
    if (s == Nfs3Stat::kOk) s = creatable(fst, op.read_only, check_name(a.from.name));
    if (s == Nfs3Stat::kOk) s = creatable(tst, op.read_only, check_name(a.to.name));
    if (s == Nfs3Stat::kOk) fds_.lend(to->path_fd, to_fd.get());
    if (s == Nfs3Stat::kOk) known = handle_of_name(*op.exp, to->path_fd, tn.s, &replaced);
  }
  const bool resolved = r.status == Nfs3Stat::kOk;
  Then k = [this, r, from_fd, to_fd, known, replaced, resolved](Op& op, Nfs3Stat s) mutable {
    if (resolved) {
      if (s == Nfs3Stat::kOk && known) fds_.erase(replaced);  // (the renamed object itself is simply reopened)
      r.status = s;
      struct stat after;
      if (to_fd->fd >= 0 && fstat(to_fd->fd, &after) == 0) r.to_wcc.after = fattr(op, after);
    }
    struct stat after;
    if (from_fd->fd >= 0 && fstat(from_fd->fd, &after) == 0) r.from_wcc.after = fattr(op, after);
    encode(op.w, r);
  };
  if (s != Nfs3Stat::kOk) return k(op, s), true;
  auto c = std::make_shared<CallerOp>();
  c->kind = CallerOpKind::kRename;
  c->dirfd = from_fd->fd;  // both open until k ran: k holds them
  c->name = fn.s;
  c->dirfd2 = to_fd->fd;
  c->name2 = tn.s;
  as_caller_op(op, std::move(c), std::move(k));
  return true;
}

bool Nfs3Server::proc_link(Op& op) {
  LinkArgs a;
  if (!decode(op.call->args(), &a)) return false;
  LinkRes r;
  FdCache::Entry* f = nullptr;
  FdCache::Entry* d = nullptr;
  struct stat fstt, dst;
  r.status = resolve_stat(op, a.file, &f, &fstt);
  if (r.status != Nfs3Stat::kOk) {
    encode(op.w, r);
    return true;
  }
  // Resolving the directory may evict the file's entry, and the job
  // outlives both: both descriptors lent to it.
  auto file_fd = std::make_shared<OwnedFd>();
  fds_.lend(f->path_fd, file_fd.get());
  auto dir_fd = std::make_shared<OwnedFd>();
  r.status = resolve_stat(op, a.link.dir, &d, &dst);
  Nfs3Stat s = r.status;
  if (r.status == Nfs3Stat::kOk) {
    r.dir_wcc.before = wcc_attr(dst);
    s = creatable(dst, op.read_only, check_name(a.link.name));
    if (s == Nfs3Stat::kOk) fds_.lend(d->path_fd, dir_fd.get());
  }
  const bool resolved = r.status == Nfs3Stat::kOk;
  Then k = [this, r, file_fd, dir_fd, resolved](Op& op, Nfs3Stat s) mutable {
    if (resolved) {
      r.status = s;
      struct stat after;
      if (dir_fd->fd >= 0 && fstat(dir_fd->fd, &after) == 0) r.dir_wcc.after = fattr(op, after);
    }
    struct stat fafter;
    if (file_fd->fd >= 0 && fstat(file_fd->fd, &fafter) == 0) r.attr = fattr(op, fafter);
    encode(op.w, r);
  };
  if (s != Nfs3Stat::kOk) return k(op, s), true;
  // linkat() of a descriptor through its /proc link: the object itself,
  // with the kernel's checks as the caller (AT_EMPTY_PATH would need
  // CAP_DAC_READ_SEARCH). io_uring's workers are threads of this process,
  // so /proc/self is this process there too.
  auto c = std::make_shared<CallerOp>();
  c->kind = CallerOpKind::kLink;
  c->dirfd = dir_fd->fd;  // both open until k ran: k holds them
  c->name = std::string(a.link.name);
  char path[40];
  snprintf(path, sizeof path, "/proc/self/fd/%d", file_fd->fd);
  c->name2 = path;
  as_caller_op(op, std::move(c), std::move(k));
  return true;
}

}  // namespace tern::nfsd
