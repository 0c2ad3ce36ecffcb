#include "requester.h"

#include <chrono>
#include <cstdio>
#include <cstring>

namespace tern::torture {

using namespace tern::rdma;
using Clock = std::chrono::steady_clock;

namespace {
constexpr uint64_t kRecvTag = 1ull << 62;
// Where the current connection's buffers sit in the session's arena: only
// one connection lives at a time, so each reuses the same places.
constexpr size_t kRxOffset = 0;
constexpr size_t kTxOffset = kRxOffset + size_t{Requester::kRecvs} * Requester::kRecvBuf;
constexpr size_t kChunkOffset = kTxOffset + size_t{Requester::kSendSlots} * Requester::kSendSlot;
static_assert(kChunkOffset + Requester::kChunkBytes <= Session::kBytes);

const char* proc_name(rpcrdma::Proc p) {
  switch (p) {
    case rpcrdma::Proc::kMsg: return "RDMA_MSG";
    case rpcrdma::Proc::kNoMsg: return "RDMA_NOMSG";
    case rpcrdma::Proc::kMsgp: return "RDMA_MSGP";
    case rpcrdma::Proc::kDone: return "RDMA_DONE";
    case rpcrdma::Proc::kError: return "RDMA_ERROR";
  }
  return "proc?";
}
}  // namespace

namespace {
struct Reader {
  std::span<const uint8_t> b;
  size_t at = 0;
  bool ok = true;
  uint32_t u32() {
    if (at + 4 > b.size()) {
      ok = false;
      return 0;
    }
    uint32_t v = uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
    at += 4;
    return v;
  }
};
}  // namespace

void decode_long_lists(Seen* m) {
  Reader r{m->bytes};
  uint32_t xid = r.u32(), vers = r.u32(), credit = r.u32(), proc = r.u32();
  if (!r.ok || vers != 1 || proc > 1) return;
  rpcrdma::Header h;
  h.xid = xid, h.vers = vers, h.credit = credit, h.proc = static_cast<rpcrdma::Proc>(proc);
  h.chunks.clear();
  auto seg = [&](rpcrdma::Segment* s) {
    rpcrdma::Segment t;
    t.handle = r.u32();
    t.length = r.u32();
    t.offset = uint64_t{r.u32()} << 32;
    t.offset |= r.u32();
    if (s != nullptr) *s = t;
  };
  for (uint32_t more = r.u32(); r.ok && more == 1; more = r.u32()) {
    r.u32();
    rpcrdma::Segment t;
    seg(&t);
    if (h.chunks.nreads < rpcrdma::kMaxReadSegments) h.chunks.reads[h.chunks.nreads++] = {0, t};
  }
  for (uint32_t more = r.u32(); r.ok && more == 1; more = r.u32()) {
    uint32_t n = r.u32();
    if (n > 4096) return;
    rpcrdma::WriteChunk* w = h.chunks.nwrites < rpcrdma::kMaxWriteChunks ? &h.chunks.writes[h.chunks.nwrites++] : nullptr;
    if (w != nullptr) w->nsegments = 0;
    for (uint32_t i = 0; i < n; ++i) {
      rpcrdma::Segment t;
      seg(&t);
      if (w != nullptr && w->nsegments < rpcrdma::kMaxSegmentsPerChunk) w->segments[w->nsegments++] = t;
    }
  }
  uint32_t has_reply = r.u32();
  if (!r.ok || has_reply > 1) return;
  if (has_reply == 1) {
    uint32_t n = r.u32();
    if (n > rpcrdma::kMaxSegmentsPerChunk) return;
    h.chunks.has_reply = true;
    h.chunks.reply.nsegments = n;
    for (uint32_t i = 0; i < n; ++i) seg(&h.chunks.reply.segments[i]);
  }
  if (!r.ok) return;
  m->hdr = h;
  m->status = rpcrdma::DecodeStatus::kOk;
  m->header_len = r.at;
  m->long_lists = true;
}

bool Seen::error(rpcrdma::ErrCode code, uint32_t xid) const {
  return kind == Kind::kMessage && status == rpcrdma::DecodeStatus::kOk && hdr.proc == rpcrdma::Proc::kError &&
         hdr.error.code == code && hdr.xid == xid;
}

std::string Seen::describe() const {
  char b[200];
  switch (kind) {
    case Kind::kSilence: return "nothing (silence)";
    case Kind::kDisconnected: return "disconnect";
    case Kind::kSendFailed: return "our SEND failed (connection lost)";
    case Kind::kMessage: break;
  }
  if (status != rpcrdma::DecodeStatus::kOk) {
    // The first words, so that a report says what the responder sent.
    std::string words;
    for (size_t i = 0; i + 4 <= bytes.size() && i < 32; i += 4) {
      char w[12];
      std::snprintf(w, sizeof w, " %02x%02x%02x%02x", bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]);
      words += w;
    }
    std::snprintf(b, sizeof b, "an undecodable message of %zu bytes (%s):%s", bytes.size(),
                  rpcrdma::decode_status_name(status), words.c_str());
    return b;
  }
  if (hdr.proc == rpcrdma::Proc::kError) {
    if (hdr.error.code == rpcrdma::ErrCode::kVers)
      std::snprintf(b, sizeof b, "RDMA_ERROR ERR_VERS %u..%u xid 0x%x credit %u", hdr.error.vers_low,
                    hdr.error.vers_high, hdr.xid, hdr.credit);
    else
      std::snprintf(b, sizeof b, "RDMA_ERROR ERR_CHUNK xid 0x%x credit %u", hdr.xid, hdr.credit);
    return b;
  }
  std::snprintf(b, sizeof b, "%s xid 0x%x credit %u, %zu bytes (%u%s write chunks%s)%s", proc_name(hdr.proc), hdr.xid,
                hdr.credit, bytes.size(), hdr.chunks.nwrites, long_lists ? "+" : "", hdr.chunks.has_reply ? ", reply chunk" : "",
                with_inv ? " by Send With Invalidate" : "");
  return b;
}

Result<std::unique_ptr<Session>> Session::open(const std::string& spec) {
  auto s = std::make_unique<Session>();
  auto a = mem::Arena::create({.size = kBytes, .huge = mem::HugePages::kNever, .name = "rpcrdma-torture"});
  TERN_TRY(a);
  s->arena_ = std::move(a).value();
  auto d = open_device(spec);
  TERN_TRY(d);
  s->dev_ = std::move(d).value();
  auto pd = s->dev_->alloc_pd();
  TERN_TRY(pd);
  s->pd_ = std::move(pd).value();
  // Local access only: the responder reaches nothing but what a case
  // offers through a per-connection fast registration.
  auto mr = s->pd_->reg_mr(s->arena_->base(), s->arena_->size(), kAccessLocalWrite);
  TERN_TRY(mr);
  s->mr_ = std::move(mr).value();
  s->base_ = static_cast<uint8_t*>(s->arena_->base());
  return s;
}

Requester::~Requester() {
  if (qp_ && qp_->state() == QpState::kRts) (void)s_->device()->disconnect(qp_.get());
  qp_.reset();
  fast_.clear();
  scq_.reset();
  rcq_.reset();
  // Events about this QP must not reach the next connection.
  CmEvent ev;
  while (s_->device()->poll_cm(&ev)) {
  }
}

Status Requester::connect(std::span<const uint8_t> pdata, int ms) {
  Device* dev = s_->device();
  auto scq = dev->create_cq(256);
  TERN_TRY(scq);
  scq_ = std::move(scq).value();
  auto rcq = dev->create_cq(256);
  TERN_TRY(rcq);
  rcq_ = std::move(rcq).value();
  QpInit qi;
  qi.pd = s_->pd(), qi.send_cq = scq_.get(), qi.recv_cq = rcq_.get();
  qi.sq_depth = 128, qi.rq_depth = kRecvs, qi.max_send_sge = 1, qi.max_recv_sge = 1;
  auto qp = dev->create_qp(qi);
  TERN_TRY(qp);
  qp_ = std::move(qp).value();
  rx_ = s_->base() + kRxOffset;
  tx_ = s_->base() + kTxOffset;
  chunks_ = s_->base() + kChunkOffset;
  for (uint32_t i = 0; i < kRecvs; ++i) {
    Sge sg{reinterpret_cast<uint64_t>(rx_ + size_t{i} * kRecvBuf), kRecvBuf, s_->mr()->lkey()};
    RecvWr r{kRecvTag | i, &sg, 1};
    int err = 0;
    if (qp_->post_recv(&r, 1, &err) != 1) return make_error(Errc::kNoResources, "posting receives: errno %d", err);
  }
  TERN_TRY(dev->connect(qp_.get(), pdata));
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (!established_ && !disconnected_ && Clock::now() < end) poll_once();
  if (!established_)
    return make_error(disconnected_ ? Errc::kRemoteError : Errc::kTimedOut, "%s",
                      disconnected_ ? "the responder refused the connection" : "no answer to the connection request");
  return Status::ok();
}

void Requester::poll_once() {
  CmEvent ev;
  while (s_->device()->poll_cm(&ev)) {
    if (ev.qp != qp_.get()) continue;
    if (ev.type == CmEventType::kEstablished) {
      established_ = true;
      accept_pdata_ = ev.private_data;
    } else if (ev.type != CmEventType::kConnectRequest) {
      disconnected_ = true;
    }
  }
  if (!qp_) return;
  Wc wc[16];
  int n = scq_->poll(wc, 16);
  for (int i = 0; i < n; ++i) {
    send_done_.emplace_back(wc[i].wr_id, wc[i].status);
    if (wc[i].status != WcStatus::kSuccess) send_failed_ = true;
  }
  n = rcq_->poll(wc, 16);
  for (int i = 0; i < n; ++i) {
    if ((wc[i].wr_id & kRecvTag) == 0) continue;
    if (wc[i].status != WcStatus::kSuccess) {
      disconnected_ = true;  // flushed: the QP is in error
      continue;
    }
    auto idx = static_cast<uint32_t>(wc[i].wr_id & ~kRecvTag);
    const uint8_t* b = rx_ + size_t{idx} * kRecvBuf;
    Seen m;
    m.kind = Seen::Kind::kMessage;
    m.bytes.assign(b, b + wc[i].byte_len);
    m.with_inv = (wc[i].flags & kWcWithInv) != 0;
    m.inv_rkey = wc[i].invalidated_rkey;
    if (m.with_inv) invalidated_.push_back(m.inv_rkey);
    auto r = rpcrdma::decode_header(m.bytes, &m.hdr);
    m.status = r.status;
    m.header_len = r.header_len;
    // Tern's decoder holds at most 4 write chunks of 16 segments: a reply
    // that returns a longer write list is still a valid reply.
    if (m.status == rpcrdma::DecodeStatus::kBadChunk) decode_long_lists(&m);
    inbox_.push_back(std::move(m));
    Sge sg{reinterpret_cast<uint64_t>(b), kRecvBuf, s_->mr()->lkey()};
    RecvWr rw{wc[i].wr_id, &sg, 1};
    int err = 0;
    (void)qp_->post_recv(&rw, 1, &err);
  }
  if (qp_->state() == QpState::kError && established_) disconnected_ = true;
}

bool Requester::post(std::span<const uint8_t> bytes, uint32_t inv_rkey) {
  if (!qp_ || bytes.size() > kSendSlot) return false;
  uint8_t* slot = tx_ + size_t{tx_next_++ % kSendSlots} * kSendSlot;
  std::memcpy(slot, bytes.data(), bytes.size());
  Sge sg{reinterpret_cast<uint64_t>(slot), static_cast<uint32_t>(bytes.size()), s_->mr()->lkey()};
  SendWr w;
  w.wr_id = next_wr_++;
  w.sg_list = &sg, w.num_sge = 1;
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

Seen Requester::next(int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    poll_once();
    if (!inbox_.empty()) {
      Seen m = std::move(inbox_.front());
      inbox_.erase(inbox_.begin());
      return m;
    }
    Seen s;
    if (disconnected_) {
      s.kind = Seen::Kind::kDisconnected;
      return s;
    }
    if (send_failed_) {
      s.kind = Seen::Kind::kSendFailed;
      return s;
    }
    if (Clock::now() >= end) return s;
  }
}

bool Requester::wait_disconnect(int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  do {
    poll_once();
    if (disconnected_ || send_failed_) return true;
  } while (Clock::now() < end);
  return false;
}

void Requester::disconnect() {
  if (qp_ && qp_->state() == QpState::kRts) (void)s_->device()->disconnect(qp_.get());
  poll_once();
}

uint8_t* Requester::chunk_mem(size_t len, size_t align) {
  size_t at = (chunk_used_ + align - 1) & ~(align - 1);
  if (at + len > kChunkBytes) return nullptr;
  chunk_used_ = at + len;
  std::memset(chunks_ + at, 0, len);
  return chunks_ + at;
}

bool Requester::wait_send(uint64_t wr_id, int ms, WcStatus* st) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  do {
    poll_once();
    for (auto it = send_done_.begin(); it != send_done_.end(); ++it) {
      if (it->first == wr_id) {
        *st = it->second;
        send_done_.erase(it);
        return true;
      }
    }
  } while (Clock::now() < end);
  return false;
}

uint32_t Requester::offer(uint8_t* p, uint32_t len, uint32_t access) {
  auto page = static_cast<uint32_t>(reinterpret_cast<uint64_t>(p) & 4095);
  uint32_t pages = std::max<uint32_t>((page + len + 4095) / 4096, 1);
  auto f = s_->pd()->alloc_fast_mr(pages);
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
  w.reg.lkey = s_->mr()->lkey();
  w.reg.access = access | ((access & kAccessRemoteWrite) ? kAccessLocalWrite : 0u);
  w.reg.rkey = m->bump_rkey();
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) return 0;
  WcStatus st;
  if (!wait_send(w.wr_id, 2000, &st) || st != WcStatus::kSuccess) return 0;
  return w.reg.rkey;
}

bool Requester::revoke(uint32_t rkey, int ms) {
  SendWr w;
  w.wr_id = next_wr_++;
  w.opcode = WrOpcode::kLocalInv;
  w.flags = kWrSignaled;
  w.invalidate_rkey = rkey;
  int err = 0;
  if (qp_->post_send(&w, 1, &err) != 1) return false;
  WcStatus st;
  return wait_send(w.wr_id, ms, &st) && st == WcStatus::kSuccess;
}

}  // namespace tern::torture
