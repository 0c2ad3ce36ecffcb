// Who a call acts as, and making this thread act as it.
//
// Cred is the caller's identity from the call's AUTH_SYS credential (RFC
// 5531), squashed as the export says: with root_squash uid 0 and gid 0 (in
// the groups too) become the anonymous ids; with all_squash everyone does;
// AUTH_NONE and any flavor other than AUTH_SYS are anonymous.
//
// ThreadCreds switches the calling thread's file-system identity (fsuid,
// fsgid, supplementary groups: per-thread in Linux, through the raw system
// calls -- glibc's setgroups() would change every thread) so that the
// kernel checks permissions and sets ownership as it would for the caller:
// creating, removing, renaming, linking, changing modes, owners and times.
// It switches only when the identity changes. A thread acting as someone
// other than root loses CAP_DAC_READ_SEARCH, which open_by_handle_at()
// needs: become_root() first.
#pragma once

#include <cstdint>
#include <span>

#include "base/result.h"

namespace tern::nfsd {

// (uid_t)-1 / (gid_t)-1: "no id" to the kernel's set*id and chown calls.
inline constexpr uint32_t kNoId = 0xffffffffu;
inline constexpr uint32_t kMaxGroups = 16;  // AUTH_SYS's limit

struct SquashPolicy {
  bool root_squash = true;
  bool all_squash = false;
  uint32_t anon_uid = 65534, anon_gid = 65534;
};

struct Cred {
  uint32_t uid = 65534, gid = 65534;
  uint32_t ngroups = 0;
  uint32_t groups[kMaxGroups] = {};
  bool operator==(const Cred& o) const;
  bool in_group(uint32_t g) const;
};

// From a call's ONC RPC header (ServerCall::rpc_header()). A header that
// does not decode gives the anonymous identity (the engine has decoded it
// already, so this does not happen). A uid or gid of (uid_t)-1 is the
// anonymous one and a group of -1 is dropped: the kernel cannot act as -1.
Cred cred_from_call(std::span<const uint8_t> rpc_header, const SquashPolicy& p);

// Whether a thread can act as c: no id is -1, at most 16 groups.
bool acts_as_valid_ids(const Cred& c);

// Fails closed: an identity it cannot act as is refused before anything
// changes; a switch that fails half-way takes the thread back to root
// before become() returns, and a thread that cannot get back to root
// refuses every later switch. So whatever a call did, the next one never
// runs under the previous caller's ids mixed with another's, nor as root
// while this object believes otherwise: every switch is checked against
// what the kernel says the thread is (fsuid, fsgid and groups).
class ThreadCreds {
 public:
  // As root (the process's own identity). Needs CAP_SETUID and CAP_SETGID.
  Status become(const Cred& c);
  Status become_root();
  bool is_root() const { return root_; }
  // True once the thread could not be brought back to root.
  bool poisoned() const { return poisoned_; }

 private:
  void reset();

  bool root_ = true;
  bool poisoned_ = false;
  Cred cur_;
};

}  // namespace tern::nfsd
