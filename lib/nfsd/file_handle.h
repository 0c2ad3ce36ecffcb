// tern-nfsd's NFSv3 file handles: the kernel's own handle for the object
// (name_to_handle_at), which stays valid across a server restart as long as
// the object exists, wrapped with the export's id and a SipHash-2-4 tag
// under a key only the server knows (kept in its state directory, so it
// survives restarts too).
//
//   byte 0       version (1)
//   byte 1       n: bytes of the kernel handle (at most kMaxKernelHandle)
//   bytes 2-3    the kernel handle's type (big-endian)
//   bytes 4-7    the export's id (big-endian)
//   bytes 8..    the kernel handle (n bytes)
//   last 8       SipHash-2-4 of everything before, under the key
//
// open_by_handle_at() opens any object of a file system from its kernel
// handle, inside the exported directory or not: the tag is what keeps a
// client to the objects the server showed it (through MOUNT, LOOKUP,
// CREATE, READDIRPLUS ...), all of which lie beneath the export's root.
// A made-up or altered handle fails the tag and is NFS3ERR_BADHANDLE; one
// whose export id is not this export's is NFS3ERR_STALE (it names another
// export, or one no longer served), whatever its tag. Each export signs
// with a key of its own (state_dir.h), so a handle relabelled with another
// export's id fails that export's tag.
#pragma once

#include <cstdint>
#include <span>

#include "nfs/nfs3_types.h"
#include "base/siphash.h"

namespace tern::nfsd {

inline constexpr uint32_t kFhVersion = 1;
inline constexpr uint32_t kFhHeader = 8;
inline constexpr uint32_t kFhTag = 8;
// What fits in 64 bytes with the header and the tag. ext4, XFS, tmpfs and
// btrfs (without the parent) all use 8 to 20 bytes.
inline constexpr uint32_t kMaxKernelHandle = nfs::kFh3Size - kFhHeader - kFhTag;

struct KernelHandle {
  uint32_t type = 0;
  uint32_t len = 0;
  uint8_t bytes[kMaxKernelHandle] = {};
};

class FhCodec {
 public:
  FhCodec(const SipKey& key, uint32_t export_id) : key_(key), export_id_(export_id) {}
  // False when the kernel's handle does not fit (or its type is over 16 bits).
  bool encode(const KernelHandle& kh, nfs::Fh3* out) const;
  // kOk with *kh filled; kBadhandle for anything this server did not make
  // (wrong length, version or tag); kStale for one naming another export.
  nfs::Nfs3Stat decode(const nfs::Fh3& fh, KernelHandle* kh) const;

 private:
  SipKey key_;
  uint32_t export_id_;
};

}  // namespace tern::nfsd
