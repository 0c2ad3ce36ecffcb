// Chunks (RFC 8166 3.4, 4.3): read chunks that carry call data the
// Responder pulls with RDMA Read (including the whole call, position zero,
// RDMA_NOMSG), write chunks it may fill, and the reply chunk that carries a
// reply too large to send inline (3.5.3.2).
#include <algorithm>
#include <cstring>

#include "catalogue.h"

namespace tern::torture {

namespace {

using rpcrdma::ReadSegment;
using rpcrdma::Segment;

constexpr uint32_t kRead = rdma::kAccessRemoteRead;
constexpr uint32_t kWrite = rdma::kAccessRemoteWrite;

// Puts `rpc` in chunk memory at byte `skew` past an aligned start, offers
// it for reading, and returns the read segments that carry it at position
// `pos`, split at the given cut points (lengths of all but the last piece).
struct Placed {
  uint8_t* base = nullptr;
  uint32_t rkey = 0;
  std::vector<ReadSegment> segs;
};
Placed place(Ctx& c, std::span<const uint8_t> rpc, uint32_t pos, std::vector<uint32_t> cuts, size_t skew = 0,
             bool separate_keys = false) {
  Placed pl;
  uint8_t* p = c.rq().chunk_mem(rpc.size() + skew + 64);
  if (p == nullptr) return pl;
  pl.base = p;
  std::memcpy(p + skew, rpc.data(), rpc.size());
  if (!separate_keys) {
    pl.rkey = c.offer(p, static_cast<uint32_t>(rpc.size() + skew), kRead);
    if (pl.rkey == 0) return pl;
  }
  size_t at = 0;
  cuts.push_back(static_cast<uint32_t>(rpc.size()));
  for (uint32_t len : cuts) {
    len = static_cast<uint32_t>(std::min<size_t>(len, rpc.size() - at));
    uint8_t* q = p + skew + at;
    uint32_t key = pl.rkey;
    if (separate_keys) {
      // Each piece its own registration: a segment per rkey.
      uint8_t* own = c.rq().chunk_mem(std::max<uint32_t>(len, 1) + 64);
      std::memcpy(own, q, len);
      q = own;
      key = c.offer(own, std::max<uint32_t>(len, 1), kRead);
      if (key == 0) return Placed{};
    }
    pl.segs.push_back({pos, {key, len, c.remote(q, separate_keys ? q : p)}});
    at += len;
    if (at >= rpc.size()) break;
  }
  return pl;
}

// Equal cuts: the message in n pieces (whole XDR words, the last takes the rest).
std::vector<uint32_t> split(size_t len, uint32_t n) {
  std::vector<uint32_t> cuts;
  uint32_t piece = static_cast<uint32_t>((len / n) & ~size_t{3});
  for (uint32_t i = 0; i + 1 < n; ++i) cuts.push_back(piece);
  return cuts;
}

// A NOMSG call whose whole RPC message is in a position-zero read chunk.
Seen long_call(Ctx& c, uint32_t x, const Placed& pl, uint32_t proc = 1) {
  WireHeader h;
  h.xid = x, h.proc = proc;
  h.reads = pl.segs;
  Seen s;
  if (pl.segs.empty()) {
    s.kind = Seen::Kind::kSendFailed;
    return s;
  }
  return c.exchange(h.encode());
}

Verdict gone_or_err_chunk(Ctx& c, const Seen& s, uint32_t x) { return c.want_err_chunk_or_gone(s, x); }

// An echo call of n bytes of arguments, with a reply chunk of the given
// segment lengths (none: no reply chunk). Checks the reply's data when it
// arrives in the chunk. The rkeys offered go to *offered.
struct EchoRun {
  Seen seen;
  uint32_t xid = 0;
  std::vector<uint8_t> args;
  uint8_t* chunk = nullptr;
  std::vector<uint32_t> offered;
};
EchoRun echo(Ctx& c, size_t n, std::optional<std::vector<uint32_t>> reply_segs, bool bad_key = false) {
  EchoRun r;
  r.xid = c.xid();
  r.args.resize(n);
  for (size_t i = 0; i < n; ++i) r.args[i] = static_cast<uint8_t>(i * 7 + 3);
  WireHeader h;
  h.xid = r.xid;
  if (reply_segs) {
    size_t total = 0;
    for (uint32_t l : *reply_segs) total += l;
    r.chunk = c.rq().chunk_mem(total + 64);
    uint32_t key = c.offer(r.chunk, static_cast<uint32_t>(std::max<size_t>(total, 1)), kWrite);
    if (key == 0) {
      r.seen.kind = Seen::Kind::kSendFailed;
      return r;
    }
    r.offered.push_back(key);
    std::vector<Segment> segs;
    size_t at = 0;
    for (uint32_t l : *reply_segs) {
      segs.push_back({bad_key ? key ^ 0x5a5a00u : key, l, c.remote(r.chunk + at, r.chunk)});
      at += l;
    }
    h.reply = segs;
  }
  std::vector<uint8_t> rpc = c.rpc_call(*c.cfg().echo, r.xid, r.args);
  if (!c.send_call(h, rpc, &r.offered)) {
    r.seen.kind = Seen::Kind::kSendFailed;
    return r;
  }
  r.seen = c.next();
  return r;
}

// The results of an echo reply (after the RPC reply header) equal its arguments.
std::optional<std::string> echo_data_wrong(const EchoRun& r) {
  std::span<const uint8_t> rpc;
  if (r.seen.hdr.proc == rpcrdma::Proc::kMsg)
    rpc = std::span<const uint8_t>(r.seen.bytes).subspan(r.seen.header_len);
  else
    rpc = std::span<const uint8_t>(r.chunk, static_cast<size_t>(r.seen.hdr.chunks.reply.total_length()));
  if (rpc.size() < r.args.size()) return "the reply holds " + std::to_string(rpc.size()) + " bytes, under the echoed " + std::to_string(r.args.size());
  if (!std::equal(r.args.begin(), r.args.end(), rpc.end() - static_cast<long>(r.args.size())))
    return std::string("the echoed data differs from the arguments");
  return std::nullopt;
}

size_t reply_size(size_t n) { return 24 + n; }  // accepted, AUTH_NONE verifier, SUCCESS, then the results

}  // namespace

void add_chunk_cases(std::vector<Case>& out) {
  // ---------------------------------------------------------------- read chunks
  for (uint32_t n : {1u, 2u, 3u, 4u, 8u, 16u}) {
    out.push_back({"read/pos0-segments-" + std::to_string(n), "RFC 8166 3.5.3.1", Level::kMust,
                   "a long call travels as RDMA_NOMSG with the whole RPC message in a position-zero read chunk, "
                   "which may have several segments; the Responder pulls them in order and serves the call",
                   "a reply", {}, [n](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 256);
                     Placed pl = place(c, rpc, 0, split(rpc.size(), n));
                     return c.want_reply(long_call(c, x, pl), x, {&pl.rkey, 1});
                   }});
  }
  for (uint32_t n : {17u, 24u, 36u}) {
    out.push_back({"read/pos0-segments-" + std::to_string(n), "RFC 8166 4.5.2", Level::kMay,
                   "a read chunk of more segments than a Responder can hold is a header it cannot process: it "
                   "answers ERR_CHUNK (or serves it)",
                   "a reply or ERR_CHUNK", {}, [n](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 512);
                     Placed pl = place(c, rpc, 0, split(rpc.size(), n));
                     Seen s = long_call(c, x, pl);
                     if (s.error(rpcrdma::ErrCode::kChunk, x)) return Verdict::pass(s.describe());
                     return c.want_reply(s, x, {&pl.rkey, 1});
                   }});
  }
  out.push_back({"read/pos0-separate-keys", "RFC 8166 3.4.3", Level::kMust,
                 "each segment of a chunk names its own registration (handle); a chunk may span several",
                 "a reply", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x, 64);
                   Placed pl = place(c, rpc, 0, split(rpc.size(), 4), 0, true);
                   std::vector<uint32_t> keys;
                   for (auto& s : pl.segs) keys.push_back(s.target.handle);
                   return c.want_reply(long_call(c, x, pl), x, keys);
                 }});
  for (size_t skew : {1u, 2u, 3u, 4095u}) {
    out.push_back({"read/pos0-unaligned-" + std::to_string(skew), "RFC 8166 3.4.3", Level::kMust,
                   "an RDMA segment is any byte range of registered memory: its offset need not be aligned",
                   "a reply", {}, [skew](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 32);
                     Placed pl = place(c, rpc, 0, {}, skew);
                     return c.want_reply(long_call(c, x, pl), x, {&pl.rkey, 1});
                   }});
  }
  for (uint32_t odd : {1u, 3u, 5u, 13u}) {
    out.push_back({"read/pos0-odd-split-" + std::to_string(odd), "RFC 8166 3.4.5", Level::kShould,
                   "segments of a read chunk are concatenated in order: a first segment of odd length is "
                   "followed directly by the next",
                   "a reply", {}, [odd](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 32);
                     Placed pl = place(c, rpc, 0, {odd});
                     return c.want_reply(long_call(c, x, pl), x, {&pl.rkey, 1});
                   }});
  }
  out.push_back({"read/pos0-zero-length-middle", "RFC 8166 3.4.5", Level::kShould,
                 "a zero-length segment contributes no bytes; the chunk is the others in order",
                 "a reply", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x, 32);
                   Placed pl = place(c, rpc, 0, {16});
                   if (pl.segs.size() == 2) {
                     ReadSegment z = pl.segs[0];
                     z.target.length = 0;
                     pl.segs.insert(pl.segs.begin() + 1, z);
                   }
                   return c.want_reply(long_call(c, x, pl), x, {&pl.rkey, 1});
                 }});
  // The XID check of 4.5.2 holds for a call that arrives in a chunk too:
  // the Responder compares once it has pulled the message.
  for (uint32_t delta : {1u, 0x80000000u, 0u}) {
    std::string id = delta == 0 ? "read/pos0-rpc-2-bytes" : "read/pos0-xid-mismatch-" + std::to_string(delta);
    out.push_back({id, "RFC 8166 4.5.2", Level::kMust,
                   delta == 0 ? "an RDMA_NOMSG call whose position-zero chunk is too short to hold an XID cannot "
                                "match rdma_xid: an XDR error, RDMA_ERROR ERR_CHUNK"
                              : "an rdma_xid that differs from the XID of the RPC message pulled from the "
                                "position-zero chunk is an XDR error: RDMA_ERROR ERR_CHUNK",
                   "RDMA_ERROR ERR_CHUNK echoing rdma_xid", {}, [delta](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x ^ delta, 16);
                     if (delta == 0) rpc.resize(2);
                     Placed pl = place(c, rpc, 0, {});
                     return c.want_err_chunk(long_call(c, x, pl), x);
                   }});
  }
  out.push_back({"read/pos0-zero-length-only", "RFC 8166 4.5.2", Level::kMay,
                 "an RDMA_NOMSG whose position-zero chunk is empty carries no RPC message: the Responder cannot "
                 "serve it; it answers ERR_CHUNK, drops it, or drops the connection",
                 "ERR_CHUNK, nothing, or a disconnect; never a hang", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x);
                   Placed pl = place(c, rpc, 0, {});
                   if (pl.segs.empty()) return Verdict::fail("could not register");
                   pl.segs[0].target.length = 0;
                   WireHeader h;
                   h.xid = x, h.proc = 1, h.reads = pl.segs;
                   if (!c.rq().post(h.encode())) return Verdict::fail("our SEND failed");
                   Seen s = c.next(c.cfg().quiet_ms);
                   if (s.gone() || s.error(rpcrdma::ErrCode::kChunk, x)) return Verdict::pass(s.describe());
                   if (s.kind != Seen::Kind::kSilence) return Verdict::fail(s.describe());
                   if (auto why = c.not_alive()) return Verdict::fail(*why);
                   return Verdict::pass("dropped, and the connection still serves calls");
                 }});
  for (int delta : {-4, -1}) {
    out.push_back({"read/pos0-short-" + std::to_string(-delta), "RFC 8166 4.5.2", Level::kMay,
                   "a position-zero chunk shorter than the call it should hold gives the Responder a truncated "
                   "RPC message: it answers ERR_CHUNK or an RPC error, drops it, or drops the connection",
                   "ERR_CHUNK, an RPC reply, nothing, or a disconnect; never a hang", {}, [delta](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 16);
                     Placed pl = place(c, rpc, 0, {});
                     if (pl.segs.empty()) return Verdict::fail("could not register");
                     pl.segs[0].target.length = static_cast<uint32_t>(static_cast<int>(rpc.size()) + delta);
                     WireHeader h;
                     h.xid = x, h.proc = 1, h.reads = pl.segs;
                     if (!c.rq().post(h.encode())) return Verdict::fail("our SEND failed");
                     Seen s = c.next(c.cfg().quiet_ms);
                     if (s.gone() || s.error(rpcrdma::ErrCode::kChunk, x)) return Verdict::pass(s.describe());
                     if (s.message()) return c.want_reply(s, x, {&pl.rkey, 1});
                     if (auto why = c.not_alive()) return Verdict::fail(*why);
                     return Verdict::pass("dropped, and the connection still serves calls");
                   }});
  }
  // Read segments the Responder cannot read: its RDMA Read fails, and with
  // it the connection (RC); or it refuses the chunk before reading.
  struct Bad {
    const char* name;
    uint32_t key_xor;
    int64_t off_delta;  // added to the offset (or, with wrap, the offset is replaced)
    int64_t len_delta;
    bool wrap;
    uint32_t len_abs;
  };
  const Bad bads[] = {
      {"key-byte", 0x01, 0, 0, false, 0},       {"key-index", 0x100, 0, 0, false, 0},
      {"handle-zero", 0xffffffff, 0, 0, false, 0}, {"offset-before", 0, -4096, 0, false, 0},
      {"offset-past-end", 0, 8192, 0, false, 0}, {"length-past-end", 0, 0, 8192, false, 0},
      {"offset-wraps", 0, 0, 0, true, 0},       {"length-7fffffff", 0, 0, 0, false, 0x7fffffff},
      {"length-ffffffff", 0, 0, 0, false, 0xffffffff},
  };
  for (const Bad& b : bads) {
    out.push_back({std::string("read/bad-") + b.name, "RFC 8166 4.5.3", Level::kMust,
                   "a read chunk the Responder cannot read (bad handle, range outside the registration, a range "
                   "that wraps): its RDMA Read fails and the connection is lost, or it refuses the chunk with "
                   "ERR_CHUNK; it never serves a call it could not read, and never hangs",
                   "a disconnect or ERR_CHUNK", {}, [b](Ctx& c) {
                     // Ranges outside the registration but inside the memory under it
                     // reach memory there on a device that does not bound a fast
                     // registration (rxe's memory windows): the Responder cannot tell.
                     bool range = b.off_delta != 0 || b.len_delta != 0;
                     if (range && !c.rq().caps().fast_reg_bounds_enforced)
                       return Verdict::skip("the device does not enforce a fast registration's bounds");
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 32);
                     Placed pl = place(c, rpc, 0, {});
                     if (pl.segs.empty()) return Verdict::fail("could not register");
                     Segment& s = pl.segs[0].target;
                     if (b.key_xor == 0xffffffff) s.handle = 0;
                     else s.handle ^= b.key_xor;
                     if (b.wrap) s.offset = ~uint64_t{0} - 15;
                     else s.offset = static_cast<uint64_t>(static_cast<int64_t>(s.offset) + b.off_delta);
                     if (b.len_abs != 0) s.length = b.len_abs;
                     else s.length = static_cast<uint32_t>(static_cast<int64_t>(s.length) + b.len_delta);
                     return gone_or_err_chunk(c, long_call(c, x, pl), x);
                   }});
  }
  // Read chunks after the call (a data item the call's arguments end with).
  for (uint32_t len : {4u, 100u, 4096u}) {
    out.push_back({"read/after-call-" + std::to_string(len), "RFC 8166 3.4.5", Level::kMust,
                   "a read chunk at the XDR position where a data item was removed is pulled and put back there "
                   "before the call is served",
                   "a reply (any RPC status: the program may not expect the data)", {}, [len](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x);
                     uint8_t* p = c.rq().chunk_mem(len);
                     uint32_t key = c.offer(p, len, kRead);
                     WireHeader h;
                     h.xid = x;
                     h.reads.push_back({static_cast<uint32_t>(rpc.size()), {key, len, c.remote(p)}});
                     std::vector<uint8_t> m = h.encode();
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     return c.want_reply(c.exchange(m), x, {&key, 1});
                   }});
  }
  out.push_back({"read/overlapping-segments", "RFC 8166 3.4.3", Level::kShould,
                 "nothing forbids two segments of a read chunk naming overlapping memory; the Responder reads "
                 "each",
                 "a reply", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x);
                   uint8_t* p = c.rq().chunk_mem(256);
                   uint32_t key = c.offer(p, 256, kRead);
                   WireHeader h;
                   h.xid = x;
                   auto pos = static_cast<uint32_t>(rpc.size());
                   h.reads.push_back({pos, {key, 128, c.remote(p)}});
                   h.reads.push_back({pos, {key, 128, c.remote(p + 64, p)}});
                   std::vector<uint8_t> m = h.encode();
                   m.insert(m.end(), rpc.begin(), rpc.end());
                   return c.want_reply(c.exchange(m), x, {&key, 1});
                 }});
  for (uint32_t mis : {1u, 2u, 3u}) {
    out.push_back({"read/position-unaligned-" + std::to_string(mis), "RFC 8166 4.5.2", Level::kShould,
                   "a read chunk position is an XDR offset, a multiple of four; any other is an XDR error: "
                   "ERR_CHUNK (or the connection is dropped)",
                   "ERR_CHUNK or a disconnect", {}, [mis](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x);
                     uint8_t* p = c.rq().chunk_mem(64);
                     uint32_t key = c.offer(p, 64, kRead);
                     WireHeader h;
                     h.xid = x;
                     h.reads.push_back({static_cast<uint32_t>(rpc.size()) - 4 + mis, {key, 64, c.remote(p)}});
                     std::vector<uint8_t> m = h.encode();
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     return c.want_err_chunk_or_gone(c.exchange(m), x);
                   }});
  }
  out.push_back({"read/position-past-end", "RFC 8166 4.5.2", Level::kShould,
                 "a read chunk position beyond the end of the inline message names no place in it: an XDR "
                 "error, ERR_CHUNK (or the connection is dropped)",
                 "ERR_CHUNK or a disconnect", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x);
                   uint8_t* p = c.rq().chunk_mem(64);
                   uint32_t key = c.offer(p, 64, kRead);
                   WireHeader h;
                   h.xid = x;
                   h.reads.push_back({static_cast<uint32_t>(rpc.size()) + 64, {key, 64, c.remote(p)}});
                   std::vector<uint8_t> m = h.encode();
                   m.insert(m.end(), rpc.begin(), rpc.end());
                   return c.want_err_chunk_or_gone(c.exchange(m), x);
                 }});
  for (bool descending : {false, true}) {
    out.push_back({std::string("read/two-positions") + (descending ? "-descending" : ""), "RFC 8166 3.4.5",
                   Level::kMay,
                   "a call may carry several read chunks at different positions; a Responder that cannot take "
                   "more than one says so with ERR_CHUNK" +
                       std::string(descending ? " (here out of order: ERR_CHUNK or a disconnect also fit)" : ""),
                   "a reply or ERR_CHUNK (or a disconnect when out of order)", {}, [descending](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> rpc = c.rpc_call(x, 8);
                     uint8_t* p = c.rq().chunk_mem(64);
                     uint32_t key = c.offer(p, 64, kRead);
                     auto end = static_cast<uint32_t>(rpc.size());
                     WireHeader h;
                     h.xid = x;
                     h.reads.push_back({descending ? end : end - 8, {key, 16, c.remote(p)}});
                     h.reads.push_back({descending ? end - 8 : end, {key, 16, c.remote(p + 32, p)}});
                     std::vector<uint8_t> m = h.encode();
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     Seen s = c.exchange(m);
                     if (s.error(rpcrdma::ErrCode::kChunk, x) || (descending && s.gone())) return Verdict::pass(s.describe());
                     return c.want_reply(s, x, {&key, 1});
                   }});
  }
  out.push_back({"read/pos0-with-rdma-msg", "RFC 8166 3.5.3.1", Level::kMay,
                 "a position-zero read chunk belongs with RDMA_NOMSG; with RDMA_MSG (and an inline call too) "
                 "the Responder may refuse it (ERR_CHUNK), drop the connection, or serve one of them",
                 "a reply, ERR_CHUNK or a disconnect", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x);
                   Placed pl = place(c, rpc, 0, {});
                   WireHeader h;
                   h.xid = x, h.reads = pl.segs;
                   std::vector<uint8_t> m = h.encode();
                   m.insert(m.end(), rpc.begin(), rpc.end());
                   return c.want_any_answer(c.exchange(m), x, {&pl.rkey, 1});
                 }});

  // ---------------------------------------------------------------- write chunks
  const std::pair<uint32_t, uint32_t> shapes[] = {{1, 1}, {1, 2}, {1, 4}, {1, 16}, {1, 17}, {1, 32}, {2, 1},
                                                  {2, 4}, {3, 1}, {4, 1}, {4, 4}, {5, 1}, {8, 1}, {8, 4}};
  for (auto [nchunks, nsegs] : shapes) {
    bool must = nchunks == 1 && nsegs <= 16;
    out.push_back({"write/unused-" + std::to_string(nchunks) + "x" + std::to_string(nsegs), "RFC 8166 3.4.6",
                   must ? Level::kMust : Level::kMay,
                   must ? "a call may offer a write chunk its reply does not need; the Responder serves the call "
                          "and leaves the chunk unused"
                        : "a write list longer than a Responder can hold (chunks or segments) is a header it "
                          "cannot process: ERR_CHUNK, or it serves the call",
                   must ? "a reply" : "a reply or ERR_CHUNK", {}, [nchunks, nsegs, must](Ctx& c) {
                     uint32_t x = c.xid();
                     uint8_t* p = c.rq().chunk_mem(size_t{nchunks} * nsegs * 64);
                     uint32_t key = c.offer(p, nchunks * nsegs * 64, kWrite);
                     WireHeader h;
                     h.xid = x;
                     for (uint32_t i = 0; i < nchunks; ++i) {
                       std::vector<Segment> segs;
                       for (uint32_t j = 0; j < nsegs; ++j) segs.push_back({key, 64, c.remote(p + (i * nsegs + j) * 64, p)});
                       h.writes.push_back(segs);
                     }
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> rpc = c.rpc_call(x);
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     Seen s = c.exchange(m);
                     if (!must && s.error(rpcrdma::ErrCode::kChunk, x)) return Verdict::pass(s.describe());
                     Verdict v = c.want_reply(s, x, {&key, 1});
                     if (v.result == Outcome::kPass && s.hdr.chunks.nwrites > nchunks)
                       return Verdict::fail("the reply returns more write chunks than were offered: " + s.describe());
                     return v;
                   }});
  }
  for (uint32_t len : {0u, 1u, 3u, 4096u, 0x7fffffffu}) {
    out.push_back({"write/unused-length-" + std::to_string(len), "RFC 8166 3.4.6", Level::kMust,
                   "a write chunk the reply does not use is never touched, whatever its length says",
                   "a reply", {}, [len](Ctx& c) {
                     uint32_t x = c.xid();
                     uint8_t* p = c.rq().chunk_mem(4096);
                     uint32_t key = c.offer(p, 4096, kWrite);
                     WireHeader h;
                     h.xid = x;
                     h.writes.push_back({{key, len, c.remote(p)}});
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> rpc = c.rpc_call(x);
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     return c.want_reply(c.exchange(m), x, {&key, 1});
                   }});
  }
  // A handle that names nothing, in a write chunk the reply does not use.
  // With I clear the Responder has no reason to touch it. With I set it may
  // invalidate the call's rkeys by Send With Invalidate (RFC 8797 3.2), and
  // invalidating a handle that names nothing fails our receive: the
  // Requester broke the call by offering it, so a lost connection is fair.
  for (bool inv : {false, true}) {
    out.push_back({std::string("write/unused-bad-handle") + (inv ? "-i-set" : ""), inv ? "RFC 8797 3.2" : "RFC 8166 3.4.6",
                   inv ? Level::kMay : Level::kMust,
                   inv ? "a Requester that set I and offers a handle naming nothing may lose the connection to the "
                         "Responder's Send With Invalidate of it, or get a plain reply"
                       : "a write chunk the reply does not use is never touched: even a handle that names nothing "
                         "does not break the call",
                   inv ? "a reply or a disconnect" : "a reply", Connect{Ctx::ours(inv), false}, [inv](Ctx& c) {
                     uint32_t x = c.xid();
                     WireHeader h;
                     h.xid = x;
                     h.writes.push_back({{0xdead00, 64, 0x1000}});
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> rpc = c.rpc_call(x);
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     Seen s = c.exchange(m);
                     if (inv && s.gone()) return Verdict::pass(s.describe());
                     uint32_t bogus = 0xdead00;
                     return c.want_reply(s, x, {&bogus, 1});
                   }});
  }
  out.push_back({"write/reply-returns-list", "RFC 8166 4.3.2", Level::kShould,
                 "the reply's Write list returns the chunks of the call, each segment's length saying how much "
                 "was written (never more than offered)",
                 "a reply whose write list has the call's chunk, lengths <= offered", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   uint8_t* p = c.rq().chunk_mem(512);
                   uint32_t key = c.offer(p, 512, kWrite);
                   WireHeader h;
                   h.xid = x;
                   h.writes.push_back({{key, 256, c.remote(p)}, {key, 256, c.remote(p + 256, p)}});
                   std::vector<uint8_t> m = h.encode();
                   std::vector<uint8_t> rpc = c.rpc_call(x);
                   m.insert(m.end(), rpc.begin(), rpc.end());
                   Seen s = c.exchange(m);
                   Verdict v = c.want_reply(s, x, {&key, 1});
                   if (v.result != Outcome::kPass) return v;
                   if (s.hdr.chunks.nwrites != 1)
                     return Verdict::fail("the reply's write list has " + std::to_string(s.hdr.chunks.nwrites) + " chunks, the call offered 1");
                   for (const Segment& sg : s.hdr.chunks.writes[0].view())
                     if (sg.length > 256) return Verdict::fail("a returned segment is longer than offered: " + std::to_string(sg.length));
                   return v;
                 }});
  out.push_back({"write/zero-segments", "RFC 8166 4.5.2", Level::kMay,
                 "a write chunk of zero segments has no room at all; a Responder may serve the call, refuse the "
                 "header (ERR_CHUNK), or drop the connection",
                 "a reply, ERR_CHUNK or a disconnect", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   WireHeader h;
                   h.xid = x;
                   h.writes.push_back({});
                   std::vector<uint8_t> m = h.encode();
                   std::vector<uint8_t> rpc = c.rpc_call(x);
                   m.insert(m.end(), rpc.begin(), rpc.end());
                   return c.want_any_answer(c.exchange(m), x);
                 }});

  // ---------------------------------------------------------------- reply chunks
  for (uint32_t nsegs : {1u, 4u}) {
    out.push_back({"reply/unused-" + std::to_string(nsegs), "RFC 8166 3.5.3.2", Level::kMust,
                   "a Requester offers a reply chunk when the reply might not fit inline; a small reply may "
                   "still come inline (RDMA_MSG) or in the chunk (RDMA_NOMSG)",
                   "a reply, inline or in the chunk", {}, [nsegs](Ctx& c) {
                     uint32_t x = c.xid();
                     uint8_t* p = c.rq().chunk_mem(nsegs * 1024);
                     uint32_t key = c.offer(p, nsegs * 1024, kWrite);
                     WireHeader h;
                     h.xid = x;
                     std::vector<Segment> segs;
                     for (uint32_t i = 0; i < nsegs; ++i) segs.push_back({key, 1024, c.remote(p + i * 1024, p)});
                     h.reply = segs;
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> rpc = c.rpc_call(x);
                     m.insert(m.end(), rpc.begin(), rpc.end());
                     return c.want_reply(c.exchange(m), x, {&key, 1}, p);
                   }});
  }
  auto echo_case = [&out](std::string id, Level level, std::string req, std::string expect, size_t n,
                          std::function<std::optional<std::vector<uint32_t>>(size_t)> segs, bool must_fit,
                          bool bad_key = false) {
    // A reply that fits is 3.5.3.2's; one that cannot be sent, 4.5.3's
    // (a Responder's operational error: ERR_CHUNK).
    std::string section = must_fit ? "RFC 8166 3.5.3.2" : "RFC 8166 4.5.3";
    out.push_back({"reply/" + std::move(id), std::move(section), level, std::move(req), std::move(expect), {},
                   [n, segs, must_fit, bad_key](Ctx& c) {
                     if (!c.cfg().echo) return Verdict::skip("needs --echo (a procedure returning its arguments)");
                     EchoRun r = echo(c, n, segs(reply_size(n)), bad_key);
                     if (bad_key) return c.want_err_chunk_or_gone(r.seen, r.xid);
                     if (must_fit) {
                       Verdict v = c.want_reply(r.seen, r.xid, r.offered, r.chunk);
                       if (v.result != Outcome::kPass) return v;
                       if (auto why = echo_data_wrong(r)) return Verdict::fail(*why);
                       return v;
                     }
                     // The reply does not fit what was offered: ERR_CHUNK, an
                     // RPC error small enough to send inline, or a lost connection.
                     if (r.seen.gone() || r.seen.error(rpcrdma::ErrCode::kChunk, r.xid)) return Verdict::pass(r.seen.describe());
                     if (auto why = c.bad_reply(r.seen, r.xid, r.chunk, r.offered)) return Verdict::fail(*why);
                     if (!echo_data_wrong(r)) return Verdict::fail("the whole reply arrived though it could not fit: " + r.seen.describe());
                     return Verdict::pass("an RPC error reply: " + r.seen.describe());
                   }});
  };
  for (size_t n : {2048u, 8192u, 32768u}) {
    echo_case("echo-" + std::to_string(n) + "-fits", Level::kMust,
              "a reply larger than the Requester's inline threshold goes in the reply chunk it offered, as "
              "RDMA_NOMSG, with the chunk's returned length saying how much was written",
              "RDMA_NOMSG with the whole reply in the reply chunk", n,
              [](size_t need) { return std::vector<uint32_t>{static_cast<uint32_t>(need + 256)}; }, true);
  }
  for (uint32_t k : {2u, 4u, 16u}) {
    echo_case("echo-8192-segments-" + std::to_string(k), Level::kMust,
              "a reply chunk may have several segments; the Responder fills them in order",
              "RDMA_NOMSG with the whole reply across the segments", 8192,
              [k](size_t need) {
                uint32_t piece = static_cast<uint32_t>((need + 255) / k + 4) & ~3u;
                return std::vector<uint32_t>(k, piece);
              },
              true);
  }
  echo_case("echo-256-small", Level::kMust,
            "a reply that fits inline may be sent inline even when a reply chunk is offered", "a reply", 256,
            [](size_t need) { return std::vector<uint32_t>{static_cast<uint32_t>(need + 256)}; }, true);
  const std::pair<const char*, std::function<std::optional<std::vector<uint32_t>>(size_t)>> small[] = {
      {"too-small-half", [](size_t need) { return std::vector<uint32_t>{static_cast<uint32_t>(need / 2)}; }},
      {"too-small-by-4", [](size_t need) { return std::vector<uint32_t>{static_cast<uint32_t>(need - 4)}; }},
      {"zero-length", [](size_t) { return std::vector<uint32_t>{0}; }},
      {"absent", [](size_t) { return std::optional<std::vector<uint32_t>>{}; }},
  };
  for (const auto& [name, f] : small) {
    for (size_t n : {2048u, 16384u}) {
      echo_case(std::string("echo-") + std::to_string(n) + "-" + name, Level::kMust,
                "a reply that fits neither inline nor in the reply chunk offered (too small or absent) cannot be "
                "sent: the Responder answers ERR_CHUNK (or a short RPC error, or drops the connection); it never "
                "sends it inline over the threshold, writes past the chunk, or stays silent",
                "ERR_CHUNK, a short RPC error reply, or a disconnect", n, f, false);
    }
  }
  echo_case("echo-8192-bad-handle", Level::kMust,
            "a reply chunk the Responder cannot write (a handle that names nothing): its RDMA Write fails and "
            "the connection is lost, or it refuses with ERR_CHUNK; never a hang",
            "a disconnect or ERR_CHUNK", 8192,
            [](size_t need) { return std::vector<uint32_t>{static_cast<uint32_t>(need + 256)}; }, false, true);
}

}  // namespace tern::torture
