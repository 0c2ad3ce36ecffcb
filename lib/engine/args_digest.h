// The digest of a call's arguments that ServerCall::args_digest() gives a
// duplicate request cache: SipHash-2-4 under a key, over the inline
// arguments and then each read chunk's data, each piece preceded by its
// length (so that moving bytes from one piece to the next changes it).
//
// Keyed, because the peer chooses every byte: an unkeyed digest lets a peer
// compute, in closed form, other arguments with the same digest (and so aim
// a call at an entry), which a keyed one does not. The engine uses the
// process's random key (base/process_key.h).
//
// 64 bits are enough: the cache compares the whole key (peer, xid, program,
// version, procedure, digest), so the digest only tells apart calls of one
// peer that reuse one xid for one procedure -- a handful at most, against
// which a chance collision is 2^-64 and a chosen one needs the key.
#pragma once

#include <cstdint>
#include <span>

#include "base/siphash.h"
#include "engine/engine.h"

namespace tern::rpc {

uint64_t args_digest(const SipKey& key, std::span<const uint8_t> args, std::span<const ReadChunkData> chunks);

}  // namespace tern::rpc
