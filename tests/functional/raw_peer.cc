#include "raw_peer.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "rpcrdma/cm_private.h"

namespace tern::test {

using namespace tern::rdma;

// ---------------------------------------------------------------- logs

LogCapture::LogCapture() : saved_level_(log_level()) {
  set_log_level(LogLevel::kInfo);
  set_log_sink(&LogCapture::sink, this);
}

LogCapture::~LogCapture() {
  set_log_sink(nullptr, nullptr);
  set_log_level(saved_level_);
}

void LogCapture::sink(void* ctx, const LogRecord& rec) {
  auto* self = static_cast<LogCapture*>(ctx);
  std::lock_guard<std::mutex> g(self->mu_);
  std::string peer = rec.peer != nullptr ? std::string(" [") + rec.peer + "]" : std::string();
  self->lines_.emplace_back(rec.level, std::string(rec.subsystem) + peer + ": " + rec.message);
}

std::vector<std::string> LogCapture::warnings(std::initializer_list<std::string_view> needles) const {
  return lines(needles, LogLevel::kWarn);
}

std::vector<std::string> LogCapture::lines(std::initializer_list<std::string_view> needles, LogLevel most) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::string> out;
  for (const auto& [level, line] : lines_) {
    if (level > most) continue;
    bool all = true;
    for (std::string_view n : needles) all = all && names(line, n);
    if (all) out.push_back(line);
  }
  return out;
}

std::string LogCapture::dump() const {
  std::lock_guard<std::mutex> g(mu_);
  std::string s;
  for (const auto& [level, line] : lines_) s += "  [" + std::to_string(static_cast<int>(level)) + "] " + line + "\n";
  return s;
}

void LogCapture::clear() {
  std::lock_guard<std::mutex> g(mu_);
  lines_.clear();
}

bool names(std::string_view line, std::string_view token) {
  for (size_t at = line.find(token); at != std::string_view::npos; at = line.find(token, at + 1)) {
    size_t end = at + token.size();
    bool digit_after = end < line.size() && line[end] >= '0' && line[end] <= '9';
    if (!digit_after) return true;
  }
  return false;
}

// ---------------------------------------------------------------- wire helpers

void put32(std::vector<uint8_t>& v, uint32_t x) {
  uint8_t b[4] = {uint8_t(x >> 24), uint8_t(x >> 16), uint8_t(x >> 8), uint8_t(x)};
  v.insert(v.end(), b, b + 4);
}

std::vector<uint8_t> rdma_msg(const rpcrdma::Header& h, std::span<const uint8_t> body) {
  std::vector<uint8_t> out(rpcrdma::encoded_size(h) + body.size());
  size_t n = rpcrdma::encode_header(h, out);
  out.resize(n);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<uint8_t> rpc_call(uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc,
                              std::span<const uint8_t> args) {
  oncrpc::CallHeader h;
  h.xid = xid, h.prog = prog, h.vers = vers, h.proc = proc;
  std::vector<uint8_t> out(oncrpc::call_size(h) + args.size());
  size_t n = oncrpc::encode_call(h, out);
  out.resize(n);
  out.insert(out.end(), args.begin(), args.end());
  return out;
}

std::vector<uint8_t> rpc_success(uint32_t xid, std::span<const uint8_t> results) {
  oncrpc::ReplyHeader h;
  h.xid = xid;
  std::vector<uint8_t> out(oncrpc::reply_size(h) + results.size());
  size_t n = oncrpc::encode_reply(h, out);
  out.resize(n);
  out.insert(out.end(), results.begin(), results.end());
  return out;
}

rpcrdma::Header plain_header(uint32_t xid, uint32_t credit, rpcrdma::Proc proc) {
  rpcrdma::Header h;
  h.xid = xid;
  h.credit = credit;
  h.proc = proc;
  h.chunks.clear();
  return h;
}

bool poll_until(const std::function<void()>& pump, const std::function<bool()>& pred, int ms) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  do {
    pump();
    if (pred()) return true;
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

// ---------------------------------------------------------------- device specs

bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

std::string fresh_spec(std::string_view tag) {
  static int n = 0;
  if (on_shm())
    return "shm:path=/tmp/tern-" + std::string(tag) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++) +
           ".sock";
  return std::string(std::getenv("TERN_RPC_DEVICE")) + ",port=" + std::to_string(20500 + n++);
}

void remove_spec(const std::string& spec) {
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
}

// ---------------------------------------------------------------- the peer

namespace {
// One send buffer per send-queue slot: a buffer is reused only after the WR
// that used it left the queue (a post succeeds only if there is room), so a
// flood of unsignaled sends never overwrites a message not yet sent.
constexpr uint32_t kTxSlot = 16 * 1024;
constexpr uint32_t kSqDepth = 256;
constexpr uint32_t kTxSlots = kSqDepth;
constexpr uint64_t kRecvTag = 1ull << 62;
}  // namespace

RawPeer::~RawPeer() {
  qp_.reset();
  fast_.clear();
  scq_.reset();
  rcq_.reset();
  if (sh_) std::erase(sh_->members, this);
}

RawPeer::Shared::~Shared() {
  mr.reset();
  pd.reset();
  dev.reset();
  arena.reset();
}

void RawPeer::Shared::pump_cm() {
  CmEvent ev;
  while (dev->poll_cm(&ev)) {
    if (ev.type == CmEventType::kConnectRequest) {
      requests.push_back(std::move(ev));
      continue;
    }
    for (RawPeer* m : members)
      if (m->qp_.get() == ev.qp) m->on_cm(ev);
  }
}

void RawPeer::on_cm(const CmEvent& ev) {
  if (ev.type == CmEventType::kEstablished) {
    established_ = true;
    if (peer_pdata_.empty()) peer_pdata_ = ev.private_data;
  } else {
    disconnected_ = true;
  }
}

Status RawPeer::open(std::string_view spec, uint32_t recvs) {
  spec_ = std::string(spec);
  sh_ = std::make_shared<Shared>();
  // The peer and its siblings carve 4.5 MiB each (receives and send slots)
  // and the tests' chunks (at most a few hundred KiB) from it. No larger:
  // the whole arena is faulted in and zeroed by the kernel when it is
  // created, and a test makes a raw peer per case (bulk_isolation's
  // attacker a dozen).
  auto a = mem::Arena::create({.size = 16u << 20, .huge = mem::HugePages::kNever, .name = "tern-raw-peer"});
  TERN_TRY(a);
  sh_->arena = std::move(a).value();
  auto d = open_device(spec);
  TERN_TRY(d);
  sh_->dev = std::move(d).value();
  auto pd = sh_->dev->alloc_pd();
  TERN_TRY(pd);
  sh_->pd = std::move(pd).value();
  // Local only, as the engine registers its own memory: what the other end
  // may reach is what offer() registers.
  auto mr = sh_->pd->reg_mr(sh_->arena->base(), sh_->arena->size(), kAccessLocalWrite);
  TERN_TRY(mr);
  sh_->mr = std::move(mr).value();
  return make_qp(recvs);
}

Result<std::unique_ptr<RawPeer>> RawPeer::sibling(uint32_t recvs) {
  auto p = std::make_unique<RawPeer>(pump_);
  p->spec_ = spec_;
  p->sh_ = sh_;
  TERN_TRY(p->make_qp(recvs));
  return p;
}

Status RawPeer::make_qp(uint32_t recvs) {
  dev_ = sh_->dev.get();
  pd_ = sh_->pd.get();
  mr_ = sh_->mr.get();
  arena_ = sh_->arena.get();
  sh_->members.push_back(this);
  auto scq = dev_->create_cq(1024);
  TERN_TRY(scq);
  scq_ = std::move(scq).value();
  auto rcq = dev_->create_cq(1024);
  TERN_TRY(rcq);
  rcq_ = std::move(rcq).value();
  QpInit qi;
  qi.pd = pd_, qi.send_cq = scq_.get(), qi.recv_cq = rcq_.get();
  qi.sq_depth = kSqDepth, qi.rq_depth = recvs, qi.max_send_sge = 1, qi.max_recv_sge = 1;
  auto qp = dev_->create_qp(qi);
  TERN_TRY(qp);
  qp_ = std::move(qp).value();
  rx_ = static_cast<uint8_t*>(arena_->carve(size_t{recvs} * kRecvBuf, 4096));
  tx_ = static_cast<uint8_t*>(arena_->carve(size_t{kTxSlots} * kTxSlot, 4096));
  if (rx_ == nullptr || tx_ == nullptr) return make_error(Errc::kNoResources, "raw peer: arena full");
  for (uint32_t i = 0; i < recvs; ++i) post_recv(i);
  return Status::ok();
}

void RawPeer::post_recv(uint32_t i) {
  Sge s{reinterpret_cast<uint64_t>(rx_ + size_t{i} * kRecvBuf), kRecvBuf, mr_->lkey()};
  RecvWr r{kRecvTag | i, &s, 1};
  int err = 0;
  (void)qp_->post_recv(&r, 1, &err);
}

Status RawPeer::connect(const rpcrdma::CmPrivateData& pd, int ms) {
  uint8_t pb[16];
  size_t n = rpcrdma::encode_cm_private(pd, pb);
  TERN_TRY(dev_->connect(qp_.get(), std::span<const uint8_t>(pb, n)));
  if (!wait([&] { return established_ || disconnected_; }, ms) || !established_)
    return make_error(Errc::kDisconnected, "raw peer: connecting to %s failed", spec_.c_str());
  return Status::ok();
}

Status RawPeer::listen() { return dev_->listen(); }

Status RawPeer::accept_one(const rpcrdma::CmPrivateData& pd, int ms) {
  uint8_t pb[16];
  size_t n = rpcrdma::encode_cm_private(pd, pb);
  bool accepted = false;
  Status st;
  wait(
      [&] {
        if (!accepted && !sh_->requests.empty()) {
          CmEvent req = std::move(sh_->requests.front());
          sh_->requests.erase(sh_->requests.begin());
          peer_pdata_ = req.request->private_data();
          st = dev_->accept(req.request, qp_.get(), std::span<const uint8_t>(pb, n));
          accepted = true;
          if (!st.is_ok()) return true;
        }
        return established_;
      },
      ms);
  TERN_TRY(st);
  if (!established_) return make_error(Errc::kTimedOut, "raw peer: no connection established on %s", spec_.c_str());
  return Status::ok();
}

uint8_t* RawPeer::buf(size_t len) { return static_cast<uint8_t*>(arena_->carve(len, 4096)); }

void RawPeer::poll_once() {
  pump_();
  Wc wc[16];
  int n = scq_->poll(wc, 16);
  for (int i = 0; i < n; ++i) send_done_.emplace_back(wc[i].wr_id, wc[i].status);
  n = rcq_->poll(wc, 16);
  for (int i = 0; i < n; ++i) {
    if ((wc[i].wr_id & kRecvTag) == 0) continue;
    auto idx = static_cast<uint32_t>(wc[i].wr_id & ~kRecvTag);
    if (wc[i].status != WcStatus::kSuccess) continue;  // flushed: the QP is in error
    const uint8_t* b = rx_ + size_t{idx} * kRecvBuf;
    Received r;
    r.bytes.assign(b, b + wc[i].byte_len);
    r.with_inv = (wc[i].flags & kWcWithInv) != 0;
    r.inv_rkey = wc[i].invalidated_rkey;
    inbox_.push_back(std::move(r));
    if (repost_) post_recv(idx);
  }
  sh_->pump_cm();
}

bool RawPeer::wait(const std::function<bool()>& pred, int ms) {
  return poll_until([this] { poll_once(); }, pred, ms);
}

bool RawPeer::disconnected() {
  poll_once();
  return disconnected_;
}

std::optional<WcStatus> RawPeer::wait_send(uint64_t wr_id, int ms) {
  std::optional<WcStatus> got;
  wait(
      [&] {
        for (auto it = send_done_.begin(); it != send_done_.end(); ++it) {
          if (it->first == wr_id) {
            got = it->second;
            send_done_.erase(it);
            return true;
          }
        }
        return false;
      },
      ms);
  return got;
}

uint32_t RawPeer::offer(uint8_t* p, uint32_t len, uint32_t access) {
  uint32_t pages = (static_cast<uint32_t>(reinterpret_cast<uint64_t>(p) & 4095) + len + 4095) / 4096;
  auto f = pd_->alloc_fast_mr(std::max<uint32_t>(pages, 1));
  if (!f) return 0;
  fast_.push_back(std::move(f).value());
  FastMr* m = fast_.back().get();
  SendWr w;
  w.wr_id = next_wr_++;
  w.opcode = WrOpcode::kRegMr;
  w.flags = kWrSignaled;
  w.reg.mr = m;
  w.reg.addr = reinterpret_cast<uint64_t>(p);
  w.reg.length = len;
  w.reg.lkey = mr_->lkey();
  w.reg.access = access | ((access & kAccessRemoteWrite) ? kAccessLocalWrite : 0u);
  w.reg.rkey = m->bump_rkey();
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) return 0;
  auto st = wait_send(w.wr_id, 2000);
  return st && *st == WcStatus::kSuccess ? w.reg.rkey : 0;
}

WcStatus RawPeer::revoke(uint32_t rkey, int ms) {
  SendWr w;
  w.wr_id = next_wr_++;
  w.opcode = WrOpcode::kLocalInv;
  w.flags = kWrSignaled;
  w.invalidate_rkey = rkey;
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) return WcStatus::kGeneralErr;
  return wait_send(w.wr_id, ms).value_or(WcStatus::kGeneralErr);
}

bool RawPeer::post_send(std::span<const uint8_t> bytes) {
  if (bytes.size() > kTxSlot) return false;
  uint8_t* slot = tx_ + (tx_used_ % kTxSlots) * size_t{kTxSlot};
  std::memcpy(slot, bytes.data(), bytes.size());
  Sge s{reinterpret_cast<uint64_t>(slot), static_cast<uint32_t>(bytes.size()), mr_->lkey()};
  SendWr w;
  w.wr_id = next_wr_++;
  w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
  // A full send queue drains as the other end takes what we sent.
  bool posted = wait(
      [&] {
        int err = 0;
        return qp_->post_send(&w, 1, &err) == 1 || err != EAGAIN;
      },
      2000);
  if (posted) ++tx_used_;
  return posted && !in_error();
}

std::optional<WcStatus> RawPeer::send(std::span<const uint8_t> bytes, uint32_t inv_rkey, int ms) {
  if (bytes.size() > kTxSlot) return WcStatus::kLocLenErr;
  uint8_t* slot = tx_ + (tx_used_++ % kTxSlots) * size_t{kTxSlot};
  std::memcpy(slot, bytes.data(), bytes.size());
  Sge s{reinterpret_cast<uint64_t>(slot), static_cast<uint32_t>(bytes.size()), mr_->lkey()};
  SendWr w;
  w.wr_id = next_wr_++;
  w.sg_list = &s, w.num_sge = 1;
  w.opcode = inv_rkey != 0 ? WrOpcode::kSendWithInv : WrOpcode::kSend;
  w.invalidate_rkey = inv_rkey;
  w.flags = kWrSignaled;
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) return WcStatus::kLocQpOpErr;
  return wait_send(w.wr_id, ms);
}

WcStatus RawPeer::rdma_op(WrOpcode op, uint8_t* slot, uint32_t len, uint32_t rkey, uint64_t raddr, int ms) {
  Sge s{reinterpret_cast<uint64_t>(slot), len, mr_->lkey()};
  SendWr w;
  w.wr_id = next_wr_++;
  w.sg_list = &s, w.num_sge = 1, w.opcode = op, w.flags = kWrSignaled;
  w.rkey = rkey;
  w.remote_addr = raddr;
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) return WcStatus::kLocQpOpErr;
  return wait_send(w.wr_id, ms).value_or(WcStatus::kGeneralErr);
}

WcStatus RawPeer::write(const uint8_t* src, uint32_t len, uint32_t rkey, uint64_t raddr, int ms) {
  if (len > kTxSlot) return WcStatus::kLocLenErr;
  uint8_t* slot = tx_ + (tx_used_++ % kTxSlots) * size_t{kTxSlot};
  std::memcpy(slot, src, len);
  return rdma_op(WrOpcode::kRdmaWrite, slot, len, rkey, raddr, ms);
}

WcStatus RawPeer::read(uint8_t* dst, uint32_t len, uint32_t rkey, uint64_t raddr, int ms) {
  if (len > kTxSlot) return WcStatus::kLocLenErr;
  uint8_t* slot = tx_ + (tx_used_++ % kTxSlots) * size_t{kTxSlot};
  WcStatus st = rdma_op(WrOpcode::kRdmaRead, slot, len, rkey, raddr, ms);
  if (st == WcStatus::kSuccess && dst != nullptr) std::memcpy(dst, slot, len);
  return st;
}

std::optional<Received> RawPeer::recv(int ms) {
  std::optional<Received> got;
  wait(
      [&] {
        if (inbox_.empty()) return false;
        got = std::move(inbox_.front());
        inbox_.erase(inbox_.begin());
        return true;
      },
      ms);
  return got;
}

std::string RawPeer::id() const { return "qp " + std::to_string(qp_->qp_num()); }

}  // namespace tern::test
