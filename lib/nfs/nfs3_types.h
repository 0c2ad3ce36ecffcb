// NFS version 3 (RFC 1813): procedure numbers, nfsstat3 and the basic data
// types every procedure's arguments and results are made of -- file
// handles, times, attributes (fattr3), weak cache consistency data, the
// attributes a client may set (sattr3). Encoding and decoding are in
// nfs3_xdr.h (the types), nfs3_args.h (arguments) and nfs3_res.h (results).
//
// File types and write stability have the same values in versions 3 and 4:
// FileType and StableHow (nfs4_types.h) serve both.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "nfs4_types.h"

namespace tern::nfs {

// RFC 1813 §3.3: the procedures of program 100003 version 3 (kNfsV3).
enum class Nfs3Proc : uint32_t {
  kNull = 0,
  kGetattr = 1,
  kSetattr = 2,
  kLookup = 3,
  kAccess = 4,
  kReadlink = 5,
  kRead = 6,
  kWrite = 7,
  kCreate = 8,
  kMkdir = 9,
  kSymlink = 10,
  kMknod = 11,
  kRemove = 12,
  kRmdir = 13,
  kRename = 14,
  kLink = 15,
  kReaddir = 16,
  kReaddirplus = 17,
  kFsstat = 18,
  kFsinfo = 19,
  kPathconf = 20,
  kCommit = 21,
};
inline constexpr uint32_t kNfs3ProcCount = 22;
const char* nfs3_proc_name(Nfs3Proc p);

// nfsstat3 (RFC 1813 §2.6).
enum class Nfs3Stat : uint32_t {
  kOk = 0,
  kPerm = 1,
  kNoent = 2,
  kIo = 5,
  kNxio = 6,
  kAccess = 13,
  kExist = 17,
  kXdev = 18,
  kNodev = 19,
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
  kRemote = 71,
  kBadhandle = 10001,
  kNotSync = 10002,
  kBadCookie = 10003,
  kNotsupp = 10004,
  kToosmall = 10005,
  kServerfault = 10006,
  kBadtype = 10007,
  kJukebox = 10008,
};
const char* nfs3_stat_name(Nfs3Stat s);
// The status a server answers for a system call's errno (what Linux nfsd's
// nfserrno() maps); anything it does not know is NFS3ERR_IO.
Nfs3Stat nfs3_stat_from_errno(int err);

// nfs_fh3: opaque<NFS3_FHSIZE>. The server chooses its bytes; a client only
// copies them.
inline constexpr uint32_t kFh3Size = 64;

struct Fh3 {
  uint32_t len = 0;
  uint8_t data[kFh3Size] = {};

  std::span<const uint8_t> bytes() const { return {data, len}; }
  // False (nothing stored) when b is over kFh3Size bytes.
  bool assign(std::span<const uint8_t> b) {
    if (b.size() > kFh3Size) return false;
    len = static_cast<uint32_t>(b.size());
    if (len != 0) std::memcpy(data, b.data(), len);
    return true;
  }
  bool operator==(const Fh3& o) const { return len == o.len && std::memcmp(data, o.data, len) == 0; }
};

// nfstime3.
struct NfsTime3 {
  uint32_t seconds = 0;
  uint32_t nseconds = 0;
  bool operator==(const NfsTime3&) const = default;
};

// fattr3: what GETATTR returns and most results carry as post_op_attr.
struct Fattr3 {
  FileType type = FileType::kReg;
  uint32_t mode = 0;  // permission bits, setuid/setgid/sticky (07777)
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t used = 0;  // bytes of storage used
  uint32_t rdev_major = 0, rdev_minor = 0;
  uint64_t fsid = 0;
  uint64_t fileid = 0;
  NfsTime3 atime, mtime, ctime;
  bool operator==(const Fattr3&) const = default;
};

// wcc_attr: the attributes before an operation that changed an object.
struct WccAttr {
  uint64_t size = 0;
  NfsTime3 mtime, ctime;
  bool operator==(const WccAttr&) const = default;
};

// time_how.
enum class TimeHow : uint32_t { kDontChange = 0, kServerTime = 1, kClientTime = 2 };

// sattr3: what SETATTR, CREATE, MKDIR, SYMLINK and MKNOD set.
struct Sattr3 {
  bool set_mode = false;
  uint32_t mode = 0;
  bool set_uid = false;
  uint32_t uid = 0;
  bool set_gid = false;
  uint32_t gid = 0;
  bool set_size = false;
  uint64_t size = 0;
  TimeHow atime_how = TimeHow::kDontChange;
  NfsTime3 atime;
  TimeHow mtime_how = TimeHow::kDontChange;
  NfsTime3 mtime;
  bool any() const {
    return set_mode || set_uid || set_gid || set_size || atime_how != TimeHow::kDontChange ||
           mtime_how != TimeHow::kDontChange;
  }
};

// ACCESS bits (RFC 1813 §3.3.4).
inline constexpr uint32_t kAccessRead = 0x01;
inline constexpr uint32_t kAccessLookup = 0x02;
inline constexpr uint32_t kAccessModify = 0x04;
inline constexpr uint32_t kAccessExtend = 0x08;
inline constexpr uint32_t kAccessDelete = 0x10;
inline constexpr uint32_t kAccessExecute = 0x20;
inline constexpr uint32_t kAccessAll = 0x3f;

// FSINFO properties (RFC 1813 §3.3.19).
inline constexpr uint32_t kFsfLink = 0x01;
inline constexpr uint32_t kFsfSymlink = 0x02;
inline constexpr uint32_t kFsfHomogeneous = 0x08;
inline constexpr uint32_t kFsfCanSetTime = 0x10;

// createmode3.
enum class CreateMode : uint32_t { kUnchecked = 0, kGuarded = 1, kExclusive = 2 };

// cookieverf3, createverf3 and writeverf3 are all 8 opaque bytes.
inline constexpr uint32_t kNfs3VerfSize = 8;
struct Verf3 {
  uint8_t data[kNfs3VerfSize] = {};
  bool operator==(const Verf3& o) const { return std::memcmp(data, o.data, sizeof data) == 0; }
};

// Bounds a server puts on strings a peer sends: filename3 and nfspath3 are
// unbounded in the XDR (string<>); these are Linux's NAME_MAX and PATH_MAX.
// A decoder accepts up to kNfs3MaxPath for either, so that a name that is
// merely too long gets NFS3ERR_NAMETOOLONG rather than GARBAGE_ARGS.
inline constexpr uint32_t kNfs3MaxName = 255;
inline constexpr uint32_t kNfs3MaxPath = 4096;

}  // namespace tern::nfs
