// The open files behind file handles, per engine thread: opening a handle
// (open_by_handle_at) is a system call a READ or WRITE should not pay each
// time. Each entry holds the object's O_PATH descriptor and, for regular
// files once read or written, a descriptor open for I/O; least recently
// used entries are closed past the capacity.
//
// A cached descriptor keeps its object alive after the last name is
// removed. Callers check the link count they fstat anyway (an unlinked
// object's handle is stale, as nfsd says), and sweep() closes such entries
// so that removed files give their space back even when no handle of them
// is used again.
//
// Work that outlives the procedure which found an entry (a job on the
// caller pool, an operation on the storage ring) borrows the entry's
// descriptor (lend()) instead of duplicating it: the cache may close the
// entry meanwhile (evicted, erased, swept, cleared), and a closed number
// could be reused for another file before the job ran. A lent descriptor
// stays open until both have let go: the cache's close only marks it, the
// last borrower's give_back() closes it. That saves a job the fcntl(F_DUPFD)
// and close() per descriptor it used to pay. Engine thread only: every
// borrower is made and dropped there.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "nfs/nfs3_types.h"

namespace tern::nfsd {

// The cache's descriptors on loan, by number; shared with the borrowers so
// that one outliving the cache still finds where to give its back.
class FdLoans {
 public:
  // The borrower's end: closes fd if the cache has closed it meanwhile.
  void give_back(int fd);
  // The cache's end: closes fd now unless it is lent (then at give_back()).
  void close_fd(int fd);
  void lend(int fd) { ++loans_[fd].borrowers; }
  size_t lent() const { return loans_.size(); }

 private:
  struct Loan {
    uint32_t borrowers = 0;
    bool closed = false;  // by the cache: the last give_back() closes it
  };
  std::unordered_map<int, Loan> loans_;
};

// A descriptor a deferred job holds: its own (closed with it), or one the
// cache lent it (FdCache::lend: given back with it).
struct OwnedFd {
  int fd = -1;
  std::shared_ptr<FdLoans> loans;  // set when fd is the cache's, lent
  OwnedFd() = default;
  explicit OwnedFd(int f) : fd(f) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();
};

class FdCache {
 public:
  struct Entry {
    int path_fd = -1;   // O_PATH (or any open mode)
    int io_fd = -1;     // -1 until the file is first read or written
    bool io_write = false;  // io_fd is open for writing too
  };

  // At least 16: a procedure holds two or three entries while it adds one.
  explicit FdCache(size_t capacity) : cap_(capacity < 16 ? 16 : capacity) {}
  ~FdCache();
  FdCache(const FdCache&) = delete;
  FdCache& operator=(const FdCache&) = delete;

  // The entry for this handle, most recently used now; nullptr if none.
  Entry* find(const nfs::Fh3& fh);
  // Takes ownership of path_fd (closes the least recently used entry when full).
  Entry* insert(const nfs::Fh3& fh, int path_fd);
  void erase(const nfs::Fh3& fh);
  // Closes entries whose object has no link left.
  size_t sweep();
  // Closes every entry (the export table changed under them).
  void clear();
  // Lends `fd` (an entry's path_fd or io_fd) to `to`, which must hold no
  // descriptor yet: it stays open until `to` is destroyed, whatever becomes
  // of the entry. Returns fd.
  int lend(int fd, OwnedFd* to) {
    loans_->lend(fd);
    to->fd = fd;
    to->loans = loans_;
    return fd;
  }
  // Closes one of an entry's descriptors the caller replaces (io_fd), or
  // leaves it to its last borrower.
  void close_fd(int fd) { loans_->close_fd(fd); }
  // Descriptors on loan now (tests).
  size_t lent() const { return loans_->lent(); }
  size_t size() const { return map_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Slot {
    Entry e;
    std::list<std::string>::iterator lru;
  };
  void close_entry(Entry& e);

  size_t cap_;
  std::unordered_map<std::string, Slot> map_;
  std::list<std::string> lru_;  // most recent at the front
  uint64_t hits_ = 0, misses_ = 0;
  std::shared_ptr<FdLoans> loans_ = std::make_shared<FdLoans>();
};

}  // namespace tern::nfsd
