// Process-wide table of shareable memory segments: mappings backed by a file
// descriptor (a memfd) that a driver can pass to a peer process. pmd/shm can
// register only memory that lies inside one of these, because the peer must
// map it to move data. Control path only: lookups take a mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace tern::mem {

struct Segment {
  uint64_t id;       // unique in this process, never reused
  void* base;
  size_t length;
  int fd;            // maps [0, length) at base; owned by whoever registered it
  bool hugepages;
};

// Returns the new segment's id.
uint64_t register_segment(void* base, size_t length, int fd, bool hugepages);
void unregister_segment(uint64_t id);
// The segment holding [addr, addr+length), if any.
std::optional<Segment> find_segment(const void* addr, size_t length);

}  // namespace tern::mem
