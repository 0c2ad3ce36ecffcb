#include "nfs/nfs4_status.h"

namespace tern::nfs {

const char* nfs4_stat_name(Nfs4Stat s) {
  switch (s) {
    case Nfs4Stat::kOk: return "NFS4_OK";
    case Nfs4Stat::kPerm: return "NFS4ERR_PERM";
    case Nfs4Stat::kNoent: return "NFS4ERR_NOENT";
    case Nfs4Stat::kIo: return "NFS4ERR_IO";
    case Nfs4Stat::kNxio: return "NFS4ERR_NXIO";
    case Nfs4Stat::kAccess: return "NFS4ERR_ACCESS";
    case Nfs4Stat::kExist: return "NFS4ERR_EXIST";
    case Nfs4Stat::kXdev: return "NFS4ERR_XDEV";
    case Nfs4Stat::kNotdir: return "NFS4ERR_NOTDIR";
    case Nfs4Stat::kIsdir: return "NFS4ERR_ISDIR";
    case Nfs4Stat::kInval: return "NFS4ERR_INVAL";
    case Nfs4Stat::kFbig: return "NFS4ERR_FBIG";
    case Nfs4Stat::kNospc: return "NFS4ERR_NOSPC";
    case Nfs4Stat::kRofs: return "NFS4ERR_ROFS";
    case Nfs4Stat::kMlink: return "NFS4ERR_MLINK";
    case Nfs4Stat::kNametoolong: return "NFS4ERR_NAMETOOLONG";
    case Nfs4Stat::kNotempty: return "NFS4ERR_NOTEMPTY";
    case Nfs4Stat::kDquot: return "NFS4ERR_DQUOT";
    case Nfs4Stat::kStale: return "NFS4ERR_STALE";
    case Nfs4Stat::kBadhandle: return "NFS4ERR_BADHANDLE";
    case Nfs4Stat::kBadCookie: return "NFS4ERR_BAD_COOKIE";
    case Nfs4Stat::kNotsupp: return "NFS4ERR_NOTSUPP";
    case Nfs4Stat::kToosmall: return "NFS4ERR_TOOSMALL";
    case Nfs4Stat::kServerfault: return "NFS4ERR_SERVERFAULT";
    case Nfs4Stat::kBadtype: return "NFS4ERR_BADTYPE";
    case Nfs4Stat::kDelay: return "NFS4ERR_DELAY";
    case Nfs4Stat::kSame: return "NFS4ERR_SAME";
    case Nfs4Stat::kDenied: return "NFS4ERR_DENIED";
    case Nfs4Stat::kExpired: return "NFS4ERR_EXPIRED";
    case Nfs4Stat::kLocked: return "NFS4ERR_LOCKED";
    case Nfs4Stat::kGrace: return "NFS4ERR_GRACE";
    case Nfs4Stat::kFhexpired: return "NFS4ERR_FHEXPIRED";
    case Nfs4Stat::kShareDenied: return "NFS4ERR_SHARE_DENIED";
    case Nfs4Stat::kWrongsec: return "NFS4ERR_WRONGSEC";
    case Nfs4Stat::kClidInuse: return "NFS4ERR_CLID_INUSE";
    case Nfs4Stat::kResource: return "NFS4ERR_RESOURCE";
    case Nfs4Stat::kMoved: return "NFS4ERR_MOVED";
    case Nfs4Stat::kNofilehandle: return "NFS4ERR_NOFILEHANDLE";
    case Nfs4Stat::kMinorVersMismatch: return "NFS4ERR_MINOR_VERS_MISMATCH";
    case Nfs4Stat::kStaleClientid: return "NFS4ERR_STALE_CLIENTID";
    case Nfs4Stat::kStaleStateid: return "NFS4ERR_STALE_STATEID";
    case Nfs4Stat::kOldStateid: return "NFS4ERR_OLD_STATEID";
    case Nfs4Stat::kBadStateid: return "NFS4ERR_BAD_STATEID";
    case Nfs4Stat::kBadSeqid: return "NFS4ERR_BAD_SEQID";
    case Nfs4Stat::kNotSame: return "NFS4ERR_NOT_SAME";
    case Nfs4Stat::kLockRange: return "NFS4ERR_LOCK_RANGE";
    case Nfs4Stat::kSymlink: return "NFS4ERR_SYMLINK";
    case Nfs4Stat::kRestorefh: return "NFS4ERR_RESTOREFH";
    case Nfs4Stat::kLeaseMoved: return "NFS4ERR_LEASE_MOVED";
    case Nfs4Stat::kAttrnotsupp: return "NFS4ERR_ATTRNOTSUPP";
    case Nfs4Stat::kNoGrace: return "NFS4ERR_NO_GRACE";
    case Nfs4Stat::kReclaimBad: return "NFS4ERR_RECLAIM_BAD";
    case Nfs4Stat::kReclaimConflict: return "NFS4ERR_RECLAIM_CONFLICT";
    case Nfs4Stat::kBadxdr: return "NFS4ERR_BADXDR";
    case Nfs4Stat::kLocksHeld: return "NFS4ERR_LOCKS_HELD";
    case Nfs4Stat::kOpenmode: return "NFS4ERR_OPENMODE";
    case Nfs4Stat::kBadowner: return "NFS4ERR_BADOWNER";
    case Nfs4Stat::kBadchar: return "NFS4ERR_BADCHAR";
    case Nfs4Stat::kBadname: return "NFS4ERR_BADNAME";
    case Nfs4Stat::kBadRange: return "NFS4ERR_BAD_RANGE";
    case Nfs4Stat::kLockNotsupp: return "NFS4ERR_LOCK_NOTSUPP";
    case Nfs4Stat::kOpIllegal: return "NFS4ERR_OP_ILLEGAL";
    case Nfs4Stat::kDeadlock: return "NFS4ERR_DEADLOCK";
    case Nfs4Stat::kFileOpen: return "NFS4ERR_FILE_OPEN";
    case Nfs4Stat::kAdminRevoked: return "NFS4ERR_ADMIN_REVOKED";
    case Nfs4Stat::kCbPathDown: return "NFS4ERR_CB_PATH_DOWN";
  }
  return "NFS4ERR_?";
}

Errc nfs4_errc(Nfs4Stat s) {
  switch (s) {
    case Nfs4Stat::kOk: return Errc::kOk;
    case Nfs4Stat::kNoent: return Errc::kNotFound;
    case Nfs4Stat::kGrace:
    case Nfs4Stat::kDelay:
    case Nfs4Stat::kResource: return Errc::kNoResources;
    case Nfs4Stat::kInval:
    case Nfs4Stat::kBadxdr:
    case Nfs4Stat::kBadtype:
    case Nfs4Stat::kBadname:
    case Nfs4Stat::kNametoolong:
    case Nfs4Stat::kIsdir:
    case Nfs4Stat::kNotdir:
    case Nfs4Stat::kSymlink: return Errc::kInvalidArgument;
    default: return Errc::kRemoteError;
  }
}

Status nfs4_error(Nfs4Stat s, const char* op) {
  return make_error(nfs4_errc(s), "%s: %s (%u)", op, nfs4_stat_name(s), static_cast<uint32_t>(s));
}

}  // namespace tern::nfs
