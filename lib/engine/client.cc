// Client datapath: a call is marshaled into its request's send buffer, its
// chunks registered (REG_MR chained ahead of the Send), and posted with one
// doorbell; the reply is matched by xid, MRs are invalidated (remotely by the
// server's Send With Invalidate, or by a LOCAL_INV chain whose last WR's
// completion finishes the call), and the callback runs.
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_impl.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

int Conn::call(const Call& c) {
  if (server || state != State::kReady) return ENOTCONN;
  if (c.done == nullptr) return EINVAL;
  const EngineOptions& o = eng->opt;
  if (c.bulk_send.size() > o.max_bulk || c.bulk_recv.size() > o.max_bulk || c.max_results > o.max_reply)
    return EMSGSIZE;
  if ((!c.bulk_send.empty() && pdc->find(c.bulk_send.data(), c.bulk_send.size()) == nullptr) ||
      (!c.bulk_recv.empty() && pdc->find(c.bulk_recv.data(), c.bulk_recv.size()) == nullptr))
    return EINVAL;  // bulk buffers must be registered memory (zero copy)
  // The whole call message must fit the negotiated inline threshold, chunk
  // lists included (a full transport header alone is 1728 bytes, more than
  // RFC 8166's default threshold), so count the segments each chunk will need.
  int nread = 0, nwrite = 0, nreply = 0;
  if (!c.bulk_send.empty() || !c.bulk_recv.empty() || c.max_results + 128 > inline_recv) {
    if (pdc->reg == nullptr) {
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
    const FrwrRegistrar& reg = *pdc->reg;
    nread = static_cast<int>(reg.segments_for(reinterpret_cast<uint64_t>(c.bulk_send.data()), c.bulk_send.size()));
    nwrite = static_cast<int>(reg.segments_for(reinterpret_cast<uint64_t>(c.bulk_recv.data()), c.bulk_recv.size()));
    // The reply buffer's address is not known yet: assume the worst alignment.
    if (c.max_results + 128 > inline_recv)
      nreply = static_cast<int>((c.max_results + 256 + 4095) / 4096 / reg.depth() + 2);
    if (nread > kMaxChunkSegs || nwrite > kMaxChunkSegs || nreply > kMaxChunkSegs) return EMSGSIZE;
  }
  if (wire::call_transport_header_len(nread, nwrite, nreply) + wire::call_rpc_header_len(c) + c.args.size() >
      inline_send)
    return EINVAL;
  Request* r = reqs.get();
  if (r == nullptr) return EAGAIN;
  // I5: a pooled request carries nothing.
  TERN_ASSERT(r->state == Request::State::kFree && !r->rpc_owner && !r->send_owner && r->reply == nullptr &&
              r->mrs == nullptr);
  r->rpc_owner = true;
  r->call = c;
  r->args_copy.assign(c.args.begin(), c.args.end());
  r->call.args = r->args_copy;
  // A call may wait in the backlog and be marshaled from a later poll():
  // nothing the caller passed by pointer may be read after call() returns.
  if (c.auth != nullptr) {
    r->auth_copy = *c.auth;
    r->call.auth = &r->auth_copy;
  }
  r->xid = (next_xid++ << slot_bits) | r->slot;
  if (r->xid == 0) r->xid = (next_xid++ << slot_bits) | r->slot;
  eng->st.calls.add();
  cs.calls.add();
  cs.backlog_depth.add(backlog_len);
  r->t_call = now_ticks();
  r->pc = eng->proc_counters(c.prog, c.vers, c.proc, false);
  r->pc->ops.add();
  // Credits: never more calls outstanding than the server granted.
  int rc = backlog_head != nullptr || in_flight >= credits ? EAGAIN : marshal_and_send(r);
  if (rc != 0) {
    // A call whose memory the device refused fails from the backlog, on the
    // next poll: completions come only from poll().
    r->refused = rc == EIO;
    r->state = Request::State::kBacklog;
    r->next = nullptr;
    if (backlog_tail) backlog_tail->next = r;
    else backlog_head = r;
    backlog_tail = r;
    ++backlog_len;
    eng->st.backlogged.add();
    if (in_flight >= credits) {
      eng->st.credit_waits.add();
      cs.credit_waits.add();
    }
  }
  return 0;
}

int Conn::flush_backlog() {
  int n = 0;
  while (backlog_head != nullptr && (backlog_head->refused || in_flight < credits)) {
    Request* r = backlog_head;
    if (!r->refused) {
      int rc = marshal_and_send(r);
      if (rc == EIO) r->refused = true;
      else if (rc != 0) break;  // no MRs or send slots yet: try next poll
    }
    backlog_head = r->next;
    if (backlog_head == nullptr) backlog_tail = nullptr;
    r->next = nullptr;
    --backlog_len;
    ++n;
    if (r->refused) {
      r->result = CallReply{CallStatus::kNoRegistration, r->xid, {}, 0};
      complete(r);
    }
  }
  return n;
}

// Builds and posts [REG_MR..., SEND] for one call. Returns 0, EAGAIN when
// resources (MRs, send contexts, send-queue room) are short, or EIO when the
// device refused to register the call's memory (nothing posted either way).
int Conn::marshal_and_send(Request* r) {
  const EngineOptions& o = eng->opt;
  if (ring->full()) {
    cs.ring_full.add();
    return EAGAIN;
  }
  chain.clear();
  wire::CallChunks ch;
  const Call& c = r->call;
  // A chunk that could not be mapped: what earlier chunks took goes straight
  // back (nothing was posted).
  auto unmap = [&](int map_result) {
    pdc->reg->release(&r->mrs);
    return map_result == FrwrRegistrar::kRefused ? EIO : EAGAIN;
  };
  // Read chunk: the bulk argument data, at the XDR position right after the
  // inline arguments.
  if (!c.bulk_send.empty()) {
    const Region* rg = pdc->find(c.bulk_send.data(), c.bulk_send.size());
    RdmaSegment segs[kMaxChunkSegs];
    int n = pdc->reg->map(reinterpret_cast<uint64_t>(c.bulk_send.data()), c.bulk_send.size(), rg->mr->lkey(),
                    kAccessRemoteRead, chain, segs, kMaxChunkSegs, &r->mrs);
    if (n < 0) return unmap(n);
    uint32_t pos = static_cast<uint32_t>(wire::call_rpc_header_len(c) + c.args.size());
    for (int i = 0; i < n; ++i) ch.reads[i] = ReadSeg{pos, segs[i]};
    ch.nread = n;
  }
  // Write chunk: room for bulk results.
  if (!c.bulk_recv.empty()) {
    const Region* rg = pdc->find(c.bulk_recv.data(), c.bulk_recv.size());
    int n = pdc->reg->map(reinterpret_cast<uint64_t>(c.bulk_recv.data()), c.bulk_recv.size(), rg->mr->lkey(),
                    kAccessLocalWrite | kAccessRemoteWrite, chain, ch.writes, kMaxChunkSegs, &r->mrs);
    if (n < 0) return unmap(n);
    ch.nwrite = n;
  }
  // Reply chunk: when the results may not fit inline.
  if (c.max_results + 128 > inline_recv) {
    if (r->replybuf == nullptr) {
      r->replybuf = block(o.max_reply + 256, 4096);
      if (r->replybuf == nullptr) {
        pdc->reg->release(&r->mrs);
        return EAGAIN;
      }
    }
    const Region* rg = pdc->find(r->replybuf, o.max_reply + 256);
    int n = pdc->reg->map(reinterpret_cast<uint64_t>(r->replybuf), c.max_results + 256, rg->mr->lkey(),
                    kAccessLocalWrite | kAccessRemoteWrite, chain, ch.replies, kMaxChunkSegs, &r->mrs);
    if (n < 0) return unmap(n);
    ch.nreply = n;
  }
  size_t len = wire::encode_call(r->sendbuf, inline_send, r->xid, o.credits, ch, c, c.args);
  TERN_CHECK(len != 0, "call header does not fit the inline threshold (checked at call())");
  int nreg = chain.size();
  add_send(r->sendbuf, len);
  if (!sq->room(static_cast<uint32_t>(chain.size()))) {
    chain.truncate(nreg);
    if (r->mrs != nullptr) pdc->reg->release(&r->mrs);
    return EAGAIN;
  }
  // If the QP refuses the chain the connection is failing: the drain fails
  // this call like any other in flight (its MRs, maybe half-registered, are
  // destroyed at teardown). Either way the call is now in flight.
  (void)post_chain(chain, chain.size() - 1, r);
  r->state = Request::State::kSent;
  ++in_flight;
  // Counted once the call is committed: an attempt that ran short of MRs or
  // send-queue room is retried from the backlog and must not count twice.
  if (ch.nread > 0) eng->st.read_chunks.add();
  if (ch.nwrite > 0) eng->st.write_chunks.add();
  if (ch.nreply > 0) eng->st.reply_chunks.add();
  cs.sends.add();
  cs.bytes_sent.add(len);
  t_last = now_ticks();
  if (ch.nread > 0) {
    cs.read_chunks.add();
    cs.read_chunk_bytes.add(c.bulk_send.size());
  }
  if (ch.nwrite > 0) cs.write_chunks.add();
  if (ch.nreply > 0) cs.reply_chunks.add();
  r->pc->bytes_sent.add(len + c.bulk_send.size());
  return 0;
}

SendWr& Conn::add_send(const uint8_t* buf, size_t len) {
  return chain.add_one_sge(WrOpcode::kSend, buf, static_cast<uint32_t>(len), pdc->find(buf, len)->mr->lkey());
}

void Conn::release_send_owner(void* owner) {
  if (server) {
    auto* sc = static_cast<SrvCall*>(owner);
    sc->send_owner = false;
    maybe_free(sc);
  } else {
    auto* r = static_cast<Request*>(owner);
    r->send_owner = false;
    maybe_free(r);
  }
}

// Posts a chain whose WR at send_index is a Send owned by send_owner; takes a
// send context for it (signaled per the ring's batching). False if the QP
// refused it (connection failing).
bool Conn::post_chain(WrChain& ch, int send_index, void* send_owner) {
  bool signal = false;
  uint32_t idx = ring->acquire(send_owner, &signal);
  SendWr& s = ch.data()[send_index];
  s.wr_id = make_wr_id(WrTag::kSend, idx);
  s.flags = signal ? kWrSignaled : 0;
  uint64_t seq = sq->post(static_cast<uint32_t>(ch.size()));
  ring_seq[idx & (ring->size() - 1)] = seq;
  int err = 0;
  int n = qp->post_send(ch.data(), ch.size(), &err);
  eng->st.sends.add();
  if (signal) eng->st.sends_signaled.add();
  if (n != ch.size()) {
    if (n <= send_index) ring->cancel(idx);  // the Send itself was not posted
    TERN_LOG(kWarn, "engine", "post_send accepted %d of %d WRs (errno %d)", n, ch.size(), err);
    on_disconnected(make_sys_error(Errc::kDisconnected, err, "post_send refused a chain"));
    return false;
  }
  // The Send owner's reference is taken only once the WRs are posted (the
  // 2026 patch set's rule: a failed post must not hold the request).
  if (server) static_cast<SrvCall*>(send_owner)->send_owner = true;
  else static_cast<Request*>(send_owner)->send_owner = true;
  return true;
}

void Conn::on_send_wc(const Wc& wc) {
  WrTag tag = wr_tag(wc.wr_id);
  if (wc.status != WcStatus::kSuccess && wc.status != WcStatus::kWrFlushErr && tag != WrTag::kRead &&
      tag != WrTag::kInv) {
    // A failed Send or RDMA WRITE (unsignaled WRs report failures too, with
    // the wr_id they were posted with, often 0). The remote statuses say the
    // peer refused what we did: it named memory it does not let us reach,
    // or broke the protocol. The QP is in error now either way.
    Status why = make_error(Errc::kRemoteError, "%s failed: %s", wc_opcode_name(wc.opcode),
                            wc_status_name(wc.status));
    if (wc.status == WcStatus::kRemAccessErr || wc.status == WcStatus::kRemInvReqErr ||
        wc.status == WcStatus::kRemOpErr)
      protocol_error(std::move(why));
    else
      on_disconnected(std::move(why));
  }
  switch (tag) {
    case WrTag::kSend: {
      auto idx = static_cast<uint32_t>(wr_val(wc.wr_id));
      // A signaled completion (or any flush) proves every earlier Send done.
      sq->retire(ring_seq[idx & (ring->size() - 1)]);
      ring->complete_through(idx, [&](void* owner) { release_send_owner(owner); });
      break;
    }
    case WrTag::kInv: {
      Request* r = reqs.find(static_cast<uint32_t>(wr_val(wc.wr_id)));
      if (r == nullptr) break;  // not a wr_id of ours: ignore it
      sq->retire(r->inv_seq);
      if (wc.status != WcStatus::kSuccess) {
        // Flushed: the MRs' state is unknown. Teardown destroys them and fails the call.
        if (state == State::kReady) on_disconnected(make_error(Errc::kRemoteError, "LOCAL_INV failed: %s",
                                                               wc_status_name(wc.status)));
        break;
      }
      pdc->reg->release(&r->mrs);
      complete(r);
      break;
    }
    case WrTag::kRead:
      server_read_done(wc);
      break;
    case WrTag::kDrain:
      sq_drained = true;
      break;
    default:
      break;
  }
}

void Conn::on_recv_wc(const Wc& wc) {
  if (wr_tag(wc.wr_id) == WrTag::kDrain) {
    rq_drained = true;
    return;
  }
  ReplyBuf* rep = &reps[wr_val(wc.wr_id)];
  TERN_ASSERT(rep->posted);
  rep->posted = false;
  --recvs_posted;
  if (wc.status != WcStatus::kSuccess) {
    // Flushed (or failed): it stays unposted; a live connection reposts it.
    // A receive of ours (registered, sized to what we advertised) fails only
    // when the peer sent more than it may or, with Send With Invalidate,
    // named an rkey that is not ours to invalidate; devices differ in the
    // status they say it with (rxe: LOC_QP_OP_ERR).
    if (wc.status != WcStatus::kWrFlushErr)
      protocol_error(make_error(Errc::kRemoteError, "a receive failed: %s (a message over %u bytes, or a Send "
                                "With Invalidate of an rkey that is not ours)",
                                wc_status_name(wc.status), rep->cap));
    if (state == State::kReady) to_repost.push_back(rep);
    return;
  }
  // A message proves the connection is up, even when the device's
  // ESTABLISHED event is still queued (the engine polls CM events once a
  // millisecond, and on verbs the client's first SEND can overtake its RTU).
  if (state == State::kConnecting && server) on_established({});
  if (server && (wc.flags & kWcWithInv) != 0) {
    // Only responders invalidate with Send (RFC 8797); a server offers no
    // registrations. A device that let this through invalidated nothing of ours.
    to_repost.push_back(rep);
    protocol_error(make_error(Errc::kRemoteError, "a client sent Send With Invalidate (rkey 0x%x)",
                              wc.invalidated_rkey));
    return;
  }
  rep->len = wc.byte_len;
  rep->wc_flags = wc.flags;
  cs.recvs.add();
  cs.bytes_received.add(wc.byte_len);
  t_last = now_ticks();
  rep->invalidated_rkey = wc.invalidated_rkey;
  if (server) handle_call(rep);
  else handle_reply(rep);
}

void Conn::repost_recvs() {
  // Receives go back in batches: one post_recv (one doorbell) for many.
  if (to_repost.empty() || state == State::kDraining || state == State::kDead) return;
  RecvWr wrs[64];
  Sge sges[64];
  size_t done = 0;
  while (done < to_repost.size()) {
    int n = 0;
    for (; n < 64 && done + n < to_repost.size(); ++n) {
      ReplyBuf* rep = to_repost[done + n];
      // I1: a buffer on its way back to the device is attached to nothing.
      TERN_ASSERT(rep->owner == nullptr && !rep->posted);
      sges[n] = Sge{reinterpret_cast<uint64_t>(rep->buf), rep->cap, pdc->find(rep->buf, rep->cap)->mr->lkey()};
      wrs[n] = RecvWr{make_wr_id(WrTag::kRecv, rep->index), &sges[n], 1};
      rep->posted = true;
    }
    int err = 0;
    int got = qp->post_recv(wrs, n, &err);
    for (int i = got; i < n; ++i) to_repost[done + i]->posted = false;
    recvs_posted += static_cast<uint32_t>(got);
    eng->st.recvs_posted.add(static_cast<uint64_t>(got));
    eng->st.recv_batches.add();
    done += static_cast<size_t>(got);
    if (got < n) break;
  }
  to_repost.erase(to_repost.begin(), to_repost.begin() + static_cast<std::ptrdiff_t>(done));
}

void Conn::handle_reply(ReplyBuf* rep) {
  wire::Reply h;
  auto msg = std::span<const uint8_t>(rep->buf, rep->len);
  bool decoded = wire::decode_reply_header(msg, &h);
  // The xid leads every RPC-over-RDMA header whatever its version or
  // procedure, so even a reply we cannot use names the call it answers.
  uint32_t xid = decoded ? h.xid : wire::leading_xid(msg);
  uint32_t slot = xid & ((1u << slot_bits) - 1);
  Request* r = reqs.find(slot);
  if (r != nullptr && (r->xid != xid || r->state != Request::State::kSent || r->reply != nullptr)) r = nullptr;
  // Remote invalidation (RFC 8797) first, whatever becomes of the reply: the
  // device has already invalidated that rkey, so a LOCAL_INV of it later
  // would fail (on rxe in Linux 6.1, invalidating a type 2 window twice
  // dereferences a NULL QP and panics the kernel).
  if ((rep->wc_flags & kWcWithInv) != 0) {
    uint32_t rkey = rep->invalidated_rkey;
    RemoteInv inv = accept_remote_inv(r, rkey);
    if (inv != RemoteInv::kOurs || !dc->offer_inv) {
      to_repost.push_back(rep);
      protocol_error(inv == RemoteInv::kOtherConnection
                         ? make_error(Errc::kRemoteError,
                                      "its Send With Invalidate named rkey 0x%x, a call's on another connection",
                                      rkey)
                     : inv == RemoteInv::kNone
                         ? make_error(Errc::kRemoteError,
                                      "its Send With Invalidate named rkey 0x%x, which is no live registration of "
                                      "this connection",
                                      rkey)
                         : make_error(Errc::kRemoteError,
                                      "it used Send With Invalidate (rkey 0x%x) although we did not offer it", rkey));
      return;
    }
  }
  if (!decoded) {
    eng->st.bad_headers.add();
    // A reply to a call we wait for that we cannot use fails that call
    // rather than leaving it pending; anything else is dropped (RFC 8166
    // §4.5: a requester never answers a bad header).
    if (r != nullptr) fail_reply(r, rep, CallStatus::kBadReply);
    else to_repost.push_back(rep);
    return;
  }
  // The server's grant: at least one, never more than we asked for.
  credits = std::max<uint32_t>(1, std::min(h.credits, eng->opt.credits));
  if (r == nullptr) {
    // Not a call we are waiting for (late, duplicated or forged): drop it.
    eng->st.bad_headers.add();
    cs.bad_xids.add();
    to_repost.push_back(rep);
    return;
  }
  --in_flight;
  // I2: the reply buffer stays attached until the call completes.
  r->reply = rep;
  rep->owner = r;
  CallReply& res = r->result;
  res = CallReply{CallStatus::kOk, r->xid, {}, 0};
  if (h.kind == wire::Reply::Kind::kError) {
    res.status = CallStatus::kRdmaError;
    eng->st.rdma_errors_received.add();
  } else {
    std::span<const uint8_t> body = h.body;
    if (h.kind == wire::Reply::Kind::kNoMsg) {
      // The whole reply came through our reply chunk.
      if (!h.has_reply_chunk || r->replybuf == nullptr || h.reply_chunk_len > r->call.max_results + 256u)
        res.status = CallStatus::kBadReply;
      else
        body = std::span<const uint8_t>(r->replybuf, h.reply_chunk_len);
    }
    if (res.status == CallStatus::kOk) res.status = wire::decode_rpc_reply(body, r->xid, &res.results);
    if (h.write_chunks > 0) {
      if (h.write_len > r->call.bulk_recv.size()) res.status = CallStatus::kBadReply;
      else res.bulk_recv_len = static_cast<uint32_t>(h.write_len);
    }
  }
  if (res.status == CallStatus::kBadReply) {
    eng->st.bad_replies.add();
    cs.bad_replies.add();
  }
  if (h.kind == wire::Reply::Kind::kNoMsg) {
    cs.nomsg.add();
    cs.reply_chunk_bytes.add(h.reply_chunk_len);
  }
  cs.write_chunk_bytes.add(res.bulk_recv_len);
  r->pc->bytes_received.add(rep->len + res.bulk_recv_len + (h.kind == wire::Reply::Kind::kNoMsg ? h.reply_chunk_len : 0));
  eng->st.replies.add();
  cs.replies.add();
  finish_reply(r);
}

EngineMr* Conn::live_registration(uint32_t rkey) {
  for (Request& o : reqs) {
    if (o.state != Request::State::kSent || o.mrs == nullptr) continue;
    if (EngineMr* m = FrwrRegistrar::live_with_rkey(o.mrs, rkey)) return m;
  }
  return nullptr;
}

Conn::RemoteInv Conn::accept_remote_inv(Request* r, uint32_t rkey) {
  if (pdc->reg == nullptr) return RemoteInv::kNone;
  // Normally the rkey is one the replying call offered.
  EngineMr* m = r != nullptr ? FrwrRegistrar::live_with_rkey(r->mrs, rkey) : nullptr;
  // RFC 8797 has the server invalidate only what the call it answers
  // offered, but the device believed the peer: if it was another live call
  // of ours, that MR is invalid now and must never see a LOCAL_INV. Rare
  // (a misbehaving server), so walks over the calls in flight are fine.
  if (m == nullptr) m = live_registration(rkey);
  if (m != nullptr) {
    pdc->reg->remote_invalidated(m);
    eng->st.remote_invalidations.add();
    cs.remote_invalidations.add();
    return RemoteInv::kOurs;
  }
  // A device that does not tie remote invalidation to the window's QP (rxe)
  // lets a peer invalidate another connection's registration in the same PD.
  if (!dc->dev->caps().remote_inv_qp_bound) {
    for (auto& c : eng->conns) {
      if (c.get() == this || c->server || c->pdc != pdc) continue;
      if ((m = c->live_registration(rkey)) != nullptr) {
        pdc->reg->remote_invalidated(m);
        return RemoteInv::kOtherConnection;
      }
    }
  }
  return RemoteInv::kNone;
}

void Conn::fail_reply(Request* r, ReplyBuf* rep, CallStatus status) {
  --in_flight;
  r->reply = rep;
  rep->owner = r;
  r->result = CallReply{status, r->xid, {}, 0};
  eng->st.bad_replies.add();
  cs.bad_replies.add();
  finish_reply(r);
}

void Conn::finish_reply(Request* r) {
  chain.clear();
  int n = r->mrs != nullptr ? pdc->reg->invalidate(r->mrs, chain, make_wr_id(WrTag::kInv, r->slot)) : 0;
  if (n == 0) {
    if (r->mrs != nullptr) pdc->reg->release(&r->mrs);  // nothing left registered: no LOCAL_INV posted
    complete(r);
    return;
  }
  // The LOCAL_INV chain's completion finishes the call (I3).
  r->state = Request::State::kInvalidating;
  r->inv_seq = sq->post(static_cast<uint32_t>(n));
  eng->st.local_inv_chains.add();
  cs.local_inv_chains.add();
  int err = 0;
  if (qp->post_send(chain.data(), n, &err) != n)
    on_disconnected(make_sys_error(Errc::kDisconnected, err, "post_send refused LOCAL_INV"));
}

void Conn::complete(Request* r) {
  // I3: every MR of this call is invalidated before its results are seen.
  TERN_ASSERT(r->mrs == nullptr, "call completing with registered MRs");
  r->state = Request::State::kFree;  // no longer in flight; the pool waits for both owners
  bool error = r->result.status != CallStatus::kOk;
  if (r->reply != nullptr) {
    record_rtt(r->pc, r->t_call, error);  // a reply came: its round trip counts
  } else if (error) {
    cs.errors.add();  // failed without a reply (connection lost, memory refused)
    if (r->pc != nullptr) r->pc->errors.add();
  }
  if (r->call.done != nullptr) r->call.done(r->call.ctx, r->result);
  // I2: detach the reply buffer before it goes back to the device.
  if (ReplyBuf* rep = r->reply) {
    r->reply = nullptr;
    rep->owner = nullptr;
    if (state == State::kReady) to_repost.push_back(rep);
  }
  r->rpc_owner = false;
  maybe_free(r);
}

void Conn::maybe_free(Request* r) {
  // I4: back to the pool only when both the RPC owner and the Send owner let go.
  if (r->rpc_owner || r->send_owner || r->state != Request::State::kFree) return;
  TERN_ASSERT(r->reply == nullptr && r->mrs == nullptr);
  r->call = Call{};
  r->refused = false;
  r->pc = nullptr;
  reqs.put(r);
}

}  // namespace tern::rpc
