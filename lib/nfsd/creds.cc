#include "nfsd/creds.h"

#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

bool Cred::operator==(const Cred& o) const {
  return uid == o.uid && gid == o.gid && ngroups == o.ngroups &&
         std::memcmp(groups, o.groups, ngroups * sizeof groups[0]) == 0;
}

bool Cred::in_group(uint32_t g) const {
  if (g == gid) return true;
  for (uint32_t i = 0; i < ngroups; ++i)
    if (groups[i] == g) return true;
  return false;
}

Cred cred_from_call(std::span<const uint8_t> rpc_header, const SquashPolicy& p) {
  Cred anon;
  anon.uid = p.anon_uid;
  anon.gid = p.anon_gid;
  oncrpc::CallHeader h;
  if (oncrpc::decode_call(rpc_header, &h).status != oncrpc::CallDecodeStatus::kOk) return anon;
  if (h.cred.flavor != oncrpc::AuthFlavor::kSys || p.all_squash) return anon;
  Cred c;
  c.uid = h.sys.uid;
  c.gid = h.sys.gid;
  // At most 16 groups: the decoder refuses more (RFC 5531's authsys_parms),
  // the min() keeps this function safe on its own.
  const uint32_t n = std::min<uint32_t>(h.sys.ngids, 16);
  // (uid_t)-1 is no identity to Linux: setfsuid(-1) only asks, chown(-1)
  // changes nothing, setgroups() refuses it. An id the kernel cannot act as
  // is the anonymous one (as knfsd maps an invalid kuid to the export's
  // anonymous id), so it never reaches a switch that half-fails.
  if (c.uid == kNoId) c.uid = p.anon_uid;
  if (c.gid == kNoId) c.gid = p.anon_gid;
  for (uint32_t i = 0; i < n; ++i)
    if (h.sys.gids[i] != kNoId) c.groups[c.ngroups++] = h.sys.gids[i];
  if (p.root_squash) {
    if (c.uid == 0) c.uid = p.anon_uid;
    if (c.gid == 0) c.gid = p.anon_gid;
    for (uint32_t i = 0; i < c.ngroups; ++i)
      if (c.groups[i] == 0) c.groups[i] = p.anon_gid;
  }
  return c;
}

bool acts_as_valid_ids(const Cred& c) {
  if (c.uid == kNoId || c.gid == kNoId || c.ngroups > 16) return false;
  for (uint32_t i = 0; i < c.ngroups; ++i)
    if (c.groups[i] == kNoId) return false;
  return true;
}

namespace {

// The thread's file-system identity as the kernel holds it now: fsuid and
// fsgid (setfs*id(-1) changes nothing and returns the current value) and
// the supplementary groups (the raw system call: this thread's own).
bool thread_is(uint32_t uid, uint32_t gid, const gid_t* groups, uint32_t ngroups) {
  if (static_cast<uint32_t>(setfsuid(static_cast<uid_t>(-1))) != uid ||
      static_cast<uint32_t>(setfsgid(static_cast<gid_t>(-1))) != gid)
    return false;
  gid_t now[kMaxGroups + 1];
  long n = syscall(SYS_getgroups, static_cast<long>(kMaxGroups + 1), now);
  if (n < 0 || static_cast<uint32_t>(n) != ngroups) return false;
  // setgroups() keeps the list sorted, so compare as sets.
  for (uint32_t i = 0; i < ngroups; ++i)
    if (std::find(now, now + n, groups[i]) == now + n) return false;
  return true;
}

}  // namespace

Status ThreadCreds::become(const Cred& c) {
  if (poisoned_) return make_error(Errc::kInternal, "this thread's identity is unknown; it acts for no one");
  // Refused before anything changes: the thread stays what it was, and
  // knows it.
  if (!acts_as_valid_ids(c))
    return make_error(Errc::kInvalidArgument, "uid %u gid %u (or one of its %u groups) is no identity", c.uid,
                      c.gid, c.ngroups);
  if (c.uid == 0 && c.gid == 0 && c.ngroups == 0) return become_root();
  if (!root_ && c == cur_) return Status::ok();
  gid_t gs[kMaxGroups];
  for (uint32_t i = 0; i < c.ngroups; ++i) gs[i] = c.groups[i];
  // From here on a failure leaves the thread half-switched: fail() takes it
  // back to root (or marks it unusable) before this returns, so the next
  // job never runs under a mix of two callers' ids.
  auto fail = [&](Status s) {
    reset();
    return s;
  };
  // Groups and gid first: once fsuid is not 0 the thread may no longer change them.
  if (!root_) (void)setfsuid(0);
  root_ = false;  // not root and not cur_ either, until the switch is checked
  if (syscall(SYS_setgroups, static_cast<size_t>(c.ngroups), gs) != 0)
    return fail(make_sys_error(Errc::kInternal, errno, "setgroups (is it running as root?)"));
  (void)setfsgid(c.gid);
  (void)setfsuid(c.uid);
  // setfs*id() returns the previous value whatever happens: ask the kernel
  // what the thread is now, groups included.
  if (!thread_is(c.uid, c.gid, gs, c.ngroups))
    return fail(make_error(Errc::kInternal, "cannot act as uid %u gid %u (is it running as root?)", c.uid,
                           c.gid));
  cur_ = c;
  return Status::ok();
}

Status ThreadCreds::become_root() {
  if (poisoned_) return make_error(Errc::kInternal, "this thread's identity is unknown; it acts for no one");
  if (root_) return Status::ok();
  reset();
  if (poisoned_) return make_error(Errc::kInternal, "cannot act as root again");
  return Status::ok();
}

void ThreadCreds::reset() {
  (void)setfsuid(0);
  (void)setfsgid(0);
  bool ok = syscall(SYS_setgroups, size_t{0}, nullptr) == 0;
  ok = ok && thread_is(0, 0, nullptr, 0);
  root_ = ok;
  cur_ = Cred{};
  // A thread that cannot even go back to root is in a state nobody can
  // name: it refuses every job from now on rather than guess.
  poisoned_ = !ok;
}

}  // namespace tern::nfsd
