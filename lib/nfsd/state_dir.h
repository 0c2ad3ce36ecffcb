// The state directory of one tern-nfsd instance: the handle key, the reply
// cache, the lock holders' record (nlm-holders), and the lock that makes
// them this instance's alone.
//
// Two instances sharing a directory would share the key (each would accept
// the other's handles) and the reply-cache file (each with its own index of
// it): so open() locks STATE/lock (lock_file.h) for as long as the StateDir
// lives -- the process's life in tern-nfsd -- and a second instance on the
// same directory is refused, its error naming the holder's pid.
//
// The stored key (handle-key, 16 random bytes, 0600, made once) is never
// used to sign a handle itself: each export signs with a key derived from it
// and the export's identity (its directory and fsid), and carries an id
// derived the same way, so that a handle made for one export fails the tag
// of every other, in this instance or after the export is re-pointed
// elsewhere (export.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "nfsd/lock_file.h"
#include "base/siphash.h"

namespace tern::nfsd {

inline constexpr const char* kDefaultStateDir = "/var/lib/tern-nfsd";

class StateDir {
 public:
  // Creates `path` ("": kDefaultStateDir) with mode 0700 where missing,
  // locks it, and loads (or makes) the key. kBadState when another process
  // holds it.
  static Result<std::shared_ptr<const StateDir>> open(const std::string& path);
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;

  // The canonical path (realpath).
  const std::string& path() const { return path_; }
  std::string reply_cache_path() const { return path_ + "/reply-cache"; }
  // The NSM state and the lock holders told to reclaim after a restart
  // (lock_holders_file.h).
  std::string lock_holders_path() const { return path_ + "/nlm-holders"; }

  // What an export's handles are signed with, and the id they carry: both
  // keyed by the stored key, so that nobody without it can predict them,
  // and separated by a label so that neither tells anything of the other.
  SipKey export_key(std::string_view identity) const;
  uint32_t export_id(std::string_view identity) const;

 private:
  StateDir() = default;
  std::string path_;
  SipKey key_;
  std::unique_ptr<LockFile> lock_;
};

}  // namespace tern::nfsd
