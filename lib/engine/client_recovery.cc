// Client recovery, as xprtrdma does it (docs/engine.md, "Recovery"):
// deadlines and cancel, keepalive probes (RDMA connections have none of
// their own), and reconnecting after a loss -- backoff with a floor, a
// ceiling and jitter, a give-up deadline, RFC 8797 private data negotiated
// anew -- with the calls that were in flight sent again with their xids
// once every registration of the old connection is fenced (the drain, then
// the MRs destroyed: the kernel's xprtrdma commit "Properly recover FRWRs
// with in-flight FASTREG WRs"). The Connection object lives across it all.
#include <algorithm>
#include <random>

#include "base/clock.h"
#include "base/log.h"
#include "engine/client_conn.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

const char* conn_state_name(ConnState s) {
  switch (s) {
    case ConnState::kConnecting: return "connecting";
    case ConnState::kReady: return "ready";
    case ConnState::kReconnecting: return "reconnecting";
    case ConnState::kFailed: return "failed";
    case ConnState::kClosed: return "closed";
  }
  return "?";
}

void ClientConn::entered(State from) {
  // Up (again): on_up() tells the host, once the connection is ready for
  // what its callback may do (call(), close()).
  if (phase() == State::kReady) return;
  // Otherwise why it left kReady, or failed.
  if (const ConnState was = public_state(from); state() != was) tell_host(was, why);
}

void ClientConn::tell_host(ConnState from, const Status& reason) {
  // Not while the engine is being destroyed: what the callback's context
  // points at may be gone by then (calls still complete, they must).
  if (state_cb != nullptr && !core->shutting_down) state_cb(state_ctx, this, from, state(), reason);
}

Status ClientConn::setup_queues() {
  if (dc->pd_per_conn) {
    // Fast registrations are PD-wide on this device: a PD of our own keeps
    // this connection's rkeys useless to every other peer.
    auto p = core->control->make_pd_ctx(dc);
    if (!p) return p.status();
    own_pd = std::move(p).value();
    pd_ctx = own_pd.get();
  }
  return ConnBase::setup_queues();
}

void ClientConn::on_peer_pdata(std::span<const uint8_t> pdata) {
  wire::negotiate(pdata, core->opt.inline_send, core->opt.inline_recv, dc->offer_inv, false, &inline_send,
                  &inline_recv, &remote_inv);
}

void ClientConn::declare_dead(Status reason) {
  if (!qp_live()) return;
  core->engine_stats.declared_dead.add();
  TERN_LOG(kWarn, "engine", "conn %llu: connection to %s declared dead: %s", static_cast<unsigned long long>(id),
           peer_name().c_str(), reason.message().c_str());
  on_disconnected(std::move(reason));
}

void ClientConn::close() {
  if (user_closed) return;
  const ConnState was = state();
  user_closed = true;  // the host sees kClosed from now on, whatever the phase
  const Status closed = make_error(Errc::kDisconnected, "closed locally");
  switch (phase()) {
    case State::kBackoff:
    case State::kPortDown:
      // Between attempts: no QP to drain. What waits fails now (or, from
      // a callback inside settle_calls, when it finishes).
      if (!settling_) {
        raise(ConnEvent::kClosed);  // dead
        settle_calls();
      }
      break;
    case State::kReady:
    case State::kConnecting:
    case State::kReconnecting:
      (void)dc->dev->disconnect(qp.get());
      on_disconnected(closed);
      break;
    case State::kDrainingToReconnect:
      raise(ConnEvent::kClosed);  // draining: drains as before, and will not come back
      break;
    case State::kDraining:
    case State::kDead:
      break;
  }
  if (was != ConnState::kClosed) tell_host(was, closed);
  want_service();  // to be reclaimed
}

// ---------------------------------------------------------------- deadlines and cancel

void ClientConn::link_deadline(Request* r) {
  // Mostly one timeout per connection: a new deadline is the latest, so
  // the walk from the back stops at once. (Only filing walks; taking a
  // call off the list, wherever it is, is O(1).)
  Request* after = deadlines.back();
  while (after != nullptr && after->deadline > r->deadline) after = deadlines.prev(after);
  deadlines.insert_after(after, r);
  timer_due(r->deadline);
}

void ClientConn::file_timer(uint64_t at) { core->timers.due(this, at); }

int ClientConn::cancel(uint32_t xid) {
  Request* r = nullptr;
  if (uint32_t idx; xids.find(xid, &idx)) r = core->requests.at(idx);
  if (r == nullptr)
    for (Request* b = backlog.front(); b != nullptr && r == nullptr; b = backlog.next(b))
      if (b->xid == xid) r = b;
  if (r == nullptr)
    for (Request* a = in_flight.front(); a != nullptr && r == nullptr; a = in_flight.next(a))
      if (a->xid == xid && (a->state() == ReqState::kOrphaned || a->state() == ReqState::kSent)) r = a;
  if (r == nullptr || r->conn != this || r->probe || r->expire != CallStatus::kOk ||
      (r->state() != ReqState::kBacklog && r->state() != ReqState::kSent && r->state() != ReqState::kOrphaned))
    return ENOENT;
  core->engine_stats.cancels.add();
  r->expire = CallStatus::kCancelled;
  if (deadlines.linked(r)) deadlines.remove(r);
  // Completions come only from poll(): a call that can complete at once
  // does so from the next one (the deadline list, due now).
  r->deadline = now_ticks();
  link_deadline(r);
  want_service();
  return 0;
}

void ClientConn::on_up() {
  // Up, or up again (kReconnecting -> kReady): the outage is over.
  const bool again = lost_at != 0;
  lost_at = 0;
  backoff_ns = 0;
  connect_deadline = 0;
  t_last_recv = now_ticks();
  timer_due(refile_at(t_last_recv));  // keepalive from now on
  if (again) core->engine_stats.reconnects.add();
  if (dc->chunk_reg == ChunkReg::kRegCache)
    TERN_LOG(kWarn, "engine",
             "conn %llu: connection to %s registers chunks through the registration cache: the peer can reach "
             "those pages after the calls that offered them, until they are evicted (trusted peers only)",
             static_cast<unsigned long long>(id), peer_name().c_str());
  tell_host(again ? ConnState::kReconnecting : ConnState::kConnecting, Status::ok());
}

// ---------------------------------------------------------------- keepalive

void ClientConn::send_probe() {
  Request* r = core->requests.get();
  if (r == nullptr) return;
  Call c{last_prog, last_vers, 0};  // the RPC NULL procedure (RFC 5531)
  c.done = &ClientConn::probe_done;
  c.ctx = this;
  c.timeout_ns = uint64_t{core->opt.keepalive_timeout_ms} * 1'000'000;
  r->nreads = r->nwrites = 0;
  r->long_call = false;
  r->rpc_hdr = static_cast<uint32_t>(wire::call_rpc_header_len(c));
  r->rpc_len = r->rpc_hdr;
  probe_in_flight = true;
  core->engine_stats.keepalive_probes.add();
  admit(r, c, true);
}

void ClientConn::probe_done(void* ctx, const CallReply& rep) {
  auto* c = static_cast<ClientConn*>(ctx);
  c->probe_in_flight = false;
  c->timer_due(c->refile_at(now_ticks()));  // keepalive watches again
  // Any answer (PROG_UNAVAIL, PROC_UNAVAIL... included) proves the server
  // alive; silence past the probe's timeout proves the opposite.
  if (rep.status == CallStatus::kTimedOut && c->phase() == State::kReady) {
    c->core->engine_stats.keepalive_failures.add();
    c->declare_dead(make_error(Errc::kTimedOut, "keepalive: the server did not answer an RPC NULL call within %u ms",
                               c->core->opt.keepalive_timeout_ms));
  }
}

// ---------------------------------------------------------------- reconnecting

void ClientConn::schedule_reconnect() {
  // Drained: the old QP goes, with what was its alone; its slot, PD and
  // registrar stay for the next one.
  drop_qp();
  const uint64_t now = now_ticks();
  if (lost_at == 0) lost_at = now;
  const EngineOptions& o = core->opt;
  backoff_ns = backoff_ns == 0 ? uint64_t{o.reconnect_min_ms} * 1'000'000
                               : std::min<uint64_t>(backoff_ns * 2, uint64_t{o.reconnect_max_ms} * 1'000'000);
  // +-25% jitter, so that many clients of one server do not come back in step.
  // Drawn from the clock and the connection, with no state kept between
  // draws, so that a simulation in virtual time (pmd/sim) replays it.
  std::minstd_rand rng(static_cast<uint32_t>(monotonic_ns() ^ (id * 0x9E3779B97F4A7C15ull) >> 7));
  const uint64_t jitter = backoff_ns / 2 > 0 ? rng() % (backoff_ns / 2) : 0;
  next_attempt = now + ticks_from_ns(backoff_ns - backoff_ns / 4 + jitter);
  timer_due(next_attempt);
  TERN_LOG(kInfo, "engine", "conn %llu: reconnecting to %s in %llu ms (%u calls waiting)",
           static_cast<unsigned long long>(id), dc->spec.c_str(),
           static_cast<unsigned long long>(ns_from_ticks(next_attempt - now) / 1'000'000),
           static_cast<unsigned>(backlog.size()));
}

void ClientConn::give_up(Status reason) {
  why = std::move(reason);
  TERN_LOG(kWarn, "engine", "conn %llu: giving up on %s: %s", static_cast<unsigned long long>(id), dc->spec.c_str(),
           why.message().c_str());
  raise(ConnEvent::kGaveUp);
  settle_calls();  // no QP: everything waiting fails now
}

void ClientConn::reconnect_now() {
  core->engine_stats.reconnect_attempts.add();
  Status s = setup_queues();
  uint8_t pdata[64];
  size_t n = wire::encode_pdata(pdata, sizeof pdata, core->opt.inline_send, core->opt.inline_recv, dc->offer_inv);
  if (s) s = dc->dev->connect(qp.get(), std::span<const uint8_t>(pdata, n));
  if (!s) {
    TERN_LOG(kInfo, "engine", "conn %llu: reconnect attempt failed: %s", static_cast<unsigned long long>(id),
             s.to_string().c_str());
    why = s;
    if (qp) drop_qp();
    raise(ConnEvent::kAttemptFailed);
    schedule_reconnect();
    return;
  }
  raise(ConnEvent::kAttempt);
  connect_deadline = now_ticks() + ticks_from_ns(uint64_t{core->opt.connect_timeout_ms} * 1'000'000);
  timer_due(connect_deadline);
}

// ---------------------------------------------------------------- the tick

int ClientConn::tick(uint64_t now) {
  int work = 0;
  const EngineOptions& o = core->opt;
  // Deadlines, earliest first.
  while (!deadlines.empty() && deadlines.front()->deadline <= now) {
    Request* r = deadlines.pop_front();
    if (r->expire == CallStatus::kOk) r->expire = CallStatus::kTimedOut;
    process(r, ReqEvent::kExpire);
    ++work;
  }
  switch (phase()) {
    case State::kBackoff:
    case State::kPortDown:
      if (now < next_attempt) break;
      if (o.reconnect_give_up_ms != 0 &&
          ns_from_ticks(now - lost_at) >= static_cast<double>(o.reconnect_give_up_ms) * 1e6) {
        give_up(make_error(Errc::kTimedOut, "no connection for %u ms (EngineOptions::reconnect_give_up_ms): %s",
                           o.reconnect_give_up_ms, why.message().c_str()));
      } else if (!dc->dev->port_up()) {
        // The port is down: an attempt could only fail (and a connect
        // whose REQ left as the port went down wedges rxe's CM:
        // docs/verbs-driver.md). Not an attempt; the port is looked at
        // again every reconnect_min_ms, so the first attempt follows soon
        // after it is up (the device reads its events from poll()).
        if (phase() != State::kPortDown) {
          TERN_LOG(kInfo, "engine", "conn %llu: %s: the device's port is down; reconnecting when it is up",
                   static_cast<unsigned long long>(id), dc->spec.c_str());
          raise(ConnEvent::kPortDown);
        }
        next_attempt = now + ticks_from_ns(uint64_t{std::max(o.reconnect_min_ms, 1u)} * 1'000'000);
      } else {
        if (phase() == State::kPortDown) backoff_ns = 0;  // a new chance: start from the floor again
        reconnect_now();
      }
      ++work;
      break;
    case State::kConnecting:
    case State::kReconnecting:
      if (connect_deadline != 0 && now > connect_deadline) {
        connect_deadline = 0;
        on_disconnected(make_error(Errc::kTimedOut, "no answer to the connect within %u ms", o.connect_timeout_ms));
        ++work;
      }
      break;
    case State::kReady: {
      if (o.keepalive_ms == 0 || probe_in_flight) break;
      const double quiet_ms = ns_from_ticks(now - t_last_recv) / 1e6;
      if (credits.in_flight() > 0 && quiet_ms >= o.keepalive_ms) {
        if (credits.can_send() && last_prog != 0) {
          send_probe();
        } else if (quiet_ms >= static_cast<double>(o.keepalive_ms) + o.keepalive_timeout_ms) {
          // Every credit is taken by calls that get no answer: no probe can
          // go out, and the silence says enough.
          core->engine_stats.keepalive_failures.add();
          declare_dead(make_error(Errc::kTimedOut, "no reply for %.0f ms with %u calls outstanding", quiet_ms,
                                  credits.in_flight()));
        }
        ++work;
      } else if (credits.in_flight() == 0 && o.keepalive_idle_ms != 0 && last_prog != 0 &&
                 ns_from_ticks(now - t_last) / 1e6 >= o.keepalive_idle_ms) {
        send_probe();
        ++work;
      }
      break;
    }
    default:
      break;
  }
  return work;
}

uint64_t ClientConn::refile_at(uint64_t now) const {
  uint64_t at = next_tick();
  if (const uint64_t look = core->keepalive_look_ticks; phase() == State::kReady && look != 0) {
    // Rounded down to a quarter of the period: the connections filed for a
    // look come due together, so a host asleep in wait mode wakes for them
    // a few times a period, not once per connection.
    uint64_t by = now + look;
    if (look >= 4) by -= by % (look / 4);
    if (at == 0 || by < at) at = by;
  }
  return at;
}

uint64_t ClientConn::next_tick() const {
  uint64_t at = 0;
  auto earlier = [&](uint64_t t) {
    if (t != 0 && (at == 0 || t < at)) at = t;
  };
  if (!deadlines.empty()) earlier(deadlines.front()->deadline);
  const EngineOptions& o = core->opt;
  if (phase() == State::kBackoff || phase() == State::kPortDown) earlier(next_attempt);
  if (phase() == State::kConnecting || phase() == State::kReconnecting) earlier(connect_deadline);
  if (phase() == State::kReady && o.keepalive_ms != 0 && !probe_in_flight) {
    if (credits.in_flight() > 0) earlier(t_last_recv + ticks_from_ns(uint64_t{o.keepalive_ms} * 1'000'000));
    else if (o.keepalive_idle_ms != 0 && last_prog != 0)
      earlier(t_last + ticks_from_ns(uint64_t{o.keepalive_idle_ms} * 1'000'000));
  }
  return at;
}

}  // namespace tern::rpc
