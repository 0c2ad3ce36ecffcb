// XDR (RFC 4506) writer and reader: encodings checked byte for byte against
// the RFC, bounds on every read and write, sticky errors, and random input.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string_view>
#include <vector>

#include "xdr/xdr.h"

#include "exact_buf.h"

namespace tern::xdr {
namespace {

using Bytes = std::vector<uint8_t>;

using tern::testing::ExactBuf;

std::span<const uint8_t> as_bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

Bytes encode(void (*fn)(XdrWriter&), size_t cap = 256) {
  Bytes buf(cap);
  XdrWriter w(buf);
  fn(w);
  EXPECT_TRUE(w.ok());
  buf.resize(w.bytes_written());
  return buf;
}

// ------------------------------------------------------------ golden encodings

TEST(Xdr, UnsignedIntIsBigEndian) {
  // RFC 4506 §4.2: byte 0 is the most significant.
  EXPECT_EQ(encode([](XdrWriter& w) { w.put_u32(0x01020304); }), (Bytes{0x01, 0x02, 0x03, 0x04}));
}

TEST(Xdr, IntIsTwosComplement) {
  // RFC 4506 §4.1: -2 is 0xfffffffe.
  EXPECT_EQ(encode([](XdrWriter& w) { w.put_i32(-2); }), (Bytes{0xff, 0xff, 0xff, 0xfe}));
}

TEST(Xdr, HyperIsMostSignificantWordFirst) {
  // RFC 4506 §4.5.
  EXPECT_EQ(encode([](XdrWriter& w) { w.put_u64(0x0102030405060708ull); }),
            (Bytes{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}));
}

TEST(Xdr, BoolIsAnEnumOfZeroAndOne) {
  // RFC 4506 §4.4.
  EXPECT_EQ(encode([](XdrWriter& w) {
              w.put_bool(true);
              w.put_bool(false);
            }),
            (Bytes{0, 0, 0, 1, 0, 0, 0, 0}));
}

TEST(Xdr, FixedOpaqueIsZeroPaddedToFour) {
  // RFC 4506 §4.9: 5 bytes, then 3 zero bytes.
  EXPECT_EQ(encode([](XdrWriter& w) {
              const uint8_t d[5] = {1, 2, 3, 4, 5};
              w.put_opaque_fixed(d);
            }),
            (Bytes{1, 2, 3, 4, 5, 0, 0, 0}));
  EXPECT_EQ(encode([](XdrWriter& w) {
              const uint8_t d[4] = {9, 9, 9, 9};
              w.put_opaque_fixed(d);
            }),
            (Bytes{9, 9, 9, 9}));
}

TEST(Xdr, VariableOpaqueIsLengthThenPaddedBytes) {
  // RFC 4506 §4.10.
  EXPECT_EQ(encode([](XdrWriter& w) {
              const uint8_t d[2] = {0xaa, 0xbb};
              w.put_opaque_var(d);
            }),
            (Bytes{0, 0, 0, 2, 0xaa, 0xbb, 0, 0}));
  EXPECT_EQ(encode([](XdrWriter& w) { w.put_opaque_var({}); }), (Bytes{0, 0, 0, 0}));
}

TEST(Xdr, StringIsEncodedLikeOpaque) {
  // RFC 4506 §4.11: "sillyprog" is 9 bytes, 3 of pad.
  EXPECT_EQ(encode([](XdrWriter& w) { w.put_string("sillyprog"); }),
            (Bytes{0, 0, 0, 9, 's', 'i', 'l', 'l', 'y', 'p', 'r', 'o', 'g', 0, 0, 0}));
}

TEST(Xdr, SizeHelpers) {
  EXPECT_EQ(padded_size(0), 0u);
  EXPECT_EQ(padded_size(1), 4u);
  EXPECT_EQ(padded_size(4), 4u);
  EXPECT_EQ(padded_size(5), 8u);
  EXPECT_EQ(opaque_var_size(0), 4u);
  EXPECT_EQ(opaque_var_size(9), 16u);
}

// ------------------------------------------------------------ round trips

TEST(Xdr, RoundTripEveryType) {
  uint8_t buf[128];
  XdrWriter w(buf);
  const uint8_t fixed[3] = {7, 8, 9};
  const uint8_t var[6] = {1, 2, 3, 4, 5, 6};
  w.put_u32(0xdeadbeef);
  w.put_i32(-12345);
  w.put_u64(0xfedcba9876543210ull);
  w.put_bool(true);
  w.put_bool(false);
  w.put_opaque_fixed(fixed);
  w.put_opaque_var(var);
  w.put_string("hello");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w.bytes_written(), 4u + 4 + 8 + 4 + 4 + 4 + 12 + 12);
  EXPECT_EQ(w.written().size(), w.bytes_written());
  EXPECT_EQ(w.remaining(), sizeof buf - w.bytes_written());

  ExactBuf eb(w.written());
  XdrReader r(eb.span());
  EXPECT_EQ(r.get_u32(), 0xdeadbeefu);
  EXPECT_EQ(r.get_i32(), -12345);
  EXPECT_EQ(r.get_u64(), 0xfedcba9876543210ull);
  EXPECT_TRUE(r.get_bool());
  EXPECT_FALSE(r.get_bool());
  auto f = r.get_opaque_fixed(3);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(std::memcmp(f.data(), fixed, 3), 0);
  auto v = r.get_opaque_var(6);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(std::memcmp(v.data(), var, 6), 0);
  EXPECT_EQ(r.get_string(5), "hello");
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(r.position(), w.bytes_written());
}

TEST(Xdr, OpaqueViewsPointIntoTheBuffer) {
  const Bytes b{0, 0, 0, 3, 'a', 'b', 'c', 0};
  XdrReader r(b);
  auto v = r.get_opaque_var(16);
  EXPECT_EQ(v.data(), b.data() + 4);
  EXPECT_EQ(r.position(), 8u);
}

// ------------------------------------------------------------ writer bounds

TEST(Xdr, WriterStopsAtTheEndAndStaysStopped) {
  uint8_t mem[10];
  std::memset(mem, 0xee, sizeof mem);
  XdrWriter w(std::span<uint8_t>(mem, 6));
  w.put_u32(1);
  EXPECT_TRUE(w.ok());
  w.put_u32(2);  // 4 more bytes do not fit in the 2 left
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.bytes_written(), 4u);
  w.put_bool(true);  // does not fit in the 2 bytes left either; the flag is sticky
  w.put_opaque_var({});
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.bytes_written(), 4u);
  for (size_t i = 4; i < sizeof mem; ++i) EXPECT_EQ(mem[i], 0xee) << "byte " << i;
}

TEST(Xdr, WriterStickyEvenWhenALaterItemWouldFit) {
  uint8_t mem[8];
  XdrWriter w(mem);
  w.put_u64(1);
  w.put_u32(2);  // overflow
  ASSERT_FALSE(w.ok());
  XdrWriter w2(std::span<uint8_t>(mem, 6));
  w2.put_u64(1);  // 8 > 6
  w2.put_u32(3);  // 4 <= 6 would fit, but the stream already failed
  EXPECT_FALSE(w2.ok());
  EXPECT_EQ(w2.bytes_written(), 0u);
}

TEST(Xdr, WriterDoesNotWriteAPartialOpaque) {
  // 4 + 5 bytes of data fit, the pad does not: nothing of it is written.
  uint8_t mem[12];
  std::memset(mem, 0xee, sizeof mem);
  XdrWriter w(std::span<uint8_t>(mem, 10));
  const uint8_t d[5] = {1, 2, 3, 4, 5};
  w.put_opaque_var(d);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.bytes_written(), 0u);
  for (uint8_t b : mem) EXPECT_EQ(b, 0xee);
}

TEST(Xdr, WriterOnAnEmptySpan) {
  XdrWriter w(std::span<uint8_t>{});
  w.put_opaque_fixed({});  // zero bytes always fit
  EXPECT_TRUE(w.ok());
  w.put_u32(1);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.bytes_written(), 0u);
}

// ------------------------------------------------------------ reader bounds

TEST(Xdr, ReaderFailsCleanlyAtEveryTruncation) {
  uint8_t buf[64];
  XdrWriter w(buf);
  w.put_u32(1);
  w.put_u64(2);
  w.put_bool(true);
  w.put_string("abcde");
  w.put_opaque_fixed(as_bytes("xy"));
  ASSERT_TRUE(w.ok());
  const size_t full = w.bytes_written();
  for (size_t len = 0; len < full; ++len) {
    ExactBuf eb(std::span<const uint8_t>(buf, len));
    XdrReader r(eb.span());
    r.get_u32();
    r.get_u64();
    r.get_bool();
    r.get_string(16);
    r.get_opaque_fixed(2);
    EXPECT_FALSE(r.ok()) << "len " << len;
    EXPECT_LE(r.position(), len);
    EXPECT_TRUE(r.rest().empty());
  }
  ExactBuf eb(std::span<const uint8_t>(buf, full));
  XdrReader r(eb.span());
  r.get_u32();
  r.get_u64();
  r.get_bool();
  EXPECT_EQ(r.get_string(16), "abcde");
  r.get_opaque_fixed(2);
  EXPECT_TRUE(r.ok());
}

TEST(Xdr, ReaderErrorIsStickyAndReadsReturnZero) {
  const Bytes b{0, 0, 0, 7, 0, 0};
  XdrReader r(b);
  EXPECT_EQ(r.get_u32(), 7u);
  EXPECT_EQ(r.get_u32(), 0u);  // only 2 bytes left
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.position(), 4u);  // a failed read does not move
  EXPECT_EQ(r.get_u64(), 0u);
  EXPECT_TRUE(r.get_opaque_var(100).empty());
  EXPECT_TRUE(r.get_string(100).empty());
  EXPECT_FALSE(r.ok());
}

TEST(Xdr, BoolOtherThanZeroOrOneFails) {
  for (uint32_t v : {2u, 3u, 0x80000000u, 0xffffffffu}) {
    uint8_t buf[4];
    XdrWriter w(buf);
    w.put_u32(v);
    XdrReader r(buf);
    EXPECT_FALSE(r.get_bool()) << v;
    EXPECT_FALSE(r.ok()) << v;
  }
}

TEST(Xdr, OpaqueLongerThanItsBoundFails) {
  const Bytes b{0, 0, 0, 5, 'a', 'b', 'c', 'd', 'e', 0, 0, 0};
  XdrReader ok(b);
  EXPECT_EQ(ok.get_opaque_var(5).size(), 5u);
  EXPECT_TRUE(ok.ok());
  XdrReader over(b);
  EXPECT_TRUE(over.get_opaque_var(4).empty());
  EXPECT_FALSE(over.ok());
  XdrReader s(b);
  EXPECT_TRUE(s.get_string(4).empty());
  EXPECT_FALSE(s.ok());
}

TEST(Xdr, AbsurdLengthsFailWithoutReading) {
  for (uint32_t len : {0xffffffffu, 0xfffffffdu, 0x80000000u, 13u}) {
    uint8_t buf[8] = {};
    XdrWriter w(buf);
    w.put_u32(len);
    ExactBuf eb(buf);  // 8 bytes: the length word and 4 more
    XdrReader r(eb.span());
    EXPECT_TRUE(r.get_opaque_var(SIZE_MAX).empty()) << len;
    EXPECT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.position(), 4u);
  }
}

TEST(Xdr, PadPastTheEndFails) {
  // 1 byte of data present, its 3 pad bytes are not.
  const Bytes b{0, 0, 0, 1, 'z'};
  ExactBuf eb(b);
  XdrReader r(eb.span());
  EXPECT_TRUE(r.get_opaque_var(8).empty());
  EXPECT_FALSE(r.ok());
}

TEST(Xdr, FixedOpaqueOfHugeSizeDoesNotWrap) {
  const Bytes b{1, 2, 3, 4};
  XdrReader r(b);
  EXPECT_TRUE(r.get_opaque_fixed(SIZE_MAX).empty());
  EXPECT_FALSE(r.ok());
  XdrReader r2(b);
  EXPECT_TRUE(r2.get_opaque_fixed(SIZE_MAX - 2).empty());
  EXPECT_FALSE(r2.ok());
}

TEST(Xdr, NonZeroPadIsAccepted) {
  // RFC 4506 tells senders to pad with zeros; receivers in the wild accept any.
  const Bytes b{0, 0, 0, 1, 'q', 9, 9, 9, 0, 0, 0, 42};
  XdrReader r(b);
  EXPECT_EQ(r.get_string(8), "q");
  EXPECT_EQ(r.get_u32(), 42u);
  EXPECT_TRUE(r.ok());
}

TEST(Xdr, SkipAndRest) {
  const Bytes b{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3};
  XdrReader r(b);
  r.skip(4);
  EXPECT_EQ(r.position(), 4u);
  EXPECT_EQ(r.rest().size(), 8u);
  EXPECT_EQ(r.get_u32(), 2u);
  r.skip(8);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.position(), 8u);
}

TEST(Xdr, FailMarksTheStream) {
  const Bytes b{0, 0, 0, 1};
  XdrReader r(b);
  r.fail();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.get_u32(), 0u);
}

// ------------------------------------------------------------ random input

TEST(Xdr, RandomBuffersAndOperationsStayInBounds) {
  std::mt19937_64 rng(0x7e51);
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes src(rng() % 64);
    for (auto& b : src) b = static_cast<uint8_t>(rng() % 4 == 0 ? (rng() % 3) : rng());
    ExactBuf eb(src);
    XdrReader r(eb.span());
    const uint8_t* lo = eb.span().data();
    const uint8_t* hi = lo + eb.span().size();
    bool failed = false;
    for (int op = 0; op < 8; ++op) {
      std::span<const uint8_t> v;
      switch (rng() % 7) {
        case 0: r.get_u32(); break;
        case 1: r.get_u64(); break;
        case 2: r.get_bool(); break;
        case 3: v = r.get_opaque_fixed(rng() % 12); break;
        case 4: v = r.get_opaque_var(rng() % 40); break;
        case 5: {
          auto s = r.get_string(rng() % 40);
          v = as_bytes(s);
          break;
        }
        case 6: r.skip(rng() % 9); break;
      }
      if (!v.empty()) {
        ASSERT_GE(v.data(), lo);
        ASSERT_LE(v.data() + v.size(), hi);
      }
      if (failed) {
        ASSERT_FALSE(r.ok()) << "error flag must be sticky";
      }
      failed = !r.ok();
      ASSERT_LE(r.position(), src.size());
      ASSERT_EQ(r.position() + r.remaining(), src.size());
    }
  }
}

}  // namespace
}  // namespace tern::xdr
