// Records what the Linux kernel's NFS/RDMA server (svcrdma + nfsd) really
// sends, as seeds for the fuzz targets: a raw client over the verbs driver
// (the rdmadev interface, no engine) sends hand-made calls and saves each
// reply's bytes as received. Not a fuzz target and not a test; run once in the
// rxe VM (README.md here says how), and the files are committed.
//
//   tern-svcrdma-capture OUT_DIR [verbs spec] [export dir]
//
// writes, for each exchange NAME:
//   OUT_DIR/rpcrdma_header/svc-NAME  the whole received message: RPC-over-RDMA
//                                    header and, for RDMA_MSG, the RPC reply
//   OUT_DIR/oncrpc/svc-NAME          the ONC RPC reply (inline or from the reply chunk)
//   OUT_DIR/nfs_compound/svc-NAME    COMPOUND4res, prefixed as fuzz_nfs_compound.cc reads it
//   OUT_DIR/nfs_compound/svc-NAME-fattr4   a GETATTR result's fattr4, likewise
//   OUT_DIR/cm_private/svc-accept    the server's RFC 8797 private data
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "mem/arena.h"
#include "nfs/compound_args.h"
#include "nfs/fattr4.h"
#include "nfs/nfs4_status.h"
#include "oncrpc/oncrpc.h"
#include "rdmadev/rdmadev.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"
#include "xdr/xdr.h"

namespace {

using namespace tern;
using namespace tern::rdma;
namespace rr = tern::rpcrdma;
namespace oc = tern::oncrpc;
using Bytes = std::vector<uint8_t>;

constexpr uint32_t kNfsProg = 100003;
constexpr uint32_t kBuf = 8192;           // each receive buffer; above both inline thresholds
constexpr uint32_t kNumRecv = 8;
constexpr uint32_t kChunkBytes = 64 << 10;  // the write chunk and the reply chunk

std::string g_out;

[[noreturn]] void die(const char* what, const Status& s) {
  std::fprintf(stderr, "svcrdma-capture: %s: %s\n", what, s.message().c_str());
  std::exit(1);
}

void save(const char* target, const std::string& name, const Bytes& b) {
  std::string d = g_out + "/" + target;
  mkdir(d.c_str(), 0755);
  std::string p = d + "/svc-" + name;
  FILE* f = std::fopen(p.c_str(), "wb");
  if (f == nullptr || std::fwrite(b.data(), 1, b.size(), f) != b.size() || std::fclose(f) != 0) {
    std::perror(p.c_str());
    std::exit(1);
  }
  std::printf("  %s (%zu bytes)\n", p.c_str(), b.size());
}

struct Client {
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Qp> qp;
  uint8_t* tx = nullptr;
  uint8_t* rx = nullptr;
  uint8_t* write_chunk = nullptr;
  uint8_t* reply_chunk = nullptr;
  Bytes server_pdata;

  template <typename T>
  static T take(Result<T> r, const char* what) {
    if (!r.is_ok()) die(what, r.status());
    return std::move(r).value();
  }

  void connect(const std::string& spec) {
    arena = take(mem::Arena::create({.size = 4u << 20, .huge = mem::HugePages::kNever}), "arena");
    tx = static_cast<uint8_t*>(arena->carve(kBuf, 4096));
    rx = static_cast<uint8_t*>(arena->carve(kNumRecv * kBuf, 4096));
    write_chunk = static_cast<uint8_t*>(arena->carve(kChunkBytes, 4096));
    reply_chunk = static_cast<uint8_t*>(arena->carve(kChunkBytes, 4096));
    dev = take(open_device(spec), "open_device");
    pd = take(dev->alloc_pd(), "alloc_pd");
    mr = take(pd->reg_mr(arena->base(), arena->size(), kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead),
              "reg_mr");
    scq = take(dev->create_cq(64), "create_cq");
    rcq = take(dev->create_cq(64), "create_cq");
    QpInit qi;
    qi.pd = pd.get(), qi.send_cq = scq.get(), qi.recv_cq = rcq.get();
    qi.sq_depth = 16, qi.rq_depth = kNumRecv, qi.max_send_sge = 1, qi.max_recv_sge = 1;
    qp = take(dev->create_qp(qi), "create_qp");
    for (uint32_t i = 0; i < kNumRecv; ++i) repost(i);
    // What the Linux client offers: 4 KiB each way. Not the I flag: the
    // server would then invalidate the write chunk's rkey with Send With
    // Invalidate, and this client's rkeys are a plain MR's, which cannot be.
    rr::CmPrivateData mine;
    mine.remote_invalidation = false;
    mine.inline_send_size = 4096;
    mine.inline_recv_size = 4096;
    uint8_t pb[rr::kCmPrivateSize];
    size_t n = rr::encode_cm_private(mine, pb);
    Status st = dev->connect(qp.get(), std::span<const uint8_t>(pb, n));
    if (!st.is_ok()) die("connect", st);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      CmEvent ev;
      if (!dev->poll_cm(&ev)) continue;
      if (ev.type == CmEventType::kEstablished) {
        server_pdata = ev.private_data;
        return;
      }
      die(cm_event_name(ev.type), ev.status);
    }
    die("connect", make_error(Errc::kTimedOut, "no answer in 20 s"));
  }

  void repost(uint64_t i) {
    Sge s{reinterpret_cast<uint64_t>(rx + i * kBuf), kBuf, mr->lkey()};
    RecvWr r{i, &s, 1};
    int err;
    if (qp->post_recv(&r, 1, &err) != 1) die("post_recv", make_sys_error(Errc::kNoResources, err, "post_recv"));
  }

  // Sends msg and returns the next received message (empty after 10 s).
  Bytes exchange(const Bytes& msg) {
    std::memcpy(tx, msg.data(), msg.size());
    Sge s{reinterpret_cast<uint64_t>(tx), static_cast<uint32_t>(msg.size()), mr->lkey()};
    SendWr w;
    w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend, w.flags = kWrSignaled;
    int err;
    if (qp->post_send(&w, 1, &err) != 1) die("post_send", make_sys_error(Errc::kNoResources, err, "post_send"));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      Wc wc[4];
      int ns = scq->poll(wc, 4);
      for (int i = 0; i < ns; ++i)
        if (wc[i].status != WcStatus::kSuccess) die("send", make_error(Errc::kRemoteError, "%s", wc_status_name(wc[i].status)));
      if (rcq->poll(wc, 1) == 1) {
        if (wc[0].status != WcStatus::kSuccess)
          die("receive", make_error(Errc::kRemoteError, "%s", wc_status_name(wc[0].status)));
        const uint8_t* b = rx + wc[0].wr_id * kBuf;
        Bytes out(b, b + wc[0].byte_len);
        repost(wc[0].wr_id);
        return out;
      }
      CmEvent ev;
      if (dev->poll_cm(&ev)) die(cm_event_name(ev.type), ev.status);
    }
    return {};
  }
};

rr::Segment segment_of(const Client& c, uint8_t* p, uint32_t len) {
  return rr::Segment{c.mr->rkey(), len, reinterpret_cast<uint64_t>(p)};
}

Bytes rdma_msg(uint32_t xid, const rr::ChunkLists& chunks) {
  rr::Header h;
  h.xid = xid;
  h.credit = 8;
  h.proc = rr::Proc::kMsg;
  h.chunks = chunks;
  Bytes b(rr::kMaxHeaderSize);
  b.resize(rr::encode_header(h, b));
  return b;
}

Bytes rpc_call(uint32_t xid, uint32_t vers, uint32_t proc, bool auth_sys, const Bytes& args) {
  uint8_t auth[oc::kMaxAuthSysBodySize];
  oc::CallHeader h;
  h.xid = xid;
  h.prog = kNfsProg;
  h.vers = vers;
  h.proc = proc;
  if (auth_sys) {
    oc::AuthSysParams p;
    p.machinename = "tern-capture";
    h.cred.flavor = oc::AuthFlavor::kSys;
    h.cred.body = std::span<const uint8_t>(auth, oc::encode_auth_sys(p, auth));
  }
  Bytes b(oc::call_size(h));
  oc::encode_call(h, b);
  b.insert(b.end(), args.begin(), args.end());
  return b;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The RPC reply inside a received message: after an RDMA_MSG header, or in
// the reply chunk for RDMA_NOMSG. Empty for anything else.
Bytes rpc_reply_of(const Client& c, const Bytes& m) {
  rr::Header h;
  rr::DecodeResult d = rr::decode_header(m, &h);
  if (d.status != rr::DecodeStatus::kOk) return {};
  if (h.proc == rr::Proc::kMsg) return Bytes(m.begin() + static_cast<std::ptrdiff_t>(d.header_len), m.end());
  if (h.proc == rr::Proc::kNoMsg && h.chunks.has_reply)
    return Bytes(c.reply_chunk, c.reply_chunk + h.chunks.reply.total_length());
  return {};
}

// The results after the ONC RPC reply header (accepted, SUCCESS).
Bytes results_of(const Bytes& rpc) {
  oc::ReplyHeader h;
  oc::ReplyDecodeResult d = oc::decode_reply(rpc, &h);
  if (d.status != oc::ReplyDecodeStatus::kOk || h.stat != oc::ReplyStat::kAccepted ||
      h.accept != oc::AcceptStat::kSuccess)
    return {};
  return Bytes(rpc.begin() + static_cast<std::ptrdiff_t>(d.header_len), rpc.end());
}

// The fattr4 of the last result of a COMPOUND4res whose results are, in
// order, `ops` with GETATTR last: skipped over by hand, since the decoder
// does not say where it is.
Bytes fattr4_of(const Bytes& res, std::initializer_list<nfs::Op> ops) {
  xdr::XdrReader r(res);
  r.get_u32();
  r.get_opaque_var(1024);
  r.get_u32();
  for (nfs::Op op : ops) {
    r.get_u32();
    if (r.get_u32() != 0) return {};
    if (op == nfs::Op::kGetfh) r.get_opaque_var(nfs::kFhSize);
    if (op == nfs::Op::kGetattr) return Bytes(res.begin() + static_cast<std::ptrdiff_t>(r.position()), res.end());
  }
  return {};
}

void record(Client& c, const std::string& name, const Bytes& sent, const Bytes& picks = {},
            std::initializer_list<nfs::Op> fattr_ops = {}) {
  Bytes m = c.exchange(sent);
  if (m.empty()) {
    std::fprintf(stderr, "svcrdma-capture: %s: no reply\n", name.c_str());
    std::exit(1);
  }
  save("rpcrdma_header", name, m);
  Bytes rpc = rpc_reply_of(c, m);
  if (rpc.empty()) return;
  save("oncrpc", name, rpc);
  if (picks.empty()) return;
  Bytes res = results_of(rpc);
  if (res.empty()) return;
  Bytes prefix{static_cast<uint8_t>(picks.size())};
  prefix.insert(prefix.end(), picks.begin(), picks.end());
  save("nfs_compound", name, cat(prefix, res));
  if (fattr_ops.size() != 0) {
    Bytes fa = fattr4_of(res, fattr_ops);
    if (!fa.empty()) save("nfs_compound", name + "-fattr4", cat(Bytes{0x80}, fa));
  }
}

Bytes compound(const std::function<void(nfs::CompoundArgs&)>& build) {
  uint8_t buf[1024];
  nfs::CompoundArgs a(buf, "tern-capture");
  build(a);
  auto r = a.finish();
  if (!r.is_ok()) die("COMPOUND args", r.status());
  return Bytes(r->begin(), r->end());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR [verbs spec] [export dir]\n", argv[0]);
    return 2;
  }
  g_out = argv[1];
  std::string spec = argc > 2 ? argv[2] : "verbs:dev=rxe0,addr=169.254.77.1,port=20049";
  std::string exp = argc > 3 ? argv[3] : "/export";
  mkdir(g_out.c_str(), 0755);
  {
    // What READ reads: 10000 bytes, larger than one inline reply.
    std::string data(10000, 'x');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>('a' + i % 26);
    FILE* f = std::fopen((exp + "/seed.txt").c_str(), "wb");
    if (f == nullptr || std::fwrite(data.data(), 1, data.size(), f) != data.size() || std::fclose(f) != 0) {
      std::perror("seed.txt");
      return 1;
    }
  }
  Client c;
  c.connect(spec);
  Bytes pd{0x00};  // fuzz_cm_private's selector: this end offers 1 KiB each way, no I, is a client
  pd.insert(pd.end(), c.server_pdata.begin(), c.server_pdata.end());
  save("cm_private", "accept", pd);

  rr::ChunkLists none;
  none.clear();
  uint32_t xid = 0x7e540001;
  using nfs::Attr;
  const nfs::AttrSet attrs{Attr::kSupportedAttrs, Attr::kType,      Attr::kFhExpireType, Attr::kChange,
                           Attr::kSize,           Attr::kLinkSupport, Attr::kSymlinkSupport, Attr::kNamedAttr,
                           Attr::kFsid,           Attr::kUniqueHandles, Attr::kLeaseTime,  Attr::kFilehandle,
                           Attr::kFileid,         Attr::kMaxread,   Attr::kMaxwrite,     Attr::kMode,
                           Attr::kNumlinks,       Attr::kOwner,     Attr::kOwnerGroup,   Attr::kSpaceUsed,
                           Attr::kTimeAccess,     Attr::kTimeMetadata, Attr::kTimeModify};

  record(c, "nfs3-null", cat(rdma_msg(xid, none), rpc_call(xid, 3, 0, false, {})));
  ++xid;
  record(c, "nfs4-null", cat(rdma_msg(xid, none), rpc_call(xid, 4, 0, false, {})));
  ++xid;
  record(c, "prog-mismatch", cat(rdma_msg(xid, none), rpc_call(xid, 5, 0, false, {})));
  ++xid;
  // Picks as fuzz_nfs_compound.cc numbers them: 0 PUTROOTFH, 2 LOOKUP, 3 GETFH, 4 GETATTR, 5 READ inline, 6 READ chunk.
  Bytes args = compound([&](nfs::CompoundArgs& a) {
    a.putrootfh();
    a.getfh();
    a.getattr(attrs);
  });
  record(c, "putrootfh-getfh-getattr", cat(rdma_msg(xid, none), rpc_call(xid, 4, 1, true, args)), {0, 3, 4},
         {nfs::Op::kPutrootfh, nfs::Op::kGetfh, nfs::Op::kGetattr});
  ++xid;
  args = compound([&](nfs::CompoundArgs& a) {
    a.putrootfh();
    a.lookup("seed.txt");
    a.getattr(attrs);
  });
  record(c, "lookup-getattr", cat(rdma_msg(xid, none), rpc_call(xid, 4, 1, true, args)), {0, 2, 4},
         {nfs::Op::kPutrootfh, nfs::Op::kLookup, nfs::Op::kGetattr});
  ++xid;
  args = compound([&](nfs::CompoundArgs& a) {
    a.putrootfh();
    a.lookup("no-such-file");
    a.getfh();
  });
  record(c, "lookup-noent", cat(rdma_msg(xid, none), rpc_call(xid, 4, 1, true, args)), {0, 2, 3});
  ++xid;

  // nfsd answers READ with NFS4ERR_GRACE for its grace period after start
  // (10 s in the VM): wait it out with small inline READs.
  for (int i = 0; i < 40; ++i, ++xid) {
    args = compound([&](nfs::CompoundArgs& a) {
      a.putrootfh();
      a.lookup("seed.txt");
      a.read(nfs::Stateid::anonymous(), 0, 16);
    });
    Bytes res = results_of(rpc_reply_of(c, c.exchange(cat(rdma_msg(xid, none), rpc_call(xid, 4, 1, true, args)))));
    xdr::XdrReader r(res);
    uint32_t status = r.get_u32();
    if (r.ok() && status != static_cast<uint32_t>(nfs::Nfs4Stat::kGrace)) break;
    sleep(1);
  }
  ++xid;

  // READ into a write chunk: the data arrives by RDMA WRITE, the reply
  // carries the chunk with its written length and a reduced data item.
  args = compound([&](nfs::CompoundArgs& a) {
    a.putrootfh();
    a.lookup("seed.txt");
    a.read(nfs::Stateid::anonymous(), 0, 8192);
  });
  rr::ChunkLists wc;
  wc.clear();
  wc.nwrites = 1;
  wc.writes[0].nsegments = 2;
  wc.writes[0].segments[0] = segment_of(c, c.write_chunk, 4096);
  wc.writes[0].segments[1] = segment_of(c, c.write_chunk + 4096, 4096);
  record(c, "read-write-chunk", cat(rdma_msg(xid, wc), rpc_call(xid, 4, 1, true, args)), {0, 2, 0x86});
  ++xid;

  // READ of more than fits inline, no write chunk: the reply goes in the
  // reply chunk, as RDMA_NOMSG.
  args = compound([&](nfs::CompoundArgs& a) {
    a.putrootfh();
    a.lookup("seed.txt");
    a.read(nfs::Stateid::anonymous(), 0, 10000);
  });
  rr::ChunkLists rc;
  rc.clear();
  rc.has_reply = true;
  rc.reply.nsegments = 1;
  rc.reply.segments[0] = segment_of(c, c.reply_chunk, kChunkBytes);
  record(c, "read-reply-chunk", cat(rdma_msg(xid, rc), rpc_call(xid, 4, 1, true, args)), {0, 2, 5});
  ++xid;

  // Errors svcrdma answers with RDMA_ERROR (RFC 8166 §4.5): another version,
  // then a chunk list it cannot parse. Last: the server may close after them.
  Bytes v2 = cat(rdma_msg(xid, none), rpc_call(xid, 3, 0, false, {}));
  v2[7] = 2;
  record(c, "err-vers", v2);
  ++xid;
  Bytes bad = rdma_msg(xid, none);
  bad[19] = 7;  // the read list's "more" flag: not a bool
  record(c, "err-chunk", cat(bad, rpc_call(xid, 3, 0, false, {})));
  std::printf("svcrdma-capture: done\n");
  return 0;
}
