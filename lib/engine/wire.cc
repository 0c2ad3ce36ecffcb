// The engine's wire adapter over lib/rpcrdma (RFC 8166/8797) and lib/oncrpc
// (RFC 5531). Limits that are Tern's rather than the RFCs' are stated where
// they are applied.
#include "engine/wire.h"

#include <cstring>

#include "base/check.h"
#include "oncrpc/oncrpc.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"
#include "xdr/xdr.h"

namespace tern::rpc::wire {

namespace rr = tern::rpcrdma;
namespace oc = tern::oncrpc;

// ---- the plain shapes
//
// Nearly every inline message has one of a few fixed shapes: an RDMA_MSG
// header with three empty chunk lists (7 words), an AUTH_NONE call header
// (10 words), an accepted SUCCESS reply with an AUTH_NONE verifier (6).
// Those are written and recognised word by word here; everything else goes
// through lib/rpcrdma's and lib/oncrpc's general codecs. A message the fast
// path takes is one the general decoder accepts with exactly the same result
// (tests/unit/wire_test.cc compares the two on every shape and on mutations
// of them). The general path cost ~150-200 instructions per header; this is
// ~20.
namespace {
using xdr::detail::load_be32;
using xdr::detail::store_be32;
constexpr size_t kPlainRdmaHdr = rr::kMinMsgHeaderSize;  // xid vers credit proc, three empty lists
constexpr size_t kPlainCallHdr = 10 * 4;                 // xid CALL 2 prog vers proc, cred 0 0, verf 0 0
constexpr size_t kPlainReplyHdr = 6 * 4;                 // xid REPLY ACCEPTED, verf 0 0, SUCCESS
using detail::g_fast_paths;

uint32_t word(const uint8_t* p, int i) { return load_be32(p + 4 * i); }

bool plain_rdma_msg(std::span<const uint8_t> m) {
  if (!g_fast_paths || m.size() < kPlainRdmaHdr) return false;
  const uint8_t* p = m.data();
  return word(p, 1) == rr::kVersion && word(p, 3) == static_cast<uint32_t>(rr::Proc::kMsg) &&
         (word(p, 4) | word(p, 5) | word(p, 6)) == 0;
}

void put_plain_rdma_msg(uint8_t* p, uint32_t xid, uint32_t credits) {
  store_be32(p, xid);
  store_be32(p + 4, rr::kVersion);
  store_be32(p + 8, credits);
  store_be32(p + 12, static_cast<uint32_t>(rr::Proc::kMsg));
  store_be32(p + 16, 0);
  store_be32(p + 20, 0);
  store_be32(p + 24, 0);
}

bool no_chunks(const ChunkLists& ch) { return ch.nreads == 0 && ch.nwrites == 0 && !ch.has_reply; }
bool plain_auth(const Call& c) { return c.auth == nullptr || c.auth->machine.empty(); }

}  // namespace

bool detail::g_fast_paths = true;

namespace testing {
void use_fast_paths(bool on) { detail::g_fast_paths = on; }
// The library's own flags are what fast_paths() was inlined with in the
// connections' code.
bool shortcuts_switchable() { return ::tern::detail::debug_checks_compiled(); }
}  // namespace testing

size_t encode_pdata(uint8_t* out, size_t cap, uint32_t inline_send, uint32_t inline_recv, bool remote_inv) {
  rr::CmPrivateData d;
  d.remote_invalidation = remote_inv;
  d.inline_send_size = inline_send;
  d.inline_recv_size = inline_recv;
  return rr::encode_cm_private(d, std::span<uint8_t>(out, cap));
}

void negotiate(std::span<const uint8_t> peer, uint32_t my_send, uint32_t my_recv, bool my_inv, bool server,
               uint32_t* send, uint32_t* recv, bool* inv) {
  rr::CmPrivateData local;
  local.remote_invalidation = my_inv;
  local.inline_send_size = my_send;
  local.inline_recv_size = my_recv;
  rr::InlineLimits l = rr::negotiate_inline(local, peer);
  *send = l.max_send;
  *recv = l.max_recv;
  *inv = server ? l.send_with_invalidate : l.receive_invalidate;
}

size_t encode_reject(uint8_t* out, size_t cap, RejectReason why) {
  if (cap < kRejectLen) return 0;
  out[0] = 'T';
  out[1] = 'r';
  out[2] = 'j';
  out[3] = static_cast<uint8_t>(why);
  return kRejectLen;
}

RejectReason decode_reject(std::span<const uint8_t> p) {
  if (p.size() < kRejectLen || p[0] != 'T' || p[1] != 'r' || p[2] != 'j') return RejectReason::kUnspecified;
  if (p[3] > static_cast<uint8_t>(RejectReason::kNoReceiveBuffers)) return RejectReason::kUnspecified;
  return static_cast<RejectReason>(p[3]);
}

namespace {

// The ONC RPC call header for c; auth bytes (AUTH_SYS) live in `scratch`.
oc::CallHeader rpc_call_header(const Call& c, uint32_t xid, uint8_t* scratch, size_t scratch_cap) {
  oc::CallHeader h;
  h.xid = xid;
  h.prog = c.prog;
  h.vers = c.vers;
  h.proc = c.proc;
  h.cred.flavor = oc::AuthFlavor::kNone;
  h.verf.flavor = oc::AuthFlavor::kNone;
  if (c.auth != nullptr && !c.auth->machine.empty()) {
    oc::AuthSysParams p;
    p.stamp = c.auth->stamp;
    p.machinename = std::string_view(c.auth->machine).substr(0, oc::kMaxMachineNameSize);
    p.uid = c.auth->uid;
    p.gid = c.auth->gid;
    p.ngids = std::min<uint32_t>(c.auth->ngids, oc::kMaxAuthSysGids);
    for (uint32_t i = 0; i < p.ngids; ++i) p.gids[i] = c.auth->gids[i];
    size_t n = oc::encode_auth_sys(p, std::span<uint8_t>(scratch, scratch_cap));
    h.cred.flavor = oc::AuthFlavor::kSys;
    h.cred.body = std::span<const uint8_t>(scratch, n);
  }
  return h;
}

void put_segment(rr::Segment* s, const RdmaSegment& r) {
  s->handle = r.handle;
  s->length = r.length;
  s->offset = r.offset;
}

}  // namespace

size_t call_rpc_header_len(const Call& c) {
  if (g_fast_paths && plain_auth(c)) return kPlainCallHdr;
  uint8_t scratch[oc::kMaxAuthBodySize];
  return oc::call_size(rpc_call_header(c, 0, scratch, sizeof scratch));
}

namespace {

void put_chunks(rr::ChunkLists* out, const ChunkLists& ch) {
  out->clear();
  uint32_t k = 0;
  for (int c = 0; c < ch.nreads; ++c)
    for (int i = 0; i < ch.reads[c].nsegs; ++i) {
      out->reads[k].position = ch.reads[c].position;
      put_segment(&out->reads[k].target, ch.reads[c].segs[i]);
      ++k;
    }
  out->nreads = k;
  out->nwrites = static_cast<uint32_t>(ch.nwrites);
  for (int c = 0; c < ch.nwrites; ++c) {
    out->writes[c].nsegments = static_cast<uint32_t>(ch.writes[c].nsegs);
    for (int i = 0; i < ch.writes[c].nsegs; ++i) put_segment(&out->writes[c].segments[i], ch.writes[c].segs[i]);
  }
  out->has_reply = ch.has_reply;
  if (ch.has_reply) {
    out->reply.nsegments = static_cast<uint32_t>(ch.reply.nsegs);
    for (int i = 0; i < ch.reply.nsegs; ++i) put_segment(&out->reply.segments[i], ch.reply.segs[i]);
  }
}

}  // namespace

size_t transport_header_len(const ChunkLists& ch) {
  // Most calls carry no chunks: the fixed header and three empty lists.
  if (ch.nreads == 0 && ch.nwrites == 0 && !ch.has_reply) return rr::kMinMsgHeaderSize;
  // Built and measured by the encoder itself, so the two cannot disagree.
  rr::Header h;
  h.proc = rr::Proc::kMsg;
  put_chunks(&h.chunks, ch);
  return rr::encoded_size(h);
}

namespace {
// The general paths are out of line: their header structs are large, and a
// frame holding them would be set up on the fast paths too.
[[gnu::noinline]] size_t encode_header_general(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits,
                                               const ChunkLists& ch, rr::Proc proc = rr::Proc::kMsg) {
  rr::Header h;
  h.xid = xid;
  h.credit = credits;
  h.proc = proc;
  put_chunks(&h.chunks, ch);
  return rr::encode_header(h, std::span<uint8_t>(buf, cap));
}
}  // namespace

size_t encode_call(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const ChunkLists& ch, const Call& c,
                   std::span<const uint8_t> args) {
  if (g_fast_paths && no_chunks(ch) && plain_auth(c)) {
    // The plain call in one pass: the RDMA_MSG header, the AUTH_NONE call
    // header (encode_rpc_call's words), the arguments.
    if (kPlainRdmaHdr + kPlainCallHdr + args.size() > cap) return 0;
    put_plain_rdma_msg(buf, xid, credits);
    uint8_t* p = buf + kPlainRdmaHdr;
    store_be32(p, xid);
    store_be32(p + 4, static_cast<uint32_t>(oc::MsgType::kCall));
    store_be32(p + 8, oc::kRpcVersion);
    store_be32(p + 12, c.prog);
    store_be32(p + 16, c.vers);
    store_be32(p + 20, c.proc);
    for (int i = 6; i < 10; ++i) store_be32(p + 4 * i, 0);  // AUTH_NONE credential and verifier
    if (!args.empty()) std::memcpy(p + kPlainCallHdr, args.data(), args.size());
    return kPlainRdmaHdr + kPlainCallHdr + args.size();
  }
  size_t n1;
  if (g_fast_paths && no_chunks(ch)) {
    if (cap < kPlainRdmaHdr) return 0;
    put_plain_rdma_msg(buf, xid, credits);
    n1 = kPlainRdmaHdr;
  } else if ((n1 = encode_header_general(buf, cap, xid, credits, ch)) == 0) {
    return 0;
  }
  size_t n2 = encode_rpc_call(buf + n1, cap - n1, xid, c, args);
  return n2 == 0 ? 0 : n1 + n2;
}

namespace {
[[gnu::noinline]] size_t encode_rpc_call_general(uint8_t* buf, size_t cap, uint32_t xid, const Call& c,
                                                 std::span<const uint8_t> args) {
  uint8_t scratch[oc::kMaxAuthBodySize];
  oc::CallHeader rh = rpc_call_header(c, xid, scratch, sizeof scratch);
  size_t n = oc::encode_call(rh, std::span<uint8_t>(buf, cap));
  if (n == 0 || n + args.size() > cap) return 0;
  if (!args.empty()) std::memcpy(buf + n, args.data(), args.size());
  return n + args.size();
}
}  // namespace

size_t encode_rpc_call(uint8_t* buf, size_t cap, uint32_t xid, const Call& c, std::span<const uint8_t> args) {
  if (g_fast_paths && plain_auth(c)) {
    if (kPlainCallHdr + args.size() > cap) return 0;
    const uint32_t w[10] = {xid, static_cast<uint32_t>(oc::MsgType::kCall), oc::kRpcVersion, c.prog, c.vers, c.proc,
                            0, 0, 0, 0};
    for (int i = 0; i < 10; ++i) store_be32(buf + 4 * i, w[i]);
    if (!args.empty()) std::memcpy(buf + kPlainCallHdr, args.data(), args.size());
    return kPlainCallHdr + args.size();
  }
  return encode_rpc_call_general(buf, cap, xid, c, args);
}

size_t encode_nomsg_call(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const ChunkLists& ch) {
  return encode_header_general(buf, cap, xid, credits, ch, rr::Proc::kNoMsg);
}

namespace {
[[gnu::noinline]] bool decode_reply_header_general(std::span<const uint8_t> msg, Reply* r) {
  rr::Header h;
  rr::DecodeResult d = rr::decode_header(msg, &h);
  // A requester never answers a bad header (RFC 8166 §4.5.2): it drops it.
  if (d.status != rr::DecodeStatus::kOk) return false;
  r->xid = h.xid;
  r->credits = h.credit;
  switch (h.proc) {
    case rr::Proc::kError:
      r->kind = Reply::Kind::kError;
      return true;
    case rr::Proc::kMsg:
      r->kind = Reply::Kind::kMsg;
      r->body = msg.subspan(d.header_len);
      if (!rr::rpc_xid_matches(h, r->body)) return false;
      break;
    case rr::Proc::kNoMsg:
      r->kind = Reply::Kind::kNoMsg;
      break;
    default:
      return false;
  }
  r->nwrites = static_cast<int>(h.chunks.nwrites);
  for (uint32_t c = 0; c < h.chunks.nwrites; ++c) r->write_lens[c] = h.chunks.writes[c].total_length();
  r->has_reply_chunk = h.chunks.has_reply;
  r->reply_chunk_len = h.chunks.has_reply ? h.chunks.reply.total_length() : 0;
  return true;
}
}  // namespace

bool decode_reply_header(std::span<const uint8_t> msg, Reply* r) {
  if (plain_rdma_msg(msg)) {
    const uint8_t* p = msg.data();
    r->xid = word(p, 0);
    r->credits = word(p, 2);
    r->kind = Reply::Kind::kMsg;
    r->body = msg.subspan(kPlainRdmaHdr);
    // The RPC message's own xid must match (rpcrdma::rpc_xid_matches).
    if (r->body.size() < 4 || load_be32(r->body.data()) != r->xid) return false;
    r->nwrites = 0;
    r->has_reply_chunk = false;
    r->reply_chunk_len = 0;
    return true;
  }
  return decode_reply_header_general(msg, r);
}

uint32_t leading_xid(std::span<const uint8_t> msg) {
  return msg.size() >= 4 ? xdr::detail::load_be32(msg.data()) : 0;
}

namespace {
[[gnu::noinline]] CallStatus decode_rpc_reply_general(std::span<const uint8_t> body, uint32_t xid,
                                                      std::span<const uint8_t>* results) {
  oc::ReplyHeader rh;
  oc::ReplyDecodeResult d = oc::decode_reply(body, &rh);
  if (d.status != oc::ReplyDecodeStatus::kOk || rh.xid != xid) return CallStatus::kBadReply;
  if (rh.stat == oc::ReplyStat::kDenied) return CallStatus::kDenied;
  switch (rh.accept) {
    case oc::AcceptStat::kSuccess:
      *results = body.subspan(d.header_len);
      return CallStatus::kOk;
    case oc::AcceptStat::kProgUnavail: return CallStatus::kProgUnavail;
    case oc::AcceptStat::kProgMismatch: return CallStatus::kProgMismatch;
    case oc::AcceptStat::kProcUnavail: return CallStatus::kProcUnavail;
    case oc::AcceptStat::kGarbageArgs: return CallStatus::kGarbageArgs;
    default: return CallStatus::kSystemErr;
  }
}
}  // namespace

CallStatus decode_rpc_reply(std::span<const uint8_t> body, uint32_t xid, std::span<const uint8_t>* results) {
  if (g_fast_paths && body.size() >= kPlainReplyHdr) {
    const uint8_t* p = body.data();
    if (word(p, 0) == xid && word(p, 1) == static_cast<uint32_t>(oc::MsgType::kReply) &&
        (word(p, 2) | word(p, 3) | word(p, 4) | word(p, 5)) == 0) {  // ACCEPTED, AUTH_NONE verifier, SUCCESS
      *results = body.subspan(kPlainReplyHdr);
      return CallStatus::kOk;
    }
  }
  return decode_rpc_reply_general(body, xid, results);
}

bool decode_plain_reply(std::span<const uint8_t> msg, uint32_t* xid, uint32_t* credits,
                        std::span<const uint8_t>* results) {
  if (!plain_rdma_msg(msg) || msg.size() < kPlainRdmaHdr + kPlainReplyHdr) return false;
  const uint8_t* p = msg.data();
  const uint8_t* b = p + kPlainRdmaHdr;
  // The RPC reply's own xid is the transport header's; REPLY, ACCEPTED,
  // AUTH_NONE verifier, SUCCESS.
  if (word(b, 0) != word(p, 0) || word(b, 1) != static_cast<uint32_t>(oc::MsgType::kReply) ||
      (word(b, 2) | word(b, 3) | word(b, 4) | word(b, 5)) != 0)
    return false;
  *xid = word(p, 0);
  *credits = word(p, 2);
  *results = msg.subspan(kPlainRdmaHdr + kPlainReplyHdr);
  return true;
}

namespace {
[[gnu::noinline]] void decode_call_header_general(std::span<const uint8_t> msg, Incoming* in, ChunkLists* chunks) {
  rr::Header h;
  rr::DecodeResult d = rr::decode_header(msg, &h);
  in->xid = h.xid;
  in->credits = h.credit;
  chunks->clear();
  switch (d.status) {
    case rr::DecodeStatus::kOk: break;
    case rr::DecodeStatus::kVersionMismatch: in->verdict = Incoming::Verdict::kErrVers; return;
    case rr::DecodeStatus::kBadChunk: in->verdict = Incoming::Verdict::kErrChunk; return;
    default: in->verdict = Incoming::Verdict::kDrop; return;
  }
  // An RDMA_ERROR sent to a server is dropped (errors are never answered).
  if (h.proc != rr::Proc::kMsg && h.proc != rr::Proc::kNoMsg) {
    in->verdict = Incoming::Verdict::kDrop;
    return;
  }
  auto bad = [&] { in->verdict = Incoming::Verdict::kErrChunk; };
  // RDMA_NOMSG: the whole call is in a position-zero read chunk (a client
  // sends that when its call is larger than the inline threshold).
  in->nomsg = h.proc == rr::Proc::kNoMsg;
  // A segment that wraps the address space names no memory anyone can
  // offer: the chunk is malformed (ERR_CHUNK), not merely unreachable.
  auto wraps = [](const rr::Segment& s) { return s.offset + s.length < s.offset; };
  for (uint32_t i = 0; i < h.chunks.nreads; ++i)
    if (wraps(h.chunks.reads[i].target)) return bad();
  for (uint32_t c = 0; c < h.chunks.nwrites; ++c)
    for (uint32_t i = 0; i < h.chunks.writes[c].nsegments; ++i)
      if (wraps(h.chunks.writes[c].segments[i])) return bad();
  if (h.chunks.has_reply)
    for (uint32_t i = 0; i < h.chunks.reply.nsegments; ++i)
      if (wraps(h.chunks.reply.segments[i])) return bad();
  // Read segments with one position form one read chunk (RFC 8166 §3.4.5),
  // in the order they are listed; chunks are kept by increasing position.
  // An XDR position is a multiple of four; position zero is the whole
  // message, and only RDMA_NOMSG has (and must have) it.
  ChunkLists& ch = *chunks;
  for (uint32_t i = 0; i < h.chunks.nreads; ++i) {
    const rr::ReadSegment& s = h.chunks.reads[i];
    if (s.position % 4 != 0 || (s.position == 0 && !in->nomsg)) return bad();
    int c = 0;
    while (c < ch.nreads && ch.reads[c].position < s.position) ++c;
    if (c == ch.nreads || ch.reads[c].position != s.position) {
      if (ch.nreads == kMaxReadChunks) return bad();
      for (int k = ch.nreads; k > c; --k) ch.reads[k] = ch.reads[k - 1];
      ch.reads[c].position = s.position;
      ch.reads[c].nsegs = 0;
      ++ch.nreads;
    }
    ReadChunkSegs& rc = ch.reads[c];
    if (rc.nsegs == kMaxChunkSegs) return bad();
    rc.segs[rc.nsegs++] = RdmaSegment{s.target.handle, s.target.length, s.target.offset};
  }
  if (in->nomsg && (ch.nreads == 0 || ch.reads[0].position != 0)) return bad();
  ch.nwrites = static_cast<int>(h.chunks.nwrites);
  for (uint32_t c = 0; c < h.chunks.nwrites; ++c) {
    const rr::WriteChunk& w = h.chunks.writes[c];
    ch.writes[c].nsegs = static_cast<int>(w.nsegments);
    for (uint32_t i = 0; i < w.nsegments; ++i)
      ch.writes[c].segs[i] = RdmaSegment{w.segments[i].handle, w.segments[i].length, w.segments[i].offset};
  }
  ch.has_reply = h.chunks.has_reply;
  if (h.chunks.has_reply) {
    const rr::WriteChunk& w = h.chunks.reply;
    ch.reply.nsegs = static_cast<int>(w.nsegments);
    for (uint32_t i = 0; i < w.nsegments; ++i)
      ch.reply.segs[i] = RdmaSegment{w.segments[i].handle, w.segments[i].length, w.segments[i].offset};
  }
  if (in->nomsg) {
    // The call arrives with the read chunk; the server checks its xid then,
    // and the other chunks' positions against the message's length.
    in->verdict = Incoming::Verdict::kOk;
    return;
  }
  in->body = msg.subspan(d.header_len);
  // The transport and RPC xids must agree (RFC 8166 §4.5.2: ERR_CHUNK).
  if (!rr::rpc_xid_matches(h, in->body)) return bad();
  // A read chunk's position must fall inside the inline message it extends.
  for (int c = 0; c < ch.nreads; ++c)
    if (ch.reads[c].position > in->body.size()) return bad();
  in->verdict = Incoming::Verdict::kOk;
}
}  // namespace

void decode_call_header(std::span<const uint8_t> msg, Incoming* in, ChunkLists* chunks) {
  if (plain_rdma_msg(msg)) {
    const uint8_t* p = msg.data();
    in->xid = word(p, 0);
    in->credits = word(p, 2);
    chunks->clear();
    in->nomsg = false;
    in->body = msg.subspan(kPlainRdmaHdr);
    // The transport and RPC xids must agree (RFC 8166 §4.5.2: ERR_CHUNK).
    in->verdict = in->body.size() >= 4 && load_be32(in->body.data()) == in->xid ? Incoming::Verdict::kOk
                                                                                 : Incoming::Verdict::kErrChunk;
    return;
  }
  decode_call_header_general(msg, in, chunks);
}

namespace {
[[gnu::noinline]] bool decode_rpc_call_general(std::span<const uint8_t> body, uint32_t xid, RpcCall* c) {
  oc::CallHeader h;
  oc::CallDecodeResult d = oc::decode_call(body, &h);
  switch (d.status) {
    case oc::CallDecodeStatus::kOk: break;
    case oc::CallDecodeStatus::kRpcMismatch: c->rpc_mismatch = true; return false;
    case oc::CallDecodeStatus::kBadCred:
    case oc::CallDecodeStatus::kBadVerf: c->bad_auth = true; return false;
    default: return false;
  }
  if (h.xid != xid) return false;
  c->prog = h.prog;
  c->vers = h.vers;
  c->proc = h.proc;
  c->args = body.subspan(d.header_len);
  c->header_len = d.header_len;
  return true;
}
}  // namespace

bool decode_rpc_call(std::span<const uint8_t> body, uint32_t xid, RpcCall* c) {
  if (g_fast_paths && body.size() >= kPlainCallHdr) {
    const uint8_t* p = body.data();
    if (word(p, 0) == xid && word(p, 1) == static_cast<uint32_t>(oc::MsgType::kCall) &&
        word(p, 2) == oc::kRpcVersion && (word(p, 6) | word(p, 7) | word(p, 8) | word(p, 9)) == 0) {
      c->prog = word(p, 3);
      c->vers = word(p, 4);
      c->proc = word(p, 5);
      c->args = body.subspan(kPlainCallHdr);
      c->header_len = kPlainCallHdr;
      return true;
    }
  }
  return decode_rpc_call_general(body, xid, c);
}

bool decode_plain_call(std::span<const uint8_t> msg, Incoming* in, RpcCall* c) {
  if (!plain_rdma_msg(msg) || msg.size() < kPlainRdmaHdr + kPlainCallHdr) return false;
  const uint8_t* p = msg.data();
  const uint8_t* b = p + kPlainRdmaHdr;
  // decode_call_header()'s xid check and decode_rpc_call()'s fast path.
  if (word(b, 0) != word(p, 0) || word(b, 1) != static_cast<uint32_t>(oc::MsgType::kCall) ||
      word(b, 2) != oc::kRpcVersion || (word(b, 6) | word(b, 7) | word(b, 8) | word(b, 9)) != 0)
    return false;
  in->xid = word(p, 0);
  in->credits = word(p, 2);
  in->verdict = Incoming::Verdict::kOk;
  in->nomsg = false;
  in->body = msg.subspan(kPlainRdmaHdr);
  c->prog = word(b, 3);
  c->vers = word(b, 4);
  c->proc = word(b, 5);
  c->args = in->body.subspan(kPlainCallHdr);
  c->header_len = kPlainCallHdr;
  return true;
}

namespace {
[[gnu::noinline]] size_t encode_reply_header_general(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits,
                                                     const ChunkLists& written, bool nomsg) {
  rr::Header h;
  h.xid = xid;
  h.credit = credits;
  h.proc = nomsg ? rr::Proc::kNoMsg : rr::Proc::kMsg;
  // The write chunks go back with each segment's length set to what was
  // written (RFC 8166 §3.5.4), zero for unused segments; the reply chunk
  // likewise, when the reply went through it.
  put_chunks(&h.chunks, written);
  h.chunks.nreads = 0;
  if (buf == nullptr) return rr::encoded_size(h);
  return rr::encode_header(h, std::span<uint8_t>(buf, cap));
}
}  // namespace

size_t encode_reply_header(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const ChunkLists& written,
                           bool nomsg) {
  if (buf == nullptr && !nomsg) return transport_header_len(written);
  if (g_fast_paths && !nomsg && written.nwrites == 0 && !written.has_reply) {
    if (cap < kPlainRdmaHdr) return 0;
    put_plain_rdma_msg(buf, xid, credits);
    return kPlainRdmaHdr;
  }
  return encode_reply_header_general(buf, cap, xid, credits, written, nomsg);
}

static_assert(kNoChunksHeader == kPlainRdmaHdr, "wire.h's kNoChunksHeader is the plain RDMA_MSG header");
// encode_plain_reply()'s words (wire.h).
static_assert(kPlainReplyLen == kPlainRdmaHdr + kPlainReplyHdr);
static_assert(rr::kVersion == 1 && static_cast<uint32_t>(rr::Proc::kMsg) == 0);
static_assert(static_cast<uint32_t>(oc::MsgType::kReply) == 1 && static_cast<uint32_t>(oc::ReplyStat::kAccepted) == 0 &&
              static_cast<uint32_t>(oc::AuthFlavor::kNone) == 0 && static_cast<uint32_t>(oc::AcceptStat::kSuccess) == 0);

size_t encode_msg_header_no_chunks(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits) {
  if (g_fast_paths) {
    if (cap < kPlainRdmaHdr) return 0;
    put_plain_rdma_msg(buf, xid, credits);
    return kPlainRdmaHdr;
  }
  ChunkLists none;
  none.clear();
  return encode_header_general(buf, cap, xid, credits, none);
}

namespace {
[[gnu::noinline]] size_t encode_rpc_reply_general(uint8_t* buf, size_t cap, uint32_t xid, int accept_stat,
                                                  uint32_t low, uint32_t high, std::span<const uint8_t> results) {
  oc::ReplyHeader rh;
  rh.xid = xid;
  if (accept_stat == kReplyRpcMismatch) {  // RPC version mismatch: MSG_DENIED, versions 2..2
    rh.stat = oc::ReplyStat::kDenied;
    rh.reject = oc::RejectStat::kRpcMismatch;
    rh.mismatch_low = rh.mismatch_high = oc::kRpcVersion;
  } else if (accept_stat == kReplyAuthError) {  // bad credential
    rh.stat = oc::ReplyStat::kDenied;
    rh.reject = oc::RejectStat::kAuthError;
    rh.auth = oc::AuthStat::kBadCred;
  } else {
    rh.stat = oc::ReplyStat::kAccepted;
    rh.accept = static_cast<oc::AcceptStat>(accept_stat);  // Tern's AcceptStat uses RFC 5531's values
    rh.mismatch_low = low;
    rh.mismatch_high = high;
  }
  size_t n = oc::encode_reply(rh, std::span<uint8_t>(buf, cap));
  if (n == 0) return 0;
  if (rh.stat == oc::ReplyStat::kAccepted && rh.accept == oc::AcceptStat::kSuccess) {
    if (n + results.size() > cap) return 0;
    if (!results.empty()) std::memcpy(buf + n, results.data(), results.size());
    n += results.size();
  }
  return n;
}
}  // namespace

size_t encode_rpc_reply(uint8_t* buf, size_t cap, uint32_t xid, int accept_stat, uint32_t low, uint32_t high,
                        std::span<const uint8_t> results) {
  if (g_fast_paths && accept_stat == static_cast<int>(oc::AcceptStat::kSuccess)) {
    if (kPlainReplyHdr + results.size() > cap) return 0;
    store_be32(buf, xid);
    store_be32(buf + 4, static_cast<uint32_t>(oc::MsgType::kReply));
    for (int i = 2; i < 6; ++i) store_be32(buf + 4 * i, 0);  // ACCEPTED, AUTH_NONE verifier, SUCCESS
    if (!results.empty()) std::memcpy(buf + kPlainReplyHdr, results.data(), results.size());
    return kPlainReplyHdr + results.size();
  }
  return encode_rpc_reply_general(buf, cap, xid, accept_stat, low, high, results);
}

size_t encode_rdma_error(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, bool vers) {
  return vers ? rr::encode_err_vers(xid, credits, std::span<uint8_t>(buf, cap))
              : rr::encode_err_chunk(xid, credits, std::span<uint8_t>(buf, cap));
}

}  // namespace tern::rpc::wire
