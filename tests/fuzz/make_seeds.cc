// Writes the generated seeds of every fuzz target, tests/fuzz/corpus/<target>/gen-*,
// from the codecs' own encoders (and, for the pmd/shm targets, records in
// the harnesses' input format). Run by hand when a codec or a harness's input
// format changes:
//   build-fuzz/tests/fuzz/tern-fuzz-seeds tests/fuzz/corpus
// The files are committed; the kernel-server seeds (svc-*) come from
// tern-svcrdma-capture instead (README.md).
#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nfs/fattr4.h"
#include "nfs/mount3.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs4_ops.h"
#include "nfs/nfs4_status.h"
#include "oncrpc/oncrpc.h"
#include "rdmadev/rdmadev.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"
#include "shm/shm_layout.h"
#include "xdr/xdr.h"

namespace {

namespace rr = tern::rpcrdma;
namespace oc = tern::oncrpc;
using Bytes = std::vector<uint8_t>;

std::string g_dir;
int g_written = 0;

void save(const char* target, const std::string& name, const Bytes& b) {
  std::string d = g_dir + "/" + target;
  mkdir(d.c_str(), 0755);
  std::string p = d + "/gen-" + name;
  FILE* f = std::fopen(p.c_str(), "wb");
  if (f == nullptr || std::fwrite(b.data(), 1, b.size(), f) != b.size() || std::fclose(f) != 0) {
    std::perror(p.c_str());
    std::exit(1);
  }
  ++g_written;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ------------------------------------------------------------ RPC-over-RDMA and ONC RPC

Bytes rdma_header(const rr::Header& h) {
  Bytes b(rr::kMaxHeaderSize);
  b.resize(rr::encode_header(h, b));
  return b;
}

rr::Header msg_header(uint32_t xid, rr::Proc proc) {
  rr::Header h;
  h.xid = xid;
  h.credit = 32;
  h.proc = proc;
  h.chunks.clear();
  return h;
}

rr::Segment seg(uint32_t i) { return rr::Segment{0x100 + i, 4096 * (i + 1), 0x7f0000000000ull + i * 0x10000}; }

Bytes call(uint32_t xid, oc::AuthFlavor flavor, const Bytes& args) {
  uint8_t auth[oc::kMaxAuthSysBodySize];
  oc::CallHeader h;
  h.xid = xid;
  h.prog = 100003;
  h.vers = 4;
  h.proc = 1;
  h.cred.flavor = flavor;
  if (flavor == oc::AuthFlavor::kSys) {
    oc::AuthSysParams p;
    p.stamp = 0x5eed;
    p.machinename = "tern-client";
    p.uid = 1000;
    p.gid = 1000;
    p.ngids = 3;
    p.gids[0] = 4, p.gids[1] = 27, p.gids[2] = 1000;
    h.cred.body = std::span<const uint8_t>(auth, oc::encode_auth_sys(p, auth));
  }
  Bytes b(oc::call_size(h));
  oc::encode_call(h, b);
  return cat(b, args);
}

Bytes reply(uint32_t xid, oc::ReplyHeader h, const Bytes& results) {
  h.xid = xid;
  Bytes b(oc::reply_size(h));
  oc::encode_reply(h, b);
  return cat(b, results);
}

void rpcrdma_seeds() {
  const Bytes args = {0, 0, 0, 0, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef};
  const uint32_t xid = 0x1234abcd;
  rr::Header h = msg_header(xid, rr::Proc::kMsg);
  save("rpcrdma_header", "msg-call", cat(rdma_header(h), call(xid, oc::AuthFlavor::kNone, args)));
  save("rpcrdma_header", "msg-call-authsys", cat(rdma_header(h), call(xid, oc::AuthFlavor::kSys, args)));
  save("rpcrdma_header", "msg-reply", cat(rdma_header(h), reply(xid, oc::ReplyHeader(), args)));

  h = msg_header(xid, rr::Proc::kMsg);  // a WRITE: read chunk after the inline args
  Bytes body = call(xid, oc::AuthFlavor::kNone, args);
  h.chunks.nreads = 2;
  h.chunks.reads[0] = rr::ReadSegment{static_cast<uint32_t>(body.size()), seg(0)};
  h.chunks.reads[1] = rr::ReadSegment{static_cast<uint32_t>(body.size()), seg(1)};
  save("rpcrdma_header", "msg-read-chunk", cat(rdma_header(h), body));

  h = msg_header(xid, rr::Proc::kMsg);  // a READ: write chunk, and a reply chunk
  h.chunks.nwrites = 1;
  h.chunks.writes[0].nsegments = 3;
  for (uint32_t i = 0; i < 3; ++i) h.chunks.writes[0].segments[i] = seg(i);
  h.chunks.has_reply = true;
  h.chunks.reply.nsegments = 2;
  h.chunks.reply.segments[0] = seg(5), h.chunks.reply.segments[1] = seg(6);
  save("rpcrdma_header", "msg-write-reply-chunks", cat(rdma_header(h), body));

  h = msg_header(xid, rr::Proc::kNoMsg);  // a long call: position-zero read chunk
  h.chunks.nreads = 1;
  h.chunks.reads[0] = rr::ReadSegment{0, seg(0)};
  save("rpcrdma_header", "nomsg-call", rdma_header(h));
  h = msg_header(xid, rr::Proc::kNoMsg);  // a long reply: in the reply chunk
  h.chunks.has_reply = true;
  h.chunks.reply.nsegments = 1;
  h.chunks.reply.segments[0] = seg(0);
  save("rpcrdma_header", "nomsg-reply", rdma_header(h));

  h = msg_header(xid, rr::Proc::kMsg);  // every capacity at its limit
  h.chunks.nreads = rr::kMaxReadSegments;
  for (uint32_t i = 0; i < rr::kMaxReadSegments; ++i) h.chunks.reads[i] = rr::ReadSegment{28, seg(i)};
  h.chunks.nwrites = rr::kMaxWriteChunks;
  for (uint32_t c = 0; c < rr::kMaxWriteChunks; ++c) {
    h.chunks.writes[c].nsegments = rr::kMaxSegmentsPerChunk;
    for (uint32_t i = 0; i < rr::kMaxSegmentsPerChunk; ++i) h.chunks.writes[c].segments[i] = seg(i + c);
  }
  h.chunks.has_reply = true;
  h.chunks.reply.nsegments = rr::kMaxSegmentsPerChunk;
  for (uint32_t i = 0; i < rr::kMaxSegmentsPerChunk; ++i) h.chunks.reply.segments[i] = seg(i);
  save("rpcrdma_header", "msg-full", rdma_header(h));

  Bytes e(rr::kErrVersSize);
  rr::encode_err_vers(xid, 1, e);
  save("rpcrdma_header", "err-vers", e);
  e.resize(rr::kErrChunkSize);
  rr::encode_err_chunk(xid, 1, e);
  save("rpcrdma_header", "err-chunk", e);
  Bytes done = rdma_header(msg_header(xid, rr::Proc::kMsg));
  done[15] = static_cast<uint8_t>(rr::Proc::kDone);
  save("rpcrdma_header", "done", done);
  Bytes v2 = rdma_header(msg_header(xid, rr::Proc::kMsg));
  v2[7] = 2;
  save("rpcrdma_header", "version-2", v2);
}

void oncrpc_seeds() {
  const Bytes args = {0, 0, 0, 7};
  save("oncrpc", "call-none", call(1, oc::AuthFlavor::kNone, args));
  save("oncrpc", "call-sys", call(2, oc::AuthFlavor::kSys, args));
  oc::ReplyHeader r;
  save("oncrpc", "reply-success", reply(3, r, args));
  r.accept = oc::AcceptStat::kProgMismatch;
  r.mismatch_low = 2, r.mismatch_high = 4;
  save("oncrpc", "reply-prog-mismatch", reply(4, r, {}));
  r = oc::ReplyHeader();
  r.stat = oc::ReplyStat::kDenied;
  r.reject = oc::RejectStat::kRpcMismatch;
  r.mismatch_low = r.mismatch_high = 2;
  save("oncrpc", "reply-rpc-mismatch", reply(5, r, {}));
  r.reject = oc::RejectStat::kAuthError;
  r.auth = oc::AuthStat::kTooWeak;
  save("oncrpc", "reply-auth-error", reply(6, r, {}));
  oc::AuthSysParams p;
  p.machinename = "h";
  p.ngids = oc::kMaxAuthSysGids;
  for (uint32_t i = 0; i < p.ngids; ++i) p.gids[i] = i;
  Bytes b(oc::auth_sys_size(p));
  oc::encode_auth_sys(p, b);
  save("oncrpc", "auth-sys-16-gids", b);
}

// ------------------------------------------------------------ RFC 8797

void cm_seeds() {
  struct {
    const char* name;
    uint8_t sel;
    rr::CmPrivateData d;
    size_t pad;
  } cases[] = {
      {"default", 0x00, {}, 0},
      {"linux-client", 0x40, {true, 4096, 4096}, 0},
      {"server-big", 0xda, {false, 262144, 65536}, 0},
      {"ib-padded", 0x92, {true, 8192, 1024}, 48},  // InfiniBand delivers the whole field
  };
  for (const auto& c : cases) {
    Bytes b(1 + rr::kCmPrivateSize + c.pad, 0);
    b[0] = c.sel;
    rr::encode_cm_private(c.d, std::span<uint8_t>(b.data() + 1, rr::kCmPrivateSize));
    save("cm_private", c.name, b);
  }
  save("cm_private", "absent", Bytes{0xc1});
  Bytes other = {0x80, 0xf6, 0xab, 0x0e, 0x19, 1, 0, 3, 3};
  save("cm_private", "other-format", other);
  Bytes v2 = {0x09, 0xf6, 0xab, 0x0e, 0x18, 2, 1, 3, 3};
  save("cm_private", "version-2", v2);
}

// ------------------------------------------------------------ NFSv4 COMPOUND

struct W {
  Bytes b = Bytes(8192);
  tern::xdr::XdrWriter w{b};
  Bytes done() {
    b.resize(w.bytes_written());
    return b;
  }
};

using tern::nfs::Attr;
using tern::nfs::AttrSet;
using tern::nfs::Op;

void put_fattr(tern::xdr::XdrWriter& w) {
  AttrSet mask{Attr::kSupportedAttrs, Attr::kType, Attr::kChange, Attr::kSize, Attr::kFsid, Attr::kFilehandle,
               Attr::kFileid, Attr::kMaxread, Attr::kMode, Attr::kOwner, Attr::kOwnerGroup, Attr::kTimeModify};
  tern::nfs::put_bitmap4(w, mask);
  W v;
  tern::nfs::put_bitmap4(v.w, AttrSet::known());
  v.w.put_u32(2);                       // type: NF4DIR
  v.w.put_u64(0x1122334455667788ull);   // change
  v.w.put_u64(4096);                    // size
  v.w.put_u64(0), v.w.put_u64(0);       // fsid
  const uint8_t fh[] = {1, 0, 1, 0, 0, 0, 0, 0};
  v.w.put_opaque_var(fh);               // filehandle
  v.w.put_u64(2);                       // fileid
  v.w.put_u64(1u << 20);                // maxread
  v.w.put_u32(040755);                  // mode
  v.w.put_string("root");               // owner
  v.w.put_string("root");               // owner_group
  v.w.put_u64(1700000000), v.w.put_u32(5);  // time_modify
  w.put_opaque_var(v.done());
}

void result(tern::xdr::XdrWriter& w, Op op, uint32_t st = 0) {
  w.put_u32(static_cast<uint32_t>(op));
  w.put_u32(st);
}

Bytes compound(std::initializer_list<uint8_t> picks, const Bytes& res) {
  Bytes b{static_cast<uint8_t>(picks.size())};
  b.insert(b.end(), picks.begin(), picks.end());
  return cat(b, res);
}

void nfs_seeds() {
  // Picks as fuzz_nfs_compound.cc numbers them: 0 PUTROOTFH 1 PUTFH 2 LOOKUP
  // 3 GETFH 4 GETATTR 5 READ inline 6 READ chunk (high nibble x 1024) 7 WRITE 8 COMMIT.
  W a;
  a.w.put_u32(0);
  a.w.put_string("tern");
  a.w.put_u32(3);
  result(a.w, Op::kPutrootfh);
  result(a.w, Op::kGetfh);
  const uint8_t fh[] = {1, 0, 1, 0, 0, 0, 0, 0};
  a.w.put_opaque_var(fh);
  result(a.w, Op::kGetattr);
  put_fattr(a.w);
  save("nfs_compound", "putrootfh-getfh-getattr", compound({0, 3, 4}, a.done()));

  W r;
  r.w.put_u32(0), r.w.put_u32(0), r.w.put_u32(2);
  result(r.w, Op::kPutfh);
  result(r.w, Op::kRead);
  r.w.put_bool(true);
  const uint8_t data[] = {'h', 'e', 'l', 'l', 'o'};
  r.w.put_u32(sizeof data);
  r.w.put_opaque_fixed(data);
  save("nfs_compound", "putfh-read-inline", compound({1, 5}, r.done()));

  W c;
  c.w.put_u32(0), c.w.put_u32(0), c.w.put_u32(2);
  result(c.w, Op::kPutfh);
  result(c.w, Op::kRead);
  c.w.put_bool(false);
  c.w.put_u32(2048);  // the data went to the write chunk
  save("nfs_compound", "putfh-read-chunk", compound({1, 0x26}, c.done()));

  W wr;
  wr.w.put_u32(0), wr.w.put_u32(0), wr.w.put_u32(3);
  result(wr.w, Op::kPutfh);
  result(wr.w, Op::kWrite);
  wr.w.put_u32(4096), wr.w.put_u32(2);
  const uint8_t verf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  wr.w.put_opaque_fixed(verf);
  result(wr.w, Op::kCommit);
  wr.w.put_opaque_fixed(verf);
  save("nfs_compound", "putfh-write-commit", compound({1, 7, 8}, wr.done()));

  W f;  // LOOKUP failed: the last result, its status the COMPOUND's
  f.w.put_u32(static_cast<uint32_t>(tern::nfs::Nfs4Stat::kNoent));
  f.w.put_u32(0), f.w.put_u32(2);
  result(f.w, Op::kPutrootfh);
  result(f.w, Op::kLookup, static_cast<uint32_t>(tern::nfs::Nfs4Stat::kNoent));
  save("nfs_compound", "lookup-noent", compound({0, 2, 3}, f.done()));

  W fa;
  put_fattr(fa.w);
  save("nfs_compound", "fattr4", cat(Bytes{0x80}, fa.done()));
}

// ------------------------------------------------------------ pmd/shm harness records

// fuzz_shm_desc.cc: opcodes and operand orders.
enum DescOp : uint8_t { kDesc, kPublish, kAck, kState, kSegment, kServerPost, kServerRecv, kPoll, kCtl };

struct Rec {
  Bytes b;
  Rec& u8(uint8_t v) { return b.push_back(v), *this; }
  Rec& u16(uint16_t v) { return u8(v & 0xff).u8(v >> 8); }
  Rec& u32(uint32_t v) { return u16(v & 0xffff).u16(v >> 16); }
};

// Start of every shm_desc input: n receives of 2 x 512 bytes.
Rec desc_start(uint8_t nrecv) {
  Rec r;
  r.u8(nrecv);
  for (uint8_t i = 0; i < nrecv; ++i) r.u8(0x0f);  // 2 SGEs of (7*64+64) bytes
  return r;
}
// kSegment: index, memfd size - 1 (sealed, as long as said), fill byte.
Rec& seg_rec(Rec& r, uint8_t index, uint16_t size) {
  return r.u8(kSegment).u8(0).u8(index).u16(static_cast<uint16_t>(size - 1)).u8(0x5a);
}
// kDesc, honest index and length: op, SGEs (seg, len, off), key and address picks.
Rec& desc_rec(Rec& r, uint8_t op, uint8_t key_pick, uint8_t addr_pick, uint16_t addr_off,
              std::initializer_list<std::array<uint16_t, 3>> sges, uint16_t read_len = 0) {
  r.u8(kDesc).u8(static_cast<uint8_t>((key_pick << 2) | (addr_pick << 4))).u8(op).u8(static_cast<uint8_t>(sges.size()));
  r.u16(addr_off);
  for (const auto& s : sges) r.u8(static_cast<uint8_t>(s[0])).u16(s[1]).u16(s[2]);
  if (op == tern::shm::kOpRead) r.u16(read_len);
  return r;
}
Rec& publish_poll(Rec& r) { return r.u8(kPublish).u8(0).u8(kPoll).u8(3); }

// fuzz_nfs3.cc's layout: a selector byte (bit 7 results, bit 6 a chunk
// described by two bytes and taken from the end, bits 0..4 the procedure;
// 0 is MOUNT), then the arguments or results.
template <typename T>
Bytes nfs3_enc(const T& v) {
  Bytes b(8192);
  tern::xdr::XdrWriter w(b);
  tern::nfs::nfs3::encode(w, v);
  b.resize(w.bytes_written());
  return b;
}
Bytes nfs3_input(uint8_t sel, const Bytes& body) { return cat(Bytes{sel}, body); }

void nfs3_seeds() {
  namespace n3 = tern::nfs::nfs3;
  using tern::nfs::Nfs3Proc;
  auto p = [](Nfs3Proc x) { return static_cast<uint8_t>(x); };
  tern::nfs::Fh3 fh;
  const uint8_t fhb[] = {1, 12, 0, 1, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 9, 9, 9, 9, 9, 9, 9, 9};
  fh.assign(fhb);
  tern::nfs::Sattr3 sa;
  sa.set_mode = true, sa.mode = 0644;
  sa.mtime_how = tern::nfs::TimeHow::kServerTime;
  save("nfs3", "args-getattr", nfs3_input(p(Nfs3Proc::kGetattr), nfs3_enc(n3::GetattrArgs{fh})));
  save("nfs3", "args-setattr", nfs3_input(p(Nfs3Proc::kSetattr), nfs3_enc(n3::SetattrArgs{fh, sa, true, {1, 2}})));
  save("nfs3", "args-lookup", nfs3_input(p(Nfs3Proc::kLookup), nfs3_enc(n3::LookupArgs{{fh, "name"}})));
  save("nfs3", "args-read", nfs3_input(p(Nfs3Proc::kRead), nfs3_enc(n3::ReadArgs{fh, 4096, 65536})));
  const Bytes data(16, 0xab);
  save("nfs3", "args-write-inline",
       nfs3_input(p(Nfs3Proc::kWrite), nfs3_enc(n3::WriteArgs{fh, 0, 16, tern::nfs::StableHow::kFileSync, data, false})));
  {
    Bytes b(256);
    tern::xdr::XdrWriter w(b);
    n3::encode_write_chunked(w, n3::WriteArgs{fh, 0, 16, tern::nfs::StableHow::kUnstable, data, true});
    b.resize(w.bytes_written());
    // Selector, chunk length 16, position (in words), the arguments, the chunk.
    save("nfs3", "args-write-chunk", cat(cat(Bytes{static_cast<uint8_t>(0x40 | p(Nfs3Proc::kWrite)), 16,
                                                   static_cast<uint8_t>(b.size() / 4)}, b), data));
    n3::SymlinkArgs s{{fh, "ln"}, sa, "../target"};
    Bytes c(256);
    tern::xdr::XdrWriter cw(c);
    n3::encode_symlink_chunked(cw, s);
    c.resize(cw.bytes_written());
    const Bytes path(s.target.begin(), s.target.end());
    save("nfs3", "args-symlink-chunk", cat(cat(Bytes{static_cast<uint8_t>(0x40 | p(Nfs3Proc::kSymlink)),
                                                     static_cast<uint8_t>(path.size()), static_cast<uint8_t>(c.size() / 4)},
                                                c), path));
  }
  save("nfs3", "args-create",
       nfs3_input(p(Nfs3Proc::kCreate), nfs3_enc(n3::CreateArgs{{fh, "f"}, tern::nfs::CreateMode::kGuarded, sa, {}})));
  save("nfs3", "args-mknod",
       nfs3_input(p(Nfs3Proc::kMknod), nfs3_enc(n3::MknodArgs{{fh, "dev"}, tern::nfs::FileType::kChr, sa, 1, 3})));
  save("nfs3", "args-rename", nfs3_input(p(Nfs3Proc::kRename), nfs3_enc(n3::RenameArgs{{fh, "a"}, {fh, "b"}})));
  save("nfs3", "args-link", nfs3_input(p(Nfs3Proc::kLink), nfs3_enc(n3::LinkArgs{fh, {fh, "h"}})));
  save("nfs3", "args-readdirplus",
       nfs3_input(p(Nfs3Proc::kReaddirplus), nfs3_enc(n3::ReaddirplusArgs{fh, 7, {}, 4096, 65536})));
  save("nfs3", "args-commit", nfs3_input(p(Nfs3Proc::kCommit), nfs3_enc(n3::CommitArgs{fh, 0, 0})));

  tern::nfs::Fattr3 a;
  a.type = tern::nfs::FileType::kDir, a.mode = 0755, a.nlink = 2, a.size = 4096, a.fileid = 2;
  n3::LookupRes lr;
  lr.obj = fh, lr.obj_attr = a, lr.dir_attr = a;
  save("nfs3", "res-lookup", nfs3_input(0x80 | p(Nfs3Proc::kLookup), nfs3_enc(lr)));
  n3::ReadRes rr;
  rr.attr = a, rr.count = 8, rr.eof = true, rr.data_in_chunk = true;
  save("nfs3", "res-read-chunk", cat(cat(Bytes{static_cast<uint8_t>(0xc0 | p(Nfs3Proc::kRead)), 8, 0}, nfs3_enc(rr)),
                                     Bytes(8, 1)));
  n3::CreateRes cr;
  cr.obj = fh, cr.obj_attr = a, cr.dir_wcc.after = a;
  save("nfs3", "res-create", nfs3_input(0x80 | p(Nfs3Proc::kCreate), nfs3_enc(cr)));
  {
    Bytes b(4096);
    tern::xdr::XdrWriter w(b);
    n3::DirListEncoder e(w, true, 4096, 1024);
    e.begin(tern::nfs::Nfs3Stat::kOk, &a, {});
    e.add(2, ".", 1, &a, &fh);
    e.add(3, "file", 2, &a, &fh);
    e.finish(true);
    b.resize(w.bytes_written());
    save("nfs3", "res-readdirplus", nfs3_input(0x80 | p(Nfs3Proc::kReaddirplus), b));
  }
  {
    Bytes b(512);
    tern::xdr::XdrWriter w(b);
    tern::nfs::mount3::MntRes m;
    m.fh = fh;
    m.flavors = {1};
    tern::nfs::mount3::encode(w, m);
    b.resize(w.bytes_written());
    save("nfs3", "mount-mntres", nfs3_input(0, b));
    Bytes d(64);
    tern::xdr::XdrWriter dw(d);
    tern::nfs::mount3::encode_dirpath(dw, "/export");
    d.resize(dw.bytes_written());
    save("nfs3", "mount-dirpath", nfs3_input(0, d));
  }
}

void shm_seeds() {
  using namespace tern::shm;
  {
    Rec r = desc_start(4);
    seg_rec(r, 0, 4096);
    desc_rec(r, kOpSend, 0, 0, 0, {{0, 100, 0}});
    desc_rec(r, kOpSend, 0, 0, 0, {{0, 600, 8}, {0, 300, 1024}});
    publish_poll(r);
    save("shm_desc", "send", r.b);
  }
  {
    // Messages inline in their descriptors (kDescInline): one that fits,
    // one longer than a slot holds, and a WRITE that claims to be inline.
    Rec r = desc_start(4);
    auto inline_rec = [&](uint8_t op, uint32_t len) {
      r.u8(kDesc).u8(0x80).u8(op).u8(0).u16(0).u16(kDescInline).u32(len);
    };
    inline_rec(kOpSend, 40);
    inline_rec(kOpSend, kMaxInline);
    publish_poll(r);
    inline_rec(kOpSend, kMaxInline + 1);
    publish_poll(r);
    save("shm_desc", "send-inline", r.b);
    Rec w = desc_start(1);
    w.u8(kDesc).u8(0x80).u8(kOpWrite).u8(0).u16(0x100).u16(kDescInline).u32(64);
    publish_poll(w);
    save("shm_desc", "write-inline", w.b);
  }
  {
    Rec r = desc_start(1);
    seg_rec(r, 1, 8192);
    desc_rec(r, kOpWrite, 0, 0, 0x100, {{1, 4000, 0}, {1, 96, 4000}});
    desc_rec(r, kOpWrite, 1, 1, 0x10, {{1, 512, 0}});
    publish_poll(r);
    save("shm_desc", "write", r.b);
  }
  {
    Rec r = desc_start(1);
    desc_rec(r, kOpRead, 0, 0, 0x2000, {}, 1024);
    desc_rec(r, kOpRead, 1, 1, 0, {}, 4096);
    publish_poll(r);
    save("shm_desc", "read", r.b);
  }
  {
    Rec r = desc_start(2);
    seg_rec(r, 0, 4096);
    desc_rec(r, kOpSendInv, 1, 0, 0, {{0, 64, 0}});
    desc_rec(r, kOpSendInv, 1, 0, 0, {{0, 64, 0}});  // the MR is invalid by now
    publish_poll(r);
    save("shm_desc", "send-inv", r.b);
  }
  {
    // The server sends, writes and reads; the client acknowledges with a READ grant.
    Rec r = desc_start(0);
    seg_rec(r, 0, 4096);
    r.u8(kServerPost).u8(0).u8(0).u16(256);                          // SEND
    r.u8(kServerPost).u8(2).u8(1).u16(512).u32(0x1234).u32(0).u32(0);  // WRITE
    r.u8(kServerPost).u8(3).u8(2).u16(128).u32(0x1234).u32(0).u32(0);  // READ
    r.u8(kPoll).u8(0);
    r.u8(kAck).u8(3).u8(0).u16(0).u8(0).u16(0).u8(0).u16(64);        // cons += 3, grants
    r.u8(kPoll).u8(3);
    save("shm_desc", "server-ops", r.b);
  }
  {
    Rec r = desc_start(1);
    r.u8(kServerPost).u8(0).u8(0).u16(64);
    r.u8(kPoll).u8(0);
    r.u8(kState).u8(0x0b).u8(static_cast<uint8_t>(tern::rdma::WcStatus::kRemAccessErr));  // error, valid, index
    r.u8(kPoll).u8(3);
    save("shm_desc", "peer-error", r.b);
  }
  {
    // A segment sent again under an index already mapped, while a descriptor
    // naming it and a segment not yet mapped waits; the CQs are polled before
    // poll_cm, so the segment messages are read during the descriptor's execution.
    Rec r = desc_start(1);
    seg_rec(r, 0, 65000);
    r.u8(kPoll).u8(0);
    seg_rec(r, 0, 100);  // now much shorter
    seg_rec(r, 1, 4096);
    desc_rec(r, kOpSend, 0, 0, 0, {{0, 500, 60000}, {1, 100, 0}});
    r.u8(kPublish).u8(0).u8(kPoll).u8(4);
    save("shm_desc", "segment-remapped-during-send", r.b);
  }
  {
    Rec r = desc_start(1);
    seg_rec(r, 2, 100);
    seg_rec(r, 2, 200);  // the same index twice
    r.u8(kCtl).u8(0);
    ShmMsg m{};
    m.type = kMsgBye;
    for (size_t i = 0; i < sizeof m; ++i) r.u8(reinterpret_cast<uint8_t*>(&m)[i]);
    r.u8(kPoll).u8(3);
    save("shm_desc", "segment-twice-bye", r.b);
  }

  // fuzz_shm_ctl.cc: 0 connect, 1 message, 2 poll, 3 close.
  {
    Rec r;
    r.u8(1).u8(0x00).u8(0).u8(0).u8(0).u8(2);  // hello, pdata_len 0, a sealed good area
    r.u8(2).u8(3).u8(0);                       // poll, accept
    r.u8(1).u8(0x00).u8(3).u8(1).u8(7).u8(0).u16(4095).u8(0x11);  // segment index 1 with a 4 KiB memfd
    r.u8(2).u8(1);
    r.u8(1).u8(0x00).u8(4).u8(0).u8(0).u8(0);  // bye
    r.u8(2).u8(1);
    save("shm_ctl", "hello-segment-bye", r.b);
  }
  {
    Rec r;
    r.u8(0);                                   // a second client
    r.u8(1).u8(0x20).u8(0).u8(0).u8(8).u8(1).u8(2).u8(3).u8(4).u8(5).u8(6).u8(7).u8(8).u8(2);
    r.u8(1).u8(0x00).u8(0).u8(0).u8(0).u8(3);  // unsealed area
    r.u8(2).u8(3).u8(1).u8(0);                 // reject one, accept the other
    r.u8(3);                                   // close client 0
    r.u8(2).u8(3);
    save("shm_ctl", "two-clients", r.b);
  }
  {
    Rec r;
    r.u8(1).u8(0x00).u8(0).u8(0).u8(0).u8(4);  // two fds
    r.u8(1).u8(0x00).u8(0).u8(0).u8(0).u8(5);  // pipes
    r.u8(1).u8(0x10).u8(0).u8(0).u8(0).u8(50).u8(2);  // short message
    r.u8(2).u8(3);
    save("shm_ctl", "bad-fds", r.b);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  rpcrdma_seeds();
  oncrpc_seeds();
  cm_seeds();
  nfs_seeds();
  nfs3_seeds();
  shm_seeds();
  std::printf("%d seeds written under %s\n", g_written, g_dir.c_str());
  return 0;
}
