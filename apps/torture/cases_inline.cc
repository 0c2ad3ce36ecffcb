// Inline thresholds: RFC 8166 3.3.2 (each direction's threshold; 1024 bytes
// unless the peers agree on more, 3.3.3) and RFC 8797's connection private
// data, by which they agree. The private data is optional and extensible:
// a Responder must take a connection whatever it carries.
#include "catalogue.h"

namespace tern::torture {

namespace {

std::vector<uint8_t> pdata(uint32_t format, uint8_t version, uint8_t flags, uint8_t send, uint8_t recv) {
  Xdr x;
  x.u32(format);
  x.b.push_back(version);
  x.b.push_back(flags);
  x.b.push_back(send);
  x.b.push_back(recv);
  return std::move(x.b);
}

// The responder took the connection, said something sensible back, and
// serves a call.
Verdict served(Ctx& c) {
  if (!c.connected()) return Verdict::fail("the connection was refused: " + c.connect_error());
  const auto& pd = c.rq().accept_private();
  rpcrdma::CmPrivateData d;
  if (rpcrdma::decode_cm_private(pd, &d) == rpcrdma::CmPrivateStatus::kUnsupportedVersion)
    return Verdict::fail("the responder's private data has our format but not version 1");
  if (auto why = c.not_alive()) return Verdict::fail(*why);
  return Verdict::pass(pd.empty() ? "served (the responder sent no private data)"
                                  : "served (responder: send " + std::to_string(d.inline_send_size) + ", receive " +
                                        std::to_string(d.inline_recv_size) + ", I=" +
                                        std::to_string(d.remote_invalidation) + ")");
}

}  // namespace

void add_inline_cases(std::vector<Case>& out) {
  auto add = [&out](std::string id, std::string section, Level level, std::string req, std::vector<uint8_t> pd) {
    out.push_back({"pdata/" + std::move(id), std::move(section), level, std::move(req),
                   "the connection is accepted and a call answered", Connect{std::move(pd), true}, served});
  };
  add("absent", "RFC 8797 5.1", Level::kMust,
      "private data is optional: a Requester that sends none is served with RFC 8166's default 1024-byte "
      "thresholds",
      {});
  add("ours", "RFC 8797 4", Level::kMust, "well-formed private data (I set, 4 KiB send, 1 KiB receive) is accepted",
      Ctx::ours());
  const std::pair<uint8_t, uint8_t> sizes[] = {{0, 0}, {0, 255}, {255, 0}, {3, 3}, {255, 255}, {7, 31}};
  for (auto [s, r] : sizes)
    add("sizes-" + std::to_string(s) + "-" + std::to_string(r), "RFC 8797 3.1", Level::kMust,
        "any Send Size and Receive Size byte (1 KiB..256 KiB) is a valid advertisement",
        pdata(rpcrdma::kCmPrivateFormatId, 1, 1, s, r));
  add("no-invalidate", "RFC 8797 3.2", Level::kMust, "a Requester may leave I clear (it cannot take Send With Invalidate)",
      pdata(rpcrdma::kCmPrivateFormatId, 1, 0, 3, 0));
  for (uint8_t f : {uint8_t{0xfe}, uint8_t{0xff}, uint8_t{0x80}})
    add("flags-" + std::to_string(f), "RFC 8797 4", Level::kMust,
        "flag bits other than I are reserved: a receiver ignores them", pdata(rpcrdma::kCmPrivateFormatId, 1, f, 3, 0));
  for (uint32_t fmt : {0u, 0xdeadbeefu, 0xf6ab0e19u})
    add("format-" + std::to_string(fmt), "RFC 8797 5.1", Level::kMust,
        "private data of another format is not RPC-over-RDMA's: the receiver uses the defaults", pdata(fmt, 1, 1, 3, 0));
  for (uint8_t v : {uint8_t{0}, uint8_t{2}, uint8_t{255}})
    add("version-" + std::to_string(v), "RFC 8797 5.2", Level::kMust,
        "a private data version the receiver does not know: it uses the defaults (and the connection)",
        pdata(rpcrdma::kCmPrivateFormatId, v, 1, 3, 0));
  for (size_t len : {1u, 4u, 7u}) {
    std::vector<uint8_t> pd = Ctx::ours();
    pd.resize(len);
    add("short-" + std::to_string(len), "RFC 8797 5.1", Level::kMust,
        "private data shorter than the 8-byte format is not RPC-over-RDMA's: the receiver uses the defaults", pd);
  }
  for (size_t len : {9u, 16u, 32u, 56u}) {
    std::vector<uint8_t> pd = Ctx::ours();
    pd.resize(len, 0);
    add("padded-" + std::to_string(len), "RFC 8797 4", Level::kMust,
        "the CM may deliver private data padded with zeros (InfiniBand's fixed field): bytes past the 8 are "
        "ignored",
        pd);
  }
  {
    std::vector<uint8_t> pd = Ctx::ours();
    pd.insert(pd.end(), {0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4});
    add("trailing-garbage", "RFC 8797 6", Level::kShould,
        "bytes past the 8 are room for later extensions: a receiver that does not know them ignores them", pd);
  }

  // Messages at and over the threshold the two ends agreed on.
  struct Size {
    const char* name;
    int delta;
  };
  for (bool with_pd : {false, true}) {
    for (int delta : {-4, 0}) {
      std::string id = std::string("inline/") + (with_pd ? "agreed" : "default") + (delta == 0 ? "-at" : "-below");
      out.push_back({id, "RFC 8166 3.3.2", Level::kMust,
                     "a Responder receives every message up to its inline threshold (1024 bytes by default, else "
                     "the smaller of our Send Size and its Receive Size)",
                     "a reply",
                     Connect{with_pd ? std::optional<std::vector<uint8_t>>{} : std::vector<uint8_t>{}, false},
                     [delta](Ctx& c) {
                       uint32_t x = c.xid();
                       uint32_t limit = c.limits().max_send;
                       std::vector<uint8_t> m = c.plain_call(x, 32, 0);
                       size_t want = static_cast<size_t>(static_cast<int64_t>(limit) + delta);
                       if (m.size() > want) return Verdict::skip("the plain call alone is over the threshold");
                       // Pad the arguments so that the message is exactly `want` bytes.
                       m = c.plain_call(x, 32, (want - m.size()) & ~size_t{3});
                       Verdict v = c.want_reply(c.exchange(m), x);
                       v.seen += " (message " + std::to_string(m.size()) + " bytes, threshold " + std::to_string(limit) + ")";
                       return v;
                     }});
    }
    for (int over : {4, 1024, 16384}) {
      std::string id = std::string("inline/") + (with_pd ? "agreed" : "default") + "-over-" + std::to_string(over);
      out.push_back({id, "RFC 8166 3.3.2", Level::kMay,
                     "a message over the Responder's threshold breaks the Requester's side of the rule; the "
                     "Responder may still take it, answer ERR_CHUNK, or lose the connection (a receive too small "
                     "for it fails), but never hangs",
                     "a reply, ERR_CHUNK or a disconnect",
                     Connect{with_pd ? std::optional<std::vector<uint8_t>>{} : std::vector<uint8_t>{}, false},
                     [over](Ctx& c) {
                       uint32_t x = c.xid();
                       uint32_t limit = c.limits().max_send;
                       size_t base = c.plain_call(x).size();
                       std::vector<uint8_t> m = c.plain_call(x, 32, (limit + over - base + 3) & ~size_t{3});
                       Verdict v = c.want_any_answer(c.exchange(m), x);
                       v.seen += " (message " + std::to_string(m.size()) + " bytes, threshold " + std::to_string(limit) + ")";
                       return v;
                     }});
    }
  }
}

}  // namespace tern::torture
