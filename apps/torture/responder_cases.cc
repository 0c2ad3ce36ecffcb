// The responder catalogue: reply shapes, legal and illegal, that a raw
// responder sends Tern's client, and what the client must do with each.
// Every case also gets the runner's checks (responder.h): each call
// completes exactly once, memory the client did not offer is untouched, and
// nothing is reachable or held at idle.
//
// The sections and levels are read from RFC 8166 / RFC 8797 as for the
// requester catalogue (docs/conformance.md says how far to trust them). The
// level is the RFC's for the rule the responder keeps or breaks; what the
// client must do when it is broken is the engine's contract (every call
// completes exactly once, with a named status; the peer reaches nothing it
// was not offered), checked at every level.
#include <algorithm>
#include <cstring>
#include <tuple>

#include "oncrpc/oncrpc.h"
#include "responder.h"

namespace tern::torture {

namespace {

using rpc::CallStatus;
using rawpeer::put32;
constexpr uint32_t kNobody = 0x00424242;

Verdict verdict(const std::optional<std::string>& why, std::string ok) {
  return why ? Verdict::fail(*why) : Verdict::pass(std::move(ok));
}

// Issues a call of shape s, takes it at the responder and hands both to f.
Verdict with_call(RCtx& c, Shape s, const std::function<Verdict(Pending*, TakenCall&)>& f) {
  Pending* p = nullptr;
  std::string why;
  auto tc = c.issue_take(s, &p, &why);
  if (!tc) return Verdict::fail(why);
  return f(p, *tc);
}

// Pulls what a read chunk offers, as a responder does before it answers.
bool pull(RCtx& c, const TakenCall& tc, int s = 0) {
  if (tc.read.handle == 0) return true;
  std::vector<uint8_t> got(std::min<uint32_t>(tc.read.length, 32 * 1024));
  return c.srv(s).read(got.data(), static_cast<uint32_t>(got.size()), tc.read.handle, tc.read.offset) ==
         rdma::WcStatus::kSuccess;
}

// Answers the first call with a grant, then keeps `n` calls coming and
// checks that the client never has more outstanding than the grants it was
// given allow: on arrival, a call's count (with those not yet answered)
// stays within the larger of the last two grants (the one it was sent
// under may still be in flight), taken as the client reads it: 0 as 1,
// and never more than its own limit.
Verdict credit_run(RCtx& c, const std::vector<uint32_t>& grants, uint32_t client_limit, int n = 12) {
  auto eff = [&](uint32_t g) { return std::clamp<uint32_t>(g, 1, client_limit); };
  Pending* first = nullptr;
  std::string why;
  auto tc = c.issue_take(Shape::kPlain, &first, &why);
  if (!tc) return Verdict::fail(why);
  uint32_t prev = 1, cur = eff(grants[0]);
  if (!c.send(c.msg_reply(*tc, grants[0]))) return Verdict::fail("could not send");
  if (auto w = c.want_ok(first)) return Verdict::fail(*w);
  std::vector<Pending*> ps;
  for (int i = 0; i < n; ++i) {
    Pending* p = c.issue(Shape::kPlain);
    if (p == nullptr) return Verdict::fail("the client refused call " + std::to_string(i));
    ps.push_back(p);
  }
  std::vector<TakenCall> out;
  size_t answered = 0, most = 0, gi = 1;
  while (answered < ps.size()) {
    while (auto t = c.take(0, out.empty() ? c.cfg().timeout_ms : 30)) {
      out.push_back(*t);
      most = std::max(most, out.size());
      if (out.size() > std::max(prev, cur))
        return Verdict::fail(std::to_string(out.size()) + " calls outstanding under grants of " + std::to_string(prev) +
                             " then " + std::to_string(cur));
    }
    if (out.empty()) return Verdict::fail("the client stopped sending with " + std::to_string(ps.size() - answered) +
                                          " calls left (grant " + std::to_string(cur) + ")");
    uint32_t g = grants[gi % grants.size()];
    ++gi;
    if (!c.send(c.msg_reply(out.front(), g))) return Verdict::fail("could not send");
    out.erase(out.begin());
    prev = cur, cur = eff(g);
    ++answered;
  }
  for (Pending* p : ps)
    if (auto w = c.want_ok(p)) return Verdict::fail(*w);
  return Verdict::pass(std::to_string(n) + " calls served, at most " + std::to_string(most) + " outstanding at once");
}

// Raw header words: xid, vers, credit, proc, then whatever follows.
std::vector<uint8_t> words(std::initializer_list<uint32_t> ws) {
  std::vector<uint8_t> v;
  for (uint32_t w : ws) put32(v, w);
  return v;
}

std::vector<uint8_t> rpc_status(uint32_t xid, oncrpc::ReplyStat stat, oncrpc::AcceptStat accept) {
  oncrpc::ReplyHeader h;
  h.xid = xid;
  h.stat = stat;
  h.accept = accept;
  h.reject = oncrpc::RejectStat::kRpcMismatch;
  h.mismatch_low = h.mismatch_high = 2;
  std::vector<uint8_t> out(oncrpc::reply_size(h));
  out.resize(oncrpc::encode_reply(h, out));
  return out;
}

const Shape kShapes[] = {Shape::kPlain, Shape::kWrite, Shape::kReply, Shape::kRead, Shape::kLong};

}  // namespace

void add_responder_reply_cases(std::vector<RCase>& out) {
  const char* kOnce = "complete the call exactly once, with a named status";
  // ---------------------------------------------------------------- legal replies
  for (Shape s : kShapes) {
    out.push_back({std::string("legal/msg/") + shape_name(s), "RFC 8166 3.5.1", Level::kMust,
                   "an RPC reply that fits inline comes as RDMA_MSG, whatever chunks the call offered (an unused "
                   "write chunk returned empty, an unused reply chunk left alone); the client completes the call "
                   "with it",
                   "kOk with the call's own results", {}, [s](RCtx& c) {
                     return with_call(c, s, [&](Pending* p, TakenCall& tc) {
                       if (!pull(c, tc)) return Verdict::fail("could not pull the call's read chunk");
                       c.send(c.msg_reply(tc));
                       return verdict(c.want_ok(p), "kOk");
                     });
                   }});
  }
  for (uint32_t n : {65536u, 32768u, 4096u, 4u, 0u}) {
    out.push_back({"legal/write-filled-" + std::to_string(n), "RFC 8166 3.4.6", Level::kMust,
                   "the responder fills the write chunk and returns it with the bytes written; the client reports "
                   "exactly that many, with the data where it offered it",
                   "kOk, bulk_recv_len as returned, the data intact", {}, [n](RCtx& c) {
                     return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                       if (!c.fill_write(tc, n)) return Verdict::fail("could not write the chunk");
                       c.send(c.msg_reply(tc, 8, n));
                       if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                       if (p->reply.bulk_recv_len != n)
                         return Verdict::fail("bulk_recv_len " + std::to_string(p->reply.bulk_recv_len));
                       for (uint32_t i = 0; i < n; ++i)
                         if (c.offered()[i] != static_cast<uint8_t>(i * 7 + 3 + (i >> 9)))
                           return Verdict::fail("the written data differs at byte " + std::to_string(i));
                       return Verdict::pass("kOk, " + std::to_string(n) + " bytes placed");
                     });
                   }});
  }
  out.push_back({"legal/reply-chunk", "RFC 8166 3.5.3.2", Level::kMust,
                 "a reply sent through the reply chunk comes as RDMA_NOMSG reporting the bytes written there; "
                 "the client decodes the reply from its chunk",
                 "kOk with the call's own results", {}, [](RCtx& c) {
                   return with_call(c, Shape::kReply, [&](Pending* p, TakenCall& tc) {
                     if (tc.reply.handle == 0) return Verdict::fail("the call offered no reply chunk");
                     c.send(c.nomsg_reply(tc));
                     return verdict(c.want_ok(p), "kOk from the reply chunk");
                   });
                 }});
  for (uint32_t g : {1u, 2u, 4u, 8u, 32u}) {
    out.push_back({"legal/credit-" + std::to_string(g), "RFC 8166 3.3.1", Level::kMust,
                   "a requester never has more calls outstanding than the responder's grant",
                   "every call served, never more outstanding than granted", {}, [g](RCtx& c) {
                     return credit_run(c, {g}, 32);
                   }});
  }
  const std::pair<const char*, std::vector<uint32_t>> seqs[] = {
      {"up", {1, 2, 4, 8, 16, 32}}, {"down", {32, 16, 8, 4, 2, 1}}, {"zigzag", {1, 32, 1, 32, 2, 16}}};
  for (const auto& [name, seq] : seqs) {
    out.push_back({std::string("legal/credit-changing-") + name, "RFC 8166 3.3.1", Level::kMust,
                   "a grant may change with every reply; the requester follows the latest one",
                   "every call served, never more outstanding than granted", {}, [seq](RCtx& c) {
                     return credit_run(c, seq, 32, 16);
                   }});
  }
  out.push_back({"legal/out-of-order", "RFC 8166 4.2.1", Level::kMust,
                 "replies may come in any order; each is matched to its call by xid",
                 "four calls, answered last first, each kOk with its own results", {}, [](RCtx& c) {
                   Pending* p0 = nullptr;
                   std::string why;
                   auto t0 = c.issue_take(Shape::kPlain, &p0, &why);
                   if (!t0) return Verdict::fail(why);
                   c.send(c.msg_reply(*t0, 8));
                   if (auto w = c.want_ok(p0)) return Verdict::fail(*w);
                   std::vector<Pending*> ps;
                   std::vector<TakenCall> ts;
                   for (int i = 0; i < 4; ++i) ps.push_back(c.issue(Shape::kPlain));
                   for (int i = 0; i < 4; ++i) {
                     auto t = c.take();
                     if (!t) return Verdict::fail("call " + std::to_string(i) + " never arrived");
                     ts.push_back(*t);
                   }
                   for (int i = 3; i >= 0; --i) c.send(c.msg_reply(ts[static_cast<size_t>(i)], 8));
                   for (Pending* p : ps)
                     if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                   return Verdict::pass("each call got its own reply");
                 }});
  for (Shape s : {Shape::kWrite, Shape::kReply, Shape::kRead, Shape::kLong}) {
    out.push_back({std::string("legal/swi/") + shape_name(s), "RFC 8797 3.2", Level::kMust,
                   "to a requester that advertised I, the reply may come by Send With Invalidate of an rkey the "
                   "call offered; the client takes that registration as ended (and fences the rest)",
                   "kOk; nothing reachable at idle", {}, [s](RCtx& c) {
                     return with_call(c, s, [&](Pending* p, TakenCall& tc) {
                       if (!pull(c, tc)) return Verdict::fail("could not pull the call's read chunk");
                       uint32_t key = s == Shape::kWrite ? tc.write.handle : s == Shape::kReply ? tc.reply.handle
                                                                                               : tc.read.handle;
                       if (key == 0) return Verdict::fail("the call offered no chunk of that kind");
                       c.send(s == Shape::kReply ? c.nomsg_reply(tc) : c.msg_reply(tc), key);
                       return verdict(c.want_ok(p), "kOk by Send With Invalidate");
                     });
                   }});
  }
  const std::tuple<const char*, oncrpc::ReplyStat, oncrpc::AcceptStat, CallStatus> stats[] = {
      {"prog-unavail", oncrpc::ReplyStat::kAccepted, oncrpc::AcceptStat::kProgUnavail, CallStatus::kProgUnavail},
      {"prog-mismatch", oncrpc::ReplyStat::kAccepted, oncrpc::AcceptStat::kProgMismatch, CallStatus::kProgMismatch},
      {"proc-unavail", oncrpc::ReplyStat::kAccepted, oncrpc::AcceptStat::kProcUnavail, CallStatus::kProcUnavail},
      {"garbage-args", oncrpc::ReplyStat::kAccepted, oncrpc::AcceptStat::kGarbageArgs, CallStatus::kGarbageArgs},
      {"system-err", oncrpc::ReplyStat::kAccepted, oncrpc::AcceptStat::kSystemErr, CallStatus::kSystemErr},
      {"denied", oncrpc::ReplyStat::kDenied, oncrpc::AcceptStat::kSuccess, CallStatus::kDenied}};
  for (const auto& [name, rs, as, want] : stats) {
    for (Shape s : {Shape::kPlain, Shape::kWrite}) {
      out.push_back({std::string("legal/rpc-error/") + name + "/" + shape_name(s), "RFC 8166 3.5.1", Level::kMust,
                     "an RPC error reply is a short reply like any other; the client completes the call with the "
                     "RPC status, named, and ends the call's registrations",
                     std::string("the call completes ") + rpc::call_status_name(want), {},
                     [s, rs, as, want](RCtx& c) {
                       return with_call(c, s, [&](Pending* p, TakenCall& tc) {
                         c.send(c.msg_reply(tc, 8, 0, rpc_status(tc.xid, rs, as)));
                         return verdict(c.want(p, {want}), rpc::call_status_name(want));
                       });
                     }});
    }
  }
  for (Shape s : {Shape::kPlain, Shape::kWrite, Shape::kReply, Shape::kLong}) {
    out.push_back({std::string("legal/err-vers/") + shape_name(s), "RFC 8166 4.5.1", Level::kMust,
                   "RDMA_ERROR / ERR_VERS with the call's xid ends the call: the client completes it with the "
                   "transport's error and ends its registrations",
                   "kRdmaError", {}, [s](RCtx& c) {
                     return with_call(c, s, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> m(rpcrdma::kErrVersSize);
                       m.resize(rpcrdma::encode_err_vers(tc.xid, 8, m));
                       c.send(m);
                       return verdict(c.want(p, {CallStatus::kRdmaError}), "kRdmaError");
                     });
                   }});
    out.push_back({std::string("legal/err-chunk/") + shape_name(s), "RFC 8166 4.5.2", Level::kMust,
                   "RDMA_ERROR / ERR_CHUNK with the call's xid ends the call: the client completes it with the "
                   "transport's error and ends its registrations",
                   "kRdmaError", {}, [s](RCtx& c) {
                     return with_call(c, s, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> m(rpcrdma::kErrChunkSize);
                       m.resize(rpcrdma::encode_err_chunk(tc.xid, 8, m));
                       c.send(m);
                       return verdict(c.want(p, {CallStatus::kRdmaError}), "kRdmaError");
                     });
                   }});
  }
  out.push_back({"legal/err-vers-no-common", "RFC 8166 4.5.1", Level::kMust,
                 "ERR_VERS naming only versions the client does not speak (2..3) ends the call",
                 "kRdmaError (or kBadReply: nothing in common)", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 4, 1, 2, 3}));
                     auto why = c.want(p, {CallStatus::kRdmaError, CallStatus::kBadReply});
                     return verdict(why, c.describe(p));
                   });
                 }});

  // ---------------------------------------------------------------- xids
  out.push_back({"xid/stray-then-reply", "RFC 8166 4.2.1", Level::kMust,
                 "a reply whose xid matches no outstanding call completes nothing",
                 "the call waits; its real reply completes it kOk", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     TakenCall other = tc;
                     other.xid ^= 0x5a5a0000;
                     c.send(c.msg_reply(other));
                     c.wait([] { return false; }, c.cfg().quiet_ms);
                     if (p->done()) return Verdict::fail("a reply to another xid " + c.describe(p));
                     return c.after_bad(p, tc, {});
                   });
                 }});
  out.push_back({"xid/duplicate-reply", "RFC 8166 4.2.1", Level::kMust,
                 "a second reply to a call already answered completes nothing",
                 "the call completes once, kOk", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(c.msg_reply(tc));
                     c.send(c.msg_reply(tc));
                     if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                     c.wait([] { return false; }, c.cfg().quiet_ms);
                     return p->completions == 1 ? Verdict::pass("one completion")
                                                : Verdict::fail(std::to_string(p->completions) + " completions");
                   });
                 }});
  out.push_back({"xid/duplicate-burst", "RFC 8166 4.2.1", Level::kMust,
                 "many replies to one call complete it once",
                 "one completion, kOk", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     for (int i = 0; i < 16; ++i) c.send(c.msg_reply(tc, 8, 0));
                     if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                     c.wait([] { return false; }, c.cfg().quiet_ms);
                     return p->completions == 1 ? Verdict::pass("one completion")
                                                : Verdict::fail(std::to_string(p->completions) + " completions");
                   });
                 }});
  out.push_back({"xid/rpc-xid-differs", "RFC 8166 4.2.1", Level::kMust,
                 "rdma_xid and the RPC reply's xid must match; a reply where they differ does not complete the "
                 "call with results",
                 "kBadReply, or dropped (the real reply then completes it), or the connection dropped", {},
                 [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(c.msg_reply(tc, 8, 0, c.rpc_reply(tc.xid ^ 0x11110000)));
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"xid/stray-err-chunk", "RFC 8166 4.5.2", Level::kMust,
                 "an RDMA_ERROR naming no outstanding call completes nothing",
                 "the call waits; its real reply completes it kOk", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> m(rpcrdma::kErrChunkSize);
                     m.resize(rpcrdma::encode_err_chunk(tc.xid ^ 0x00770000, 8, m));
                     c.send(m);
                     return c.after_bad(p, tc, {});
                   });
                 }});

  // ---------------------------------------------------------------- credits a responder must not grant
  for (uint32_t g : {0u, 65536u, 0x80000000u, 0xffffffffu}) {
    out.push_back({"credit/grant-" + std::to_string(g), "RFC 8166 3.3.1", Level::kMust,
                   g == 0 ? "a responder must grant at least one credit; a requester granted 0 still makes "
                            "progress (as if granted 1) rather than stall"
                          : "a grant beyond what the requester can use is capped by the requester's own limit",
                   "every call served; never more outstanding than max(1, min(grant, the client's 32))", {},
                   [g](RCtx& c) { return credit_run(c, {g}, 32); }});
  }

  // ---------------------------------------------------------------- versions and procedures
  for (uint32_t v : {0u, 2u, 7u, 0xffffffffu}) {
    out.push_back({"vers/" + std::to_string(v), "RFC 8166 4.5.1", Level::kMust,
                   "a reply of another rdma_vers cannot be used; the call completes with an error (or the "
                   "message is dropped and the call waits), " + std::string(kOnce),
                   "kBadReply, or dropped, or the connection dropped", {}, [v](RCtx& c) {
                     return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> m = words({tc.xid, v, 8, 0, 0, 0, 0});
                       std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                       m.insert(m.end(), r.begin(), r.end());
                       c.send(m);
                       return c.after_bad(p, tc, {CallStatus::kBadReply, CallStatus::kRdmaError});
                     });
                   }});
  }
  const std::pair<const char*, uint32_t> procs[] = {
      {"msgp", 2}, {"done", 3}, {"5", 5}, {"9", 9}, {"4294967295", 0xffffffffu}};
  for (const auto& [name, proc] : procs) {
    bool obsolete = proc == 2 || proc == 3;
    out.push_back({std::string("proc/") + name, obsolete ? "RFC 8166 4.6" : "RFC 8166 4.5.2", Level::kMust,
                   std::string(obsolete ? "RDMA_MSGP and RDMA_DONE are no longer sent" : "an unknown rdma_proc is an "
                                                                                         "XDR error") +
                       "; the client " + kOnce,
                   "kBadReply, or dropped, or the connection dropped", {}, [proc](RCtx& c) {
                     return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> m = words({tc.xid, 1, 8, proc, 0, 0, 0});
                       if (proc == 2) m = words({tc.xid, 1, 8, 2, 8, 1024, 0, 0, 0});
                       std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                       m.insert(m.end(), r.begin(), r.end());
                       c.send(m);
                       return c.after_bad(p, tc, {CallStatus::kBadReply});
                     });
                   }});
  }

  // ---------------------------------------------------------------- truncated headers
  for (uint32_t n : {0u, 2u, 4u, 8u, 12u, 16u, 20u, 24u, 27u}) {
    out.push_back({"truncated/msg-" + std::to_string(n), "RFC 8166 4.5.2", Level::kMust,
                   "a reply cut to " + std::to_string(n) + " bytes does not parse; the client drops it or fails "
                   "the call it names, " + kOnce,
                   "kBadReply, or dropped, or the connection dropped", {}, [n](RCtx& c) {
                     return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> m = c.msg_reply(tc);
                       m.resize(n);
                       c.send(m);
                       return c.after_bad(p, tc, {CallStatus::kBadReply});
                     });
                   }});
  }
  for (uint32_t n : {24u, 28u, 32u, 40u, 48u}) {
    out.push_back({"truncated/write-list-" + std::to_string(n), "RFC 8166 4.5.2", Level::kMust,
                   "a reply cut inside its write list does not parse; the client " + std::string(kOnce),
                   "kBadReply, or dropped, or the connection dropped", {}, [n](RCtx& c) {
                     return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> m = c.msg_reply(tc, 8, 4096);
                       m.resize(n);
                       c.send(m);
                       return c.after_bad(p, tc, {CallStatus::kBadReply});
                     });
                   }});
  }

  // ---------------------------------------------------------------- the RPC message carried
  out.push_back({"rpc/missing", "RFC 8166 4.5.2", Level::kMust,
                 "RDMA_MSG with no RPC message after the header: the client " + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 0, 0, 0, 0}));
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"rpc/short-8", "RFC 8166 4.5.2", Level::kMust,
                 "an RPC reply cut after xid and msg_type: the client " + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 0, 0, 0, 0, tc.xid, 1}));
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"rpc/call-not-reply", "RFC 8166 4.5.2", Level::kMust,
                 "an RPC CALL where the reply belongs (a backchannel call to a client that offered none): the "
                 "client " + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> m = words({tc.xid, 1, 8, 0, 0, 0, 0});
                     std::vector<uint8_t> call = rawpeer::rpc_call(tc.xid, RCtx::kProg, 1, 0);
                     m.insert(m.end(), call.begin(), call.end());
                     c.send(m);
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});

  // ---------------------------------------------------------------- chunk lists in replies
  for (const char* where : {"read", "write", "reply"}) {
    for (uint32_t v : {2u, 0xffffffffu}) {
      out.push_back({std::string("lists/discriminator-") + where + "-" + std::to_string(v), "RFC 8166 4.5.2",
                     Level::kMust,
                     "a list discriminator that is neither 0 nor 1 is an XDR error; the client " + std::string(kOnce),
                     "kBadReply, or dropped, or the connection dropped", {}, [where, v](RCtx& c) {
                       return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                         std::string w = where;
                         std::vector<uint8_t> m = words({tc.xid, 1, 8, 0});
                         put32(m, w == "read" ? v : 0);
                         if (w != "read") put32(m, w == "write" ? v : 0);
                         if (w == "reply") put32(m, v);
                         std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                         m.insert(m.end(), r.begin(), r.end());
                         c.send(m);
                         return c.after_bad(p, tc, {CallStatus::kBadReply});
                       });
                     }});
    }
  }
  out.push_back({"lists/read-list-in-reply", "RFC 8166 3.4.5", Level::kShould,
                 "read chunks travel in calls only; a reply carrying one is either refused or its read list "
                 "ignored -- the client never lets the responder make it read",
                 "kBadReply or kOk, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> m = words({tc.xid, 1, 8, 0, 1, 0, kNobody, 64, 0, 4096, 0, 0, 0});
                     std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                     m.insert(m.end(), r.begin(), r.end());
                     c.send(m);
                     return c.after_bad(p, tc, {CallStatus::kBadReply, CallStatus::kOk});
                   });
                 }});
  out.push_back({"lists/write-list-unoffered", "RFC 8166 3.4.6", Level::kMust,
                 "a reply returning a write chunk the call never offered: the client places nothing and "
                 + std::string(kOnce),
                 "kBadReply (or kOk with nothing placed), or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> m = words({tc.xid, 1, 8, 0, 0, 1, 1, kNobody, 4096, 0, 4096, 0, 0});
                     std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                     m.insert(m.end(), r.begin(), r.end());
                     c.send(m);
                     Verdict v = c.after_bad(p, tc, {CallStatus::kBadReply, CallStatus::kOk});
                     if (v.result == Outcome::kPass && p->done() && p->reply.status == CallStatus::kOk &&
                         p->reply.bulk_recv_len != 0)
                       return Verdict::fail("kOk claiming " + std::to_string(p->reply.bulk_recv_len) + " bytes placed");
                     return v;
                   });
                 }});

  // ---------------------------------------------------------------- write chunk lengths
  for (uint32_t over : {4u, 4096u, 0x80000000u}) {
    out.push_back({"write-len/over-" + std::to_string(over), "RFC 8166 3.4.6", Level::kMust,
                   "a write chunk returned longer than it was offered: the client never reports bytes beyond what "
                   "it offered, and " + std::string(kOnce),
                   "kBadReply or kTooLarge, or dropped, or the connection dropped", {}, [over](RCtx& c) {
                     return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                       c.fill_write(tc, tc.write.length);
                       c.send(c.msg_reply(tc, 8, tc.write.length + over));
                       return c.after_bad(p, tc, {CallStatus::kBadReply, CallStatus::kTooLarge});
                     });
                   }});
  }
  out.push_back({"write-len/more-chunks", "RFC 8166 3.4.6", Level::kMust,
                 "a reply returning more write chunks than the call offered: the client " + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     Xdr x;
                     x.u32(tc.xid).u32(1).u32(8).u32(0).u32(0);
                     for (int i = 0; i < 2; ++i) x.u32(1).u32(1).seg({tc.write.handle, 16, tc.write.offset});
                     x.u32(0).u32(0);
                     std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                     x.raw(r);
                     c.send(x.b);
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"write-len/absent", "RFC 8166 3.4.6", Level::kMay,
                 "a reply that leaves out the write list the call offered: the client reports nothing placed or "
                 "refuses the reply, " + std::string(kOnce),
                 "kOk with 0 bytes placed, or kBadReply", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     c.send(c.msg_reply(tc, 8, std::nullopt));
                     if (auto w = c.want(p, {CallStatus::kOk, CallStatus::kBadReply})) return Verdict::fail(*w);
                     if (p->reply.status == CallStatus::kOk && p->reply.bulk_recv_len != 0)
                       return Verdict::fail("kOk claiming " + std::to_string(p->reply.bulk_recv_len) + " bytes placed");
                     return Verdict::pass(c.describe(p));
                   });
                 }});
  out.push_back({"write-len/other-handle", "RFC 8166 3.4.6", Level::kMay,
                 "a write chunk returned under another handle: the client trusts only the length (within what "
                 "it offered) or refuses the reply, " + std::string(kOnce),
                 "kOk or kBadReply", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     TakenCall t2 = tc;
                     t2.write.handle ^= 0x00010100;
                     c.send(c.msg_reply(t2, 8, 16));
                     auto why = c.want(p, {CallStatus::kOk, CallStatus::kBadReply});
                     return verdict(why, c.describe(p));
                   });
                 }});

  // ---------------------------------------------------------------- reply chunks written short, long, not at all
  const std::pair<const char*, int64_t> claims[] = {
      {"claims-longer", -1}, {"claims-zero", 0}, {"claims-8", 8}, {"claims-room-plus-4", -2}};
  for (const auto& [name, claim] : claims) {
    out.push_back({std::string("reply-chunk/") + name, "RFC 8166 3.5.3.2", Level::kMust,
                   "RDMA_NOMSG reporting a reply chunk length that is not a whole reply within the chunk "
                   "offered: the client never reads past its chunk and " + std::string(kOnce),
                   "kBadReply or kTooLarge, or dropped, or the connection dropped", {}, [claim](RCtx& c) {
                     return with_call(c, Shape::kReply, [&](Pending* p, TakenCall& tc) {
                       uint32_t n = claim == -1   ? static_cast<uint32_t>(tc.reply_room) + 65536
                                    : claim == -2 ? static_cast<uint32_t>(tc.reply_room) + 4
                                                  : static_cast<uint32_t>(claim);
                       c.send(c.nomsg_reply(tc, 0, n));
                       return c.after_bad(p, tc, {CallStatus::kBadReply, CallStatus::kTooLarge});
                     });
                   }});
  }
  out.push_back({"reply-chunk/not-written", "RFC 8166 3.5.3.2", Level::kMust,
                 "RDMA_NOMSG claiming a reply in a chunk the responder never wrote: what the chunk holds is no "
                 "reply to the call, and the client " + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kReply, [&](Pending* p, TakenCall& tc) {
                     rpcrdma::Header h = rawpeer::plain_header(tc.xid, 8, rpcrdma::Proc::kNoMsg);
                     h.chunks.has_reply = true;
                     h.chunks.reply.nsegments = 1;
                     h.chunks.reply.segments[0] = {tc.reply.handle, 28, tc.reply.offset};
                     c.send(rawpeer::rdma_msg(h));
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"reply-chunk/nomsg-without-chunk", "RFC 8166 4.5.2", Level::kMust,
                 "RDMA_NOMSG with no chunk lists carries no reply; the client " + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kReply, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 1, 0, 0, 0}));
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"reply-chunk/nomsg-unoffered", "RFC 8166 3.5.3.2", Level::kMust,
                 "RDMA_NOMSG naming a reply chunk the call never offered: the client reads nothing of it and "
                 + std::string(kOnce),
                 "kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     rpcrdma::Header h = rawpeer::plain_header(tc.xid, 8, rpcrdma::Proc::kNoMsg);
                     h.chunks.has_reply = true;
                     h.chunks.reply.nsegments = 1;
                     h.chunks.reply.segments[0] = {kNobody, 28, 0};
                     c.send(rawpeer::rdma_msg(h));
                     return c.after_bad(p, tc, {CallStatus::kBadReply});
                   });
                 }});

  // ---------------------------------------------------------------- the inline threshold
  out.push_back({"inline/at-threshold", "RFC 8166 3.3.2", Level::kMust,
                 "a reply of exactly the client's inline receive size (4096, negotiated) is taken inline",
                 "kOk", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     // msg_reply's results are 4 bytes: the rest of 4096 is header and RPC reply.
                     std::vector<uint8_t> base = c.msg_reply(tc);
                     std::vector<uint8_t> results(4096 - (base.size() - 4), 0);
                     std::vector<uint8_t> m = c.msg_reply(tc, 8, 0, c.rpc_reply(tc.xid, results));
                     c.send(m);
                     return verdict(c.want(p, {CallStatus::kOk}), "kOk, " + std::to_string(m.size()) + " bytes");
                   });
                 }});
  for (uint32_t over : {4u, 4096u, 12288u}) {
    out.push_back({"inline/over-" + std::to_string(over), "RFC 8166 3.3.2", Level::kMust,
                   "a reply over the client's inline receive size breaks 3.3.2: the Send fails the client's "
                   "receive and the connection is lost (or a larger buffer takes it); the client " +
                       std::string(kOnce),
                   "kDisconnected, or kOk", {}, [over](RCtx& c) {
                     return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                       std::vector<uint8_t> results(4096 + over, 0);
                       c.send(c.msg_reply(tc, 8, 0, c.rpc_reply(tc.xid, results)));
                       return c.after_bad(p, tc, {CallStatus::kOk});
                     });
                   }});
  }

  // ---------------------------------------------------------------- Send With Invalidate of the wrong rkey
  out.push_back({"swi/foreign-rkey", "RFC 8797 3.2", Level::kMust,
                 "a reply by Send With Invalidate of an rkey the client never offered: the client's receive fails "
                 "or it drops the connection; " + std::string(kOnce),
                 "kDisconnected", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     c.send(c.msg_reply(tc, 8, 0), kNobody);
                     return c.after_bad(p, tc, {});
                   });
                 }});
  out.push_back({"swi/stale-rkey", "RFC 8797 3.2", Level::kMust,
                 "Send With Invalidate of the rkey of a call already ended: it names nothing live; " +
                     std::string(kOnce),
                 "kDisconnected (or the reply taken, the stale key invalid)", {}, [](RCtx& c) {
                   Pending* a = nullptr;
                   std::string why;
                   auto ta = c.issue_take(Shape::kWrite, &a, &why);
                   if (!ta) return Verdict::fail(why);
                   c.send(c.msg_reply(*ta, 8, 0), ta->write.handle);
                   if (auto w = c.want_ok(a)) return Verdict::fail("the first call: " + *w);
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     c.send(c.msg_reply(tc, 8, 0), ta->write.handle);
                     return c.after_bad(p, tc, {CallStatus::kOk});
                   });
                 }});
  out.push_back({"swi/other-call-rkey", "RFC 8797 3.2", Level::kMay,
                 "Send With Invalidate of another outstanding call's rkey: the client may take it (that call's "
                 "registration is then ended) or drop the connection; each call completes once and nothing stays "
                 "reachable",
                 "each call kOk or kDisconnected", {}, [](RCtx& c) {
                   Pending* g = nullptr;
                   std::string why;
                   auto tg = c.issue_take(Shape::kPlain, &g, &why);
                   if (!tg) return Verdict::fail(why);
                   c.send(c.msg_reply(*tg, 8));
                   if (auto w = c.want_ok(g)) return Verdict::fail(*w);
                   Pending* a = c.issue(Shape::kWrite);
                   Pending* b = c.issue(Shape::kWrite);
                   auto ta = c.take();
                   auto tb = c.take();
                   if (!ta || !tb) return Verdict::fail("the two calls did not both arrive");
                   c.send(c.msg_reply(*tb, 8, 0), ta->write.handle);
                   c.wait([&] { return b->done(); }, c.cfg().quiet_ms);
                   c.send(c.msg_reply(*ta, 8, 0));
                   if (auto w = c.want(b, {CallStatus::kOk, CallStatus::kDisconnected})) return Verdict::fail(*w);
                   if (auto w = c.want(a, {CallStatus::kOk, CallStatus::kDisconnected})) return Verdict::fail(*w);
                   return Verdict::pass("first " + c.describe(b) + ", other " + c.describe(a));
                 }});
  out.push_back({"swi/i-not-advertised", "RFC 8797 3.2", Level::kMust,
                 "a responder uses Send With Invalidate only with a requester that advertised I; this client did "
                 "not, and " + std::string(kOnce),
                 "kDisconnected (a protocol error), or kOk", RConnect{.client_inv = false}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     c.send(c.msg_reply(tc, 8, 0), tc.write.handle);
                     return c.after_bad(p, tc, {CallStatus::kOk});
                   });
                 }});

  // ---------------------------------------------------------------- RDMA outside what was offered
  const std::pair<const char*, int> beyond[] = {{"before", 0}, {"after", 1}, {"across-end", 2}};
  for (const auto& [name, where] : beyond) {
    out.push_back({std::string("rdma/write-") + name + "-chunk", "RFC 8166 8.1", Level::kMust,
                   "an RDMA Write outside the segment the call offered reaches nothing: the device refuses it, "
                   "the client's memory outside the chunk is untouched, and " + std::string(kOnce),
                   "the Write refused; kDisconnected (or the call otherwise completed once)", {}, [where](RCtx& c) {
                     if (!c.srv().caps().fast_reg_bounds_enforced)
                       return Verdict::skip("the device does not bound window accesses (docs/security.md)");
                     return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                       uint64_t at = where == 0   ? tc.write.offset - 4096
                                     : where == 1 ? tc.write.offset + tc.write.length
                                                  : tc.write.offset + tc.write.length - 100;
                       std::vector<uint8_t> junk(4096, 0xEE);
                       rdma::WcStatus st = c.srv().write(junk.data(), 4096, tc.write.handle, at);
                       if (st == rdma::WcStatus::kSuccess) return Verdict::fail("the Write outside the chunk succeeded");
                       return c.after_bad(p, tc, {});
                     });
                   }});
  }
  out.push_back({"rdma/read-write-chunk", "RFC 8166 8.1", Level::kShould,
                 "a write chunk is registered for remote write only: an RDMA Read of it is refused, and the "
                 "client " + std::string(kOnce),
                 "the Read refused; kDisconnected", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> got(64);
                     if (c.srv().read(got.data(), 64, tc.write.handle, tc.write.offset) == rdma::WcStatus::kSuccess)
                       return Verdict::fail("the Read of a write chunk succeeded");
                     return c.after_bad(p, tc, {});
                   });
                 }});
  out.push_back({"rdma/write-read-chunk", "RFC 8166 8.1", Level::kMust,
                 "a read chunk is registered for remote read only: an RDMA Write into it is refused (the call's "
                 "argument data stays as the client wrote it), and the client " + std::string(kOnce),
                 "the Write refused; kDisconnected", {}, [](RCtx& c) {
                   return with_call(c, Shape::kRead, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> junk(64, 0xEE);
                     if (c.srv().write(junk.data(), 64, tc.read.handle, tc.read.offset) == rdma::WcStatus::kSuccess)
                       return Verdict::fail("the Write into a read chunk succeeded");
                     return c.after_bad(p, tc, {});
                   });
                 }});
  for (bool swi : {false, true}) {
    out.push_back({std::string("rdma/after-call-") + (swi ? "swi" : "local-inv"), "RFC 8166 8.1", Level::kMust,
                   "once a call has completed, its rkeys reach nothing (the client invalidated them before "
                   "completing it, or the responder did by Send With Invalidate)",
                   "a Write with the ended call's rkey is refused", {}, [swi](RCtx& c) {
                     return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                       c.send(c.msg_reply(tc, 8, 0), swi ? tc.write.handle : 0);
                       if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                       std::vector<uint8_t> junk(64, 0xEE);
                       if (c.srv().write(junk.data(), 64, tc.write.handle, tc.write.offset) == rdma::WcStatus::kSuccess)
                         return Verdict::fail("a Write with the rkey of a completed call reached client memory");
                       return Verdict::pass("kOk; the ended call's rkey reaches nothing");
                     });
                   }});
  }

  // ---------------------------------------------------------------- RDMA_ERROR forms
  out.push_back({"err/unknown-code", "RFC 8166 4.5.2", Level::kMust,
                 "RDMA_ERROR with an error code the client does not know: " + std::string(kOnce),
                 "kRdmaError or kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 4, 3}));
                     return c.after_bad(p, tc, {CallStatus::kRdmaError, CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"err/vers-truncated", "RFC 8166 4.5.1", Level::kMust,
                 "ERR_VERS cut before its version range: " + std::string(kOnce),
                 "kRdmaError or kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 4, 1, 1}));
                     return c.after_bad(p, tc, {CallStatus::kRdmaError, CallStatus::kBadReply});
                   });
                 }});
  out.push_back({"err/chunk-no-code", "RFC 8166 4.5.2", Level::kMust,
                 "RDMA_ERROR cut before its error code: " + std::string(kOnce),
                 "kRdmaError or kBadReply, or dropped, or the connection dropped", {}, [](RCtx& c) {
                   return with_call(c, Shape::kPlain, [&](Pending* p, TakenCall& tc) {
                     c.send(words({tc.xid, 1, 8, 4}));
                     return c.after_bad(p, tc, {CallStatus::kRdmaError, CallStatus::kBadReply});
                   });
                 }});
}

void add_responder_loss_cases(std::vector<RCase>& out) {
  const char* kLoss = "RFC 8166 4.5.5";
  out.push_back({"loss/before-call", kLoss, Level::kMust,
                 "a connection lost before any call: a call on it is refused or completes kDisconnected",
                 "call() refuses, or kDisconnected", {}, [](RCtx& c) {
                   c.srv().disconnect();
                   c.wait([&] { return !c.conn()->ready(); });
                   Pending* p = c.issue(Shape::kPlain);
                   if (p == nullptr) return Verdict::pass("call() refused it");
                   return verdict(c.want(p, {CallStatus::kDisconnected}), "kDisconnected");
                 }});
  for (Shape s : kShapes) {
    for (bool abrupt : {false, true}) {
      out.push_back({std::string("loss/") + (abrupt ? "abrupt" : "disconnect") + "-after-call/" + shape_name(s), kLoss,
                     Level::kMust,
                     "the connection is lost with the call received and unanswered (" +
                         std::string(abrupt ? "the responder's QP destroyed" : "a disconnect") +
                         "): the call completes kDisconnected, once, and its registrations end",
                     "kDisconnected", {}, [s, abrupt](RCtx& c) {
                       return with_call(c, s, [&](Pending* p, TakenCall&) {
                         if (abrupt) c.kill_srv();
                         else c.srv().disconnect();
                         return verdict(c.want(p, {CallStatus::kDisconnected}), "kDisconnected");
                       });
                     }});
    }
  }
  out.push_back({"loss/after-write-filled", kLoss, Level::kMust,
                 "the connection is lost after the responder filled the write chunk, before its reply",
                 "kDisconnected", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     c.fill_write(tc, tc.write.length);
                     c.srv().disconnect();
                     return verdict(c.want(p, {CallStatus::kDisconnected}), "kDisconnected");
                   });
                 }});
  out.push_back({"loss/after-reply-chunk-written", kLoss, Level::kMust,
                 "the connection is lost after the responder wrote the reply chunk, before its RDMA_NOMSG",
                 "kDisconnected", {}, [](RCtx& c) {
                   return with_call(c, Shape::kReply, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> r = c.rpc_reply(tc.xid);
                     c.srv().write(r.data(), static_cast<uint32_t>(r.size()), tc.reply.handle, tc.reply.offset);
                     c.srv().disconnect();
                     return verdict(c.want(p, {CallStatus::kDisconnected}), "kDisconnected");
                   });
                 }});
  out.push_back({"loss/mid-pull", kLoss, Level::kMust,
                 "the connection is lost while the responder pulls a long call",
                 "kDisconnected", {}, [](RCtx& c) {
                   return with_call(c, Shape::kLong, [&](Pending* p, TakenCall& tc) {
                     std::vector<uint8_t> got(64);
                     c.srv().read(got.data(), 64, tc.read.handle, tc.read.offset);
                     c.srv().disconnect();
                     return verdict(c.want(p, {CallStatus::kDisconnected}), "kDisconnected");
                   });
                 }});
  out.push_back({"loss/after-reply", kLoss, Level::kMust,
                 "the connection is lost right after the reply: the call completes with the reply, once",
                 "kOk", {}, [](RCtx& c) {
                   return with_call(c, Shape::kWrite, [&](Pending* p, TakenCall& tc) {
                     c.srv().send(c.msg_reply(tc, 8, 0));
                     c.srv().disconnect();
                     return verdict(c.want_ok(p), "kOk");
                   });
                 }});
  for (int n : {4, 16}) {
    out.push_back({"loss/burst-" + std::to_string(n), kLoss, Level::kMust,
                   "the connection is lost with " + std::to_string(n) + " calls outstanding: each completes "
                   "kDisconnected, once",
                   "every call kDisconnected", {}, [n](RCtx& c) {
                     Pending* g = nullptr;
                     std::string why;
                     auto tg = c.issue_take(Shape::kPlain, &g, &why);
                     if (!tg) return Verdict::fail(why);
                     c.send(c.msg_reply(*tg, 32));
                     if (auto w = c.want_ok(g)) return Verdict::fail(*w);
                     std::vector<Pending*> ps;
                     for (int i = 0; i < n; ++i) ps.push_back(c.issue(i % 2 ? Shape::kWrite : Shape::kPlain));
                     for (int i = 0; i < n; ++i)
                       if (!c.take()) return Verdict::fail("call " + std::to_string(i) + " never arrived");
                     c.srv().disconnect();
                     for (Pending* p : ps)
                       if (auto w = c.want(p, {CallStatus::kDisconnected})) return Verdict::fail(*w);
                     return Verdict::pass("every call kDisconnected");
                   }});
  }
  out.push_back({"loss/queued-behind-credit", kLoss, Level::kMust,
                 "the connection is lost with one call sent and two waiting for a credit: all three complete "
                 "kDisconnected, once",
                 "every call kDisconnected", {}, [](RCtx& c) {
                   std::vector<Pending*> ps;
                   for (int i = 0; i < 3; ++i) ps.push_back(c.issue(Shape::kPlain));
                   if (!c.take()) return Verdict::fail("no call arrived");
                   c.srv().disconnect();
                   for (Pending* p : ps)
                     if (auto w = c.want(p, {CallStatus::kDisconnected})) return Verdict::fail(*w);
                   return Verdict::pass("every call kDisconnected");
                 }});
  out.push_back({"loss/silence-deadline", "RFC 8166 4.5.4", Level::kShould,
                 "a responder that never answers a call with no chunks: the call ends by its own deadline "
                 "(kTimedOut), and the connection still carries calls (a late reply finds no call)",
                 "kTimedOut, then a call served", {}, [](RCtx& c) {
                   Pending* p = c.issue(Shape::kPlain, 0, 300'000'000);
                   auto tc = c.take();
                   if (p == nullptr || !tc) return Verdict::fail("the call did not arrive");
                   if (auto w = c.want(p, {CallStatus::kTimedOut})) return Verdict::fail(*w);
                   c.send(c.msg_reply(*tc, 8));
                   return with_call(c, Shape::kPlain, [&](Pending* q, TakenCall& t2) {
                     c.send(c.msg_reply(t2, 8));
                     return verdict(c.want_ok(q), "kTimedOut, then kOk");
                   });
                 }});
  out.push_back({"loss/silence-deadline-chunk", "RFC 8166 8.1", Level::kMust,
                 "a responder that never answers a call that offered a write chunk: the call ends by its "
                 "deadline (kTimedOut) only once the chunk is fenced -- invalidated, or its connection ended -- "
                 "so that a late Write reaches nothing",
                 "kTimedOut; a Write with the call's rkey afterwards refused", {}, [](RCtx& c) {
                   Pending* p = c.issue(Shape::kWrite, 0, 300'000'000);
                   auto tc = c.take();
                   if (p == nullptr || !tc) return Verdict::fail("the call did not arrive");
                   if (auto w = c.want(p, {CallStatus::kTimedOut})) return Verdict::fail(*w);
                   std::vector<uint8_t> junk(64, 0xEE);
                   if (c.srv().write(junk.data(), 64, tc->write.handle, tc->write.offset) == rdma::WcStatus::kSuccess)
                     return Verdict::fail("a Write with the rkey of a call that timed out reached client memory");
                   return Verdict::pass(std::string("kTimedOut; the rkey reaches nothing (the connection ") +
                                        (c.conn()->ready() ? "kept" : "ended") + ")");
                 }});
  // With reconnection: the client reconnects and sends the call again; the
  // responder (a new connection) answers it.
  const std::pair<const char*, Shape> again[] = {
      {"plain", Shape::kPlain}, {"write", Shape::kWrite}, {"reply", Shape::kReply}, {"long", Shape::kLong}};
  for (const auto& [name, s] : again) {
    out.push_back({std::string("loss/retransmit/") + name, kLoss, Level::kShould,
                   "after a loss the requester reconnects and sends its outstanding calls again; the call completes "
                   "once, with the reply to the retransmission",
                   "kOk, retransmitted once", RConnect{.reconnect = true}, [s](RCtx& c) {
                     return with_call(c, s, [&](Pending* p, TakenCall& tc) {
                       uint32_t xid = tc.xid;
                       c.srv().disconnect();
                       if (!c.accept_again()) return Verdict::fail("the client did not reconnect");
                       auto t2 = c.take();
                       if (!t2) return Verdict::fail("the call was not sent again");
                       if (t2->xid != xid) return Verdict::fail("the retransmission has another xid");
                       if (!pull(c, *t2)) return Verdict::fail("could not pull the retransmitted call");
                       c.send(s == Shape::kReply ? c.nomsg_reply(*t2) : c.msg_reply(*t2, 8, 0));
                       if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                       if (p->reply.retransmits != 1)
                         return Verdict::fail("retransmits " + std::to_string(p->reply.retransmits));
                       return Verdict::pass("kOk after one retransmission");
                     });
                   }});
  }

  // ---------------------------------------------------------------- two requesters (connections)
  out.push_back({"two/loss-one-mid-call", kLoss, Level::kMust,
                 "one connection lost mid-call ends that connection's calls only; the other's call is served",
                 "the lost one kDisconnected, the other kOk", RConnect{.connections = 2}, [](RCtx& c) {
                   Pending* a = c.issue(Shape::kWrite, 0);
                   Pending* b = c.issue(Shape::kWrite, 1);
                   auto ta = c.take(0);
                   auto tb = c.take(1);
                   if (!ta || !tb) return Verdict::fail("the calls did not arrive");
                   c.srv(0).disconnect();
                   if (auto w = c.want(a, {CallStatus::kDisconnected})) return Verdict::fail("the lost one: " + *w);
                   if (b->done()) return Verdict::fail("the other call ended with the lost connection");
                   c.fill_write(*tb, 4096, 1);
                   c.send(c.msg_reply(*tb, 8, 4096), 0, 1);
                   if (auto w = c.want_ok(b)) return Verdict::fail("the other: " + *w);
                   return Verdict::pass("kDisconnected on the lost one, kOk on the other");
                 }});
  out.push_back({"two/credit-per-connection", "RFC 8166 3.3.1", Level::kMust,
                 "credits are per connection: a grant of 0 on one does not limit the other",
                 "the other connection has its grant's worth outstanding at once", RConnect{.connections = 2},
                 [](RCtx& c) {
                   Pending* a = c.issue(Shape::kPlain, 0);
                   Pending* b = c.issue(Shape::kPlain, 1);
                   auto ta = c.take(0);
                   auto tb = c.take(1);
                   if (!ta || !tb) return Verdict::fail("the calls did not arrive");
                   c.send(c.msg_reply(*ta, 0), 0, 0);
                   c.send(c.msg_reply(*tb, 8), 0, 1);
                   if (auto w = c.want_ok(a)) return Verdict::fail(*w);
                   if (auto w = c.want_ok(b)) return Verdict::fail(*w);
                   std::vector<Pending*> ps;
                   for (int i = 0; i < 3; ++i) ps.push_back(c.issue(Shape::kPlain, 0));
                   for (int i = 0; i < 8; ++i) ps.push_back(c.issue(Shape::kPlain, 1));
                   std::vector<TakenCall> t0, t1;
                   while (auto t = c.take(1, 100)) t1.push_back(*t);
                   while (auto t = c.take(0, 50)) t0.push_back(*t);
                   if (t0.size() != 1) return Verdict::fail(std::to_string(t0.size()) + " outstanding under a grant of 0 (1)");
                   if (t1.size() != 8) return Verdict::fail(std::to_string(t1.size()) + " of 8 outstanding on the other connection under a grant of 8");
                   for (auto& t : t1) c.send(c.msg_reply(t, 8), 0, 1);
                   for (int i = 0; i < 3; ++i) {
                     c.send(c.msg_reply(t0.front(), 0), 0, 0);
                     t0.clear();
                     if (i < 2) {
                       auto t = c.take(0);
                       if (!t) return Verdict::fail("the next call under a grant of 1 never came");
                       t0.push_back(*t);
                     }
                   }
                   for (Pending* p : ps)
                     if (auto w = c.want_ok(p)) return Verdict::fail(*w);
                   return Verdict::pass("1 outstanding on the starved connection, 8 on the other");
                 }});
  out.push_back({"two/swi-other-connection", "RFC 8797 3.2", Level::kShould,
                 "Send With Invalidate on one connection of an rkey offered on the other: it names nothing of that "
                 "connection's, and the other connection's call is unaffected",
                 "the other call kOk; this one kDisconnected or kOk", RConnect{.connections = 2}, [](RCtx& c) {
                   Pending* a = c.issue(Shape::kWrite, 0);
                   Pending* b = c.issue(Shape::kWrite, 1);
                   auto ta = c.take(0);
                   auto tb = c.take(1);
                   if (!ta || !tb) return Verdict::fail("the calls did not arrive");
                   c.send(c.msg_reply(*tb, 8, 0), ta->write.handle, 1);
                   c.wait([&] { return b->done(); }, c.cfg().quiet_ms);
                   if (!c.fill_write(*ta, 4096, 0)) return Verdict::fail("the other connection's write chunk was ended");
                   c.send(c.msg_reply(*ta, 8, 4096), 0, 0);
                   if (auto w = c.want_ok(a)) return Verdict::fail("the other connection's call: " + *w);
                   if (auto w = c.want(b, {CallStatus::kOk, CallStatus::kDisconnected})) return Verdict::fail(*w);
                   return Verdict::pass("the other call kOk; this one " + c.describe(b));
                 }});
  out.push_back({"two/write-other-connection-rkey", "RFC 8166 8.1", Level::kShould,
                 "one connection's responder cannot reach what the client offered on another connection (a "
                 "protection domain per connection)",
                 "the Write refused; the other call served", RConnect{.connections = 2}, [](RCtx& c) {
                   Pending* a = c.issue(Shape::kWrite, 0);
                   Pending* b = c.issue(Shape::kPlain, 1);
                   auto ta = c.take(0);
                   auto tb = c.take(1);
                   if (!ta || !tb) return Verdict::fail("the calls did not arrive");
                   std::vector<uint8_t> junk(64, 0xEE);
                   if (c.srv(1).write(junk.data(), 64, ta->write.handle, ta->write.offset) == rdma::WcStatus::kSuccess)
                     return Verdict::fail("a Write on one connection reached a chunk offered on the other");
                   if (auto w = c.want(b, {CallStatus::kDisconnected})) return Verdict::fail("this one: " + *w);
                   c.send(c.msg_reply(*ta, 8, 0), 0, 0);
                   if (auto w = c.want_ok(a)) return Verdict::fail("the other connection's call: " + *w);
                   return Verdict::pass("refused; the other connection's call kOk");
                 }});
}

}  // namespace tern::torture
