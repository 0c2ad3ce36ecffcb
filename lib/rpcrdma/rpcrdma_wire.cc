#include "rpcrdma/rpcrdma_wire.h"

#include "base/check.h"
#include "xdr/xdr.h"

namespace tern::rpcrdma {
namespace {

using xdr::XdrReader;
using xdr::XdrWriter;

// ------------------------------------------------------------------ decoding

void get_segment(XdrReader& r, Segment* s) {
  s->handle = r.get_u32();
  s->length = r.get_u32();
  s->offset = r.get_u64();
}

// A counted array of segments. An empty chunk carries nothing and no sender
// has a reason to build one; it is refused with the oversized ones.
bool get_write_chunk(XdrReader& r, WriteChunk* c) {
  uint32_t n = r.get_u32();
  if (!r.ok() || n == 0 || n > kMaxSegmentsPerChunk) return false;
  for (uint32_t i = 0; i < n; ++i) get_segment(r, &c->segments[i]);
  c->nsegments = n;
  return r.ok();
}

// Read list, write list and reply chunk (RFC 8166 §4.3). The two lists are
// XDR optional-data chains (RFC 4506 §4.19): a bool before every entry, FALSE
// at the end. A TRUE beyond the capacity is refused before anything is read.
bool get_chunk_lists(XdrReader& r, ChunkLists* c) {
  c->clear();
  while (r.get_bool()) {
    if (c->nreads == kMaxReadSegments) return false;
    ReadSegment& rs = c->reads[c->nreads];
    rs.position = r.get_u32();
    get_segment(r, &rs.target);
    if (!r.ok()) return false;
    ++c->nreads;
  }
  while (r.get_bool()) {
    if (c->nwrites == kMaxWriteChunks) return false;
    if (!get_write_chunk(r, &c->writes[c->nwrites])) return false;
    ++c->nwrites;
  }
  if (r.get_bool()) {
    if (!get_write_chunk(r, &c->reply)) return false;
    c->has_reply = true;
  }
  return r.ok();
}

// The body of RDMA_ERROR. Anything it cannot make sense of is kGarbage, never
// kBadChunk: answering an error with an error could loop between two peers.
DecodeResult get_error_body(XdrReader& r, Header* h, bool other_version) {
  uint32_t code = r.get_u32();
  if (!r.ok()) return {DecodeStatus::kGarbage, r.position()};
  if (code == static_cast<uint32_t>(ErrCode::kVers)) {
    h->error.code = ErrCode::kVers;
    h->error.vers_low = r.get_u32();
    h->error.vers_high = r.get_u32();
    if (!r.ok()) return {DecodeStatus::kGarbage, r.position()};
    return {DecodeStatus::kOk, r.position()};
  }
  // Only ERR_VERS is fixed across versions; another version's other errors
  // are not ours to read.
  if (code == static_cast<uint32_t>(ErrCode::kChunk) && !other_version) {
    h->error.code = ErrCode::kChunk;
    h->error.vers_low = 0;
    h->error.vers_high = 0;
    return {DecodeStatus::kOk, r.position()};
  }
  return {DecodeStatus::kGarbage, r.position()};
}

// ------------------------------------------------------------------ encoding

void put_segment(XdrWriter& w, const Segment& s) {
  w.put_u32(s.handle);
  w.put_u32(s.length);
  w.put_u64(s.offset);
}

void put_write_chunk(XdrWriter& w, const WriteChunk& c) {
  TERN_REQUIRE(c.nsegments >= 1 && c.nsegments <= kMaxSegmentsPerChunk,
               "write chunk with %u segments (1..%u)", c.nsegments, kMaxSegmentsPerChunk);
  w.put_u32(c.nsegments);
  for (uint32_t i = 0; i < c.nsegments; ++i) put_segment(w, c.segments[i]);
}

void put_fixed(XdrWriter& w, uint32_t xid, uint32_t vers, uint32_t credit, Proc proc) {
  w.put_u32(xid);
  w.put_u32(vers);
  w.put_u32(credit);
  w.put_u32(static_cast<uint32_t>(proc));
}

size_t write_chunk_size(const WriteChunk& c) { return 4 + size_t{c.nsegments} * kSegmentWireSize; }

void require_sendable(const Header& h) {
  TERN_REQUIRE(h.proc == Proc::kMsg || h.proc == Proc::kNoMsg || h.proc == Proc::kError,
               "rdma_proc %u may not be sent (RFC 8166 §4.6)", static_cast<uint32_t>(h.proc));
  if (h.proc == Proc::kError) return;
  TERN_REQUIRE(h.chunks.nreads <= kMaxReadSegments && h.chunks.nwrites <= kMaxWriteChunks,
               "chunk lists over capacity: %u reads, %u writes", h.chunks.nreads, h.chunks.nwrites);
  TERN_REQUIRE(h.proc != Proc::kNoMsg || !h.chunks.empty(),
               "RDMA_NOMSG without chunks is malformed (RFC 8166 §4.5.2)");
}

}  // namespace

const char* decode_status_name(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kVersionMismatch: return "version-mismatch";
    case DecodeStatus::kBadChunk: return "bad-chunk";
    case DecodeStatus::kDiscard: return "discard";
    case DecodeStatus::kTooShort: return "too-short";
    case DecodeStatus::kGarbage: return "garbage";
  }
  return "?";
}

DecodeResult decode_header(std::span<const uint8_t> msg, Header* h) {
  XdrReader r(msg);
  h->xid = r.get_u32();
  h->vers = r.get_u32();
  if (!r.ok()) return {DecodeStatus::kTooShort, 0};
  h->credit = r.get_u32();
  uint32_t proc = r.get_u32();
  bool have_fixed = r.ok();
  if (have_fixed) h->proc = static_cast<Proc>(proc);

  if (h->vers != kVersion) {
    if (have_fixed && proc == static_cast<uint32_t>(Proc::kError)) return get_error_body(r, h, true);
    return {DecodeStatus::kVersionMismatch, have_fixed ? r.position() : 2 * xdr::kUnit};
  }
  if (!have_fixed) return {DecodeStatus::kTooShort, 2 * xdr::kUnit};

  switch (static_cast<Proc>(proc)) {
    case Proc::kMsg:
    case Proc::kNoMsg:
      if (!get_chunk_lists(r, &h->chunks)) return {DecodeStatus::kBadChunk, r.position()};
      // RFC 8166 §4.5.2 names this an XDR error: there is no RPC message.
      if (h->proc == Proc::kNoMsg && h->chunks.empty()) return {DecodeStatus::kBadChunk, r.position()};
      return {DecodeStatus::kOk, r.position()};
    case Proc::kMsgp:
      return {DecodeStatus::kBadChunk, r.position()};
    case Proc::kDone:
      return {DecodeStatus::kDiscard, r.position()};
    case Proc::kError:
      return get_error_body(r, h, false);
  }
  // An rdma_proc value this version does not define (RFC 8166 §4.5.2).
  return {DecodeStatus::kBadChunk, r.position()};
}

bool rpc_xid_matches(const Header& h, std::span<const uint8_t> rpc_msg) {
  XdrReader r(rpc_msg);
  uint32_t xid = r.get_u32();
  return r.ok() && xid == h.xid;
}

size_t encoded_size(const Header& h) {
  require_sendable(h);
  if (h.proc == Proc::kError) return h.error.code == ErrCode::kVers ? kErrVersSize : kErrChunkSize;
  const ChunkLists& c = h.chunks;
  size_t n = kFixedHeaderSize;
  n += size_t{c.nreads} * (4 + 4 + kSegmentWireSize) + 4;
  for (uint32_t i = 0; i < c.nwrites; ++i) n += 4 + write_chunk_size(c.writes[i]);
  n += 4;
  n += 4 + (c.has_reply ? write_chunk_size(c.reply) : 0);
  return n;
}

size_t encode_header(const Header& h, std::span<uint8_t> out) {
  require_sendable(h);
  XdrWriter w(out);
  put_fixed(w, h.xid, h.vers, h.credit, h.proc);
  if (h.proc == Proc::kError) {
    w.put_u32(static_cast<uint32_t>(h.error.code));
    if (h.error.code == ErrCode::kVers) {
      w.put_u32(h.error.vers_low);
      w.put_u32(h.error.vers_high);
    }
    return w.ok() ? w.bytes_written() : 0;
  }
  const ChunkLists& c = h.chunks;
  for (uint32_t i = 0; i < c.nreads; ++i) {
    w.put_bool(true);
    w.put_u32(c.reads[i].position);
    put_segment(w, c.reads[i].target);
  }
  w.put_bool(false);
  for (uint32_t i = 0; i < c.nwrites; ++i) {
    w.put_bool(true);
    put_write_chunk(w, c.writes[i]);
  }
  w.put_bool(false);
  w.put_bool(c.has_reply);
  if (c.has_reply) put_write_chunk(w, c.reply);
  return w.ok() ? w.bytes_written() : 0;
}

size_t encode_err_vers(uint32_t xid, uint32_t credit, std::span<uint8_t> out) {
  XdrWriter w(out);
  put_fixed(w, xid, kVersion, credit, Proc::kError);
  w.put_u32(static_cast<uint32_t>(ErrCode::kVers));
  // The inclusive range this end supports: version 1 only.
  w.put_u32(kVersion);
  w.put_u32(kVersion);
  return w.ok() ? w.bytes_written() : 0;
}

size_t encode_err_chunk(uint32_t xid, uint32_t credit, std::span<uint8_t> out) {
  XdrWriter w(out);
  put_fixed(w, xid, kVersion, credit, Proc::kError);
  w.put_u32(static_cast<uint32_t>(ErrCode::kChunk));
  return w.ok() ? w.bytes_written() : 0;
}

size_t encode_error_reply(DecodeStatus status, const Header& decoded, uint32_t credit, std::span<uint8_t> out) {
  switch (status) {
    case DecodeStatus::kVersionMismatch: return encode_err_vers(decoded.xid, credit, out);
    case DecodeStatus::kBadChunk: return encode_err_chunk(decoded.xid, credit, out);
    case DecodeStatus::kOk:
    case DecodeStatus::kDiscard:
    case DecodeStatus::kTooShort:
    case DecodeStatus::kGarbage: return 0;
  }
  return 0;
}

}  // namespace tern::rpcrdma
