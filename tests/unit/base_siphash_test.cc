// SipHash-2-4 (base/siphash.h) against the reference vectors, and the
// incremental form against the one-shot one; the per-process key.
#include "base/siphash.h"

#include <gtest/gtest.h>

#include <cstring>

#include "base/process_key.h"

namespace tern {
namespace {

SipKey reference_key() {
  // The reference implementation's key 00..0f.
  SipKey k;
  uint8_t kb[16];
  for (int i = 0; i < 16; ++i) kb[i] = static_cast<uint8_t>(i);
  std::memcpy(&k.k0, kb, 8);
  std::memcpy(&k.k1, kb + 8, 8);
  return k;
}

TEST(SipHash, ReferenceVectors) {
  const SipKey k = reference_key();
  uint8_t msg[64];
  for (int i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(siphash24(k, {msg, 0}), 0x726fdb47dd0e0e31ull);
  EXPECT_EQ(siphash24(k, {msg, 1}), 0x74f839c593dc67fdull);
  EXPECT_EQ(siphash24(k, {msg, 8}), 0x93f5f5799a932462ull);
  EXPECT_EQ(siphash24(k, {msg, 15}), 0xa129ca6149be45e5ull);
  EXPECT_EQ(siphash24(k, {msg, 63}), 0x958a324ceb064572ull);
}

TEST(SipHash, InPiecesEqualsInOne) {
  const SipKey k = reference_key();
  uint8_t msg[64];
  for (int i = 0; i < 64; ++i) msg[i] = static_cast<uint8_t>(i);
  for (size_t len = 0; len <= 64; ++len)
    for (size_t cut1 = 0; cut1 <= len; ++cut1)
      for (size_t cut2 = cut1; cut2 <= len; cut2 += 3) {
        SipHasher h(k);
        h.update({msg, cut1});
        h.update({msg + cut1, cut2 - cut1});
        h.update({msg + cut2, len - cut2});
        ASSERT_EQ(h.finish(), siphash24(k, {msg, len})) << len << " cut at " << cut1 << ", " << cut2;
      }
  SipHasher h(k);
  h.update({msg, 3});
  h.update_u64(0x0f0e0d0c0b0a0908ull);
  uint8_t same[11] = {0, 1, 2, 8, 9, 10, 11, 12, 13, 14, 15};
  EXPECT_EQ(h.finish(), siphash24(k, same));
}

TEST(ProcessKey, RandomAndStable) {
  const SipKey& a = process_key();
  EXPECT_EQ(&a, &process_key());
  EXPECT_FALSE(a.k0 == 0 && a.k1 == 0);
  const SipKey r1 = random_sip_key(), r2 = random_sip_key();
  EXPECT_FALSE(r1.k0 == r2.k0 && r1.k1 == r2.k1);
}

}  // namespace
}  // namespace tern
