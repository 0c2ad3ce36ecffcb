// NFSv3 and MOUNT v3 codecs (lib/nfs: nfs3_args, nfs3_res, mount3): golden
// bytes written by hand from RFC 1813's XDR, round trips of every
// procedure's arguments and results, WRITE's data in a read chunk (RFC
// 8267), READ's reduced data item, READDIR(PLUS) lists held to the client's
// byte counts, and every truncation and random mutation of the arguments a
// server decodes (checked under ASan with exact-size buffers).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "nfs/mount3.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs3_types.h"
#include "nfs/nfs3_xdr.h"

#include "exact_buf.h"

namespace tern::nfs {
namespace {

using Bytes = std::vector<uint8_t>;
using tern::testing::ExactBuf;
using namespace nfs3;

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

// Encoded bytes that outlive the statement: decoded views point into them.
const Bytes& kept(Bytes b) {
  static std::deque<Bytes> store;
  store.push_back(std::move(b));
  return store.back();
}

template <typename T>
Bytes enc(const T& v) {
  Bytes b(8192);
  xdr::XdrWriter w(b);
  encode(w, v);
  EXPECT_TRUE(w.ok());
  b.resize(w.bytes_written());
  return b;
}

Fh3 fh(std::initializer_list<uint8_t> bytes) {
  Fh3 f;
  f.assign(Bytes(bytes));
  return f;
}

Fattr3 some_attr(uint64_t id) {
  Fattr3 a;
  a.type = FileType::kReg;
  a.mode = 0644;
  a.nlink = 1;
  a.uid = 1000, a.gid = 100;
  a.size = 12345 + id, a.used = 16384;
  a.rdev_major = 0, a.rdev_minor = 0;
  a.fsid = 0x1122334455667788ull;
  a.fileid = id;
  a.atime = {1, 2}, a.mtime = {3, 4}, a.ctime = {5, 6};
  return a;
}

// ------------------------------------------------------------ golden bytes

TEST(Nfs3Args, LookupGolden) {
  LookupArgs a{{fh({1, 2, 3, 4, 5}), "abc"}};
  EXPECT_EQ(enc(a), (Bytes{0, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c', 0}));
  LookupArgs d;
  ASSERT_TRUE(decode(kept(enc(a)), &d));
  EXPECT_EQ(d.what.dir, a.what.dir);
  EXPECT_EQ(d.what.name, "abc");
}

TEST(Nfs3Args, SetattrGolden) {
  SetattrArgs a;
  a.obj = fh({9, 9, 9, 9});
  a.attr.set_mode = true, a.attr.mode = 0755;
  a.attr.set_size = true, a.attr.size = 0x100000002ull;
  a.attr.mtime_how = TimeHow::kClientTime, a.attr.mtime = {7, 8};
  a.attr.atime_how = TimeHow::kServerTime;
  a.check_ctime = true, a.guard_ctime = {10, 11};
  Bytes want = be({4, 0x09090909, 1, 0755, 0, 0, 1, 1, 2, 1, 2, 7, 8, 1, 10, 11});
  EXPECT_EQ(enc(a), want);
  SetattrArgs d;
  ASSERT_TRUE(decode(want, &d));
  EXPECT_TRUE(d.attr.set_mode && d.attr.mode == 0755 && !d.attr.set_uid && !d.attr.set_gid);
  EXPECT_EQ(d.attr.size, 0x100000002ull);
  EXPECT_EQ(d.attr.atime_how, TimeHow::kServerTime);
  EXPECT_EQ(d.attr.mtime, (NfsTime3{7, 8}));
  EXPECT_TRUE(d.check_ctime);
  EXPECT_EQ(d.guard_ctime, (NfsTime3{10, 11}));
}

TEST(Nfs3Res, GetattrAndReadGolden) {
  GetattrRes g;
  g.attr = some_attr(77);
  Bytes b = enc(g);
  ASSERT_EQ(b.size(), 4 + xdr3::kFattr3Size);
  EXPECT_EQ(Bytes(b.begin(), b.begin() + 12), be({0, 1, 0644}));
  GetattrRes d;
  ASSERT_TRUE(decode(b, &d));
  EXPECT_EQ(d.attr, g.attr);
  // A failed GETATTR is its status alone.
  g.status = Nfs3Stat::kStale;
  EXPECT_EQ(enc(g), be({70}));

  // READ through a write chunk: count, eof, then the reduced data item
  // (its length, no bytes, no pad).
  ReadRes r;
  r.count = 5;
  r.eof = true;
  r.data_in_chunk = true;
  EXPECT_EQ(enc(r), be({0, 0, 5, 1, 5}));
  ReadRes rd;
  ASSERT_TRUE(decode(kept(enc(r)), 5, &rd));
  EXPECT_TRUE(rd.data_in_chunk);
  EXPECT_EQ(rd.count, 5u);
  EXPECT_FALSE(decode(kept(enc(r)), 4, &rd)) << "the chunk must hold the data's length";
  // Inline: the bytes and their pad.
  const Bytes data{'h', 'e', 'l', 'l', 'o'};
  r.data_in_chunk = false;
  r.data = data;
  EXPECT_EQ(enc(r), (Bytes{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o', 0, 0, 0}));
  ASSERT_TRUE(decode(kept(enc(r)), -1, &rd));
  EXPECT_FALSE(rd.data_in_chunk);
  EXPECT_EQ(Bytes(rd.data.begin(), rd.data.end()), data);
}

// ------------------------------------------------------------ WRITE and its read chunk

TEST(Nfs3Args, WriteDataInlineOrInAReadChunk) {
  const Bytes data(1000, 0x5a);
  WriteArgs a;
  a.file = fh({1, 2, 3, 4, 5, 6, 7, 8});
  a.offset = 1ull << 33;
  a.count = static_cast<uint32_t>(data.size());
  a.stable = StableHow::kDataSync;
  a.data = data;
  WriteArgs d;
  ASSERT_TRUE(decode(kept(enc(a)), {}, &d));
  EXPECT_FALSE(d.data_in_chunk);
  EXPECT_EQ(d.offset, a.offset);
  EXPECT_EQ(d.stable, StableHow::kDataSync);
  EXPECT_EQ(Bytes(d.data.begin(), d.data.end()), data);

  // Chunked: the inline part ends with the length word, and the chunk is
  // at the position right after it.
  Bytes b(256);
  xdr::XdrWriter w(b);
  encode_write_chunked(w, a);
  ASSERT_TRUE(w.ok());
  b.resize(w.bytes_written());
  EXPECT_EQ(b.size(), 4u + 8 + 8 + 4 + 4 + 4);
  rpc::ReadChunkData c{static_cast<uint32_t>(b.size()), data};
  ASSERT_TRUE(decode(b, std::span(&c, 1), &d));
  EXPECT_TRUE(d.data_in_chunk);
  EXPECT_EQ(d.data.data(), data.data()) << "the chunk's bytes, not a copy";
  EXPECT_EQ(d.data.size(), data.size());
  // The chunk may carry the XDR pad (an RFC 5666 client did): up to 3 bytes more.
  Bytes padded(1003, 0x5a);
  c.data = padded;
  a.count = 1001;
  b.assign(256, 0);
  xdr::XdrWriter w2(b);
  encode_write_chunked(w2, a);
  b.resize(w2.bytes_written());
  ASSERT_TRUE(decode(b, std::span(&c, 1), &d));
  EXPECT_EQ(d.data.size(), 1001u);
  c.data = std::span<const uint8_t>(padded.data(), 1000);
  EXPECT_FALSE(decode(b, std::span(&c, 1), &d)) << "a chunk shorter than count";
  c.data = Bytes(1008, 0);
  EXPECT_FALSE(decode(b, std::span(&c, 1), &d)) << "a chunk longer than count and its pad";
  c.data = padded;
  c.position -= 4;
  EXPECT_FALSE(decode(b, std::span(&c, 1), &d)) << "a chunk anywhere but where the data goes";
  c.position += 4;
  rpc::ReadChunkData two[2] = {c, c};
  EXPECT_FALSE(decode(b, two, &d)) << "two chunks for one data item";
  // Without the chunk the data is missing: garbage.
  EXPECT_FALSE(decode(b, {}, &d));
  // count and the data's length must agree.
  WriteArgs bad = a;
  bad.count = 999;
  bad.data = data;
  EXPECT_FALSE(decode(kept(enc(bad)), {}, &d));
}

// SYMLINK's path is DDP-eligible too (RFC 8267): Linux sends it in a read
// chunk when the call would not fit inline.
TEST(Nfs3Args, SymlinkPathInAReadChunk) {
  const std::string target(3000, 't');
  SymlinkArgs a{{fh({1, 2, 3, 4}), "ln"}, {}, target};
  Bytes b(256);
  xdr::XdrWriter w(b);
  encode_symlink_chunked(w, a);
  ASSERT_TRUE(w.ok());
  b.resize(w.bytes_written());
  const Bytes path(target.begin(), target.end());
  rpc::ReadChunkData c{static_cast<uint32_t>(b.size()), path};
  SymlinkArgs d;
  ASSERT_TRUE(decode(b, std::span(&c, 1), &d));
  EXPECT_TRUE(d.target_in_chunk);
  EXPECT_EQ(d.target, target);
  EXPECT_EQ(d.where.name, "ln");
  c.position = 4;
  EXPECT_FALSE(decode(b, std::span(&c, 1), &d));
  EXPECT_FALSE(decode(b, {}, &d)) << "the path is missing";
  // Over PATH_MAX in a chunk: garbage as inline.
  const Bytes huge(kNfs3MaxPath + 1, 'h');
  a.target = std::string_view(reinterpret_cast<const char*>(huge.data()), huge.size());
  Bytes hb(256);
  xdr::XdrWriter hw(hb);
  encode_symlink_chunked(hw, a);
  hb.resize(hw.bytes_written());
  c = {static_cast<uint32_t>(hb.size()), huge};
  EXPECT_FALSE(decode(hb, std::span(&c, 1), &d));
}

// ------------------------------------------------------------ round trips

TEST(Nfs3Args, EveryProcedureRoundTrips) {
  const Fh3 f = fh({0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Sattr3 s;
  s.set_uid = true, s.uid = 42;
  s.set_gid = true, s.gid = 43;
  s.atime_how = TimeHow::kClientTime, s.atime = {100, 200};
  {
    CreateArgs a{{f, "new"}, CreateMode::kGuarded, s, {}}, d;
    ASSERT_TRUE(decode(kept(enc(a)), &d));
    EXPECT_EQ(d.how, CreateMode::kGuarded);
    EXPECT_EQ(d.attr.uid, 42u);
    EXPECT_EQ(d.attr.atime, (NfsTime3{100, 200}));
    CreateArgs x{{f, "x"}, CreateMode::kExclusive, {}, {}}, dx;
    for (int i = 0; i < 8; ++i) x.verf.data[i] = static_cast<uint8_t>(i + 1);
    ASSERT_TRUE(decode(kept(enc(x)), &dx));
    EXPECT_EQ(dx.verf, x.verf);
  }
  {
    SymlinkArgs a{{f, "ln"}, s, "../target/path"}, d;
    ASSERT_TRUE(decode(kept(enc(a)), {}, &d));
    EXPECT_EQ(d.target, "../target/path");
    EXPECT_EQ(d.where.name, "ln");
  }
  {
    MknodArgs a;
    a.where = {f, "dev"};
    a.type = FileType::kChr;
    a.attr = s;
    a.major = 1, a.minor = 3;
    MknodArgs d;
    ASSERT_TRUE(decode(kept(enc(a)), &d));
    EXPECT_EQ(d.type, FileType::kChr);
    EXPECT_EQ(d.major, 1u);
    EXPECT_EQ(d.minor, 3u);
    a.type = FileType::kDir;  // no data: the server answers BADTYPE
    ASSERT_TRUE(decode(kept(enc(a)), &d));
    EXPECT_EQ(d.type, FileType::kDir);
  }
  {
    RenameArgs a{{f, "a"}, {f, "b"}}, d;
    ASSERT_TRUE(decode(kept(enc(a)), &d));
    EXPECT_EQ(d.from.name, "a");
    EXPECT_EQ(d.to.name, "b");
    LinkArgs l{f, {f, "hard"}}, dl;
    ASSERT_TRUE(decode(kept(enc(l)), &dl));
    EXPECT_EQ(dl.link.name, "hard");
  }
  {
    ReaddirplusArgs a{f, 99, {}, 4096, 65536}, d;
    a.verf.data[7] = 1;
    ASSERT_TRUE(decode(kept(enc(a)), &d));
    EXPECT_EQ(d.cookie, 99u);
    EXPECT_EQ(d.verf, a.verf);
    EXPECT_EQ(d.dircount, 4096u);
    EXPECT_EQ(d.maxcount, 65536u);
    ReaddirArgs r{f, 7, {}, 1024}, dr;
    ASSERT_TRUE(decode(kept(enc(r)), &dr));
    EXPECT_EQ(dr.count, 1024u);
  }
  {
    CommitArgs a{f, 4096, 8192}, d;
    ASSERT_TRUE(decode(kept(enc(a)), &d));
    EXPECT_EQ(d.offset, 4096u);
    EXPECT_EQ(d.count, 8192u);
    AccessArgs x{f, kAccessRead | kAccessLookup}, dx;
    ASSERT_TRUE(decode(kept(enc(x)), &dx));
    EXPECT_EQ(dx.access, kAccessRead | kAccessLookup);
  }
}

TEST(Nfs3Res, EveryResultRoundTrips) {
  const Fh3 f = fh({1, 2, 3, 4});
  const Fattr3 at = some_attr(5);
  WccAttr before{10, {1, 1}, {2, 2}};
  {
    CreateRes r;
    r.obj = f;
    r.obj_attr = at;
    r.dir_wcc.before = before;
    r.dir_wcc.after = some_attr(6);
    CreateRes d;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    ASSERT_TRUE(d.obj && d.obj_attr && d.dir_wcc.before && d.dir_wcc.after);
    EXPECT_EQ(*d.obj, f);
    EXPECT_EQ(*d.dir_wcc.before, before);
    EXPECT_EQ(d.dir_wcc.after->fileid, 6u);
    // A failed CREATE still carries the directory's wcc_data.
    r.status = Nfs3Stat::kExist;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    EXPECT_EQ(d.status, Nfs3Stat::kExist);
    EXPECT_FALSE(d.obj);
    EXPECT_TRUE(d.dir_wcc.before);
  }
  {
    LookupRes r;
    r.obj = f;
    r.obj_attr = at;
    r.dir_attr = some_attr(1);
    LookupRes d;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    EXPECT_EQ(d.obj, f);
    EXPECT_EQ(d.dir_attr->fileid, 1u);
    r.status = Nfs3Stat::kNoent;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    EXPECT_FALSE(d.obj_attr);
    EXPECT_TRUE(d.dir_attr);
  }
  {
    WriteRes r;
    r.wcc.after = at;
    r.count = 4096;
    r.committed = StableHow::kFileSync;
    r.verf.data[0] = 0xab;
    WriteRes d;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    EXPECT_EQ(d.count, 4096u);
    EXPECT_EQ(d.committed, StableHow::kFileSync);
    EXPECT_EQ(d.verf, r.verf);
    EXPECT_FALSE(d.wcc.before);
  }
  {
    FsinfoRes r;
    r.attr = at;
    r.rtmax = r.wtmax = 1 << 20;
    r.dtpref = 65536;
    r.maxfilesize = ~0ull >> 1;
    r.time_delta = {0, 1};
    r.properties = kFsfLink | kFsfSymlink;
    FsinfoRes d;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    EXPECT_EQ(d.rtmax, 1u << 20);
    EXPECT_EQ(d.maxfilesize, ~0ull >> 1);
    EXPECT_EQ(d.properties, kFsfLink | kFsfSymlink);
    FsstatRes s;
    s.tbytes = 1ull << 40, s.afiles = 7;
    FsstatRes ds;
    ASSERT_TRUE(decode(kept(enc(s)), &ds));
    EXPECT_EQ(ds.tbytes, 1ull << 40);
    EXPECT_EQ(ds.afiles, 7u);
    PathconfRes p;
    p.linkmax = 32000, p.name_max = 255;
    PathconfRes dp;
    ASSERT_TRUE(decode(kept(enc(p)), &dp));
    EXPECT_EQ(dp.linkmax, 32000u);
    EXPECT_TRUE(dp.no_trunc && dp.case_preserving && !dp.case_insensitive);
  }
  {
    RenameRes r;
    r.from_wcc.before = before;
    r.to_wcc.after = at;
    RenameRes d;
    ASSERT_TRUE(decode(kept(enc(r)), &d));
    EXPECT_TRUE(d.from_wcc.before && !d.from_wcc.after && !d.to_wcc.before && d.to_wcc.after);
    ReadlinkRes l;
    l.target = "/a/b";
    ReadlinkRes dl;
    ASSERT_TRUE(decode(kept(enc(l)), &dl));
    EXPECT_EQ(dl.target, "/a/b");
    CommitRes c;
    c.verf.data[3] = 9;
    CommitRes dc;
    ASSERT_TRUE(decode(kept(enc(c)), &dc));
    EXPECT_EQ(dc.verf, c.verf);
    AccessRes a;
    a.access = 0x3f;
    AccessRes da;
    ASSERT_TRUE(decode(kept(enc(a)), &da));
    EXPECT_EQ(da.access, 0x3fu);
  }
}

// ------------------------------------------------------------ directory lists

TEST(Nfs3Res, DirectoryListsStopAtTheClientsCounts) {
  for (bool plus : {false, true}) {
    Bytes b(65536);
    xdr::XdrWriter w(b);
    const uint32_t maxcount = 1024;
    DirListEncoder e(w, plus, maxcount, plus ? 400 : 0);
    const Fattr3 dir = some_attr(1);
    Verf3 v;
    e.begin(Nfs3Stat::kOk, &dir, v);
    uint32_t added = 0;
    const Fattr3 at = some_attr(2);
    const Fh3 f = fh({1, 2, 3, 4, 5, 6, 7, 8});
    for (uint32_t i = 0; i < 100; ++i) {
      std::string name = "entry-" + std::to_string(i);
      if (!e.add(100 + i, name, i + 1, &at, &f)) break;
      ++added;
    }
    e.finish(false);
    ASSERT_TRUE(w.ok());
    EXPECT_GT(added, 0u);
    EXPECT_LT(added, 100u);
    EXPECT_LE(w.bytes_written(), maxcount) << "the whole READDIR(PLUS)3resok within maxcount";
    DirListDecoder d(w.written(), plus);
    ASSERT_TRUE(d.begin());
    EXPECT_EQ(d.status(), Nfs3Stat::kOk);
    EXPECT_EQ(d.dir_attr()->fileid, 1u);
    DirEntry ent;
    uint32_t seen = 0;
    while (d.next(&ent)) {
      EXPECT_EQ(ent.fileid, 100 + seen);
      EXPECT_EQ(ent.name, "entry-" + std::to_string(seen));
      EXPECT_EQ(ent.cookie, seen + 1);
      EXPECT_EQ(ent.attr.has_value(), plus);
      EXPECT_EQ(ent.fh.has_value(), plus);
      ++seen;
    }
    EXPECT_TRUE(d.ok());
    EXPECT_EQ(seen, added);
    EXPECT_FALSE(d.eof());
  }
  // A failed status: the directory's attributes and nothing more.
  Bytes b(256);
  xdr::XdrWriter w(b);
  DirListEncoder e(w, true, 1024);
  e.begin(Nfs3Stat::kNotdir, nullptr, Verf3{});
  EXPECT_FALSE(e.add(1, "x", 1));
  e.finish(true);
  EXPECT_EQ(Bytes(w.written().begin(), w.written().end()), be({20, 0}));
}

// ------------------------------------------------------------ MOUNT

TEST(Mount3, DirpathMntExportsAndDump) {
  Bytes b(512);
  xdr::XdrWriter w(b);
  mount3::encode_dirpath(w, "/export");
  std::string_view p;
  ASSERT_TRUE(mount3::decode_dirpath(w.written(), &p));
  EXPECT_EQ(p, "/export");
  // Over MNTPATHLEN (1024): garbage.
  Bytes big(2048);
  xdr::XdrWriter wb(big);
  wb.put_string(std::string(1025, 'a'));
  EXPECT_FALSE(mount3::decode_dirpath(wb.written(), &p));

  mount3::MntRes r;
  r.fh = fh({1, 2, 3});
  r.flavors = {1, 0};
  Bytes mb(512);
  xdr::XdrWriter wm(mb);
  mount3::encode(wm, r);
  EXPECT_EQ(Bytes(wm.written().begin(), wm.written().end()), (Bytes{0, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0, 2,
                                                                     0, 0, 0, 1, 0, 0, 0, 0}));
  mount3::MntRes d;
  ASSERT_TRUE(mount3::decode(wm.written(), &d));
  EXPECT_EQ(d.fh, r.fh);
  EXPECT_EQ(d.flavors, r.flavors);

  mount3::ExportEntry ex[2] = {{"/a", {}}, {"/b", {"host1", "host2"}}};
  Bytes eb(512);
  xdr::XdrWriter we(eb);
  mount3::encode(we, std::span<const mount3::ExportEntry>(ex));
  std::vector<mount3::ExportEntry> got;
  ASSERT_TRUE(mount3::decode(we.written(), &got));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].dir, "/b");
  ASSERT_EQ(got[1].groups.size(), 2u);
  EXPECT_EQ(got[1].groups[1], "host2");
  // A list that never ends is bounded, not followed for ever.
  Bytes endless;
  for (size_t i = 0; i <= mount3::kMaxListEntries; ++i) {
    Bytes e = be({1, 1, 0x61000000, 0});
    endless.insert(endless.end(), e.begin(), e.end());
  }
  EXPECT_FALSE(mount3::decode(endless, &got));
}

// ------------------------------------------------------------ hostile input

// Every argument decoder a server runs on what a client sent.
bool decode_any(uint32_t proc, std::span<const uint8_t> in) {
  switch (static_cast<Nfs3Proc>(proc)) {
    case Nfs3Proc::kGetattr: { GetattrArgs a; return decode(in, &a); }
    case Nfs3Proc::kSetattr: { SetattrArgs a; return decode(in, &a); }
    case Nfs3Proc::kLookup: { LookupArgs a; return decode(in, &a); }
    case Nfs3Proc::kAccess: { AccessArgs a; return decode(in, &a); }
    case Nfs3Proc::kReadlink: { ReadlinkArgs a; return decode(in, &a); }
    case Nfs3Proc::kRead: { ReadArgs a; return decode(in, &a); }
    case Nfs3Proc::kWrite: { WriteArgs a; return decode(in, {}, &a); }
    case Nfs3Proc::kCreate: { CreateArgs a; return decode(in, &a); }
    case Nfs3Proc::kMkdir: { MkdirArgs a; return decode(in, &a); }
    case Nfs3Proc::kSymlink: { SymlinkArgs a; return decode(in, {}, &a); }
    case Nfs3Proc::kMknod: { MknodArgs a; return decode(in, &a); }
    case Nfs3Proc::kRemove:
    case Nfs3Proc::kRmdir: { RemoveArgs a; return decode(in, &a); }
    case Nfs3Proc::kRename: { RenameArgs a; return decode(in, &a); }
    case Nfs3Proc::kLink: { LinkArgs a; return decode(in, &a); }
    case Nfs3Proc::kReaddir: { ReaddirArgs a; return decode(in, &a); }
    case Nfs3Proc::kReaddirplus: { ReaddirplusArgs a; return decode(in, &a); }
    case Nfs3Proc::kFsstat:
    case Nfs3Proc::kFsinfo:
    case Nfs3Proc::kPathconf: { FsArgs a; return decode(in, &a); }
    case Nfs3Proc::kCommit: { CommitArgs a; return decode(in, &a); }
    default: return true;
  }
}

// A valid argument block for each procedure.
Bytes valid_args(uint32_t proc) {
  const Fh3 f = fh({1, 2, 3, 4, 5, 6, 7, 8});
  Sattr3 s;
  s.set_mode = true, s.mode = 0600;
  s.mtime_how = TimeHow::kClientTime;
  const Bytes data(10, 1);
  switch (static_cast<Nfs3Proc>(proc)) {
    case Nfs3Proc::kGetattr: return enc(GetattrArgs{f});
    case Nfs3Proc::kSetattr: return enc(SetattrArgs{f, s, true, {1, 2}});
    case Nfs3Proc::kLookup: return enc(LookupArgs{{f, "name"}});
    case Nfs3Proc::kAccess: return enc(AccessArgs{f, 0x3f});
    case Nfs3Proc::kReadlink: return enc(ReadlinkArgs{f});
    case Nfs3Proc::kRead: return enc(ReadArgs{f, 1, 2});
    case Nfs3Proc::kWrite: return enc(WriteArgs{f, 0, 10, StableHow::kFileSync, data, false});
    case Nfs3Proc::kCreate: return enc(CreateArgs{{f, "c"}, CreateMode::kUnchecked, s, {}});
    case Nfs3Proc::kMkdir: return enc(MkdirArgs{{f, "d"}, s});
    case Nfs3Proc::kSymlink: return enc(SymlinkArgs{{f, "l"}, s, "t"});
    case Nfs3Proc::kMknod: return enc(MknodArgs{{f, "n"}, FileType::kBlk, s, 8, 1});
    case Nfs3Proc::kRemove:
    case Nfs3Proc::kRmdir: return enc(RemoveArgs{{f, "r"}});
    case Nfs3Proc::kRename: return enc(RenameArgs{{f, "a"}, {f, "b"}});
    case Nfs3Proc::kLink: return enc(LinkArgs{f, {f, "k"}});
    case Nfs3Proc::kReaddir: return enc(ReaddirArgs{f, 0, {}, 512});
    case Nfs3Proc::kReaddirplus: return enc(ReaddirplusArgs{f, 0, {}, 512, 4096});
    case Nfs3Proc::kCommit: return enc(CommitArgs{f, 0, 0});
    default: return enc(FsArgs{f});
  }
}

TEST(Nfs3Args, EveryTruncationIsGarbageAndNothingIsReadPastTheEnd) {
  for (uint32_t p = 1; p < kNfs3ProcCount; ++p) {
    const Bytes whole = valid_args(p);
    ExactBuf full(whole);
    ASSERT_TRUE(decode_any(p, full.span())) << nfs3_proc_name(static_cast<Nfs3Proc>(p));
    for (size_t n = 0; n < whole.size(); ++n) {
      ExactBuf cut(std::span<const uint8_t>(whole.data(), n));
      EXPECT_FALSE(decode_any(p, cut.span())) << nfs3_proc_name(static_cast<Nfs3Proc>(p)) << " cut to " << n;
    }
  }
}

TEST(Nfs3Args, OutOfRangeValuesAreGarbage) {
  // A handle over 64 bytes.
  Bytes b = be({65});
  b.resize(4 + 68, 0);
  GetattrArgs g;
  EXPECT_FALSE(decode(b, &g));
  // stable_how 3, createmode3 3, time_how 3, ftype3 0 and 8.
  Bytes w = valid_args(static_cast<uint32_t>(Nfs3Proc::kWrite));
  w[4 + 8 + 8 + 4 + 3] = 3;  // stable
  WriteArgs wa;
  EXPECT_FALSE(decode(w, {}, &wa));
  Bytes c = valid_args(static_cast<uint32_t>(Nfs3Proc::kCreate));
  c[4 + 8 + 8 + 3] = 3;  // createmode after the handle and the name "c"
  CreateArgs ca;
  EXPECT_FALSE(decode(c, &ca));
  Bytes m = valid_args(static_cast<uint32_t>(Nfs3Proc::kMknod));
  for (uint8_t t : {0, 8}) {
    m[4 + 8 + 8 + 3] = t;
    MknodArgs ma;
    EXPECT_FALSE(decode(m, &ma)) << "ftype3 " << int(t);
  }
  // A name longer than any path: garbage; 256 to 4096 bytes decode (the
  // server says NAMETOOLONG).
  const std::string long_name(300, 'n');
  LookupArgs l{{fh({1}), long_name}}, dl;
  EXPECT_TRUE(decode(kept(enc(l)), &dl));
  std::string huge(kNfs3MaxPath + 1, 'n');
  l.what.name = huge;
  EXPECT_FALSE(decode(kept(enc(l)), &dl));
}

TEST(Nfs3Args, RandomMutationsNeverCrash) {
  std::mt19937 rng(12345);
  for (uint32_t p = 1; p < kNfs3ProcCount; ++p) {
    const Bytes whole = valid_args(p);
    for (int i = 0; i < 500; ++i) {
      Bytes m = whole;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) m[rng() % m.size()] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) m.resize(rng() % (m.size() + 8), 0xff);
      ExactBuf eb(m);
      (void)decode_any(p, eb.span());
    }
  }
}

TEST(Nfs3Status, NamesAndErrnos) {
  EXPECT_STREQ(nfs3_stat_name(Nfs3Stat::kStale), "NFS3ERR_STALE");
  EXPECT_STREQ(nfs3_stat_name(Nfs3Stat::kJukebox), "NFS3ERR_JUKEBOX");
  EXPECT_STREQ(nfs3_proc_name(Nfs3Proc::kReaddirplus), "READDIRPLUS");
  EXPECT_EQ(nfs3_stat_from_errno(ENOENT), Nfs3Stat::kNoent);
  EXPECT_EQ(nfs3_stat_from_errno(ENOTEMPTY), Nfs3Stat::kNotempty);
  EXPECT_EQ(nfs3_stat_from_errno(EDQUOT), Nfs3Stat::kDquot);
  EXPECT_EQ(nfs3_stat_from_errno(ESTALE), Nfs3Stat::kStale);
  EXPECT_EQ(nfs3_stat_from_errno(ENOMEM), Nfs3Stat::kIo);
}

}  // namespace
}  // namespace tern::nfs
