// What tern-nfsd keeps on stable storage so that, after it restarts, the
// clients whose locks died with it are told to reclaim them (the job the
// host's statd does with /var/lib/nfs/sm and its state file when the host
// reboots; tern-nfsd restarts alone, so it keeps its own):
//   - its NSM state number, made larger at every start and odd while it
//     runs (even once it stopped cleanly), as statd numbers host reboots:
//     a client's statd passes on a notification only when the number
//     differs from the last it saw from us;
//   - the clients that hold locks, or held them when tern-nfsd stopped,
//     each with the address of ours it sent its locks to: its lock manager
//     watches us under that name, and a notification has to name us so.
//
// One small text file in the state directory (state_dir.h), replaced whole
// (written beside, synced, renamed) so that a crash leaves the old list or
// the new one, never half of one:
//   # tern-nfsd NSM state and lock holders
//   state 3
//   holder 10.0.0.7 10.0.0.1
// At most kMaxLockHolders holders: past that a new client is not recorded
// (and the caller says so), so that clients cannot grow the file without
// bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace tern::nfsd {

inline constexpr size_t kMaxLockHolders = 4096;

struct LockHolder {
  std::string client;  // its address, as text
  std::string server;  // ours that it locked through, as text ("" unknown)
  bool operator==(const LockHolder&) const = default;
};

struct LockHolders {
  int32_t state = 0;  // 0: never started
  std::vector<LockHolder> holders;
};

// The file at `path`: empty (state 0) when there is none; kInvalidArgument
// naming the line for one that is not as save() writes it (an address that
// is not one, a number out of range, too many holders).
Result<LockHolders> load_lock_holders(const std::string& path);
// Replaces the file atomically (path.new, fsync, rename, fsync of the
// directory).
Status save_lock_holders(const std::string& path, const LockHolders& h);

// The state to run under after `last` (the stored one): larger, and odd.
int32_t next_running_state(int32_t last);

}  // namespace tern::nfsd
