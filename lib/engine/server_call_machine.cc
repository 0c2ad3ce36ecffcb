// The server call machine's events (server_call_machine.h has the states
// and the table): ServerConn::process, and what a transition does --
// taking the call's memory, starting its pull, running its handler,
// posting its reply, freeing it. Every state change here goes through
// enter(); the receive, read/write and reply files only raise events.
#include <algorithm>
#include <iterator>

#include "base/clock.h"
#include "base/reclaim_hook.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/server_conn.h"
#include "engine/server_call_machine.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

const char* srv_state_name(SrvState s) {
  switch (s) {
    case SrvState::kFree: return "free";
    case SrvState::kWaitMemory: return "wait-memory";
    case SrvState::kPulling: return "pulling";
    case SrvState::kInHandler: return "in-handler";
    case SrvState::kReplyQueued: return "reply-queued";
    case SrvState::kSent: return "sent";
    case SrvState::kOrphaned: return "orphaned";
  }
  return "?";
}

void srv_transition_refused(const SrvCall* sc, SrvState to) {
  TERN_CHECK(srv_may_enter(sc->state(), to), "server call %u (xid %u): %s -> %s is not a transition of the machine",
             sc->index, sc->xid(), srv_state_name(sc->state()), srv_state_name(to));
  __builtin_unreachable();  // only called for a refused transition
}

// A send buffer for the reply, and the bulk pool's part when the call has
// chunks (an inline call needs nothing else). Inline: the common call's
// path is a test and a buffer.
inline bool ServerConn::take_memory(SrvCall* sc, bool turn) {
  if (sc->sendbuf == nullptr && (sc->sendbuf = core->send_bufs->get()) == nullptr) {
    sc->pool_need = 0;  // queued for a send buffer; what it needs of the pool is measured on its turn
    return false;
  }
  const ChunkLists& ch = sc->chunks;
  return (ch.nreads == 0 && ch.nwrites == 0 && !ch.has_reply) || take_pool_memory(sc, turn);
}

inline void ServerConn::drop_memory(SrvCall* sc) {
  if (sc->sendbuf != nullptr) core->send_bufs->put(sc->sendbuf);
  sc->sendbuf = nullptr;
  if (sc->pool_memory) drop_pool_memory(sc);  // not the common case: an inline call held only its send buffer
}

// A call waiting for memory tries to take it (turn: the memory queue chose
// it; otherwise it just arrived): it waits on, or pulls, or is answered.
inline void ServerConn::start(SrvCall* sc, bool turn) {
  // The common call -- inline, its send buffer in hand, waiting for nothing,
  // for its handler to answer -- takes its send buffer and goes straight to
  // its handler, as the general case would. The general case is out of
  // line: inlined here it made every call save six registers and a frame.
  // (~25 instructions per RPC fewer; conn_fast_path_test.cc compares the two.)
  const ChunkLists& ch = sc->chunks;
  if (TERN_LIKELY(wire::fast_paths() && ch.nreads == 0 && ch.nwrites == 0 && !ch.has_reply && !sc->waiting &&
                  sc->answer < 0)) {
    if (sc->sendbuf != nullptr || (sc->sendbuf = core->send_bufs->get()) != nullptr) {
      dispatch(sc);
      return;
    }
    sc->pool_need = 0;  // as take_memory(): queued for a send buffer
    core->wait_for_memory(sc);
    return;
  }
  start_general(sc, turn);
}

// start()'s every other case: a call with chunks, one the memory queue
// chose, one the engine answers itself. The same steps as the common case
// above, for any call.
void ServerConn::start_general(SrvCall* sc, bool turn) {
  if (!take_memory(sc, turn)) {
    core->wait_for_memory(sc);
    return;
  }
  if (sc->waiting) core->stop_waiting(sc, true);
  if (sc->answer >= 0) {
    answer_now(sc, sc->answer, sc->answer_low, sc->answer_high);
    return;
  }
  if (sc->chunks.nreads > 0) {
    rpc::enter(sc, SrvState::kPulling);
    pull(sc);
    return;
  }
  dispatch(sc);
}

// The host's own memory a call used -- the buffers its handler's Placer
// gave for the read chunks, the bulk it pushed with its reply from memory
// of its own -- is the host's again at these points: a Placer's once the
// handler has answered (the READs into it are done before it runs), the
// pushed bulk once the reply's WRITEs and Send are done (the call is freed).
// Nothing tells the host so (the API has no such callback); the reclaim
// check (base/reclaim_hook.h) is told instead: a WR or an rkey still
// reaching the memory then is an early release. TERN_DEBUG only.
// A Placer's buffer is reported once: after the handler answered, the host
// may give it to another call (a retransmission of this one) while this
// call still waits for its reply's completion.
inline void note_host_memory([[maybe_unused]] SrvCall* sc, [[maybe_unused]] bool pushed) {
#if defined(TERN_DEBUG) && TERN_DEBUG
  if (!sc->placer_noted)
    for (int c = 0; c < sc->chunks.nreads; ++c)
      if (sc->read_dst[c] != nullptr && !sc->read_pooled[c])
        note_reclaimed(sc->read_dst[c], sc->chunks.reads[c].length(), "placer's");
  // Once: at the call's end (pushed), ready for the slot's next call.
  sc->placer_noted = !pushed;
  if (!pushed) return;
  for (int c = 0; c < sc->nbulk; ++c) {
    const uint8_t* b = sc->bulk_src[c];
    if (b == nullptr || sc->bulk_len[c] == 0) continue;
    // The engine's own result buffers go back through the pool, which reports them.
    if (std::find(std::begin(sc->write_buf), std::end(sc->write_buf), b) != std::end(sc->write_buf)) continue;
    note_reclaimed(b, sc->bulk_len[c], "host's reply bulk");
  }
#endif
}

// The reply's chain, built into the engine's scratch chain, and whether
// the send queue has room for it. Inline here, where its one caller is: out
// of line, its frame was ~10 instructions per RPC.
inline bool ServerConn::reply_fits(SrvCall* sc) {
  WrChain& chain = core->chain;
  build_reply_chain(sc, chain);
  return room(chain.size());
}

// An encoded reply's chain is posted when the send queue has room for it.
// False: no room, nothing changed.
inline bool ServerConn::send_reply(SrvCall* sc) {
  if (!reply_fits(sc)) return false;
  rpc::enter(sc, SrvState::kSent);  // before the post: a refusal fails the connection at once
  post_reply(sc);
  return true;
}

void ServerConn::call_received(SrvCall* sc) {
  // The engine holds the handler's side until the handler runs.
  sc->handler_owner = true;
  rpc::enter(sc, SrvState::kWaitMemory);
  start(sc, false);
}

void ServerConn::call_replied(SrvCall* sc) {
  // reply() encoded it: post it, or queue it for room.
  TERN_ASSERT(sc->state() == SrvState::kInHandler);
  sc->handler_owner = false;
  note_host_memory(sc, false);
  if (!send_reply(sc)) {
    rpc::enter(sc, SrvState::kReplyQueued);
    queued.push_back(sc);
    want_service();
  }
}

void ServerConn::send_released(SrvCall* sc) {
  // The reply's WRITEs and Send are done: its buffers may be reused.
  sc->send_owner = false;
  core->rw_due.disarm(sc);
  if (sc->state() == SrvState::kSent) free_call(sc);
}

void ServerConn::process(SrvCall* sc, SrvEvent ev, const Wc* wc) {
  switch (ev) {
    case SrvEvent::kReceived:
      call_received(sc);
      return;
    case SrvEvent::kMemory:
      if (sc->state() == SrvState::kPulling && sc->pull_waiting) {
        // Its READs waited for send-queue room.
        sc->pull_waiting = false;
        pull(sc);
        return;
      }
      TERN_ASSERT(sc->state() == SrvState::kWaitMemory);
      start(sc, true);
      return;
    case SrvEvent::kPulled: {
      TERN_ASSERT(sc->state() == SrvState::kPulling);
      core->rw_due.disarm(sc);
      if (wc->status != WcStatus::kSuccess) {
        // The pull failed (the client's rkey was refused, or the QP died):
        // the connection is gone; the drain frees the call.
        if (phase() == State::kReady) {
          Status why = make_error(Errc::kRemoteError, "RDMA READ of its read chunk failed: %s",
                                  wc_status_name(wc->status));
          // The client named memory it does not let us read.
          if (wc->status == WcStatus::kRemAccessErr || wc->status == WcStatus::kRemInvReqErr)
            protocol_error(std::move(why));
          else
            on_disconnected(std::move(why));
        }
        return;
      }
      // The READs completed, but the connection was lost meanwhile (or the
      // engine is being destroyed, whose shutdown drains by polling): no
      // reply could reach the client, which sends the call again on its
      // next connection, and a handler must not run from the engine's
      // destructor, after the application may have freed what it uses (a
      // DuplicateCache goes before its engine). The drain frees the call.
      if (phase() != State::kReady) return;
      after_pull(sc);
      return;
    }
    case SrvEvent::kReplied:
      call_replied(sc);
      return;
    case SrvEvent::kErrorAnswer:
      // send_rdma_error made sure of the room: sent at once, no handler.
      rpc::enter(sc, SrvState::kSent);
      post_error_answer(sc);
      return;
    case SrvEvent::kDropped:
      sc->handler_owner = false;
      free_call(sc);
      return;
    case SrvEvent::kRoom:
      TERN_ASSERT(sc->state() == SrvState::kReplyQueued);
      (void)send_reply(sc);
      return;
    case SrvEvent::kSendReleased:
      send_released(sc);
      return;
    case SrvEvent::kConnLost:
      switch (sc->state()) {
        case SrvState::kWaitMemory:  // never started: nothing posted
        case SrvState::kReplyQueued:  // never posted
          sc->handler_owner = false;
          free_call(sc);
          return;
        case SrvState::kInHandler:
          rpc::enter(sc, SrvState::kOrphaned);  // its reply is refused and frees it
          return;
        default:
          return;  // pulling or sent: WRs in flight, the drain decides
      }
    case SrvEvent::kDrained:
      if (sc->state() == SrvState::kPulling) {
        sc->handler_owner = false;
        free_call(sc);
      } else if (sc->state() == SrvState::kSent && !sc->send_owner) {
        free_call(sc);  // its post was refused: no completion will release it
      }
      return;
  }
}

void ServerConn::pull(SrvCall* sc) {
  switch (post_reads(sc)) {
    case Pull::kPosted:
      return;
    case Pull::kNothing:
      after_pull(sc);
      return;
    case Pull::kNoRoom:
      sc->pull_waiting = true;
      pulls.push_back(sc);
      want_service();
      return;
  }
}

void ServerConn::after_pull(SrvCall* sc) {
  if (TERN_UNLIKELY(breakdown != nullptr)) sc->ts_pulled = now_ticks();
  if (sc->nomsg && !sc->msg_pulled) {
    // The RDMA_NOMSG message is here: decode it, let the handler place the
    // other chunks, and pull them.
    sc->msg_pulled = true;
    counters.nomsg.add();
    (void)decode_rpc(sc);
    if (sc->answer >= 0) {
      answer_now(sc, sc->answer, sc->answer_low, sc->answer_high);
      return;
    }
    if (sc->chunks.nreads > 1) {
      pull(sc);
      return;
    }
  }
  dispatch(sc);
}

// Inline (into start()'s common case, start_general() and after_pull()):
// a call of its own was ~12 instructions per RPC of frame.
inline void ServerConn::dispatch(SrvCall* sc) {
  uint64_t bulk = 0;
  if (sc->chunks.nreads > 0) {
    // The handler sees each read chunk's data where it was pulled to. (Out
    // of line: an inline call then saves no registers for these loops.)
    bulk = [](ServerConn* conn, SrvCall* sc) __attribute__((noinline)) {
      uint64_t bytes = 0;
      int k = 0;
      for (int c = 0; c < sc->chunks.nreads; ++c) {
        if (sc->chunks.reads[c].position == 0) continue;
        sc->data_[k].data = std::span<const uint8_t>(sc->read_dst[c], sc->chunks.reads[c].length());
        ++k;
      }
      for (int c = 0; c < sc->chunks.nreads; ++c)
        if (sc->chunks.reads[c].position != 0) bytes += sc->chunks.reads[c].length();
      if (bytes > 0) {
        conn->counters.read_chunks.add();
        conn->counters.read_chunk_bytes.add(bytes);
      }
      return bytes;
    }(this, sc);
  }
  rpc::enter(sc, SrvState::kInHandler);
  sc->handler_owner = true;
  sc->proc_counters->ops.add();
  sc->proc_counters->bytes_received.add((sc->rep != nullptr ? sc->rep->len : 0) + bulk);
  if (TERN_UNLIKELY(breakdown != nullptr)) sc->ts_handler = now_ticks();
  sc->handler->h(sc->handler->ctx, sc);
}

void ServerConn::answer_now(SrvCall* sc, int accept, uint32_t low, uint32_t high) {
  rpc::enter(sc, SrvState::kInHandler);
  sc->handler_owner = true;
  sc->proc_counters->ops.add();
  sc->answer_low = low, sc->answer_high = high;
  (void)reply(sc, {}, {}, accept);
}

void ServerConn::free_call(SrvCall* sc) {
  TERN_ASSERT(!sc->handler_owner && !sc->send_owner);
  if (sc->waiting) core->stop_waiting(sc, false);
  core->rw_due.disarm(sc);
  note_host_memory(sc, true);
  drop_memory(sc);
  if (MsgBuf* rep = sc->rep) {
    sc->rep = nullptr;
    give_back(rep);
  }
  rpc::enter(sc, SrvState::kFree);
  // What handle_call() counts on finding in a free call (it writes the
  // rest itself), and no bulk of its reply (note_host_memory reads it for
  // a call dropped unanswered). Not reset: the chunk lists, which every
  // user of a free call writes first (the plain call clears them, the
  // decoders and send_rdma_error() set them); the arguments and the RPC
  // header, which only a handler reads, and a handler runs only for a
  // call handle_call() and route() set them for; the reply message's lengths, which every encoder sets before
  // anything reads them; the breakdown's stamps, read only on a connection
  // with a breakdown, whose calls handle_call() stamps afresh
  // (send_rdma_error()'s answers are never stamped).
  sc->conn = nullptr;
  sc->handler = nullptr;
  sc->proc_counters = nullptr;
  sc->ndata_ = 0;
  sc->pull_waiting = false;
  sc->answer = -1;
  sc->nbulk = 0;
  core->srv_calls.put(sc);
  --calls_held;
  if (phase() == State::kDead && calls_held == 0) want_service();  // to be reclaimed
}

}  // namespace tern::rpc
