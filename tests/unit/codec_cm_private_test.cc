// RFC 8797 connection private data and the inline thresholds derived from it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "rpcrdma/cm_private.h"

#include "exact_buf.h"

namespace tern::rpcrdma {
namespace {

using Bytes = std::vector<uint8_t>;

using tern::testing::ExactBuf;

Bytes encode(const CmPrivateData& d) {
  Bytes b(kCmPrivateSize);
  EXPECT_EQ(encode_cm_private(d, b), kCmPrivateSize);
  return b;
}

CmPrivateData offer(bool inv, uint32_t send, uint32_t recv) {
  CmPrivateData d;
  d.remote_invalidation = inv;
  d.inline_send_size = send;
  d.inline_recv_size = recv;
  return d;
}

// ------------------------------------------------------------ golden bytes

TEST(CmPrivate, GoldenBytes) {
  // Format identifier, version 1, flags with I set, 4 KiB each way: (4 - 1).
  EXPECT_EQ(encode(offer(true, 4096, 4096)), (Bytes{0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03}));
  // The extremes of the one-byte encoding: 1 KiB is 0, 256 KiB is 255.
  EXPECT_EQ(encode(offer(false, 1024, 256 * 1024)), (Bytes{0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x00, 0xff}));
}

TEST(CmPrivate, SizeEncoding) {
  EXPECT_EQ(encode_inline_size(1024), 0);
  EXPECT_EQ(encode_inline_size(2047), 0);  // rounded down: never promise more
  EXPECT_EQ(encode_inline_size(2048), 1);
  EXPECT_EQ(encode_inline_size(256 * 1024), 255);
  EXPECT_EQ(encode_inline_size(1 << 30), 255);  // clamped to what one byte says
  EXPECT_EQ(decode_inline_size(0), 1024u);
  EXPECT_EQ(decode_inline_size(255), 256u * 1024);
  EXPECT_EQ(advertised_inline_size(5000), 4096u);
  for (int v = 0; v < 256; ++v) EXPECT_EQ(encode_inline_size(decode_inline_size(static_cast<uint8_t>(v))), v);
}

TEST(CmPrivate, RoundTrip) {
  for (bool inv : {false, true}) {
    for (uint32_t send : {1024u, 4096u, 65536u, 262144u}) {
      for (uint32_t recv : {1024u, 8192u, 262144u}) {
        CmPrivateData d;
        ASSERT_EQ(decode_cm_private(encode(offer(inv, send, recv)), &d), CmPrivateStatus::kOk);
        EXPECT_EQ(d.remote_invalidation, inv);
        EXPECT_EQ(d.inline_send_size, send);
        EXPECT_EQ(d.inline_recv_size, recv);
      }
    }
  }
}

TEST(CmPrivate, EncodeNeedsEightBytes) {
  uint8_t mem[8];
  std::memset(mem, 0xee, sizeof mem);
  EXPECT_EQ(encode_cm_private(offer(true, 4096, 4096), std::span<uint8_t>(mem, 7)), 0u);
  for (uint8_t b : mem) EXPECT_EQ(b, 0xee);
}

TEST(CmPrivateDeath, SizesBelowOneKibAreTheCallersMistake) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  uint8_t mem[8];
  EXPECT_DEATH(encode_cm_private(offer(false, 512, 4096), mem), "below the 1024 bytes");
  EXPECT_DEATH(negotiate_inline(offer(false, 4096, 100), {}), "below the 1024 bytes");
}

// ------------------------------------------------------------ decoding

TEST(CmPrivate, ShortDataIsAbsent) {
  Bytes good = encode(offer(true, 4096, 4096));
  for (size_t len = 0; len < kCmPrivateSize; ++len) {
    ExactBuf eb(std::span<const uint8_t>(good.data(), len));
    CmPrivateData d = offer(true, 9999, 9999);
    EXPECT_EQ(decode_cm_private(eb.span(), &d), CmPrivateStatus::kAbsent) << len;
    EXPECT_EQ(d.inline_send_size, 9999u) << "untouched unless kOk";
  }
}

TEST(CmPrivate, OtherFormatIdentifierIsUnrecognized) {
  for (int byte = 0; byte < 4; ++byte) {
    Bytes b = encode(offer(true, 4096, 4096));
    b[byte] ^= 0x40;
    CmPrivateData d;
    EXPECT_EQ(decode_cm_private(b, &d), CmPrivateStatus::kUnrecognized) << byte;
  }
  Bytes zeros(56, 0);
  CmPrivateData d;
  EXPECT_EQ(decode_cm_private(zeros, &d), CmPrivateStatus::kUnrecognized);
}

TEST(CmPrivate, OtherVersionIsUnsupported) {
  for (uint8_t v : {0, 2, 0xff}) {
    Bytes b = encode(offer(true, 4096, 4096));
    b[4] = v;
    CmPrivateData d;
    EXPECT_EQ(decode_cm_private(b, &d), CmPrivateStatus::kUnsupportedVersion) << int{v};
  }
}

TEST(CmPrivate, TrailingPaddingIsIgnored) {
  // The CM may hand over its whole private data field, zero-filled.
  Bytes b = encode(offer(true, 8192, 16384));
  b.resize(56, 0);
  ExactBuf eb(b);
  CmPrivateData d;
  ASSERT_EQ(decode_cm_private(eb.span(), &d), CmPrivateStatus::kOk);
  EXPECT_TRUE(d.remote_invalidation);
  EXPECT_EQ(d.inline_send_size, 8192u);
  EXPECT_EQ(d.inline_recv_size, 16384u);
}

TEST(CmPrivate, ReservedFlagBitsAreIgnored) {
  Bytes b = encode(offer(false, 4096, 4096));
  b[5] = 0xfe;
  CmPrivateData d;
  ASSERT_EQ(decode_cm_private(b, &d), CmPrivateStatus::kOk);
  EXPECT_FALSE(d.remote_invalidation);
  b[5] = 0xff;
  ASSERT_EQ(decode_cm_private(b, &d), CmPrivateStatus::kOk);
  EXPECT_TRUE(d.remote_invalidation);
}

// ------------------------------------------------------------ negotiation

TEST(CmPrivate, EachDirectionTakesTheSmallerSize) {
  CmPrivateData local = offer(true, 8192, 4096);
  Bytes peer = encode(offer(true, 2048, 16384));
  InlineLimits l = negotiate_inline(local, peer);
  EXPECT_EQ(l.peer_status, CmPrivateStatus::kOk);
  EXPECT_EQ(l.max_send, 8192u);  // ours 8 KiB, peer receives 16 KiB
  EXPECT_EQ(l.max_recv, 2048u);  // ours 4 KiB, peer sends at most 2 KiB
  EXPECT_TRUE(l.send_with_invalidate);
  EXPECT_TRUE(l.receive_invalidate);
}

// The I flag is what its sender can receive: each direction follows its
// receiver's flag alone.
TEST(CmPrivate, RemoteInvalidationFollowsTheReceiversFlag) {
  for (bool mine : {false, true}) {
    for (bool theirs : {false, true}) {
      InlineLimits l = negotiate_inline(offer(mine, 4096, 4096), encode(offer(theirs, 4096, 4096)));
      EXPECT_EQ(l.send_with_invalidate, theirs) << mine << theirs;
      EXPECT_EQ(l.receive_invalidate, mine) << mine << theirs;
    }
  }
}

// What the Linux server (svc_rdma_accept) sends: I = 0 and 4 KiB each way.
// A client that offered I still gets Send With Invalidate from it.
TEST(CmPrivate, LinuxServerAcceptPrivateData) {
  const Bytes linux_accept = {0xf6, 0xab, 0x0e, 0x18, 0x01, 0x00, 0x03, 0x03};
  InlineLimits l = negotiate_inline(offer(true, 4096, 4096), linux_accept);
  EXPECT_EQ(l.peer_status, CmPrivateStatus::kOk);
  EXPECT_EQ(l.max_send, 4096u);
  EXPECT_EQ(l.max_recv, 4096u);
  EXPECT_TRUE(l.receive_invalidate);
  EXPECT_FALSE(l.send_with_invalidate);
}

TEST(CmPrivate, LocalSizesCountAsAdvertised) {
  // We advertise 5000 as 4 KiB; both ends must then compute with 4 KiB.
  InlineLimits l = negotiate_inline(offer(false, 5000, 5000), encode(offer(false, 65536, 65536)));
  EXPECT_EQ(l.max_send, 4096u);
  EXPECT_EQ(l.max_recv, 4096u);
}

TEST(CmPrivate, WithoutUsablePeerDataTheRfc8166DefaultsApply) {
  CmPrivateData local = offer(true, 65536, 65536);
  Bytes bad_magic = encode(offer(true, 65536, 65536));
  bad_magic[0] = 0;
  Bytes bad_version = encode(offer(true, 65536, 65536));
  bad_version[4] = 2;
  struct Case {
    std::span<const uint8_t> data;
    CmPrivateStatus status;
  } cases[] = {
      {{}, CmPrivateStatus::kAbsent},
      {std::span<const uint8_t>(bad_magic.data(), 4), CmPrivateStatus::kAbsent},
      {bad_magic, CmPrivateStatus::kUnrecognized},
      {bad_version, CmPrivateStatus::kUnsupportedVersion},
  };
  for (const Case& c : cases) {
    InlineLimits l = negotiate_inline(local, c.data);
    EXPECT_EQ(l.peer_status, c.status);
    EXPECT_EQ(l.max_send, 1024u);
    EXPECT_EQ(l.max_recv, 1024u);
    EXPECT_FALSE(l.send_with_invalidate);
    EXPECT_FALSE(l.receive_invalidate);
  }
}

TEST(CmPrivate, BothEndsAgree) {
  std::mt19937 rng(8797);
  for (int i = 0; i < 2000; ++i) {
    CmPrivateData a = offer(rng() & 1, 1024 + rng() % (300 * 1024), 1024 + rng() % (300 * 1024));
    CmPrivateData b = offer(rng() & 1, 1024 + rng() % (300 * 1024), 1024 + rng() % (300 * 1024));
    InlineLimits la = negotiate_inline(a, encode(b));
    InlineLimits lb = negotiate_inline(b, encode(a));
    ASSERT_EQ(la.max_send, lb.max_recv);
    ASSERT_EQ(la.max_recv, lb.max_send);
    // What one end may send is what the other may receive.
    ASSERT_EQ(la.send_with_invalidate, lb.receive_invalidate);
    ASSERT_EQ(la.receive_invalidate, lb.send_with_invalidate);
  }
}

// ------------------------------------------------------------ random input

TEST(CmPrivate, RandomPeerData) {
  std::mt19937_64 rng(0xf6ab0e18);
  const CmPrivateData local = offer(true, 32768, 16384);
  const Bytes valid = encode(offer(true, 4096, 4096));
  int ok = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b;
    if (iter % 2 == 0) {
      b = valid;
      b[4 + rng() % 4] = static_cast<uint8_t>(rng());
      if (rng() % 8 == 0) b[rng() % 4] = static_cast<uint8_t>(rng());
      b.resize(rng() % 2 ? b.size() : rng() % 12);
    } else {
      b.resize(rng() % 64);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
    }
    ExactBuf eb(b);
    CmPrivateData d;
    CmPrivateStatus st = decode_cm_private(eb.span(), &d);
    InlineLimits l = negotiate_inline(local, eb.span());
    ASSERT_EQ(l.peer_status, st);
    ASSERT_GE(l.max_send, kCmMinInlineSize);
    ASSERT_GE(l.max_recv, kCmMinInlineSize);
    ASSERT_LE(l.max_send, 32768u);
    ASSERT_LE(l.max_recv, 16384u);
    if (st == CmPrivateStatus::kOk) {
      ++ok;
      ASSERT_EQ(l.max_send, std::min(32768u, d.inline_recv_size));
      ASSERT_EQ(l.send_with_invalidate, d.remote_invalidation);
      ASSERT_TRUE(l.receive_invalidate);
    } else {
      ASSERT_EQ(l.max_send, 1024u);
      ASSERT_FALSE(l.send_with_invalidate);
      ASSERT_FALSE(l.receive_invalidate);
    }
  }
  EXPECT_GT(ok, 10000);
}

}  // namespace
}  // namespace tern::rpcrdma
