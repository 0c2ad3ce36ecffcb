// The fixed header (RFC 8166 4.2), its procedures (4.2.4, 4.6) and the
// errors a responder owes for headers it cannot use (4.5.1, 4.5.2).
#include <cstdio>

#include "catalogue.h"

namespace tern::torture {

namespace {

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%x", v);
  return b;
}

// The full valid header used for truncations: one read segment, one write
// chunk, a reply chunk (handles that name nothing: the header is never
// whole, so the responder never reaches them).
std::vector<uint8_t> full_header(uint32_t xid) {
  WireHeader h;
  h.xid = xid;
  h.reads.push_back({64, {0x1234, 16, 0x1000}});
  h.writes.push_back({{0x2345, 64, 0x2000}});
  h.reply = std::vector<rpcrdma::Segment>{{0x3456, 1024, 0x3000}};
  return h.encode();
}

Verdict want_err_vers(const Seen& s, uint32_t xid) {
  if (!s.error(rpcrdma::ErrCode::kVers, xid)) return Verdict::fail(s.describe());
  if (s.hdr.error.vers_low > 1 || s.hdr.error.vers_high < 1 || s.hdr.error.vers_low > s.hdr.error.vers_high)
    return Verdict::fail("the ERR_VERS range does not hold version 1: " + s.describe());
  return Verdict::pass(s.describe());
}

}  // namespace

void add_header_cases(std::vector<Case>& out) {
  // ---- rdma_vers (4.2.2, 4.5.1)
  const uint32_t versions[] = {0, 2, 3, 7, 255, 256, 0x10000, 0x80000000u, 0xffffffffu};
  const std::pair<uint32_t, const char*> procs[] = {{0, "msg"}, {1, "nomsg"}, {2, "msgp"}, {3, "done"}, {9, "proc9"}};
  for (uint32_t v : versions) {
    for (auto [p, pname] : procs) {
      out.push_back({"vers/" + std::to_string(v) + "/" + pname, "RFC 8166 4.5.1", Level::kMust,
                     "a Responder that does not support a message's rdma_vers replies RDMA_ERROR ERR_VERS with "
                     "that message's xid and the low..high range of versions it supports",
                     "RDMA_ERROR ERR_VERS, same xid, range holding 1",
                     {},
                     [v, p](Ctx& c) {
                       uint32_t x = c.xid();
                       WireHeader h;
                       h.xid = x, h.vers = v, h.proc = p;
                       std::vector<uint8_t> m = h.encode();
                       std::vector<uint8_t> call = c.rpc_call(x);
                       m.insert(m.end(), call.begin(), call.end());
                       return want_err_vers(c.exchange(m), x);
                     }});
    }
  }
  // Only xid and rdma_vers: the two words every version shares.
  for (uint32_t v : {0u, 2u, 255u}) {
    for (size_t len : {8u, 12u}) {
      out.push_back({"vers/" + std::to_string(v) + "/short" + std::to_string(len), "RFC 8166 4.5.1", Level::kShould,
                     "rdma_xid and rdma_vers are where every version puts them (RFC 8166 4.1), so a Responder can "
                     "answer ERR_VERS to a message that holds only those",
                     "RDMA_ERROR ERR_VERS, same xid",
                     {},
                     [v, len](Ctx& c) {
                       uint32_t x = c.xid();
                       Xdr m;
                       m.u32(x).u32(v);
                       if (len > 8) m.u32(32);
                       return want_err_vers(c.exchange(m.b), x);
                     }});
    }
  }
  // After ERR_VERS the connection is still the requester's to use.
  out.push_back({"vers/2/then-v1", "RFC 8166 4.5.1", Level::kShould,
                 "ERR_VERS tells the Requester which versions to use; a Requester that then speaks version 1 on "
                 "the same connection is served",
                 "ERR_VERS, then a reply to a version-1 call", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   WireHeader h;
                   h.xid = x, h.vers = 2;
                   Verdict v = want_err_vers(c.exchange(h.encode()), x);
                   if (v.result != Outcome::kPass) return v;
                   if (auto why = c.not_alive()) return Verdict::fail(*why);
                   return Verdict::pass("ERR_VERS, then served");
                 }});

  // ---- rdma_proc (4.2.4) and the deprecated procedures (4.6)
  for (uint32_t p : {5u, 6u, 7u, 100u, 0x7fffffffu, 0xffffffffu}) {
    out.push_back({"proc/unknown-" + hex(p), "RFC 8166 4.5.2", Level::kMust,
                   "an invalid rdma_proc is an XDR error: with a recognised rdma_vers the Responder replies "
                   "RDMA_ERROR ERR_CHUNK",
                   "RDMA_ERROR ERR_CHUNK, same xid", {}, [p](Ctx& c) {
                     uint32_t x = c.xid();
                     WireHeader h;
                     h.xid = x, h.proc = p;
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> call = c.rpc_call(x);
                     m.insert(m.end(), call.begin(), call.end());
                     return c.want_err_chunk(c.exchange(m), x);
                   }});
  }
  const std::pair<uint32_t, uint32_t> msgp[] = {{0, 0}, {4, 1024}, {8192, 4096}};
  for (auto [align, thresh] : msgp) {
    out.push_back({"proc/msgp-" + std::to_string(align) + "-" + std::to_string(thresh), "RFC 8166 4.6.1", Level::kMust,
                   "RDMA_MSGP is deprecated: Requesters do not send it and a Responder that receives it replies "
                   "RDMA_ERROR ERR_CHUNK",
                   "RDMA_ERROR ERR_CHUNK, same xid", {}, [align, thresh](Ctx& c) {
                     uint32_t x = c.xid();
                     WireHeader h;
                     h.xid = x, h.proc = 2;
                     std::vector<uint8_t> m = h.encode();
                     Xdr t;
                     t.u32(align).u32(thresh);
                     m.insert(m.end(), t.b.begin(), t.b.end());
                     std::vector<uint8_t> call = c.rpc_call(x);
                     m.insert(m.end(), call.begin(), call.end());
                     return c.want_err_chunk(c.exchange(m), x);
                   }});
  }
  for (bool lists : {false, true}) {
    out.push_back({std::string("proc/done") + (lists ? "-lists" : ""), "RFC 8166 4.6.2", Level::kShould,
                   "RDMA_DONE is deprecated; a receiver silently discards it and the connection goes on",
                   "nothing, then a reply to a plain call", {}, [lists](Ctx& c) {
                     uint32_t x = c.xid();
                     Xdr m;
                     m.u32(x).u32(1).u32(32).u32(3);
                     if (lists) m.u32(0).u32(0).u32(0);
                     if (!c.rq().post(m.b)) return Verdict::fail("our SEND failed");
                     return c.want_silence_then_alive();
                   }});
  }
  // RDMA_ERROR travels from Responder to Requester only (4.5): a Responder
  // never answers one (two peers could loop), and may drop the connection.
  const std::pair<const char*, std::vector<uint32_t>> errors[] = {
      {"err-chunk", {2}}, {"err-vers", {1, 1, 1}}, {"err-7", {7}}, {"err-empty", {}}};
  for (const auto& [name, body] : errors) {
    out.push_back({std::string("proc/requester-") + name, "RFC 8166 4.5", Level::kShould,
                   "RDMA_ERROR is sent by Responders only; a Responder receiving one does not answer it",
                   "nothing and the connection still serves calls, or a disconnect", {}, [body](Ctx& c) {
                     uint32_t x = c.xid();
                     Xdr m;
                     m.u32(x).u32(1).u32(32).u32(4);
                     for (uint32_t w : body) m.u32(w);
                     if (!c.rq().post(m.b)) return Verdict::fail("our SEND failed");
                     Seen s = c.next(c.cfg().quiet_ms);
                     if (s.gone()) return Verdict::pass(s.describe());
                     if (s.kind != Seen::Kind::kSilence) return Verdict::fail("an error was answered: " + s.describe());
                     if (auto why = c.not_alive()) return Verdict::fail(*why);
                     return Verdict::pass("silence, and the connection still serves calls");
                   }});
  }

  // ---- XDR errors (4.5.2)
  out.push_back({"xdr/nomsg-no-chunks", "RFC 8166 4.5.2", Level::kMust,
                 "RDMA_NOMSG with the Read list, Write list and Reply chunk all absent is an XDR error: "
                 "RDMA_ERROR ERR_CHUNK",
                 "RDMA_ERROR ERR_CHUNK, same xid", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   WireHeader h;
                   h.xid = x, h.proc = 1;
                   return c.want_err_chunk(c.exchange(h.encode()), x);
                 }});
  for (uint32_t delta : {1u, 0x80000000u, 0x12345678u}) {
    out.push_back({"xdr/xid-mismatch-" + hex(delta), "RFC 8166 4.5.2", Level::kMust,
                   "an rdma_xid that differs from the XID of the RPC message it carries is an XDR error: "
                   "RDMA_ERROR ERR_CHUNK",
                   "RDMA_ERROR ERR_CHUNK echoing rdma_xid", {}, [delta](Ctx& c) {
                     uint32_t x = c.xid();
                     WireHeader h;
                     h.xid = x;
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> call = c.rpc_call(x ^ delta);
                     m.insert(m.end(), call.begin(), call.end());
                     return c.want_err_chunk(c.exchange(m), x);
                   }});
  }
  // Discriminators of the optional-data lists that are neither 0 nor 1.
  const std::pair<const char*, int> lists[] = {{"read", 0}, {"write", 1}, {"reply", 2}};
  for (auto [lname, which] : lists) {
    for (uint32_t bad : {2u, 0xffffffffu}) {
      out.push_back({"xdr/" + std::string(lname) + "-bool-" + hex(bad), "RFC 8166 4.5.2", Level::kMust,
                     "an XDR optional-data discriminator other than 0 or 1 does not parse: RDMA_ERROR ERR_CHUNK",
                     "RDMA_ERROR ERR_CHUNK, same xid", {}, [which, bad](Ctx& c) {
                       uint32_t x = c.xid();
                       Xdr m;
                       m.u32(x).u32(1).u32(32).u32(0);
                       for (int i = 0; i < 3; ++i) m.u32(i == which ? bad : 0);
                       std::vector<uint8_t> call = c.rpc_call(x);
                       m.raw(call);
                       return c.want_err_chunk(c.exchange(m.b), x);
                     }});
    }
  }
  // A version-1 header cut short at every word, and at odd lengths.
  size_t full = full_header(0).size();
  for (size_t len = 16; len < full; len += 4) {
    out.push_back({"xdr/truncated-" + std::to_string(len), "RFC 8166 4.5.2", Level::kMust,
                   "a version-1 header that ends inside its chunk lists does not parse: RDMA_ERROR ERR_CHUNK",
                   "RDMA_ERROR ERR_CHUNK, same xid", {}, [len](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> m = full_header(x);
                     m.resize(len);
                     return c.want_err_chunk(c.exchange(m), x);
                   }});
  }
  for (size_t len : {size_t{17}, size_t{18}, size_t{19}, size_t{45}, full - 1}) {
    out.push_back({"xdr/truncated-odd-" + std::to_string(len), "RFC 8166 4.5.2", Level::kMust,
                   "a version-1 header cut short at a length that is not a whole XDR word does not parse: "
                   "RDMA_ERROR ERR_CHUNK",
                   "RDMA_ERROR ERR_CHUNK, same xid", {}, [len](Ctx& c) {
                     uint32_t x = c.xid();
                     std::vector<uint8_t> m = full_header(x);
                     m.resize(len);
                     return c.want_err_chunk(c.exchange(m), x);
                   }});
  }
  for (size_t len : {0u, 1u, 4u, 12u}) {
    out.push_back({"xdr/runt-" + std::to_string(len), "RFC 8166 4.5.2", Level::kMay,
                   "a message too short to hold rdma_xid, rdma_vers and rdma_proc cannot be answered; the "
                   "Responder drops it or the connection",
                   "nothing and the connection still serves calls, or a disconnect", {}, [len](Ctx& c) {
                     std::vector<uint8_t> m = full_header(c.xid());
                     m.resize(len);
                     if (!c.rq().post(m)) return Verdict::fail("our SEND failed");
                     Seen s = c.next(c.cfg().quiet_ms);
                     if (s.gone()) return Verdict::pass(s.describe());
                     if (s.message() && s.hdr.proc == rpcrdma::Proc::kError) {
                       // An error for a message without an xid is harmless if it parses.
                     } else if (s.kind != Seen::Kind::kSilence) {
                       return Verdict::fail("wanted silence, saw " + s.describe());
                     }
                     if (auto why = c.not_alive()) return Verdict::fail(*why);
                     return Verdict::pass("dropped, and the connection still serves calls");
                   }});
  }
  // RDMA_MSG whose RPC message is missing or cut short: there is no XID to
  // match rdma_xid.
  for (size_t rpc_len : {0u, 2u, 4u, 8u}) {
    out.push_back({"xdr/rpc-short-" + std::to_string(rpc_len), "RFC 8166 4.5.2", Level::kShould,
                   "an RDMA_MSG whose RPC message is cut short: without a whole XID it is answered RDMA_ERROR "
                   "ERR_CHUNK; with one, the RPC layer may answer the malformed call or drop it",
                   "RDMA_ERROR ERR_CHUNK, an RPC error reply (XID present), or nothing and the connection still serves calls", {}, [rpc_len](Ctx& c) {
                     uint32_t x = c.xid();
                     WireHeader h;
                     h.xid = x;
                     std::vector<uint8_t> m = h.encode();
                     std::vector<uint8_t> call = c.rpc_call(x);
                     m.insert(m.end(), call.begin(), call.begin() + static_cast<long>(rpc_len));
                     Seen s = c.rq().post(m) ? c.next(c.cfg().quiet_ms) : Seen{Seen::Kind::kSendFailed};
                     if (s.error(rpcrdma::ErrCode::kChunk, x)) return Verdict::pass(s.describe());
                     // Four bytes or more hold the XID, which matches: the RPC
                     // layer may answer the malformed call with an RPC error.
                     if (rpc_len >= 4 && s.message() && !c.bad_reply(s, x)) return Verdict::pass("an RPC error reply: " + s.describe());
                     if (s.kind != Seen::Kind::kSilence) return Verdict::fail(s.describe());
                     if (auto why = c.not_alive()) return Verdict::fail(*why);
                     return Verdict::pass("dropped, and the connection still serves calls");
                   }});
  }
  // An RPC *reply* where a call belongs (a backchannel message a server
  // without a backchannel cannot use).
  out.push_back({"xdr/rpc-reply-as-call", "RFC 8166 4.5.2", Level::kMay,
                 "an RPC reply sent to a Responder that has no backchannel is not a call it can serve; it drops "
                 "it, answers ERR_CHUNK or an RPC error, or drops the connection",
                 "nothing, ERR_CHUNK, an RPC error reply or a disconnect; never a hang or a SUCCESS", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   WireHeader h;
                   h.xid = x;
                   Xdr m;
                   m.raw(h.encode()).u32(x).u32(1).u32(0).u32(0).u32(0).u32(0);
                   if (!c.rq().post(m.b)) return Verdict::fail("our SEND failed");
                   Seen s = c.next(c.cfg().quiet_ms);
                   if (s.gone()) return Verdict::pass(s.describe());
                   // An RPC-level error reply is not forbidden either (RFC 5531 does
                   // not say what a server does with a REPLY); it must not be a
                   // success.
                   if (s.message() && !s.error(rpcrdma::ErrCode::kChunk, x)) {
                     if (auto why = c.bad_reply(s, x)) return Verdict::fail(*why);
                     if (c.accept_stat(s) == 0) return Verdict::fail("a SUCCESS reply to a message that was no call: " + s.describe());
                   }
                   if (auto why = c.not_alive()) return Verdict::fail(*why);
                   return Verdict::pass((s.message() ? s.describe() : std::string("silence")) +
                                        ", and the connection still serves calls");
                 }});

  // ---- rdma_xid (4.2.1)
  for (uint32_t x : {0u, 1u, 0x80000000u, 0xffffffffu}) {
    out.push_back({"xid/value-" + hex(x), "RFC 8166 4.2.1", Level::kMust,
                   "rdma_xid is the RPC XID, any 32-bit value; the reply carries the same value",
                   "a reply with that xid", {}, [x](Ctx& c) { return c.want_reply(c.exchange(c.plain_call(x)), x); }});
  }
  out.push_back({"xid/reuse-sequential", "RFC 8166 4.2.1", Level::kShould,
                 "an XID used again after its reply is a new call (or a retransmission the RPC layer answers "
                 "from its cache): either way it is answered",
                 "a reply to each", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   Verdict v = c.want_reply(c.exchange(c.plain_call(x)), x);
                   if (v.result != Outcome::kPass) return v;
                   return c.want_reply(c.exchange(c.plain_call(x)), x);
                 }});
  out.push_back({"xid/reuse-concurrent", "RFC 8166 4.2.1", Level::kMay,
                 "two calls in flight with one XID look like a retransmission: the Responder may answer one or "
                 "both, but keeps serving",
                 "at least one reply with that xid, then the connection still serves calls", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   if (!c.rq().post(c.plain_call(x)) || !c.rq().post(c.plain_call(x)))
                     return Verdict::fail("our SEND failed");
                   Seen s = c.next();
                   if (auto why = c.bad_reply(s, x)) return Verdict::fail(*why);
                   Seen s2 = c.next(c.cfg().quiet_ms);
                   if (s2.message()) {
                     if (auto why = c.bad_reply(s2, x)) return Verdict::fail("second answer: " + *why);
                   }
                   if (auto why = c.not_alive()) return Verdict::fail(*why);
                   return Verdict::pass(std::string(s2.message() ? "two replies" : "one reply") + ", still serving");
                 }});
}

}  // namespace tern::torture
