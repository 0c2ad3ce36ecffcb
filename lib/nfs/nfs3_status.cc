// Names of NFSv3's procedures and statuses, and the errno -> nfsstat3 map.
#include <cerrno>

#include "nfs/nfs3_types.h"

namespace tern::nfs {

const char* nfs3_proc_name(Nfs3Proc p) {
  switch (p) {
    case Nfs3Proc::kNull: return "NULL";
    case Nfs3Proc::kGetattr: return "GETATTR";
    case Nfs3Proc::kSetattr: return "SETATTR";
    case Nfs3Proc::kLookup: return "LOOKUP";
    case Nfs3Proc::kAccess: return "ACCESS";
    case Nfs3Proc::kReadlink: return "READLINK";
    case Nfs3Proc::kRead: return "READ";
    case Nfs3Proc::kWrite: return "WRITE";
    case Nfs3Proc::kCreate: return "CREATE";
    case Nfs3Proc::kMkdir: return "MKDIR";
    case Nfs3Proc::kSymlink: return "SYMLINK";
    case Nfs3Proc::kMknod: return "MKNOD";
    case Nfs3Proc::kRemove: return "REMOVE";
    case Nfs3Proc::kRmdir: return "RMDIR";
    case Nfs3Proc::kRename: return "RENAME";
    case Nfs3Proc::kLink: return "LINK";
    case Nfs3Proc::kReaddir: return "READDIR";
    case Nfs3Proc::kReaddirplus: return "READDIRPLUS";
    case Nfs3Proc::kFsstat: return "FSSTAT";
    case Nfs3Proc::kFsinfo: return "FSINFO";
    case Nfs3Proc::kPathconf: return "PATHCONF";
    case Nfs3Proc::kCommit: return "COMMIT";
  }
  return "unknown NFSv3 procedure";
}

const char* nfs3_stat_name(Nfs3Stat s) {
  switch (s) {
    case Nfs3Stat::kOk: return "NFS3_OK";
    case Nfs3Stat::kPerm: return "NFS3ERR_PERM";
    case Nfs3Stat::kNoent: return "NFS3ERR_NOENT";
    case Nfs3Stat::kIo: return "NFS3ERR_IO";
    case Nfs3Stat::kNxio: return "NFS3ERR_NXIO";
    case Nfs3Stat::kAccess: return "NFS3ERR_ACCES";
    case Nfs3Stat::kExist: return "NFS3ERR_EXIST";
    case Nfs3Stat::kXdev: return "NFS3ERR_XDEV";
    case Nfs3Stat::kNodev: return "NFS3ERR_NODEV";
    case Nfs3Stat::kNotdir: return "NFS3ERR_NOTDIR";
    case Nfs3Stat::kIsdir: return "NFS3ERR_ISDIR";
    case Nfs3Stat::kInval: return "NFS3ERR_INVAL";
    case Nfs3Stat::kFbig: return "NFS3ERR_FBIG";
    case Nfs3Stat::kNospc: return "NFS3ERR_NOSPC";
    case Nfs3Stat::kRofs: return "NFS3ERR_ROFS";
    case Nfs3Stat::kMlink: return "NFS3ERR_MLINK";
    case Nfs3Stat::kNametoolong: return "NFS3ERR_NAMETOOLONG";
    case Nfs3Stat::kNotempty: return "NFS3ERR_NOTEMPTY";
    case Nfs3Stat::kDquot: return "NFS3ERR_DQUOT";
    case Nfs3Stat::kStale: return "NFS3ERR_STALE";
    case Nfs3Stat::kRemote: return "NFS3ERR_REMOTE";
    case Nfs3Stat::kBadhandle: return "NFS3ERR_BADHANDLE";
    case Nfs3Stat::kNotSync: return "NFS3ERR_NOT_SYNC";
    case Nfs3Stat::kBadCookie: return "NFS3ERR_BAD_COOKIE";
    case Nfs3Stat::kNotsupp: return "NFS3ERR_NOTSUPP";
    case Nfs3Stat::kToosmall: return "NFS3ERR_TOOSMALL";
    case Nfs3Stat::kServerfault: return "NFS3ERR_SERVERFAULT";
    case Nfs3Stat::kBadtype: return "NFS3ERR_BADTYPE";
    case Nfs3Stat::kJukebox: return "NFS3ERR_JUKEBOX";
  }
  return "unknown nfsstat3";
}

Nfs3Stat nfs3_stat_from_errno(int err) {
  switch (err) {
    case 0: return Nfs3Stat::kOk;
    case EPERM: return Nfs3Stat::kPerm;
    case ENOENT: return Nfs3Stat::kNoent;
    case ENXIO: return Nfs3Stat::kNxio;
    case EACCES: return Nfs3Stat::kAccess;
    case EEXIST: return Nfs3Stat::kExist;
    case EXDEV: return Nfs3Stat::kXdev;
    case ENODEV: return Nfs3Stat::kNodev;
    case ENOTDIR: return Nfs3Stat::kNotdir;
    case EISDIR: return Nfs3Stat::kIsdir;
    case EINVAL: return Nfs3Stat::kInval;
    case EFBIG: return Nfs3Stat::kFbig;
    case ENOSPC: return Nfs3Stat::kNospc;
    case EROFS: return Nfs3Stat::kRofs;
    case EMLINK: return Nfs3Stat::kMlink;
    case ENAMETOOLONG: return Nfs3Stat::kNametoolong;
    case ENOTEMPTY: return Nfs3Stat::kNotempty;
    case EDQUOT: return Nfs3Stat::kDquot;
    case ESTALE: return Nfs3Stat::kStale;
    case EOPNOTSUPP: return Nfs3Stat::kNotsupp;
    case ELOOP: return Nfs3Stat::kNotdir;  // a symlink met where a directory was expected (O_NOFOLLOW)
    case EAGAIN: return Nfs3Stat::kJukebox;
    case EBADF:
    case EBADFD: return Nfs3Stat::kStale;
    default: return Nfs3Stat::kIo;
  }
}

}  // namespace tern::nfs
