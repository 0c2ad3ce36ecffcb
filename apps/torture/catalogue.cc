#include "catalogue.h"

#include <fnmatch.h>

#include <cstdio>

#include "base/json.h"

#include "oncrpc/oncrpc.h"

namespace tern::torture {

const char* level_name(Level l) {
  switch (l) {
    case Level::kMust: return "MUST";
    case Level::kShould: return "SHOULD";
    case Level::kMay: return "MAY";
  }
  return "?";
}

const char* outcome_name(Outcome r) {
  switch (r) {
    case Outcome::kPass: return "pass";
    case Outcome::kFail: return "FAIL";
    case Outcome::kSkip: return "skip";
  }
  return "?";
}

std::vector<uint8_t> WireHeader::encode() const {
  Xdr x;
  x.u32(xid).u32(vers).u32(credit).u32(proc);
  for (const auto& r : reads) x.u32(1).u32(r.position).seg(r.target);
  x.u32(0);
  for (const auto& w : writes) {
    x.u32(1).u32(static_cast<uint32_t>(w.size()));
    for (const auto& s : w) x.seg(s);
  }
  x.u32(0);
  if (reply) {
    x.u32(1).u32(static_cast<uint32_t>(reply->size()));
    for (const auto& s : *reply) x.seg(s);
  } else {
    x.u32(0);
  }
  return std::move(x.b);
}

std::vector<uint8_t> Ctx::ours(bool invalidate, uint32_t send, uint32_t recv) {
  rpcrdma::CmPrivateData d;
  d.remote_invalidation = invalidate;
  d.inline_send_size = send;
  d.inline_recv_size = recv;
  std::vector<uint8_t> v(rpcrdma::kCmPrivateSize);
  v.resize(rpcrdma::encode_cm_private(d, v));
  return v;
}

rpcrdma::InlineLimits Ctx::limits() const {
  // What we sent is in the case's Connect; the runner hands it over through
  // the requester's record of it.
  rpcrdma::CmPrivateData local;
  rpcrdma::CmPrivateStatus st = rpcrdma::decode_cm_private(sent_pdata_, &local);
  if (st != rpcrdma::CmPrivateStatus::kOk) return rpcrdma::InlineLimits{};  // RFC 8166 defaults
  return rpcrdma::negotiate_inline(local, rq_->accept_private());
}

std::vector<uint8_t> Ctx::rpc_call(const Procedure& p, uint32_t xid, std::span<const uint8_t> args) const {
  oncrpc::CallHeader h;
  h.xid = xid, h.prog = p.prog, h.vers = p.vers, h.proc = p.proc;
  std::vector<uint8_t> out(oncrpc::call_size(h) + args.size());
  out.resize(oncrpc::encode_call(h, out));
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

std::vector<uint8_t> Ctx::rpc_call(uint32_t xid, size_t pad) const {
  std::vector<uint8_t> args(pad, 0);
  return rpc_call(cfg_->call, xid, args);
}

std::vector<uint8_t> Ctx::plain_call(uint32_t xid, uint32_t credit, size_t pad) const {
  WireHeader h;
  h.xid = xid, h.credit = credit;
  std::vector<uint8_t> m = h.encode();
  std::vector<uint8_t> c = rpc_call(xid, pad);
  m.insert(m.end(), c.begin(), c.end());
  return m;
}

uint64_t Ctx::remote(const uint8_t* p, const uint8_t* p0) {
  if (rq_->caps().fast_reg_zero_based) return static_cast<uint64_t>(p - (p0 != nullptr ? p0 : p));
  return reinterpret_cast<uint64_t>(p);
}

bool Ctx::send_call(WireHeader h, std::span<const uint8_t> rpc, std::vector<uint32_t>* offered) {
  std::vector<uint8_t> m = h.encode();
  if (m.size() + rpc.size() <= limits().max_send) {
    m.insert(m.end(), rpc.begin(), rpc.end());
    return rq_->post(m);
  }
  uint8_t* p = rq_->chunk_mem(rpc.size());
  if (p == nullptr) return false;
  std::copy(rpc.begin(), rpc.end(), p);
  uint32_t rkey = offer(p, static_cast<uint32_t>(rpc.size()), rdma::kAccessRemoteRead);
  if (rkey == 0) return false;
  offered->push_back(rkey);
  h.proc = static_cast<uint32_t>(rpcrdma::Proc::kNoMsg);
  h.reads.insert(h.reads.begin(), {0, {rkey, static_cast<uint32_t>(rpc.size()), remote(p)}});
  return rq_->post(h.encode());
}

bool Ctx::reconnect(std::string* why) {
  slot_->reset();
  *slot_ = std::make_unique<Requester>(session_);
  rq_ = slot_->get();
  sent_pdata_ = ours();
  Status st = rq_->connect(sent_pdata_, cfg_->timeout_ms);
  connected_ = st.is_ok();
  if (!connected_) *why = st.to_string();
  return connected_;
}

Requester* Ctx::second(bool own_pd, std::string* why) {
  Session* s = session_;
  if (own_pd) {
    auto o = Session::open(cfg_->spec, cfg_->idle_us);
    if (!o) {
      *why = o.status().to_string();
      return nullptr;
    }
    other_session_ = std::move(o).value();
    s = other_session_.get();
  }
  other_ = std::make_unique<Requester>(s);
  Status st = other_->connect(ours(), cfg_->timeout_ms);
  if (!st.is_ok()) {
    *why = st.to_string();
    return nullptr;
  }
  return other_.get();
}

Seen Ctx::next(int ms) { return rq_->next(ms < 0 ? cfg_->timeout_ms : ms); }

Seen Ctx::exchange(std::span<const uint8_t> msg, uint32_t inv_rkey) {
  if (!rq_->post(msg, inv_rkey)) {
    Seen s;
    s.kind = Seen::Kind::kSendFailed;
    return s;
  }
  return next();
}

std::optional<std::string> Ctx::bad_reply(const Seen& s, uint32_t xid, const uint8_t* reply_chunk,
                                          std::span<const uint32_t> offered) {
  if (!s.message()) return "wanted a reply, saw " + s.describe();
  if (s.status != rpcrdma::DecodeStatus::kOk || s.hdr.vers != rpcrdma::kVersion)
    return "wanted a reply, saw " + s.describe();
  if (s.hdr.proc != rpcrdma::Proc::kMsg && s.hdr.proc != rpcrdma::Proc::kNoMsg)
    return "wanted a reply, saw " + s.describe();
  if (s.hdr.xid != xid) return "wanted the reply to xid " + std::to_string(xid) + ", saw " + s.describe();
  if (s.hdr.credit == 0) return "the reply grants zero credits (RFC 8166 3.3.1 forbids it): " + s.describe();
  uint32_t max_recv = limits().max_recv;
  if (s.bytes.size() > max_recv)
    return "the reply is " + std::to_string(s.bytes.size()) + " bytes inline, over the " + std::to_string(max_recv) +
           "-byte threshold the requester advertised (RFC 8166 3.3.2)";
  if (s.with_inv) {
    bool ours = false;
    for (uint32_t k : offered) ours = ours || k == s.inv_rkey;
    if (!ours) return "the reply invalidates rkey " + std::to_string(s.inv_rkey) + ", not one this call offered (RFC 8797 4.2)";
    if (!limits().receive_invalidate)
      return "the reply came by Send With Invalidate though the requester did not advertise I (RFC 8797 4.2)";
  }
  std::span<const uint8_t> rpc;
  if (s.hdr.proc == rpcrdma::Proc::kMsg) {
    rpc = std::span<const uint8_t>(s.bytes).subspan(s.header_len);
  } else {
    if (!s.hdr.chunks.has_reply || reply_chunk == nullptr)
      return "RDMA_NOMSG reply without a reply chunk we offered: " + s.describe();
    rpc = std::span<const uint8_t>(reply_chunk, static_cast<size_t>(s.hdr.chunks.reply.total_length()));
  }
  oncrpc::ReplyHeader rh;
  auto r = oncrpc::decode_reply(rpc, &rh);
  if (r.status != oncrpc::ReplyDecodeStatus::kOk || rh.xid != xid)
    return "the RPC message carried is not a reply to xid " + std::to_string(xid) + ": " + s.describe();
  return std::nullopt;
}

int Ctx::accept_stat(const Seen& s) const {
  if (!s.message() || s.status != rpcrdma::DecodeStatus::kOk || s.hdr.proc != rpcrdma::Proc::kMsg) return -1;
  oncrpc::ReplyHeader rh;
  auto r = oncrpc::decode_reply(std::span<const uint8_t>(s.bytes).subspan(s.header_len), &rh);
  if (r.status != oncrpc::ReplyDecodeStatus::kOk || rh.stat != oncrpc::ReplyStat::kAccepted) return -1;
  return static_cast<int>(rh.accept);
}

std::optional<std::string> Ctx::not_alive() {
  uint32_t x = xid();
  std::vector<uint8_t> m = plain_call(x);
  Seen s = exchange(m);
  // Stragglers of the case (a late error, a second reply) come first.
  while (s.message() && s.hdr.xid != x) s = next();
  if (auto why = bad_reply(s, x)) return "the connection no longer carries a plain call: " + *why;
  return std::nullopt;
}

Verdict Ctx::want_reply(const Seen& s, uint32_t xid, std::span<const uint32_t> offered, const uint8_t* reply_chunk) {
  if (auto why = bad_reply(s, xid, reply_chunk, offered)) return Verdict::fail(*why);
  return Verdict::pass(s.describe());
}

Verdict Ctx::want_err_chunk(const Seen& s, uint32_t xid) {
  if (s.error(rpcrdma::ErrCode::kChunk, xid)) return Verdict::pass(s.describe());
  return Verdict::fail(s.describe());
}

Verdict Ctx::want_err_chunk_or_gone(const Seen& s, uint32_t xid) {
  if (s.error(rpcrdma::ErrCode::kChunk, xid) || s.gone()) return Verdict::pass(s.describe());
  return Verdict::fail(s.describe());
}

Verdict Ctx::want_any_answer(const Seen& s, uint32_t xid, std::span<const uint32_t> offered) {
  if (s.gone() || s.error(rpcrdma::ErrCode::kChunk, xid)) return Verdict::pass(s.describe());
  if (auto why = bad_reply(s, xid, nullptr, offered)) return Verdict::fail(*why);
  return Verdict::pass(s.describe());
}

Verdict Ctx::want_silence_then_alive() {
  Seen s = next(cfg_->quiet_ms);
  if (s.kind != Seen::Kind::kSilence) return Verdict::fail("wanted silence, saw " + s.describe());
  if (auto why = not_alive()) return Verdict::fail("silence, then " + *why);
  return Verdict::pass("silence, and the connection still serves calls");
}

bool matches(const std::string& id, const std::vector<std::string>& globs) {
  if (globs.empty()) return true;
  for (const auto& g : globs)
    if (fnmatch(g.c_str(), id.c_str(), 0) == 0) return true;
  return false;
}

void print_row(const ReportRow& r, bool quiet) {
  const Verdict& v = r.verdict;
  if (!quiet || v.result == Outcome::kFail)
    std::printf("%-4s %-40s %-16s %-6s %s\n", outcome_name(v.result), r.id.c_str(), r.section.c_str(),
                level_name(r.level), v.seen.c_str());
  if (v.result == Outcome::kFail)
    std::printf("       requires: %s\n       expected: %s\n", r.requirement.c_str(), r.expect.c_str());
  std::fflush(stdout);
}

void print_list(const std::vector<ReportRow>& rows) {
  for (const ReportRow& r : rows)
    std::printf("%-40s %-16s %-6s %s\n", r.id.c_str(), r.section.c_str(), level_name(r.level), r.requirement.c_str());
  std::printf("%zu cases\n", rows.size());
}

int report(const std::vector<ReportRow>& rows, const std::string& against, const std::string& json) {
  unsigned n[3][3] = {};
  for (const ReportRow& r : rows) ++n[static_cast<int>(r.level)][static_cast<int>(r.verdict.result)];
  std::printf("\n%-6s %6s %6s %6s\n", "level", "pass", "fail", "skip");
  for (Level l : {Level::kMust, Level::kShould, Level::kMay}) {
    auto i = static_cast<int>(l);
    std::printf("%-6s %6u %6u %6u\n", level_name(l), n[i][0], n[i][1], n[i][2]);
  }
  std::printf("%zu cases against %s\n", rows.size(), against.c_str());
  if (!json.empty()) {
    std::string j = "{\"spec\": " + json_quote(against) + ", \"cases\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const ReportRow& r = rows[i];
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", r.ms);
      j += "  {\"id\": " + json_quote(r.id) + ", \"section\": " + json_quote(r.section) +
           ", \"level\": " + json_quote(level_name(r.level)) + ", \"result\": " + json_quote(outcome_name(r.verdict.result)) +
           ", \"requirement\": " + json_quote(r.requirement) + ", \"expected\": " + json_quote(r.expect) +
           ", \"seen\": " + json_quote(r.verdict.seen) + ", \"ms\": " + ms + "}" + (i + 1 < rows.size() ? ",\n" : "\n");
    }
    j += "]}\n";
    FILE* f = json == "-" ? stdout : std::fopen(json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "rpcrdma-torture: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fputs(j.c_str(), f);
    if (f != stdout) std::fclose(f);
  }
  return n[0][1] != 0 ? 1 : 0;
}

std::vector<Case> catalogue() {
  std::vector<Case> all;
  add_header_cases(all);
  add_credit_cases(all);
  add_inline_cases(all);
  add_chunk_cases(all);
  add_connection_cases(all);
  add_two_requester_cases(all);
  return all;
}

}  // namespace tern::torture
