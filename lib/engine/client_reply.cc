// Client datapath, the reply side: a reply is matched to its call by xid;
// a Send With Invalidate is accounted for first, whatever becomes of the
// reply (the device has already invalidated that rkey); the write and reply
// chunks' lengths are checked against what the call offered; then the
// request moves on (ClientConn::process: invalidation, completion).
#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

// The steps every reply to a call we wait for takes, the plain reply's
// shortcut and the general path alike (always inline: the shortcut is the
// common reply's path).
[[gnu::always_inline]] inline void ClientConn::take_grant(uint32_t grant) {
  // The server's grant: at least one, never more than we asked for.
  credits.grant(grant);
  if (!backlog.empty()) want_service();  // a credit may be what the backlog waits for
}

[[gnu::always_inline]] inline CallReply& ClientConn::attach_reply(Request* r, MsgBuf* rep) {
  r->reply = rep;  // I2: the reply buffer stays attached until the call completes
  if (TERN_UNLIKELY(breakdown != nullptr)) r->ts_recv = now_ticks();
  // CallReply{kOk, xid, {}, 0} field by field: assigned whole, it was built
  // in a temporary and copied (rep stos and rep movs, ~30 instructions per
  // reply as counted).
  CallReply& res = r->result;
  res.status = CallStatus::kOk;
  res.xid = r->xid;
  res.results = {};
  res.bulk_recv_len = 0;
  res.nwrites = 0;
  for (uint32_t& l : res.write_lens) l = 0;
  res.retransmits = 0;
  return res;
}

[[gnu::always_inline]] inline void ClientConn::reply_taken(Request* r, uint64_t bytes) {
  if (r->proc_counters != nullptr) r->proc_counters->bytes_received.add(bytes);
  core->engine_stats.replies.add();
  counters.replies.add();
  replied(r);  // process(r, kReply)
}

void ClientConn::on_message(MsgBuf* rep) {
  auto msg = std::span<const uint8_t>(rep->data, rep->len);
  // The commonest reply -- a plain Send (no invalidation), no chunk lists,
  // SUCCESS -- for a call we wait for: what the general path below does
  // with it, without its chunk bookkeeping (~50 instructions per RPC
  // fewer; tests/unit/conn_fast_path_test.cc compares the two). Anything
  // else goes there.
  {
    uint32_t xid, grant;
    std::span<const uint8_t> results;
    uint32_t idx;
    Request* r;
    if ((rep->wc_flags & kWcWithInv) == 0 && wire::decode_plain_reply(msg, &xid, &grant, &results) &&
        xids.find(xid, &idx) && (r = core->requests.at(idx)) != nullptr && r->conn == this &&
        r->state() == ReqState::kSent && r->reply == nullptr) {
      t_last_recv = t_last;
      take_grant(grant);
      CallReply& res = attach_reply(r, rep);
      res.results = results;
      res.nwrites = static_cast<uint32_t>(r->nwrites);  // nothing written into them
      reply_taken(r, rep->len);
      return;
    }
  }
  wire::Reply h;
  bool decoded = wire::decode_reply_header(msg, &h);
  // The xid leads every RPC-over-RDMA header whatever its version or
  // procedure, so even a reply we cannot use names the call it answers.
  uint32_t xid = decoded ? h.xid : wire::leading_xid(msg);
  t_last_recv = t_last;
  Request* r = nullptr;
  if (uint32_t idx; xids.find(xid, &idx)) {
    r = core->requests.at(idx);
    if (r != nullptr && r->conn == this && r->state() == ReqState::kAbandoned && (rep->wc_flags & kWcWithInv) == 0) {
      // The late reply of a call that timed out or was cancelled: its
      // caller has its status. Dropped and counted; what the call kept
      // (its credit, its receive reservation, its xid) goes back.
      core->engine_stats.late_replies.add();
      counters.bad_xids.add();
      if (decoded) credits.grant(h.credits);
      credits.answered();
      xids.erase(r->xid);
      process(r, ReqEvent::kLateReply);
      give_back(rep);
      if (!backlog.empty()) want_service();
      return;
    }
    if (r == nullptr || r->conn != this || r->state() != ReqState::kSent || r->reply != nullptr) r = nullptr;
  }
  // Remote invalidation (RFC 8797) first, whatever becomes of the reply: the
  // device has already invalidated that rkey, so a LOCAL_INV of it later
  // would fail (on rxe in Linux 6.1, invalidating a type 2 window twice
  // dereferences a NULL QP and panics the kernel).
  if ((rep->wc_flags & kWcWithInv) != 0) {
    uint32_t rkey = rep->inv_rkey;
    RemoteInv inv = accept_remote_inv(r, rkey);
    if (inv != RemoteInv::kOurs || !dc->offer_inv) {
      give_back(rep);
      protocol_error(inv == RemoteInv::kOtherConnection
                         ? make_error(Errc::kRemoteError,
                                      "its Send With Invalidate named rkey 0x%x, a call's on another connection", rkey)
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
    core->engine_stats.bad_headers.add();
    // A reply to a call we wait for that we cannot use fails that call
    // rather than leaving it pending; anything else is dropped (RFC 8166
    // §4.5: a requester never answers a bad header).
    if (r != nullptr) fail_reply(r, rep, CallStatus::kBadReply);
    else give_back(rep);
    if (has_waiting()) want_service();
    return;
  }
  take_grant(h.credits);
  if (r == nullptr) {
    // Not a call we are waiting for (late, duplicated or forged): drop it.
    core->engine_stats.bad_headers.add();
    counters.bad_xids.add();
    give_back(rep);
    return;
  }
  CallReply& res = attach_reply(r, rep);
  uint64_t reply_chunk_bytes = 0;
  if (h.kind == wire::Reply::Kind::kError) {
    res.status = CallStatus::kRdmaError;
    core->engine_stats.rdma_errors_received.add();
  } else {
    std::span<const uint8_t> body = h.body;
    if (h.kind == wire::Reply::Kind::kNoMsg) {
      // The whole reply came through our reply chunk; never more than it holds.
      if (!h.has_reply_chunk || r->replybuf == nullptr || h.reply_chunk_len > r->call.max_results + 256u) {
        res.status = CallStatus::kBadReply;
      } else {
        body = std::span<const uint8_t>(r->replybuf, h.reply_chunk_len);
        reply_chunk_bytes = h.reply_chunk_len;
      }
    }
    if (res.status == CallStatus::kOk) res.status = wire::decode_rpc_reply(body, r->xid, &res.results);
    // What the server says it wrote into each write chunk: never more
    // chunks than we offered, never more bytes than each holds.
    if (h.nwrites > r->nwrites) res.status = CallStatus::kBadReply;
    res.nwrites = static_cast<uint32_t>(r->nwrites);
    for (int i = 0; i < h.nwrites && i < r->nwrites; ++i) {
      if (h.write_lens[i] > r->writes[i].size()) res.status = CallStatus::kBadReply;
      else res.write_lens[i] = static_cast<uint32_t>(h.write_lens[i]);
    }
    if (res.status == CallStatus::kBadReply) {
      res.results = {};
      for (uint32_t& l : res.write_lens) l = 0;
    }
    res.bulk_recv_len = r->nwrites > 0 && !r->call.bulk_recv.empty() ? res.write_lens[0] : 0;
  }
  if (res.status == CallStatus::kBadReply) {
    core->engine_stats.bad_replies.add();
    counters.bad_replies.add();
  }
  if (h.kind == wire::Reply::Kind::kNoMsg) {
    counters.nomsg.add();
    counters.reply_chunk_bytes.add(reply_chunk_bytes);
  }
  uint64_t written = 0;
  for (uint32_t i = 0; i < res.nwrites; ++i) written += res.write_lens[i];
  counters.write_chunk_bytes.add(written);
  reply_taken(r, rep->len + written + reply_chunk_bytes);
}

void ClientConn::fail_reply(Request* r, MsgBuf* rep, CallStatus status) {
  r->reply = rep;
  r->result = CallReply{status, r->xid, {}, 0};
  core->engine_stats.bad_replies.add();
  counters.bad_replies.add();
  process(r, ReqEvent::kReply);
}

EngineMr* ClientConn::live_registration(uint32_t rkey) {
  for (Request* o = in_flight.front(); o != nullptr; o = in_flight.next(o)) {
    if (o->state() != ReqState::kSent || o->mrs == nullptr) continue;
    if (EngineMr* m = Registrar::live_with_rkey(o->mrs, rkey)) return m;
  }
  return nullptr;
}

ClientConn::RemoteInv ClientConn::accept_remote_inv(Request* r, uint32_t rkey) {
  if (pd_ctx->reg == nullptr || !pd_ctx->reg->invalidates()) return RemoteInv::kNone;
  // Normally the rkey is one the replying call offered.
  EngineMr* m = r != nullptr ? Registrar::live_with_rkey(r->mrs, rkey) : nullptr;
  // RFC 8797 has the server invalidate only what the call it answers
  // offered, but the device believed the peer: if it was another live call
  // of ours, that MR is invalid now and must never see a LOCAL_INV. Rare
  // (a misbehaving server), so walks over the calls in flight are fine.
  if (m == nullptr) m = live_registration(rkey);
  if (m != nullptr) {
    pd_ctx->reg->remote_invalidated(m);
    core->engine_stats.remote_invalidations.add();
    counters.remote_invalidations.add();
    return RemoteInv::kOurs;
  }
  // A device that does not tie remote invalidation to the window's QP (rxe)
  // lets a peer invalidate another connection's registration in the same PD.
  if (!dc->dev->caps().remote_inv_qp_bound) {
    if ((m = core->control->registration_elsewhere(this, pd_ctx, rkey)) != nullptr) {
      pd_ctx->reg->remote_invalidated(m);
      return RemoteInv::kOtherConnection;
    }
  }
  return RemoteInv::kNone;
}

}  // namespace tern::rpc
