// NFSv4.0 COMPOUND codec (lib/nfs): arguments and results against golden
// bytes written by hand from RFC 7530's XDR, the reduced READ data item of
// RFC 8166/8267, every truncation of every reply, inconsistent and failed
// statuses, and random input.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "nfs/compound_args.h"
#include "nfs/compound_res.h"
#include "nfs/fattr4.h"
#include "nfs/nfs4_status.h"

#include "exact_buf.h"
#include "xdr_mutate.h"

namespace tern::nfs {
namespace {

using Bytes = std::vector<uint8_t>;
using tern::testing::ExactBuf;

// Big-endian words, the way RFC 7530's XDR puts every item on the wire.
Bytes be(std::initializer_list<uint32_t> words) {
  Bytes b;
  for (uint32_t w : words) {
    b.push_back(static_cast<uint8_t>(w >> 24));
    b.push_back(static_cast<uint8_t>(w >> 16));
    b.push_back(static_cast<uint8_t>(w >> 8));
    b.push_back(static_cast<uint8_t>(w));
  }
  return b;
}
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes b;
  for (const Bytes& p : parts) b.insert(b.end(), p.begin(), p.end());
  return b;
}
Bytes args_of(CompoundArgs& a) {
  auto r = a.finish();
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? Bytes(r->begin(), r->end()) : Bytes{};
}

constexpr uint32_t kOpPutrootfh = 24, kOpLookup = 15, kOpGetfh = 10, kOpGetattr = 9, kOpPutfh = 22, kOpRead = 25,
                   kOpWrite = 38, kOpCommit = 5;

// ------------------------------------------------------------ arguments

TEST(NfsArgs, LookupCompoundGolden) {
  uint8_t buf[512];
  CompoundArgs a(buf);
  a.putrootfh();
  a.lookup("a");
  a.getfh();
  a.getattr({Attr::kType, Attr::kSize, Attr::kFileid});
  Bytes want = be({0,          // tag: empty
                   0,          // minorversion 0
                   4,          // four operations
                   kOpPutrootfh,
                   kOpLookup, 1, 0x61000000,  // "a" and three pad bytes
                   kOpGetfh,
                   kOpGetattr, 1, (1u << 1) | (1u << 4) | (1u << 20)});  // type, size, fileid in word 0
  EXPECT_EQ(args_of(a), want);
  EXPECT_EQ(a.num_ops(), 4u);
}

TEST(NfsArgs, ReadWithTheBypassStateidGolden) {
  uint8_t buf[512];
  CompoundArgs a(buf, "rd");
  FileHandle fh;
  const uint8_t fhb[] = {1, 2, 3};
  ASSERT_TRUE(fh.assign(fhb));
  a.putfh(fh);
  a.read(Stateid::read_bypass(), (uint64_t{1} << 32) + 5, 1u << 20);
  Bytes want = be({2, 0x72640000,  // tag "rd"
                   0, 2,
                   kOpPutfh, 3, 0x01020300,
                   kOpRead, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,  // READ bypass: all ones
                   1, 5,                                                    // offset, hyper
                   0x00100000});
  EXPECT_EQ(args_of(a), want);
}

// A WRITE whose data is a read chunk ends at its length field: Tern puts
// the chunk right there, so the data must be the last thing in the call.
TEST(NfsArgs, ChunkedWriteEndsAtTheDataLength) {
  uint8_t buf[512];
  CompoundArgs a(buf);
  FileHandle fh;
  const uint8_t fhb[] = {9, 9, 9, 9};
  ASSERT_TRUE(fh.assign(fhb));
  a.putfh(fh);
  a.write_chunked(Stateid::anonymous(), 4096, StableHow::kFileSync, 1u << 20);
  Bytes want = be({0, 0, 2,
                   kOpPutfh, 4, 0x09090909,
                   kOpWrite, 0, 0, 0, 0,  // anonymous stateid: all zeros
                   0, 4096,
                   2,                     // FILE_SYNC4
                   0x00100000});          // data length; the bytes are the chunk
  EXPECT_EQ(args_of(a), want);
}

TEST(NfsArgs, NothingMayFollowAChunkedWrite) {
  uint8_t buf[512];
  CompoundArgs a(buf);
  a.putfh(FileHandle{});
  a.write_chunked(Stateid::anonymous(), 0, StableHow::kUnstable, 8);
  a.getattr({Attr::kSize});
  auto r = a.finish();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArgument);
  EXPECT_NE(r.status().message().find("GETATTR"), std::string::npos) << r.status().message();
}

TEST(NfsArgs, InlineWriteAndCommitGolden) {
  uint8_t buf[512];
  CompoundArgs a(buf);
  const uint8_t data[] = {'a', 'b', 'c', 'd', 'e'};
  a.write(Stateid::anonymous(), 7, StableHow::kUnstable, data);
  a.commit(0, 0);
  Bytes want = be({0, 0, 2,
                   kOpWrite, 0, 0, 0, 0, 0, 7, 0,
                   5, 0x61626364, 0x65000000,  // opaque<>: length, bytes, pad
                   kOpCommit, 0, 0, 0});
  EXPECT_EQ(args_of(a), want);
}

TEST(NfsArgs, EveryTooSmallBufferIsRefused) {
  uint8_t big[512];
  CompoundArgs full(big, "tag");
  full.putrootfh();
  full.lookup("some-directory");
  full.getattr({Attr::kSize, Attr::kTimeModify});
  size_t need = full.finish()->size();
  for (size_t n = 0; n < need; ++n) {
    std::vector<uint8_t> b(n);
    CompoundArgs a(b, "tag");
    a.putrootfh();
    a.lookup("some-directory");
    a.getattr({Attr::kSize, Attr::kTimeModify});
    auto r = a.finish();
    ASSERT_FALSE(r.is_ok()) << n;
    EXPECT_EQ(r.status().code(), Errc::kNoResources) << n;
  }
}

TEST(NfsArgs, BadNamesAndTagsAreRefused) {
  uint8_t buf[1024];
  {
    CompoundArgs a(buf);
    a.lookup(std::string(kMaxNameSize + 1, 'x'));
    EXPECT_EQ(a.finish().status().code(), Errc::kInvalidArgument);
  }
  {
    CompoundArgs a(buf);
    a.lookup("");
    EXPECT_EQ(a.finish().status().code(), Errc::kInvalidArgument);
  }
  {
    CompoundArgs a(buf, std::string(kMaxTagSize + 1, 't'));
    a.putrootfh();
    EXPECT_EQ(a.finish().status().code(), Errc::kInvalidArgument);
  }
  {
    CompoundArgs a(buf);
    a.lookup(std::string(kMaxNameSize, 'x'));
    EXPECT_TRUE(a.finish().is_ok());
  }
}

TEST(NfsArgs, BitmapUsesTwoWordsOnlyWhenNeeded) {
  uint8_t buf[64];
  xdr::XdrWriter w(buf);
  put_bitmap4(w, {Attr::kSize});
  put_bitmap4(w, {Attr::kType, Attr::kTimeModify});
  put_bitmap4(w, {});
  EXPECT_EQ(Bytes(w.written().begin(), w.written().end()),
            be({1, 1u << 4, 2, 1u << 1, 1u << (53 - 32), 0}));
}

// ------------------------------------------------------------ results

// PUTROOTFH, LOOKUP, GETFH, GETATTR(type, size, fileid) all OK.
Bytes lookup_reply() {
  return be({0, 0, 4,
             kOpPutrootfh, 0,
             kOpLookup, 0,
             kOpGetfh, 0, 8, 0xdeadbeef, 0x01020304,
             kOpGetattr, 0,
             1, (1u << 1) | (1u << 4) | (1u << 20),  // attrmask
             20,                                     // attr_vals: 4 + 8 + 8 bytes
             1,                                      // NF4REG
             0, 0x00400000,                          // size 4 MiB
             0, 0xabcd});                            // fileid
}

// The whole sequence a client runs over lookup_reply; false at the first failure.
Status decode_lookup(std::span<const uint8_t> b, FileHandle* fh, Fattr4* attrs) {
  auto res = CompoundRes::decode(b);
  TERN_TRY(res);
  auto ok = [](Result<Nfs4Stat> r, const char* op) -> Status {
    if (!r.is_ok()) return r.status();
    if (r.value() != Nfs4Stat::kOk) return nfs4_error(r.value(), op);
    return Status::ok();
  };
  TERN_TRY(ok(res->putrootfh(), "PUTROOTFH"));
  TERN_TRY(ok(res->lookup(), "LOOKUP"));
  TERN_TRY(ok(res->getfh(fh), "GETFH"));
  TERN_TRY(ok(res->getattr(attrs), "GETATTR"));
  return res->finish();
}

TEST(NfsRes, LookupReplyGolden) {
  Bytes b = lookup_reply();
  ExactBuf eb(b);
  FileHandle fh;
  Fattr4 a;
  Status s = decode_lookup(eb.span(), &fh, &a);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(fh.len, 8u);
  EXPECT_EQ(fh.data[0], 0xde);
  EXPECT_EQ(fh.data[7], 0x04);
  EXPECT_EQ(a.present, (AttrSet{Attr::kType, Attr::kSize, Attr::kFileid}));
  EXPECT_EQ(a.type, FileType::kReg);
  EXPECT_EQ(a.size, 4u << 20);
  EXPECT_EQ(a.fileid, 0xabcdu);
}

TEST(NfsRes, EveryTruncationFails) {
  Bytes b = lookup_reply();
  for (size_t n = 0; n < b.size(); ++n) {
    ExactBuf eb(std::span<const uint8_t>(b.data(), n));
    FileHandle fh;
    Fattr4 a;
    EXPECT_FALSE(decode_lookup(eb.span(), &fh, &a).is_ok()) << n;
  }
}

TEST(NfsRes, TrailingBytesAndMissingResultsAreRefused) {
  Bytes extra = cat({lookup_reply(), be({0})});
  FileHandle fh;
  Fattr4 a;
  EXPECT_EQ(decode_lookup(extra, &fh, &a).code(), Errc::kRemoteError);
  // Three results but status OK: GETATTR's is missing.
  Bytes short3 = be({0, 0, 3, kOpPutrootfh, 0, kOpLookup, 0, kOpGetfh, 0, 0});
  EXPECT_EQ(decode_lookup(short3, &fh, &a).code(), Errc::kRemoteError);
}

// The server stops at the failed operation and says so twice.
TEST(NfsRes, FailedLookupIsLastAndNamed) {
  Bytes b = be({2, 0, 2, kOpPutrootfh, 0, kOpLookup, 2});
  ExactBuf eb(b);
  auto res = CompoundRes::decode(eb.span());
  ASSERT_TRUE(res.is_ok());
  EXPECT_EQ(res->status(), Nfs4Stat::kNoent);
  EXPECT_EQ(res->putrootfh().value(), Nfs4Stat::kOk);
  EXPECT_EQ(res->lookup().value(), Nfs4Stat::kNoent);
  FileHandle fh;
  EXPECT_FALSE(res->getfh(&fh).is_ok());  // nothing may follow a failed operation
  EXPECT_TRUE(res->finish().is_ok());
  EXPECT_STREQ(nfs4_stat_name(Nfs4Stat::kNoent), "NFS4ERR_NOENT");
  Status s = nfs4_error(Nfs4Stat::kNoent, "LOOKUP");
  EXPECT_EQ(s.code(), Errc::kNotFound);
  EXPECT_EQ(s.message(), "LOOKUP: NFS4ERR_NOENT (2)");
}

TEST(NfsRes, InconsistentStatusesAreTheServersMistake) {
  // LOOKUP failed but the COMPOUND says OK.
  Bytes a = be({0, 0, 2, kOpPutrootfh, 0, kOpLookup, 2});
  auto ra = CompoundRes::decode(a);
  ASSERT_TRUE(ra.is_ok());
  (void)ra->putrootfh();
  EXPECT_EQ(ra->lookup().status().code(), Errc::kRemoteError);
  // A failed operation followed by another result.
  Bytes b = be({2, 0, 3, kOpPutrootfh, 2, kOpLookup, 0, kOpGetfh, 0});
  auto rb = CompoundRes::decode(b);
  ASSERT_TRUE(rb.is_ok());
  EXPECT_EQ(rb->putrootfh().status().code(), Errc::kRemoteError);
  // A result for another operation than the one sent.
  Bytes c = be({0, 0, 1, kOpPutfh, 0});
  auto rc = CompoundRes::decode(c);
  ASSERT_TRUE(rc.is_ok());
  auto st = rc->putrootfh();
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("PUTROOTFH"), std::string::npos) << st.status().message();
  // A result count no reply could hold.
  Bytes d = be({0, 0, 0xffffffff});
  EXPECT_EQ(CompoundRes::decode(d).status().code(), Errc::kRemoteError);
}

// RFC 7530 §16.2: a server that does not run the COMPOUND at all (wrong minor
// version) returns no results; every operation then reports that status.
TEST(NfsRes, NoResultsCarryTheCompoundStatus) {
  Bytes b = be({10021, 0, 0});
  auto res = CompoundRes::decode(b);
  ASSERT_TRUE(res.is_ok());
  EXPECT_EQ(res->putrootfh().value(), Nfs4Stat::kMinorVersMismatch);
  EXPECT_STREQ(nfs4_stat_name(res->status()), "NFS4ERR_MINOR_VERS_MISMATCH");
}

TEST(NfsRes, ReducedReadDataItemFromTheWriteChunk) {
  // What svcrdma sends for a READ with a write chunk: eof and the data's
  // length inline, the bytes (and pad) in the chunk.
  Bytes b = be({0, 0, 2, kOpPutfh, 0, kOpRead, 0, 1, 0x00100000});
  {
    auto res = CompoundRes::decode(b);
    ASSERT_TRUE(res.is_ok());
    ASSERT_EQ(res->putfh().value(), Nfs4Stat::kOk);
    Read4Res r;
    auto st = res->read(ReadData::chunk(1u << 20), &r);
    ASSERT_TRUE(st.is_ok()) << st.status().to_string();
    EXPECT_TRUE(r.eof);
    EXPECT_EQ(r.count, 1u << 20);
    EXPECT_TRUE(r.data.empty());
    EXPECT_TRUE(res->finish().is_ok());
  }
  {
    // The chunk received less than the reply says.
    auto res = CompoundRes::decode(b);
    (void)res->putfh();
    Read4Res r;
    EXPECT_EQ(res->read(ReadData::chunk(4096), &r).status().code(), Errc::kRemoteError);
  }
  {
    // Without a chunk the data must be inline: here it is not.
    auto res = CompoundRes::decode(b);
    (void)res->putfh();
    Read4Res r;
    EXPECT_EQ(res->read(ReadData::inline_data(), &r).status().code(), Errc::kRemoteError);
  }
}

TEST(NfsRes, InlineReadDataAndPad) {
  Bytes b = be({0, 0, 1, kOpRead, 0, 0, 5, 0x68656c6c, 0x6f000000});  // "hello" + pad
  ExactBuf eb(b);
  auto res = CompoundRes::decode(eb.span());
  ASSERT_TRUE(res.is_ok());
  Read4Res r;
  ASSERT_EQ(res->read(ReadData::inline_data(), &r).value(), Nfs4Stat::kOk);
  EXPECT_FALSE(r.eof);
  EXPECT_EQ(std::string(r.data.begin(), r.data.end()), "hello");
  EXPECT_TRUE(res->finish().is_ok());
}

TEST(NfsRes, WriteAndCommitResults) {
  Bytes b = be({0, 0, 3, kOpPutfh, 0, kOpWrite, 0, 0x00100000, 2, 0x11223344, 0x55667788,
                kOpCommit, 0, 0x11223344, 0x55667788});
  ExactBuf eb(b);
  auto res = CompoundRes::decode(eb.span());
  ASSERT_TRUE(res.is_ok());
  ASSERT_EQ(res->putfh().value(), Nfs4Stat::kOk);
  Write4Res w;
  ASSERT_EQ(res->write(&w).value(), Nfs4Stat::kOk);
  EXPECT_EQ(w.count, 1u << 20);
  EXPECT_EQ(w.committed, StableHow::kFileSync);
  EXPECT_EQ(w.verf.data[0], 0x11);
  EXPECT_EQ(w.verf.data[7], 0x88);
  Verifier v;
  ASSERT_EQ(res->commit(&v).value(), Nfs4Stat::kOk);
  EXPECT_EQ(v, w.verf);
  EXPECT_TRUE(res->finish().is_ok());

  Bytes bad = be({0, 0, 1, kOpWrite, 0, 4, 3, 0, 0});  // committed 3 is no stable_how4
  auto rb = CompoundRes::decode(bad);
  EXPECT_EQ(rb->write(&w).status().code(), Errc::kRemoteError);
}

// What Linux nfsd answers a WRITE with the anonymous stateid during its grace period.
TEST(NfsRes, GraceIsAStatusNotAnError) {
  Bytes b = be({10013, 0, 2, kOpPutfh, 0, kOpWrite, 10013});
  auto res = CompoundRes::decode(b);
  ASSERT_TRUE(res.is_ok());
  (void)res->putfh();
  Write4Res w;
  auto st = res->write(&w);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st.value(), Nfs4Stat::kGrace);
  EXPECT_EQ(nfs4_errc(Nfs4Stat::kGrace), Errc::kNoResources);
  EXPECT_STREQ(nfs4_stat_name(Nfs4Stat::kGrace), "NFS4ERR_GRACE");
  EXPECT_STREQ(nfs4_stat_name(static_cast<Nfs4Stat>(9999)), "NFS4ERR_?");
}

// ------------------------------------------------------------ fattr4

Status decode_attrs(const Bytes& b, Fattr4* f) {
  ExactBuf eb(b);
  xdr::XdrReader r(eb.span());
  Status s = decode_fattr4(r, f);
  if (s.is_ok() && r.remaining() != 0) return make_error(Errc::kInternal, "fattr4 left %zu bytes", r.remaining());
  // Strings point into eb: clear them before it goes.
  f->owner = f->owner_group = {};
  return s;
}

TEST(NfsAttr, ManyAttributesInOrder) {
  Bytes b = cat({be({2, (1u << 0) | (1u << 3) | (1u << 8) | (1u << 19), (1u << (33 - 32)) | (1u << (36 - 32)) | (1u << (53 - 32))}),
                 be({12 + 8 + 16 + 8 + 4 + 8 + 12}),
                 be({2, 0xffffffff, 0x00000003}),  // supported_attrs: a bitmap that names unknown ones too
                 be({0, 77}),                      // change
                 be({0, 1, 0, 2}),                 // fsid 1.2
                 be({4, 0xcafef00d}),              // filehandle
                 be({0755}),                       // mode
                 be({4, 0x726f6f74}),              // owner "root"
                 be({0, 1700000000, 999})});       // time_modify
  Fattr4 f;
  Status s = decode_attrs(b, &f);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(f.change, 77u);
  EXPECT_EQ(f.fsid.major, 1u);
  EXPECT_EQ(f.fsid.minor, 2u);
  EXPECT_EQ(f.filehandle.len, 4u);
  EXPECT_EQ(f.mode, 0755u);
  EXPECT_EQ(f.time_modify.seconds, 1700000000);
  EXPECT_EQ(f.time_modify.nseconds, 999u);
  EXPECT_TRUE(f.supported_attrs.has(Attr::kSize));
}

TEST(NfsAttr, WhatCannotBeDecodedIsRefused) {
  Fattr4 f;
  // acl (12): a value this codec cannot skip.
  EXPECT_EQ(decode_attrs(be({1, 1u << 12, 0}), &f).code(), Errc::kRemoteError);
  // An attribute in word 2 (64 and up).
  EXPECT_EQ(decode_attrs(be({3, 0, 0, 1, 0}), &f).code(), Errc::kRemoteError);
  // More bitmap words than any attribute needs.
  EXPECT_EQ(decode_attrs(be({9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), &f).code(), Errc::kRemoteError);
  // A bool that is neither 0 nor 1 (link_support, 5).
  EXPECT_EQ(decode_attrs(be({1, 1u << 5, 4, 2}), &f).code(), Errc::kRemoteError);
  // Bytes after the last value.
  EXPECT_EQ(decode_attrs(be({1, 1u << 4, 12, 0, 1, 0}), &f).code(), Errc::kRemoteError);
  // attr_vals shorter than the size it should hold.
  EXPECT_EQ(decode_attrs(be({1, 1u << 4, 4, 0}), &f).code(), Errc::kRemoteError);
  // A file handle over 128 bytes.
  Bytes big = be({1, 1u << 19, 4 + 132, 132});
  big.resize(big.size() + 132);
  EXPECT_EQ(decode_attrs(big, &f).code(), Errc::kRemoteError);
  // No attributes at all is fine.
  EXPECT_TRUE(decode_attrs(be({0, 0}), &f).is_ok());
  EXPECT_TRUE(f.present.empty());
}

// ------------------------------------------------------------ random input

constexpr uint32_t kNasty[] = {0, 1, 2, 3, 4, 8, 127, 128, 129, 255, 256, 1024, 10013, 0x7fffffff, 0xfffffffc, 0xffffffff};

TEST(NfsRes, RandomRepliesNeverReadOutside) {
  std::mt19937_64 rng(7530);
  const Bytes seeds[] = {lookup_reply(), be({0, 0, 2, kOpPutfh, 0, kOpRead, 0, 1, 0x00001000}),
                         be({0, 0, 2, kOpPutfh, 0, kOpWrite, 0, 4, 2, 1, 2})};
  int ok = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b = tern::testing::mutate_xdr(seeds[iter % 3], rng, kNasty);
    ExactBuf eb(b);
    FileHandle fh;
    Fattr4 a;
    if (iter % 3 == 0) {
      if (decode_lookup(eb.span(), &fh, &a).is_ok()) ++ok;
      ASSERT_LE(fh.len, kFhSize);
    } else if (auto res = CompoundRes::decode(eb.span()); res.is_ok()) {
      (void)res->putfh();
      Read4Res r;
      Write4Res w;
      if (iter % 3 == 1) (void)res->read(ReadData::chunk(4096), &r);
      else (void)res->write(&w);
      (void)res->finish();
    }
  }
  EXPECT_GT(ok, 0);  // some mutations leave it valid (a changed fileid, say)
}

}  // namespace
}  // namespace tern::nfs
