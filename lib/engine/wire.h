// The engine's view of the wire: RFC 8797 private data, RPC-over-RDMA v1
// headers and ONC RPC headers, through lib/rpcrdma and lib/oncrpc. Everything
// that reads peer bytes here is bounds-checked and reports what the RFC says
// to do about bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/engine.h"
#include "engine/engine_impl.h"

namespace tern::rpc::wire {

// RFC 8797 private data this end sends at connect/accept.
size_t encode_pdata(uint8_t* out, size_t cap, uint32_t inline_send, uint32_t inline_recv, bool remote_inv);
// What both ends can use, from our offer and the peer's private data (RFC 8166
// defaults when it sent none or something unrecognised). *inv: a server may
// send Send With Invalidate (the client offered it); a client may receive it
// (it offered it itself, to a peer that speaks RFC 8797).
void negotiate(std::span<const uint8_t> peer, uint32_t my_send, uint32_t my_recv, bool my_inv, bool server,
               uint32_t* send, uint32_t* recv, bool* inv);

// Client: the chunk lists of one call.
struct CallChunks {
  int nread = 0;
  ReadSeg reads[kMaxChunkSegs];
  int nwrite = 0;  // one write chunk
  RdmaSegment writes[kMaxChunkSegs];
  int nreply = 0;
  RdmaSegment replies[kMaxChunkSegs];
};

// Writes the RPC-over-RDMA header (RDMA_MSG) and the ONC RPC call header,
// followed by args, into buf. Returns the bytes written, 0 when it does not fit.
size_t encode_call(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const CallChunks& ch, const Call& c,
                   std::span<const uint8_t> args);
// Bytes the ONC RPC call header will take (read chunk positions follow it).
size_t call_rpc_header_len(const Call& c);
// Bytes the RPC-over-RDMA header of a call with these segment counts takes.
size_t call_transport_header_len(int nread, int nwrite, int nreply);

// Client: a decoded reply.
struct Reply {
  uint32_t xid = 0;
  uint32_t credits = 0;
  enum class Kind : uint8_t { kMsg, kNoMsg, kError } kind = Kind::kMsg;
  int write_chunks = 0;
  uint64_t write_len = 0;  // bytes the server wrote into our first write chunk
  bool has_reply_chunk = false;
  uint64_t reply_chunk_len = 0;
  std::span<const uint8_t> body;  // the RPC reply message (RDMA_MSG)
};
// Decodes the RPC-over-RDMA header. False: drop it (garbage; counted).
bool decode_reply_header(std::span<const uint8_t> msg, Reply* r);
// The xid of any RPC-over-RDMA message, whatever its version or procedure
// (it is the first word of every header); 0 if the message is shorter.
uint32_t leading_xid(std::span<const uint8_t> msg);
// Decodes the ONC RPC reply header in body; results is what follows.
CallStatus decode_rpc_reply(std::span<const uint8_t> body, uint32_t xid, std::span<const uint8_t>* results);

// Server: a decoded call header.
struct Incoming {
  uint32_t xid = 0;
  uint32_t credits = 0;
  enum class Verdict : uint8_t { kOk, kErrVers, kErrChunk, kDrop } verdict = Verdict::kOk;
  bool nomsg = false;
  int nread = 0;
  ReadSeg reads[kMaxChunkSegs];
  int nwrite = 0;
  RdmaSegment writes[kMaxChunkSegs];
  int nreply = 0;
  RdmaSegment replies[kMaxChunkSegs];
  std::span<const uint8_t> body;  // the RPC call message (RDMA_MSG)
};
void decode_call_header(std::span<const uint8_t> msg, Incoming* in);
// The ONC RPC call header: prog/vers/proc and where args start. False: GARBAGE
// (the caller answers as RFC 5531 says, or drops when even the xid is unknown).
struct RpcCall {
  uint32_t prog = 0, vers = 0, proc = 0;
  std::span<const uint8_t> args;
  bool rpc_mismatch = false;
  bool bad_auth = false;
};
bool decode_rpc_call(std::span<const uint8_t> body, uint32_t xid, RpcCall* c);

// Server reply: RPC-over-RDMA header (RDMA_MSG or, with `nomsg`, RDMA_NOMSG)
// with the write chunk's actual lengths and the reply chunk's, into buf.
size_t encode_reply_header(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const RdmaSegment* writes,
                           int nwrite, uint64_t written, const RdmaSegment* replies, int nreply, uint64_t reply_len,
                           bool nomsg);
// The ONC RPC reply message (accepted, with stat) followed by results.
size_t encode_rpc_reply(uint8_t* buf, size_t cap, uint32_t xid, int accept_stat, uint32_t low, uint32_t high,
                        std::span<const uint8_t> results);
// RDMA_ERROR: ERR_VERS or ERR_CHUNK.
size_t encode_rdma_error(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, bool vers);

}  // namespace tern::rpc::wire
