// ServerConn: a connection accepted by this engine's listen(), and the
// server datapath, split as svcrdma splits it: receiving and deciding what a
// call needs (server_recv.cc), pulling read chunks and pushing write and
// reply chunks with RDMA READ and WRITE (server_rw.cc), and sending the
// reply (server_reply.cc). Those raise a server call's events; its states,
// their table and every transition are the machine's
// (server_call_machine.h, ServerConn::process in server_call_machine.cc).
#pragma once

#include <cstdint>
#include "base/ring_fifo.h"
#include "engine/connection.h"
#include "engine/bulk_share.h"
#include "engine/credits.h"
#include "engine/server_call_machine.h"

namespace tern::rpc {

namespace wire {
struct RpcCall;
}

// Not a public Connection: the host never holds one; a handler names the
// peer of its call through ServerCall::peer_id().
class ServerConn final : public ConnBase {
 public:
  ServerConn(ConnCore* core, DeviceCtx* dc);
  ~ServerConn() override;

  ConnectionInfo info() const override;
  uint32_t outstanding() const override { return grant.unreplied; }

  // ---- ConnBase hooks
  bool reclaimable() const override { return phase() == State::kDead && calls_held == 0; }
  const char* peer_role() const override { return "client"; }
  ServerConn* as_server() override { return this; }
  void receive_while_connecting() override { on_established({}); }
  bool has_waiting() const override { return !queued.empty() || !pulls.empty() || !deferred.empty(); }
  int service(bool* more) override;
  void ctx_done(const SendCtx& ctx, bool own, const rdma::Wc* wc) override;
  void on_message(MsgBuf* buf) override;  // server_recv.cc
  void on_lost() override;
  void on_drained() override;

  // A server call's event: every transition of its machine
  // (server_call_machine.cc).
  void process(SrvCall* sc, SrvEvent ev, const rdma::Wc* wc = nullptr);
  // The three events every call takes, called directly from the receive,
  // reply and completion paths (process() takes them too, by calling these):
  // process()'s frame and switch, which save registers for its every case,
  // cost each of them ~20 instructions.
  void call_received(SrvCall* sc);   // SrvEvent::kReceived
  void call_replied(SrvCall* sc);    // SrvEvent::kReplied
  void send_released(SrvCall* sc);   // SrvEvent::kSendReleased
  // reply() and reply_error() of a call of this connection (server_reply.cc).
  Status reply(SrvCall* sc, std::span<const uint8_t> results, std::span<const std::span<const uint8_t>> bulk,
               int accept);
  // reply()'s every case but the common one (out of line: the common reply
  // then saves no registers for the chunk lists and the error paths).
  [[gnu::noinline]] Status reply_general(SrvCall* sc, std::span<const uint8_t> results,
                                         std::span<const std::span<const uint8_t>> bulk, int accept);
  void drop(SrvCall* sc);  // ServerCall::drop
  void on_up() override;
  std::string peer_key;  // Qp::peer_host(): the client as it stays across its reconnects
  // Connection admission (conn_admission.h): the peer it counts for in
  // the engine's admission table (from the request, so the same key leaves as came),
  // while in_peer_table; reaped: closed to make room, its slot given up.
  std::string admitted_peer;
  bool in_peer_table = false;
  bool reaped = false;
  // Nothing of a call on it: none being served, waiting or held by a handler.
  bool no_calls() const {
    return grant.unreplied == 0 && calls_held == 0 && deferred.empty() && queued.empty() && pulls.empty();
  }
  // Its peer's share of the bulk pool (bulk_share.h), from on_up().
  PeerShare* share = nullptr;

  // Bulk pool blocks for a call of this connection, counted against its
  // peer's share: get() or nullptr, and put().
  uint8_t* pool_get(SrvCall* sc, size_t len);
  void pool_put(SrvCall* sc, uint8_t* p);
  // Its peer did not complete sc's pull or push within
  // server_rw_timeout_ms (`ticks` since its post): the connection is
  // dropped, with one warning naming the peer (rw_deadline.h).
  void rw_timed_out(SrvCall* sc, RwWait what, uint64_t ticks);

  ConnGrant grant;
  uint32_t calls_held = 0;  // server calls of this connection not yet back in the pool

 private:
  void handle_call(MsgBuf* rep);
  // Answers a message it cannot serve with RDMA_ERROR (ERR_VERS / ERR_CHUNK);
  // dropped when there is no room to answer.
  void send_rdma_error(MsgBuf* rep, uint32_t xid, bool vers);
  // Decodes the RPC call header (inline, or the pulled RDMA_NOMSG message),
  // finds the handler and asks its Placer. False: answered already (garbage,
  // no such procedure...) or refused.
  bool decode_rpc(SrvCall* sc);
  // A decoded RPC call header to its handler and procedure counters (or to
  // the engine's own answer), and its read chunks' positions and placement
  // (msg: the RPC message, its header included).
  void route(SrvCall* sc, const wire::RpcCall& rc, std::span<const uint8_t> msg);
  // route()'s read chunks and Placer (out of line: a call with neither then
  // saves no registers for them).
  [[gnu::noinline]] void route_chunks(SrvCall* sc, std::span<const uint8_t> msg, size_t hdr);
  // What the call needs from the pools, all or nothing (server_recv.cc).
  // turn: the memory queue chose it; otherwise it just arrived.
  bool take_memory(SrvCall* sc, bool turn);
  void drop_memory(SrvCall* sc);
  // Their bulk-pool parts (read chunks, write-chunk results, reply
  // staging), within what its peer's share allows (bulk_share.h).
  bool take_pool_memory(SrvCall* sc, bool turn);
  void drop_pool_memory(SrvCall* sc);
  // Posts the RDMA READs of the read chunks still to pull (server_rw.cc):
  // the position-zero chunk alone while an RDMA_NOMSG message is unread.
  enum class Pull : uint8_t { kPosted, kNothing, kNoRoom };
  Pull post_reads(SrvCall* sc);
  // Starts pulling (or waits for room, or goes on when there is nothing).
  void pull(SrvCall* sc);
  // What follows a completed pull: decode an RDMA_NOMSG message and pull
  // the rest, or run the handler.
  void after_pull(SrvCall* sc);
  // Builds the reply's chain (WRITEs into write and reply chunks, then the
  // Send) from what reply() recorded. Inline: most replies WRITE nothing,
  // and their chain is the Send alone; the WRITEs are out of line
  // (server_rw.cc).
  void build_reply_chain(SrvCall* sc, WrChain& chain) {
    chain.clear();
    if (sc->nbulk > 0 || sc->long_len > 0) add_reply_writes(sc, chain);
    add_reply_send(sc, chain);
  }
  [[gnu::noinline]] void add_reply_writes(SrvCall* sc, WrChain& chain);
  // The reply's Send, the chain's last WR: a Send With Invalidate when the
  // call carried one rkey and both ends agreed (RFC 8797).
  void add_reply_send(const SrvCall* sc, WrChain& chain) {
    rdma::SendWr& s = chain.add_one_sge(rdma::WrOpcode::kSend, sc->sendbuf->data, sc->msg_len, pd_ctx->arena_lkey());
    if (sc->inv_rkey != 0 && !sc->error_only) {
      s.opcode = rdma::WrOpcode::kSendWithInv;
      s.invalidate_rkey = sc->inv_rkey;
    }
  }
  // The machine's steps (server_call_machine.cc): take the memory of a
  // call waiting for it and go on; run its handler (or the engine's own
  // answer); post its encoded reply if the send queue has room (false: no
  // room, nothing changed).
  void start(SrvCall* sc, bool turn);
  // Out of line: inlined into start(), it made every call save six
  // registers and a frame for cases an inline call never takes.
  [[gnu::noinline]] void start_general(SrvCall* sc, bool turn);
  void dispatch(SrvCall* sc);
  void answer_now(SrvCall* sc, int accept, uint32_t low, uint32_t high);
  bool send_reply(SrvCall* sc);
  // The reply's chain, built into the engine's scratch chain: whether the
  // send queue has room for it (server_call_machine.cc), and its post
  // (server_reply.cc).
  bool reply_fits(SrvCall* sc);
  void post_reply(SrvCall* sc);
  // A sampled call's stamps into the engine's CallTrace (out of line: rare).
  [[gnu::cold, gnu::noinline]] void trace_call(const SrvCall* sc, uint64_t now);
  // The Send of an RDMA_ERROR answer (send_rdma_error made the room sure).
  void post_error_answer(SrvCall* sc);
  // reply() of an inline message with no write chunk and no bulk data;
  // false, having changed nothing, when it does not fit inline.
  bool reply_inline(SrvCall* sc, std::span<const uint8_t> results, int accept);
  // What every reply ends with once its message is built: the receive
  // buffer back, the credit answered, the counters, the call moved on
  // (bulk_bytes: written into write chunks; failed: not SUCCESS).
  void replied(SrvCall* sc, uint64_t bulk_bytes, bool failed);
  // The grant a reply to sc carries (the receive queue grown first when the
  // client asks for more).
  uint32_t grant_for_reply(const SrvCall* sc);
  void free_call(SrvCall* sc);
  // Posts the queue's waiting receive buffers now when fewer are posted
  // than the credits granted on it allow clients to send (server_reply.cc).
  void cover_grants();
  // Calls received while no server call object was free: served as they
  // free up. (RingFifo: no memory until something waits, as on most
  // connections nothing ever does.)
  RingFifo<MsgBuf*> deferred;
  // Replies waiting for send-queue room, in order.
  RingFifo<SrvCall*> queued;
  // Calls whose RDMA READs wait for send-queue room, in order.
  RingFifo<SrvCall*> pulls;
};

}  // namespace tern::rpc
