// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudo-random
// function for short inputs, 64-bit output. tern-nfsd authenticates the
// file handles it gives out with it, so that a client cannot make up a
// handle for a file it was never shown (file_handle.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tern::nfsd {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;
};

uint64_t siphash24(const SipKey& key, std::span<const uint8_t> data);

}  // namespace tern::nfsd
