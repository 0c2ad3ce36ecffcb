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
  c.ngroups = std::min<uint32_t>(h.sys.ngids, 16);
  std::copy(h.sys.gids, h.sys.gids + c.ngroups, c.groups);
  if (p.root_squash) {
    if (c.uid == 0) c.uid = p.anon_uid;
    if (c.gid == 0) c.gid = p.anon_gid;
    for (uint32_t i = 0; i < c.ngroups; ++i)
      if (c.groups[i] == 0) c.groups[i] = p.anon_gid;
  }
  return c;
}

Status ThreadCreds::become(const Cred& c) {
  if (c.uid == 0 && c.gid == 0 && c.ngroups == 0) return become_root();
  if (!root_ && c == cur_) return Status::ok();
  gid_t gs[16];
  for (uint32_t i = 0; i < c.ngroups; ++i) gs[i] = c.groups[i];
  // Groups and gid first: once fsuid is not 0 the thread may no longer change them.
  if (!root_) (void)setfsuid(0);
  if (syscall(SYS_setgroups, static_cast<size_t>(c.ngroups), gs) != 0)
    return make_sys_error(Errc::kInternal, errno, "tern-nfsd: setgroups (is it running as root?)");
  (void)setfsgid(c.gid);
  (void)setfsuid(c.uid);
  // setfsuid() returns the previous value whatever happens: ask again.
  if (static_cast<uint32_t>(setfsuid(static_cast<uid_t>(-1))) != c.uid ||
      static_cast<uint32_t>(setfsgid(static_cast<gid_t>(-1))) != c.gid)
    return make_error(Errc::kInternal, "tern-nfsd: cannot act as uid %u gid %u (is it running as root?)", c.uid,
                      c.gid);
  cur_ = c;
  root_ = false;
  return Status::ok();
}

Status ThreadCreds::become_root() {
  if (root_) return Status::ok();
  (void)setfsuid(0);
  (void)setfsgid(0);
  if (syscall(SYS_setgroups, size_t{0}, nullptr) != 0)
    return make_sys_error(Errc::kInternal, errno, "tern-nfsd: setgroups");
  if (setfsuid(static_cast<uid_t>(-1)) != 0)
    return make_error(Errc::kInternal, "tern-nfsd: cannot act as root again");
  root_ = true;
  return Status::ok();
}

}  // namespace tern::nfsd
