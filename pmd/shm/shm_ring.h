// pmd/shm: the descriptor ring as the datapath touches it -- the slot's
// publication word, ring-index order, and which bytes of a descriptor a
// producer copies. The layout itself is shm_layout.h's (shared with the peer,
// never changed lightly); these are the few helpers the requester
// (shm_requester.cc), the responder (shm_responder.cc) and the completer
// (shm_completer.cc) all need, inline because each is an instruction or two
// on every descriptor.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shm/shm_layout.h"

namespace tern::shm {

// a < b in free-running ring-index order.
inline bool idx_before(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

// A descriptor up to its SGE list: what the responder copies out of a slot
// before checking it.
inline constexpr size_t kDescHeader = offsetof(ShmDesc, sge);
// What a producer copies into a slot before its seq word: the fields after it.
inline constexpr size_t kSeqEnd = offsetof(ShmDesc, op);
inline constexpr size_t kInlineHeader = kInlineOffset - kSeqEnd;  // op .. raddr
static_assert(kSeqEnd == sizeof(uint32_t));

// The publication word of a slot, shared with the peer.
inline std::atomic_ref<uint32_t> seq_word(ShmDesc* slot) { return std::atomic_ref<uint32_t>(slot->seq); }
inline std::atomic_ref<uint32_t> seq_word(const ShmDesc* slot) {
  return std::atomic_ref<uint32_t>(const_cast<ShmDesc*>(slot)->seq);
}
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free && std::atomic_ref<uint32_t>::required_alignment <= 4);

}  // namespace tern::shm
