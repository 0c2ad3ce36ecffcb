// A test hook on memory that a device may have been given, taken back into
// one of the engine's pools (bulk blocks, message buffers) or handed back
// outside them (a client call's chunk buffers, the caller's own memory, as
// the call completes; a registration cache entry's pages as it is evicted):
// a simulated device (pmd/sim) checks at that moment that no WR posted to
// it and no registration whose rkey a peer holds still covers the memory -- "no
// memory returned while a device or a peer can still touch it". On real
// hardware such a return goes unnoticed until a late DMA lands in the next
// user's bytes; poisoning (bulk_pool.h, msg_buf.h) only shows it when that
// DMA happens to land in a run.
//
// Compiled in only with TERN_DEBUG (tests and debug builds): in a release
// build note_reclaimed() is empty and the pools pay nothing.
#pragma once

#include <cstddef>

namespace tern {

// Called with the memory [p, p + len) and the pool's name; nullptr: none.
using ReclaimHook = void (*)(const void* p, size_t len, const char* pool);
// The pools call it only where the library was compiled with TERN_DEBUG
// (detail::debug_checks_compiled(), base/check.h).
void set_reclaim_hook(ReclaimHook hook);

namespace detail {
extern ReclaimHook g_reclaim_hook;
}

inline void note_reclaimed([[maybe_unused]] const void* p, [[maybe_unused]] size_t len,
                           [[maybe_unused]] const char* pool) {
#if defined(TERN_DEBUG) && TERN_DEBUG
  if (detail::g_reclaim_hook != nullptr) [[unlikely]]
    detail::g_reclaim_hook(p, len, pool);
#endif
}

}  // namespace tern
