// Credits (RFC 8166 3.3.1, 4.2.3): what a Requester asks for in rdma_credit
// is a request; the Responder's grant in each reply is the limit of calls
// in flight, which must not be zero (a Requester with no credits could
// never send again) and which the Responder must be ready to receive.
#include "catalogue.h"

namespace tern::torture {

namespace {

// Sends a plain call asking for `credit` and checks the reply; *grant gets
// the responder's grant.
std::optional<std::string> one_call(Ctx& c, uint32_t credit, uint32_t* grant = nullptr) {
  uint32_t x = c.xid();
  Seen s = c.exchange(c.plain_call(x, credit));
  if (auto why = c.bad_reply(s, x)) return why;
  if (grant != nullptr) *grant = s.hdr.credit;
  return std::nullopt;
}

// n calls back to back, then all n replies (any order).
std::optional<std::string> burst(Ctx& c, uint32_t n) {
  std::vector<uint32_t> xids;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t x = c.xid();
    xids.push_back(x);
    if (!c.rq().post(c.plain_call(x))) return "our SEND " + std::to_string(i) + " failed";
  }
  for (uint32_t i = 0; i < n; ++i) {
    Seen s = c.next();
    if (!s.message()) return "reply " + std::to_string(i) + " of " + std::to_string(n) + ": " + s.describe();
    auto it = std::find(xids.begin(), xids.end(), s.hdr.xid);
    if (it == xids.end()) return "a reply to no call of the burst: " + s.describe();
    if (auto why = c.bad_reply(s, *it)) return why;
    xids.erase(it);
  }
  return std::nullopt;
}

}  // namespace

void add_credit_cases(std::vector<Case>& out) {
  for (uint32_t req : {0u, 1u, 2u, 16u, 128u, 255u, 256u, 65535u, 0x7fffffffu, 0xffffffffu}) {
    out.push_back({"credit/request-" + std::to_string(req), "RFC 8166 3.3.1", Level::kMust,
                   "rdma_credit in a call is only a request; whatever is asked (zero, one, more than the Responder "
                   "has), the reply grants at least one credit",
                   "a reply granting >= 1", {}, [req](Ctx& c) {
                     uint32_t g = 0;
                     if (auto why = one_call(c, req, &g)) return Verdict::fail(*why);
                     return Verdict::pass("granted " + std::to_string(g));
                   }});
  }
  const std::pair<const char*, std::vector<uint32_t>> seqs[] = {
      {"zero-one-zero", {0, 1, 0, 1}},
      {"all-zero", {0, 0, 0, 0, 0, 0}},
      {"huge-one-huge", {0xffffffffu, 1, 0xffffffffu, 1}},
      {"rising", {1, 2, 4, 8, 16, 32, 64, 128}},
      {"falling", {128, 64, 32, 16, 8, 4, 2, 1}}};
  for (const auto& [name, seq] : seqs) {
    out.push_back({std::string("credit/changing-") + name, "RFC 8166 3.3.1", Level::kMust,
                   "a Requester may change its request with every call; each reply still grants at least one",
                   "a reply granting >= 1 to every call", {}, [seq](Ctx& c) {
                     std::string grants;
                     for (uint32_t r : seq) {
                       uint32_t g = 0;
                       if (auto why = one_call(c, r, &g)) return Verdict::fail("asking " + std::to_string(r) + ": " + *why);
                       if (!grants.empty()) grants += ',';
                       grants += std::to_string(g);
                     }
                     return Verdict::pass("grants " + grants);
                   }});
  }
  // The Responder must be ready for as many calls as it granted.
  for (uint32_t n : {2u, 4u, 8u, 0u}) {
    std::string id = n == 0 ? "credit/in-flight-grant" : "credit/in-flight-" + std::to_string(n);
    out.push_back({id, "RFC 8166 3.3.1", Level::kMust,
                   "the grant is the number of calls the Requester may have in flight: that many calls sent back "
                   "to back are all received and answered" +
                       std::string(n == 0 ? " (the whole grant, capped at 30)" : " (capped at the grant)"),
                   "a reply to every call of the burst", {}, [n](Ctx& c) {
                     uint32_t g = 0;
                     if (auto why = one_call(c, 32, &g)) return Verdict::fail("first call: " + *why);
                     uint32_t k = std::min<uint32_t>(n == 0 ? g : std::min(n, g), 30);
                     if (auto why = burst(c, k)) return Verdict::fail("grant " + std::to_string(g) + ": " + *why);
                     return Verdict::pass(std::to_string(k) + " calls in flight, all answered (grant " +
                                          std::to_string(g) + ")");
                   }});
  }
  out.push_back({"credit/over-grant", "RFC 8166 3.3.1", Level::kMay,
                 "a Requester that exceeds its grant breaks the rule; the Responder may answer the excess, fail "
                 "it, or lose the connection, but never hangs",
                 "replies, or a disconnect", {}, [](Ctx& c) {
                   uint32_t g = 0;
                   if (auto why = one_call(c, 1, &g)) return Verdict::fail("first call: " + *why);
                   uint32_t k = std::min<uint32_t>(g + 4, 30);
                   std::vector<uint32_t> xids;
                   for (uint32_t i = 0; i < k; ++i) {
                     xids.push_back(c.xid());
                     if (!c.rq().post(c.plain_call(xids.back()))) return Verdict::pass("the connection ended");
                   }
                   uint32_t replies = 0;
                   for (uint32_t i = 0; i < k; ++i) {
                     Seen s = c.next();
                     if (s.gone()) return Verdict::pass("a disconnect after " + std::to_string(replies) + " replies");
                     if (!s.message()) return Verdict::fail("after " + std::to_string(replies) + " replies: " + s.describe());
                     ++replies;
                   }
                   return Verdict::pass("all " + std::to_string(k) + " answered (grant " + std::to_string(g) + ")");
                 }});
}

}  // namespace tern::torture
