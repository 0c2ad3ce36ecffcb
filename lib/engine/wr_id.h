// What a work request's wr_id says, so that a completion finds what it is
// about in O(1): the kind, the connection's slot in the engine's table, and
// a value -- the chain's send context (send queue), the buffer's index in
// the receive pool (receives), or nothing (drain markers).
//
//   bits 63..60  kind
//   bits 59..32  connection slot (send side and drain markers)
//   bits 31..0   value
#pragma once

#include <cstdint>

namespace tern::rpc {

enum class WrKind : uint8_t {
  kNone = 0,   // never posted by the engine (a driver's zero wr_id)
  kChain = 1,  // a chain posted through SendQueue: value = its context index
  kRecv = 2,   // a receive: value = the buffer's index in the receive pool
  kDrain = 3,  // a drain marker (send or receive queue of a QP in error)
};

inline constexpr uint32_t kMaxConnSlots = 1u << 28;

inline uint64_t make_wr_id(WrKind k, uint32_t slot, uint32_t value) {
  return (static_cast<uint64_t>(k) << 60) | (static_cast<uint64_t>(slot & (kMaxConnSlots - 1)) << 32) | value;
}
inline WrKind wr_id_kind(uint64_t id) { return static_cast<WrKind>(id >> 60); }
inline uint32_t wr_id_slot(uint64_t id) { return static_cast<uint32_t>(id >> 32) & (kMaxConnSlots - 1); }
inline uint32_t wr_id_value(uint64_t id) { return static_cast<uint32_t>(id); }

}  // namespace tern::rpc
