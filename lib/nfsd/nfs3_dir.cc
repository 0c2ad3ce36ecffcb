// READDIR and READDIRPLUS: a directory's entries from getdents64, resumed
// at the client's cookie (the d_off of the last entry it got), as many as
// fit its byte counts. READDIRPLUS adds each entry's attributes and handle.
// The cookie verifier is always zero: a cookie stays valid as long as the
// file system keeps its offsets (ext4, XFS, tmpfs do).
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "nfs/nfs3_args.h"
#include "nfsd/nfs3_op.h"

namespace tern::nfsd {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

namespace {

struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// The smallest count worth trying: the fixed part of the reply and one
// entry with a short name.
constexpr uint32_t kMinCount = 128;

}  // namespace

bool Nfs3Server::proc_readdir(Op& op, bool plus) {
  Fh3 dir;
  uint64_t cookie = 0;
  uint32_t maxcount = 0, dircount = 0;
  if (plus) {
    ReaddirplusArgs a;
    if (!decode(op.call->args(), &a)) return false;
    dir = a.dir, cookie = a.cookie, maxcount = a.maxcount, dircount = a.dircount;
  } else {
    ReaddirArgs a;
    if (!decode(op.call->args(), &a)) return false;
    dir = a.dir, cookie = a.cookie, maxcount = a.count;
  }
  const Verf3 verf{};
  FdCache::Entry* d = nullptr;
  struct stat dst;
  Nfs3Stat s = resolve_stat(op, dir, &d, &dst);
  Fattr3 dattr;
  if (s == Nfs3Stat::kOk) {
    dattr = fattr(op, dst);
    if (!S_ISDIR(dst.st_mode)) s = Nfs3Stat::kNotdir;
    else if (!may(op, dst, 4)) s = Nfs3Stat::kAccess;
    else if (maxcount < kMinCount) s = Nfs3Stat::kToosmall;
    else if (cookie > static_cast<uint64_t>(INT64_MAX)) s = Nfs3Stat::kBadCookie;
  }
  int dfd = -1;
  if (s == Nfs3Stat::kOk) {
    if ((dfd = openat(d->path_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) s = nfs3_stat_from_errno(errno);
    else if (lseek(dfd, static_cast<off_t>(cookie), SEEK_SET) < 0) s = Nfs3Stat::kBadCookie;
  }
  auto fail = [&](Nfs3Stat why) {
    op.w = xdr::XdrWriter(res_);
    DirListEncoder e(op.w, plus, maxcount);
    e.begin(why, &dattr, verf);
    e.finish(false);
    if (dfd >= 0) close(dfd);
    return true;
  };
  if (s != Nfs3Stat::kOk) {
    if (d == nullptr) {  // the directory itself did not resolve: no attributes
      DirListEncoder e(op.w, plus, maxcount);
      e.begin(s, nullptr, verf);
      return true;
    }
    return fail(s);
  }
  maxcount = std::min(maxcount, max_results_ - 512);
  DirListEncoder enc(op.w, plus, maxcount, dircount);
  enc.begin(Nfs3Stat::kOk, &dattr, verf);
  const bool at_root = op.exp->is_root(dst);
  bool eof = false, full = false;
  while (!full) {
    long n = syscall(SYS_getdents64, dfd, dents_.data(), dents_.size());
    if (n < 0) return fail(nfs3_stat_from_errno(errno));
    if (n == 0) {
      eof = true;
      break;
    }
    for (long off = 0; off < n;) {
      const auto* de = reinterpret_cast<const LinuxDirent64*>(dents_.data() + off);
      off += de->d_reclen;
      const std::string_view name(de->d_name);
      uint64_t fileid = de->d_ino;
      Fattr3 attr;
      Fh3 fh;
      bool have_attr = false, have_fh = false;
      if (name == "." || (name == ".." && at_root)) {
        // The root's ".." is the root: nothing of what is above it shows.
        fileid = dst.st_ino;
        if (plus) {
          attr = dattr;
          fh = name == "." ? dir : op.exp->root_fh();
          have_attr = have_fh = true;
        }
      } else if (plus && name != "..") {
        struct stat est;
        if (fstatat(dfd, de->d_name, &est, AT_SYMLINK_NOFOLLOW) == 0 && op.exp->same_fs(est)) {
          attr = fattr(op, est);
          have_attr = true;
          have_fh = op.exp->handle_at(dfd, de->d_name, &fh) == Nfs3Stat::kOk;
        }
      }
      if (!enc.add(fileid, name, static_cast<uint64_t>(de->d_off), have_attr ? &attr : nullptr,
                   have_fh ? &fh : nullptr)) {
        full = true;
        break;
      }
    }
  }
  close(dfd);
  dfd = -1;
  if (enc.entries() == 0 && !eof) return fail(Nfs3Stat::kToosmall);
  enc.finish(eof);
  return true;
}

}  // namespace tern::nfsd
