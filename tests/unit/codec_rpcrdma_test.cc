// RPC-over-RDMA Version 1 header (RFC 8166): golden bytes written by hand from
// the RFC's XDR, round trips of every message shape, what a receiver must do
// with every kind of bad header, and random input.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "rpcrdma/rpcrdma_wire.h"
#include "xdr/xdr.h"

#include "exact_buf.h"
#include "xdr_mutate.h"

namespace tern::rpcrdma {
namespace {

using Bytes = std::vector<uint8_t>;

using tern::testing::ExactBuf;

// ------------------------------------------------------------ helpers

Segment seg(uint32_t handle, uint32_t length, uint64_t offset) { return Segment{handle, length, offset}; }

WriteChunk chunk(std::initializer_list<Segment> segs) {
  WriteChunk c;
  for (const Segment& s : segs) c.segments[c.nsegments++] = s;
  return c;
}

Header header(uint32_t xid, Proc proc, uint32_t credit = 32) {
  Header h;
  h.xid = xid;
  h.credit = credit;
  h.proc = proc;
  return h;
}

void add_read(Header& h, uint32_t position, Segment s) { h.chunks.reads[h.chunks.nreads++] = ReadSegment{position, s}; }
void add_write(Header& h, const WriteChunk& c) { h.chunks.writes[h.chunks.nwrites++] = c; }
void set_reply(Header& h, const WriteChunk& c) {
  h.chunks.reply = c;
  h.chunks.has_reply = true;
}

Bytes encode(const Header& h) {
  Bytes b(encoded_size(h));
  EXPECT_EQ(encode_header(h, b), b.size());
  return b;
}

DecodeResult decode(std::span<const uint8_t> b, Header* h) {
  ExactBuf eb(b);
  return decode_header(eb.span(), h);
}

Bytes build(const std::function<void(xdr::XdrWriter&)>& fn) {
  Bytes b(16384);
  xdr::XdrWriter w(b);
  fn(w);
  EXPECT_TRUE(w.ok());
  b.resize(w.bytes_written());
  return b;
}

void put_fixed(xdr::XdrWriter& w, uint32_t xid, uint32_t vers, uint32_t credit, uint32_t proc) {
  w.put_u32(xid);
  w.put_u32(vers);
  w.put_u32(credit);
  w.put_u32(proc);
}
void put_seg(xdr::XdrWriter& w, uint32_t handle = 1, uint32_t length = 2, uint64_t offset = 3) {
  w.put_u32(handle);
  w.put_u32(length);
  w.put_u64(offset);
}

bool same_segment(const Segment& a, const Segment& b) {
  return a.handle == b.handle && a.length == b.length && a.offset == b.offset;
}
bool same_chunk(const WriteChunk& a, const WriteChunk& b) {
  if (a.nsegments != b.nsegments) return false;
  for (uint32_t i = 0; i < a.nsegments; ++i)
    if (!same_segment(a.segments[i], b.segments[i])) return false;
  return true;
}
// Equal in every field the header's proc makes meaningful.
::testing::AssertionResult same_header(const Header& a, const Header& b) {
  if (a.xid != b.xid || a.vers != b.vers || a.credit != b.credit || a.proc != b.proc)
    return ::testing::AssertionFailure() << "fixed fields differ";
  if (a.proc == Proc::kError) {
    if (a.error.code != b.error.code) return ::testing::AssertionFailure() << "error code differs";
    if (a.error.code == ErrCode::kVers && (a.error.vers_low != b.error.vers_low || a.error.vers_high != b.error.vers_high))
      return ::testing::AssertionFailure() << "version range differs";
    return ::testing::AssertionSuccess();
  }
  const ChunkLists& x = a.chunks;
  const ChunkLists& y = b.chunks;
  if (x.nreads != y.nreads || x.nwrites != y.nwrites || x.has_reply != y.has_reply)
    return ::testing::AssertionFailure() << "list lengths differ";
  for (uint32_t i = 0; i < x.nreads; ++i)
    if (x.reads[i].position != y.reads[i].position || !same_segment(x.reads[i].target, y.reads[i].target))
      return ::testing::AssertionFailure() << "read " << i << " differs";
  for (uint32_t i = 0; i < x.nwrites; ++i)
    if (!same_chunk(x.writes[i], y.writes[i])) return ::testing::AssertionFailure() << "write chunk " << i << " differs";
  if (x.has_reply && !same_chunk(x.reply, y.reply)) return ::testing::AssertionFailure() << "reply chunk differs";
  return ::testing::AssertionSuccess();
}

// One header of every shape the engine sends.
std::vector<Header> all_shapes() {
  std::vector<Header> v;
  // RDMA_MSG, everything inline.
  v.push_back(header(1, Proc::kMsg));
  // RDMA_MSG with a read chunk of two segments and a second read chunk.
  {
    Header h = header(2, Proc::kMsg);
    add_read(h, 128, seg(0x100, 4096, 0x7f0000001000));
    add_read(h, 128, seg(0x101, 4096, 0x7f0000002000));
    add_read(h, 256, seg(0x102, 100, 0x10));
    v.push_back(h);
  }
  // RDMA_MSG with a write list of two chunks (a call expecting bulk results).
  {
    Header h = header(3, Proc::kMsg);
    add_write(h, chunk({seg(0x200, 65536, 0x1000), seg(0x201, 65536, 0x11000)}));
    add_write(h, chunk({seg(0x202, 8192, 0xffffffffffff0000ull)}));
    v.push_back(h);
  }
  // RDMA_MSG with a reply chunk.
  {
    Header h = header(4, Proc::kMsg);
    set_reply(h, chunk({seg(0x300, 1 << 20, 0x2000)}));
    v.push_back(h);
  }
  // RDMA_MSG with all three lists.
  {
    Header h = header(5, Proc::kMsg, 1);
    add_read(h, 64, seg(0x400, 512, 0x3000));
    add_write(h, chunk({seg(0x401, 1024, 0x4000), seg(0x402, 2048, 0x5000), seg(0x403, 4096, 0x6000),
                        seg(0x404, 8192, 0x7000)}));
    set_reply(h, chunk({seg(0x405, 4096, 0x8000)}));
    v.push_back(h);
  }
  // RDMA_NOMSG: a long call in a position-zero read chunk.
  {
    Header h = header(6, Proc::kNoMsg);
    add_read(h, 0, seg(0x500, 70000, 0x9000));
    v.push_back(h);
  }
  // RDMA_NOMSG: a long reply through the reply chunk (the server's answer).
  {
    Header h = header(7, Proc::kNoMsg, 128);
    set_reply(h, chunk({seg(0x600, 70000, 0xa000)}));
    v.push_back(h);
  }
  // Every list full.
  {
    Header h = header(8, Proc::kMsg, 0xffffffff);
    for (uint32_t i = 0; i < kMaxReadSegments; ++i) add_read(h, 4 * i, seg(i, i * 3, uint64_t{i} << 40));
    for (uint32_t c = 0; c < kMaxWriteChunks; ++c) {
      WriteChunk wc;
      for (uint32_t i = 0; i < kMaxSegmentsPerChunk; ++i) wc.segments[wc.nsegments++] = seg(c * 100 + i, i, ~uint64_t{i});
      add_write(h, wc);
    }
    WriteChunk rc;
    for (uint32_t i = 0; i < kMaxSegmentsPerChunk; ++i) rc.segments[rc.nsegments++] = seg(999 + i, 7, i);
    set_reply(h, rc);
    v.push_back(h);
  }
  // RDMA_ERROR, both kinds.
  {
    Header h = header(9, Proc::kError, 4);
    h.error.code = ErrCode::kVers;
    h.error.vers_low = 1;
    h.error.vers_high = 1;
    v.push_back(h);
  }
  {
    Header h = header(10, Proc::kError, 4);
    h.error.code = ErrCode::kChunk;
    v.push_back(h);
  }
  return v;
}

// ------------------------------------------------------------ golden bytes

TEST(RpcRdmaWire, GoldenCallWithReadAndWriteList) {
  // Written by hand from RFC 8166 §4.1: fixed fields, then the read list as an
  // optional-data chain, the write list likewise, then the reply chunk.
  const Bytes expected{
      0xde, 0xad, 0xbe, 0xef,  // rdma_xid
      0x00, 0x00, 0x00, 0x01,  // rdma_vers = 1
      0x00, 0x00, 0x00, 0x80,  // rdma_credit = 128
      0x00, 0x00, 0x00, 0x00,  // rdma_proc = RDMA_MSG
      0x00, 0x00, 0x00, 0x01,  // read list: an entry follows
      0x00, 0x00, 0x00, 0x40,  //   position = 64
      0x11, 0x11, 0x11, 0x11,  //   handle
      0x00, 0x00, 0x10, 0x00,  //   length = 4096
      0x00, 0x00, 0x00, 0x01,  //   offset (high word)
      0x00, 0x00, 0x20, 0x00,  //   offset (low word)
      0x00, 0x00, 0x00, 0x00,  // read list: end
      0x00, 0x00, 0x00, 0x01,  // write list: an entry follows
      0x00, 0x00, 0x00, 0x01,  //   one segment
      0x22, 0x22, 0x22, 0x22,  //   handle
      0x00, 0x01, 0x00, 0x00,  //   length = 65536
      0xff, 0xff, 0xee, 0xee,  //   offset (high word)
      0x00, 0x00, 0x12, 0x34,  //   offset (low word)
      0x00, 0x00, 0x00, 0x00,  // write list: end
      0x00, 0x00, 0x00, 0x00,  // no reply chunk
  };
  Header h = header(0xdeadbeef, Proc::kMsg, 128);
  add_read(h, 64, seg(0x11111111, 4096, 0x0000000100002000ull));
  add_write(h, chunk({seg(0x22222222, 65536, 0xffffeeee00001234ull)}));
  EXPECT_EQ(encoded_size(h), expected.size());
  EXPECT_EQ(encode(h), expected);

  Header d;
  DecodeResult r = decode(expected, &d);
  EXPECT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(r.header_len, expected.size());
  EXPECT_TRUE(same_header(d, h));
}

TEST(RpcRdmaWire, GoldenInlineCallHeaderIs28Bytes) {
  const Bytes expected{0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(encode(header(7, Proc::kMsg, 16)), expected);
  EXPECT_EQ(kMinMsgHeaderSize, 28u);
}

TEST(RpcRdmaWire, GoldenErrVers) {
  const Bytes expected{
      0x01, 0x02, 0x03, 0x04,  // rdma_xid, echoed from the offending message
      0x00, 0x00, 0x00, 0x01,  // rdma_vers
      0x00, 0x00, 0x00, 0x20,  // rdma_credit = 32
      0x00, 0x00, 0x00, 0x04,  // RDMA_ERROR
      0x00, 0x00, 0x00, 0x01,  // ERR_VERS
      0x00, 0x00, 0x00, 0x01,  // low = 1
      0x00, 0x00, 0x00, 0x01,  // high = 1
  };
  uint8_t buf[64];
  ASSERT_EQ(encode_err_vers(0x01020304, 32, buf), kErrVersSize);
  EXPECT_EQ(Bytes(buf, buf + kErrVersSize), expected);
}

TEST(RpcRdmaWire, GoldenErrChunk) {
  const Bytes expected{0xca, 0xfe, 0xf0, 0x0d, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0, 2};
  uint8_t buf[64];
  ASSERT_EQ(encode_err_chunk(0xcafef00d, 5, buf), kErrChunkSize);
  EXPECT_EQ(Bytes(buf, buf + kErrChunkSize), expected);
}

// ------------------------------------------------------------ round trips

TEST(RpcRdmaWire, RoundTripEveryShape) {
  for (const Header& h : all_shapes()) {
    SCOPED_TRACE(::testing::Message() << "xid " << h.xid);
    Bytes b = encode(h);
    EXPECT_EQ(b.size(), encoded_size(h));
    Header d;
    DecodeResult r = decode(b, &d);
    ASSERT_EQ(r.status, DecodeStatus::kOk) << decode_status_name(r.status);
    EXPECT_EQ(r.header_len, b.size());
    EXPECT_TRUE(same_header(d, h));
  }
}

TEST(RpcRdmaWire, FullHeaderIsTheMaximumSize) {
  Header full = all_shapes()[7];
  ASSERT_EQ(full.chunks.nreads, kMaxReadSegments);
  EXPECT_EQ(encoded_size(full), kMaxHeaderSize);
}

TEST(RpcRdmaWire, RpcMessageFollowsTheMsgHeader) {
  Header h = header(0x55667788, Proc::kMsg);
  add_write(h, chunk({seg(1, 2, 3)}));
  Bytes b = encode(h);
  const size_t hdr = b.size();
  const uint8_t rpc[] = {0x55, 0x66, 0x77, 0x88, 0, 0, 0, 0};  // xid, CALL
  b.insert(b.end(), rpc, rpc + sizeof rpc);
  Header d;
  DecodeResult r = decode(b, &d);
  ASSERT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(r.header_len, hdr);
  std::span<const uint8_t> body(b.data() + r.header_len, b.size() - r.header_len);
  EXPECT_TRUE(rpc_xid_matches(d, body));
  const uint8_t other[] = {0x55, 0x66, 0x77, 0x89};
  EXPECT_FALSE(rpc_xid_matches(d, other));
  EXPECT_FALSE(rpc_xid_matches(d, body.first(3)));
}

TEST(RpcRdmaWire, TotalLength) {
  WriteChunk c = chunk({seg(1, 0xffffffff, 0), seg(2, 0xffffffff, 0)});
  EXPECT_EQ(c.total_length(), 2ull * 0xffffffff);
  EXPECT_EQ(c.view().size(), 2u);
}

// ------------------------------------------------------------ encoder bounds

TEST(RpcRdmaWire, EncodeIntoTooSmallBufferWritesNothingPastIt) {
  for (const Header& h : all_shapes()) {
    const size_t need = encoded_size(h);
    for (size_t cap : {size_t{0}, size_t{4}, need / 2, need - 1}) {
      Bytes mem(need + 8, 0xee);
      EXPECT_EQ(encode_header(h, std::span<uint8_t>(mem.data(), cap)), 0u);
      for (size_t i = cap; i < mem.size(); ++i) ASSERT_EQ(mem[i], 0xee) << "cap " << cap << " byte " << i;
    }
  }
  uint8_t small[kErrVersSize - 1];
  EXPECT_EQ(encode_err_vers(1, 1, small), 0u);
  EXPECT_EQ(encode_err_chunk(1, 1, std::span<uint8_t>(small, kErrChunkSize - 1)), 0u);
}

TEST(RpcRdmaWireDeath, RefusesToSendWhatTheRfcForbids) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  uint8_t buf[256];
  EXPECT_DEATH(encode_header(header(1, Proc::kMsgp), buf), "may not be sent");
  EXPECT_DEATH(encode_header(header(1, Proc::kDone), buf), "may not be sent");
  EXPECT_DEATH(encode_header(header(1, Proc::kNoMsg), buf), "RDMA_NOMSG without chunks");
  Header empty_chunk = header(1, Proc::kMsg);
  empty_chunk.chunks.nwrites = 1;
  empty_chunk.chunks.writes[0].nsegments = 0;
  EXPECT_DEATH(encode_header(empty_chunk, buf), "write chunk with 0 segments");
}

// ------------------------------------------------------------ truncation

TEST(RpcRdmaWire, TruncationAtEveryOffsetFailsCleanly) {
  for (const Header& h : all_shapes()) {
    Bytes b = encode(h);
    for (size_t len = 0; len < b.size(); ++len) {
      SCOPED_TRACE(::testing::Message() << "xid " << h.xid << " len " << len);
      Header d;
      DecodeResult r = decode(std::span<const uint8_t>(b.data(), len), &d);
      EXPECT_LE(r.header_len, len);
      if (len < kFixedHeaderSize) {
        EXPECT_EQ(r.status, DecodeStatus::kTooShort);
      } else if (h.proc == Proc::kError) {
        EXPECT_EQ(r.status, DecodeStatus::kGarbage);  // never answered
      } else {
        EXPECT_EQ(r.status, DecodeStatus::kBadChunk);  // answered with ERR_CHUNK
        EXPECT_EQ(d.xid, h.xid);
      }
      uint8_t reply[64];
      size_t n = encode_error_reply(r.status, d, 9, reply);
      EXPECT_EQ(n, r.status == DecodeStatus::kBadChunk ? kErrChunkSize : 0u);
    }
  }
}

// ------------------------------------------------------------ version mismatch

TEST(RpcRdmaWire, OtherVersionIsAnsweredWithErrVers) {
  for (uint32_t vers : {0u, 2u, 3u, 0xffffffffu}) {
    SCOPED_TRACE(vers);
    // A whole version-2-looking call, and one cut right after rdma_vers.
    Bytes full = build([&](xdr::XdrWriter& w) {
      put_fixed(w, 0xa1b2c3d4, vers, 7, 0);
      w.put_u32(0);
      w.put_u32(0);
      w.put_u32(0);
    });
    for (size_t len : {size_t{8}, size_t{12}, full.size()}) {
      Header d;
      DecodeResult r = decode(std::span<const uint8_t>(full.data(), len), &d);
      ASSERT_EQ(r.status, DecodeStatus::kVersionMismatch) << decode_status_name(r.status);
      EXPECT_EQ(d.xid, 0xa1b2c3d4u);
      EXPECT_EQ(d.vers, vers);

      uint8_t reply[64];
      size_t n = encode_error_reply(r.status, d, 11, reply);
      const Bytes expected{0xa1, 0xb2, 0xc3, 0xd4, 0, 0, 0, 1, 0, 0, 0, 11, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1};
      EXPECT_EQ(Bytes(reply, reply + n), expected);
    }
  }
}

TEST(RpcRdmaWire, ShorterThanXidAndVersIsTooShort) {
  const Bytes b{0, 0, 0, 1, 0, 0, 0};
  for (size_t len = 0; len <= b.size(); ++len) {
    Header d;
    EXPECT_EQ(decode(std::span<const uint8_t>(b.data(), len), &d).status, DecodeStatus::kTooShort);
  }
}

TEST(RpcRdmaWire, ErrVersOfAnotherVersionIsReadable) {
  // RFC 8166 §4.1: rdma_proc's position, RDMA_ERROR and the ERR_VERS body are
  // fixed for all versions, so a Requester learns what a newer peer speaks.
  Bytes b = build([](xdr::XdrWriter& w) {
    put_fixed(w, 42, 2, 0, 4);
    w.put_u32(1);
    w.put_u32(2);
    w.put_u32(3);
  });
  Header d;
  DecodeResult r = decode(b, &d);
  ASSERT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(d.vers, 2u);
  EXPECT_EQ(d.proc, Proc::kError);
  EXPECT_EQ(d.error.code, ErrCode::kVers);
  EXPECT_EQ(d.error.vers_low, 2u);
  EXPECT_EQ(d.error.vers_high, 3u);
  EXPECT_EQ(r.header_len, b.size());

  // Another version's other errors, or a cut ERR_VERS: drop, never answer.
  Bytes chunk_err = build([](xdr::XdrWriter& w) {
    put_fixed(w, 42, 2, 0, 4);
    w.put_u32(2);
  });
  EXPECT_EQ(decode(chunk_err, &d).status, DecodeStatus::kGarbage);
  EXPECT_EQ(decode(std::span<const uint8_t>(b.data(), b.size() - 4), &d).status, DecodeStatus::kGarbage);
}

// ------------------------------------------------------------ procedures

TEST(RpcRdmaWire, MsgpIsAnsweredWithErrChunk) {
  // RFC 8166 §4.6.1: a receiver answers RDMA_MSGP with ERR_CHUNK, even a
  // well-formed RFC 5666 one (align, threshold, three empty lists).
  Bytes b = build([](xdr::XdrWriter& w) {
    put_fixed(w, 77, 1, 3, 2);
    w.put_u32(4096);
    w.put_u32(1024);
    w.put_u32(0);
    w.put_u32(0);
    w.put_u32(0);
  });
  Header d;
  DecodeResult r = decode(b, &d);
  EXPECT_EQ(r.status, DecodeStatus::kBadChunk);
  EXPECT_EQ(d.xid, 77u);
  uint8_t reply[64];
  size_t n = encode_error_reply(r.status, d, 3, reply);
  const Bytes expected{0, 0, 0, 77, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 2};
  EXPECT_EQ(Bytes(reply, reply + n), expected);
}

TEST(RpcRdmaWire, DoneIsSilentlyDiscarded) {
  // RFC 8166 §4.6.2.
  Bytes b = build([](xdr::XdrWriter& w) { put_fixed(w, 78, 1, 0, 3); });
  Header d;
  DecodeResult r = decode(b, &d);
  EXPECT_EQ(r.status, DecodeStatus::kDiscard);
  uint8_t reply[64];
  EXPECT_EQ(encode_error_reply(r.status, d, 3, reply), 0u);
}

TEST(RpcRdmaWire, UnknownProcIsAnsweredWithErrChunk) {
  for (uint32_t proc : {5u, 6u, 0x80000000u, 0xffffffffu}) {
    Bytes b = build([&](xdr::XdrWriter& w) {
      put_fixed(w, 79, 1, 0, proc);
      w.put_u32(0);
      w.put_u32(0);
      w.put_u32(0);
    });
    Header d;
    EXPECT_EQ(decode(b, &d).status, DecodeStatus::kBadChunk) << proc;
  }
}

TEST(RpcRdmaWire, NoMsgWithoutChunksIsAnsweredWithErrChunk) {
  // RFC 8166 §4.5.2 gives it as an example of an XDR error.
  Bytes b = encode(header(80, Proc::kMsg));
  b[15] = 1;  // rdma_proc = RDMA_NOMSG
  Header d;
  EXPECT_EQ(decode(b, &d).status, DecodeStatus::kBadChunk);
}

TEST(RpcRdmaWire, ErrorWithUnknownCodeIsGarbage) {
  for (uint32_t code : {0u, 3u, 0xffffffffu}) {
    Bytes b = build([&](xdr::XdrWriter& w) {
      put_fixed(w, 81, 1, 0, 4);
      w.put_u32(code);
    });
    Header d;
    DecodeResult r = decode(b, &d);
    EXPECT_EQ(r.status, DecodeStatus::kGarbage) << code;
    uint8_t reply[64];
    EXPECT_EQ(encode_error_reply(r.status, d, 1, reply), 0u);
  }
}

// ------------------------------------------------------------ list limits

Bytes msg_with_reads(uint32_t n) {
  return build([&](xdr::XdrWriter& w) {
    put_fixed(w, 90, 1, 1, 0);
    for (uint32_t i = 0; i < n; ++i) {
      w.put_bool(true);
      w.put_u32(i * 4);
      put_seg(w, i);
    }
    w.put_bool(false);
    w.put_bool(false);
    w.put_bool(false);
  });
}

Bytes msg_with_writes(uint32_t nchunks, uint32_t nsegs) {
  return build([&](xdr::XdrWriter& w) {
    put_fixed(w, 91, 1, 1, 0);
    w.put_bool(false);
    for (uint32_t c = 0; c < nchunks; ++c) {
      w.put_bool(true);
      w.put_u32(nsegs);
      for (uint32_t i = 0; i < nsegs; ++i) put_seg(w, c * 100 + i);
    }
    w.put_bool(false);
    w.put_bool(false);
  });
}

Bytes msg_with_reply(uint32_t nsegs) {
  return build([&](xdr::XdrWriter& w) {
    put_fixed(w, 92, 1, 1, 0);
    w.put_bool(false);
    w.put_bool(false);
    w.put_bool(true);
    w.put_u32(nsegs);
    for (uint32_t i = 0; i < nsegs; ++i) put_seg(w, i);
  });
}

TEST(RpcRdmaWire, ReadListLimit) {
  Header d;
  EXPECT_EQ(decode(msg_with_reads(kMaxReadSegments), &d).status, DecodeStatus::kOk);
  EXPECT_EQ(d.chunks.nreads, kMaxReadSegments);
  EXPECT_EQ(decode(msg_with_reads(kMaxReadSegments + 1), &d).status, DecodeStatus::kBadChunk);
  EXPECT_EQ(decode(msg_with_reads(200), &d).status, DecodeStatus::kBadChunk);
}

TEST(RpcRdmaWire, WriteListLimits) {
  Header d;
  EXPECT_EQ(decode(msg_with_writes(kMaxWriteChunks, kMaxSegmentsPerChunk), &d).status, DecodeStatus::kOk);
  EXPECT_EQ(d.chunks.nwrites, kMaxWriteChunks);
  EXPECT_EQ(decode(msg_with_writes(kMaxWriteChunks + 1, 1), &d).status, DecodeStatus::kBadChunk);
  EXPECT_EQ(decode(msg_with_writes(1, kMaxSegmentsPerChunk + 1), &d).status, DecodeStatus::kBadChunk);
  EXPECT_EQ(decode(msg_with_writes(1, 0), &d).status, DecodeStatus::kBadChunk);
}

TEST(RpcRdmaWire, ReplyChunkLimits) {
  Header d;
  EXPECT_EQ(decode(msg_with_reply(kMaxSegmentsPerChunk), &d).status, DecodeStatus::kOk);
  EXPECT_TRUE(d.chunks.has_reply);
  EXPECT_EQ(decode(msg_with_reply(kMaxSegmentsPerChunk + 1), &d).status, DecodeStatus::kBadChunk);
  EXPECT_EQ(decode(msg_with_reply(0), &d).status, DecodeStatus::kBadChunk);
}

TEST(RpcRdmaWire, AbsurdSegmentCountsAreRefusedBeforeReading) {
  for (uint32_t count : {0xffffffffu, 0x80000000u, 0x10000u, kMaxSegmentsPerChunk + 1}) {
    // The count is the last word in the buffer: any attempt to read segments
    // would run past it (and ASan would say so).
    Bytes w = build([&](xdr::XdrWriter& x) {
      put_fixed(x, 93, 1, 1, 0);
      x.put_bool(false);
      x.put_bool(true);
      x.put_u32(count);
    });
    Bytes r = build([&](xdr::XdrWriter& x) {
      put_fixed(x, 94, 1, 1, 0);
      x.put_bool(false);
      x.put_bool(false);
      x.put_bool(true);
      x.put_u32(count);
    });
    Header d;
    EXPECT_EQ(decode(w, &d).status, DecodeStatus::kBadChunk) << count;
    EXPECT_EQ(decode(r, &d).status, DecodeStatus::kBadChunk) << count;
  }
}

TEST(RpcRdmaWire, BadListDiscriminants) {
  // Each list marker is an XDR bool: only 0 and 1 are valid.
  const Bytes base = encode(header(95, Proc::kMsg));
  for (size_t word : {16u, 20u, 24u}) {
    for (uint32_t v : {2u, 0x100u, 0xffffffffu}) {
      Bytes b = base;
      xdr::detail::store_be32(b.data() + word, v);
      Header d;
      EXPECT_EQ(decode(b, &d).status, DecodeStatus::kBadChunk) << "word " << word << " = " << v;
    }
  }
}

// ------------------------------------------------------------ random input

// Turns valid headers into hostile ones: random bytes, words set to the values
// that hurt (0, 1, capacities, all ones), truncation, trailing junk.
const uint32_t kNasty[] = {0, 1, 2, 3, 4, 5, 16, 17, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff};
Bytes mutate(Bytes b, std::mt19937_64& rng) { return tern::testing::mutate_xdr(std::move(b), rng, kNasty); }

TEST(RpcRdmaWire, RandomAndMutatedHeaders) {
  std::mt19937_64 rng(0x8166);
  std::vector<Bytes> seeds;
  for (const Header& h : all_shapes()) seeds.push_back(encode(h));
  int ok = 0;
  int seen[6] = {};
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b;
    if (iter % 4 == 0) {
      // Random words behind a plausible fixed header.
      b = build([&](xdr::XdrWriter& w) { put_fixed(w, static_cast<uint32_t>(rng()), 1, 1, rng() % 6); });
      for (size_t k = rng() % 48; k > 0; --k) {
        uint32_t v = rng() % 3 == 0 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng() % 3);
        b.resize(b.size() + 4);
        xdr::detail::store_be32(b.data() + b.size() - 4, v);
      }
    } else {
      b = mutate(seeds[rng() % seeds.size()], rng);
    }
    Header d;
    DecodeResult r = decode(b, &d);
    ASSERT_LE(r.header_len, b.size());
    ++seen[static_cast<int>(r.status)];
    uint8_t reply[64];
    size_t n = encode_error_reply(r.status, d, 1, reply);
    switch (r.status) {
      case DecodeStatus::kOk: {
        ++ok;
        // A decoded header re-encodes to exactly the bytes it came from: the
        // decoder accepted nothing that is not the canonical encoding.
        ASSERT_EQ(encoded_size(d), r.header_len);
        Bytes again = encode(d);
        ASSERT_TRUE(std::equal(again.begin(), again.end(), b.begin())) << "iteration " << iter;
        ASSERT_EQ(n, 0u);
        break;
      }
      case DecodeStatus::kVersionMismatch: {
        ASSERT_NE(d.vers, kVersion);
        ASSERT_EQ(n, kErrVersSize);
        Header e;
        ASSERT_EQ(decode(std::span<const uint8_t>(reply, n), &e).status, DecodeStatus::kOk);
        ASSERT_EQ(e.xid, d.xid);
        ASSERT_EQ(e.error.code, ErrCode::kVers);
        break;
      }
      case DecodeStatus::kBadChunk:
        ASSERT_EQ(d.vers, kVersion);
        ASSERT_EQ(n, kErrChunkSize);
        break;
      case DecodeStatus::kDiscard: ASSERT_EQ(d.proc, Proc::kDone); [[fallthrough]];
      case DecodeStatus::kTooShort:
      case DecodeStatus::kGarbage: ASSERT_EQ(n, 0u); break;
    }
  }
  // The mix must reach the accepting paths and every refusal, or it proves little.
  EXPECT_GT(ok, 5000);
  for (int st = 0; st < 6; ++st) EXPECT_GT(seen[st], 100) << decode_status_name(static_cast<DecodeStatus>(st));
}

}  // namespace
}  // namespace tern::rpcrdma
