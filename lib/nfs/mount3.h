// The MOUNT protocol, version 3 (RFC 1813 Appendix I): how an NFSv3 client
// turns an export's path into the root file handle. Program 100005; the
// procedures a Linux client uses (NULL, MNT, UMNT, EXPORT, DUMP, UMNTALL)
// and their codecs. A server that speaks it over TCP (record marking) is
// in lib/nfsd (mountd.h).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "nfs3_types.h"
#include "../xdr/xdr.h"

namespace tern::nfs::mount3 {

inline constexpr uint32_t kProgram = 100005;
inline constexpr uint32_t kVersion = 3;

enum class Proc : uint32_t { kNull = 0, kMnt = 1, kDump = 2, kUmnt = 3, kUmntall = 4, kExport = 5 };

// mountstat3.
enum class Stat : uint32_t {
  kOk = 0,
  kPerm = 1,
  kNoent = 2,
  kIo = 5,
  kAccess = 13,
  kNotdir = 20,
  kInval = 22,
  kNametoolong = 63,
  kNotsupp = 10004,
  kServerfault = 10006,
};
const char* stat_name(Stat s);

// dirpath: string<MNTPATHLEN>; name: string<MNTNAMLEN>.
inline constexpr uint32_t kMaxPath = 1024;
inline constexpr uint32_t kMaxName = 255;

// MNT and UMNT take a dirpath. False: garbage (truncated, over 1024 bytes).
bool decode_dirpath(std::span<const uint8_t> in, std::string_view* path);
void encode_dirpath(xdr::XdrWriter& w, std::string_view path);

// mountres3: the status; for kOk the root handle and the auth flavors the
// server accepts for it.
struct MntRes {
  Stat status = Stat::kOk;
  Fh3 fh;
  std::vector<uint32_t> flavors;
};
void encode(xdr::XdrWriter& w, const MntRes& r);
bool decode(std::span<const uint8_t> in, MntRes* r);

// exports: a list of exportnode { ex_dir, ex_groups (a list of names) }.
// An empty group list means every client may mount it.
struct ExportEntry {
  std::string_view dir;
  std::vector<std::string_view> groups;
};
void encode(xdr::XdrWriter& w, std::span<const ExportEntry> exports);
// At most kMaxListEntries entries (and groups per entry): a bound on what a
// peer can make a client allocate.
inline constexpr size_t kMaxListEntries = 1024;
bool decode(std::span<const uint8_t> in, std::vector<ExportEntry>* exports);

// mountlist (DUMP): { ml_hostname, ml_directory } entries.
struct MountEntry {
  std::string_view host;
  std::string_view dir;
};
void encode(xdr::XdrWriter& w, std::span<const MountEntry> mounts);
bool decode(std::span<const uint8_t> in, std::vector<MountEntry>* mounts);

}  // namespace tern::nfs::mount3
