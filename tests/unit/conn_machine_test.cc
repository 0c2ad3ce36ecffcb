// The connection machine (engine/conn_machine.h) driven through a real
// ClientConn and ServerConn over the stub core, QP and device
// (conn_stubs.h): every transition each role's table allows is taken by
// the connection code itself -- connect, establish, loss, the drain, the
// backoff, a port down and up, reconnecting, giving up, close() in every
// phase, a refused connect -- and a transition the table does not allow is
// caught (the TERN_CHECK report, death tests). Each scenario records the
// transitions it saw; the last test runs them all and checks that together
// they are exactly the tables: none allowed and never taken, none taken and
// not allowed.
#include <set>
#include <utility>

#include "conn_stubs.h"

namespace tern::rpc {
namespace {

using namespace conn_stubs;
using P = ConnPhase;
using Seen = std::set<std::pair<P, P>>;

// Follows one connection's phase step by step: each step of a scenario is
// one transition (or none), so the pair recorded is the transition taken.
template <typename Conn>
struct Walk {
  Harness<Conn>& h;
  Seen* seen;
  P last = h.conn->phase();

  void at(P p, int line) {
    SCOPED_TRACE(testing::Message() << "line " << line);
    ASSERT_EQ(conn_phase_name(h.conn->phase()), std::string(conn_phase_name(p)));
    if (p != last) seen->insert({last, p});
    last = p;
  }
};
#define AT(w, p) (w).at(p, __LINE__)

// What the engine's dispatch does when the drain markers' flush
// completions come: the connection is drained, and its next service step
// tears it down.
template <typename Conn>
int finish_drain(Harness<Conn>& h) {
  h.conn->sq_drained = h.conn->rq_drained = true;
  bool more = false;
  return h.conn->step_drain(&more);
}

Status lost() { return make_error(Errc::kDisconnected, "the peer went away"); }

// ---------------------------------------------------------------- client scenarios

// A first connect the server refuses: drained at once (nothing was posted),
// dead, failed for the host; closed, then reclaimable.
void client_refused(Seen* seen) {
  Harness<ClientConn> h(/*reconnect=*/true, /*established=*/false);
  Walk<ClientConn> w{h, seen};
  AT(w, P::kConnecting);
  EXPECT_EQ(h.conn->state(), ConnState::kConnecting);
  Done d;
  EXPECT_EQ(h.conn->call(null_call(&d), nullptr), ENOTCONN) << "nowhere to send it before it was ever up";
  h.conn->on_disconnected(make_error(Errc::kRemoteError, "refused"));
  AT(w, P::kDraining);
  EXPECT_TRUE(h.conn->failed());
  EXPECT_TRUE(h.conn->drained()) << "nothing was posted to the peer";
  bool more = false;
  EXPECT_EQ(h.conn->step_drain(&more), 1);
  AT(w, P::kDead);
  EXPECT_EQ(h.conn->state(), ConnState::kFailed);
  EXPECT_FALSE(h.conn->reclaimable()) << "a client connection waits for close()";
  h.conn->close();
  AT(w, P::kDead);
  EXPECT_EQ(h.conn->state(), ConnState::kClosed);
  EXPECT_TRUE(h.conn->reclaimable());
}

// The engine could not even set the connection up (connect() failed at
// once): dead without a drain, never handed out.
void client_setup_failed(Seen* seen) {
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  h.conn->raise(ConnEvent::kSetupFailed);
  AT(w, P::kDead);
}

// Up; a call in flight; the connection is lost: it drains to reconnect,
// the call is kept (not failed), calls made meanwhile wait; after the
// backoff a new QP connects, comes up, and the call goes out again on it
// with its xid.
void client_lost_and_back(Seen* seen) {
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  std::vector<ConnState> told;
  h.conn->on_state_change(
      [](void* ctx, Connection*, ConnState, ConnState to, const Status&) {
        static_cast<std::vector<ConnState>*>(ctx)->push_back(to);
      },
      &told);
  h.conn->on_established({});
  AT(w, P::kReady);
  Done first, second;
  uint32_t xid = 0;
  ASSERT_EQ(h.conn->call(null_call(&first), &xid), 0);
  ASSERT_EQ(h.qp->sends.size(), 1u);
  h.conn->on_disconnected(lost());
  AT(w, P::kDrainingToReconnect);
  EXPECT_EQ(h.conn->state(), ConnState::kReconnecting);
  EXPECT_EQ(h.conn->call(null_call(&second), nullptr), 0) << "accepted while re-establishing";
  bool more = false;
  EXPECT_EQ(h.conn->step_drain(&more), 0) << "not drained before the markers' completions";
  EXPECT_EQ(finish_drain(h), 1);
  AT(w, P::kBackoff);
  EXPECT_EQ(first.calls, 0) << "sent again, not failed";
  EXPECT_TRUE(h.conn->qp == nullptr) << "the old QP is gone";
  EXPECT_EQ(h.conn->tick(h.conn->next_attempt), 1);
  AT(w, P::kReconnecting);
  EXPECT_EQ(h.dev->connects, 1);
  EXPECT_EQ(h.conn->state(), ConnState::kReconnecting);
  h.conn->on_established({});
  AT(w, P::kReady);
  EXPECT_EQ(h.core.engine_stats.reconnects.get(), 1u);
  more = false;
  h.conn->service(&more);
  // The call sent before goes out first on the new QP, with its xid (one
  // credit until the server grants more: the other call waits for it).
  StubQp* q = h.dev->last;
  ASSERT_EQ(q->sends.size(), 1u);
  wire::Incoming in;
  ChunkLists ch;
  wire::decode_call_header(q->sends[0].bytes, &in, &ch);
  EXPECT_EQ(in.xid, xid);
  EXPECT_EQ(told, (std::vector<ConnState>{ConnState::kReady, ConnState::kReconnecting, ConnState::kReady}));
}

// A reconnect attempt that gets no answer in time goes back to the
// backoff (through a drain: nothing was posted on its QP).
void client_attempt_times_out(Seen* seen) {
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  h.conn->on_established({});
  AT(w, P::kReady);
  h.conn->on_disconnected(lost());
  AT(w, P::kDrainingToReconnect);
  EXPECT_EQ(finish_drain(h), 1);
  AT(w, P::kBackoff);
  h.conn->tick(h.conn->next_attempt);
  AT(w, P::kReconnecting);
  h.conn->tick(h.conn->connect_deadline + 1);
  AT(w, P::kDrainingToReconnect);
  EXPECT_TRUE(h.conn->drained()) << "nothing was posted on the attempt's QP";
  bool more = false;
  EXPECT_EQ(h.conn->step_drain(&more), 1);
  AT(w, P::kBackoff);
  EXPECT_EQ(h.conn->state(), ConnState::kReconnecting);
}

// The device's port goes down between attempts: no attempt until it is up;
// then one at once. An attempt that fails at once (connect() refused) from
// there goes back to the backoff.
void client_port_down_and_up(Seen* seen) {
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  h.conn->on_established({});
  AT(w, P::kReady);
  h.conn->on_disconnected(lost());
  AT(w, P::kDrainingToReconnect);
  finish_drain(h);
  AT(w, P::kBackoff);
  h.dev->port = false;
  h.conn->tick(h.conn->next_attempt);
  AT(w, P::kPortDown);
  EXPECT_EQ(h.dev->connects, 0);
  h.conn->tick(h.conn->next_attempt);
  AT(w, P::kPortDown);
  EXPECT_EQ(h.dev->connects, 0) << "no attempt while the port is down";
  h.dev->port = true;
  h.dev->connect_status = make_error(Errc::kDisconnected, "stub: connect refused");
  h.conn->tick(h.conn->next_attempt);
  AT(w, P::kBackoff);
  EXPECT_EQ(h.dev->connects, 1);
  h.dev->port = false;
  h.conn->tick(h.conn->next_attempt);
  AT(w, P::kPortDown);
  h.dev->port = true;
  h.dev->connect_status = Status::ok();
  h.conn->tick(h.conn->next_attempt);
  AT(w, P::kReconnecting);
  EXPECT_EQ(h.dev->connects, 2);
}

// Past reconnect_give_up_ms the connection gives up: what waited fails once.
void client_gives_up(Seen* seen, bool port_down) {
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  h.core.opt.reconnect_give_up_ms = 1;
  h.conn->on_established({});
  Done d;
  AT(w, P::kReady);
  ASSERT_EQ(h.conn->call(null_call(&d), nullptr), 0);
  h.conn->on_disconnected(lost());
  AT(w, P::kDrainingToReconnect);
  finish_drain(h);
  AT(w, P::kBackoff);
  if (port_down) {
    h.dev->port = false;
    h.core.opt.reconnect_give_up_ms = 60000;
    h.conn->tick(h.conn->next_attempt);
    AT(w, P::kPortDown);
    h.core.opt.reconnect_give_up_ms = 1;
  }
  h.conn->tick(h.conn->lost_at + ticks_from_ns(10'000'000'000ull));
  AT(w, P::kDead);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, CallStatus::kDisconnected);
  EXPECT_EQ(h.conn->state(), ConnState::kFailed);
  EXPECT_EQ(h.core.requests.out(), 0u);
  h.conn->close();
  EXPECT_TRUE(h.conn->reclaimable());
}

// The engine shuts down while a connection drains to reconnect: it does not.
void client_shutdown_while_draining(Seen* seen) {
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  h.conn->on_established({});
  AT(w, P::kReady);
  h.conn->on_disconnected(lost());
  AT(w, P::kDrainingToReconnect);
  h.core.shutting_down = true;
  finish_drain(h);
  AT(w, P::kDead);
}

// Lost with reconnecting off: it drains and fails for good.
void client_lost_for_good(Seen* seen) {
  Harness<ClientConn> h(/*reconnect=*/false, false);
  Walk<ClientConn> w{h, seen};
  h.conn->on_established({});
  AT(w, P::kReady);
  h.conn->on_disconnected(lost());
  AT(w, P::kDraining);
  EXPECT_EQ(h.conn->state(), ConnState::kFailed);
  finish_drain(h);
  AT(w, P::kDead);
}

// close() in each phase: whatever the phase, the host sees kClosed at once,
// every call completes once, and the connection ends dead and reclaimable.
void client_close_in(P where, Seen* seen) {
  SCOPED_TRACE(conn_phase_name(where));
  Harness<ClientConn> h(true, false);
  Walk<ClientConn> w{h, seen};
  Done d;
  auto step_to = [&](P p) {
    switch (p) {
      case P::kConnecting: break;
      case P::kReady: h.conn->on_established({}); break;
      case P::kDrainingToReconnect: h.conn->on_disconnected(lost()); break;
      case P::kBackoff: finish_drain(h); break;
      case P::kPortDown:
        h.dev->port = false;
        h.conn->tick(h.conn->next_attempt);
        break;
      case P::kReconnecting:
        h.dev->port = true;
        h.conn->tick(h.conn->next_attempt);
        break;
      default: FAIL();
    }
    AT(w, p);
  };
  const P path[] = {P::kConnecting, P::kReady, P::kDrainingToReconnect, P::kBackoff, P::kPortDown, P::kReconnecting};
  for (P p : path) {
    step_to(p);
    if (p == P::kReady) {
      ASSERT_EQ(h.conn->call(null_call(&d), nullptr), 0);
    }
    if (p == where) break;
  }
  h.conn->close();
  EXPECT_EQ(h.conn->state(), ConnState::kClosed);
  EXPECT_TRUE(h.conn->failed());
  if (where == P::kBackoff || where == P::kPortDown) {
    AT(w, P::kDead);  // no QP: nothing to drain
  } else {
    AT(w, P::kDraining);
    finish_drain(h);
    AT(w, P::kDead);
  }
  EXPECT_EQ(d.calls, where == P::kConnecting ? 0 : 1);
  if (where != P::kConnecting) {
    EXPECT_EQ(d.status, CallStatus::kDisconnected);
  }
  EXPECT_EQ(h.core.requests.out(), 0u);
  EXPECT_TRUE(h.conn->reclaimable());
  // Closing a draining or dead connection changes nothing more.
  h.conn->close();
  AT(w, P::kDead);
}

void client_close_while_draining(Seen* seen) {
  Harness<ClientConn> h(false, false);
  Walk<ClientConn> w{h, seen};
  h.conn->on_established({});
  AT(w, P::kReady);
  h.conn->on_disconnected(lost());
  AT(w, P::kDraining);
  h.conn->close();
  AT(w, P::kDraining);
  EXPECT_EQ(h.conn->state(), ConnState::kClosed);
  finish_drain(h);
  AT(w, P::kDead);
  EXPECT_TRUE(h.conn->reclaimable());
}

void all_client(Seen* seen) {
  client_refused(seen);
  client_setup_failed(seen);
  client_lost_and_back(seen);
  client_attempt_times_out(seen);
  client_port_down_and_up(seen);
  client_gives_up(seen, false);
  client_gives_up(seen, true);
  client_shutdown_while_draining(seen);
  client_lost_for_good(seen);
  for (P p : {P::kConnecting, P::kReady, P::kDrainingToReconnect, P::kBackoff, P::kPortDown, P::kReconnecting})
    client_close_in(p, seen);
  client_close_while_draining(seen);
}

// ---------------------------------------------------------------- server scenarios

// Accepted; its first call establishes it (before the driver's event); the
// peer goes; it drains and is dead, and reclaimable once no handler holds a
// call of it.
void server_life(Seen* seen) {
  Harness<ServerConn> h(true, false);
  Walk<ServerConn> w{h, seen};
  AT(w, P::kConnecting);
  const uint8_t args[] = {1, 2, 3, 4};
  h.deliver(0x77, args);
  AT(w, P::kReady);
  EXPECT_EQ(h.handled, 1);
  h.conn->on_established({});  // the driver's event, later: nothing changes
  AT(w, P::kReady);
  h.conn->on_disconnected(lost());
  AT(w, P::kDraining);
  EXPECT_FALSE(h.conn->reclaimable());
  EXPECT_EQ(finish_drain(h), 1);
  AT(w, P::kDead);
  EXPECT_EQ(h.core.srv_calls.out(), 0u);
  EXPECT_TRUE(h.conn->reclaimable());
}

// Lost before it was established, and an accept that failed at once.
void server_lost_connecting(Seen* seen) {
  Harness<ServerConn> h(true, false);
  Walk<ServerConn> w{h, seen};
  h.conn->on_disconnected(lost());
  AT(w, P::kDraining);
  EXPECT_TRUE(h.conn->drained());
  finish_drain(h);
  AT(w, P::kDead);
  Harness<ServerConn> g(true, false);
  Walk<ServerConn> v{g, seen};
  g.conn->raise(ConnEvent::kSetupFailed);
  AT(v, P::kDead);
  EXPECT_TRUE(g.conn->reclaimable());
}

void all_server(Seen* seen) {
  server_life(seen);
  server_lost_connecting(seen);
}

// ---------------------------------------------------------------- the tests

TEST(ConnMachine, ClientRefusedAtConnectFailsAndIsReclaimedAfterClose) {
  Seen s;
  client_refused(&s);
}
TEST(ConnMachine, ClientLostReconnectsAfterBackoffAndSendsItsCallAgain) {
  Seen s;
  client_lost_and_back(&s);
}
TEST(ConnMachine, ClientAttemptTimingOutGoesBackToBackoff) {
  Seen s;
  client_attempt_times_out(&s);
}
TEST(ConnMachine, ClientWaitsForThePortThenAttempts) {
  Seen s;
  client_port_down_and_up(&s);
}
TEST(ConnMachine, ClientGivesUpAndFailsWhatWaited) {
  Seen s;
  client_gives_up(&s, false);
  client_gives_up(&s, true);
}
TEST(ConnMachine, ClientDoesNotReconnectOnceShuttingDownOrWithReconnectOff) {
  Seen s;
  client_shutdown_while_draining(&s);
  client_lost_for_good(&s);
}
TEST(ConnMachine, ClientCloseInEveryPhase) {
  Seen s;
  for (P p : {P::kConnecting, P::kReady, P::kDrainingToReconnect, P::kBackoff, P::kPortDown, P::kReconnecting})
    client_close_in(p, &s);
  client_close_while_draining(&s);
}
TEST(ConnMachine, ServerEstablishedByItsFirstCallDrainsAndIsReclaimed) {
  Seen s;
  server_life(&s);
  server_lost_connecting(&s);
}

// Together the scenarios take every transition each table allows, and no
// other.
TEST(ConnMachine, ScenariosTakeExactlyTheTablesTransitions) {
  Seen client, server;
  all_client(&client);
  all_server(&server);
  auto check = [](const ConnTable& table, const Seen& seen, const char* role) {
    for (int f = 0; f < kConnPhases; ++f)
      for (int t = 0; t < kConnPhases; ++t) {
        const bool allowed = table[f][t];
        const bool taken = seen.count({static_cast<P>(f), static_cast<P>(t)}) > 0;
        EXPECT_EQ(allowed, taken) << role << ": " << conn_phase_name(static_cast<P>(f)) << " -> "
                                  << conn_phase_name(static_cast<P>(t))
                                  << (allowed ? " allowed, never taken" : " taken, not allowed");
      }
  };
  check(kClientConnTransitions, client, "client");
  check(kServerConnTransitions, server, "server");
}

// A transition the table does not allow is caught where it is attempted:
// every event raised where its role's table has no transition for it.
TEST(ConnMachineDeathTest, ServerConnectionCannotEnterAClientPhase) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Harness<ServerConn> h;
        h.conn->raise(ConnEvent::kPortDown);
      },
      "server connection: ready -> port-down is not a transition");
  EXPECT_DEATH(
      {
        Harness<ServerConn> h;
        h.conn->raise(ConnEvent::kAttempt);
      },
      "server connection: ready -> reconnecting is not a transition");
}

TEST(ConnMachineDeathTest, DeadClientConnectionCannotComeBackUp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Harness<ClientConn> h(true, false);
        h.conn->raise(ConnEvent::kSetupFailed);
        h.conn->raise(ConnEvent::kEstablished);
      },
      "client connection: dead -> ready is not a transition");
  EXPECT_DEATH(
      {
        Harness<ClientConn> h(true, false);
        h.conn->raise(ConnEvent::kSetupFailed);
        h.conn->raise(ConnEvent::kLost);
      },
      "client connection: dead -> draining-to-reconnect is not a transition");
}

// From kReady, every event but kLost (and kAttemptFailed, which changes
// nothing outside the backoff) names a transition the table refuses.
TEST(ConnMachineDeathTest, ReadyClientConnectionRefusesEveryEventButLoss) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::pair<ConnEvent, const char*> refused[] = {
      {ConnEvent::kEstablished, "ready -> ready"},   {ConnEvent::kDrained, "ready -> dead"},
      {ConnEvent::kSetupFailed, "ready -> dead"},    {ConnEvent::kClosed, "ready -> dead"},
      {ConnEvent::kGaveUp, "ready -> dead"},         {ConnEvent::kPortDown, "ready -> port-down"},
      {ConnEvent::kAttempt, "ready -> reconnecting"},
  };
  for (const auto& [ev, msg] : refused) {
    SCOPED_TRACE(conn_event_name(ev));
    EXPECT_DEATH(
        {
          Harness<ClientConn> h;
          h.conn->raise(ev);
        },
        std::string("client connection: ") + msg + " is not a transition");
  }
  Harness<ClientConn> h;
  h.conn->raise(ConnEvent::kAttemptFailed);
  EXPECT_EQ(h.conn->phase(), P::kReady);
}

// ---------------------------------------------------------------- the request machine's events, through a ClientConn

void release_send(Harness<ClientConn>& h, size_t i) {
  Wc wc{};
  wc.wr_id = h.qp->sends[i].wr_id;
  wc.qp_num = h.qp->qp_num();
  wc.status = WcStatus::kSuccess;
  wc.opcode = rdma::WcOpcode::kSend;
  h.conn->on_send_completion(wc);
}

// kAccepted (free -> backlog) and kPosting (backlog -> sent), raised by
// call() and send(): a call with a credit goes out at once; one without
// waits in the backlog until a reply grants one, then goes out from there.
TEST(RequestEvents, AcceptedAndPostingThroughAClientConn) {
  Harness<ClientConn> h;
  Done first, second;
  uint32_t x1 = 0, x2 = 0;
  ASSERT_EQ(h.conn->call(null_call(&first), &x1), 0);
  Request* r1 = request_of(h, x1);
  ASSERT_NE(r1, nullptr);
  EXPECT_EQ(r1->state(), ReqState::kSent) << "accepted and posted at once";
  ASSERT_EQ(h.conn->call(null_call(&second), &x2), 0);
  Request* r2 = request_of(h, x2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->state(), ReqState::kBacklog) << "accepted; no credit to post it with";
  EXPECT_EQ(h.qp->sends.size(), 1u);
  h.deliver_reply(x1, 4, {});
  EXPECT_EQ(first.calls, 1);
  EXPECT_EQ(r1->state(), ReqState::kCompleted) << "its Send is not known complete yet";
  bool more = false;
  h.conn->service(&more);
  EXPECT_EQ(r2->state(), ReqState::kSent) << "posted from the backlog once a reply granted credits";
  ASSERT_EQ(h.qp->sends.size(), 2u);
  release_send(h, 0);
  EXPECT_EQ(r1->state(), ReqState::kFree);
  h.deliver_reply(x2, 4, {});
  release_send(h, 1);
  EXPECT_EQ(second.calls, 1);
  EXPECT_EQ(h.core.requests.out(), 0u);
}

// kLateReply (abandoned -> completed): a call that timed out with nothing
// registered is abandoned (its caller told at once); its late reply retires
// it, and its Send's completion frees it.
TEST(RequestEvents, LateReplyRetiresAnAbandonedCall) {
  Harness<ClientConn> h;
  Done d;
  uint32_t xid;
  Request* r = abandoned_call(h, &d, &xid);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(d.calls, 1);
  h.deliver_reply(xid, 4, {});
  EXPECT_EQ(h.core.engine_stats.late_replies.get(), 1u);
  EXPECT_EQ(r->state(), ReqState::kCompleted);
  EXPECT_EQ(d.calls, 1) << "completed once";
  release_send(h, 0);
  EXPECT_EQ(r->state(), ReqState::kFree);
  EXPECT_EQ(h.core.requests.out(), 0u);
}

// An event raised where the request machine has no transition for it is
// caught, release builds included.
TEST(RequestEventsDeathTest, AnEventTheTableRefusesIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::pair<ReqEvent, const char*> refused[] = {
      {ReqEvent::kPosting, "request: sent -> sent is not a transition"},
      {ReqEvent::kAccepted, "request: sent -> backlog is not a transition"},
  };
  for (const auto& [ev, message] : refused)
    EXPECT_DEATH(
        {
          Harness<ClientConn> h;
          Done d;
          uint32_t xid = 0;
          (void)h.conn->call(null_call(&d), &xid);
          h.conn->process(request_of(h, xid), ev);
        },
        message);
}

}  // namespace
}  // namespace tern::rpc
