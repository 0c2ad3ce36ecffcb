// Server datapath, the reply side (svc_rdma_sendto.c's part): reply()
// encodes the RPC reply -- inline when it fits what the client receives,
// through the client's reply chunk as RDMA_NOMSG when it does not, and
// RDMA_ERROR / ERR_CHUNK when it fits nowhere the client offered -- records
// what its RDMA WRITEs carry, and posts [WRITE..., SEND] (a Send With
// Invalidate when the client registered one rkey and both ends agreed on
// remote invalidation, RFC 8797), or queues it until the send queue has room.
#include <algorithm>
#include <bit>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "base/process_key.h"
#include "engine/args_digest.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/server_conn.h"
#include "engine/server_call_machine.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

void written_chunks(const SrvCall* sc, ChunkLists* out);  // server_rw.cc

std::span<const uint8_t> SrvCall::bulk() const {
  return ndata_ > 0 ? data_[0].data : std::span<const uint8_t>();
}

uint32_t SrvCall::write_chunk_capacity(uint32_t chunk) const {
  if (chunk >= static_cast<uint32_t>(chunks.nwrites)) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(chunks.writes[chunk].capacity(), UINT32_MAX));
}

std::span<uint8_t> SrvCall::write_chunk_buffer(uint32_t chunk, uint32_t len) {
  const EngineOptions& o = conn->core->opt;
  TERN_REQUIRE(chunk < kMaxWriteChunks, "write_chunk_buffer(%u): at most %d write chunks", chunk, kMaxWriteChunks);
  TERN_REQUIRE(len <= o.max_bulk, "write_chunk_buffer(%u) over max_bulk %u", len, o.max_bulk);
  BulkPool& pool = *conn->core->bulk;
  if (write_buf[chunk] != nullptr && pool.block_size(write_buf[chunk]) >= len) return {write_buf[chunk], len};
  // Not set aside (a handler with a Placer, or more than the chunk holds):
  // from the pool now, which may have nothing left. Its peer's share counts
  // it, but does not refuse it: the handler is running, and asked.
  uint8_t* p = conn->pool_get(this, std::max<uint32_t>(len, 1));
  if (p == nullptr) return {};
  pool_memory = true;
  if (write_buf[chunk] != nullptr) conn->pool_put(this, write_buf[chunk]);
  write_buf[chunk] = p;
  return {p, len};
}

Status SrvCall::reply(std::span<const uint8_t> results, std::span<const uint8_t> bulk) {
  if (bulk.empty()) return conn->reply(this, results, {}, 0);
  std::span<const uint8_t> one[1] = {bulk};
  return conn->reply(this, results, one, 0);
}

Status SrvCall::reply_chunks(std::span<const uint8_t> results, std::span<const std::span<const uint8_t>> bulk) {
  return conn->reply(this, results, bulk, 0);
}

void SrvCall::drop() {
  TERN_REQUIRE(state() == SrvState::kInHandler || state() == SrvState::kOrphaned,
               "drop() on a call that is not waiting for a reply (state %s)", srv_state_name(state()));
  conn->drop(this);
}

std::string_view SrvCall::peer_id() const { return conn->peer_key; }

uint64_t SrvCall::args_digest() const {
  // Only a handler asks, so args_ and the read chunks are final by now.
  if (!digest_known_) {
    digest_ = rpc::args_digest(process_key(), args_, read_chunks());
    digest_known_ = true;
  }
  return digest_;
}

Status SrvCall::reply_error(AcceptStat stat) {
  TERN_REQUIRE(stat != AcceptStat::kSuccess, "reply_error(kSuccess): use reply()");
  return conn->reply(this, {}, {}, static_cast<int>(stat));
}

// A credit is a promise that a receive is posted for the call it allows
// (RFC 8166 section 3.3.1): a call that finds none is refused by the device
// with an RNR NAK. Receive buffers go back to the device in batches at the
// end of a poll() pass, so a reply posted mid-pass -- its own buffer, and
// any the grant just grew the queue by, still waiting -- can reach the
// client, which sends its next call at once, before they are posted. The
// queue's credits not granted to anyone (free()) are the buffers that may
// wait without breaking the promise; past that they are posted now, before
// the reply that lets the client use them. Found through the Linux client
// on rxe: its calls met RNR NAKs whenever the grant had grown to every
// buffer of the queue, and rxe (6.1), retrying them, ran the REG_MRs
// queued behind them a second time -- "rxe_reg_fast_mr: ... not free", the
// QP in error, a reconnect and every WRITE in flight sent again
// (docs/nfs-gateway.md).
inline void ServerConn::cover_grants() {
  if (TERN_UNLIKELY(rq->pending() > rq->grants().free()) && (rq->shared() || phase() == State::kReady))
    rq->post(&core->engine_stats.recvs_posted, &core->engine_stats.recv_batches);
}

// The common end of reply() and reply_inline(), once the reply message is
// built: the call's receive buffer goes back (the reply holds copies of what
// it needed), its credit is answered, and the reply is counted -- once, here:
// a reply that waits for room is posted later as is. Always inlined:
// reply_inline() is the common call's path, and an out-of-line call cost it
// ~25 instructions per RPC (callgrind, tern-rpc-cost: 6122 against 6097).
[[gnu::always_inline]] inline void ServerConn::replied(SrvCall* sc, uint64_t bulk_bytes, bool failed) {
  if (MsgBuf* rep = sc->rep) {
    sc->rep = nullptr;
    give_back(rep);
  }
  rq->grants().on_replied(&grant);
  cover_grants();
  core->engine_stats.replies.add();
  counters.replies.add();
  counters.sends.add();
  counters.bytes_sent.add(sc->msg_len);
  if (bulk_bytes > 0) {
    counters.write_chunks.add();
    counters.write_chunk_bytes.add(bulk_bytes);
    core->engine_stats.write_chunks.add();
  }
  if (sc->long_len > 0) {
    core->engine_stats.reply_chunks.add();
    counters.nomsg.add();
    counters.reply_chunks.add();
    counters.reply_chunk_bytes.add(sc->long_len);
  }
  if (sc->inv_rkey != 0) {
    core->engine_stats.remote_invalidations.add();
    counters.remote_invalidations.add();
  }
  if (sc->proc_counters != nullptr) sc->proc_counters->bytes_sent.add(sc->msg_len + bulk_bytes + sc->long_len);
  record_rtt(sc->proc_counters, sc->t_recv, failed);
  call_replied(sc);
}

Status ServerConn::reply(SrvCall* sc, std::span<const uint8_t> results, std::span<const std::span<const uint8_t>> bulk,
                         int accept) {
  // The common reply -- from its handler, no breakdown stamps, no write
  // chunk, no bulk data, a message that fits inline -- goes straight to
  // reply_inline(); anything else (or one that does not fit: it changed
  // nothing) to reply_general(), which tries the same first.
  if (TERN_LIKELY(sc->state() == SrvState::kInHandler && breakdown == nullptr && wire::fast_paths() &&
                  accept != wire::kAnswerErrChunk && sc->chunks.nwrites == 0 &&
                  (bulk.empty() || (bulk.size() == 1 && bulk[0].empty()))) &&
      reply_inline(sc, results, accept))
    return Status::ok();
  return reply_general(sc, results, bulk, accept);
}

Status ServerConn::reply_general(SrvCall* sc, std::span<const uint8_t> results,
                                 std::span<const std::span<const uint8_t>> bulk, int accept) {
  if (sc->state() == SrvState::kOrphaned) {
    // Its connection died while the handler held it: nobody to answer.
    process(sc, SrvEvent::kDropped);
    return make_error(Errc::kDisconnected, "the connection of call %u is gone", sc->xid_);
  }
  if (TERN_UNLIKELY(breakdown != nullptr)) sc->ts_replied = now_ticks();
  TERN_REQUIRE(sc->state() == SrvState::kInHandler, "reply() on a call that is not waiting for one (state %s)",
               srv_state_name(sc->state()));
  // The engine's ERR_CHUNK answer to a call it could not use (wire.h).
  const bool err_only = accept == wire::kAnswerErrChunk;
  // The commonest shape -- no write chunk, no bulk data, a message that fits
  // inline -- skips the chunk lists altogether (~120 instructions per RPC
  // fewer; conn_fast_path_test.cc compares it with the general path below).
  if (wire::fast_paths() && !err_only && sc->chunks.nwrites == 0 &&
      (bulk.empty() || (bulk.size() == 1 && bulk[0].empty())) && reply_inline(sc, results, accept))
    return Status::ok();
  if (bulk.size() > static_cast<size_t>(sc->chunks.nwrites) && !(bulk.size() == 1 && bulk[0].empty()))
    return make_error(Errc::kInvalidArgument, "reply: bulk data for %zu write chunks, the client offered %d",
                      bulk.size(), sc->chunks.nwrites);
  uint32_t lkeys[kMaxWriteChunks] = {};
  for (size_t c = 0; c < bulk.size(); ++c) {
    if (bulk[c].empty()) continue;
    if (bulk[c].size() > sc->write_chunk_capacity(static_cast<uint32_t>(c)))
      return make_error(Errc::kInvalidArgument, "reply: %zu bulk bytes for write chunk %zu, the client offered %u",
                        bulk[c].size(), c, sc->write_chunk_capacity(static_cast<uint32_t>(c)));
    if (!pd_ctx->lkey_of(bulk[c].data(), bulk[c].size(), &lkeys[c]))
      return make_error(Errc::kInvalidArgument,
                        "reply: bulk data must be in registered memory (bulk_buffer(), Engine::alloc or "
                        "register_memory)");
  }
  const uint32_t credits = grant_for_reply(sc);
  sc->nbulk = static_cast<int>(bulk.size());
  for (size_t c = 0; c < bulk.size(); ++c) {
    sc->bulk_src[c] = bulk[c].data();
    sc->bulk_len[c] = static_cast<uint32_t>(bulk[c].size());
    sc->bulk_lkey[c] = lkeys[c];
  }
  sc->long_len = 0;
  uint32_t low = sc->answer_low, high = sc->answer_high;
  // The RPC reply message: inline if it fits what the client receives
  // (RFC 8797: our send threshold is its receive size), else RDMA-written
  // into the client's reply chunk with an RDMA_NOMSG header.
  uint8_t* sb = sc->sendbuf->data;
  const size_t room = inline_send;
  ChunkLists written;
  written_chunks(sc, &written);
  size_t hdr = wire::encode_reply_header(nullptr, 0, sc->xid_, credits, written, false);
  size_t body = 0;
  if (!err_only && hdr + results.size() < room)
    body = wire::encode_rpc_reply(sb + hdr, room - hdr, sc->xid_, accept, low, high, results);
  bool err_chunk = err_only;
  if (body == 0 && !err_only) {
    if (sc->staging != nullptr)
      sc->long_len = static_cast<uint32_t>(
          wire::encode_rpc_reply(sc->staging, sc->staging_cap, sc->xid_, accept, low, high, results));
    if (sc->long_len == 0) {
      err_chunk = true;  // the results fit nowhere the client offered: RFC 8166's ERR_CHUNK
    } else {
      written_chunks(sc, &written);
      hdr = wire::encode_reply_header(sb, room, sc->xid_, credits, written, true);
      TERN_CHECK(hdr != 0, "an RDMA_NOMSG reply header does not fit %zu bytes", room);
      sc->msg_len = static_cast<uint32_t>(hdr);
    }
  } else {
    // The transport header goes first, and is as long as measured: its
    // length depends on the segment counts only.
    size_t h2 = wire::encode_reply_header(sb, hdr, sc->xid_, credits, written, false);
    TERN_CHECK(h2 == hdr, "reply header measured %zu bytes, encoded %zu", hdr, h2);
    sc->msg_len = static_cast<uint32_t>(hdr + body);
  }
  if (err_chunk) {
    sc->nbulk = 0;
    sc->long_len = 0;
    sc->msg_len = static_cast<uint32_t>(wire::encode_rdma_error(sb, room, sc->xid_, credits, false));
    core->engine_stats.rdma_errors_sent.add();
    counters.errors.add();
  }
  uint64_t bulk_bytes = 0;
  int writes = 0;
  for (int c = 0; c < sc->nbulk; ++c) bulk_bytes += sc->bulk_len[c];
  for (int c = 0; c < written.nwrites && c < sc->nbulk; ++c)
    for (int i = 0; i < written.writes[c].nsegs; ++i) writes += written.writes[c].segs[i].length > 0;
  if (sc->long_len > 0)
    for (int i = 0; i < written.reply.nsegs; ++i) writes += written.reply.segs[i].length > 0;
  core->engine_stats.rdma_writes.add(static_cast<uint64_t>(writes));
  replied(sc, bulk_bytes, accept != 0 || err_chunk);
  return Status::ok();
}

// Always inlined (into reply_inline(), the common reply's path, and
// reply_general()): out of line it was a call and a frame of its own per
// reply, ~44 instructions where the common case is a few comparisons.
[[gnu::always_inline]] inline uint32_t ServerConn::grant_for_reply(const SrvCall* sc) {
  // The receive queue grows as clients ask for credits (up to its depth,
  // while the engine's receive buffers last).
  // (Out of line: a connection granted what it asks for -- the common case
  // -- then saves no registers for it.)
  if (TERN_UNLIKELY(sc->wanted > grant.granted)) {
    [](ServerConn* c, const SrvCall* sc) __attribute__((noinline)) {
      const uint32_t want = std::min<uint32_t>(
          std::min<uint32_t>(sc->wanted, c->core->opt.credits) - c->grant.granted, c->rq->grants().spare());
      if (c->rq->grants().free() < want && c->rq->grow(want - c->rq->grants().free()) > 0)
        c->core->queue_needs_post(c->rq);
    }(this, sc);
  }
  return rq->grants().grant_for_reply(&grant, sc->wanted);
}

[[gnu::always_inline]] inline bool ServerConn::reply_inline(SrvCall* sc, std::span<const uint8_t> results, int accept) {
  // No write chunk, so the RDMA_MSG header's three lists are empty (a reply
  // chunk goes back only when the reply went through it): its length is
  // fixed. The header, which carries the grant, is written once the
  // message is known to fit. Nothing is changed before that, so a reply
  // that does not fit inline takes the general path (the reply chunk, or
  // ERR_CHUNK) as if this were not here.
  constexpr size_t hdr = wire::kNoChunksHeader;
  const size_t room = inline_send;
  uint8_t* sb = sc->sendbuf->data;
  size_t len;
  if (TERN_LIKELY(accept == 0 && wire::fast_paths())) {
    // SUCCESS, the commonest reply: both headers are fixed words, written
    // together with the grant (what encode_rpc_reply's plain shape and
    // encode_msg_header_no_chunks below write, and when they fit).
    if (wire::kPlainReplyLen + results.size() > room) return false;
    len = wire::encode_plain_reply(sb, sc->xid_, grant_for_reply(sc), results);
  } else {
    // The RPC message first, then the header.
    if (hdr + results.size() >= room) return false;
    const size_t body =
        wire::encode_rpc_reply(sb + hdr, room - hdr, sc->xid_, accept, sc->answer_low, sc->answer_high, results);
    if (body == 0) return false;
    const uint32_t credits = grant_for_reply(sc);
    const size_t h = wire::encode_msg_header_no_chunks(sb, hdr, sc->xid_, credits);
    TERN_CHECK(h == hdr, "reply header is %zu bytes, not %zu", h, hdr);
    len = hdr + body;
  }
  sc->nbulk = 0;
  sc->long_len = 0;
  sc->msg_len = static_cast<uint32_t>(len);
  replied(sc, 0, accept != 0);
  return true;
}

void ServerConn::drop(SrvCall* sc) {
  // Released unanswered. Its receive buffer and memory go back now; its
  // client's credit stays taken (no reply carries it back).
  if (sc->state() != SrvState::kOrphaned) core->engine_stats.calls_dropped.add();
  process(sc, SrvEvent::kDropped);
}

void ServerConn::post_reply(SrvCall* sc) {
  WrChain& chain = core->chain;  // as reply_fits() built it (server_call_machine.cc)
  // The reply that leaves its connection with no call in progress is
  // signaled (svcrdma signals every reply): a connection that goes quiet
  // then holds no server call and no send buffer, where a batched one
  // would hold up to a batch of them for as long as it stays idle. Under
  // load replies are batched as usual. A call of the same connection later
  // in the receive batch being dispatched counts as in progress: its reply
  // comes in this same poll() and is the one signaled (without this, a
  // server answering each call as it arrives signals every reply).
  const bool quiet = grant.unreplied == 0 && deferred.empty() && !core->more_in_batch(this);
  // A reply that holds bulk memory (or pushes the host's) waits for its
  // peer to take it, under a deadline (rw_deadline.h): signaled, so that its
  // own completion -- not a later reply's -- says when the peer did.
  const bool push = (sc->pool_memory || sc->nbulk > 0 || sc->long_len > 0) && core->rw_timeout_ticks != 0;
  // Any other reply whose Send is signaled is under the same deadline: a
  // peer that never takes its replies (posts no receive, or stops
  // progressing its QP) would otherwise hold the call, its send buffer and
  // its credits for ever. Only a signaled Send is armed: an unsignaled one
  // has no completion of its own to prove the peer took it. The signaled
  // one posted after it stands for it (send-queue order): the ring signals
  // one at least every batch and before it fills, and the reply that leaves
  // the connection quiet is signaled, so at most a batch of unsignaled
  // replies, on a connection with calls still in progress, waits for the
  // next signaled one's deadline.
  bool signaled = false;
  // A refusal fails the connection; the drain frees the call.
  if (post(chain, SendCtxKind::kReplySend, sc->index, quiet || push, &signaled)) {
    sc->send_owner = true;
    // The clock as replied() read it (record_rtt) or the pass's own reading
    // when the reply waited for room: at most a few passes old, against a
    // deadline of seconds; one clock read fewer per reply at depth 1, where
    // every reply leaves its connection quiet and is signaled.
    if (signaled && core->rw_timeout_ticks != 0)
      core->rw_due.arm(sc, push ? RwWait::kPush : RwWait::kReply, core->now_tick);
  }
  if (TERN_UNLIKELY(breakdown != nullptr) && sc->ts_replied != 0) {
    const uint64_t now = now_ticks();
    breakdown->record(Stage::kPull, sc->t_recv, sc->ts_pulled);
    breakdown->record(Stage::kWait, sc->ts_pulled != 0 ? sc->ts_pulled : sc->t_recv, sc->ts_handler);
    breakdown->record(Stage::kHandler, sc->ts_handler, sc->ts_replied);
    breakdown->record(Stage::kPost, sc->ts_replied, now);
    breakdown->record(Stage::kTotal, sc->t_recv, now);
    if (TERN_UNLIKELY(breakdown->trace != nullptr) && breakdown->trace->due(true)) trace_call(sc, now);
  }
}

void ServerConn::send_rdma_error(MsgBuf* rep, uint32_t xid, bool vers) {
  SrvCall* sc = core->srv_calls.get();
  MsgBuf* sb = sc != nullptr ? core->send_bufs->get() : nullptr;
  if (sb == nullptr || !room(1)) {
    // No room to answer: drop it, as for garbage.
    if (sb != nullptr) core->send_bufs->put(sb);
    if (sc != nullptr) core->srv_calls.put(sc);
    give_back(rep);
    return;
  }
  ++calls_held;
  sc->conn = this;
  sc->error_only = true;
  sc->xid_ = xid;
  sc->sendbuf = sb;
  sc->nbulk = 0;
  sc->long_len = 0;
  sc->inv_rkey = 0;
  sc->chunks.clear();
  sc->msg_len = static_cast<uint32_t>(wire::encode_rdma_error(sb->data, inline_send, xid, grant.granted, vers));
  give_back(rep);
  cover_grants();
  core->engine_stats.rdma_errors_sent.add();
  counters.errors.add();
  counters.sends.add();
  counters.bytes_sent.add(sc->msg_len);
  process(sc, SrvEvent::kErrorAnswer);
}

void ServerConn::post_error_answer(SrvCall* sc) {
  WrChain& chain = core->chain;
  build_reply_chain(sc, chain);
  bool signaled = false;
  if (post(chain, SendCtxKind::kReplySend, sc->index, false, &signaled)) {
    sc->send_owner = true;
    if (signaled && core->rw_timeout_ticks != 0) core->rw_due.arm(sc, RwWait::kReply, now_ticks());
  }
}

void ServerConn::trace_call(const SrvCall* sc, uint64_t now) {
  CallTrace::Record t;
  t.conn = id, t.xid = sc->xid(), t.server = true;
  t.prog = sc->prog(), t.vers = sc->vers(), t.proc = sc->proc();
  t.pulled = sc->ts_pulled != 0;
  t.t[0] = sc->t_recv, t.t[1] = sc->ts_pulled, t.t[2] = sc->ts_handler, t.t[3] = sc->ts_replied, t.t[4] = now;
  breakdown->trace->add(t);
}

}  // namespace tern::rpc
