// Chunks as RPC-over-RDMA Version 1 carries them (RFC 8166 §3.4): the
// segments a requester offers (an rkey, a length and an address in its
// memory), grouped into read chunks (data the responder pulls with RDMA
// READ, each inserted at an XDR position of the call), write chunks (room
// the responder fills with RDMA WRITE, one per DDP-eligible result) and a
// reply chunk (room for a whole reply too large to send inline).
//
// These are the engine's decoded and to-be-encoded forms; wire.h converts
// them to and from lib/rpcrdma's codec. Tern's limits are the codec's
// capacities, so anything the codec can decode the engine can hold.
#pragma once

#include <cstdint>

#include "rpcrdma/rpcrdma_wire.h"

namespace tern::rpc {

// One RDMA segment (xdr_rdma_segment): handle (rkey), length, offset.
struct RdmaSegment {
  uint32_t handle;
  uint32_t length;
  uint64_t offset;
};

// Segments in one chunk, and read segments in one message's read list.
inline constexpr int kMaxChunkSegs = static_cast<int>(rpcrdma::kMaxSegmentsPerChunk);
inline constexpr int kMaxReadSegs = static_cast<int>(rpcrdma::kMaxReadSegments);
// Read chunks (distinct positions; a position-zero chunk counts) and write
// chunks in one call. RFC 8166 sets no limit; the Linux client sends at most
// one of each besides position zero, and svcrdma takes several.
inline constexpr int kMaxReadChunks = 4;
inline constexpr int kMaxWriteChunks = static_cast<int>(rpcrdma::kMaxWriteChunks);

// The bytes a chunk's segments cover, together.
inline uint64_t segments_length(const RdmaSegment* segs, int nsegs) {
  uint64_t n = 0;
  for (int i = 0; i < nsegs; ++i) n += segs[i].length;
  return n;
}

// A read chunk: its XDR position in the RPC call message (0: the whole
// message, RDMA_NOMSG) and its segments, in order.
struct ReadChunkSegs {
  uint32_t position = 0;
  int nsegs = 0;
  RdmaSegment segs[kMaxChunkSegs];
  uint64_t length() const { return segments_length(segs, nsegs); }
};

// A write chunk or the reply chunk: segments, in order.
struct WriteChunkSegs {
  int nsegs = 0;
  RdmaSegment segs[kMaxChunkSegs];
  uint64_t capacity() const { return segments_length(segs, nsegs); }
};

// The three chunk lists of one message.
// The counts come first, with the reply chunk's (its segment count leads
// it), so that clear() and the tests of a message without chunks touch one
// cache line of the ~2.4 KiB.
struct ChunkLists {
  int nreads = 0;  // read chunks, by increasing position
  int nwrites = 0;
  bool has_reply = false;
  WriteChunkSegs reply;
  ReadChunkSegs reads[kMaxReadChunks];
  WriteChunkSegs writes[kMaxWriteChunks];

  int read_segments() const {
    int n = 0;
    for (int i = 0; i < nreads; ++i) n += reads[i].nsegs;
    return n;
  }
  void clear() {
    nreads = nwrites = 0;
    has_reply = false;
    reply.nsegs = 0;
  }
};

}  // namespace tern::rpc
