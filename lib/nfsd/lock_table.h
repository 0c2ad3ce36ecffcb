// tern-nfsd's byte-range locks (what NLM clients hold), in the server's own
// table: keyed by file handle, owned by (client host name, svid, owner
// handle), with POSIX semantics between owners — shared locks overlap each
// other, an exclusive lock overlaps nothing of another owner's — and within
// one owner — a new lock replaces whatever the owner held on its bytes
// (upgrade, downgrade, split), adjacent locks of one kind merge.
//
// Why a table and not fcntl() on the server's descriptors: POSIX record
// locks belong to a process, so every client's lock would be the server's
// own and none would exclude another; OFD locks would exclude between
// descriptors but need one open descriptor per owner and file, kept for the
// lock's life, and give nothing NLM needs (blocking queues, owners by name,
// releasing a host's locks). The cost: local processes on the server do not
// see NLM clients' locks, nor the clients theirs (docs/nfs-gateway.md).
//
// A lock that cannot be granted now and whose caller will wait ("block")
// joins the file's queue of waiters; each unlock (or release of a host's
// locks) grants every waiter that no longer conflicts, in arrival order, and
// returns them so that the server can tell their clients (NLM GRANTED).
//
// Not thread-safe: the NLM server serializes every call.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tern::nfsd {

struct LockOwner {
  std::string host;  // the client's caller_name
  int32_t svid = 0;  // its process
  std::string oh;    // its owner handle (opaque)
  bool operator==(const LockOwner&) const = default;
};

// Bytes first..last, both included: last is UINT64_MAX for "to the end".
struct ByteRange {
  uint64_t first = 0;
  uint64_t last = UINT64_MAX;
  bool overlaps(const ByteRange& o) const { return first <= o.last && o.first <= last; }
  bool operator==(const ByteRange&) const = default;
  // NLM's (offset, len), len 0 meaning to the end; nullopt when the last
  // byte would be past 2^64 - 1 (the client is answered NLM4_FBIG).
  static std::optional<ByteRange> from_nlm(uint64_t offset, uint64_t len);
  // Back to (offset, len) for a TEST's holder.
  uint64_t nlm_len() const { return last == UINT64_MAX ? 0 : last - first + 1; }
};

struct HeldLock {
  LockOwner owner;
  bool exclusive = false;
  ByteRange range;
};

// A blocked request, with what the server needs to tell its client when it
// is granted (the GRANTED call repeats the client's cookie and lock).
struct Waiter {
  LockOwner owner;
  bool exclusive = false;
  ByteRange range;
  std::string fh;
  std::string cookie;
  uint64_t offset = 0, len = 0;  // as the client sent them
  sockaddr_storage peer{};       // where the LOCK came from
  sockaddr_storage local{};      // the address it came to (the callback's source)
  bool tcp = true;
};

// What lock() did.
enum class LockOutcome : uint8_t {
  kGranted,   // held now
  kDenied,    // conflicts, and the caller will not wait
  kBlocked,   // conflicts; queued, granted later by unlock()/free_host()
  kNoLocks,   // the table is full (kMaxLocks, kMaxWaiters)
};

class LockTable {
 public:
  // Bounds on what clients can make the server hold: an owner handle may
  // be 1 KiB, so at most ~20 MiB whatever the clients send.
  static constexpr size_t kMaxLocks = 8192;
  static constexpr size_t kMaxWaiters = 1024;

  // Another owner's lock that conflicts with (owner, exclusive, range) on
  // fh, if any: what TEST reports.
  std::optional<HeldLock> conflict(const std::string& fh, const LockOwner& owner, bool exclusive,
                                   const ByteRange& range) const;

  // Takes the lock, or queues w (when block) or refuses. A lock request
  // identical to a queued one replaces it (a client re-sending a blocked
  // LOCK is not queued twice); a granted one drops any queued copy.
  LockOutcome lock(const std::string& fh, const Waiter& w, bool block);
  // Releases the owner's locks on range (splitting what extends past it);
  // returns the waiters this granted.
  std::vector<Waiter> unlock(const std::string& fh, const LockOwner& owner, const ByteRange& range);
  // Removes a queued request that matches exactly; false when none was.
  bool cancel(const std::string& fh, const LockOwner& owner, bool exclusive, const ByteRange& range);
  // Everything `host` held or waited for goes; returns the waiters this granted.
  std::vector<Waiter> free_host(const std::string& host);
  // Whether `host` holds or waits for anything (a walk of every file: for
  // the control path's "was that its last lock?", not per byte range).
  bool holds_any(const std::string& host) const;

  // For tests and counters.
  std::vector<HeldLock> held(const std::string& fh) const;
  size_t lock_count() const { return nlocks_; }
  size_t waiter_count() const { return nwaiters_; }

 private:
  struct File {
    std::vector<HeldLock> locks;
    std::vector<Waiter> waiters;  // arrival order
  };
  void apply(File& f, const LockOwner& owner, bool exclusive, const ByteRange& range);
  void remove(File& f, const LockOwner& owner, const ByteRange& range);
  std::optional<HeldLock> conflict_in(const File& f, const LockOwner& owner, bool exclusive,
                                      const ByteRange& range) const;
  void wake(File& f, std::vector<Waiter>* granted);
  // Brings the counts up to date after a change to one file, and drops
  // the file once nothing is held or queued on it.
  void settle(std::map<std::string, File>::iterator it, size_t locks_before, size_t waiters_before);

  std::map<std::string, File> files_;
  size_t nlocks_ = 0;
  size_t nwaiters_ = 0;
};

}  // namespace tern::nfsd
