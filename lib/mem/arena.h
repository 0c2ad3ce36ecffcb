// Registered-memory arena: one shareable mapping (a memfd, on hugepages when the
// machine has free ones, otherwise normal pages) that drivers register once and
// that Tern hands out in buffers. The memfd can be passed to a peer process,
// which is how pmd/shm moves data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "../base/result.h"

namespace tern::mem {

enum class HugePages : uint8_t {
  kAuto,   // hugepages if free ones exist, else normal pages (logged at info)
  kNever,
  kRequire,  // fail if hugepages cannot back the arena
};

struct ArenaOptions {
  size_t size = 64u << 20;
  HugePages huge = HugePages::kAuto;
  std::string name = "tern-arena";
};

class Arena {
 public:
  static Result<std::unique_ptr<Arena>> create(const ArenaOptions& opt);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* base() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  bool hugepages() const { return huge_; }
  size_t page_size() const { return page_size_; }

  // Carves `size` bytes aligned to `align` (a power of two); nullptr when full.
  // Carving is for long-lived buffers and pools; it is never given back.
  void* carve(size_t size, size_t align = 64);
  size_t used() const { return used_; }
  bool contains(const void* p, size_t len) const;

 private:
  Arena() = default;
  void* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
  size_t page_size_ = 4096;
  int fd_ = -1;
  bool huge_ = false;
  uint64_t segment_id_ = 0;
};

// Free 2 MiB hugepages on this machine right now (0 if none or unknown).
uint64_t free_hugepages_2m();

}  // namespace tern::mem
