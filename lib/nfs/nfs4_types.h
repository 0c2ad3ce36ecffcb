// NFSv4.0 basic data types (RFC 7530 §2.2, §3.3): file handles, stateids,
// write verifiers, file types, write stability.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace tern::nfs {

// nfs_fh4: opaque<NFS4_FHSIZE>. Servers choose its bytes; clients only copy it.
inline constexpr uint32_t kFhSize = 128;

struct FileHandle {
  uint32_t len = 0;
  uint8_t data[kFhSize] = {};

  std::span<const uint8_t> bytes() const { return {data, len}; }
  // False (nothing stored) when b is over kFhSize bytes.
  bool assign(std::span<const uint8_t> b) {
    if (b.size() > kFhSize) return false;
    len = static_cast<uint32_t>(b.size());
    if (len != 0) std::memcpy(data, b.data(), len);
    return true;
  }
  bool operator==(const FileHandle& o) const { return len == o.len && std::memcmp(data, o.data, len) == 0; }
};

// stateid4: seqid + 12 opaque bytes.
inline constexpr uint32_t kStateidOtherSize = 12;

struct Stateid {
  uint32_t seqid = 0;
  uint8_t other[kStateidOtherSize] = {};

  // RFC 7530 §9.1.4.3, the two special stateids a client may use without
  // any OPEN:
  // - anonymous (all zeros): "no state"; READ and WRITE are checked against
  //   share reservations. Linux nfsd answers NFS4ERR_GRACE to it while its
  //   grace period runs (fs/nfsd/nfs4state.c, check_special_stateids).
  static Stateid anonymous() { return Stateid{}; }
  // - READ bypass (all ones): READ may bypass share reservations and is
  //   allowed even during the grace period. Valid for READ only.
  static Stateid read_bypass() {
    Stateid s;
    s.seqid = 0xffffffffu;
    std::memset(s.other, 0xff, sizeof s.other);
    return s;
  }
  bool operator==(const Stateid& o) const {
    return seqid == o.seqid && std::memcmp(other, o.other, sizeof other) == 0;
  }
};

// verifier4: what a server returns from WRITE and COMMIT; a change means it
// restarted and uncommitted writes must be sent again.
inline constexpr uint32_t kVerifierSize = 8;
struct Verifier {
  uint8_t data[kVerifierSize] = {};
  bool operator==(const Verifier& o) const { return std::memcmp(data, o.data, sizeof data) == 0; }
};

// nfs_ftype4.
enum class FileType : uint32_t {
  kReg = 1,
  kDir = 2,
  kBlk = 3,
  kChr = 4,
  kLnk = 5,
  kSock = 6,
  kFifo = 7,
  kAttrDir = 8,
  kNamedAttr = 9,
};
const char* file_type_name(FileType t);

// stable_how4: how far a WRITE must have gone before the server answers.
enum class StableHow : uint32_t { kUnstable = 0, kDataSync = 1, kFileSync = 2 };

}  // namespace tern::nfs
