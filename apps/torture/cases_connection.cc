// Send With Invalidate (RFC 8797 3.2) and connection loss at each step of a
// call (RFC 8166 4.5.5: the connection is lost, the Requester reconnects
// and retransmits; the Responder serves the new connection).
#include <cstring>

#include "catalogue.h"

namespace tern::torture {

namespace {

constexpr uint32_t kRead = rdma::kAccessRemoteRead;
constexpr uint32_t kWrite = rdma::kAccessRemoteWrite;

enum class Chunk : uint8_t { kPos0Read, kWriteUnused, kReplyUnused, kReplyUsed };
const char* chunk_name(Chunk k) {
  switch (k) {
    case Chunk::kPos0Read: return "pos0-read";
    case Chunk::kWriteUnused: return "write";
    case Chunk::kReplyUnused: return "reply-chunk";
    case Chunk::kReplyUsed: return "reply-chunk-used";
  }
  return "?";
}

// A call offering one chunk of kind k; judges the reply (bad_reply checks
// that a Send With Invalidate names an rkey of this call, and only when we
// advertised I).
Verdict call_with_chunk(Ctx& c, Chunk k) {
  uint32_t x = c.xid();
  WireHeader h;
  h.xid = x;
  std::vector<uint32_t> offered;
  uint8_t* reply_mem = nullptr;
  std::vector<uint8_t> rpc;
  if (k == Chunk::kReplyUsed) {
    if (!c.cfg().echo) return Verdict::skip("needs --echo");
    std::vector<uint8_t> args(4096, 0x5a);
    rpc = c.rpc_call(*c.cfg().echo, x, args);
  } else {
    rpc = c.rpc_call(x);
  }
  if (k == Chunk::kWriteUnused || k == Chunk::kReplyUnused || k == Chunk::kReplyUsed) {
    reply_mem = c.rq().chunk_mem(8192);
    uint32_t key = c.offer(reply_mem, 8192, kWrite);
    offered.push_back(key);
    if (k == Chunk::kWriteUnused) h.writes.push_back({{key, 8192, c.remote(reply_mem)}});
    else h.reply = std::vector<rpcrdma::Segment>{{key, 8192, c.remote(reply_mem)}};
  }
  bool sent;
  if (k == Chunk::kPos0Read) {
    uint8_t* p = c.rq().chunk_mem(rpc.size());
    std::memcpy(p, rpc.data(), rpc.size());
    uint32_t key = c.offer(p, static_cast<uint32_t>(rpc.size()), kRead);
    offered.push_back(key);
    h.proc = 1;
    h.reads.push_back({0, {key, static_cast<uint32_t>(rpc.size()), c.remote(p)}});
    sent = c.rq().post(h.encode());
  } else {
    sent = c.send_call(h, rpc, &offered);
  }
  if (!sent) return Verdict::fail("our SEND failed");
  Seen s = c.next();
  Verdict v = c.want_reply(s, x, offered, reply_mem);
  if (v.result == Outcome::kPass) v.seen += s.with_inv ? " (invalidated one of the call's rkeys)" : " (plain Send)";
  return v;
}

// Breaks the connection at some step, then checks a new one is served.
Verdict then_new_connection(Ctx& c, const std::string& what) {
  c.rq().disconnect();
  std::string why;
  if (!c.reconnect(&why)) return Verdict::fail(what + ", then a new connection was refused: " + why);
  if (auto bad = c.not_alive()) return Verdict::fail(what + ", then on a new connection: " + *bad);
  return Verdict::pass(what + "; a new connection is served");
}

}  // namespace

void add_connection_cases(std::vector<Case>& out) {
  // ---- Send With Invalidate (RFC 8797 3.2)
  const std::pair<const char*, std::optional<std::vector<uint8_t>>> modes[] = {
      {"i-set", Ctx::ours(true)}, {"i-clear", Ctx::ours(false)}, {"no-pdata", std::vector<uint8_t>{}}};
  for (const auto& [mname, pd] : modes) {
    for (Chunk k : {Chunk::kPos0Read, Chunk::kWriteUnused, Chunk::kReplyUnused, Chunk::kReplyUsed}) {
      bool may_invalidate = std::string(mname) == "i-set";
      out.push_back({std::string("swi/") + mname + "/" + chunk_name(k), "RFC 8797 3.2", Level::kMust,
                     may_invalidate
                         ? "a Requester that advertised I may receive its reply by Send With Invalidate, which must "
                           "name an rkey that Requester offered in that call"
                         : "a Responder uses Send With Invalidate only with a Requester that advertised I; this one "
                           "did not, so the reply is a plain Send",
                     may_invalidate ? "a reply, plain or invalidating one of the call's rkeys" : "a reply by plain Send",
                     Connect{pd, false}, [k](Ctx& c) { return call_with_chunk(c, k); }});
    }
  }
  out.push_back({"swi/requester-sends-invalidate", "RFC 8797 3.2", Level::kMay,
                 "Send With Invalidate travels from Responder to Requester; a Requester's Send With Invalidate of "
                 "an rkey the Responder never gave out either fails the Responder's receive (the connection is "
                 "lost) or is served as a plain call",
                 "a reply or a disconnect", {}, [](Ctx& c) {
                   if (!c.rq().caps().remote_invalidation) return Verdict::skip("the device has no Send With Invalidate");
                   uint32_t x = c.xid();
                   Seen s = c.exchange(c.plain_call(x), 0x00abcd01);
                   if (s.gone()) return Verdict::pass(s.describe());
                   return c.want_reply(s, x);
                 }});

  // ---- connection loss at each step of a call (RFC 8166 4.5.5)
  const char* kLoss = "RFC 8166 4.5.5";
  const char* kLossReq =
      "a lost connection ends the calls on it; the Requester reconnects and retransmits, and the Responder "
      "serves the new connection (whatever state the old one's calls were in)";
  auto loss = [&](std::string id, std::function<Verdict(Ctx&)> f) {
    out.push_back({"loss/" + std::move(id), kLoss, Level::kShould, kLossReq, "a new connection is served", {}, std::move(f)});
  };
  loss("after-connect", [](Ctx& c) { return then_new_connection(c, "disconnected at once"); });
  loss("call-in-flight", [](Ctx& c) {
    c.rq().post(c.plain_call(c.xid()));
    return then_new_connection(c, "disconnected with a call in flight");
  });
  loss("burst-in-flight", [](Ctx& c) {
    for (int i = 0; i < 8; ++i) c.rq().post(c.plain_call(c.xid()));
    return then_new_connection(c, "disconnected with 8 calls in flight");
  });
  loss("after-reply", [](Ctx& c) {
    uint32_t x = c.xid();
    Verdict v = c.want_reply(c.exchange(c.plain_call(x)), x);
    if (v.result != Outcome::kPass) return v;
    return then_new_connection(c, "disconnected after a reply");
  });
  loss("long-call-before-pull", [](Ctx& c) {
    uint32_t x = c.xid();
    std::vector<uint8_t> rpc = c.rpc_call(x, 2048);
    uint8_t* p = c.rq().chunk_mem(rpc.size());
    std::memcpy(p, rpc.data(), rpc.size());
    uint32_t key = c.offer(p, static_cast<uint32_t>(rpc.size()), kRead);
    WireHeader h;
    h.xid = x, h.proc = 1;
    h.reads.push_back({0, {key, static_cast<uint32_t>(rpc.size()), c.remote(p)}});
    c.rq().post(h.encode());
    return then_new_connection(c, "disconnected while the Responder may be pulling a long call");
  });
  loss("write-chunk-offered", [](Ctx& c) {
    uint32_t x = c.xid();
    uint8_t* p = c.rq().chunk_mem(4096);
    uint32_t key = c.offer(p, 4096, kWrite);
    WireHeader h;
    h.xid = x;
    h.writes.push_back({{key, 4096, c.remote(p)}});
    std::vector<uint8_t> m = h.encode();
    std::vector<uint8_t> rpc = c.rpc_call(x);
    m.insert(m.end(), rpc.begin(), rpc.end());
    c.rq().post(m);
    return then_new_connection(c, "disconnected with a write chunk offered");
  });
  loss("large-reply-in-flight", [](Ctx& c) {
    if (!c.cfg().echo) return Verdict::skip("needs --echo");
    uint32_t x = c.xid();
    std::vector<uint8_t> args(16384, 0x33);
    std::vector<uint8_t> rpc = c.rpc_call(*c.cfg().echo, x, args);
    uint8_t* p = c.rq().chunk_mem(32768);
    uint32_t key = c.offer(p, 32768, kWrite);
    WireHeader h;
    h.xid = x;
    h.reply = std::vector<rpcrdma::Segment>{{key, 32768, c.remote(p)}};
    std::vector<uint32_t> offered;
    c.send_call(h, rpc, &offered);
    return then_new_connection(c, "disconnected while the Responder may be writing a large reply");
  });
  // Revoked registrations: the Responder's RDMA fails, the connection is
  // lost (or it refuses with ERR_CHUNK); then a new connection is served.
  out.push_back({"loss/read-chunk-revoked", "RFC 8166 4.5.3", Level::kMust,
                 "a read chunk invalidated before the Responder reads it: its RDMA Read fails and the connection "
                 "is lost (or it answers ERR_CHUNK); the call is never served, and a new connection is",
                 "a disconnect or ERR_CHUNK, then a new connection served", {}, [](Ctx& c) {
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x, 64);
                   uint8_t* p = c.rq().chunk_mem(rpc.size());
                   std::memcpy(p, rpc.data(), rpc.size());
                   uint32_t key = c.offer(p, static_cast<uint32_t>(rpc.size()), kRead);
                   if (!c.rq().revoke(key, 2000)) return Verdict::fail("could not invalidate our own rkey");
                   WireHeader h;
                   h.xid = x, h.proc = 1;
                   h.reads.push_back({0, {key, static_cast<uint32_t>(rpc.size()), c.remote(p)}});
                   Verdict v = c.want_err_chunk_or_gone(c.exchange(h.encode()), x);
                   if (v.result != Outcome::kPass) return v;
                   return then_new_connection(c, v.seen);
                 }});
  out.push_back({"loss/reply-chunk-revoked", "RFC 8166 4.5.3", Level::kMust,
                 "a reply chunk invalidated before the Responder writes the reply: its RDMA Write fails and the "
                 "connection is lost (or it answers ERR_CHUNK); a new connection is served",
                 "a disconnect or ERR_CHUNK, then a new connection served", {}, [](Ctx& c) {
                   if (!c.cfg().echo) return Verdict::skip("needs --echo");
                   uint32_t x = c.xid();
                   std::vector<uint8_t> args(8192, 0x44);
                   std::vector<uint8_t> rpc = c.rpc_call(*c.cfg().echo, x, args);
                   uint8_t* p = c.rq().chunk_mem(16384);
                   uint32_t key = c.offer(p, 16384, kWrite);
                   if (!c.rq().revoke(key, 2000)) return Verdict::fail("could not invalidate our own rkey");
                   WireHeader h;
                   h.xid = x;
                   h.reply = std::vector<rpcrdma::Segment>{{key, 16384, c.remote(p)}};
                   std::vector<uint32_t> offered;
                   if (!c.send_call(h, rpc, &offered)) return Verdict::fail("our SEND failed");
                   Verdict v = c.want_err_chunk_or_gone(c.next(), x);
                   if (v.result != Outcome::kPass) return v;
                   return then_new_connection(c, v.seen);
                 }});
}

}  // namespace tern::torture
