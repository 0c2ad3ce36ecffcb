// nfsstat4 (RFC 7530 §13.1): the status of a COMPOUND and of each operation
// in it. A server stops a COMPOUND at the first operation that fails and
// returns that operation's status as the COMPOUND's too.
#pragma once

#include <cstdint>

#include "../base/result.h"

namespace tern::nfs {

enum class Nfs4Stat : uint32_t {
  kOk = 0,
  kPerm = 1,
  kNoent = 2,
  kIo = 5,
  kNxio = 6,
  kAccess = 13,
  kExist = 17,
  kXdev = 18,
  kNotdir = 20,
  kIsdir = 21,
  kInval = 22,
  kFbig = 27,
  kNospc = 28,
  kRofs = 30,
  kMlink = 31,
  kNametoolong = 63,
  kNotempty = 66,
  kDquot = 69,
  kStale = 70,
  kBadhandle = 10001,
  kBadCookie = 10003,
  kNotsupp = 10004,
  kToosmall = 10005,
  kServerfault = 10006,
  kBadtype = 10007,
  kDelay = 10008,
  kSame = 10009,
  kDenied = 10010,
  kExpired = 10011,
  kLocked = 10012,
  kGrace = 10013,
  kFhexpired = 10014,
  kShareDenied = 10015,
  kWrongsec = 10016,
  kClidInuse = 10017,
  kResource = 10018,
  kMoved = 10019,
  kNofilehandle = 10020,
  kMinorVersMismatch = 10021,
  kStaleClientid = 10022,
  kStaleStateid = 10023,
  kOldStateid = 10024,
  kBadStateid = 10025,
  kBadSeqid = 10026,
  kNotSame = 10027,
  kLockRange = 10028,
  kSymlink = 10029,
  kRestorefh = 10030,
  kLeaseMoved = 10031,
  kAttrnotsupp = 10032,
  kNoGrace = 10033,
  kReclaimBad = 10034,
  kReclaimConflict = 10035,
  kBadxdr = 10036,
  kLocksHeld = 10037,
  kOpenmode = 10038,
  kBadowner = 10039,
  kBadchar = 10040,
  kBadname = 10041,
  kBadRange = 10042,
  kLockNotsupp = 10043,
  kOpIllegal = 10044,
  kDeadlock = 10045,
  kFileOpen = 10046,
  kAdminRevoked = 10047,
  kCbPathDown = 10048,
};

// "NFS4_OK", "NFS4ERR_NOENT", ...; "NFS4ERR_?" for a value RFC 7530 does not
// define (a server may still send one: statuses are stored as received).
const char* nfs4_stat_name(Nfs4Stat s);

// What a caller does about a failed operation, as an Errc: kNotFound for a
// missing name, kNoResources for "try again later" (GRACE, DELAY, RESOURCE),
// kInvalidArgument for a request the server found malformed or of the wrong
// type, kRemoteError for the rest.
Errc nfs4_errc(Nfs4Stat s);

// A Status for a failed operation: "<op>: NFS4ERR_NOENT (2)".
Status nfs4_error(Nfs4Stat s, const char* op);

}  // namespace tern::nfs
