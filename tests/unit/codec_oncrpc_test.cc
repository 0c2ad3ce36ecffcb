// ONC RPC v2 call and reply headers (RFC 5531) with AUTH_NONE and AUTH_SYS:
// golden bytes written by hand from the RFC's XDR, round trips, what a server
// must answer for each malformed call, and random input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "oncrpc/oncrpc.h"
#include "xdr/xdr.h"

#include "exact_buf.h"
#include "xdr_mutate.h"

namespace tern::oncrpc {
namespace {

using Bytes = std::vector<uint8_t>;

using tern::testing::ExactBuf;

// ------------------------------------------------------------ helpers

Bytes build(const std::function<void(xdr::XdrWriter&)>& fn) {
  Bytes b(4096);
  xdr::XdrWriter w(b);
  fn(w);
  EXPECT_TRUE(w.ok());
  b.resize(w.bytes_written());
  return b;
}

Bytes encode(const CallHeader& h) {
  Bytes b(call_size(h));
  EXPECT_EQ(encode_call(h, b), b.size());
  return b;
}
Bytes encode(const ReplyHeader& h) {
  Bytes b(reply_size(h));
  EXPECT_EQ(encode_reply(h, b), b.size());
  return b;
}
Bytes encode(const AuthSysParams& p) {
  Bytes b(auth_sys_size(p));
  EXPECT_EQ(encode_auth_sys(p, b), b.size());
  return b;
}

CallDecodeResult decode(std::span<const uint8_t> b, CallHeader* h) {
  ExactBuf eb(b);
  CallDecodeResult r = decode_call(eb.span(), h);
  // Views into eb die with it: keep the tests from looking at freed memory by
  // pointing them at the caller's copy instead.
  auto rebase = [&](std::span<const uint8_t> v) {
    return v.empty() ? v : b.subspan(static_cast<size_t>(v.data() - eb.span().data()), v.size());
  };
  h->cred.body = rebase(h->cred.body);
  h->verf.body = rebase(h->verf.body);
  if (!h->sys.machinename.empty()) {
    auto n = rebase(std::span(reinterpret_cast<const uint8_t*>(h->sys.machinename.data()), h->sys.machinename.size()));
    h->sys.machinename = std::string_view(reinterpret_cast<const char*>(n.data()), n.size());
  }
  return r;
}
ReplyDecodeResult decode(std::span<const uint8_t> b, ReplyHeader* h) {
  ExactBuf eb(b);
  ReplyDecodeResult r = decode_reply(eb.span(), h);
  if (!h->verf.body.empty())
    h->verf.body = b.subspan(static_cast<size_t>(h->verf.body.data() - eb.span().data()), h->verf.body.size());
  return r;
}

bool same_bytes(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

::testing::AssertionResult same_sys(const AuthSysParams& a, const AuthSysParams& b) {
  if (a.stamp != b.stamp || a.machinename != b.machinename || a.uid != b.uid || a.gid != b.gid || a.ngids != b.ngids)
    return ::testing::AssertionFailure() << "authsys_parms differ";
  for (uint32_t i = 0; i < a.ngids; ++i)
    if (a.gids[i] != b.gids[i]) return ::testing::AssertionFailure() << "gid " << i << " differs";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_call(const CallHeader& a, const CallHeader& b) {
  if (a.xid != b.xid || a.prog != b.prog || a.vers != b.vers || a.proc != b.proc)
    return ::testing::AssertionFailure() << "call fields differ";
  if (a.cred.flavor != b.cred.flavor || !same_bytes(a.cred.body, b.cred.body))
    return ::testing::AssertionFailure() << "cred differs";
  if (a.verf.flavor != b.verf.flavor || !same_bytes(a.verf.body, b.verf.body))
    return ::testing::AssertionFailure() << "verf differs";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_reply(const ReplyHeader& a, const ReplyHeader& b) {
  if (a.xid != b.xid || a.stat != b.stat) return ::testing::AssertionFailure() << "xid or reply_stat differ";
  if (a.stat == ReplyStat::kAccepted) {
    if (a.verf.flavor != b.verf.flavor || !same_bytes(a.verf.body, b.verf.body))
      return ::testing::AssertionFailure() << "verf differs";
    if (a.accept != b.accept) return ::testing::AssertionFailure() << "accept_stat differs";
    if (a.accept == AcceptStat::kProgMismatch && (a.mismatch_low != b.mismatch_low || a.mismatch_high != b.mismatch_high))
      return ::testing::AssertionFailure() << "mismatch_info differs";
    return ::testing::AssertionSuccess();
  }
  if (a.reject != b.reject) return ::testing::AssertionFailure() << "reject_stat differs";
  if (a.reject == RejectStat::kRpcMismatch && (a.mismatch_low != b.mismatch_low || a.mismatch_high != b.mismatch_high))
    return ::testing::AssertionFailure() << "mismatch_info differs";
  if (a.reject == RejectStat::kAuthError && a.auth != b.auth) return ::testing::AssertionFailure() << "auth_stat differs";
  return ::testing::AssertionSuccess();
}

AuthSysParams sys_params(std::string_view name, std::initializer_list<uint32_t> gids) {
  AuthSysParams p;
  p.stamp = 7;
  p.machinename = name;
  p.uid = 1000;
  p.gid = 100;
  for (uint32_t g : gids) p.gids[p.ngids++] = g;
  return p;
}

CallHeader nfs_call(uint32_t xid, std::span<const uint8_t> sys_body) {
  CallHeader h;
  h.xid = xid;
  h.prog = 100003;
  h.vers = 3;
  h.proc = 1;
  h.cred = {AuthFlavor::kSys, sys_body};
  h.verf = {AuthFlavor::kNone, {}};
  return h;
}

// ------------------------------------------------------------ golden bytes

TEST(OncRpc, GoldenCallWithAuthSys) {
  // RFC 5531 rpc_msg / call_body, and authsys_parms (Appendix A).
  const Bytes expected{
      0x11, 0x22, 0x33, 0x44,  // xid
      0x00, 0x00, 0x00, 0x00,  // CALL
      0x00, 0x00, 0x00, 0x02,  // rpcvers = 2
      0x00, 0x01, 0x86, 0xa3,  // prog = 100003 (NFS)
      0x00, 0x00, 0x00, 0x03,  // vers = 3
      0x00, 0x00, 0x00, 0x01,  // proc = 1 (GETATTR)
      0x00, 0x00, 0x00, 0x01,  // cred flavor = AUTH_SYS
      0x00, 0x00, 0x00, 0x24,  // cred body: 36 bytes
      0x00, 0x00, 0x00, 0x07,  //   stamp
      0x00, 0x00, 0x00, 0x05,  //   machinename: 5 bytes
      'n',  'o',  'd',  'e',   //
      '1',  0x00, 0x00, 0x00,  //   and 3 of pad
      0x00, 0x00, 0x03, 0xe8,  //   uid = 1000
      0x00, 0x00, 0x00, 0x64,  //   gid = 100
      0x00, 0x00, 0x00, 0x02,  //   2 gids
      0x00, 0x00, 0x00, 0x0a,  //   10
      0x00, 0x00, 0x00, 0x14,  //   20
      0x00, 0x00, 0x00, 0x00,  // verf flavor = AUTH_NONE
      0x00, 0x00, 0x00, 0x00,  // verf body: empty
  };
  AuthSysParams p = sys_params("node1", {10, 20});
  Bytes body = encode(p);
  EXPECT_EQ(body.size(), 36u);
  CallHeader h = nfs_call(0x11223344, body);
  EXPECT_EQ(call_size(h), expected.size());
  EXPECT_EQ(encode(h), expected);

  CallHeader d;
  CallDecodeResult r = decode(expected, &d);
  ASSERT_EQ(r.status, CallDecodeStatus::kOk) << call_decode_status_name(r.status);
  EXPECT_EQ(r.header_len, expected.size());
  EXPECT_TRUE(same_call(d, h));
  EXPECT_TRUE(same_sys(d.sys, p));
}

TEST(OncRpc, GoldenCallWithAuthNone) {
  const Bytes expected{0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0x86, 0xa3, 0, 0, 0, 4,
                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  CallHeader h;
  h.xid = 9;
  h.prog = 100003;
  h.vers = 4;
  h.proc = 0;
  EXPECT_EQ(encode(h), expected);
}

TEST(OncRpc, GoldenReplies) {
  ReplyHeader ok;
  ok.xid = 0x01020304;
  EXPECT_EQ(encode(ok), (Bytes{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));

  ReplyHeader pm = ok;
  pm.accept = AcceptStat::kProgMismatch;
  pm.mismatch_low = 2;
  pm.mismatch_high = 4;
  EXPECT_EQ(encode(pm),
            (Bytes{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 4}));

  ReplyHeader rm;
  CallDecodeResult bad_vers{CallDecodeStatus::kRpcMismatch, 12};
  ASSERT_TRUE(error_reply_for(bad_vers, 0x01020304, &rm));
  EXPECT_EQ(encode(rm), (Bytes{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2}));

  ReplyHeader bc;
  ASSERT_TRUE(error_reply_for({CallDecodeStatus::kBadCred, 0}, 0x01020304, &bc));
  EXPECT_EQ(encode(bc), (Bytes{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}));

  ReplyHeader bv;
  ASSERT_TRUE(error_reply_for({CallDecodeStatus::kBadVerf, 0}, 0x01020304, &bv));
  EXPECT_EQ(encode(bv), (Bytes{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3}));

  ReplyHeader none;
  EXPECT_FALSE(error_reply_for({CallDecodeStatus::kOk, 0}, 1, &none));
  EXPECT_FALSE(error_reply_for({CallDecodeStatus::kDrop, 0}, 1, &none));
  EXPECT_FALSE(error_reply_for({CallDecodeStatus::kNotACall, 0}, 1, &none));
}

// ------------------------------------------------------------ round trips

std::vector<CallHeader> all_calls(std::vector<Bytes>* storage) {
  storage->reserve(16);
  auto keep = [&](Bytes b) -> std::span<const uint8_t> {
    storage->push_back(std::move(b));
    return storage->back();
  };
  std::vector<CallHeader> v;
  CallHeader none;
  none.xid = 1;
  none.prog = 100003;
  none.vers = 4;
  none.proc = 1;
  v.push_back(none);
  v.push_back(nfs_call(2, keep(encode(sys_params("node1", {10, 20})))));
  v.push_back(nfs_call(3, keep(encode(sys_params("", {})))));
  v.push_back(nfs_call(4, keep(encode(sys_params(std::string(255, 'm'), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                                                        15, 16})))));
  {
    CallHeader gss = none;  // a flavor Tern does not interpret travels as bytes
    gss.xid = 5;
    gss.cred = {AuthFlavor::kRpcsecGss, keep(Bytes(kMaxAuthBodySize, 0x5a))};
    gss.verf = {AuthFlavor::kRpcsecGss, keep(Bytes(37, 0xa5))};
    v.push_back(gss);
  }
  {
    CallHeader odd = none;
    odd.xid = 6;
    odd.cred = {static_cast<AuthFlavor>(0x12345678), keep(Bytes{1, 2, 3})};
    odd.verf = {AuthFlavor::kNone, keep(Bytes{9})};  // AUTH_NONE bodies should be empty; tolerated
    v.push_back(odd);
  }
  return v;
}

TEST(OncRpc, RoundTripEveryCall) {
  std::vector<Bytes> storage;
  for (const CallHeader& h : all_calls(&storage)) {
    SCOPED_TRACE(h.xid);
    Bytes b = encode(h);
    const uint8_t args[] = {0, 0, 0, 42};
    b.insert(b.end(), args, args + sizeof args);
    CallHeader d;
    CallDecodeResult r = decode(b, &d);
    ASSERT_EQ(r.status, CallDecodeStatus::kOk) << call_decode_status_name(r.status);
    EXPECT_EQ(r.header_len, call_size(h));
    EXPECT_TRUE(same_call(d, h));
    if (h.cred.flavor == AuthFlavor::kSys) {
      AuthSysParams p;
      ASSERT_TRUE(decode_auth_sys(h.cred.body, &p));
      EXPECT_TRUE(same_sys(d.sys, p));
    }
  }
}

std::vector<ReplyHeader> all_replies() {
  std::vector<ReplyHeader> v;
  static const uint8_t verf_body[] = {1, 2, 3, 4, 5};
  for (AcceptStat a : {AcceptStat::kSuccess, AcceptStat::kProgUnavail, AcceptStat::kProgMismatch,
                       AcceptStat::kProcUnavail, AcceptStat::kGarbageArgs, AcceptStat::kSystemErr}) {
    ReplyHeader h;
    h.xid = 100 + static_cast<uint32_t>(a);
    h.accept = a;
    h.mismatch_low = 2;
    h.mismatch_high = 3;
    v.push_back(h);
  }
  {
    ReplyHeader h;
    h.xid = 200;
    h.verf = {AuthFlavor::kShort, verf_body};
    v.push_back(h);
  }
  {
    ReplyHeader h;
    h.xid = 201;
    h.stat = ReplyStat::kDenied;
    h.reject = RejectStat::kRpcMismatch;
    h.mismatch_low = 2;
    h.mismatch_high = 2;
    v.push_back(h);
  }
  for (uint32_t s = 1; s <= 15; ++s) {  // 15 is beyond the RFC's list: kept as received
    ReplyHeader h;
    h.xid = 300 + s;
    h.stat = ReplyStat::kDenied;
    h.reject = RejectStat::kAuthError;
    h.auth = static_cast<AuthStat>(s);
    v.push_back(h);
  }
  return v;
}

TEST(OncRpc, RoundTripEveryReply) {
  for (const ReplyHeader& h : all_replies()) {
    SCOPED_TRACE(h.xid);
    Bytes b = encode(h);
    ReplyHeader d;
    ReplyDecodeResult r = decode(b, &d);
    ASSERT_EQ(r.status, ReplyDecodeStatus::kOk) << reply_decode_status_name(r.status);
    EXPECT_EQ(r.header_len, b.size());
    EXPECT_TRUE(same_reply(d, h));
  }
}

TEST(OncRpc, SuccessResultsFollowTheHeader) {
  ReplyHeader h;
  h.xid = 5;
  Bytes b = encode(h);
  const size_t hdr = b.size();
  b.push_back(0xab);
  ReplyHeader d;
  ReplyDecodeResult r = decode(b, &d);
  ASSERT_EQ(r.status, ReplyDecodeStatus::kOk);
  EXPECT_EQ(r.header_len, hdr);
}

TEST(OncRpc, EncodeIntoTooSmallBufferWritesNothingPastIt) {
  std::vector<Bytes> storage;
  for (const CallHeader& h : all_calls(&storage)) {
    const size_t need = call_size(h);
    for (size_t cap : {size_t{0}, need / 2, need - 1}) {
      Bytes mem(need + 8, 0xee);
      EXPECT_EQ(encode_call(h, std::span<uint8_t>(mem.data(), cap)), 0u);
      for (size_t i = cap; i < mem.size(); ++i) ASSERT_EQ(mem[i], 0xee);
    }
  }
  for (const ReplyHeader& h : all_replies()) {
    Bytes mem(reply_size(h) - 1);
    EXPECT_EQ(encode_reply(h, mem), 0u);
  }
  AuthSysParams p = sys_params("host", {1});
  Bytes mem(auth_sys_size(p) - 1);
  EXPECT_EQ(encode_auth_sys(p, mem), 0u);
}

TEST(OncRpcDeath, EncoderLimitsAreTheCallersMistake) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  uint8_t buf[1024];
  std::string long_name(256, 'x');
  EXPECT_DEATH(encode_auth_sys(sys_params(long_name, {}), buf), "machinename of 256 bytes");
  AuthSysParams many = sys_params("h", {});
  many.ngids = 17;
  EXPECT_DEATH(encode_auth_sys(many, buf), "17 gids");
  Bytes big(401);
  CallHeader h = nfs_call(1, big);
  EXPECT_DEATH(encode_call(h, buf), "opaque_auth body of 401 bytes");
}

// ------------------------------------------------------------ malformed calls

TEST(OncRpc, CallTruncationAtEveryOffset) {
  std::vector<Bytes> storage;
  for (const CallHeader& h : all_calls(&storage)) {
    Bytes b = encode(h);
    const size_t cred_end = 6 * 4 + 4 + xdr::opaque_var_size(h.cred.body.size());
    for (size_t len = 0; len < b.size(); ++len) {
      SCOPED_TRACE(::testing::Message() << "xid " << h.xid << " len " << len);
      CallHeader d;
      CallDecodeResult r = decode(std::span<const uint8_t>(b.data(), len), &d);
      EXPECT_LE(r.header_len, len);
      CallDecodeStatus want = len < 8          ? CallDecodeStatus::kDrop
                              : len < cred_end ? CallDecodeStatus::kBadCred
                                               : CallDecodeStatus::kBadVerf;
      EXPECT_EQ(r.status, want) << call_decode_status_name(r.status);
      if (len >= 8) {
        EXPECT_EQ(d.xid, h.xid);
      }
    }
  }
}

TEST(OncRpc, OtherRpcVersionIsRpcMismatch) {
  for (uint32_t v : {0u, 1u, 3u, 0xffffffffu}) {
    // Only xid, CALL and rpcvers: nothing after rpcvers is needed to answer.
    Bytes b = build([&](xdr::XdrWriter& w) {
      w.put_u32(0xabcd);
      w.put_u32(0);
      w.put_u32(v);
    });
    CallHeader d;
    CallDecodeResult r = decode(b, &d);
    EXPECT_EQ(r.status, CallDecodeStatus::kRpcMismatch) << v;
    ReplyHeader rep;
    ASSERT_TRUE(error_reply_for(r, d.xid, &rep));
    EXPECT_EQ(rep.xid, 0xabcdu);
    EXPECT_EQ(rep.stat, ReplyStat::kDenied);
    EXPECT_EQ(rep.reject, RejectStat::kRpcMismatch);
    EXPECT_EQ(rep.mismatch_low, 2u);
    EXPECT_EQ(rep.mismatch_high, 2u);
  }
}

TEST(OncRpc, NotACall) {
  for (uint32_t mtype : {1u, 2u, 0xffffffffu}) {
    Bytes b = build([&](xdr::XdrWriter& w) {
      w.put_u32(1);
      w.put_u32(mtype);
    });
    CallHeader d;
    EXPECT_EQ(decode(b, &d).status, CallDecodeStatus::kNotACall) << mtype;
  }
}

// A call with AUTH_SYS whose body the test writes word by word.
Bytes call_with_cred(uint32_t flavor, const std::function<void(xdr::XdrWriter&)>& body, bool raw_len = false,
                     uint32_t len = 0) {
  Bytes cred = build(body);
  return build([&](xdr::XdrWriter& w) {
    w.put_u32(0x77);
    w.put_u32(0);
    w.put_u32(2);
    w.put_u32(100003);
    w.put_u32(3);
    w.put_u32(0);
    w.put_u32(flavor);
    if (raw_len) {
      w.put_u32(len);
      w.put_opaque_fixed(cred);
    } else {
      w.put_opaque_var(cred);
    }
    w.put_u32(0);
    w.put_u32(0);
  });
}

void expect_bad_cred(const Bytes& b) {
  CallHeader d;
  CallDecodeResult r = decode(b, &d);
  EXPECT_EQ(r.status, CallDecodeStatus::kBadCred) << call_decode_status_name(r.status);
  ReplyHeader rep;
  ASSERT_TRUE(error_reply_for(r, d.xid, &rep));
  EXPECT_EQ(rep.reject, RejectStat::kAuthError);
  EXPECT_EQ(rep.auth, AuthStat::kBadCred);
  EXPECT_EQ(rep.xid, 0x77u);
}

void put_sys(xdr::XdrWriter& w, std::string_view name_bytes, uint32_t name_len, uint32_t ngids, uint32_t gids_present) {
  w.put_u32(1);
  w.put_u32(name_len);
  w.put_opaque_fixed(std::span(reinterpret_cast<const uint8_t*>(name_bytes.data()), name_bytes.size()));
  w.put_u32(0);
  w.put_u32(0);
  w.put_u32(ngids);
  for (uint32_t i = 0; i < gids_present; ++i) w.put_u32(i);
}

TEST(OncRpc, AuthSysLimits) {
  const std::string n255(255, 'a'), n256(256, 'a');
  // At the limits: accepted.
  {
    CallHeader d;
    Bytes ok = call_with_cred(1, [&](xdr::XdrWriter& w) { put_sys(w, n255, 255, 16, 16); });
    ASSERT_EQ(decode(ok, &d).status, CallDecodeStatus::kOk);
    EXPECT_EQ(d.sys.machinename.size(), 255u);
    EXPECT_EQ(d.sys.ngids, 16u);
  }
  // machinename over 255.
  expect_bad_cred(call_with_cred(1, [&](xdr::XdrWriter& w) { put_sys(w, n256, 256, 0, 0); }));
  // More than 16 gids, present or merely claimed.
  expect_bad_cred(call_with_cred(1, [&](xdr::XdrWriter& w) { put_sys(w, "h", 1, 17, 17); }));
  expect_bad_cred(call_with_cred(1, [&](xdr::XdrWriter& w) { put_sys(w, "h", 1, 0xffffffff, 0); }));
  // A name length running past the body.
  expect_bad_cred(call_with_cred(1, [&](xdr::XdrWriter& w) { put_sys(w, "h", 0xfffffffc, 0, 0); }));
  // Fewer gids than claimed.
  expect_bad_cred(call_with_cred(1, [&](xdr::XdrWriter& w) { put_sys(w, "h", 1, 3, 2); }));
  // Bytes left over after the gids.
  expect_bad_cred(call_with_cred(1, [&](xdr::XdrWriter& w) {
    put_sys(w, "h", 1, 1, 1);
    w.put_u32(0);
  }));
  // An empty AUTH_SYS body.
  expect_bad_cred(call_with_cred(1, [](xdr::XdrWriter&) {}));
}

TEST(OncRpc, CredentialOver400Bytes) {
  const Bytes body400(400, 1), body401(401, 1);
  CallHeader d;
  Bytes ok = call_with_cred(6, [&](xdr::XdrWriter& w) { w.put_opaque_fixed(body400); });
  EXPECT_EQ(decode(ok, &d).status, CallDecodeStatus::kOk);
  // Even with all 401 bytes present, and for AUTH_NONE too.
  expect_bad_cred(call_with_cred(6, [&](xdr::XdrWriter& w) { w.put_opaque_fixed(body401); }));
  expect_bad_cred(call_with_cred(0, [&](xdr::XdrWriter& w) { w.put_opaque_fixed(body401); }));
  // An absurd length with nothing behind it.
  expect_bad_cred(call_with_cred(0, [](xdr::XdrWriter&) {}, true, 0xffffffff));
}

TEST(OncRpc, VerifierOver400Bytes) {
  for (uint32_t len : {401u, 0xffffffffu}) {
    Bytes b = build([&](xdr::XdrWriter& w) {
      w.put_u32(0x78);
      w.put_u32(0);
      w.put_u32(2);
      w.put_u32(1);
      w.put_u32(1);
      w.put_u32(1);
      w.put_u32(0);
      w.put_u32(0);
      w.put_u32(0);
      w.put_u32(len);
      w.put_opaque_fixed(Bytes(404, 0));
    });
    CallHeader d;
    CallDecodeResult r = decode(b, &d);
    EXPECT_EQ(r.status, CallDecodeStatus::kBadVerf) << len;
    ReplyHeader rep;
    ASSERT_TRUE(error_reply_for(r, d.xid, &rep));
    EXPECT_EQ(rep.auth, AuthStat::kBadVerf);
  }
}

TEST(OncRpc, DecodeAuthSysDirectly) {
  AuthSysParams p = sys_params("client.example", {4, 5, 6});
  Bytes b = encode(p);
  AuthSysParams d;
  ASSERT_TRUE(decode_auth_sys(b, &d));
  EXPECT_TRUE(same_sys(d, p));
  for (size_t len = 0; len < b.size(); ++len) {
    ExactBuf eb(std::span<const uint8_t>(b.data(), len));
    EXPECT_FALSE(decode_auth_sys(eb.span(), &d)) << len;
  }
}

// ------------------------------------------------------------ malformed replies

TEST(OncRpc, ReplyTruncationAtEveryOffset) {
  for (const ReplyHeader& h : all_replies()) {
    Bytes b = encode(h);
    for (size_t len = 0; len < b.size(); ++len) {
      ReplyHeader d;
      ReplyDecodeResult r = decode(std::span<const uint8_t>(b.data(), len), &d);
      EXPECT_LE(r.header_len, len);
      EXPECT_EQ(r.status, len < 8 ? ReplyDecodeStatus::kDrop : ReplyDecodeStatus::kGarbage)
          << "xid " << h.xid << " len " << len;
    }
  }
}

TEST(OncRpc, BadReplyDiscriminants) {
  auto reply_words = [](std::initializer_list<uint32_t> words) {
    return build([&](xdr::XdrWriter& w) {
      for (uint32_t x : words) w.put_u32(x);
    });
  };
  ReplyHeader d;
  // reply_stat 2.
  EXPECT_EQ(decode(reply_words({1, 1, 2, 0, 0, 0}), &d).status, ReplyDecodeStatus::kGarbage);
  // accept_stat 6 and all ones.
  EXPECT_EQ(decode(reply_words({1, 1, 0, 0, 0, 6}), &d).status, ReplyDecodeStatus::kGarbage);
  EXPECT_EQ(decode(reply_words({1, 1, 0, 0, 0, 0xffffffff}), &d).status, ReplyDecodeStatus::kGarbage);
  // reject_stat 2.
  EXPECT_EQ(decode(reply_words({1, 1, 1, 2, 0, 0}), &d).status, ReplyDecodeStatus::kGarbage);
  // verifier over 400 bytes.
  EXPECT_EQ(decode(reply_words({1, 1, 0, 0, 401}), &d).status, ReplyDecodeStatus::kGarbage);
  // A CALL is not a reply.
  EXPECT_EQ(decode(reply_words({1, 0, 2, 1, 1, 1}), &d).status, ReplyDecodeStatus::kNotAReply);
  EXPECT_EQ(decode(reply_words({1, 7}), &d).status, ReplyDecodeStatus::kNotAReply);
}

// ------------------------------------------------------------ random input

const uint32_t kNasty[] = {0, 1, 2, 3, 6, 16, 17, 255, 256, 400, 401, 0x80000000, 0xfffffffc, 0xffffffff};
Bytes mutate(Bytes b, std::mt19937_64& rng) { return tern::testing::mutate_xdr(std::move(b), rng, kNasty); }

TEST(OncRpc, RandomAndMutatedCalls) {
  std::mt19937_64 rng(5531);
  std::vector<Bytes> storage;
  std::vector<Bytes> seeds;
  for (const CallHeader& h : all_calls(&storage)) seeds.push_back(encode(h));
  int ok = 0;
  int seen[6] = {};
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b = mutate(seeds[rng() % seeds.size()], rng);
    if (iter % 8 == 0) {
      b.resize(rng() % 96);
      for (auto& x : b) x = static_cast<uint8_t>(rng() % 2 ? rng() : 0);
    }
    CallHeader d;
    CallDecodeResult r = decode(b, &d);
    ASSERT_LE(r.header_len, b.size());
    ++seen[static_cast<int>(r.status)];
    ReplyHeader rep;
    bool answer = error_reply_for(r, d.xid, &rep);
    switch (r.status) {
      case CallDecodeStatus::kOk: {
        ++ok;
        ASSERT_FALSE(answer);
        ASSERT_EQ(call_size(d), r.header_len);
        if (d.cred.flavor == AuthFlavor::kSys) {
          ASSERT_EQ(auth_sys_size(d.sys), d.cred.body.size());
        }
        // Decoding what we encode from the decoded header gives it back (bytes
        // may differ only in XDR pad, which the decoder does not check).
        Bytes again = encode(d);
        CallHeader e;
        ASSERT_EQ(decode(again, &e).status, CallDecodeStatus::kOk);
        ASSERT_TRUE(same_call(e, d));
        break;
      }
      case CallDecodeStatus::kDrop:
      case CallDecodeStatus::kNotACall: ASSERT_FALSE(answer); break;
      case CallDecodeStatus::kRpcMismatch:
      case CallDecodeStatus::kBadCred:
      case CallDecodeStatus::kBadVerf: {
        ASSERT_TRUE(answer);
        Bytes wire = encode(rep);
        ReplyHeader back;
        ASSERT_EQ(decode(wire, &back).status, ReplyDecodeStatus::kOk);
        ASSERT_EQ(back.xid, d.xid);
        ASSERT_EQ(back.stat, ReplyStat::kDenied);
        break;
      }
    }
  }
  EXPECT_GT(ok, 5000);
  for (int st = 0; st < 6; ++st) EXPECT_GT(seen[st], 100) << call_decode_status_name(static_cast<CallDecodeStatus>(st));
}

TEST(OncRpc, RandomAndMutatedReplies) {
  std::mt19937_64 rng(5532);
  std::vector<Bytes> seeds;
  for (const ReplyHeader& h : all_replies()) seeds.push_back(encode(h));
  int ok = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b = mutate(seeds[rng() % seeds.size()], rng);
    ReplyHeader d;
    ReplyDecodeResult r = decode(b, &d);
    ASSERT_LE(r.header_len, b.size());
    if (r.status == ReplyDecodeStatus::kOk) {
      ++ok;
      ASSERT_EQ(reply_size(d), r.header_len);
      ReplyHeader e;
      Bytes again = encode(d);
      ASSERT_EQ(decode(again, &e).status, ReplyDecodeStatus::kOk);
      ASSERT_TRUE(same_reply(e, d));
    }
  }
  EXPECT_GT(ok, 5000);
}

TEST(OncRpc, RandomAuthSysBodies) {
  std::mt19937_64 rng(5533);
  const Bytes seed = encode(sys_params("seed-host", {1, 2, 3}));
  int ok = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes b = mutate(seed, rng);
    ExactBuf eb(b);
    AuthSysParams d;
    if (decode_auth_sys(eb.span(), &d)) {
      ++ok;
      ASSERT_LE(d.machinename.size(), kMaxMachineNameSize);
      ASSERT_LE(d.ngids, kMaxAuthSysGids);
      ASSERT_EQ(auth_sys_size(d), b.size());
      AuthSysParams e;
      Bytes again = encode(d);
      ASSERT_TRUE(decode_auth_sys(again, &e));
      ASSERT_TRUE(same_sys(e, d));
    }
  }
  EXPECT_GT(ok, 5000);
}

}  // namespace
}  // namespace tern::oncrpc
