// ONC RPC Version 2 message headers (RFC 5531): the call header a client
// sends, the reply header a server returns, and the AUTH_NONE / AUTH_SYS
// credentials. Procedure arguments and results are not this file's business:
// they follow the header, at the offset the decoders return.
//
//   rpc_msg    = xid, msg_type (CALL 0 | REPLY 1), body
//   call_body  = rpcvers (2), prog, vers, proc, cred, verf
//   reply_body = MSG_ACCEPTED: verf, accept_stat [PROG_MISMATCH: low, high]
//              | MSG_DENIED:   RPC_MISMATCH: low, high | AUTH_ERROR: auth_stat
//   opaque_auth = flavor, body<400>
//
// Decoding never allocates: opaque bodies and the AUTH_SYS machine name are
// views into the caller's buffer, valid as long as it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tern::oncrpc {

inline constexpr uint32_t kRpcVersion = 2;

enum class MsgType : uint32_t { kCall = 0, kReply = 1 };
enum class ReplyStat : uint32_t { kAccepted = 0, kDenied = 1 };
enum class AcceptStat : uint32_t {
  kSuccess = 0,       // results follow
  kProgUnavail = 1,   // program not exported here
  kProgMismatch = 2,  // program version not supported: low, high follow
  kProcUnavail = 3,   // no such procedure
  kGarbageArgs = 4,   // the arguments did not decode
  kSystemErr = 5,     // e.g. out of memory
};
enum class RejectStat : uint32_t {
  kRpcMismatch = 0,  // rpcvers is not 2: low, high follow
  kAuthError = 1,    // auth_stat follows
};
// auth_stat. Stored as received: a value beyond these is kept, not refused.
enum class AuthStat : uint32_t {
  kOk = 0,
  kBadCred = 1,
  kRejectedCred = 2,
  kBadVerf = 3,
  kRejectedVerf = 4,
  kTooWeak = 5,
  kInvalidResp = 6,
  kFailed = 7,
  kKerbGeneric = 8,
  kTimeExpire = 9,
  kTktFile = 10,
  kDecode = 11,
  kNetAddr = 12,
  kRpcsecGssCredProblem = 13,
  kRpcsecGssCtxProblem = 14,
};
// auth_flavor. Any value may be carried; Tern interprets AUTH_NONE and AUTH_SYS.
enum class AuthFlavor : uint32_t { kNone = 0, kSys = 1, kShort = 2, kDh = 3, kRpcsecGss = 6 };

// opaque_auth body<400>.
inline constexpr size_t kMaxAuthBodySize = 400;
// authsys_parms (RFC 5531 Appendix A): machinename<255>, gids<16>.
inline constexpr size_t kMaxMachineNameSize = 255;
inline constexpr size_t kMaxAuthSysGids = 16;
// The largest AUTH_SYS body is 4 + (4 + 256) + 4 + 4 + (4 + 64) = 340 bytes:
// every valid one fits in an opaque_auth.
inline constexpr size_t kMaxAuthSysBodySize =
    4 + (4 + 256) + 4 + 4 + (4 + kMaxAuthSysGids * 4);
static_assert(kMaxAuthSysBodySize <= kMaxAuthBodySize);

struct OpaqueAuth {
  AuthFlavor flavor = AuthFlavor::kNone;
  std::span<const uint8_t> body;  // at most kMaxAuthBodySize bytes
};

// authsys_parms. Only the first ngids gids are meaningful.
struct AuthSysParams {
  uint32_t stamp = 0;
  std::string_view machinename;  // at most kMaxMachineNameSize bytes
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t ngids = 0;
  uint32_t gids[kMaxAuthSysGids];
};

// Bytes encode_auth_sys writes for p.
size_t auth_sys_size(const AuthSysParams& p);
// Writes p as an AUTH_SYS credential body (what goes in OpaqueAuth::body with
// flavor kSys). Credentials rarely change, so a client encodes them once and
// reuses the bytes. Returns the bytes written, 0 when out is too small.
// Requires machinename <= 255 bytes and ngids <= 16.
size_t encode_auth_sys(const AuthSysParams& p, std::span<uint8_t> out);
// Reads an AUTH_SYS body. False when it is truncated, its machinename is over
// 255 bytes, it has more than 16 gids, or bytes are left over: a server
// answers all of these AUTH_ERROR / AUTH_BADCRED.
bool decode_auth_sys(std::span<const uint8_t> body, AuthSysParams* out);

// ------------------------------------------------------------------- calls

struct CallHeader {
  uint32_t xid = 0;
  uint32_t prog = 0;
  uint32_t vers = 0;
  uint32_t proc = 0;
  OpaqueAuth cred;
  OpaqueAuth verf;
  // Decoding only: the parsed credential when cred.flavor is kSys.
  AuthSysParams sys;
};

// Bytes encode_call writes for h (rpcvers is always 2).
size_t call_size(const CallHeader& h);
// Writes the call header; the arguments go right after it. Returns the bytes
// written, 0 when out is too small. Requires cred and verf bodies of at most
// 400 bytes.
size_t encode_call(const CallHeader& h, std::span<uint8_t> out);

// What a server must do with a call, by what its header decoding found.
// Statuses are checked in this order, so a call with two faults gets the
// first one's answer.
enum class CallDecodeStatus : uint8_t {
  // Dispatch it: the arguments start at header_len. A procedure whose
  // arguments then fail to decode answers MSG_ACCEPTED / GARBAGE_ARGS; an
  // unknown program PROG_UNAVAIL, version PROG_MISMATCH, procedure
  // PROC_UNAVAIL; an unaccepted flavor AUTH_ERROR / AUTH_TOOWEAK (server policy,
  // not decoding).
  kOk,
  // Shorter than xid + msg_type: nobody to answer. Drop it.
  kDrop,
  // msg_type is not CALL (a REPLY, or not a msg_type at all): not for the call
  // path. A REPLY belongs to the client side of the connection; anything
  // else is dropped.
  kNotACall,
  // rpcvers is not 2: answer MSG_DENIED / RPC_MISMATCH {2, 2}. Nothing after
  // rpcvers is read, since another version may lay it out differently.
  kRpcMismatch,
  // The header ends before the credential does, the credential body is
  // over 400 bytes, or an AUTH_SYS body is malformed (truncated, name over
  // 255, over 16 gids, bytes left over): answer MSG_DENIED / AUTH_ERROR /
  // AUTH_BADCRED. Without a credential the server cannot accept the call, so
  // an accepted GARBAGE_ARGS would be wrong here.
  kBadCred,
  // The verifier is truncated or over 400 bytes: answer MSG_DENIED /
  // AUTH_ERROR / AUTH_BADVERF.
  kBadVerf,
};
const char* call_decode_status_name(CallDecodeStatus s);

struct CallDecodeResult {
  CallDecodeStatus status;
  size_t header_len;  // kOk: where the arguments start
};

// Decodes a call header from the start of msg. out->xid is valid for every
// status but kDrop.
CallDecodeResult decode_call(std::span<const uint8_t> msg, CallHeader* out);

// ------------------------------------------------------------------- replies

struct ReplyHeader {
  uint32_t xid = 0;
  ReplyStat stat = ReplyStat::kAccepted;
  // MSG_ACCEPTED
  OpaqueAuth verf;
  AcceptStat accept = AcceptStat::kSuccess;
  // MSG_DENIED
  RejectStat reject = RejectStat::kRpcMismatch;
  AuthStat auth = AuthStat::kOk;
  // PROG_MISMATCH (accepted) or RPC_MISMATCH (denied): the supported range.
  uint32_t mismatch_low = 0;
  uint32_t mismatch_high = 0;
};

// Bytes encode_reply writes for h.
size_t reply_size(const ReplyHeader& h);
// Writes the reply header; for SUCCESS the results go right after it.
// Returns the bytes written, 0 when out is too small. Requires a verifier
// body of at most 400 bytes.
size_t encode_reply(const ReplyHeader& h, std::span<uint8_t> out);

// The reply a server sends for a call whose header did not decode:
// RPC_MISMATCH {2, 2}, AUTH_BADCRED or AUTH_BADVERF with the call's xid. False
// (nothing to send) for kOk, kDrop and kNotACall.
bool error_reply_for(const CallDecodeResult& r, uint32_t xid, ReplyHeader* out);

// What a client does with a reply, by what its header decoding found.
enum class ReplyDecodeStatus : uint8_t {
  kOk,        // match out->xid to a call; SUCCESS results start at header_len
  kDrop,      // shorter than xid + msg_type: cannot be matched. Drop it.
  kNotAReply, // msg_type is CALL (the backchannel's business) or invalid
  // An unknown reply_stat / accept_stat / reject_stat, or a truncated body.
  // out->xid is valid: the client may fail that call rather than let it time
  // out, or drop the reply and let retransmission sort it out.
  kGarbage,
};
const char* reply_decode_status_name(ReplyDecodeStatus s);

struct ReplyDecodeResult {
  ReplyDecodeStatus status;
  size_t header_len;  // kOk: where the results (SUCCESS) start
};

ReplyDecodeResult decode_reply(std::span<const uint8_t> msg, ReplyHeader* out);

}  // namespace tern::oncrpc
