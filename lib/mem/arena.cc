#include "mem/arena.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/log.h"
#include "mem/memfd.h"
#include "mem/segment.h"

namespace tern::mem {

namespace {
constexpr size_t kHugePage = 2u << 20;

size_t round_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }
}  // namespace

uint64_t free_hugepages_2m() {
  std::ifstream f("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  uint64_t n = 0;
  if (f >> n) return n;
  return 0;
}

Result<std::unique_ptr<Arena>> Arena::create(const ArenaOptions& opt) {
  if (opt.size == 0) return make_error(Errc::kInvalidArgument, "arena size must be > 0");
  std::unique_ptr<Arena> a(new Arena());
  bool try_huge = opt.huge != HugePages::kNever &&
                  free_hugepages_2m() * kHugePage >= round_up(opt.size, kHugePage);
  if (opt.huge == HugePages::kRequire && !try_huge)
    return make_error(Errc::kNoResources, "arena '%s': %zu bytes of free 2 MiB hugepages required, %llu pages free",
                      opt.name.c_str(), opt.size, static_cast<unsigned long long>(free_hugepages_2m()));
  // The memfd may be passed to a peer process (pmd/shm): it is sealed against
  // resizing, so that a peer can never make our own mappings of it fault, and
  // so that peers accept it (mem/memfd.h).
  if (try_huge) {
    size_t len = round_up(opt.size, kHugePage);
    auto fd = create_sealed_memfd(opt.name.c_str(), len, true);
    Status why = fd.status();
    if (fd) {
      void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, *fd, 0);
      if (p != MAP_FAILED) {
        a->base_ = p, a->size_ = len, a->fd_ = *fd, a->huge_ = true, a->page_size_ = kHugePage;
      } else {
        why = make_sys_error(Errc::kNoResources, errno, "mmap");
        close(*fd);
      }
    }
    if (!a->huge_) {
      if (opt.huge == HugePages::kRequire)
        return make_error(Errc::kNoResources, "arena '%s': hugepage memfd failed: %s", opt.name.c_str(),
                          why.to_string().c_str());
      TERN_LOG(kInfo, "mem", "arena '%s': hugepages unavailable (%s), using normal pages", opt.name.c_str(),
               why.to_string().c_str());
    }
  }
  if (!a->huge_) {
    size_t len = round_up(opt.size, 4096);
    auto sealed = create_sealed_memfd(opt.name.c_str(), len, false);
    if (!sealed) return make_error(sealed.status().code(), "arena '%s': %s", opt.name.c_str(),
                                   sealed.status().to_string().c_str());
    int fd = *sealed;
    // MAP_POPULATE: fault the pages in now, not on the datapath.
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      close(fd);
      return make_sys_error(Errc::kNoResources, e, "arena '%s': mmap(%zu)", opt.name.c_str(), len);
    }
    a->base_ = p, a->size_ = len, a->fd_ = fd, a->page_size_ = 4096;
  }
  a->segment_id_ = register_segment(a->base_, a->size_, a->fd_, a->huge_);
  TERN_LOG(kDebug, "mem", "arena '%s': %zu bytes at %p on %s pages", opt.name.c_str(), a->size_, a->base_,
           a->huge_ ? "2 MiB" : "4 KiB");
  return a;
}

Arena::~Arena() {
  if (segment_id_ != 0) unregister_segment(segment_id_);
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

void* Arena::carve(size_t size, size_t align) {
  TERN_REQUIRE(align != 0 && (align & (align - 1)) == 0, "alignment %zu is not a power of two", align);
  size_t off = round_up(used_, align);
  if (off > size_ || size > size_ - off) return nullptr;
  used_ = off + size;
  return static_cast<char*>(base_) + off;
}

bool Arena::contains(const void* p, size_t len) const {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
  return a >= b && len <= size_ && a - b <= size_ - len;
}

}  // namespace tern::mem
