#include "nfsd/siphash.h"

#include <bit>
#include <cstring>

namespace tern::nfsd {

namespace {

struct State {
  uint64_t v0, v1, v2, v3;
  void round() {
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
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

uint64_t load_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint64_t siphash24(const SipKey& key, std::span<const uint8_t> data) {
  State s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull, key.k0 ^ 0x6c7967656e657261ull,
          key.k1 ^ 0x7465646279746573ull};
  const size_t n = data.size();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) s.absorb(load_le64(data.data() + i));
  uint64_t last = static_cast<uint64_t>(n & 0xff) << 56;
  for (size_t j = 0; i + j < n; ++j) last |= static_cast<uint64_t>(data[i + j]) << (8 * j);
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int r = 0; r < 4; ++r) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

}  // namespace tern::nfsd
