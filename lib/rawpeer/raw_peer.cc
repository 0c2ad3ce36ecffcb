#include "raw_peer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "oncrpc/oncrpc.h"

namespace tern::rawpeer {

using namespace tern::rdma;

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

// ---------------------------------------------------------------- the peer

namespace {
constexpr uint64_t kRecvTag = 1ull << 62;
// A SEND nobody waits for (post()): its completion is read for its status
// and not kept.
constexpr uint64_t kForgetTag = 1ull << 61;
}  // namespace

RawPeer::~RawPeer() {
  qp_.reset();
  fast_.clear();
  scq_.reset();
  rcq_.reset();
  if (sh_) {
    std::erase(sh_->members, this);
    if (rx_ != nullptr) sh_->spare.emplace_back(size_t{shape_.recvs} * shape_.recv_buf, rx_);
    if (tx_ != nullptr) sh_->spare.emplace_back(size_t{shape_.sq_depth} * shape_.tx_slot, tx_);
    // Events about this QP must not reach a later member that gets its
    // address: read them now, while nothing else has it.
    sh_->pump_cm();
  }
}

RawPeer::Shared::~Shared() {
  mr.reset();
  pd.reset();
  dev.reset();
  arena.reset();
}

uint8_t* RawPeer::Shared::take(size_t len) {
  for (auto it = spare.begin(); it != spare.end(); ++it) {
    if (it->first == len) {
      uint8_t* p = it->second;
      spare.erase(it);
      return p;
    }
  }
  return static_cast<uint8_t*>(arena->carve(len, 4096));
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
  PeerShape s;
  s.recvs = recvs;
  return open(spec, s);
}

Status RawPeer::open(std::string_view spec, const PeerShape& shape) {
  spec_ = std::string(spec);
  sh_ = std::make_shared<Shared>();
  auto a = mem::Arena::create({.size = shape.arena, .huge = mem::HugePages::kNever, .name = "tern-raw-peer"});
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
  return make_qp(shape);
}

Result<std::unique_ptr<RawPeer>> RawPeer::sibling(uint32_t recvs) {
  PeerShape s = shape_;
  s.recvs = recvs;
  return sibling(s);
}

Result<std::unique_ptr<RawPeer>> RawPeer::sibling(const PeerShape& shape) {
  auto p = std::make_unique<RawPeer>(pump_);
  p->spec_ = spec_;
  p->sh_ = sh_;
  TERN_TRY(p->make_qp(shape));
  return p;
}

Status RawPeer::make_qp(const PeerShape& shape) {
  shape_ = shape;
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
  qi.sq_depth = shape.sq_depth, qi.rq_depth = shape.recvs, qi.max_send_sge = 1, qi.max_recv_sge = 1;
  auto qp = dev_->create_qp(qi);
  TERN_TRY(qp);
  qp_ = std::move(qp).value();
  rx_ = sh_->take(size_t{shape.recvs} * shape.recv_buf);
  tx_ = sh_->take(size_t{shape.sq_depth} * shape.tx_slot);
  if (rx_ == nullptr || tx_ == nullptr) return make_error(Errc::kNoResources, "raw peer: arena full");
  for (uint32_t i = 0; i < shape.recvs; ++i) post_recv(i);
  return Status::ok();
}

void RawPeer::post_recv(uint32_t i) {
  Sge s{reinterpret_cast<uint64_t>(rx_ + size_t{i} * shape_.recv_buf), shape_.recv_buf, mr_->lkey()};
  RecvWr r{kRecvTag | i, &s, 1};
  int err = 0;
  (void)qp_->post_recv(&r, 1, &err);
}

Status RawPeer::connect(const rpcrdma::CmPrivateData& pd, int ms) {
  uint8_t pb[16];
  size_t n = rpcrdma::encode_cm_private(pd, pb);
  return connect_raw(std::span<const uint8_t>(pb, n), ms);
}

Status RawPeer::connect_raw(std::span<const uint8_t> pdata, int ms) {
  TERN_TRY(dev_->connect(qp_.get(), pdata));
  wait([&] { return established_ || disconnected_; }, ms);
  if (established_) return Status::ok();
  if (disconnected_) return make_error(Errc::kRemoteError, "raw peer: %s refused the connection", spec_.c_str());
  return make_error(Errc::kTimedOut, "raw peer: no answer from %s to the connection request", spec_.c_str());
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

void RawPeer::disconnect() {
  if (qp_ && qp_->state() == QpState::kRts) (void)dev_->disconnect(qp_.get());
  poll_once();
}

uint8_t* RawPeer::buf(size_t len) { return static_cast<uint8_t*>(arena_->carve(len, 4096)); }

void RawPeer::poll_once() {
  pump_();
  Wc wc[16];
  int n = scq_->poll(wc, 16);
  for (int i = 0; i < n; ++i) {
    if (wc[i].status != WcStatus::kSuccess && (wc[i].wr_id & kForgetTag) != 0) send_failed_ = true;
    if ((wc[i].wr_id & kForgetTag) == 0) send_done_.emplace_back(wc[i].wr_id, wc[i].status);
  }
  n = rcq_->poll(wc, 16);
  for (int i = 0; i < n; ++i) {
    if ((wc[i].wr_id & kRecvTag) == 0) continue;
    auto idx = static_cast<uint32_t>(wc[i].wr_id & ~kRecvTag);
    if (wc[i].status != WcStatus::kSuccess) {
      recv_flushed_ = true;  // flushed: the QP is in error
      continue;
    }
    const uint8_t* b = rx_ + size_t{idx} * shape_.recv_buf;
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

bool RawPeer::post(std::span<const uint8_t> bytes, uint32_t inv_rkey) {
  if (!qp_ || bytes.size() > shape_.tx_slot) return false;
  uint8_t* slot = next_tx_slot();
  std::memcpy(slot, bytes.data(), bytes.size());
  Sge s{reinterpret_cast<uint64_t>(slot), static_cast<uint32_t>(bytes.size()), mr_->lkey()};
  SendWr w;
  w.wr_id = kForgetTag | next_wr_++;
  w.sg_list = &s, w.num_sge = 1;
  w.opcode = inv_rkey != 0 ? WrOpcode::kSendWithInv : WrOpcode::kSend;
  w.invalidate_rkey = inv_rkey;
  w.flags = kWrSignaled;
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) {
    send_failed_ = true;
    return false;
  }
  return true;
}

bool RawPeer::post_send(std::span<const uint8_t> bytes) {
  if (bytes.size() > shape_.tx_slot) return false;
  uint8_t* slot = tx_ + (tx_used_ % shape_.sq_depth) * size_t{shape_.tx_slot};
  std::memcpy(slot, bytes.data(), bytes.size());
  Sge s{reinterpret_cast<uint64_t>(slot), static_cast<uint32_t>(bytes.size()), mr_->lkey()};
  SendWr w;
  w.wr_id = next_wr_++;
  w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend;
  // Every half queue one is signaled (its completion read and forgotten): a
  // device frees send-queue slots only as completions cover them (the
  // verbs rule; mlx5 and pmd/sim keep it), so a queue of unsignaled WRs
  // alone never has room again once full.
  const uint64_t every = std::max<uint32_t>(1, shape_.sq_depth / 2);
  if (tx_used_ % every == every - 1) w.wr_id |= kForgetTag, w.flags = kWrSignaled;
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
  if (bytes.size() > shape_.tx_slot) return WcStatus::kLocLenErr;
  uint8_t* slot = next_tx_slot();
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
  if (len > shape_.tx_slot) return WcStatus::kLocLenErr;
  uint8_t* slot = next_tx_slot();
  std::memcpy(slot, src, len);
  return rdma_op(WrOpcode::kRdmaWrite, slot, len, rkey, raddr, ms);
}

WcStatus RawPeer::read(uint8_t* dst, uint32_t len, uint32_t rkey, uint64_t raddr, int ms) {
  if (len > shape_.tx_slot) return WcStatus::kLocLenErr;
  uint8_t* slot = next_tx_slot();
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

}  // namespace tern::rawpeer
