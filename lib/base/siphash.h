// SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudo-random
// function for short inputs, 64-bit output. Whoever does not hold the key
// can neither predict an output nor find two inputs with the same one, so
// it serves wherever a peer chooses the input and must not choose the
// outcome: tern-nfsd's file handles (a client cannot make up a handle for a
// file it was never shown), the duplicate request caches' argument digests
// and their hash tables (a peer cannot make its entries collide with
// another's, or all land in one hash chain).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tern {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;
};

uint64_t siphash24(const SipKey& key, std::span<const uint8_t> data);

// The same function over input that comes in pieces: update() with each
// piece in turn, then finish(); the result equals siphash24() of the pieces
// concatenated.
class SipHasher {
 public:
  explicit SipHasher(const SipKey& key);
  void update(std::span<const uint8_t> data);
  // Eight bytes, little-endian: a length or a field of a key.
  void update_u64(uint64_t v);
  uint64_t finish() const;

 private:
  void absorb(uint64_t m);
  uint64_t v0_, v1_, v2_, v3_;
  uint64_t tail_ = 0;  // bytes not yet absorbed (fewer than eight)
  uint64_t len_ = 0;
};

}  // namespace tern
