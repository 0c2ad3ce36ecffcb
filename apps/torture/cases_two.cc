// Two requesters at once against one responder: one requester's chunks
// named by the other, one requester's credits or faults beside the other's
// calls, one connection lost mid-call while the other continues. What the
// RFC asks is per connection (credits, 3.3.1; errors and losses, 4.5); what
// these cases check is that the responder keeps it per connection -- no
// requester's calls wait on, or are answered with, another's.
#include <cstring>

#include "catalogue.h"

namespace tern::torture {

namespace {

constexpr uint32_t kRead = rdma::kAccessRemoteRead;
constexpr uint32_t kWrite = rdma::kAccessRemoteWrite;

// The second requester's reply to a plain call (nullopt when it is one).
std::optional<std::string> b_call(Ctx& c, Requester* b, uint32_t x) {
  if (!b->post(c.plain_call(x))) return std::string("the second requester's SEND failed");
  Seen s = b->next(c.cfg().timeout_ms);
  while (s.message() && s.hdr.xid != x) s = b->next(c.cfg().timeout_ms);
  if (auto why = c.bad_reply(s, x)) return "the second requester: " + *why;
  return std::nullopt;
}

// Whether the first requester's connection still carries a call.
Verdict a_still_served(Ctx& c, const std::string& what) {
  if (auto why = c.not_alive()) return Verdict::fail(what + "; then the first requester: " + *why);
  return Verdict::pass(what + "; the first requester is still served");
}

}  // namespace

void add_two_requester_cases(std::vector<Case>& out) {
  const size_t first = out.size();
  out.push_back({"two/read-chunk-of-another", "RFC 8166 4.5.3", Level::kShould,
                 "a requester's call naming a read chunk another requester (another host) offered: the Responder's "
                 "RDMA Read on that connection fails, which ends that connection (or it answers ERR_CHUNK); the "
                 "requester that offered the chunk is unaffected and its own call with it is served",
                 "the second requester lost or ERR_CHUNK; the first served, its chunk intact", {}, [](Ctx& c) {
                   std::string why;
                   Requester* b = c.second(true, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x, 2048);
                   uint8_t* p = c.rq().chunk_mem(rpc.size());
                   std::memcpy(p, rpc.data(), rpc.size());
                   uint32_t key = c.offer(p, static_cast<uint32_t>(rpc.size()), kRead);
                   WireHeader h;
                   h.xid = x, h.proc = 1;
                   h.reads.push_back({0, {key, static_cast<uint32_t>(rpc.size()), c.remote(p)}});
                   if (!b->post(h.encode())) return Verdict::fail("the second requester's SEND failed");
                   Seen sb = b->next(c.cfg().timeout_ms);
                   std::string what = "the second requester: " + sb.describe();
                   if (sb.kind == Seen::Kind::kSilence) return Verdict::fail(what);
                   // The chunk is still the first requester's: its own call with it is served.
                   Seen sa = c.exchange(h.encode());
                   std::vector<uint32_t> offered{key};
                   if (auto bad = c.bad_reply(sa, x, nullptr, offered)) return Verdict::fail(what + "; the first requester's own call: " + *bad);
                   return a_still_served(c, what);
                 }});
  out.push_back({"two/reply-chunk-of-another", "RFC 8166 4.5.3", Level::kMust,
                 "a requester's call naming another requester's (another host's) registration as its reply "
                 "chunk: the Responder's RDMA Write on that connection fails and ends it (or ERR_CHUNK); the "
                 "other requester's memory is untouched and it is still served",
                 "the second requester lost or ERR_CHUNK; the first's memory untouched, the first served", {},
                 [](Ctx& c) {
                   if (!c.cfg().echo) return Verdict::skip("needs --echo");
                   std::string why;
                   Requester* b = c.second(true, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   uint8_t* p = c.rq().chunk_mem(16384);
                   uint32_t key = c.offer(p, 16384, kWrite);
                   uint32_t x = c.xid();
                   std::vector<uint8_t> args(8192, 0x44);
                   std::vector<uint8_t> rpc = c.rpc_call(*c.cfg().echo, x, args);
                   WireHeader h;
                   h.xid = x;
                   h.reply = std::vector<rpcrdma::Segment>{{key, 16384, c.remote(p)}};
                   // The call itself goes long when it must: through b's own read chunk.
                   std::vector<uint8_t> m = h.encode();
                   if (m.size() + rpc.size() > 1024) {
                     uint8_t* q = b->chunk_mem(rpc.size());
                     std::memcpy(q, rpc.data(), rpc.size());
                     uint32_t bk = b->offer(q, static_cast<uint32_t>(rpc.size()), kRead);
                     h.proc = 1;
                     h.reads.push_back({0, {bk, static_cast<uint32_t>(rpc.size()), c.remote(q)}});
                     m = h.encode();
                   } else {
                     m.insert(m.end(), rpc.begin(), rpc.end());
                   }
                   if (!b->post(m)) return Verdict::fail("the second requester's SEND failed");
                   Seen sb = b->next(c.cfg().timeout_ms);
                   std::string what = "the second requester: " + sb.describe();
                   if (sb.kind == Seen::Kind::kSilence) return Verdict::fail(what);
                   for (size_t i = 0; i < 16384; ++i)
                     if (p[i] != 0) return Verdict::fail(what + "; memory the first requester offered was written at byte " + std::to_string(i));
                   return a_still_served(c, what);
                 }});
  out.push_back({"two/flood-beside", "RFC 8166 3.3.1", Level::kShould,
                 "credits are per connection: a requester that sends far past its grant and stops reading its "
                 "replies does not hold up another requester's calls",
                 "each of the second requester's 8 calls answered", {}, [](Ctx& c) {
                   std::string why;
                   Requester* b = c.second(true, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   // The first requester is not polled while the second runs: its
                   // receives are not reposted, so the Responder's replies to it back up.
                   for (int i = 0; i < 60; ++i)
                     if (!c.rq().post(c.plain_call(c.xid()))) break;
                   for (int i = 0; i < 8; ++i)
                     if (auto bad = b_call(c, b, 0x6b000000u + static_cast<uint32_t>(i)))
                       return Verdict::fail("call " + std::to_string(i) + ": " + *bad);
                   return Verdict::pass("the second requester's 8 calls answered beside a flood of 60");
                 }});
  out.push_back({"two/same-xid", "RFC 8166 4.2.1", Level::kShould,
                 "xids are matched per connection: two requesters that use the same xid at once each get their "
                 "own reply",
                 "a reply with that xid on each connection", {}, [](Ctx& c) {
                   std::string why;
                   Requester* b = c.second(false, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   uint32_t x = 0x5a3e0001;
                   if (!c.rq().post(c.plain_call(x)) || !b->post(c.plain_call(x)))
                     return Verdict::fail("a SEND failed");
                   Seen sa = c.next();
                   if (auto bad = c.bad_reply(sa, x)) return Verdict::fail("the first requester: " + *bad);
                   Seen sb = b->next(c.cfg().timeout_ms);
                   if (auto bad = c.bad_reply(sb, x)) return Verdict::fail("the second requester: " + *bad);
                   return Verdict::pass("each requester got its own reply");
                 }});
  out.push_back({"two/errors-beside", "RFC 8166 4.5.1", Level::kShould,
                 "one requester's version and header errors are answered on its connection only; the other's "
                 "calls in between are served",
                 "ERR_VERS / ERR_CHUNK to the first, replies to the second", {}, [](Ctx& c) {
                   std::string why;
                   Requester* b = c.second(true, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   for (int i = 0; i < 4; ++i) {
                     uint32_t x = c.xid();
                     Xdr bad;
                     bad.u32(x).u32(2).u32(32).u32(0).u32(0).u32(0).u32(0);
                     c.rq().post(bad.b);
                     if (auto e = b_call(c, b, 0x6c000000u + static_cast<uint32_t>(i)))
                       return Verdict::fail("call " + std::to_string(i) + ": " + *e);
                     Seen sa = c.next();
                     if (!sa.error(rpcrdma::ErrCode::kVers, x) && !sa.gone())
                       return Verdict::fail("the first requester's version-2 message: " + sa.describe());
                     if (sa.gone()) return Verdict::pass("the first requester was dropped; the second served");
                   }
                   return Verdict::pass("ERR_VERS to the first, replies to the second");
                 }});
  out.push_back({"two/loss-mid-call", "RFC 8166 4.5.5", Level::kShould,
                 "one requester lost mid-call (a long call being pulled) while another's call is in flight: the "
                 "other's call is served",
                 "the second requester's calls answered", {}, [](Ctx& c) {
                   std::string why;
                   Requester* b = c.second(true, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   uint32_t x = c.xid();
                   std::vector<uint8_t> rpc = c.rpc_call(x, 4096);
                   uint8_t* p = c.rq().chunk_mem(rpc.size());
                   std::memcpy(p, rpc.data(), rpc.size());
                   uint32_t key = c.offer(p, static_cast<uint32_t>(rpc.size()), kRead);
                   WireHeader h;
                   h.xid = x, h.proc = 1;
                   h.reads.push_back({0, {key, static_cast<uint32_t>(rpc.size()), c.remote(p)}});
                   c.rq().post(h.encode());
                   if (!b->post(c.plain_call(0x6d000001))) return Verdict::fail("the second requester's SEND failed");
                   c.rq().disconnect();
                   Seen sb = b->next(c.cfg().timeout_ms);
                   if (auto bad = c.bad_reply(sb, 0x6d000001)) return Verdict::fail("the second requester: " + *bad);
                   if (auto bad = b_call(c, b, 0x6d000002)) return Verdict::fail(*bad);
                   return Verdict::pass("the second requester served across the first one's loss");
                 }});
  out.push_back({"two/vanish-mid-call", "RFC 8166 4.5.5", Level::kShould,
                 "one requester vanishes (its QP destroyed, no goodbye) with calls in flight while another calls: "
                 "the other is served, now and after",
                 "the second requester's calls answered", {}, [](Ctx& c) {
                   std::string why;
                   Requester* b = c.second(true, &why);
                   if (b == nullptr) return Verdict::fail("a second requester could not connect: " + why);
                   for (int i = 0; i < 4; ++i) c.rq().post(c.plain_call(c.xid()));
                   c.rq().vanish();
                   for (int i = 0; i < 4; ++i)
                     if (auto bad = b_call(c, b, 0x6e000000u + static_cast<uint32_t>(i)))
                       return Verdict::fail("call " + std::to_string(i) + ": " + *bad);
                   return Verdict::pass("the second requester served after the first vanished");
                 }});
  // Each judges the responder's treatment of one requester by what another
  // sees: a third connection's load beside it would blur that.
  for (size_t i = first; i < out.size(); ++i) out[i].alone = true;
}

}  // namespace tern::torture
