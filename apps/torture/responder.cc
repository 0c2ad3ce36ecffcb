#include "responder.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "oncrpc/oncrpc.h"

namespace tern::torture {

using rpc::CallStatus;
using namespace tern::rdma;

const char* shape_name(Shape s) {
  switch (s) {
    case Shape::kPlain: return "plain";
    case Shape::kWrite: return "write";
    case Shape::kReply: return "reply";
    case Shape::kRead: return "read";
    case Shape::kLong: return "long";
  }
  return "?";
}

namespace {

void on_done(void* ctx, const rpc::CallReply& r) {
  auto* p = static_cast<Pending*>(ctx);
  ++p->completions;
  p->reply = r;
  p->results.assign(r.results.begin(), r.results.end());
}

uint8_t pat(size_t i) { return static_cast<uint8_t>(i * 7 + 3 + (i >> 9)); }

// The raw responder's queues: receives larger than the client's inline
// threshold (a call over it is seen, not lost), send slots that hold a
// reply chunk's worth.
rawpeer::PeerShape responder_shape() {
  rawpeer::PeerShape s;
  s.recvs = 32, s.recv_buf = 16 * 1024, s.sq_depth = 64, s.tx_slot = 32 * 1024;
  s.arena = 12u << 20;
  return s;
}

}  // namespace

RCtx::RCtx(const RespondConfig& cfg, const RConnect& how, std::string spec)
    : cfg_(cfg), how_(how), spec_(std::move(spec)) {}

RCtx::~RCtx() {
  // The connections first (their memory is the engine's), then the responders.
  for (auto* c : conns_)
    if (c != nullptr) c->close();
  conns_.clear();
  if (cli_) cli_->poll();
  srv_.clear();
  home_.reset();
  cli_.reset();
}

bool RCtx::wait(const std::function<bool()>& pred, int ms) {
  return rawpeer::poll_until([this] { pump(); }, pred, ms < 0 ? cfg_.timeout_ms : ms);
}

bool RCtx::setup(std::string* why) {
  rpc::EngineOptions co;
  co.arena_bytes = 24u << 20;
  co.reconnect = how_.reconnect;
  co.remote_invalidation = how_.client_inv;
  co.credits = how_.credits;
  auto e = rpc::Engine::create(co);
  if (!e) {
    *why = "client engine: " + e.status().to_string();
    return false;
  }
  cli_ = std::move(e).value();
  region_ = static_cast<uint8_t*>(cli_->alloc(3 * kChunk));
  secret_ = static_cast<uint8_t*>(cli_->alloc(kChunk));
  send_buf_ = static_cast<uint8_t*>(cli_->alloc(kChunk));
  if (region_ == nullptr || secret_ == nullptr || send_buf_ == nullptr) {
    *why = "client engine: no memory";
    return false;
  }
  std::memset(region_, kGuard, 3 * kChunk);
  offered_ = region_ + kChunk;
  std::memset(secret_, kSecret, kChunk);
  for (uint32_t i = 0; i < kChunk; ++i) send_buf_[i] = pat(i + 1);
  long_args_.assign(6000, 0x6c);

  home_ = std::make_unique<rawpeer::RawPeer>([this] { pump(); });
  Status st = home_->open(spec_, responder_shape());
  if (st.is_ok()) st = home_->listen();
  if (!st.is_ok()) {
    *why = "raw responder: " + st.to_string();
    return false;
  }
  for (int i = 0; i < how_.connections; ++i) {
    auto c = cli_->connect(spec_);
    if (!c) {
      *why = "client connect: " + c.status().to_string();
      return false;
    }
    conns_.push_back(c.value());
    srv_.emplace_back();
    if (!accept_again(i)) {
      *why = "the client's connection did not come up: " + conns_.back()->error().to_string();
      return false;
    }
  }
  return true;
}

bool RCtx::accept_again(int i) {
  auto s = home_->sibling(responder_shape());
  if (!s) return false;
  srv_[static_cast<size_t>(i)] = std::move(s).value();
  Status st = srv(i).accept_one(rpcrdma::CmPrivateData{how_.invalidate, 4096, 4096}, cfg_.timeout_ms);
  if (!st.is_ok()) return false;
  return wait([&] { return conn(i)->ready() || conn(i)->failed(); }) && conn(i)->ready();
}

Pending* RCtx::issue(Shape s, int i, uint64_t timeout_ns) {
  auto p = std::make_unique<Pending>();
  p->shape = s;
  uint8_t args[8] = {0, 0, 0, 1, 0, 0, 0, 2};
  rpc::Call c{kProg, kVers, kProc};
  c.args = std::span<const uint8_t>(args, sizeof args);
  switch (s) {
    case Shape::kPlain: break;
    case Shape::kWrite: c.bulk_recv = std::span<uint8_t>(offered_, kChunk); break;
    case Shape::kReply: c.max_results = kMaxResults; break;
    case Shape::kRead: c.bulk_send = std::span<const uint8_t>(send_buf_, kReadLen); break;
    case Shape::kLong: c.args = long_args_; break;
  }
  c.done = on_done;
  c.ctx = p.get();
  c.timeout_ns = timeout_ns;
  if (conn(i)->call(c, &p->xid) != 0) return nullptr;
  pendings_.push_back(std::move(p));
  return pendings_.back().get();
}

std::optional<TakenCall> RCtx::take(int i, int ms) {
  auto m = srv(i).recv(ms < 0 ? cfg_.timeout_ms : ms);
  if (!m) return std::nullopt;
  TakenCall tc;
  tc.bytes = std::move(m->bytes);
  auto d = rpcrdma::decode_header(tc.bytes, &tc.h);
  if (d.status != rpcrdma::DecodeStatus::kOk) return std::nullopt;
  tc.xid = tc.h.xid;
  if (tc.h.chunks.nwrites > 0 && tc.h.chunks.writes[0].nsegments > 0) tc.write = tc.h.chunks.writes[0].segments[0];
  if (tc.h.chunks.has_reply && tc.h.chunks.reply.nsegments > 0) {
    tc.reply = tc.h.chunks.reply.segments[0];
    tc.reply_room = tc.h.chunks.reply.total_length();
  }
  if (tc.h.chunks.nreads > 0) tc.read = tc.h.chunks.reads[0].target;
  return tc;
}

std::optional<TakenCall> RCtx::issue_take(Shape s, Pending** p, std::string* why, int i) {
  *p = issue(s, i);
  if (*p == nullptr) {
    *why = "the client refused to issue a call";
    return std::nullopt;
  }
  auto tc = take(i);
  if (!tc) *why = "the raw responder received no call";
  return tc;
}

std::vector<uint8_t> RCtx::rpc_reply(uint32_t xid, std::span<const uint8_t> results) const {
  std::vector<uint8_t> r;
  if (results.empty()) {
    rawpeer::put32(r, xid);
    results = r;
  }
  return rawpeer::rpc_success(xid, results);
}

std::vector<uint8_t> RCtx::msg_reply(const TakenCall& tc, uint32_t credit, std::optional<uint32_t> written,
                                     std::span<const uint8_t> rpc) {
  rpcrdma::Header h = rawpeer::plain_header(tc.xid, credit);
  if (written && tc.h.chunks.nwrites > 0) {
    h.chunks.nwrites = 1;
    h.chunks.writes[0].nsegments = 1;
    h.chunks.writes[0].segments[0] = rpcrdma::Segment{tc.write.handle, *written, tc.write.offset};
  }
  std::vector<uint8_t> body = rpc.empty() ? rpc_reply(tc.xid) : std::vector<uint8_t>(rpc.begin(), rpc.end());
  return rawpeer::rdma_msg(h, body);
}

std::vector<uint8_t> RCtx::nomsg_reply(const TakenCall& tc, int s, std::optional<uint32_t> claim, uint32_t credit) {
  std::vector<uint8_t> rpc = rpc_reply(tc.xid);
  if (tc.reply.handle != 0 && tc.reply.length >= rpc.size())
    (void)srv(s).write(rpc.data(), static_cast<uint32_t>(rpc.size()), tc.reply.handle, tc.reply.offset);
  rpcrdma::Header h = rawpeer::plain_header(tc.xid, credit, rpcrdma::Proc::kNoMsg);
  h.chunks.has_reply = true;
  h.chunks.reply.nsegments = 1;
  h.chunks.reply.segments[0] =
      rpcrdma::Segment{tc.reply.handle, claim.value_or(static_cast<uint32_t>(rpc.size())), tc.reply.offset};
  return rawpeer::rdma_msg(h);
}

bool RCtx::fill_write(const TakenCall& tc, uint32_t n, int s) {
  std::vector<uint8_t> data(n);
  for (uint32_t i = 0; i < n; ++i) data[i] = pat(i);
  for (uint32_t off = 0; off < n; off += 16 * 1024) {
    uint32_t len = std::min<uint32_t>(16 * 1024, n - off);
    if (srv(s).write(data.data() + off, len, tc.write.handle, tc.write.offset + off) != WcStatus::kSuccess)
      return false;
  }
  return true;
}

bool RCtx::send(std::span<const uint8_t> bytes, uint32_t inv_rkey, int s) {
  if (!srv_[static_cast<size_t>(s)]) return false;
  return srv(s).post(bytes, inv_rkey);
}

std::string RCtx::describe(const Pending* p) const {
  if (!p->done()) return "the call has not completed";
  std::string s = std::string("completed ") + rpc::call_status_name(p->reply.status);
  if (p->completions != 1) s += " (" + std::to_string(p->completions) + " completions)";
  return s;
}

std::optional<std::string> RCtx::want(Pending* p, std::initializer_list<CallStatus> allowed) {
  if (p == nullptr) return std::string("the client refused to issue the call");
  if (!wait([&] { return p->done(); })) return "the call never completed (" + std::to_string(cfg_.timeout_ms) + " ms)";
  // A second completion would come from the same poll or the next few.
  wait([] { return false; }, 5);
  if (p->completions != 1) return "the call completed " + std::to_string(p->completions) + " times";
  for (CallStatus s : allowed)
    if (p->reply.status == s) return std::nullopt;
  std::string w;
  for (CallStatus s : allowed) w += std::string(w.empty() ? "" : " or ") + rpc::call_status_name(s);
  return std::string("the call completed ") + rpc::call_status_name(p->reply.status) + ", wanted " + w;
}

std::optional<std::string> RCtx::want_ok(Pending* p) {
  if (auto why = want(p, {CallStatus::kOk})) return why;
  uint8_t x[4] = {uint8_t(p->xid >> 24), uint8_t(p->xid >> 16), uint8_t(p->xid >> 8), uint8_t(p->xid)};
  if (p->results.size() != 4 || std::memcmp(p->results.data(), x, 4) != 0)
    return "the call completed kOk with " + std::to_string(p->results.size()) + " bytes of results, not its own";
  return std::nullopt;
}

Verdict RCtx::after_bad(Pending* p, const TakenCall& tc, std::initializer_list<CallStatus> allowed) {
  wait([&] { return p->done() || !conn()->ready(); }, cfg_.quiet_ms);
  if (p->done()) {
    std::vector<CallStatus> ok(allowed);
    ok.push_back(CallStatus::kDisconnected);
    bool in = false;
    for (CallStatus s : ok) in = in || s == p->reply.status;
    if (!in || p->completions != 1) return Verdict::fail(describe(p));
    return Verdict::pass(describe(p));
  }
  if (!conn()->ready()) {
    if (auto why = want(p, {CallStatus::kDisconnected})) return Verdict::fail("the connection was dropped, but " + *why);
    return Verdict::pass("dropped the connection; the call completed kDisconnected");
  }
  if (!send(msg_reply(tc))) return Verdict::fail("could not send the real reply");
  if (auto why = want_ok(p)) return Verdict::fail("ignored it, then the real reply: " + *why);
  return Verdict::pass("ignored it; the real reply completed the call");
}

std::optional<std::string> RCtx::memory_touched() const {
  for (size_t i = 0; i < kChunk; ++i) {
    if (region_[i] != kGuard) return "client memory before the offered chunk changed at byte " + std::to_string(i);
    if (region_[2 * kChunk + i] != kGuard) return "client memory after the offered chunk changed at byte " + std::to_string(i);
    if (secret_[i] != kSecret) return "client memory never offered changed at byte " + std::to_string(i);
  }
  return std::nullopt;
}

std::optional<std::string> RCtx::finish() {
  std::optional<std::string> bad;
  // A call still waiting here is one the case never saw end: closing its
  // connection must complete it (kDisconnected), once.
  for (auto& c : conns_) {
    if (c != nullptr) c->close();
    c = nullptr;
  }
  for (size_t i = 0; i < pendings_.size() && !bad; ++i) {
    Pending* p = pendings_[i].get();
    if (!wait([&] { return p->done(); }))
      bad = "call " + std::to_string(i) + " (xid " + std::to_string(p->xid) + ") never completed, even after close()";
  }
  wait([] { return false; }, 10);
  for (size_t i = 0; i < pendings_.size() && !bad; ++i)
    if (pendings_[i]->completions != 1)
      bad = "call " + std::to_string(i) + " completed " + std::to_string(pendings_[i]->completions) + " times";
  if (!bad) bad = memory_touched();
  srv_.clear();
  if (!bad) {
    const rpc::EngineStats& st = cli_->stats();
    if (!wait([&] { return st.rkeys_live.get() == 0 && st.connections.get() == 0 && st.waiting_for_memory.get() == 0; }))
      bad = "not idle after close: " + std::to_string(st.rkeys_live.get()) + " rkeys reachable, " +
            std::to_string(st.connections.get()) + " connections held, " + std::to_string(st.waiting_for_memory.get()) +
            " calls waiting for memory";
  }
  return bad;
}

std::vector<RCase> responder_catalogue() {
  std::vector<RCase> all;
  add_responder_reply_cases(all);
  add_responder_loss_cases(all);
  return all;
}

int run_responder(const RespondConfig& cfg, const std::vector<std::string>& globs, bool list, bool quiet,
                  const std::string& json) {
  std::vector<RCase> all = responder_catalogue();
  std::vector<ReportRow> rows;
  int n = 0;
  for (const RCase& c : all) {
    if (!matches(c.id, globs)) continue;
    ReportRow row{c.id, c.section, c.level, c.requirement, c.expect, {}, 0};
    if (list) {
      rows.push_back(std::move(row));
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::string spec, path;
    if (cfg.device == "shm" || cfg.device.starts_with("shm:")) {
      path = "/tmp/rpcrdma-torture-r-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
      spec = (cfg.device == "shm" ? std::string("shm:") : cfg.device + ",") + "path=" + path;
    } else {
      spec = cfg.device + ",port=" + std::to_string(20600 + (n++ % 200));
    }
    Verdict v;
    {
      RCtx ctx(cfg, c.connect, spec);
      std::string why;
      if (!ctx.setup(&why)) {
        v = Verdict::fail("setting up: " + why);
      } else {
        v = c.run(ctx);
        if (v.result != Outcome::kSkip) {
          if (auto bad = ctx.finish()) {
            v = Verdict::fail(v.seen + "; then " + *bad);
          }
        }
      }
    }
    if (!path.empty()) unlink(path.c_str());
    row.verdict = std::move(v);
    row.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    print_row(row, quiet);
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    std::fprintf(stderr, "rpcrdma-torture: no case matches\n");
    return 2;
  }
  if (list) {
    print_list(rows);
    return 0;
  }
  return report(rows, "Tern's client engine over " + cfg.device, json);
}

}  // namespace tern::torture
