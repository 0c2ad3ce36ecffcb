// memfds shared with another process (pmd/shm's segments and connection
// areas). Whoever maps a file another process can resize takes SIGBUS when
// that process shrinks it under the mapping, so every memfd Tern passes on is
// sealed against resizing by its creator, and every memfd a peer passes in is
// checked for those seals and its size before it is mapped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../base/result.h"

namespace tern::mem {

// The seals a shared memfd must carry: no shrinking (a mapping past the end
// faults), no growing (its size is part of what was agreed), and no changing
// the seals afterwards.
inline constexpr int kSharedMemfdSeals = 0x0001 /*F_SEAL_SEAL*/ | 0x0002 /*F_SEAL_SHRINK*/ | 0x0004 /*F_SEAL_GROW*/;

// A new memfd of `size` bytes (on 2 MiB hugepages if `huge`), created with
// sealing allowed and sealed with kSharedMemfdSeals. Returns the fd.
Result<int> create_sealed_memfd(const char* name, size_t size, bool huge);

// A peer's fd, before it is mapped: it must be a memfd (a regular file that
// supports seals) carrying kSharedMemfdSeals and at least `min_size` bytes
// long. The error says which check failed, for the log line that names the
// peer.
Status check_peer_memfd(int fd, uint64_t min_size);

}  // namespace tern::mem
