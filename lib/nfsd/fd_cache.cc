#include "nfsd/fd_cache.h"

#include <sys/stat.h>
#include <unistd.h>

namespace tern::nfsd {

namespace {
std::string key_of(const nfs::Fh3& fh) { return std::string(reinterpret_cast<const char*>(fh.data), fh.len); }
}  // namespace

void FdLoans::give_back(int fd) {
  auto it = loans_.find(fd);
  if (it == loans_.end()) return;
  if (--it->second.borrowers != 0) return;
  if (it->second.closed) close(fd);
  loans_.erase(it);
}

void FdLoans::close_fd(int fd) {
  if (fd < 0) return;
  auto it = loans_.find(fd);
  if (it == loans_.end()) {
    close(fd);
    return;
  }
  it->second.closed = true;
}

OwnedFd::~OwnedFd() {
  if (fd < 0) return;
  if (loans != nullptr) loans->give_back(fd);
  else ::close(fd);
}

FdCache::~FdCache() {
  for (auto& [k, s] : map_) close_entry(s.e);
}

void FdCache::close_entry(Entry& e) {
  loans_->close_fd(e.io_fd);
  loans_->close_fd(e.path_fd);
  e.io_fd = e.path_fd = -1;
}

FdCache::Entry* FdCache::find(const nfs::Fh3& fh) {
  auto it = map_.find(key_of(fh));
  if (it == map_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return &it->second.e;
}

FdCache::Entry* FdCache::insert(const nfs::Fh3& fh, int path_fd) {
  std::string k = key_of(fh);
  auto it = map_.find(k);
  if (it != map_.end()) {
    // Two lookups of one object: keep the descriptor already there.
    close(path_fd);
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return &it->second.e;
  }
  while (map_.size() >= cap_) {
    auto old = map_.find(lru_.back());
    close_entry(old->second.e);
    map_.erase(old);
    lru_.pop_back();
  }
  lru_.push_front(k);
  Slot& s = map_[k];
  s.e.path_fd = path_fd;
  s.lru = lru_.begin();
  return &s.e;
}

void FdCache::erase(const nfs::Fh3& fh) {
  auto it = map_.find(key_of(fh));
  if (it == map_.end()) return;
  close_entry(it->second.e);
  lru_.erase(it->second.lru);
  map_.erase(it);
}

void FdCache::clear() {
  for (auto& [k, s] : map_) close_entry(s.e);
  map_.clear();
  lru_.clear();
}

size_t FdCache::sweep() {
  size_t closed = 0;
  for (auto it = map_.begin(); it != map_.end();) {
    struct stat st;
    if (fstat(it->second.e.path_fd, &st) != 0 || st.st_nlink == 0) {
      close_entry(it->second.e);
      lru_.erase(it->second.lru);
      it = map_.erase(it);
      ++closed;
    } else {
      ++it;
    }
  }
  return closed;
}

}  // namespace tern::nfsd
