// ONC RPC v2 headers (RFC 5531) as a peer sends them: every input goes
// through the call decoder (what a server runs), the reply decoder (what a
// client runs) and the AUTH_SYS decoder, and whatever decodes must encode back
// to a header of the same length that decodes to the same values.
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "fuzz_check.h"
#include "oncrpc/oncrpc.h"

namespace {

namespace oc = tern::oncrpc;

bool same_auth(const oc::OpaqueAuth& a, const oc::OpaqueAuth& b) {
  return a.flavor == b.flavor && a.body.size() == b.body.size() &&
         (a.body.empty() || std::memcmp(a.body.data(), b.body.data(), a.body.size()) == 0);
}

bool same_sys(const oc::AuthSysParams& a, const oc::AuthSysParams& b) {
  if (a.stamp != b.stamp || a.machinename != b.machinename || a.uid != b.uid || a.gid != b.gid ||
      a.ngids != b.ngids)
    return false;
  for (uint32_t i = 0; i < a.ngids; ++i)
    if (a.gids[i] != b.gids[i]) return false;
  return true;
}

void check_sys(const oc::AuthSysParams& p, std::span<const uint8_t> body) {
  FUZZ_CHECK(p.machinename.size() <= oc::kMaxMachineNameSize, "machinename of %zu bytes", p.machinename.size());
  FUZZ_CHECK(p.ngids <= oc::kMaxAuthSysGids, "%u gids", p.ngids);
  FUZZ_CHECK_WITHIN(p.machinename, body.data(), body.size());
  uint8_t buf[oc::kMaxAuthSysBodySize];
  size_t n = oc::encode_auth_sys(p, buf);
  FUZZ_CHECK(n == oc::auth_sys_size(p) && n == body.size(), "AUTH_SYS re-encoded to %zu bytes from %zu", n,
             body.size());
  oc::AuthSysParams q;
  FUZZ_CHECK(oc::decode_auth_sys(std::span<const uint8_t>(buf, n), &q) && same_sys(p, q),
             "AUTH_SYS round trip changed the credential");
}

void call(std::span<const uint8_t> msg) {
  oc::CallHeader h;
  oc::CallDecodeResult d = oc::decode_call(msg, &h);
  FUZZ_CHECK(d.header_len <= msg.size(), "header_len %zu of %zu", d.header_len, msg.size());
  oc::ReplyHeader err;
  if (oc::error_reply_for(d, h.xid, &err)) {
    uint8_t b[64];
    size_t n = oc::encode_reply(err, b);
    FUZZ_CHECK(n != 0 && n == oc::reply_size(err), "error reply for %s did not encode",
               oc::call_decode_status_name(d.status));
  }
  if (d.status != oc::CallDecodeStatus::kOk) return;
  FUZZ_CHECK_WITHIN(h.cred.body, msg.data(), msg.size());
  FUZZ_CHECK_WITHIN(h.verf.body, msg.data(), msg.size());
  FUZZ_CHECK(h.cred.body.size() <= oc::kMaxAuthBodySize && h.verf.body.size() <= oc::kMaxAuthBodySize,
             "auth bodies of %zu and %zu bytes", h.cred.body.size(), h.verf.body.size());
  if (h.cred.flavor == oc::AuthFlavor::kSys) check_sys(h.sys, h.cred.body);

  uint8_t buf[24 + 2 * (8 + oc::kMaxAuthBodySize)];
  size_t n = oc::encode_call(h, buf);
  FUZZ_CHECK(n == oc::call_size(h) && n == d.header_len, "call re-encoded to %zu bytes from %zu", n, d.header_len);
  oc::CallHeader h2;
  oc::CallDecodeResult d2 = oc::decode_call(std::span<const uint8_t>(buf, n), &h2);
  FUZZ_CHECK(d2.status == oc::CallDecodeStatus::kOk && d2.header_len == n, "re-encoded call decodes as %s",
             oc::call_decode_status_name(d2.status));
  FUZZ_CHECK(h.xid == h2.xid && h.prog == h2.prog && h.vers == h2.vers && h.proc == h2.proc &&
                 same_auth(h.cred, h2.cred) && same_auth(h.verf, h2.verf),
             "call round trip changed the header");
}

void reply(std::span<const uint8_t> msg) {
  oc::ReplyHeader h;
  oc::ReplyDecodeResult d = oc::decode_reply(msg, &h);
  FUZZ_CHECK(d.header_len <= msg.size(), "header_len %zu of %zu", d.header_len, msg.size());
  if (d.status != oc::ReplyDecodeStatus::kOk) return;
  if (h.stat == oc::ReplyStat::kAccepted) {
    FUZZ_CHECK_WITHIN(h.verf.body, msg.data(), msg.size());
    FUZZ_CHECK(h.verf.body.size() <= oc::kMaxAuthBodySize, "verifier of %zu bytes", h.verf.body.size());
    FUZZ_CHECK(h.accept <= oc::AcceptStat::kSystemErr, "accept_stat %u", static_cast<uint32_t>(h.accept));
  } else {
    FUZZ_CHECK(h.stat == oc::ReplyStat::kDenied, "reply_stat %u", static_cast<uint32_t>(h.stat));
    FUZZ_CHECK(h.reject == oc::RejectStat::kRpcMismatch || h.reject == oc::RejectStat::kAuthError,
               "reject_stat %u", static_cast<uint32_t>(h.reject));
  }
  uint8_t buf[32 + oc::kMaxAuthBodySize];
  size_t n = oc::encode_reply(h, buf);
  FUZZ_CHECK(n == oc::reply_size(h) && n == d.header_len, "reply re-encoded to %zu bytes from %zu", n,
             d.header_len);
  oc::ReplyHeader h2;
  oc::ReplyDecodeResult d2 = oc::decode_reply(std::span<const uint8_t>(buf, n), &h2);
  FUZZ_CHECK(d2.status == oc::ReplyDecodeStatus::kOk && d2.header_len == n, "re-encoded reply decodes as %s",
             oc::reply_decode_status_name(d2.status));
  bool same = h.xid == h2.xid && h.stat == h2.stat;
  if (h.stat == oc::ReplyStat::kAccepted) {
    same = same && same_auth(h.verf, h2.verf) && h.accept == h2.accept;
    if (h.accept == oc::AcceptStat::kProgMismatch)
      same = same && h.mismatch_low == h2.mismatch_low && h.mismatch_high == h2.mismatch_high;
  } else if (h.reject == oc::RejectStat::kRpcMismatch) {
    same = same && h2.reject == h.reject && h.mismatch_low == h2.mismatch_low && h.mismatch_high == h2.mismatch_high;
  } else {
    same = same && h2.reject == h.reject && h.auth == h2.auth;
  }
  FUZZ_CHECK(same, "reply round trip changed the header");
}

void auth_sys(std::span<const uint8_t> body) {
  oc::AuthSysParams p;
  if (oc::decode_auth_sys(body, &p)) check_sys(p, body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> msg(data, size);
  call(msg);
  reply(msg);
  auth_sys(msg);
  return 0;
}
