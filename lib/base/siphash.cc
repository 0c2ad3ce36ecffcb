#include "base/siphash.h"

#include <bit>
#include <cstring>

namespace tern {

namespace {

inline void sip_round(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1;
  v1 = std::rotl(v1, 13);
  v1 ^= v0;
  v0 = std::rotl(v0, 32);
  v2 += v3;
  v3 = std::rotl(v3, 16);
  v3 ^= v2;
  v0 += v3;
  v3 = std::rotl(v3, 21);
  v3 ^= v0;
  v2 += v1;
  v1 = std::rotl(v1, 17);
  v1 ^= v2;
  v2 = std::rotl(v2, 32);
}

uint64_t load_le64(const uint8_t* p) {
  if constexpr (std::endian::native == std::endian::little) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  } else {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
}

}  // namespace

SipHasher::SipHasher(const SipKey& key)
    : v0_(key.k0 ^ 0x736f6d6570736575ull),
      v1_(key.k1 ^ 0x646f72616e646f6dull),
      v2_(key.k0 ^ 0x6c7967656e657261ull),
      v3_(key.k1 ^ 0x7465646279746573ull) {}

void SipHasher::absorb(uint64_t m) {
  v3_ ^= m;
  sip_round(v0_, v1_, v2_, v3_);
  sip_round(v0_, v1_, v2_, v3_);
  v0_ ^= m;
}

void SipHasher::update(std::span<const uint8_t> data) {
  const uint8_t* p = data.data();
  size_t n = data.size();
  unsigned have = static_cast<unsigned>(len_ & 7);
  len_ += n;
  // Fill a pending partial word first, then whole words straight from the input.
  while (have != 0 && n > 0) {
    tail_ |= uint64_t{*p++} << (8 * have);
    --n;
    if (++have == 8) {
      absorb(tail_);
      tail_ = 0;
      have = 0;
    }
  }
  for (; n >= 8; n -= 8, p += 8) absorb(load_le64(p));
  for (unsigned j = 0; j < n; ++j) tail_ |= uint64_t{p[j]} << (8 * j);
}

void SipHasher::update_u64(uint64_t v) {
  if ((len_ & 7) == 0) {  // on a word boundary (a key's fields): one step
    len_ += 8;
    if constexpr (std::endian::native == std::endian::little) {
      absorb(v);
      return;
    }
    len_ -= 8;
  }
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  update(b);
}

uint64_t SipHasher::finish() const {
  uint64_t v0 = v0_, v1 = v1_, v2 = v2_, v3 = v3_;
  const uint64_t last = tail_ | (len_ & 0xff) << 56;
  v3 ^= last;
  sip_round(v0, v1, v2, v3);
  sip_round(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) sip_round(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t siphash24(const SipKey& key, std::span<const uint8_t> data) {
  SipHasher h(key);
  h.update(data);
  return h.finish();
}

}  // namespace tern
