// The NFS RPC program and the procedures Tern's client calls (RFC 1813 §3.3,
// RFC 7530 §16). NFSv3 has a procedure per operation; NFSv4 has only NULL and
// COMPOUND, which carries the operations (compound_args.h, compound_res.h).
// NULL takes no arguments and returns no results in every version: it is the
// "is anyone there" call, and its empty body needs no codec.
#pragma once

#include <cstdint>

namespace tern::nfs {

inline constexpr uint32_t kNfsProgram = 100003;
inline constexpr uint32_t kNfsV3 = 3;
inline constexpr uint32_t kNfsV4 = 4;

inline constexpr uint32_t kProcNull = 0;      // v3 and v4
inline constexpr uint32_t kProcCompound = 1;  // v4 only

// RFC 7530 is minor version 0: no sessions, the client manages state with
// SETCLIENTID/OPEN (which Tern does not use: see nfs4_types.h, special stateids).
inline constexpr uint32_t kMinorVersion0 = 0;

}  // namespace tern::nfs
