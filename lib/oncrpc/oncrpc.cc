#include "oncrpc/oncrpc.h"

#include "base/check.h"
#include "xdr/xdr.h"

namespace tern::oncrpc {
namespace {

using xdr::XdrReader;
using xdr::XdrWriter;

size_t opaque_auth_size(const OpaqueAuth& a) { return 4 + xdr::opaque_var_size(a.body.size()); }

void put_opaque_auth(XdrWriter& w, const OpaqueAuth& a) {
  TERN_REQUIRE(a.body.size() <= kMaxAuthBodySize, "opaque_auth body of %zu bytes (at most %zu)", a.body.size(),
               kMaxAuthBodySize);
  w.put_u32(static_cast<uint32_t>(a.flavor));
  w.put_opaque_var(a.body);
}

// False when truncated or the body is over 400 bytes.
bool get_opaque_auth(XdrReader& r, OpaqueAuth* a) {
  a->flavor = static_cast<AuthFlavor>(r.get_u32());
  a->body = r.get_opaque_var(kMaxAuthBodySize);
  return r.ok();
}

}  // namespace

// ------------------------------------------------------------------- AUTH_SYS

size_t auth_sys_size(const AuthSysParams& p) {
  return 4 + xdr::opaque_var_size(p.machinename.size()) + 4 + 4 + 4 + size_t{p.ngids} * 4;
}

size_t encode_auth_sys(const AuthSysParams& p, std::span<uint8_t> out) {
  TERN_REQUIRE(p.machinename.size() <= kMaxMachineNameSize, "machinename of %zu bytes (at most %zu)",
               p.machinename.size(), kMaxMachineNameSize);
  TERN_REQUIRE(p.ngids <= kMaxAuthSysGids, "%u gids (at most %zu)", p.ngids, kMaxAuthSysGids);
  XdrWriter w(out);
  w.put_u32(p.stamp);
  w.put_string(p.machinename);
  w.put_u32(p.uid);
  w.put_u32(p.gid);
  w.put_u32(p.ngids);
  for (uint32_t i = 0; i < p.ngids; ++i) w.put_u32(p.gids[i]);
  return w.ok() ? w.bytes_written() : 0;
}

bool decode_auth_sys(std::span<const uint8_t> body, AuthSysParams* out) {
  XdrReader r(body);
  out->stamp = r.get_u32();
  out->machinename = r.get_string(kMaxMachineNameSize);
  out->uid = r.get_u32();
  out->gid = r.get_u32();
  uint32_t n = r.get_u32();
  if (!r.ok() || n > kMaxAuthSysGids) return false;
  for (uint32_t i = 0; i < n; ++i) out->gids[i] = r.get_u32();
  out->ngids = n;
  // The body is exactly one authsys_parms: leftover bytes mean the sender and
  // we disagree about its layout.
  return r.ok() && r.remaining() == 0;
}

// ------------------------------------------------------------------- calls

size_t call_size(const CallHeader& h) { return 6 * 4 + opaque_auth_size(h.cred) + opaque_auth_size(h.verf); }

size_t encode_call(const CallHeader& h, std::span<uint8_t> out) {
  XdrWriter w(out);
  w.put_u32(h.xid);
  w.put_u32(static_cast<uint32_t>(MsgType::kCall));
  w.put_u32(kRpcVersion);
  w.put_u32(h.prog);
  w.put_u32(h.vers);
  w.put_u32(h.proc);
  put_opaque_auth(w, h.cred);
  put_opaque_auth(w, h.verf);
  return w.ok() ? w.bytes_written() : 0;
}

const char* call_decode_status_name(CallDecodeStatus s) {
  switch (s) {
    case CallDecodeStatus::kOk: return "ok";
    case CallDecodeStatus::kDrop: return "drop";
    case CallDecodeStatus::kNotACall: return "not-a-call";
    case CallDecodeStatus::kRpcMismatch: return "rpc-mismatch";
    case CallDecodeStatus::kBadCred: return "bad-cred";
    case CallDecodeStatus::kBadVerf: return "bad-verf";
  }
  return "?";
}

CallDecodeResult decode_call(std::span<const uint8_t> msg, CallHeader* h) {
  XdrReader r(msg);
  h->xid = r.get_u32();
  uint32_t mtype = r.get_u32();
  if (!r.ok()) return {CallDecodeStatus::kDrop, 0};
  if (mtype != static_cast<uint32_t>(MsgType::kCall)) return {CallDecodeStatus::kNotACall, r.position()};
  uint32_t rpcvers = r.get_u32();
  if (r.ok() && rpcvers != kRpcVersion) return {CallDecodeStatus::kRpcMismatch, r.position()};
  h->prog = r.get_u32();
  h->vers = r.get_u32();
  h->proc = r.get_u32();
  if (!get_opaque_auth(r, &h->cred)) return {CallDecodeStatus::kBadCred, r.position()};
  if (h->cred.flavor == AuthFlavor::kSys && !decode_auth_sys(h->cred.body, &h->sys))
    return {CallDecodeStatus::kBadCred, r.position()};
  if (!get_opaque_auth(r, &h->verf)) return {CallDecodeStatus::kBadVerf, r.position()};
  return {CallDecodeStatus::kOk, r.position()};
}

// ------------------------------------------------------------------- replies

size_t reply_size(const ReplyHeader& h) {
  size_t n = 3 * 4;  // xid, REPLY, reply_stat
  if (h.stat == ReplyStat::kAccepted) {
    n += opaque_auth_size(h.verf) + 4;
    if (h.accept == AcceptStat::kProgMismatch) n += 8;
  } else {
    n += 4 + (h.reject == RejectStat::kRpcMismatch ? 8 : 4);
  }
  return n;
}

size_t encode_reply(const ReplyHeader& h, std::span<uint8_t> out) {
  XdrWriter w(out);
  w.put_u32(h.xid);
  w.put_u32(static_cast<uint32_t>(MsgType::kReply));
  w.put_u32(static_cast<uint32_t>(h.stat));
  if (h.stat == ReplyStat::kAccepted) {
    put_opaque_auth(w, h.verf);
    w.put_u32(static_cast<uint32_t>(h.accept));
    if (h.accept == AcceptStat::kProgMismatch) {
      w.put_u32(h.mismatch_low);
      w.put_u32(h.mismatch_high);
    }
  } else {
    TERN_REQUIRE(h.stat == ReplyStat::kDenied, "reply_stat %u", static_cast<uint32_t>(h.stat));
    w.put_u32(static_cast<uint32_t>(h.reject));
    if (h.reject == RejectStat::kRpcMismatch) {
      w.put_u32(h.mismatch_low);
      w.put_u32(h.mismatch_high);
    } else {
      TERN_REQUIRE(h.reject == RejectStat::kAuthError, "reject_stat %u", static_cast<uint32_t>(h.reject));
      w.put_u32(static_cast<uint32_t>(h.auth));
    }
  }
  return w.ok() ? w.bytes_written() : 0;
}

bool error_reply_for(const CallDecodeResult& r, uint32_t xid, ReplyHeader* out) {
  *out = ReplyHeader();
  out->xid = xid;
  out->stat = ReplyStat::kDenied;
  switch (r.status) {
    case CallDecodeStatus::kRpcMismatch:
      out->reject = RejectStat::kRpcMismatch;
      out->mismatch_low = kRpcVersion;
      out->mismatch_high = kRpcVersion;
      return true;
    case CallDecodeStatus::kBadCred:
      out->reject = RejectStat::kAuthError;
      out->auth = AuthStat::kBadCred;
      return true;
    case CallDecodeStatus::kBadVerf:
      out->reject = RejectStat::kAuthError;
      out->auth = AuthStat::kBadVerf;
      return true;
    case CallDecodeStatus::kOk:
    case CallDecodeStatus::kDrop:
    case CallDecodeStatus::kNotACall: return false;
  }
  return false;
}

const char* reply_decode_status_name(ReplyDecodeStatus s) {
  switch (s) {
    case ReplyDecodeStatus::kOk: return "ok";
    case ReplyDecodeStatus::kDrop: return "drop";
    case ReplyDecodeStatus::kNotAReply: return "not-a-reply";
    case ReplyDecodeStatus::kGarbage: return "garbage";
  }
  return "?";
}

ReplyDecodeResult decode_reply(std::span<const uint8_t> msg, ReplyHeader* h) {
  XdrReader r(msg);
  h->xid = r.get_u32();
  uint32_t mtype = r.get_u32();
  if (!r.ok()) return {ReplyDecodeStatus::kDrop, 0};
  if (mtype != static_cast<uint32_t>(MsgType::kReply)) return {ReplyDecodeStatus::kNotAReply, r.position()};
  const ReplyDecodeResult garbage{ReplyDecodeStatus::kGarbage, r.position()};
  uint32_t stat = r.get_u32();
  if (!r.ok()) return garbage;
  if (stat == static_cast<uint32_t>(ReplyStat::kAccepted)) {
    h->stat = ReplyStat::kAccepted;
    if (!get_opaque_auth(r, &h->verf)) return garbage;
    uint32_t accept = r.get_u32();
    if (!r.ok() || accept > static_cast<uint32_t>(AcceptStat::kSystemErr)) return garbage;
    h->accept = static_cast<AcceptStat>(accept);
    if (h->accept == AcceptStat::kProgMismatch) {
      h->mismatch_low = r.get_u32();
      h->mismatch_high = r.get_u32();
      if (!r.ok()) return garbage;
    }
    return {ReplyDecodeStatus::kOk, r.position()};
  }
  if (stat == static_cast<uint32_t>(ReplyStat::kDenied)) {
    h->stat = ReplyStat::kDenied;
    uint32_t reject = r.get_u32();
    if (!r.ok()) return garbage;
    if (reject == static_cast<uint32_t>(RejectStat::kRpcMismatch)) {
      h->reject = RejectStat::kRpcMismatch;
      h->mismatch_low = r.get_u32();
      h->mismatch_high = r.get_u32();
    } else if (reject == static_cast<uint32_t>(RejectStat::kAuthError)) {
      h->reject = RejectStat::kAuthError;
      h->auth = static_cast<AuthStat>(r.get_u32());
    } else {
      return garbage;
    }
    if (!r.ok()) return garbage;
    return {ReplyDecodeStatus::kOk, r.position()};
  }
  return garbage;
}

}  // namespace tern::oncrpc
