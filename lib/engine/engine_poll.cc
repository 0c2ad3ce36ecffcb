// The engine's datapath dispatch: poll() takes completions and hands each to
// its connection and object in O(1) (the wr_id names the connection's slot
// and the chain's send context; a receive's names its buffer, and its QP
// number its connection), serves calls waiting for memory (each peer's
// fair share, bulk_share.h), drops connections whose peer does not complete
// a pull or a push in time (rw_deadline.h), services
// connections with work waiting for resources, posts receive buffers back in
// batches, and reclaims dead connections.
#include <algorithm>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_impl.h"

namespace tern::rpc {

using namespace tern::rdma;

void EngineImpl::dispatch_send(DeviceCtx*, const Wc& wc) {
  const WrKind kind = wr_id_kind(wc.wr_id);
  const uint32_t s = wr_id_slot(wc.wr_id);
  ConnBase* c = s < conns.size() ? conns[s].get() : nullptr;
  if (c == nullptr) return;  // a connection already reclaimed: nothing of ours is waiting for it
  switch (kind) {
    case WrKind::kChain:
      c->on_send_completion(wc);
      break;
    case WrKind::kDrain:
      c->sq_drained = true;
      c->want_service();
      break;
    case WrKind::kNone:
    case WrKind::kRecv:
      // A failed WR a driver reported without its wr_id (drivers report
      // unsignaled failures with what they have): its QP is in error and
      // the drain marker will follow.
      break;
  }
}

namespace {

// A receive completion to its connection: what dispatch_recv() does, inlined
// into poll()'s loop (a call per receive was ~15 instructions of frame).
[[gnu::always_inline]] inline void take_receive(EngineImpl& e, const Wc& wc, ConnBase* c) {
  const WrKind kind = wr_id_kind(wc.wr_id);
  if (kind == WrKind::kDrain) {
    const uint32_t s = wr_id_slot(wc.wr_id);
    if (ConnBase* c = s < e.conns.size() ? e.conns[s].get() : nullptr) {
      c->rq_drained = true;
      c->want_service();
    }
    return;
  }
  MsgBuf* buf = kind == WrKind::kRecv ? e.recv_bufs->at(wr_id_value(wc.wr_id)) : nullptr;
  if (buf == nullptr || buf->where != MsgBuf::Where::kPosted) return;  // not a receive of ours
  RecvQueue* q = buf->queue < e.queues.size() ? e.queues[buf->queue] : nullptr;
  TERN_CHECK(q != nullptr, "receive completion for buffer %u of a queue that is gone", buf->index);
  q->completed(buf);
  if (c == nullptr || c->rq != q) {
    // A receive for a QP that is gone (a flush racing its teardown): the
    // buffer simply goes back.
    q->give_back(buf);
    if (q->shared()) e.queue_needs_post(q);
    return;
  }
  c->on_receive(buf, wc);
}

}  // namespace

void EngineImpl::dispatch_recv(DeviceCtx*, const Wc& wc, ConnBase* c) {
  // Outside poll()'s batches (a reclaimed QP's last receives): a connection
  // whose peer has calls waiting must not overtake them.
  if (TERN_UNLIKELY(!service.empty())) {
    hold_or_take(wc, c, 0);
    return;
  }
  take_receive(*this, wc, c);
}

void EngineImpl::hold_or_take(const Wc& wc, ConnBase* c, int pos) {
  // Only a call on a ready server connection waits for its turn; anything
  // else (a reply, a flush, a drain marker, a first message that
  // establishes its connection) is served now, as it always was.
  if (c != nullptr && c->svc_peer != nullptr && c->phase() == ConnBase::State::kReady &&
      wc.status == WcStatus::kSuccess && wr_id_kind(wc.wr_id) == WrKind::kRecv) {
    MsgBuf* buf = recv_bufs->at(wr_id_value(wc.wr_id));
    if (buf != nullptr && buf->where == MsgBuf::Where::kPosted && buf->queue < queues.size() &&
        queues[buf->queue] == c->rq && service.hold(c->svc_peer, buf->index, wc, c)) {
      // Off the device's count now: the queue's posting and the credits
      // it covers see the buffer as taken, as it is.
      c->rq->completed(buf);
      // Its turn is served from the service list (serve_connections), so
      // that a pass without held calls pays no test of its own for them.
      c->want_service();
      return;
    }
  }
  rx_pos = pos;
  take_receive(*this, wc, c);
}

int EngineImpl::serve_held() {
  const uint32_t n =
      service.plan(alone_since, alone_since && served_alone != nullptr ? served_alone->svc_peer : nullptr);
  alone_since = false;
  const uint32_t* order = service.order();
  // The turn is a batch like poll()'s: a reply need not be signaled while
  // its connection has another call later in this turn.
  ++rx_batch;
  for (uint32_t i = 0; i < n; ++i) {
    ConnBase* c = service.at(order[i]).conn;
    c->rx_batch = rx_batch;
    c->rx_last = static_cast<int>(i);
  }
  for (uint32_t i = 0; i < n; ++i) {
    const PeerService::Held& h = service.at(order[i]);
    rx_pos = static_cast<int>(i);
    h.conn->on_receive(recv_bufs->at(order[i]), h.wc);
  }
  ++rx_batch;
  // What is still held is work for the next pass: no sleep before it.
  return static_cast<int>(n) + (service.empty() ? 0 : 1);
}

void ConnCore::release_held(const ConnBase* c) {
  const uint32_t n = service.release(c);
  const uint32_t* order = service.order();
  ++rx_batch;  // none of them is "in hand" for another
  for (uint32_t i = 0; i < n; ++i) {
    const PeerService::Held& h = service.at(order[i]);
    h.conn->on_receive(recv_bufs->at(order[i]), h.wc);
  }
}

void ConnCore::wait_for_memory(SrvCall* sc) {
  if (sc->waiting) return;
  sc->waiting = true;
  shares->enqueue(static_cast<ServerConn*>(sc->conn)->share, sc);
  ++memory_waiters;
  engine_stats.waiting_for_memory.add();
  engine_stats.memory_waits.add();
}

void ConnCore::stop_waiting(SrvCall* sc, bool served) {
  if (!sc->waiting) return;
  shares->dequeue(static_cast<ServerConn*>(sc->conn)->share, sc, served);
  --memory_waiters;
  sc->waiting = false;
  engine_stats.waiting_for_memory.sub();
}

bool EngineImpl::memory_moved() const {
  return bulk->generation() != wait_bulk_gen || send_bufs->out() < wait_send_free;
}

int EngineImpl::serve_memory_waiters() {
  // The queue chooses whose call goes next (each peer's fair share, deficit
  // round robin among peers); the call chosen is served first, so a large
  // call is never starved by small ones; and only when something came back
  // since the call chosen last failed.
  TERN_ASSERT(memory_waiters == shares->waiters());
  int n = 0;
  while (shares->any_waiting() && memory_moved()) {
    SrvCall* sc = shares->pick()->waiting.front();
    static_cast<ServerConn*>(sc->conn)->process(sc, SrvEvent::kMemory);
    if (sc->waiting) {
      wait_bulk_gen = bulk->generation();
      wait_send_free = send_bufs->out();
      break;
    }
    ++n;
  }
  return n;
}

int EngineImpl::poll() {
  int work = 0;
  tick_fresh = false;
  if (TERN_UNLIKELY(waiting.armed) && !waiting.rechecking) work += finish_wait();
  Wc wc[32];
  for (auto& dcp : devices) {
    DeviceCtx* dc = dcp.get();
    // Send completions first: they free the calls and requests that new
    // receives will need.
    int n = dc->scq->poll(wc, 32);
    for (int i = 0; i < n; ++i) dispatch_send(dc, wc[i]);
    work += n;
    n = dc->rcq->poll(wc, 32);
    // Never negative (Cq::poll), but the compiler cannot know: tested as
    // <= 0, not == 0, it sees n >= 2 below and that owner[] is all set.
    if (n <= 0) continue;
    work += n;
    if (n == 1) {
      // A batch of one: no other call of its connection in hand. Behind
      // calls already waiting for their turn, it waits for its own.
      if (TERN_UNLIKELY(!service.empty())) {
        ++rx_batch;
        hold_or_take(wc[0], dc->conn_of(wc[0].qp_num), 0);
      } else {
        rx_pos = 0;
        ConnBase* c = dc->conn_of(wc[0].qp_num);
        served_alone = c, alone_since = true;
        take_receive(*this, wc[0], c);
      }
      ++rx_batch;  // nothing matches it outside the batch
      continue;
    }
    // With more than one receive, each one's connection and where each
    // connection's last receive of the batch is, first: a reply need not be
    // signaled while its connection has another call in hand (one signal
    // per batch rather than one per reply). And whether they all belong to
    // one peer: then (with nothing waiting) they are served in order now.
    ConnBase* owner[32];
    ++rx_batch;
    const ServiceQueue* peer0 = nullptr;
    bool mixed = !service.empty();
    for (int i = 0; i < n; ++i)
      if ((owner[i] = dc->conn_of(wc[i].qp_num)) != nullptr) {
        owner[i]->rx_batch = rx_batch, owner[i]->rx_last = i;
        if (owner[i]->svc_peer != peer0) mixed |= i != 0, peer0 = owner[i]->svc_peer;
      }
    if (TERN_UNLIKELY(mixed)) {
      // Several peers' calls (or calls behind others waiting): each waits
      // in its peer's queue for its turn (serve_held()).
      for (int i = 0; i < n; ++i) hold_or_take(wc[i], owner[i], i);
    } else {
      served_alone = owner[0], alone_since = true;
      for (int i = 0; i < n; ++i) {
        rx_pos = i;
        take_receive(*this, wc[i], owner[i]);
      }
    }
    ++rx_batch;  // nothing matches it outside the batch
  }
  if (memory_waiters != 0) work += serve_memory_waiters();
  if (!service_list.empty()) work += serve_connections();
  // The host's own completions, after this pass's calls reached their
  // handlers: what they submitted goes out in one batch.
  // Not in the engine's own shutdown: a host destroys what it polls before
  // the engine (its calls are answered by then).
  // One that found work has likely had its eventfd signalled for it:
  // finish_wait() drains that one too, or it would end the next sleep.
  if (!shutting_down) {
    for (size_t i = 0; i < pollers.size(); ++i)
      if (const int w = pollers[i].fn(pollers[i].ctx); w > 0) {
        work += w;
        if (i < 64) waiting.pollers_worked |= (uint64_t{1} << i) & ~waiting.pollers_drained;
      }
    waiting.pollers_drained = 0;
  }
  // Receive buffers back to the device: one post per queue per pass at
  // most, and none while what a queue has waiting is less than a batch and
  // covered by its free credits (RecvQueue::may_defer).
  if (TERN_UNLIKELY(waiting.armed)) {
    post_receives(false);
  } else if (posts_due) {
    // The common case at low load, one queue whose few buffers wait for a
    // batch, tested here: post_receives() would keep it listed and post
    // nothing, for ~25 instructions of frame and loop per RPC at depth 1.
    RecvQueue* q = to_post.size() == 1 ? to_post[0] : nullptr;
    if (q != nullptr && q->pending() != 0 && q->may_defer()) posts_due = false;
    else post_receives(false);
  }
  // Connection events are the control path and cost system calls (pmd/shm
  // polls its sockets), so they are checked by time, not per pass: once a
  // millisecond is prompt for connects and disconnects and free for the
  // datapath. (Checking on every idle pass cost ~20 system calls per RPC.)
  // The clock itself only every kClockPasses passes (or when a connection
  // just failed): a busy-polling pass takes well under a microsecond, so the
  // millisecond tick is late by at most a few passes.
  if (cm_due || ++clock_skip >= kClockPasses) work += run_timers();
  ++polls;
  // Another thread wants a stats snapshot (telemetry): one relaxed load per pass.
  if (TERN_UNLIKELY(snapshot_wanted.load(std::memory_order_relaxed))) publish_snapshot();
  return work;
}

void EngineImpl::post_receives(bool all) {
  // Not before a sleep (wait mode arms first): a queue left waiting then
  // would wait for the next message, which its own buffers may be owed to.
  all |= waiting.armed;
  posts_due = false;
  size_t kept = 0;
  for (RecvQueue* q : to_post) {
    if (q == nullptr) continue;
    if (!all && q->pending() != 0 && q->may_defer()) {
      to_post[kept++] = q;
      continue;
    }
    q->in_post_list = false;
    q->post(&engine_stats.recvs_posted, &engine_stats.recv_batches);
  }
  to_post.resize(kept);
}

int EngineImpl::serve_connections() {
  // Connections with work that waited for resources, each once per pass
  // (those that ask again during the walk wait for the next pass).
  int work = 0;
  // Calls of several peers: this pass's turn of each (peer_service.h).
  if (!service.empty()) work += serve_held();
  // This pass's connections, taken whole: one that asks again is put on
  // the engine's list, for the next pass; one still to be served this pass
  // is on this one, so asking again changes nothing.
  ServiceList pass;
  pass.swap(service_list);
  while (ConnBase* c = pass.pop_front()) {
    bool more = false;
    work += c->service(&more);
    if (c->reclaimable()) {
      // Reclaimed: its QP (and any receive queue of its own) go now. It may
      // have asked for service again during this pass: off the list first.
      if (ServiceList::linked(c)) service_list.remove(c);
      // A QP on the shared receive queue: its last receive completions are
      // in the receive CQ by now (the drain rule, rdmadev.h), and a device
      // may drop what a destroyed QP left there (mlx5), losing those
      // buffers to the queue for good. Take them first.
      if (c->own_rq == nullptr && c->dc->srq) {
        Wc left[32];
        for (int n; (n = c->dc->rcq->poll(left, 32)) > 0;)
          for (int i = 0; i < n; ++i) dispatch_recv(c->dc, left[i]);
      }
      // Nothing of it may wait for a turn once its slot (and QP number)
      // can be given to another (its teardown released them already).
      if (!service.empty()) release_held(c);
      if (served_alone == c) served_alone = nullptr;
      const uint32_t s = c->slot;
      if (ClientConn* k = c->as_client(); k != nullptr) {
        auto it = std::find(clients.begin(), clients.end(), k);
        if (it != clients.end()) {
          *it = clients.back();
          clients.pop_back();
        }
      }
      conns[s].reset();
      free_slots.push_back(s);
      --nconns;
    } else if (more) {
      c->want_service();
    }
  }
  // Calls still held: the next pass serves their turn.
  if (!service.empty()) service.any_conn()->want_service();
  return work;
}

int EngineImpl::run_timers() {
  int work = 0;
  clock_skip = 0;
  const uint64_t now = now_tick = now_ticks();
  if (cm_due || now - last_cm_tick >= cm_interval_ticks) {
    cm_due = false;
    last_cm_tick = now;
    // Receives kept for a batch go back at the latest a tick later: a
    // quiet queue's last few are not held for a batch that may not come.
    if (!to_post.empty()) post_receives(true);
    for (auto& dcp : devices) work += poll_cm(dcp.get());
    // Client timers: deadlines, keepalive, connect timeouts, reconnects;
    // only the connections with something due (client_timers.h). Taken
    // first: a callback may make a new connection or bring another's time
    // earlier, which files it for the next tick. Each is filed again under
    // what its tick left to do (ClientConn::refile_at).
    if (timers.first() != 0 && timers.first() <= now) {
      timers_due.clear();
      timers.take_due(now, &timers_due);
      engine_stats.timer_visits.add(timers_due.size());
      for (size_t i = 0; i < timers_due.size(); ++i) {
        ClientConn* c = timers_due[i];
        work += c->tick(now);
        timers.file(c, c->refile_at(now));
      }
    }
    if (!rw_due.empty()) work += expire_rw(now);
  }
  return work;
}

int EngineImpl::expire_rw(uint64_t now) {
  int work = 0;
  while (SrvCall* sc = rw_due.first()) {
    if (rw_timeout_ticks == 0 || now - sc->rw_since < rw_timeout_ticks) break;
    const RwWait what = sc->rw_what;
    rw_due.disarm(sc);
    // Its connection may already be going (another of its calls expired
    // first): the drain frees the call then.
    auto* c = static_cast<ServerConn*>(sc->conn);
    if (c->phase() == ConnBase::State::kReady) {
      c->rw_timed_out(sc, what, now - sc->rw_since);
      ++work;
    }
  }
  return work;
}

uint64_t EngineImpl::next_timer_tick() const {
  uint64_t at = next_client_tick();
  if (rw_timeout_ticks != 0 && !rw_due.empty()) {
    // The tick after the first deadline: run_timers() checks it then.
    const uint64_t due = rw_due.first()->rw_since + rw_timeout_ticks + cm_interval_ticks;
    if (at == 0 || due < at) at = due;
  }
  return at;
}

uint64_t EngineImpl::next_client_tick() const { return timers.first(); }

void EngineImpl::shutdown() {
  // Every call still outstanding completes exactly once, and only after its
  // registrations are fenced: disconnect every connection, let the QPs
  // drain (flush completions prove no WR of ours is left), then each
  // connection fails what did not finish. None reconnects.
  shutting_down = true;
  bool any = false;
  for (ClientConn* c : clients)
    if (c->phase() == ConnBase::State::kBackoff || c->phase() == ConnBase::State::kPortDown)
      c->give_up(make_error(Errc::kDisconnected, "the engine is shutting down"));
  for (auto& c : conns) {
    if (!c) continue;
    if (c->qp_live()) c->on_disconnected(make_error(Errc::kDisconnected, "the engine is shutting down"));
    any |= c->draining();
  }
  // Calls still waiting for their turn: their connections are lost now, so
  // their buffers simply go back.
  if (!service.empty()) release_held(nullptr);
  if (!any) return;
  const uint64_t deadline = now_ticks() + ticks_from_ns(2'000'000'000);
  for (;;) {
    (void)poll();
    bool draining = false;
    for (auto& c : conns) draining |= c && c->draining();
    if (!draining) break;
    if (now_ticks() > deadline) {
      // A device that never flushes: give up waiting. Destroying the QPs
      // below ends every registration with them.
      TERN_LOG(kWarn, "engine", "shutdown: connections did not drain within 2 s; tearing them down");
      for (auto& c : conns)
        if (c && c->draining()) {
          c->sq_drained = c->rq_drained = true;
          c->finish_teardown();
        }
      break;
    }
  }
}

}  // namespace tern::rpc
