// Server datapath, the receive side: a received call is decoded (a bad
// header gets RDMA_ERROR or is dropped, as RFC 8166 says), counted against
// the connection's credits, given what it needs from the shared pools (all
// or nothing; the bulk pool shared fairly among peers, bulk_share.h), its
// read chunks pulled (server_rw.cc), and its handler run. The call's
// transitions are the machine's (server_call_machine.{h,cc}): this file
// raises its events.
#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/server_conn.h"
#include "engine/server_call_machine.h"
#include "engine/wire.h"
#include "xdr/xdr.h"

namespace tern::rpc {

using namespace tern::rdma;

ServerConn::ServerConn(ConnCore* e, DeviceCtx* d) : ConnBase(e, d, &kServerConnMachine, "server") {}

ServerConn::~ServerConn() {
  if (breakdown != nullptr && core->bd_gone[true]) core->bd_gone[true]->merge(*breakdown);
  for (size_t i = 0; i < deferred.size(); ++i) give_back(deferred[i]);
  if (rq != nullptr) rq->grants().leave(&grant);
  if (in_peer_table || reaped) core->control->server_gone(admitted_peer, in_peer_table, reaped);
  if (share != nullptr) core->shares->detach(share);
}

void ServerConn::on_up() {
  // Admission may have named the peer from its connection request already.
  if (peer_key.empty()) peer_key = qp->peer_host();
  if (share == nullptr) share = core->shares->attach(peer_key);
  svc_peer = &share->svc;
}

uint8_t* ServerConn::pool_get(SrvCall* sc, size_t len) {
  uint8_t* p = core->bulk->get(len);
  if (p != nullptr) {
    const size_t sz = core->bulk->block_for(len);
    sc->pool_bytes += sz;
    core->shares->charge(share, sz);
  }
  return p;
}

void ServerConn::pool_put(SrvCall* sc, uint8_t* p) {
  const size_t sz = core->bulk->block_size(p);
  core->bulk->put(p);
  TERN_ASSERT(sc->pool_bytes >= sz);
  sc->pool_bytes -= sz;
  core->shares->credit(share, sz);
}

void ServerConn::rw_timed_out(SrvCall* sc, RwWait what, uint64_t ticks) {
  // A peer that does not progress its QP (on pmd/shm its driver executes
  // our READs and WRITEs only when its host polls) holds the call's memory
  // for as long as it likes; past the bound that costs it the connection.
  // The memory comes back after the drain, when the device can no longer
  // touch it. A peer that does not take a plain reply holds its send buffer,
  // its server call and its credits the same way: the drain gives those back
  // too (its credits to the pool, for the other peers).
  core->engine_stats.rw_timeouts.add();
  Status why = make_error(
      Errc::kTimedOut, "it did not %s of call %u within %u ms (server_rw_timeout_ms; %.0f ms since the post, %zu "
                       "bytes of the bulk pool held)",
      what == RwWait::kPull   ? "complete the RDMA READ of its read chunks"
      : what == RwWait::kPush ? "take the reply (RDMA WRITEs and Send)"
                              : "take the reply (its Send: no receive posted for it, or its QP not progressing)",
      sc->xid_, core->opt.server_rw_timeout_ms, ns_from_ticks(ticks) / 1e6, sc->pool_bytes);
  TERN_LOG(kWarn, "engine", "conn %llu: dropping the connection to %s: %s", static_cast<unsigned long long>(id),
           peer_name().c_str(), why.message().c_str());
  on_disconnected(std::move(why));
}

ConnectionInfo ServerConn::info() const { return ConnectionInfo{inline_send, inline_recv, remote_inv, grant.granted}; }

void ServerConn::on_message(MsgBuf* rep) {
  if (!deferred.empty()) {
    // Calls that came while no server call was free go first, in order.
    deferred.push_back(rep);
    core->engine_stats.calls_deferred.add();
    want_service();
    return;
  }
  handle_call(rep);
}

void ServerConn::handle_call(MsgBuf* rep) {
  SrvCall* sc = core->srv_calls.get();
  if (sc == nullptr) {
    // Every server call is busy: the message waits with its buffer until
    // one frees up (its grant accounts for the buffer).
    core->engine_stats.calls_deferred.add();
    deferred.push_front(rep);
    want_service();
    return;
  }
  // The commonest call (no chunk lists, AUTH_NONE) is decoded in one step,
  // its RPC header with it; anything else by the general decoders. The
  // header's chunk lists go straight into the call (no copy of them).
  const auto msg = std::span<const uint8_t>(rep->data, rep->len);
  wire::Incoming in;
  wire::RpcCall rc;
  const bool plain = wire::decode_plain_call(msg, &in, &rc);
  if (plain) sc->chunks.clear();
  else wire::decode_call_header(msg, &in, &sc->chunks);
  if (in.verdict != wire::Incoming::Verdict::kOk) core->srv_calls.put(sc);
  switch (in.verdict) {
    case wire::Incoming::Verdict::kDrop:
      core->engine_stats.bad_headers.add();
      give_back(rep);
      return;
    case wire::Incoming::Verdict::kErrVers:
    case wire::Incoming::Verdict::kErrChunk:
      core->engine_stats.bad_headers.add();
      send_rdma_error(rep, in.xid, in.verdict == wire::Incoming::Verdict::kErrVers);
      return;
    case wire::Incoming::Verdict::kOk:
      break;
  }
  // Credits: a client may have no more calls outstanding than its grant
  // (credits.h explains why the check can be strict). More is a protocol
  // error: it is using receive buffers other connections were promised.
  if (!rq->grants().on_call(&grant)) {
    core->srv_calls.put(sc);
    give_back(rep);
    protocol_error(make_error(Errc::kRemoteError, "it sent call %u with %u outstanding, over its grant of %u",
                              in.xid, grant.unreplied, grant.granted));
    return;
  }
  // Counted engine-wide too, as replies are, so that a server engine's
  // `calls` and `replies` tell the same story as a client's.
  core->engine_stats.calls.add();
  counters.calls.add();
  // Chunks larger than this server takes: RFC 8166's ERR_CHUNK.
  const EngineOptions& o = core->opt;
  uint64_t bulk = 0;
  bool too_big = false;
  for (int c = 0; c < sc->chunks.nreads; ++c) {
    if (sc->chunks.reads[c].position == 0) too_big |= sc->chunks.reads[c].length() > o.max_long_call;
    else bulk += sc->chunks.reads[c].length();
  }
  too_big |= bulk > o.max_bulk;
  if (too_big) {
    // Answered before it becomes a call: the server call never leaves the
    // pool's state (kFree) and goes straight back, as for a bad header.
    // Its credit comes back with the answer.
    core->srv_calls.put(sc);
    rq->grants().on_replied(&grant);
    send_rdma_error(rep, in.xid, false);
    return;
  }
  // A free call comes with what free_call() (or its constructor) left:
  // no engine answer, no handler or procedure counters, no read-chunk
  // data; route() sets the call's handler, counters and RPC header for the
  // plain call, so none of them is written twice here. What a free call may still hold from
  // an earlier one (an RDMA_ERROR answer, a digest, an RDMA_NOMSG call,
  // another connection's stamps) is set below.
  TERN_ASSERT(sc->state() == SrvState::kFree && !sc->handler_owner && !sc->send_owner);
  TERN_ASSERT(sc->answer == -1 && sc->handler == nullptr && sc->proc_counters == nullptr && sc->ndata_ == 0 &&
              !sc->pull_waiting);
  ++calls_held;
  sc->conn = this;
  sc->error_only = false;
  sc->xid_ = in.xid;
  sc->digest_known_ = false;
  sc->wanted = in.credits;
  sc->t_recv = core->pass_tick();  // the batch's arrival
  if (TERN_UNLIKELY(breakdown != nullptr)) sc->ts_pulled = sc->ts_handler = sc->ts_replied = 0;
  sc->rep = rep;
  sc->nomsg = in.nomsg;
  sc->msg_pulled = false;
  sc->args_ = in.body;
  if (plain) {
    sc->inv_rkey = 0;  // no chunk lists: no rkey to invalidate
    route(sc, rc, in.body);
    call_received(sc);
    return;
  }
  // Send With Invalidate is possible when the call carries exactly one rkey
  // (as Linux svcrdma does it).
  sc->inv_rkey = 0;
  if (remote_inv && (sc->chunks.nreads != 0 || sc->chunks.nwrites != 0 || sc->chunks.reply.nsegs != 0)) {
    uint32_t key = 0;
    bool one = true;
    auto see = [&](uint32_t h) {
      if (key == 0) key = h;
      else if (h != key) one = false;
    };
    const ChunkLists& ch = sc->chunks;
    for (int c = 0; c < ch.nreads; ++c)
      for (int i = 0; i < ch.reads[c].nsegs; ++i) see(ch.reads[c].segs[i].handle);
    for (int c = 0; c < ch.nwrites; ++c)
      for (int i = 0; i < ch.writes[c].nsegs; ++i) see(ch.writes[c].segs[i].handle);
    for (int i = 0; i < ch.reply.nsegs; ++i) see(ch.reply.segs[i].handle);
    if (one) sc->inv_rkey = key;
  }
  // Until its RPC header is decoded (now, or once an RDMA_NOMSG message is
  // pulled), or for good when it is garbage, the call names no procedure.
  sc->prog_ = sc->vers_ = sc->proc_ = 0;
  if (!sc->nomsg) {
    if (!decode_rpc(sc)) return;
  } else {
    // The message is in the position-zero chunk: the receive's job is done.
    sc->rep = nullptr;
    sc->args_ = {};
    give_back(rep);
  }
  call_received(sc);
}

bool ServerConn::decode_rpc(SrvCall* sc) {
  std::span<const uint8_t> msg = sc->args_;
  if (sc->nomsg) msg = std::span<const uint8_t>(sc->read_dst[0], sc->chunks.reads[0].length());
  wire::RpcCall rc;
  if (!wire::decode_rpc_call(msg, sc->xid_, &rc)) {
    // The transport and RPC xids must agree (RFC 8166 §4.5.2: ERR_CHUNK).
    // An inline message was checked with its header; an RDMA_NOMSG call's
    // message arrives only now, from its position-zero chunk.
    if (msg.size() < 4 || xdr::detail::load_be32(msg.data()) != sc->xid_) {
      sc->answer = wire::kAnswerErrChunk;
      sc->proc_counters = core->proc_counters(UINT32_MAX, UINT32_MAX, UINT32_MAX, true);
      return true;
    }
    // RFC 5531's answers: the engine replies itself once it has a buffer.
    sc->answer = rc.rpc_mismatch ? wire::kReplyRpcMismatch
                 : rc.bad_auth   ? wire::kReplyAuthError
                                 : static_cast<int>(AcceptStat::kGarbageArgs);
    sc->proc_counters = core->proc_counters(UINT32_MAX, UINT32_MAX, UINT32_MAX, true);
    return true;
  }
  route(sc, rc, msg);
  return true;
}

inline void ServerConn::route(SrvCall* sc, const wire::RpcCall& rc, std::span<const uint8_t> msg) {
  sc->prog_ = rc.prog, sc->vers_ = rc.vers, sc->proc_ = rc.proc;
  sc->args_ = rc.args;
  sc->hdr_ = msg.first(rc.header_len);
  AcceptStat why;
  uint32_t low = 0, high = 0;
  sc->handler = core->handlers.find(rc.prog, rc.vers, rc.proc, &why, &low, &high);
  // Calls no handler serves share one entry: a peer cannot grow the table.
  sc->proc_counters = sc->handler != nullptr ? sc->handler->proc_counters
                                             : core->proc_counters(UINT32_MAX, UINT32_MAX, UINT32_MAX, true);
  if (sc->handler == nullptr) {
    sc->answer = static_cast<int>(why);
    sc->answer_low = low, sc->answer_high = high;
    return;
  }
  // No read chunk and no Placer (the common call): nothing more to route.
  // (ndata_ is 0 already: handle_call() set it, and route() runs once a call.)
  if (sc->chunks.nreads != 0 || sc->handler->place != nullptr) route_chunks(sc, msg, rc.header_len);
}

void ServerConn::route_chunks(SrvCall* sc, std::span<const uint8_t> msg, size_t hdr) {
  // The data chunks' positions, as the handler sees them: from the start of
  // its arguments. An RDMA_NOMSG message's chunks must fall inside it.
  sc->ndata_ = 0;
  for (int c = 0; c < sc->chunks.nreads; ++c) {
    uint32_t pos = sc->chunks.reads[c].position;
    if (pos == 0) continue;
    if (pos < hdr || pos > msg.size()) {
      sc->answer = static_cast<int>(AcceptStat::kGarbageArgs);
      return;
    }
    sc->data_[sc->ndata_++] = ReadChunkData{static_cast<uint32_t>(pos - hdr), {}};
  }
  // Handler-directed placement: the target names where each chunk lands.
  if (sc->handler->place != nullptr) {
    int k = 0;
    for (int c = 0; c < sc->chunks.nreads; ++c) {
      if (sc->chunks.reads[c].position == 0) continue;
      const uint32_t len = static_cast<uint32_t>(sc->chunks.reads[c].length());
      std::span<uint8_t> dst = sc->handler->place(sc->handler->ctx, sc, static_cast<uint32_t>(k++), len);
      uint32_t lkey;
      if (dst.empty()) continue;
      if (dst.size() < len || !pd_ctx->lkey_of(dst.data(), len, &lkey)) {
        TERN_LOG(kError, "engine", "placer of %u/%u/%u returned %zu bytes%s for a %u-byte chunk: using the pool",
                 sc->prog_, sc->vers_, sc->proc_, dst.size(), dst.size() < len ? "" : " of unregistered memory", len);
        continue;
      }
      if (sc->read_pooled[c]) {
        pool_put(sc, sc->read_dst[c]);
        sc->read_pooled[c] = false;
      }
      sc->read_dst[c] = dst.data();
      sc->pool_memory = true;  // drop_memory resets the placement too
    }
    // It brings its own memory for bulk results too (write_chunk_buffer()
    // still draws from the pool on demand).
    for (uint8_t*& w : sc->write_buf)
      if (w != nullptr) {
        pool_put(sc, w);
        w = nullptr;
      }
  }
}

bool ServerConn::take_pool_memory(SrvCall* sc, bool turn) {
  // All or nothing: either the call gets everything it needs from the pools
  // or it holds nothing, so calls waiting for memory can never each hold
  // what another needs. (Its send buffer, taken first, is kept.)
  BulkPool& pool = *core->bulk;
  const EngineOptions& o = core->opt;
  const bool placer = sc->handler != nullptr && sc->handler->place != nullptr;
  sc->pool_memory = true;
  // What it needs, first (0: nothing there): its peer's share decides
  // whether it may take that now.
  constexpr int kStaging = kMaxReadChunks + kMaxWriteChunks;
  size_t len[kStaging + 1] = {};
  if (sc->answer < 0) {
    for (int c = 0; c < sc->chunks.nreads; ++c)
      if (sc->read_dst[c] == nullptr)  // else placed by the handler
        len[c] = std::max<size_t>(sc->chunks.reads[c].length(), 1);
    // Bulk results: set aside before the handler runs, so that it never
    // lacks them. A handler with a Placer brings its own.
    if (!placer || (sc->nomsg && !sc->msg_pulled))
      for (int c = 0; c < sc->chunks.nwrites; ++c)
        len[kMaxReadChunks + c] = std::min<uint64_t>(sc->chunks.writes[c].capacity(), o.max_bulk);
  }
  if (sc->chunks.has_reply) {
    sc->staging_cap = static_cast<uint32_t>(std::min<uint64_t>(sc->chunks.reply.capacity(), o.max_reply + 256u));
    len[kStaging] = sc->staging_cap;
  }
  size_t need = 0;
  for (size_t l : len)
    if (l != 0) need += pool.block_for(l);
  sc->pool_need = need;
  if (!core->shares->may_take(share, need, pool.capacity() - pool.in_use(), turn)) return false;
  uint8_t* got[kStaging + 1] = {};
  for (int i = 0; i <= kStaging; ++i) {
    if (len[i] == 0) continue;
    if ((got[i] = pool_get(sc, len[i])) != nullptr) continue;
    for (int k = 0; k < i; ++k)
      if (got[k] != nullptr) pool_put(sc, got[k]);
    return false;
  }
  for (int c = 0; c < kMaxReadChunks; ++c)
    if (got[c] != nullptr) sc->read_dst[c] = got[c], sc->read_pooled[c] = true;
  for (int c = 0; c < kMaxWriteChunks; ++c) sc->write_buf[c] = got[kMaxReadChunks + c];
  sc->staging = got[kStaging];
  return true;
}

void ServerConn::drop_pool_memory(SrvCall* sc) {
  sc->pool_memory = false;
  for (int c = 0; c < kMaxReadChunks; ++c) {
    if (sc->read_pooled[c]) pool_put(sc, sc->read_dst[c]);
    sc->read_dst[c] = nullptr;
    sc->read_pooled[c] = false;
  }
  for (uint8_t*& w : sc->write_buf) {
    if (w != nullptr) pool_put(sc, w);
    w = nullptr;
  }
  if (sc->staging != nullptr) pool_put(sc, sc->staging);
  sc->staging = nullptr;
  TERN_ASSERT(sc->pool_bytes == 0);
}

int ServerConn::service(bool* more) {
  int work = 0;
  *more = false;
  if (phase() == State::kReady) {
    // Replies waiting for room, in order.
    while (!queued.empty() && phase() == State::kReady) {
      SrvCall* sc = queued.front();
      process(sc, SrvEvent::kRoom);
      if (sc->state() == SrvState::kReplyQueued) break;
      queued.pop_front();
      ++work;
    }
    // Calls whose READs wait for room, in order.
    while (!pulls.empty() && phase() == State::kReady) {
      SrvCall* sc = pulls.front();
      pulls.pop_front();
      process(sc, SrvEvent::kMemory);
      if (sc->pull_waiting) {
        // Still no room: back to the front, where it was.
        pulls.pop_back();
        pulls.push_front(sc);
        break;
      }
      ++work;
    }
    // Calls that came while every server call was busy.
    while (!deferred.empty() && phase() == State::kReady) {
      MsgBuf* rep = deferred.front();
      SrvCall* probe = core->srv_calls.get();
      if (probe == nullptr) break;
      core->srv_calls.put(probe);
      deferred.pop_front();
      handle_call(rep);
      ++work;
    }
    *more = !queued.empty() || !deferred.empty() || !pulls.empty();
  }
  if (draining()) work += step_drain(more);
  return work;
}

void ServerConn::ctx_done(const SendCtx& ctx, bool own, const Wc* wc) {
  switch (ctx.kind) {
    case SendCtxKind::kReplySend:
      send_released(core->srv_calls.at(ctx.obj));
      break;
    case SendCtxKind::kRead: {
      // Always signaled: only its own completion (or teardown) reaches it.
      SrvCall* sc = core->srv_calls.at(ctx.obj);
      if (own && wc != nullptr && sc->state() == SrvState::kPulling) process(sc, SrvEvent::kPulled, wc);
      break;
    }
    case SendCtxKind::kCallSend:
    case SendCtxKind::kInvalidate:
    case SendCtxKind::kCancelled:
      break;
  }
}

void ServerConn::on_lost() {
  // Replies that never went out, and calls still waiting for memory, are
  // dropped now; those with WRs in flight wait for the drain.
  queued.clear();
  pulls.clear();
  for (size_t i = 0; i < deferred.size(); ++i) give_back(deferred[i]);
  deferred.clear();
  for (uint32_t i = 0; i < core->srv_calls.made(); ++i) {
    SrvCall* sc = core->srv_calls.at(i);
    if (sc->conn == this && sc->state() != SrvState::kFree) {
      sc->pull_waiting = false;
      process(sc, SrvEvent::kConnLost);
    }
  }
}

void ServerConn::on_drained() {
  raise(ConnEvent::kDrained);  // dead: reclaimed once no handler holds a call of it
  for (uint32_t i = 0; i < core->srv_calls.made(); ++i) {
    SrvCall* sc = core->srv_calls.at(i);
    if (sc->conn == this && sc->state() != SrvState::kFree) process(sc, SrvEvent::kDrained);
  }
  // Its credits go back to the pool for other connections.
  rq->grants().leave(&grant);
}

}  // namespace tern::rpc
