// Server datapath: a received call is decoded (a bad header gets RDMA_ERROR
// or is dropped, as RFC 8166 says), its read chunk pulled with RDMA READ, its
// handler run; the reply pushes bulk results into the client's write chunk
// (RDMA WRITE), a large reply into its reply chunk, and goes back with a Send,
// or a Send With Invalidate when the client registered one rkey and both ends
// agreed on remote invalidation (RFC 8797).
#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_impl.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

namespace {
// RFC 5531 answers that are not accept_stat values (see wire::encode_rpc_reply).
constexpr int kReplyRpcMismatch = 100;
constexpr int kReplyAuthError = 101;
}  // namespace

uint32_t SrvCall::bulk_capacity() const {
  uint64_t cap = 0;
  for (int i = 0; i < nwrite; ++i) cap += writes[i].length;
  return static_cast<uint32_t>(std::min<uint64_t>(cap, UINT32_MAX));
}

std::span<uint8_t> SrvCall::bulk_buffer(uint32_t len) {
  TERN_REQUIRE(len <= conn->eng->opt.max_bulk, "bulk_buffer(%u) over max_bulk %u", len, conn->eng->opt.max_bulk);
  return {bulk_buf_, len};
}

Status SrvCall::reply(std::span<const uint8_t> results, std::span<const uint8_t> bulk) {
  TERN_REQUIRE(state == State::kInHandler, "reply() on a call that is not waiting for one");
  return conn->send_reply(this, results, bulk, 0);
}

Status SrvCall::reply_error(AcceptStat stat) {
  TERN_REQUIRE(state == State::kInHandler, "reply_error() on a call that is not waiting for one");
  TERN_REQUIRE(stat != AcceptStat::kSuccess, "reply_error(kSuccess): use reply()");
  return conn->send_reply(this, {}, {}, static_cast<int>(stat));
}

void Conn::maybe_free(SrvCall* sc) {
  if (sc->handler_owner || sc->send_owner || sc->state == SrvCall::State::kFree) return;
  if (sc->rep != nullptr) {
    sc->rep->owner = nullptr;
    if (state == State::kReady) to_repost.push_back(sc->rep);
    sc->rep = nullptr;
  }
  sc->state = SrvCall::State::kFree;
  sc->nread = sc->nwrite = sc->nreply = 0;
  sc->bulk_len_ = 0;
  sc->inv_rkey = 0;
  sc->nomsg = false;
  sc->pc = nullptr;
  calls.put(sc);
}

void Conn::refuse_call(SrvCall* sc, ReplyBuf* rep, uint32_t xid) {
  sc->state = SrvCall::State::kReplied;
  sc->rep = nullptr;
  rep->owner = nullptr;
  maybe_free(sc);
  send_rdma_error(rep, xid, false);
}

void Conn::send_rdma_error(ReplyBuf* rep, uint32_t xid, bool vers) {
  if (calls.empty() || ring->full() || !sq->room(1)) {
    to_repost.push_back(rep);  // no room to answer: drop, as for garbage
    return;
  }
  SrvCall* sc = calls.get();
  sc->state = SrvCall::State::kReplied;
  sc->handler_owner = false;
  size_t len = wire::encode_rdma_error(sc->sendbuf, inline_send, xid, eng->opt.credits, vers);
  chain.clear();
  add_send(sc->sendbuf, len);
  eng->st.rdma_errors_sent.add();
  cs.errors.add();
  cs.sends.add();
  cs.bytes_sent.add(len);
  to_repost.push_back(rep);
  post_chain(chain, 0, sc);
  maybe_free(sc);
}

int Conn::serve_deferred() {
  int n = 0;
  while (!deferred.empty() && !calls.empty() && state == State::kReady) {
    ReplyBuf* rep = deferred.front();
    deferred.pop_front();
    handle_call(rep);
    ++n;
  }
  return n;
}

void Conn::handle_call(ReplyBuf* rep) {
  wire::Incoming in;
  wire::decode_call_header(std::span<const uint8_t>(rep->buf, rep->len), &in);
  switch (in.verdict) {
    case wire::Incoming::Verdict::kDrop:
      eng->st.bad_headers.add();
      to_repost.push_back(rep);
      return;
    case wire::Incoming::Verdict::kErrVers:
    case wire::Incoming::Verdict::kErrChunk:
      eng->st.bad_headers.add();
      send_rdma_error(rep, in.xid, in.verdict == wire::Incoming::Verdict::kErrVers);
      return;
    case wire::Incoming::Verdict::kOk:
      break;
  }
  SrvCall* sc = calls.get();
  if (sc == nullptr) {
    eng->st.calls_deferred.add();
    deferred.push_back(rep);
    return;
  }
  sc->xid_ = in.xid;
  sc->t_recv = now_ticks();
  sc->client_credits = in.credits;
  sc->rep = rep;
  rep->owner = sc;
  sc->handler_owner = false;
  sc->send_owner = false;
  sc->nread = in.nread;
  std::copy(in.reads, in.reads + in.nread, sc->reads);
  sc->nwrite = in.nwrite;
  std::copy(in.writes, in.writes + in.nwrite, sc->writes);
  sc->nreply = in.nreply;
  std::copy(in.replies, in.replies + in.nreply, sc->replies);
  sc->args_ = in.body;
  sc->bulk_len_ = 0;
  sc->nomsg = in.nomsg;
  // Send With Invalidate is possible when the call carries exactly one rkey.
  sc->inv_rkey = 0;
  if (remote_inv) {
    uint32_t key = 0;
    bool one = true;
    auto see = [&](uint32_t h) {
      if (key == 0) key = h;
      else if (h != key) one = false;
    };
    for (int i = 0; i < in.nread; ++i) see(in.reads[i].seg.handle);
    for (int i = 0; i < in.nwrite; ++i) see(in.writes[i].handle);
    for (int i = 0; i < in.nreply; ++i) see(in.replies[i].handle);
    if (one) sc->inv_rkey = key;
  }
  uint64_t total = 0;
  for (int i = 0; i < in.nread; ++i) total += in.reads[i].seg.length;
  if (total > eng->opt.max_bulk) {
    // A read chunk larger than this server accepts: RFC 8166's ERR_CHUNK.
    refuse_call(sc, rep, in.xid);
    return;
  }
  if (in.nread == 0) {
    dispatch(sc);
    return;
  }
  // Pull the read chunk: RDMA READs into the call's bulk buffer; only the
  // last is signaled (send-queue ordering covers the others).
  if (!sq->room(static_cast<uint32_t>(in.nread))) {
    // The send queue is sized for credits x chunks, so this means a client
    // sent more than it was granted.
    refuse_call(sc, rep, in.xid);
    return;
  }
  chain.clear();
  uint64_t off = 0;
  uint32_t lkey = pdc->find(sc->bulk_buf_, eng->opt.max_bulk)->mr->lkey();
  for (int i = 0; i < in.nread; ++i) {
    SendWr& w = chain.add_one_sge(WrOpcode::kRdmaRead, sc->bulk_buf_ + off, in.reads[i].seg.length, lkey);
    w.remote_addr = in.reads[i].seg.offset;
    w.rkey = in.reads[i].seg.handle;
    off += in.reads[i].seg.length;
  }
  chain.back().flags = kWrSignaled;
  chain.back().wr_id = make_wr_id(WrTag::kRead, sc->index);
  sc->bulk_len_ = static_cast<uint32_t>(total);
  cs.read_chunks.add();
  cs.read_chunk_bytes.add(total);
  sc->state = SrvCall::State::kReading;
  sc->handler_owner = true;  // the READs hold the call until they complete
  ring_seq_reads_[sc->index] = sq->post(static_cast<uint32_t>(in.nread));
  eng->st.rdma_reads.add(static_cast<uint64_t>(in.nread));
  eng->st.read_chunks.add();
  int err = 0;
  if (qp->post_send(chain.data(), chain.size(), &err) != chain.size())
    on_disconnected(make_sys_error(Errc::kDisconnected, err, "post_send refused RDMA READs"));
}

void Conn::server_read_done(const Wc& wc) {
  SrvCall* sc = calls.find(static_cast<uint32_t>(wr_val(wc.wr_id)));
  if (sc == nullptr) return;  // not a wr_id of ours
  sq->retire(ring_seq_reads_[sc->index]);
  if (wc.status != WcStatus::kSuccess) {
    // The pull failed (the client's rkey was refused, or the QP died): the
    // connection is gone; teardown frees the call.
    sc->handler_owner = false;
    sc->state = SrvCall::State::kReplied;
    maybe_free(sc);
    if (state == State::kReady) {
      Status why = make_error(Errc::kRemoteError, "RDMA READ of its read chunk failed: %s", wc_status_name(wc.status));
      // The client named memory it does not let us read.
      if (wc.status == WcStatus::kRemAccessErr || wc.status == WcStatus::kRemInvReqErr) protocol_error(std::move(why));
      else on_disconnected(std::move(why));
    }
    return;
  }
  dispatch(sc);
}

void Conn::dispatch(SrvCall* sc) {
  if (sc->nomsg) {
    // The pulled read chunk is the whole call message; there is no bulk.
    sc->args_ = std::span<const uint8_t>(sc->bulk_buf_, sc->bulk_len_);
    sc->bulk_len_ = 0;
  }
  wire::RpcCall rc;
  bool ok = wire::decode_rpc_call(sc->args_, sc->xid_, &rc);
  sc->state = SrvCall::State::kInHandler;
  sc->handler_owner = true;
  cs.calls.add();
  if (!ok) {
    Status st = rc.rpc_mismatch ? send_reply(sc, {}, {}, kReplyRpcMismatch)
                : rc.bad_auth   ? send_reply(sc, {}, {}, kReplyAuthError)
                                : send_reply(sc, {}, {}, static_cast<int>(AcceptStat::kGarbageArgs));
    (void)st;
    return;
  }
  sc->prog_ = rc.prog, sc->vers_ = rc.vers, sc->proc_ = rc.proc;
  sc->args_ = rc.args;
  AcceptStat why;
  uint32_t low, high;
  const HandlerEntry* h = eng->find_handler(rc.prog, rc.vers, rc.proc, &why, &low, &high);
  // Calls no handler serves share one entry: a peer cannot grow the table.
  sc->pc = h != nullptr ? h->pc : eng->proc_counters(UINT32_MAX, UINT32_MAX, UINT32_MAX, true);
  sc->pc->ops.add();
  sc->pc->bytes_received.add(sc->rep != nullptr ? sc->rep->len + sc->bulk_len_ : sc->bulk_len_);
  if (h == nullptr) {
    (void)send_reply(sc, {}, {}, static_cast<int>(why));
    return;
  }
  h->h(h->ctx, sc);
}

uint64_t Conn::push_into(const uint8_t* src, uint64_t len, uint32_t lkey, const RdmaSegment* segs, int nsegs,
                         RdmaSegment* written) {
  uint64_t done = 0;
  for (int i = 0; i < nsegs; ++i) {
    uint64_t n = std::min<uint64_t>(segs[i].length, len - done);
    if (written != nullptr) written[i] = RdmaSegment{segs[i].handle, static_cast<uint32_t>(n), segs[i].offset};
    if (n == 0) continue;
    SendWr& w = chain.add_one_sge(WrOpcode::kRdmaWrite, src + done, static_cast<uint32_t>(n), lkey);
    w.remote_addr = segs[i].offset;
    w.rkey = segs[i].handle;
    done += n;
  }
  return done;
}

Status Conn::send_reply(SrvCall* sc, std::span<const uint8_t> results, std::span<const uint8_t> bulk, int accept) {
  const EngineOptions& o = eng->opt;
  if (state != State::kReady) {
    sc->handler_owner = false;
    sc->state = SrvCall::State::kReplied;
    maybe_free(sc);
    return make_error(Errc::kDisconnected, "the connection of call %u is gone", sc->xid_);
  }
  if (bulk.size() > sc->bulk_capacity())
    return make_error(Errc::kInvalidArgument, "reply: %zu bulk bytes, the client offered %u", bulk.size(),
                      sc->bulk_capacity());
  const Region* bulk_rg = bulk.empty() ? nullptr : pdc->find(bulk.data(), bulk.size());
  if (!bulk.empty() && bulk_rg == nullptr)
    return make_error(Errc::kInvalidArgument, "reply: bulk data must be in registered memory (bulk_buffer())");
  if (ring->full()) return make_error(Errc::kNoResources, "reply: no send context free; poll and retry");

  chain.clear();
  // Bulk results into the client's write chunk, segment by segment.
  RdmaSegment written[kMaxChunkSegs];
  uint64_t done = push_into(bulk.data(), bulk.size(), bulk_rg != nullptr ? bulk_rg->mr->lkey() : 0, sc->writes,
                            sc->nwrite, written);
  // The RPC reply message: inline if it fits the client's receive threshold,
  // else RDMA-written into the client's reply chunk with an RDMA_NOMSG header.
  uint32_t low = 0, high = 0;
  if (accept == static_cast<int>(AcceptStat::kProgMismatch)) {
    AcceptStat w;
    eng->find_handler(sc->prog_, sc->vers_, sc->proc_, &w, &low, &high);
  }
  size_t hdr_max = wire::encode_reply_header(nullptr, 0, sc->xid_, o.credits, written, sc->nwrite, done,
                                             sc->replies, sc->nreply, 0, false);
  uint8_t* sb = sc->sendbuf;
  size_t room = std::min<size_t>(inline_send, inline_recv);
  size_t body_len = 0;
  bool nomsg = false;
  if (hdr_max + 64 + results.size() <= room) {
    body_len = wire::encode_rpc_reply(sb + hdr_max, room - hdr_max, sc->xid_, accept, low, high, results);
  }
  if (body_len == 0) {
    uint64_t chunk_cap = 0;
    for (int i = 0; i < sc->nreply; ++i) chunk_cap += sc->replies[i].length;
    body_len = wire::encode_rpc_reply(sc->reply_area, o.max_reply + 256, sc->xid_, accept, low, high, results);
    if (body_len == 0 || body_len > chunk_cap || sc->nreply == 0) {
      // The results fit nowhere the client offered: tell it so.
      body_len = wire::encode_rpc_reply(sb + hdr_max, room - hdr_max, sc->xid_,
                                        static_cast<int>(AcceptStat::kSystemErr), 0, 0, {});
    } else {
      nomsg = true;
      push_into(sc->reply_area, body_len, pdc->find(sc->reply_area, body_len)->mr->lkey(), sc->replies, sc->nreply,
                nullptr);
    }
  }
  // The transport header goes first; with RDMA_MSG the RPC message follows it
  // in the same buffer, so the header is written at its exact size.
  size_t hdr = wire::encode_reply_header(sb, hdr_max, sc->xid_, o.credits, written, sc->nwrite, done, sc->replies,
                                         nomsg ? sc->nreply : 0, nomsg ? body_len : 0, nomsg);
  size_t len;
  if (nomsg) {
    len = hdr;
  } else {
    if (hdr != hdr_max) std::memmove(sb + hdr, sb + hdr_max, body_len);
    len = hdr + body_len;
  }
  SendWr& s = add_send(sb, len);
  if (sc->inv_rkey != 0) {
    s.opcode = WrOpcode::kSendWithInv;
    s.invalidate_rkey = sc->inv_rkey;
  }
  if (!sq->room(static_cast<uint32_t>(chain.size())))
    return make_error(Errc::kNoResources, "reply: send queue full; poll and retry");
  // Counted only now: a reply refused above is retried and must not count twice.
  eng->st.rdma_writes.add(static_cast<uint64_t>(chain.size() - 1));
  if (nomsg) eng->st.reply_chunks.add();
  if (sc->inv_rkey != 0) eng->st.remote_invalidations.add();
  sc->state = SrvCall::State::kReplied;
  sc->handler_owner = false;
  // The call's receive buffer goes back now: the reply no longer needs it.
  if (ReplyBuf* rep = sc->rep) {
    sc->rep = nullptr;
    rep->owner = nullptr;
    to_repost.push_back(rep);
  }
  eng->st.replies.add();
  cs.replies.add();
  cs.sends.add();
  cs.bytes_sent.add(len);
  if (done > 0) {
    cs.write_chunks.add();
    cs.write_chunk_bytes.add(done);
  }
  if (nomsg) {
    cs.nomsg.add();
    cs.reply_chunks.add();
    cs.reply_chunk_bytes.add(body_len);
  }
  if (sc->inv_rkey != 0) cs.remote_invalidations.add();
  if (sc->pc != nullptr) sc->pc->bytes_sent.add(len + done + (nomsg ? body_len : 0));
  record_rtt(sc->pc, sc->t_recv, accept != 0);
  post_chain(chain, chain.size() - 1, sc);
  maybe_free(sc);
  return Status::ok();
}

}  // namespace tern::rpc
