// File attributes (RFC 7530 §5): bitmap4 and fattr4.
//
//   bitmap4 = uint32_t<>             attribute n is bit (n % 32) of word n / 32
//   fattr4  = { bitmap4 attrmask; opaque attr_vals<> }
// attr_vals holds the values of the attributes set in attrmask, in increasing
// attribute order, each in its own XDR type. Nothing says how long a value is,
// so a decoder must know every attribute the mask names: an unknown one makes
// the rest unreadable. A client asks (GETATTR) only for attributes it knows,
// and a server returns a subset of those; anything else is refused here.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "../base/result.h"
#include "nfs4_types.h"
#include "../xdr/xdr.h"

namespace tern::nfs {

// The attributes this codec decodes (RFC 7530 §5.6, §5.7 numbers).
enum class Attr : uint32_t {
  kSupportedAttrs = 0,  // bitmap4
  kType = 1,            // nfs_ftype4
  kFhExpireType = 2,    // uint32_t
  kChange = 3,          // uint64_t
  kSize = 4,            // uint64_t
  kLinkSupport = 5,     // bool
  kSymlinkSupport = 6,  // bool
  kNamedAttr = 7,       // bool
  kFsid = 8,            // { uint64_t major; uint64_t minor; }
  kUniqueHandles = 9,   // bool
  kLeaseTime = 10,      // uint32_t seconds
  kRdattrError = 11,    // nfsstat4
  kFilehandle = 19,     // nfs_fh4
  kFileid = 20,         // uint64_t
  kMaxread = 30,        // uint64_t: largest READ count the server takes
  kMaxwrite = 31,       // uint64_t: largest WRITE count
  kMode = 33,           // uint32_t
  kNumlinks = 35,       // uint32_t
  kOwner = 36,          // utf8str_mixed
  kOwnerGroup = 37,     // utf8str_mixed
  kSpaceUsed = 45,      // uint64_t bytes
  kTimeAccess = 47,     // nfstime4
  kTimeMetadata = 52,   // nfstime4
  kTimeModify = 53,     // nfstime4
};

// A set of attributes numbered below 64 (every attribute above is one this
// codec does not know).
class AttrSet {
 public:
  constexpr AttrSet() = default;
  constexpr AttrSet(std::initializer_list<Attr> attrs) {
    for (Attr a : attrs) add(a);
  }
  constexpr void add(Attr a) { bits_ |= uint64_t{1} << static_cast<uint32_t>(a); }
  constexpr bool has(Attr a) const { return (bits_ >> static_cast<uint32_t>(a)) & 1; }
  constexpr uint64_t bits() const { return bits_; }
  constexpr bool empty() const { return bits_ == 0; }
  static constexpr AttrSet from_bits(uint64_t b) {
    AttrSet s;
    s.bits_ = b;
    return s;
  }
  // Every attribute above, the ones decode_fattr4 can read.
  static AttrSet known();
  bool operator==(const AttrSet&) const = default;

 private:
  uint64_t bits_ = 0;
};

// The most bitmap4 words a decoder reads: RFC 7530 defines attributes up to
// 55, RFC 7862 up to 82; a longer mask is garbage.
inline constexpr uint32_t kMaxBitmapWords = 8;

// Writes s as a bitmap4 with no trailing zero words (RFC 7530 §3.3.7 allows
// either; fewer words are what the Linux client sends).
void put_bitmap4(xdr::XdrWriter& w, AttrSet s);
// Reads a bitmap4. Bits 64 and up set: kRemoteError (attributes this codec
// does not know), as is a mask of more than kMaxBitmapWords words.
Status get_bitmap4(xdr::XdrReader& r, AttrSet* out);

struct NfsTime {
  int64_t seconds = 0;
  uint32_t nseconds = 0;
};

struct Fsid {
  uint64_t major = 0, minor = 0;
};

// Decoded attributes; only those in `present` hold values. Strings are views
// into the decoded buffer.
struct Fattr4 {
  AttrSet present;
  AttrSet supported_attrs;
  FileType type = FileType::kReg;
  uint32_t fh_expire_type = 0;
  uint64_t change = 0;
  uint64_t size = 0;
  bool link_support = false, symlink_support = false, named_attr = false;
  Fsid fsid;
  bool unique_handles = false;
  uint32_t lease_time = 0;
  uint32_t rdattr_error = 0;
  FileHandle filehandle;
  uint64_t fileid = 0;
  uint64_t maxread = 0, maxwrite = 0;
  uint32_t mode = 0, numlinks = 0;
  std::string_view owner, owner_group;
  uint64_t space_used = 0;
  NfsTime time_access, time_metadata, time_modify;
};

// owner and owner_group are at most this long (Linux: IDMAP_NAMESZ is 128;
// a bound keeps a hostile length from meaning anything).
inline constexpr uint32_t kMaxOwnerSize = 1024;

// Reads a fattr4. kRemoteError when it is truncated, names an attribute this
// codec does not know, a value is malformed (a bool other than 0/1, a file
// handle over 128 bytes, a string over kMaxOwnerSize), or attr_vals holds
// bytes after the last value.
Status decode_fattr4(xdr::XdrReader& r, Fattr4* out);

}  // namespace tern::nfs
