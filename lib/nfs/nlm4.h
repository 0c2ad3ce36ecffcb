// The Network Lock Manager protocol, version 4 (program 100021; RFC 1813
// Appendix II with the XNFS/Open Group definitions of version 3 it
// extends): byte-range locks on NFSv3 files, 64-bit offsets and lengths.
// The codecs for every procedure a server receives and the GRANTED call it
// sends back to a client whose blocked lock it granted. A server that
// speaks it is in lib/nfsd (nlm_server.h).
//
// Decoding never allocates: names and netobjs are views into the caller's
// buffer. Every length is bounded as the protocol bounds it (netobj 1024,
// caller_name 1024), file handles by NFSv3's 64.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "../xdr/xdr.h"

namespace tern::nfs::nlm4 {

inline constexpr uint32_t kProgram = 100021;
inline constexpr uint32_t kVersion = 4;

enum class Proc : uint32_t {
  kNull = 0,
  kTest = 1,
  kLock = 2,
  kCancel = 3,
  kUnlock = 4,
  kGranted = 5,  // server to client: a blocked lock is now held
  // The asynchronous forms: the answer comes back as a call of the _RES
  // procedure to the caller's own NLM service.
  kTestMsg = 6,
  kLockMsg = 7,
  kCancelMsg = 8,
  kUnlockMsg = 9,
  kGrantedMsg = 10,
  kTestRes = 11,
  kLockRes = 12,
  kCancelRes = 13,
  kUnlockRes = 14,
  kGrantedRes = 15,
  kShare = 20,
  kUnshare = 21,
  // Not in the protocol: where the host's rpc.statd calls the lock manager
  // back when a monitored host rebooted (its SM_MON names program 100021,
  // the only one nfs-utils' statd calls back, version 4, this procedure;
  // the argument is NSM's "status"). Linux's lockd uses the same number.
  kNsmNotify = 16,
  kNmLock = 22,   // LOCK without status monitoring (no NSM)
  kFreeAll = 23,  // release everything a host held (its NSM says it rebooted)
};
const char* proc_name(uint32_t proc);

// nlm4_stats.
enum class Stat : uint32_t {
  kGranted = 0,
  kDenied = 1,
  kDeniedNolocks = 2,
  kBlocked = 3,
  kDeniedGracePeriod = 4,
  kDeadlck = 5,
  kRofs = 6,
  kStaleFh = 7,
  kFbig = 8,
  kFailed = 9,
};
const char* stat_name(Stat s);

// netobj: opaque<MAXNETOBJ_SZ>; caller_name: string<LM_MAXSTRLEN>;
// nlm4_notify's name: string<LM_MAXNAMELEN>.
inline constexpr size_t kMaxNetobj = 1024;
inline constexpr size_t kMaxCallerName = 1024;
inline constexpr size_t kMaxNotifyName = 1025;
// The file handle in a lock is an NFSv3 handle: at most 64 bytes.
inline constexpr size_t kMaxFh = 64;

// nlm4_lock: whose lock, on which file, which bytes. l_len 0 means "to the
// end of the file, whatever it becomes".
struct Lock {
  std::string_view caller_name;
  std::span<const uint8_t> fh;
  std::span<const uint8_t> oh;  // the owner's handle, opaque to the server
  int32_t svid = 0;             // the owner's id on its host (a pid on Linux)
  uint64_t offset = 0;
  uint64_t len = 0;
};

// nlm4_holder: who holds a lock that denied a TEST.
struct Holder {
  bool exclusive = false;
  int32_t svid = 0;
  std::span<const uint8_t> oh;
  uint64_t offset = 0;
  uint64_t len = 0;
};

struct TestArgs {  // TEST, and GRANTED (server to client)
  std::span<const uint8_t> cookie;
  bool exclusive = false;
  Lock lock;
};
struct LockArgs {  // LOCK, NM_LOCK
  std::span<const uint8_t> cookie;
  bool block = false;
  bool exclusive = false;
  Lock lock;
  bool reclaim = false;
  int32_t state = 0;  // the client's NSM state
};
struct CancArgs {  // CANCEL
  std::span<const uint8_t> cookie;
  bool block = false;
  bool exclusive = false;
  Lock lock;
};
struct UnlockArgs {  // UNLOCK
  std::span<const uint8_t> cookie;
  Lock lock;
};
struct ShareArgs {  // SHARE, UNSHARE (DOS share reservations)
  std::span<const uint8_t> cookie;
  std::string_view caller_name;
  std::span<const uint8_t> fh;
  std::span<const uint8_t> oh;
  uint32_t mode = 0;
  uint32_t access = 0;
  bool reclaim = false;
};
struct Notify {  // FREE_ALL
  std::string_view name;
  int32_t state = 0;
};
struct Res {  // nlm4_res: LOCK, CANCEL, UNLOCK, GRANTED; GRANTED_RES's argument
  std::span<const uint8_t> cookie;
  Stat stat = Stat::kGranted;
};
struct TestRes {  // nlm4_testres
  std::span<const uint8_t> cookie;
  Stat stat = Stat::kGranted;
  Holder holder;  // when stat is kDenied
};
struct ShareRes {
  std::span<const uint8_t> cookie;
  Stat stat = Stat::kGranted;
  int32_t sequence = 0;
};

// Each false when the arguments are garbage (truncated, a length over its
// bound, a bool that is not 0 or 1): the server answers GARBAGE_ARGS.
bool decode(std::span<const uint8_t> in, TestArgs* a);
bool decode(std::span<const uint8_t> in, LockArgs* a);
bool decode(std::span<const uint8_t> in, CancArgs* a);
bool decode(std::span<const uint8_t> in, UnlockArgs* a);
bool decode(std::span<const uint8_t> in, ShareArgs* a);
bool decode(std::span<const uint8_t> in, Notify* a);
bool decode(std::span<const uint8_t> in, Res* r);
bool decode(std::span<const uint8_t> in, TestRes* r);

void encode(xdr::XdrWriter& w, const TestArgs& a);
void encode(xdr::XdrWriter& w, const LockArgs& a);
void encode(xdr::XdrWriter& w, const CancArgs& a);
void encode(xdr::XdrWriter& w, const UnlockArgs& a);
void encode(xdr::XdrWriter& w, const Notify& a);
void encode(xdr::XdrWriter& w, const Res& r);
void encode(xdr::XdrWriter& w, const TestRes& r);
void encode(xdr::XdrWriter& w, const ShareRes& r);

}  // namespace tern::nfs::nlm4
