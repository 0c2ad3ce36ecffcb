// The engine's view of the wire: RFC 8797 private data, RPC-over-RDMA v1
// headers and ONC RPC headers, through lib/rpcrdma and lib/oncrpc.
// Everything that reads peer bytes here is bounds-checked and reports what
// the RFC says to do about bad input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "engine/chunks.h"
#include "engine/engine.h"

namespace tern::rpc::wire {

namespace testing {
// The plain shapes' fast paths on (default) or off, so that tests can
// compare them with the general paths: wire.cc's, and the few shortcuts a
// connection takes above the codec for a plain message (docs/engine.md,
// "One path per message"). Not thread-safe; tests only.
void use_fast_paths(bool on);
// Whether use_fast_paths(false) also turns the connections' shortcuts off:
// only in a library built with TERN_DEBUG (fast_paths() below). A test that
// compares those shortcuts with the general path must skip otherwise, or it
// would compare the shortcuts with themselves.
bool shortcuts_switchable();
}  // namespace testing
namespace detail {
extern bool g_fast_paths;
}  // namespace detail
// Whether the fast paths are on: always, but in a test that compares them
// with the general paths. A connection's shortcut tests it first. Builds
// without TERN_DEBUG (release: no test runs there) cannot turn the
// connections' shortcuts off, and pay nothing for asking; the codec's own
// fast paths can always be turned off.
#if defined(TERN_DEBUG) && TERN_DEBUG
inline bool fast_paths() { return detail::g_fast_paths; }
#else
constexpr bool fast_paths() { return true; }
#endif

// RFC 8797 private data this end sends at connect/accept.
size_t encode_pdata(uint8_t* out, size_t cap, uint32_t inline_send, uint32_t inline_recv, bool remote_inv);
// What both ends can use, from our offer and the peer's private data (RFC 8166
// defaults when it sent none or something unrecognised). *send: the most
// this end may send inline (what the peer receives); *recv: the most it
// receives. *inv: a server may send Send With Invalidate (the client offered
// it); a client may receive it (it offered it itself, to a peer that speaks
// RFC 8797).
void negotiate(std::span<const uint8_t> peer, uint32_t my_send, uint32_t my_recv, bool my_inv, bool server,
               uint32_t* send, uint32_t* recv, bool* inv);

// Why a server refused a connection, in the reject's private data, so that
// the client's error says what to do (RFC 8797 defines no reject payload;
// these 4 bytes are Tern's: 'T' 'r' 'j' and the reason). A reject without
// them (another implementation, an old Tern) decodes as kUnspecified.
enum class RejectReason : uint8_t {
  kUnspecified = 0,
  kTableFull = 1,         // max_connections held, none of them could be reaped
  kPeerLimit = 2,         // this peer holds max_connections_per_peer already
  kNoReceiveBuffers = 3,  // every receive buffer is granted (recv_buffers)
};
inline constexpr size_t kRejectLen = 4;
size_t encode_reject(uint8_t* out, size_t cap, RejectReason why);
RejectReason decode_reject(std::span<const uint8_t> pdata);

// ---- client

// Bytes the RPC-over-RDMA header of a call with these chunk lists takes
// (segment counts matter, not their values).
size_t transport_header_len(const ChunkLists& ch);
// Bytes the ONC RPC call header of c takes (read chunk positions follow it).
size_t call_rpc_header_len(const Call& c);
// RDMA_MSG: the transport header, the ONC RPC call header and args, into
// buf. Returns the bytes written, 0 when it does not fit.
size_t encode_call(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const ChunkLists& ch, const Call& c,
                   std::span<const uint8_t> args);
// A long call: the RPC call message alone (header and args), for its
// position-zero read chunk; and the RDMA_NOMSG transport header.
size_t encode_rpc_call(uint8_t* buf, size_t cap, uint32_t xid, const Call& c, std::span<const uint8_t> args);
size_t encode_nomsg_call(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const ChunkLists& ch);

// A decoded reply header.
struct Reply {
  uint32_t xid = 0;
  uint32_t credits = 0;
  enum class Kind : uint8_t { kMsg, kNoMsg, kError } kind = Kind::kMsg;
  int nwrites = 0;
  uint64_t write_lens[kMaxWriteChunks] = {};  // bytes the server wrote into each write chunk
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
// The commonest reply in one step: RDMA_MSG with no chunk lists around an
// accepted SUCCESS reply with an AUTH_NONE verifier whose xid is the
// header's. True with the xid, the grant and the results -- what
// decode_reply_header() and then decode_rpc_reply(body, xid) give it; false
// for anything else (those two decide then), and with the fast paths off.
bool decode_plain_reply(std::span<const uint8_t> msg, uint32_t* xid, uint32_t* credits,
                        std::span<const uint8_t>* results);

// ---- server

// A decoded call header; its chunk lists go where the caller says (a
// server call's own, so that they are not copied).
struct Incoming {
  uint32_t xid = 0;
  uint32_t credits = 0;
  enum class Verdict : uint8_t { kOk, kErrVers, kErrChunk, kDrop } verdict = Verdict::kOk;
  bool nomsg = false;  // RDMA_NOMSG: the call is in the position-zero read chunk (chunks->reads[0])
  std::span<const uint8_t> body;  // the RPC call message (RDMA_MSG)
};
// *chunks gets the read chunks grouped by position, in increasing order.
void decode_call_header(std::span<const uint8_t> msg, Incoming* in, ChunkLists* chunks);
// The ONC RPC call header: prog/vers/proc and where args start. False: GARBAGE
// (the caller answers as RFC 5531 says, or drops when even the xid is unknown).
struct RpcCall {
  uint32_t prog = 0, vers = 0, proc = 0;
  std::span<const uint8_t> args;
  size_t header_len = 0;  // bytes of ONC RPC call header before args
  bool rpc_mismatch = false;
  bool bad_auth = false;
};
bool decode_rpc_call(std::span<const uint8_t> body, uint32_t xid, RpcCall* c);
// The commonest call in one step: RDMA_MSG with no chunk lists around an
// RPC version 2 call with AUTH_NONE credential and verifier whose xid is the
// header's. True with what decode_call_header() (kOk, no chunks) and then
// decode_rpc_call(body, xid) give it; false for anything else (those two
// decide then), and with the fast paths off.
bool decode_plain_call(std::span<const uint8_t> msg, Incoming* in, RpcCall* c);

// The RDMA_MSG header of a message with no chunk lists (three empty lists):
// what nearly every inline reply carries. kNoChunksHeader bytes; 0 when cap
// is smaller.
inline constexpr size_t kNoChunksHeader = 28;
size_t encode_msg_header_no_chunks(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits);

// Reply: the RPC-over-RDMA header (RDMA_MSG, or RDMA_NOMSG when the message
// went into the reply chunk) with the write chunks' segments as written
// (each segment's length: bytes placed there) and the reply chunk's.
size_t encode_reply_header(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, const ChunkLists& written,
                           bool nomsg);
// The ONC RPC reply message (accepted, with stat) followed by results.
// accept_stat: an AcceptStat value, or kReplyRpcMismatch / kReplyAuthError.
inline constexpr int kReplyRpcMismatch = 100;
inline constexpr int kReplyAuthError = 101;
// Not an RPC reply at all: the call's answer is RDMA_ERROR / ERR_CHUNK
// (RFC 8166 §4.5.2), for an RDMA_NOMSG call whose RPC message, pulled from
// its position-zero chunk, does not carry the transport header's xid.
// ServerConn::reply() sends it in place of the reply; encode_rpc_reply
// never sees it.
inline constexpr int kAnswerErrChunk = 102;
size_t encode_rpc_reply(uint8_t* buf, size_t cap, uint32_t xid, int accept_stat, uint32_t low, uint32_t high,
                        std::span<const uint8_t> results);
// The commonest reply whole, in one pass: the RDMA_MSG header with no
// chunk lists (encode_msg_header_no_chunks) and an accepted SUCCESS reply
// with an AUTH_NONE verifier (encode_rpc_reply's plain shape) followed by
// results -- the same bytes those two write (engine_wire_test.cc compares
// them). kPlainReplyLen + results.size() bytes, which the caller has made
// sure fit. Inline: the server's common reply was two calls, each checking
// the fast paths and its room, and writing the xid's bytes again.
inline constexpr size_t kPlainReplyLen = kNoChunksHeader + 6 * 4;
inline size_t encode_plain_reply(uint8_t* buf, uint32_t xid, uint32_t credits, std::span<const uint8_t> results) {
  const uint32_t x = __builtin_bswap32(xid);
  // xid, RPC-over-RDMA version 1, credits, RDMA_MSG, three empty chunk
  // lists; xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier (flavor, length),
  // SUCCESS. Big-endian words.
  const uint32_t w[13] = {x, __builtin_bswap32(1u), __builtin_bswap32(credits), 0, 0, 0, 0,
                          x, __builtin_bswap32(1u), 0,                          0, 0, 0};
  static_assert(sizeof w == kPlainReplyLen);
  std::memcpy(buf, w, sizeof w);
  if (!results.empty()) std::memcpy(buf + kPlainReplyLen, results.data(), results.size());
  return kPlainReplyLen + results.size();
}
// RDMA_ERROR: ERR_VERS or ERR_CHUNK.
size_t encode_rdma_error(uint8_t* buf, size_t cap, uint32_t xid, uint32_t credits, bool vers);

}  // namespace tern::rpc::wire
