// RPC-over-RDMA v1 transport headers (RFC 8166 §4) as a peer sends them: the
// codec's decode_header with an encode round trip, and the engine's own
// wrappers, which are what the client and server really run on received bytes
// (lib/engine/wire.h).
#include <cstdint>
#include <cstring>
#include <span>

#include "engine/wire.h"
#include "fuzz_check.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace {

namespace rr = tern::rpcrdma;
namespace wire = tern::rpc::wire;

bool same_segment(const rr::Segment& a, const rr::Segment& b) {
  return a.handle == b.handle && a.length == b.length && a.offset == b.offset;
}

bool same_chunk(const rr::WriteChunk& a, const rr::WriteChunk& b) {
  if (a.nsegments != b.nsegments) return false;
  for (uint32_t i = 0; i < a.nsegments; ++i)
    if (!same_segment(a.segments[i], b.segments[i])) return false;
  return true;
}

bool same_header(const rr::Header& a, const rr::Header& b) {
  if (a.xid != b.xid || a.vers != b.vers || a.credit != b.credit || a.proc != b.proc) return false;
  if (a.proc == rr::Proc::kError)
    return a.error.code == b.error.code && a.error.vers_low == b.error.vers_low &&
           a.error.vers_high == b.error.vers_high;
  const rr::ChunkLists& x = a.chunks;
  const rr::ChunkLists& y = b.chunks;
  if (x.nreads != y.nreads || x.nwrites != y.nwrites || x.has_reply != y.has_reply) return false;
  for (uint32_t i = 0; i < x.nreads; ++i)
    if (x.reads[i].position != y.reads[i].position || !same_segment(x.reads[i].target, y.reads[i].target))
      return false;
  for (uint32_t i = 0; i < x.nwrites; ++i)
    if (!same_chunk(x.writes[i], y.writes[i])) return false;
  return !x.has_reply || same_chunk(x.reply, y.reply);
}

void codec(const uint8_t* data, size_t size) {
  std::span<const uint8_t> msg(data, size);
  rr::Header h;
  rr::DecodeResult d = rr::decode_header(msg, &h);
  FUZZ_CHECK(d.header_len <= size, "header_len %zu of a %zu-byte message", d.header_len, size);

  // Whatever the status, the error reply a Responder would send must be one
  // of the two fixed-size ones, or none.
  uint8_t err[rr::kErrVersSize];
  size_t en = rr::encode_error_reply(d.status, h, 7, err);
  FUZZ_CHECK(en == 0 || en == rr::kErrChunkSize || en == rr::kErrVersSize, "error reply of %zu bytes", en);
  if (d.status != rr::DecodeStatus::kOk) return;

  FUZZ_CHECK(h.proc == rr::Proc::kMsg || h.proc == rr::Proc::kNoMsg || h.proc == rr::Proc::kError,
             "kOk for rdma_proc %u", static_cast<uint32_t>(h.proc));
  FUZZ_CHECK(h.vers == rr::kVersion || h.proc == rr::Proc::kError, "kOk for version %u", h.vers);
  if (h.proc != rr::Proc::kError) {
    FUZZ_CHECK(h.chunks.nreads <= rr::kMaxReadSegments && h.chunks.nwrites <= rr::kMaxWriteChunks,
               "%u reads, %u writes", h.chunks.nreads, h.chunks.nwrites);
    FUZZ_CHECK(h.proc != rr::Proc::kNoMsg || !h.chunks.empty(), "RDMA_NOMSG without chunks decoded");
  }

  // Round trip: what decoded as a valid header encodes to exactly the bytes it
  // came from (XDR has one encoding per value, and RFC 8166 headers have no
  // padding), and decodes again to the same header.
  uint8_t buf[rr::kMaxHeaderSize];
  size_t want = rr::encoded_size(h);
  FUZZ_CHECK(want <= sizeof buf, "encoded_size %zu over kMaxHeaderSize", want);
  size_t n = rr::encode_header(h, buf);
  FUZZ_CHECK(n == want, "encode_header wrote %zu, encoded_size said %zu", n, want);
  FUZZ_CHECK(n == d.header_len, "re-encoded %zu bytes from a %zu-byte header", n, d.header_len);
  FUZZ_CHECK(std::memcmp(buf, data, n) == 0, "re-encoding differs from the decoded bytes");
  rr::Header h2;
  rr::DecodeResult d2 = rr::decode_header(std::span<const uint8_t>(buf, n), &h2);
  FUZZ_CHECK(d2.status == rr::DecodeStatus::kOk && d2.header_len == n, "re-encoded header decodes as %s",
             rr::decode_status_name(d2.status));
  FUZZ_CHECK(same_header(h, h2), "round trip changed the header");
}

void engine_wrappers(const uint8_t* data, size_t size) {
  std::span<const uint8_t> msg(data, size);

  // Client side: a reply.
  wire::Reply r;
  if (wire::decode_reply_header(msg, &r)) {
    FUZZ_CHECK_WITHIN(r.body, data, size);
    FUZZ_CHECK(r.nwrites >= 0 && r.nwrites <= tern::rpc::kMaxWriteChunks, "%d write chunks",
               r.nwrites);
    if (r.kind == wire::Reply::Kind::kMsg) {
      std::span<const uint8_t> results;
      tern::rpc::CallStatus st = wire::decode_rpc_reply(r.body, r.xid, &results);
      if (st == tern::rpc::CallStatus::kOk) FUZZ_CHECK_WITHIN(results, r.body.data(), r.body.size());
    }
  }

  // Server side: a call.
  wire::Incoming in;
  tern::rpc::ChunkLists ch;
  wire::decode_call_header(msg, &in, &ch);
  if (in.verdict != wire::Incoming::Verdict::kOk) return;
  FUZZ_CHECK(ch.nreads >= 0 && ch.nreads <= tern::rpc::kMaxReadChunks, "%d read chunks", ch.nreads);
  FUZZ_CHECK(ch.nwrites >= 0 && ch.nwrites <= tern::rpc::kMaxWriteChunks, "%d write chunks", ch.nwrites);
  FUZZ_CHECK(ch.read_segments() <= tern::rpc::kMaxReadSegs, "%d read segments", ch.read_segments());
  for (int c = 0; c < ch.nreads; ++c) {
    FUZZ_CHECK(ch.reads[c].nsegs >= 1 && ch.reads[c].nsegs <= tern::rpc::kMaxChunkSegs, "read chunk of %d segments",
               ch.reads[c].nsegs);
    FUZZ_CHECK(ch.reads[c].position % 4 == 0, "read chunk at unaligned position %u", ch.reads[c].position);
    if (c > 0) FUZZ_CHECK(ch.reads[c].position > ch.reads[c - 1].position, "read chunks out of order or merged");
  }
  for (int c = 0; c < ch.nwrites; ++c)
    FUZZ_CHECK(ch.writes[c].nsegs >= 0 && ch.writes[c].nsegs <= tern::rpc::kMaxChunkSegs, "write chunk of %d segments",
               ch.writes[c].nsegs);
  FUZZ_CHECK(!ch.has_reply || (ch.reply.nsegs >= 0 && ch.reply.nsegs <= tern::rpc::kMaxChunkSegs), "reply chunk");
  if (in.nomsg) {
    FUZZ_CHECK(ch.nreads > 0 && ch.reads[0].position == 0, "RDMA_NOMSG accepted without a position-zero chunk");
    return;
  }
  FUZZ_CHECK(ch.nreads == 0 || ch.reads[0].position != 0, "RDMA_MSG accepted with a position-zero chunk");
  FUZZ_CHECK_WITHIN(in.body, data, size);
  for (int c = 0; c < ch.nreads; ++c)
    FUZZ_CHECK(ch.reads[c].position <= in.body.size(), "read chunk at %u past a %zu-byte call", ch.reads[c].position,
               in.body.size());
  wire::RpcCall c;
  if (wire::decode_rpc_call(in.body, in.xid, &c)) FUZZ_CHECK_WITHIN(c.args, in.body.data(), in.body.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  codec(data, size);
  engine_wrappers(data, size);
  return 0;
}
