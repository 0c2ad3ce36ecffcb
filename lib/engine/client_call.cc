// Client datapath, the call side: call() checks and copies a call into a
// request from the engine's table; the backlog's head takes what it needs
// (a credit, a receive reservation for its reply, a send buffer, staging,
// MRs, send-queue room) and is posted as [REG_MR..., SEND] with one
// doorbell. This file raises the request's events; what each does to a
// request, and every change of its state, is ClientConn::process and its
// helpers (request_machine.cc).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "base/process_key.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

namespace {

// A connection's first xid: random-looking, as Linux's client seeds it, so
// that a restarted client process (or another connection of this one) does
// not reuse the xids a server's duplicate request cache remembers. What
// sets processes apart is a digest of the process's random key, not its pid:
// under simulation the key comes from the seed, so a schedule replays with
// the same xids in any process (a forked child's pid differed). A digest,
// because the mix below is invertible and a peer sees the xid.
uint32_t first_xid(uint64_t conn_id) {
  const uint64_t salt = siphash24(process_key(), {});
  uint64_t z = monotonic_ns() ^ salt ^ (conn_id * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  const uint32_t x = static_cast<uint32_t>(z ^ (z >> 31));
  return x != 0 ? x : 1;
}

}  // namespace

ClientConn::ClientConn(ConnCore* e, DeviceCtx* d)
    : ConnBase(e, d, &kClientConnMachine, "client"), credits(e->opt.credits), xids(e->opt.credits), next_xid(first_xid(id)) {}

ClientConn::~ClientConn() {
  if (breakdown != nullptr && core->bd_gone[false]) core->bd_gone[false]->merge(*breakdown);
  core->timers.remove(this);
  // Calls that never finished (the engine is going away with the device
  // gone): their MRs are in an unknown state and are destroyed.
  for (Request* r = backlog.front(); r != nullptr; r = backlog.next(r)) drop_staging(r);
}

ConnectionInfo ClientConn::info() const {
  return ConnectionInfo{inline_send, inline_recv, remote_inv, credits.granted()};
}

namespace {

// The registrar's segment count for a chunk, or -1 when it is over a chunk's limit.
int segs_for(const Registrar& reg, const void* p, uint64_t len) {
  uint32_t n = reg.segments_for(reinterpret_cast<uint64_t>(p), len);
  return n > static_cast<uint32_t>(kMaxChunkSegs) ? -1 : static_cast<int>(n);
}

}  // namespace

int ClientConn::call(const Call& c, uint32_t* xid_out) {
  // Calls wait in the backlog while the connection re-establishes itself;
  // before it was ever up, or once it failed for good, there is nowhere to send them.
  if (phase() != State::kReady && state() != ConnState::kReconnecting) return ENOTCONN;
  if (c.done == nullptr) return EINVAL;
  const EngineOptions& o = core->opt;
  // The commonest call: inline arguments, no chunk of any kind, small
  // results, a message that fits the inline threshold. It needs none of the
  // checks below (each is about a chunk), and gives the same answers
  // (tests/unit/conn_fast_path_test.cc; ~120 instructions per RPC fewer:
  // docs/engine.md, "One path per message").
  if (wire::fast_paths() && c.read_chunks.empty() && c.bulk_send.empty() && c.write_chunks.empty() &&
      c.bulk_recv.empty() && c.max_results <= o.max_reply && c.max_results + 128 <= inline_recv) {
    const size_t rpc_hdr = wire::call_rpc_header_len(c);
    const size_t rpc_len = rpc_hdr + c.args.size();
    if (wire::kNoChunksHeader + rpc_len <= inline_send)
      return accept(c, nullptr, 0, nullptr, 0, false, rpc_len, rpc_hdr, xid_out);
  }
  const size_t nreads = c.read_chunks.size() + (c.bulk_send.empty() ? 0 : 1);
  const size_t nwrites = c.write_chunks.size() + (c.bulk_recv.empty() ? 0 : 1);
  if (nreads > kMaxCallReadChunks || nwrites > kMaxCallWriteChunks) return EINVAL;
  if (c.max_results > o.max_reply) return EMSGSIZE;
  // Chunks: registered memory (zero copy), within max_bulk; read chunks at
  // distinct XDR positions inside the arguments.
  ReadChunk reads[kMaxReadChunks];
  int nr = 0;
  for (const ReadChunk& rc : c.read_chunks) {
    if (rc.data.empty() || rc.position % 4 != 0 || rc.position > c.args.size()) return EINVAL;
    reads[nr++] = rc;
  }
  if (!c.bulk_send.empty()) reads[nr++] = ReadChunk{c.bulk_send, static_cast<uint32_t>(c.args.size())};
  std::stable_sort(reads, reads + nr, [](const ReadChunk& a, const ReadChunk& b) { return a.position < b.position; });
  for (int i = 0; i < nr; ++i) {
    if (i > 0 && reads[i].position == reads[i - 1].position) return EINVAL;
    if (reads[i].data.size() > o.max_bulk) return EMSGSIZE;
    uint32_t lkey;
    if (!pd_ctx->lkey_of(reads[i].data.data(), reads[i].data.size(), &lkey)) return EINVAL;
  }
  std::span<uint8_t> writes[kMaxWriteChunks];
  int nw = 0;
  if (!c.bulk_recv.empty()) writes[nw++] = c.bulk_recv;
  for (std::span<uint8_t> w : c.write_chunks) {
    if (w.empty()) return EINVAL;
    writes[nw++] = w;
  }
  for (int i = 0; i < nw; ++i) {
    if (writes[i].size() > o.max_bulk) return EMSGSIZE;
    uint32_t lkey;
    if (!pd_ctx->lkey_of(writes[i].data(), writes[i].size(), &lkey)) return EINVAL;
  }
  // The whole call message must fit the negotiated inline threshold, chunk
  // lists included (a full transport header alone is 1728 bytes, more than
  // RFC 8166's default threshold), so count the segments each chunk needs.
  const bool want_reply = c.max_results + 128 > inline_recv;
  const size_t rpc_hdr = wire::call_rpc_header_len(c);
  const size_t rpc_len = rpc_hdr + c.args.size();
  ChunkLists shape;
  shape.clear();
  if (nr > 0 || nw > 0 || want_reply) {
    if (pd_ctx->reg == nullptr) {
      // No way to offer memory that the peer loses once the call is done.
      if (!dc->warned_no_chunks) {
        dc->warned_no_chunks = true;
        TERN_LOG(kWarn, "engine",
                 "%s: refusing calls that need chunks: the device has no fast registration, and the registration "
                 "cache needs EngineOptions::trusted_peers",
                 dc->spec.c_str());
      }
      return ENOTSUP;
    }
    const Registrar& reg = *pd_ctx->reg;
    for (int i = 0; i < nr; ++i) {
      int n = segs_for(reg, reads[i].data.data(), reads[i].data.size());
      if (n < 0) return EMSGSIZE;
      shape.reads[shape.nreads++].nsegs = n;
    }
    for (int i = 0; i < nw; ++i) {
      int n = segs_for(reg, writes[i].data(), writes[i].size());
      if (n < 0) return EMSGSIZE;
      shape.writes[shape.nwrites++].nsegs = n;
    }
    if (want_reply) {
      // The reply buffer comes from the bulk pool, page-aligned.
      int n = segs_for(reg, nullptr, c.max_results + 256);
      if (n < 0) return EMSGSIZE;
      shape.has_reply = true;
      shape.reply.nsegs = n;
    }
  }
  bool long_call = false;
  if (wire::transport_header_len(shape) + rpc_len > inline_send) {
    // A long call: the RPC message goes through a position-zero read chunk
    // (RDMA_NOMSG), staged in the bulk pool.
    if (pd_ctx->reg == nullptr) return EINVAL;
    if (rpc_len > o.max_long_call) return EMSGSIZE;
    int n = segs_for(*pd_ctx->reg, nullptr, rpc_len);
    if (n < 0 || shape.nreads == kMaxReadChunks) return EMSGSIZE;
    for (int i = shape.nreads; i > 0; --i) shape.reads[i] = shape.reads[i - 1];
    shape.reads[0].nsegs = n;
    ++shape.nreads;
    if (wire::transport_header_len(shape) > inline_send) return EINVAL;
    long_call = true;
  }
  if (shape.read_segments() > kMaxReadSegs) return EMSGSIZE;
  return accept(c, reads, nr, writes, nw, long_call, rpc_len, rpc_hdr, xid_out);
}

inline int ClientConn::accept(const Call& c, const ReadChunk* reads, int nr, const std::span<uint8_t>* writes, int nw,
                       bool long_call, size_t rpc_len, size_t rpc_hdr, uint32_t* xid_out) {
  if (backlog.size() >= core->opt.backlog) return EAGAIN;
  Request* r = core->requests.get();
  if (r == nullptr) return EAGAIN;
  // I5: a pooled request carries nothing.
  TERN_ASSERT(r->state() == ReqState::kFree && !r->rpc_owner && !r->send_owner && r->reply == nullptr &&
              r->mrs == nullptr && r->sendbuf == nullptr && r->longbuf == nullptr && r->replybuf == nullptr);
  r->nreads = nr;
  std::copy(reads, reads + nr, r->reads);
  r->nwrites = nw;
  std::copy(writes, writes + nw, r->writes);
  r->long_call = long_call;
  r->rpc_len = static_cast<uint32_t>(rpc_len);
  r->rpc_hdr = static_cast<uint32_t>(rpc_hdr);
  admit(r, c, false);
  if (xid_out != nullptr) *xid_out = r->xid;
  return 0;
}

namespace {

void copy_args(Request* r, std::span<const uint8_t> args) {
  r->args_copy.assign(args.begin(), args.end());
  r->call.args = r->args_copy;
  r->args_in_sendbuf = false;
}

}  // namespace

void ClientConn::copy_args_out(Request* r) {
  TERN_ASSERT(r->args_in_sendbuf && r->sendbuf != nullptr);
  copy_args(r, r->call.args);
}

void ClientConn::admit(Request* r, const Call& c, bool probe) {
  r->conn = this;
  r->rpc_owner = true;
  r->probe = probe;
  r->call = c;
  if (c.auth != nullptr) {
    r->auth_copy = *c.auth;
    r->call.auth = &r->auth_copy;
  }
  r->call.read_chunks = {};
  r->call.write_chunks = {};
  r->waited = false;
  r->retransmits = 0;
  r->expire = CallStatus::kOk;
  r->xid = next_xid++;
  if (r->xid == 0) r->xid = next_xid++;
  if (!probe) {  // keepalive probes are counted as such, not as the host's calls
    core->engine_stats.calls.add();
    counters.calls.add();
    counters.backlog_depth.add(backlog.size());
  }
  r->t_call = now_ticks();
  if (TERN_UNLIKELY(breakdown != nullptr)) r->ts_posted = r->ts_recv = r->ts_fenced = 0;
  r->deadline = c.timeout_ns > 0 ? r->t_call + ticks_from_ns(c.timeout_ns) : 0;
  if (r->deadline != 0) link_deadline(r);
  if (probe) {
    r->proc_counters = nullptr;
  } else {
    if (c.prog != pc_key[0] || c.vers != pc_key[1] || c.proc != pc_key[2]) {
      pc_last = core->proc_counters(c.prog, c.vers, c.proc, false);
      pc_key[0] = c.prog, pc_key[1] = c.vers, pc_key[2] = c.proc;
    }
    r->proc_counters = pc_last;
  }
  if (r->proc_counters != nullptr) r->proc_counters->ops.add();
  if (!probe) last_prog = c.prog, last_vers = c.vers;
  accepted(r);
  if (wire::fast_paths() && backlog.empty() && phase() == State::kReady && !r->long_call && r->nreads == 0 &&
      r->nwrites == 0 && c.max_results + 128 <= inline_recv) {
    // Nothing waits ahead of it and it has no chunk (so it cannot be
    // refused): it goes out now if it can, as process(kSubmit) would send
    // the backlog's head, without entering and leaving the backlog (~40
    // instructions per RPC fewer; conn_fast_path_test.cc compares the two).
    // Its arguments are marshaled from the caller's buffer, still valid
    // inside call().
    in_call_ = true;
    const SendResult res = send(r);
    in_call_ = false;
    head_waits_for_credit = res == SendResult::kWaitCredit;
    TERN_ASSERT(res != SendResult::kRefused);
    if (res == SendResult::kSent || res == SendResult::kConnFailed) {
      // Marshaled: the arguments are the message's last bytes in the send
      // buffer (a header without chunks, then the RPC header), which the
      // call keeps at least until its Send is done. Read from there if it
      // must be sent again, rather than copied here for a retransmission
      // that almost never comes (~35 instructions per RPC; keep_args
      // copies them out when the buffer goes back first).
      r->call.args = std::span<const uint8_t>(r->sendbuf->data + wire::kNoChunksHeader + r->rpc_hdr, c.args.size());
      TERN_ASSERT(c.args.empty() || std::memcmp(r->call.args.data(), c.args.data(), c.args.size()) == 0);
      r->args_in_sendbuf = true;
      in_flight.push_front(r);
      // A refused post failed the connection: the call is an orphan.
      if (res == SendResult::kConnFailed || phase() != State::kReady) process(r, ReqEvent::kConnLost);
      return;
    }
    // It waits for a credit, memory or room, at the head of the backlog
    // with what it took, and is marshaled from a later poll(): nothing the
    // caller passed by pointer may be read after call() returns.
    copy_args(r, c.args);
    TERN_ASSERT(backlog.empty());
    backlog.push_back(r);
    core->engine_stats.backlogged.add();
    want_service();
    return;
  }
  // Into the backlog, in order; the head goes out at once if it can. A call
  // may wait there and be marshaled from a later poll(): nothing the caller
  // passed by pointer may be read after call() returns.
  copy_args(r, c.args);
  backlog.push_back(r);
  if (backlog.front() == r && phase() == State::kReady) {
    in_call_ = true;  // completions come only from poll(): a refusal waits for it
    process(r, ReqEvent::kSubmit);
    in_call_ = false;
    if (r->state() == ReqState::kBacklog) {
      core->engine_stats.backlogged.add();
      want_service();
    }
  } else {
    core->engine_stats.backlogged.add();
  }
}

ClientConn::SendResult ClientConn::send(Request* r) {
  const EngineOptions& o = core->opt;
  const Call& c = r->call;
  auto wait = [&](bool memory) {
    if (!r->waited) {
      r->waited = true;
      if (memory) core->engine_stats.memory_waits.add();
      else {
        core->engine_stats.credit_waits.add();
        counters.credit_waits.add();
      }
    }
    return memory ? SendResult::kWait : SendResult::kWaitCredit;
  };
  // Credits: never more calls outstanding than the server granted.
  if (!credits.can_send()) return wait(false);
  // A receive buffer for the reply, reserved from the pool it will land in.
  if (!r->holds_recv) {
    // The queue grows on demand: a connection's own by one, a shared one by
    // a batch (from the engine's receive buffers, while they last).
    if (!rq->grants().reserve()) {
      if (rq->grow(rq->shared() ? 16 : 1) == 0 || !rq->grants().reserve()) return wait(true);
      core->queue_needs_post(rq);
    }
    // Buffers kept back for a batch (RecvQueue::may_defer) are no longer
    // covered once the reservation took the last free credit: the reply
    // must find one posted.
    if (TERN_UNLIKELY(rq->must_post())) rq->post(&core->engine_stats.recvs_posted, &core->engine_stats.recv_batches);
    r->holds_recv = true;
  }
  if (r->sendbuf == nullptr && (r->sendbuf = core->send_bufs->get()) == nullptr) return wait(true);
  const bool want_reply = c.max_results + 128 > inline_recv;
  if (r->long_call && r->longbuf == nullptr && (r->longbuf = core->bulk->get(r->rpc_len)) == nullptr)
    return wait(true);
  if (want_reply && r->replybuf == nullptr && (r->replybuf = core->bulk->get(c.max_results + 256)) == nullptr)
    return wait(true);
  WrChain& chain = core->chain;
  chain.clear();
  ChunkLists& ch = core->chunks;
  ch.clear();
  const uint32_t arena_lkey = pd_ctx->arena_lkey();
  // Most calls carry no chunk of any kind: their chain is the Send alone.
  const bool chunked = r->long_call || r->nreads > 0 || r->nwrites > 0 || want_reply;
  // A chunk that could not be mapped, or a chain that found no room: what
  // was mapped goes straight back (nothing was posted). (A call with no
  // chunk has nothing mapped, and there may be no registrar at all.)
  auto unmap = [&](int rc) {
    if (r->mrs != nullptr) pd_ctx->reg->release(&r->mrs);
    if (rc == Registrar::kRefused) return SendResult::kRefused;
    return wait(true);
  };
  auto map = [&](const void* p, uint64_t len, uint32_t lkey, uint32_t access, RdmaSegment* segs, int* nsegs) {
    int n = pd_ctx->reg->map(reinterpret_cast<uint64_t>(p), len, lkey, access, chain, segs, kMaxChunkSegs, &r->mrs);
    if (n >= 0) *nsegs = n;
    return n;
  };
  if (chunked) {
    // Position zero: a long call's whole RPC message.
    if (r->long_call) {
      size_t n = wire::encode_rpc_call(r->longbuf, r->rpc_len, r->xid, c, c.args);
      TERN_CHECK(n == r->rpc_len, "long call message is %zu bytes, measured %u", n, r->rpc_len);
      ReadChunkSegs& rc = ch.reads[ch.nreads++];
      rc.position = 0;
      if (int rv = map(r->longbuf, n, arena_lkey, kAccessRemoteRead, rc.segs, &rc.nsegs); rv < 0) return unmap(rv);
    }
    const uint32_t hdr = r->rpc_hdr;
    for (int i = 0; i < r->nreads; ++i) {
      const ReadChunk& src = r->reads[i];
      uint32_t lkey = 0;
      (void)pd_ctx->lkey_of(src.data.data(), src.data.size(), &lkey);  // checked at call()
      ReadChunkSegs& rc = ch.reads[ch.nreads++];
      rc.position = hdr + src.position;
      if (int rv = map(src.data.data(), src.data.size(), lkey, kAccessRemoteRead, rc.segs, &rc.nsegs); rv < 0)
        return unmap(rv);
    }
    for (int i = 0; i < r->nwrites; ++i) {
      uint32_t lkey = 0;
      (void)pd_ctx->lkey_of(r->writes[i].data(), r->writes[i].size(), &lkey);
      WriteChunkSegs& wc = ch.writes[ch.nwrites++];
      if (int rv = map(r->writes[i].data(), r->writes[i].size(), lkey, kAccessLocalWrite | kAccessRemoteWrite, wc.segs,
                       &wc.nsegs);
          rv < 0)
        return unmap(rv);
    }
    if (want_reply) {
      ch.has_reply = true;
      if (int rv = map(r->replybuf, c.max_results + 256, arena_lkey, kAccessLocalWrite | kAccessRemoteWrite,
                       ch.reply.segs, &ch.reply.nsegs);
          rv < 0)
        return unmap(rv);
    }
  }
  // The credits we would like (RFC 8166's rdma_credit in a call): our whole
  // window, as the Linux client asks. A grant travels only in a reply, so a
  // client that asked for no more than it uses now could never get another
  // call to a server that holds (answers later) every call it already has;
  // the server bounds what it gives by its own pool (credits.h).
  const uint32_t want = o.credits;
  uint8_t* sb = r->sendbuf->data;
  size_t len = r->long_call ? wire::encode_nomsg_call(sb, inline_send, r->xid, want, ch)
                            : wire::encode_call(sb, inline_send, r->xid, want, ch, c, c.args);
  TERN_CHECK(len != 0, "call header does not fit the inline threshold (checked at call())");
  const int nreg = chain.size();
  chain.add_one_sge(WrOpcode::kSend, sb, static_cast<uint32_t>(len), arena_lkey);
  if (!room(chain.size())) {
    chain.truncate(nreg);
    counters.ring_full.add();
    return unmap(Registrar::kNoResources);
  }
  // The reply finds the request by its xid from now on.
  TERN_CHECK(xids.insert(r->xid, r->index), "xid %u could not be entered (%u in flight)", r->xid, xids.size());
  // The server owes nothing while no call is in flight: keepalive's silence
  // starts when the first one leaves, not at the last reply. Else a
  // connection idle for keepalive_ms + keepalive_timeout_ms since it came
  // up (no reply yet, so one credit, no room for a probe) was declared dead
  // by the first poll after its first call: 56 of 256 connections made over
  // rxe in the VM, the call sent again on a new connection, or failed if
  // no_retry.
  // (The engine's timers have this connection filed within keepalive_ms of
  // their last look at it, whatever it does: ClientConn::refile_at.)
  // Sent from call() (in_call_), the call's own reading is a moment old:
  // one clock read fewer per call at depth 1, where every call finds none
  // in flight.
  if (credits.in_flight() == 0) t_last_recv = in_call_ ? r->t_call : now_ticks();
  credits.sent();
  posting(r);
  // If the QP refuses the chain the connection is failing: the drain fails
  // this call like any other in flight (its MRs, maybe half-registered, are
  // destroyed at teardown). Either way the call is now in flight.
  if (!post(chain, SendCtxKind::kCallSend, r->index)) return SendResult::kConnFailed;
  // The Send owner's reference is taken only once the WRs are posted (the
  // rule of the "xprtrdma: Decouple req recycling from RPC completion" series (linux-nfs, 2026):
  // a failed post must not hold the request).
  r->send_owner = true;
  if (TERN_UNLIKELY(breakdown != nullptr)) r->ts_posted = now_ticks();
  // Counted once the call is committed: an attempt that ran short of MRs or
  // send-queue room is retried from the backlog and must not count twice.
  counters.sends.add();
  counters.bytes_sent.add(len);
  t_last = core->now_tick;  // coarse (ConnCore::now_tick)
  if (!chunked) {
    if (r->proc_counters != nullptr) r->proc_counters->bytes_sent.add(len);
    return SendResult::kSent;
  }
  int nread_user = ch.nreads - (r->long_call ? 1 : 0);
  if (nread_user > 0) core->engine_stats.read_chunks.add();
  if (ch.nwrites > 0) core->engine_stats.write_chunks.add();
  if (ch.has_reply) core->engine_stats.reply_chunks.add();
  if (r->long_call) {
    core->engine_stats.long_calls.add();
    counters.nomsg.add();
  }
  uint64_t bulk = 0;
  for (int i = 0; i < r->nreads; ++i) bulk += r->reads[i].data.size();
  if (nread_user > 0) {
    counters.read_chunks.add();
    counters.read_chunk_bytes.add(bulk);
  }
  if (ch.nwrites > 0) counters.write_chunks.add();
  if (ch.has_reply) counters.reply_chunks.add();
  if (r->proc_counters != nullptr) r->proc_counters->bytes_sent.add(len + bulk + (r->long_call ? r->rpc_len : 0));
  return SendResult::kSent;
}

int ClientConn::flush_backlog() {
  int n = 0;
  while (!backlog.empty() && phase() == State::kReady) {
    Request* r = backlog.front();
    process(r, ReqEvent::kSubmit);
    if (backlog.front() == r) break;  // the head waits: so does everything behind it
    ++n;
  }
  return n;
}

int ClientConn::service(bool* more) {
  int work = 0;
  *more = false;
  if (phase() == State::kReady) {
    work += flush_backlog();
    head_waits_for_credit = head_waits_for_credit && !backlog.empty();
    // LOCAL_INV chains that found no send-queue room.
    if (inv_waits > 0)
      // (A call that completes here leaves the list, and its link says
      // nothing more: the walk ends there, and the next pass goes on.)
      for (Request* r = in_flight.front(); r != nullptr && phase() == State::kReady; r = in_flight.next(r))
        if (r->inv_waiting) {
          process(r, ReqEvent::kReply);
          if (!r->inv_waiting) ++work;
        }
    // A head waiting for a credit needs a reply, which services us again;
    // one waiting for memory or room retries from the next poll.
    *more = inv_waits > 0 || (!backlog.empty() && !head_waits_for_credit);
  }
  if (draining()) work += step_drain(more);
  return work;
}

void ClientConn::on_lost() {
  for (Request* r = in_flight.front(); r != nullptr; r = in_flight.next(r)) process(r, ReqEvent::kConnLost);
}

bool ClientConn::reconnect_wanted() const {
  return !user_closed && core->opt.reconnect && !core->shutting_down;
}

void ClientConn::on_drained() {
  raise(ConnEvent::kDrained);  // to the backoff, or dead (conn_machine.cc)
  settle_calls();
}

void ClientConn::settle_calls() {
  settling_ = true;
  requeued_.clear();
  for (Request* r = backlog.front(); r != nullptr;) {
    Request* next = backlog.next(r);
    process(r, ReqEvent::kDrained);
    r = next;
  }
  while (!in_flight.empty()) {
    Request* r = in_flight.front();
    TERN_ASSERT(r->state() == ReqState::kOrphaned || r->state() == ReqState::kAbandoned);
    process(r, ReqEvent::kDrained);
    TERN_CHECK(in_flight.front() != r, "an orphaned request did not complete at the drain");
  }
  xids.clear();
  credits.reset();
  probe_in_flight = false;
  settling_ = false;
  if (phase() != State::kBackoff) return;
  // The calls to send again go first, in the order they were first sent
  // (xids are given in order), then those that never went out.
  std::sort(requeued_.begin(), requeued_.end(), [](Request* a, Request* b) { return a->xid < b->xid; });
  for (auto it = requeued_.rbegin(); it != requeued_.rend(); ++it) backlog.push_front(*it);
  requeued_.clear();
  if (user_closed) {
    // close() from a callback above: nothing is re-established, and what
    // was to be sent again fails now.
    raise(ConnEvent::kClosed);
    settle_calls();
    return;
  }
  schedule_reconnect();
}

void ClientConn::trace_call(const Request* r, uint64_t now) {
  CallTrace::Record t;
  t.conn = id, t.xid = r->xid, t.server = false;
  if (const ProcCounters* p = r->proc_counters; p != nullptr) t.prog = p->prog, t.vers = p->vers, t.proc = p->proc;
  t.t[0] = r->t_call, t.t[1] = r->ts_posted, t.t[2] = r->ts_recv, t.t[3] = r->ts_fenced, t.t[4] = now;
  breakdown->trace->add(t);
}

}  // namespace tern::rpc
