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

struct SquashPolicy {
  bool root_squash = true;
  bool all_squash = false;
  uint32_t anon_uid = 65534, anon_gid = 65534;
};

struct Cred {
  uint32_t uid = 65534, gid = 65534;
  uint32_t ngroups = 0;
  uint32_t groups[16] = {};
  bool operator==(const Cred& o) const;
  bool in_group(uint32_t g) const;
};

// From a call's ONC RPC header (ServerCall::rpc_header()). A header that
// does not decode gives the anonymous identity (the engine has decoded it
// already, so this does not happen).
Cred cred_from_call(std::span<const uint8_t> rpc_header, const SquashPolicy& p);

class ThreadCreds {
 public:
  // As root (the process's own identity). Needs CAP_SETUID and CAP_SETGID.
  Status become(const Cred& c);
  Status become_root();
  bool is_root() const { return root_; }

 private:
  bool root_ = true;
  Cred cur_;
};

}  // namespace tern::nfsd
