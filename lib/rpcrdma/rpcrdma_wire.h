// The RPC-over-RDMA Version 1 transport header (RFC 8166 §4): encoding,
// decoding, and the RDMA_ERROR replies the RFC requires for bad headers.
//
// On the wire (RFC 8166 §4.1, XDR):
//   rdma_xid, rdma_vers (= 1), rdma_credit, rdma_proc
//   RDMA_MSG / RDMA_NOMSG:  read list, write list, optional reply chunk
//                           (RDMA_MSG is followed by the RPC message itself)
//   RDMA_ERROR:             rdma_err (ERR_VERS { low, high } | ERR_CHUNK)
// A read list is a linked list of read segments { position, handle, length,
// offset }; a write list is a linked list of write chunks, each a counted array
// of segments { handle, length, offset }; the reply chunk is one write chunk.
//
// Decoding fills a fixed-capacity Header (no allocation) and says what the RFC
// requires the receiver to do. Lists longer than the capacities below are
// answered like malformed ones (ERR_CHUNK): a Responder cannot process chunks it
// cannot hold. Every read is bounds-checked (lib/xdr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tern::rpcrdma {

// RFC 8166 §4.2.2: version 1 headers carry the value one.
inline constexpr uint32_t kVersion = 1;
// RFC 8166 §3.3.3: the inline threshold in each direction when the peers have
// not agreed on another (RFC 8797 private data is how they can; cm_private.h).
inline constexpr uint32_t kDefaultInlineThreshold = 1024;

// rdma_proc (RFC 8166 §4.2.4).
enum class Proc : uint32_t {
  kMsg = 0,    // RPC message follows the header inline
  kNoMsg = 1,  // RPC message travels in a chunk (position-zero read chunk or reply chunk)
  kMsgp = 2,   // deprecated (§4.6.1): never sent; answered with ERR_CHUNK
  kDone = 3,   // deprecated (§4.6.2): never sent; silently discarded
  kError = 4,  // a Responder could not process a message
};

// rdma_err (RFC 8166 §4.5).
enum class ErrCode : uint32_t {
  kVers = 1,   // unsupported rdma_vers; the body says which versions are
  kChunk = 2,  // the header or its chunk lists could not be processed
};

// Capacities of a decoded header. Chunk lists in practice are short (the Linux
// client sends at most one write chunk and a handful of segments); these bound
// a Header to under 2 KiB so it can live on a stack or in a request.
inline constexpr uint32_t kMaxReadSegments = 16;
inline constexpr uint32_t kMaxWriteChunks = 4;
inline constexpr uint32_t kMaxSegmentsPerChunk = 16;
static_assert(kMaxReadSegments >= 1 && kMaxWriteChunks >= 1 && kMaxSegmentsPerChunk >= 1);

// xdr_rdma_segment: a registered memory region of the sender.
struct Segment {
  uint32_t handle;  // rkey
  uint32_t length;  // bytes
  uint64_t offset;  // remote address
};

// xdr_read_chunk: a segment and where its data belongs in the XDR stream of
// the RPC message. Segments with the same position form one read chunk.
struct ReadSegment {
  uint32_t position;
  Segment target;
};

// xdr_write_chunk: a counted array of segments. Only the first nsegments
// entries are meaningful (the rest are left uninitialised on purpose: a
// Header is filled per message on the hot path).
struct WriteChunk {
  uint32_t nsegments = 0;
  Segment segments[kMaxSegmentsPerChunk];

  std::span<const Segment> view() const { return {segments, nsegments}; }
  // Sum of the segment lengths (64-bit: 16 segments of up to 4 GiB each).
  uint64_t total_length() const {
    uint64_t n = 0;
    for (uint32_t i = 0; i < nsegments; ++i) n += segments[i].length;
    return n;
  }
};

// The three chunk lists of RDMA_MSG and RDMA_NOMSG.
struct ChunkLists {
  uint32_t nreads = 0;
  ReadSegment reads[kMaxReadSegments];
  uint32_t nwrites = 0;
  WriteChunk writes[kMaxWriteChunks];
  bool has_reply = false;
  WriteChunk reply;

  std::span<const ReadSegment> read_view() const { return {reads, nreads}; }
  std::span<const WriteChunk> write_view() const { return {writes, nwrites}; }
  bool empty() const { return nreads == 0 && nwrites == 0 && !has_reply; }
  void clear() {
    nreads = 0;
    nwrites = 0;
    has_reply = false;
    reply.nsegments = 0;
  }
};

// The body of RDMA_ERROR. vers_low/vers_high are meaningful for ERR_VERS only.
struct ErrorBody {
  ErrCode code = ErrCode::kChunk;
  uint32_t vers_low = 0;
  uint32_t vers_high = 0;
};

// A whole transport header. chunks is meaningful for kMsg/kNoMsg, error for
// kError.
struct Header {
  uint32_t xid = 0;
  uint32_t vers = kVersion;
  uint32_t credit = 0;
  Proc proc = Proc::kMsg;
  ChunkLists chunks;
  ErrorBody error;
};

// Fixed sizes on the wire.
inline constexpr size_t kFixedHeaderSize = 16;                 // xid, vers, credit, proc
inline constexpr size_t kMinMsgHeaderSize = kFixedHeaderSize + 12;  // three empty lists
inline constexpr size_t kErrChunkSize = kFixedHeaderSize + 4;
inline constexpr size_t kErrVersSize = kFixedHeaderSize + 12;
inline constexpr size_t kSegmentWireSize = 16;
// The largest header a full Header encodes to: the most a receive buffer must
// hold for the header alone.
inline constexpr size_t kMaxHeaderSize =
    kFixedHeaderSize +
    (kMaxReadSegments * (4 + 4 + kSegmentWireSize) + 4) +                  // read list
    (kMaxWriteChunks * (4 + 4 + kMaxSegmentsPerChunk * kSegmentWireSize) + 4) +  // write list
    (4 + 4 + kMaxSegmentsPerChunk * kSegmentWireSize);                     // reply chunk
static_assert(kMaxHeaderSize == 1728, "header capacity changed: check receive buffer sizing");

// What the receiver of a message must do, per RFC 8166 §4.5 and §4.6. A
// Requester (client) never answers a Responder: for every status but kOk it
// drops the message (§4.5.2). The Responder's (server's) action is below.
enum class DecodeStatus : uint8_t {
  // A valid header; header_len is where the RPC message starts (RDMA_MSG) or
  // the end of the header (RDMA_NOMSG, RDMA_ERROR). The caller still has to
  // check that rdma_xid matches the RPC message's XID (rpc_xid_matches) and
  // answer ERR_CHUNK when it does not (§4.5.2).
  kOk,
  // rdma_vers is not 1. Answer RDMA_ERROR / ERR_VERS with the message's xid
  // and the versions supported, low = high = 1 (§4.5.1): encode_err_vers.
  kVersionMismatch,
  // Version 1, but the header does not parse (truncated lists, a bool that is
  // not 0/1, an unknown rdma_proc, RDMA_NOMSG with no chunks), is RDMA_MSGP
  // (deprecated, §4.6.1), or has more chunks or segments than a Header holds.
  // Answer RDMA_ERROR / ERR_CHUNK with the message's xid (§4.5.2):
  // encode_err_chunk.
  kBadChunk,
  // RDMA_DONE (deprecated, §4.6.2): receivers silently discard it.
  kDiscard,
  // Shorter than xid + vers, or a version-1 message shorter than the fixed
  // header: there is nothing to answer. Drop it (or disconnect).
  kTooShort,
  // An RDMA_ERROR that does not parse. Drop it: an error is never answered
  // with an error, or two peers could loop.
  kGarbage,
};

const char* decode_status_name(DecodeStatus s);

struct DecodeResult {
  DecodeStatus status;
  // kOk: bytes of transport header. Otherwise: how far decoding got (for logs).
  size_t header_len;
};

// Decodes the transport header at the start of msg into *out. out->xid is
// valid for every status but kTooShort, so that the error reply can echo it.
//
// One exception to "version first": RDMA_ERROR / ERR_VERS has the same layout
// in every version (RFC 8166 §4.1: the position of rdma_proc, RDMA_ERROR and the
// ERR_VERS body are "fixed for all versions"), so a Requester can learn the
// range a peer of another version supports. Such a message decodes as kOk with
// out->vers set to the peer's version; any other proc of another version is
// kVersionMismatch.
DecodeResult decode_header(std::span<const uint8_t> msg, Header* out);

// Whether rpc_msg (the RPC message that follows an RDMA_MSG header, or that
// arrived through a chunk) starts with the transport header's xid.
bool rpc_xid_matches(const Header& h, std::span<const uint8_t> rpc_msg);

// Bytes encode_header writes for h. h.proc must be kMsg, kNoMsg or kError.
size_t encoded_size(const Header& h);

// Writes h (RDMA_MSG, RDMA_NOMSG or RDMA_ERROR) at the start of out. Returns the
// bytes written, or 0 when out is too small. Requires: h.proc is one of those
// three (the RFC forbids sending RDMA_MSGP and RDMA_DONE), list counts within
// the capacities, every write chunk non-empty, and an RDMA_NOMSG to carry at
// least one chunk.
size_t encode_header(const Header& h, std::span<uint8_t> out);

// RDMA_ERROR replies a Responder sends (RFC 8166 §4.5). xid echoes the message
// that caused the error; credit is the Responder's current grant. Each returns
// the bytes written (kErrVersSize / kErrChunkSize) or 0 when out is too small.
size_t encode_err_vers(uint32_t xid, uint32_t credit, std::span<uint8_t> out);
size_t encode_err_chunk(uint32_t xid, uint32_t credit, std::span<uint8_t> out);

// The reply a Responder must send for a decode result: ERR_VERS for
// kVersionMismatch, ERR_CHUNK for kBadChunk, nothing (returns 0) for the
// others. decoded is the Header decode_header filled.
size_t encode_error_reply(DecodeStatus status, const Header& decoded, uint32_t credit, std::span<uint8_t> out);

}  // namespace tern::rpcrdma
