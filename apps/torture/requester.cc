#include "requester.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include <unistd.h>

namespace tern::torture {

using namespace tern::rdma;
using Clock = std::chrono::steady_clock;

namespace {
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

namespace {
// The requesters' QPs: receive buffers and send slots of kRecvBuf / kSendSlot.
rawpeer::PeerShape requester_shape() {
  rawpeer::PeerShape sh;
  sh.recvs = Requester::kRecvs, sh.recv_buf = Requester::kRecvBuf;
  sh.sq_depth = Requester::kSendSlots, sh.tx_slot = Requester::kSendSlot;
  return sh;
}
}  // namespace

Result<std::unique_ptr<Session>> Session::open(const std::string& spec, int idle_us) {
  auto s = std::make_unique<Session>();
  // The home QP's own buffers are token-sized; the arena holds two
  // requesters at once (a case that needs a second one, and a requester
  // replaced while the next is made), each with its chunk memory.
  rawpeer::PeerShape home;
  home.recvs = 1, home.recv_buf = 4096, home.sq_depth = 4, home.tx_slot = 4096;
  rawpeer::PeerShape rq = requester_shape();
  size_t per_rq = size_t{rq.recvs} * rq.recv_buf + size_t{rq.sq_depth} * rq.tx_slot + Requester::kChunkBytes;
  home.arena = 2 * per_rq + (1u << 20);
  // The pump runs before each poll of a wait (lib/rawpeer), and every
  // connection of the session inherits it: a sleep there paces them all.
  rawpeer::RawPeer::Pump pump = [] {};
  if (idle_us > 0) pump = [idle_us] { ::usleep(static_cast<useconds_t>(idle_us)); };
  s->home_ = std::make_unique<rawpeer::RawPeer>(std::move(pump));
  TERN_TRY(s->home_->open(spec, home));
  return s;
}

Result<std::unique_ptr<rawpeer::RawPeer>> Session::new_peer() { return home_->sibling(requester_shape()); }

uint8_t* Session::take_chunks() {
  if (!spare_chunks_.empty()) {
    uint8_t* p = spare_chunks_.back();
    spare_chunks_.pop_back();
    return p;
  }
  return home_->buf(Requester::kChunkBytes);
}

Requester::~Requester() {
  if (peer_) peer_->disconnect();
  peer_.reset();
  if (chunks_ != nullptr) s_->give_chunks(chunks_);
}

const std::vector<uint8_t>& Requester::accept_private() const {
  static const std::vector<uint8_t> none;
  return peer_ ? peer_->peer_private() : none;
}

Status Requester::connect(std::span<const uint8_t> pdata, int ms) {
  auto p = s_->new_peer();
  TERN_TRY(p);
  peer_ = std::move(p).value();
  chunks_ = s_->take_chunks();
  if (chunks_ == nullptr) return make_error(Errc::kNoResources, "rpcrdma-torture: no chunk memory left");
  Status st = peer_->connect_raw(pdata, ms);
  if (!st.is_ok() && st.code() == Errc::kRemoteError)
    return make_error(Errc::kRemoteError, "the responder refused the connection");
  if (!st.is_ok()) return make_error(Errc::kTimedOut, "no answer to the connection request");
  return Status::ok();
}

void Requester::take_received() {
  if (!peer_) return;
  while (auto r = peer_->recv(0)) {
    Seen m;
    m.kind = Seen::Kind::kMessage;
    m.bytes = std::move(r->bytes);
    m.with_inv = r->with_inv;
    m.inv_rkey = r->inv_rkey;
    if (m.with_inv) invalidated_.push_back(m.inv_rkey);
    auto d = rpcrdma::decode_header(m.bytes, &m.hdr);
    m.status = d.status;
    m.header_len = d.header_len;
    // Tern's decoder holds at most 4 write chunks of 16 segments: a reply
    // that returns a longer write list is still a valid reply.
    if (m.status == rpcrdma::DecodeStatus::kBadChunk) decode_long_lists(&m);
    inbox_.push_back(std::move(m));
  }
}

bool Requester::post(std::span<const uint8_t> bytes, uint32_t inv_rkey) {
  return peer_ && peer_->post(bytes, inv_rkey);
}

Seen Requester::next(int ms) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    if (peer_) peer_->poll();
    take_received();
    if (!inbox_.empty()) {
      Seen m = std::move(inbox_.front());
      inbox_.erase(inbox_.begin());
      return m;
    }
    Seen s;
    if (!peer_ || peer_->lost()) {
      s.kind = Seen::Kind::kDisconnected;
      return s;
    }
    if (peer_->send_failed()) {
      s.kind = Seen::Kind::kSendFailed;
      return s;
    }
    if (Clock::now() >= end) return s;
  }
}

bool Requester::wait_disconnect(int ms) {
  if (!peer_) return true;
  return peer_->wait([&] { return peer_->lost() || peer_->send_failed(); }, ms);
}

void Requester::disconnect() {
  if (peer_) peer_->disconnect();
}

void Requester::vanish() { peer_.reset(); }

uint8_t* Requester::chunk_mem(size_t len, size_t align) {
  if (chunks_ == nullptr) return nullptr;
  size_t at = (chunk_used_ + align - 1) & ~(align - 1);
  if (at + len > kChunkBytes) return nullptr;
  chunk_used_ = at + len;
  std::memset(chunks_ + at, 0, len);
  return chunks_ + at;
}

uint32_t Requester::offer(uint8_t* p, uint32_t len, uint32_t access) { return peer_ ? peer_->offer(p, len, access) : 0; }

bool Requester::revoke(uint32_t rkey, int ms) {
  return peer_ && peer_->revoke(rkey, ms) == WcStatus::kSuccess;
}

}  // namespace tern::torture
