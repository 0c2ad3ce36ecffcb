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
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>

#include "nfs/nfs3_types.h"

namespace tern::nfsd {

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
  size_t size() const { return map_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  struct Slot {
    Entry e;
    std::list<std::string>::iterator lru;
  };
  static void close_entry(Entry& e);

  size_t cap_;
  std::unordered_map<std::string, Slot> map_;
  std::list<std::string> lru_;  // most recent at the front
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace tern::nfsd
