// Recovery, as xprtrdma does it (docs/engine.md, "Recovery"): a lost client
// connection re-establishes itself and sends its calls again with their
// xids; calls have deadlines and can be cancelled, and complete only once
// nothing of theirs is reachable; keepalive probes find a stopped server; a
// duplicate request cache keeps a non-idempotent call from running twice;
// destroying an engine completes every call exactly once. Faults are
// injected into pmd/shm's QPs (engine_testing.h); over another device the
// tests that need them skip.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "engine/duplicate_cache.h"
#include "engine/engine_testing.h"
#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

using rdma::Fault;

// Every state change a connection reported, in order.
struct StateLog {
  std::vector<std::pair<ConnState, ConnState>> changes;
  Status last_why = Status::ok();
  static void cb(void* ctx, Connection*, ConnState from, ConnState to, const Status& why) {
    auto* l = static_cast<StateLog*>(ctx);
    l->changes.emplace_back(from, to);
    if (!why.is_ok()) l->last_why = why;
  }
  bool saw(ConnState to) const {
    for (auto& c : changes)
      if (c.second == to) return true;
    return false;
  }
};

// A call's completions, counted: a second one is a defect.
struct Counted {
  int count = 0;
  CallReply reply{};
  std::vector<uint8_t> results;
  static void cb(void* ctx, const CallReply& r) {
    auto* c = static_cast<Counted*>(ctx);
    ++c->count;
    c->reply = r;
    c->results.assign(r.results.begin(), r.results.end());
  }
};

uint64_t stat(Engine& e, std::string_view name) {
  for (const StatEntry& s : e.stats_view())
    if (name == s.name) return s.counter->get();
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

#define SKIP_UNLESS_SHM() \
  if (!on_shm()) GTEST_SKIP() << "injects pmd/shm faults"

// Drops the client's QP as a dead peer would (no goodbye).
void drop_client_qp(Connection* c) {
  Status s = testing::inject_fault(c, Fault{Fault::Kind::kDropConnection});
  ASSERT_TRUE(s.is_ok()) << s.to_string();
}

// Drops the client's QP under the calls the server holds in f.later (their
// answers reach nobody), then hands each copy the client sends again after
// the reconnect to `each`, in arrival order, until n have come.
template <class Each>
void drop_then_take_resent(Fixture& f, size_t n, Each each) {
  std::vector<ServerCall*> first;
  first.swap(f.later);
  drop_client_qp(f.conn);
  for (ServerCall* sc : first) ASSERT_OK(sc->reply({}));
  // The new connection starts with one credit again (RFC 8166 §3.3.1):
  // the copies arrive as the server answers them.
  size_t answered = 0;
  while (answered < n) {
    ASSERT_TRUE(f.wait([&] { return f.later.size() > answered; }))
        << "calls sent again after the reconnect: " << answered << ", state " << conn_state_name(f.conn->state());
    each(f.later[answered++]);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// One call answered: the server's reply grants the credits the calls after
// it need (until then a client has one, RFC 8166 §3.3.1).
void warm(Fixture& f) { ASSERT_EQ(f.call(Call{kProg, kVers, kEcho}).reply.status, CallStatus::kOk); }

EngineOptions fast_reconnect() {
  EngineOptions o;
  o.reconnect_min_ms = 5;
  o.reconnect_max_ms = 50;
  return o;
}

// Calls in flight when the connection is lost -- inline, with a write chunk
// (an MR the server writes into) and with a read chunk (an MR it reads) --
// are sent again once it is back, with the xids they had, and complete
// exactly once with their results; the host sees ready -> reconnecting ->
// ready and the counters.
TEST(Recovery, ALostConnectionComesBackAndSendsItsCallsAgainWithTheirXids) {
  SKIP_UNLESS_SHM();
  Fixture f({}, fast_reconnect());
  warm(f);
  StateLog log;
  f.conn->on_state_change(&StateLog::cb, &log);
  constexpr int kCalls = 6;
  std::vector<Counted> done(kCalls);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(kCalls * 4096));
  std::vector<uint32_t> xids(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    Call c{kProg, kVers, kLater};
    c.done = &Counted::cb, c.ctx = &done[i];
    if (i % 3 == 1) c.bulk_recv = std::span<uint8_t>(bulk + i * 4096, 4096);
    if (i % 3 == 2) {
      for (int k = 0; k < 4096; ++k) bulk[i * 4096 + k] = pat(i, k);
      c.bulk_send = std::span<const uint8_t>(bulk + i * 4096, 4096);
    }
    ASSERT_EQ(f.conn->call(c, &xids[i]), 0);
  }
  ASSERT_TRUE(f.wait([&] { return f.later.size() == kCalls; })) << f.later.size();
  std::map<uint32_t, int> seen;
  for (ServerCall* sc : f.later) ++seen[sc->xid()];
  drop_then_take_resent(f, kCalls, [&](ServerCall* sc) {
    ++seen[sc->xid()];
    if (sc->write_chunk_count() > 0) {
      auto b = sc->bulk_buffer(4096);
      for (int k = 0; k < 4096; ++k) b[k] = pat(77, k);
      ASSERT_OK(sc->reply({}, b));
    } else {
      uint32_t sum = 0;
      for (uint8_t v : sc->bulk()) sum += v;
      ASSERT_OK(sc->reply(std::span(reinterpret_cast<const uint8_t*>(&sum), 4)));
    }
  });
  for (uint32_t x : xids) EXPECT_EQ(seen[x], 2) << "xid " << x << " arrived once per connection";
  EXPECT_EQ(f.conn->state(), ConnState::kReady);
  EXPECT_FALSE(f.conn->failed());
  f.later.clear();
  ASSERT_TRUE(f.wait([&] {
    for (auto& d : done)
      if (d.count == 0) return false;
    return true;
  }));
  f.wait([] { return false; }, 20);  // nothing completes twice
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(done[i].count, 1) << i;
    EXPECT_EQ(done[i].reply.status, CallStatus::kOk) << i << ": " << call_status_name(done[i].reply.status);
    EXPECT_EQ(done[i].reply.xid, xids[i]);
    EXPECT_EQ(done[i].reply.retransmits, 1u) << i;
    if (i % 3 == 1) {
      EXPECT_EQ(done[i].reply.bulk_recv_len, 4096u);
      for (int k = 0; k < 4096; ++k) ASSERT_EQ(bulk[i * 4096 + k], pat(77, k)) << i << " offset " << k;
    }
    if (i % 3 == 2) {
      uint32_t want = 0, got = 0;
      for (int k = 0; k < 4096; ++k) want += pat(i, k);
      ASSERT_EQ(done[i].results.size(), 4u);
      std::memcpy(&got, done[i].results.data(), 4);
      EXPECT_EQ(got, want) << "the read chunk's data, pulled again on the new connection";
    }
  }
  ASSERT_GE(log.changes.size(), 2u);
  EXPECT_EQ(log.changes[0], std::make_pair(ConnState::kReady, ConnState::kReconnecting));
  EXPECT_EQ(log.changes.back(), std::make_pair(ConnState::kReconnecting, ConnState::kReady));
  EXPECT_EQ(stat(*f.cli, "reconnects"), 1u);
  EXPECT_EQ(stat(*f.cli, "retransmits"), static_cast<uint64_t>(kCalls));
  EXPECT_GE(stat(*f.cli, "reconnect_attempts"), 1u);
  // Everything is back in its pool: the old connection's MRs destroyed
  // after its drain (none registered twice or released twice).
  f.conn->close();
  f.wait([] { return false; }, 20);
  testing::Accounting a = testing::accounting(*f.cli);
  EXPECT_TRUE(a.idle()) << a.to_string();
}

// A call sent at once from call() is not copied there: its arguments are
// read from its send buffer's message, and copied out when that buffer
// goes back (its Send done) or the call is queued again. Sent again after
// a loss, every call carries the arguments it was made with, although the
// caller's buffer was overwritten as soon as call() returned -- some calls'
// Sends done before the loss (a signaled Send completes the ones before
// it), the others' at the drain.
TEST(Recovery, ACallSentAgainCarriesItsArgumentsAfterTheCallersBufferChanged) {
  SKIP_UNLESS_SHM();
  Fixture f({}, fast_reconnect());
  warm(f);
  constexpr int kCalls = 24;  // more than a signal batch (EngineOptions::send_batch)
  auto args_of = [](int i) {
    std::vector<uint8_t> a(4 + 4 * (i % 5));
    for (size_t k = 0; k < a.size(); ++k) a[k] = static_cast<uint8_t>(pat(static_cast<uint32_t>(i), k) | 1);
    return a;
  };
  std::vector<Counted> done(kCalls);
  std::vector<uint8_t> buf(64);
  std::map<uint32_t, int> call_of;
  for (int i = 0; i < kCalls; ++i) {
    std::vector<uint8_t> a = args_of(i);
    std::memcpy(buf.data(), a.data(), a.size());
    Call c{kProg, kVers, kLater};
    c.args = std::span<const uint8_t>(buf.data(), a.size());
    c.done = &Counted::cb, c.ctx = &done[i];
    uint32_t xid = 0;
    ASSERT_EQ(f.conn->call(c, &xid), 0);
    call_of[xid] = i;
    std::memset(buf.data(), 0xEE, buf.size());  // the caller reuses its buffer at once
  }
  ASSERT_TRUE(f.wait([&] { return f.later.size() == kCalls; })) << f.later.size();
  for (ServerCall* sc : f.later) {
    std::vector<uint8_t> want = args_of(call_of.at(sc->xid()));
    EXPECT_EQ(std::vector<uint8_t>(sc->args().begin(), sc->args().end()), want) << "first copy, xid " << sc->xid();
  }
  drop_then_take_resent(f, kCalls, [&](ServerCall* sc) {
    std::vector<uint8_t> want = args_of(call_of.at(sc->xid()));
    EXPECT_EQ(std::vector<uint8_t>(sc->args().begin(), sc->args().end()), want) << "sent again, xid " << sc->xid();
    ASSERT_OK(sc->reply({}));
  });
  f.later.clear();
  ASSERT_TRUE(f.wait([&] {
    for (auto& d : done)
      if (d.count == 0) return false;
    return true;
  }));
  for (int i = 0; i < kCalls; ++i) {
    EXPECT_EQ(done[i].count, 1) << i;
    EXPECT_EQ(done[i].reply.status, CallStatus::kOk) << i;
    EXPECT_EQ(done[i].reply.retransmits, 1u) << i;
  }
}

// A call marked not to be retried fails with kDisconnected at the loss;
// the others are sent again.
TEST(Recovery, NoRetryCallsFailAtTheLoss) {
  SKIP_UNLESS_SHM();
  Fixture f({}, fast_reconnect());
  warm(f);
  Counted retried, once;
  Call a{kProg, kVers, kLater};
  a.done = &Counted::cb, a.ctx = &retried;
  Call b{kProg, kVers, kLater};
  b.done = &Counted::cb, b.ctx = &once, b.no_retry = true;
  ASSERT_EQ(f.conn->call(a), 0);
  ASSERT_EQ(f.conn->call(b), 0);
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 2; }));
  f.later.clear();  // their connection dies: the server frees them (orphans)
  drop_client_qp(f.conn);
  ASSERT_TRUE(f.wait([&] { return once.count == 1 && f.later.size() == 1; }));
  EXPECT_EQ(once.reply.status, CallStatus::kDisconnected);
  EXPECT_EQ(retried.count, 0);
  ASSERT_OK(f.later[0]->reply({}));
  ASSERT_TRUE(f.wait([&] { return retried.count == 1; }));
  EXPECT_EQ(retried.reply.status, CallStatus::kOk);
  EXPECT_EQ(once.count, 1);
}

// A call still waiting for a credit expires from the backlog without
// spending one: the server never sees it, and the connection goes on.
TEST(Recovery, ABacklogCallExpiresWithoutSpendingACredit) {
  EngineOptions so, co;
  so.credits = 1;  // the client may have one call outstanding
  Fixture f(so, co);
  Counted held, expiring, after;
  Call a{kProg, kVers, kLater};
  a.done = &Counted::cb, a.ctx = &held;
  ASSERT_EQ(f.conn->call(a), 0);
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 1; }));
  Call b{kProg, kVers, kLater};
  b.done = &Counted::cb, b.ctx = &expiring, b.timeout_ns = 30'000'000;
  ASSERT_EQ(f.conn->call(b), 0);
  ASSERT_TRUE(f.wait([&] { return expiring.count == 1; }, 2000));
  EXPECT_EQ(expiring.reply.status, CallStatus::kTimedOut);
  EXPECT_EQ(f.later.size(), 1u) << "the expired call was never sent";
  EXPECT_EQ(f.conn->outstanding(), 1u);
  ASSERT_OK(f.later[0]->reply({}));
  f.later.clear();
  ASSERT_TRUE(f.wait([&] { return held.count == 1; }));
  Call c{kProg, kVers, kEcho};
  c.done = &Counted::cb, c.ctx = &after;
  ASSERT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return after.count == 1; }));
  EXPECT_EQ(after.reply.status, CallStatus::kOk);
  EXPECT_EQ(expiring.count, 1);
  EXPECT_EQ(f.conn->state(), ConnState::kReady);
}

// An inline call past its deadline (nothing of the caller's registered)
// completes at once; its credit stays taken until the server's late reply,
// which is dropped and counted, and the connection goes on.
TEST(Recovery, AnInlineCallPastItsDeadlineCompletesAndItsLateReplyIsDropped) {
  Fixture f;
  Counted late;
  Call a{kProg, kVers, kLater};
  a.done = &Counted::cb, a.ctx = &late, a.timeout_ns = 20'000'000;
  ASSERT_EQ(f.conn->call(a), 0);
  ASSERT_TRUE(f.wait([&] { return late.count == 1; }, 2000));
  EXPECT_EQ(late.reply.status, CallStatus::kTimedOut);
  EXPECT_EQ(f.conn->outstanding(), 1u) << "its credit is kept until the late reply";
  ASSERT_EQ(f.later.size(), 1u);
  ASSERT_OK(f.later[0]->reply({}));
  f.later.clear();
  ASSERT_TRUE(f.wait([&] { return stat(*f.cli, "late_replies") == 1; }));
  EXPECT_EQ(f.conn->outstanding(), 0u);
  EXPECT_EQ(late.count, 1);
  EXPECT_EQ(f.conn->state(), ConnState::kReady);
  EXPECT_EQ(stat(*f.cli, "reconnects"), 0u);
  Pending p = f.call(Call{kProg, kVers, kEcho});
  EXPECT_EQ(p.reply.status, CallStatus::kOk);
}

// A call with registrations past its deadline: the server may still read
// or write them until it replies, so the call completes only once they are
// fenced -- the connection is dropped and drained, its MRs destroyed (as
// xprtrdma's timeout forces a disconnect) -- and the other calls go on on
// the new connection.
TEST(Recovery, ACallWithChunksPastItsDeadlineCompletesOnlyOnceFenced) {
  SKIP_UNLESS_SHM();
  Fixture f({}, fast_reconnect());
  warm(f);
  StateLog log;
  f.conn->on_state_change(&StateLog::cb, &log);
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  Counted chunked, other;
  size_t changes_at_completion = 0;
  struct Ctx {
    Counted* c;
    StateLog* log;
    size_t* at;
  } ctx{&chunked, &log, &changes_at_completion};
  Call a{kProg, kVers, kLater};
  a.bulk_recv = std::span<uint8_t>(bulk, 8192);
  a.timeout_ns = 20'000'000;
  a.ctx = &ctx;
  a.done = [](void* p, const CallReply& r) {
    auto* x = static_cast<Ctx*>(p);
    *x->at = x->log->changes.size();
    Counted::cb(x->c, r);
  };
  Call b{kProg, kVers, kLater};
  b.done = &Counted::cb, b.ctx = &other;
  ASSERT_EQ(f.conn->call(a), 0);
  ASSERT_EQ(f.conn->call(b), 0);
  ASSERT_TRUE(f.wait([&] { return chunked.count == 1; }, 3000));
  EXPECT_EQ(chunked.reply.status, CallStatus::kTimedOut);
  EXPECT_GE(changes_at_completion, 1u) << "completed before its connection was dropped";
  EXPECT_TRUE(log.saw(ConnState::kReconnecting));
  EXPECT_GE(stat(*f.cli, "declared_dead"), 1u);
  // The other call went again on the new connection.
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 3; })) << f.later.size();
  // The first two were the old connection's: their replies reach nobody.
  for (ServerCall* sc : f.later) (void)sc->reply({});
  f.later.clear();
  ASSERT_TRUE(f.wait([&] { return other.count == 1; }));
  EXPECT_EQ(other.reply.status, CallStatus::kOk);
  EXPECT_EQ(chunked.count, 1);
  EXPECT_EQ(testing::accounting(*f.cli).mrs_registered, 0u);
}

// cancel(): a call in the backlog and one in flight complete once with
// kCancelled; an unknown or finished xid is ENOENT.
TEST(Recovery, CancelCompletesACallOnce) {
  EngineOptions so, co;
  so.credits = 1;
  Fixture f(so, co);
  Counted sent, waiting;
  uint32_t xs = 0, xw = 0;
  Call a{kProg, kVers, kLater};
  a.done = &Counted::cb, a.ctx = &sent;
  ASSERT_EQ(f.conn->call(a, &xs), 0);
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 1; }));
  Call b{kProg, kVers, kEcho};
  b.done = &Counted::cb, b.ctx = &waiting;
  ASSERT_EQ(f.conn->call(b, &xw), 0);
  EXPECT_EQ(f.conn->cancel(xw + 1000), ENOENT);
  EXPECT_EQ(f.conn->cancel(xw), 0);
  EXPECT_EQ(f.conn->cancel(xw), ENOENT) << "cancelled already";
  EXPECT_EQ(f.conn->cancel(xs), 0);
  EXPECT_EQ(waiting.count, 0) << "completions come from poll(), never from inside cancel()";
  ASSERT_TRUE(f.wait([&] { return sent.count == 1 && waiting.count == 1; }));
  EXPECT_EQ(sent.reply.status, CallStatus::kCancelled);
  EXPECT_EQ(waiting.reply.status, CallStatus::kCancelled);
  ASSERT_OK(f.later[0]->reply({}));  // its late reply
  f.later.clear();
  ASSERT_TRUE(f.wait([&] { return f.conn->outstanding() == 0; }));
  f.wait([] { return false; }, 20);
  EXPECT_EQ(sent.count, 1);
  EXPECT_EQ(waiting.count, 1);
  EXPECT_EQ(f.conn->cancel(xs), ENOENT);
  EXPECT_EQ(stat(*f.cli, "cancels"), 2u);
  EXPECT_EQ(f.call(Call{kProg, kVers, kEcho}).reply.status, CallStatus::kOk);
}

// A server that stops answering (as SIGSTOP would leave it: its connection
// up, nothing read) is found by the keepalive probe: the connection is
// declared dead and re-established, and once the server runs again the
// call held across it all completes.
TEST(Recovery, KeepaliveFindsAStoppedServer) {
  SKIP_UNLESS_SHM();
  EngineOptions so, co = fast_reconnect();
  co.keepalive_ms = 40;
  co.keepalive_timeout_ms = 40;
  Fixture f(so, co);
  warm(f);  // credits to probe with
  StateLog log;
  f.conn->on_state_change(&StateLog::cb, &log);
  Counted held;
  Call a{kProg, kVers, kEcho};
  a.done = &Counted::cb, a.ctx = &held;
  ASSERT_EQ(f.conn->call(a), 0);
  // Only the client runs: the server is "stopped" with the call unread.
  ASSERT_TRUE(f.wait_client([&] { return log.saw(ConnState::kReconnecting); }, 3000))
      << "a stopped server was never found; probes " << stat(*f.cli, "keepalive_probes");
  EXPECT_GE(stat(*f.cli, "keepalive_probes"), 1u);
  EXPECT_EQ(stat(*f.cli, "keepalive_failures"), 1u);
  EXPECT_EQ(held.count, 0) << "the call waits for the connection to come back";
  // The server runs again: the call completes on the new connection.
  ASSERT_TRUE(f.wait([&] { return held.count == 1; }, 5000));
  EXPECT_EQ(held.reply.status, CallStatus::kOk);
  EXPECT_EQ(f.conn->state(), ConnState::kReady);
}

// An idle connection to a live server is probed and stays up.
TEST(Recovery, IdleKeepaliveProbesALiveServer) {
  EngineOptions so, co;
  co.keepalive_idle_ms = 20;
  Fixture f(so, co);
  EXPECT_EQ(f.call(Call{kProg, kVers, kEcho}).reply.status, CallStatus::kOk);  // the program to probe
  ASSERT_TRUE(f.wait([&] { return stat(*f.cli, "keepalive_probes") >= 3; }, 3000));
  EXPECT_EQ(stat(*f.cli, "keepalive_failures"), 0u);
  EXPECT_EQ(f.conn->state(), ConnState::kReady);
  EXPECT_EQ(f.cli->stats().calls.get(), 1u) << "probes are not the host's calls";
}

// A server that never comes back: past reconnect_give_up_ms the connection
// fails for good, and every call completes once with kDisconnected.
TEST(Recovery, GivesUpAtTheDeadline) {
  EngineOptions so, co = fast_reconnect();
  co.reconnect_give_up_ms = 150;
  Fixture f(so, co);
  warm(f);
  StateLog log;
  f.conn->on_state_change(&StateLog::cb, &log);
  std::vector<Counted> done(3);
  for (auto& d : done) {
    Call c{kProg, kVers, kLater};
    c.done = &Counted::cb, c.ctx = &d;
    ASSERT_EQ(f.conn->call(c), 0);
  }
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 3; }));
  f.later.clear();
  f.srv.reset();
  ASSERT_TRUE(f.wait_client([&] { return f.conn->failed(); }, 5000)) << conn_state_name(f.conn->state());
  f.wait_client([] { return false; }, 20);
  for (auto& d : done) {
    EXPECT_EQ(d.count, 1);
    EXPECT_EQ(d.reply.status, CallStatus::kDisconnected);
  }
  EXPECT_EQ(f.conn->state(), ConnState::kFailed);
  EXPECT_TRUE(log.saw(ConnState::kReconnecting));
  EXPECT_EQ(log.changes.back().second, ConnState::kFailed);
  EXPECT_GE(stat(*f.cli, "reconnect_attempts"), 2u);
  EXPECT_EQ(f.conn->call(Call{kProg, kVers, kEcho}), ENOTCONN);
}

// While reconnecting, new calls are accepted and wait; they go out once
// the connection is back.
TEST(Recovery, CallsMadeWhileReconnectingWaitForTheNewConnection) {
  SKIP_UNLESS_SHM();
  EngineOptions so, co = fast_reconnect();
  co.reconnect_min_ms = 100;  // a window to call in
  Fixture f(so, co);
  drop_client_qp(f.conn);
  ASSERT_TRUE(f.wait([&] { return f.conn->state() == ConnState::kReconnecting; }));
  Counted c1;
  Call c{kProg, kVers, kEcho};
  c.done = &Counted::cb, c.ctx = &c1;
  ASSERT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return c1.count == 1; }, 3000));
  EXPECT_EQ(c1.reply.status, CallStatus::kOk);
  EXPECT_EQ(c1.reply.retransmits, 0u);
}

// The duplicate request cache: the server runs a non-idempotent call and
// replies, but the reply is lost with the connection; the client sends it
// again with its xid on the new connection, and the cache answers it from
// the first run. The handler saw both copies, ran it once.
struct Counter {
  DuplicateCache drc{64};
  int copies = 0, runs = 0;
  Connection* client_conn = nullptr;
  bool drop_before_reply = true;
  static void add(void* ctx, ServerCall* c) {
    auto* k = static_cast<Counter*>(ctx);
    ++k->copies;
    std::vector<uint8_t> cached;
    switch (k->drc.begin(c, &cached)) {
      case DuplicateCache::Found::kDone:
        ASSERT_OK(c->reply(cached));
        return;
      case DuplicateCache::Found::kInProgress:
        return;
      case DuplicateCache::Found::kNew:
        break;
    }
    uint32_t v = static_cast<uint32_t>(++k->runs);
    std::span<const uint8_t> res(reinterpret_cast<const uint8_t*>(&v), 4);
    k->drc.done(*c, res);
    // The client's QP vanishes before this reply can reach it.
    if (k->drop_before_reply) {
      k->drop_before_reply = false;
      drop_client_qp(k->client_conn);
    }
    (void)c->reply(res);
  }
};

TEST(Recovery, ANonIdempotentCallRunsOnceAcrossAReconnect) {
  SKIP_UNLESS_SHM();
  Fixture f({}, fast_reconnect());
  Counter k;
  k.client_conn = f.conn;
  constexpr uint32_t kAdd = 10;
  f.srv->handle(kProg, kVers, kAdd, &Counter::add, &k);
  Counted d;
  Call c{kProg, kVers, kAdd};
  const uint8_t arg[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  c.args = arg;
  c.done = &Counted::cb, c.ctx = &d;
  ASSERT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return d.count == 1; }, 5000)) << "copies " << k.copies;
  f.wait([] { return false; }, 20);
  EXPECT_EQ(d.count, 1);
  EXPECT_EQ(d.reply.status, CallStatus::kOk);
  EXPECT_EQ(d.reply.retransmits, 1u);
  EXPECT_EQ(k.copies, 2) << "the call really was sent twice";
  EXPECT_EQ(k.runs, 1) << "and ran once";
  ASSERT_EQ(d.results.size(), 4u);
  uint32_t v;
  std::memcpy(&v, d.results.data(), 4);
  EXPECT_EQ(v, 1u) << "the answer of the first run";
  EXPECT_EQ(k.drc.hits(), 1u);
}

// A retransmission that arrives while its first copy is still being served
// is held by the cache and answered with the first copy's results.
TEST(Recovery, ADuplicateOfACallInProgressIsAnsweredWithIt) {
  SKIP_UNLESS_SHM();
  Fixture f({}, fast_reconnect());
  DuplicateCache drc;
  std::vector<ServerCall*> firsts;
  struct S {
    DuplicateCache* drc;
    std::vector<ServerCall*>* firsts;
    int copies = 0;
  } s{&drc, &firsts};
  constexpr uint32_t kSlow = 11;
  f.srv->handle(kProg, kVers, kSlow, [](void* ctx, ServerCall* c) {
    auto* s = static_cast<S*>(ctx);
    ++s->copies;
    std::vector<uint8_t> cached;
    if (s->drc->begin(c, &cached) == DuplicateCache::Found::kNew) s->firsts->push_back(c);
  }, &s);
  Counted d;
  Call c{kProg, kVers, kSlow};
  c.done = &Counted::cb, c.ctx = &d;
  ASSERT_EQ(f.conn->call(c), 0);
  ASSERT_TRUE(f.wait([&] { return s.copies == 1; }));
  drop_client_qp(f.conn);
  ASSERT_TRUE(f.wait([&] { return s.copies == 2; })) << "not sent again";
  ASSERT_EQ(firsts.size(), 1u);
  EXPECT_EQ(drc.in_progress_hits(), 1u);
  const uint8_t res[4] = {9, 9, 9, 9};
  drc.done(*firsts[0], res);  // answers the held copy, on the live connection
  (void)firsts[0]->reply(res);  // its own connection is gone
  ASSERT_TRUE(f.wait([&] { return d.count == 1; }));
  EXPECT_EQ(d.reply.status, CallStatus::kOk);
  EXPECT_EQ(d.results, std::vector<uint8_t>(res, res + 4));
}

// A client that goes away between its connection request and the
// server's accept (killed, or its engine destroyed) leaves the server
// nothing: the connection the server made for it is refused and reclaimed,
// not held for good with its slot, QP and first credit (found by tern-soak:
// a server that outlived many killed clients kept every such connection,
// up to max_connections).
TEST(Recovery, AClientGoneBeforeItsAcceptIsNotHeldByTheServer) {
  SKIP_UNLESS_SHM();
  auto srv = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  const std::string path = next_spec();
  ASSERT_OK(srv->listen(path));
  constexpr int kGone = 3;
  for (int i = 0; i < kGone; ++i) {
    auto cli = Engine::create({.arena_bytes = kTestArenaBytes}).value();
    ASSERT_TRUE(cli->connect(path).is_ok());
    cli.reset();  // before the server has looked at the request
  }
  EXPECT_TRUE(poll_until({srv.get()}, [&] { return srv->stats().connections_refused.get() >= kGone; }, 3000))
      << "refused " << srv->stats().connections_refused.get();
  EXPECT_TRUE(poll_until({srv.get()}, [&] { return srv->stats().connections.get() == 0; }, 3000))
      << srv->stats().connections.get() << " connections still held";
  testing::Accounting a = testing::accounting(*srv);
  EXPECT_TRUE(a.idle()) << a.to_string();
  // And it still serves.
  auto cli = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  srv->handle(kProg, kVers, kEcho, &Fixture::echo, nullptr);
  Connection* c = cli->connect(path).value();
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [&] { return c->ready() || c->failed(); }));
  ASSERT_TRUE(c->ready()) << c->error().to_string();
  Counted d;
  Call call{kProg, kVers, kEcho};
  call.done = &Counted::cb, call.ctx = &d;
  ASSERT_EQ(c->call(call), 0);
  ASSERT_TRUE(poll_until({srv.get(), cli.get()}, [&] { return d.count == 1; }));
  EXPECT_EQ(d.reply.status, CallStatus::kOk);
  cli.reset();
  srv.reset();
  remove_spec(path);
}

// Destroying the client engine completes every call exactly once: those in
// the backlog, those in flight with registrations (after fencing), and
// those of a connection that is re-establishing itself.
TEST(Recovery, DestroyingTheEngineCompletesEveryCallOnce) {
  SKIP_UNLESS_SHM();
  EngineOptions so, co = fast_reconnect();
  so.credits = 2;
  co.reconnect_min_ms = 1000;  // the second connection stays down
  Fixture f(so, co);
  warm(f);
  auto c2r = f.cli->connect(f.path);
  ASSERT_TRUE(c2r.is_ok());
  Connection* c2 = *c2r;
  ASSERT_TRUE(f.wait([&] { return c2->ready(); }));
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(4 * 4096));
  std::vector<Counted> done(6);
  for (int i = 0; i < 4; ++i) {  // two in flight (MRs), two in the backlog
    Call c{kProg, kVers, kLater};
    c.done = &Counted::cb, c.ctx = &done[i];
    c.bulk_recv = std::span<uint8_t>(bulk + i * 4096, 4096);
    ASSERT_EQ(f.conn->call(c), 0);
  }
  for (int i = 4; i < 6; ++i) {
    Call c{kProg, kVers, kLater};
    c.done = &Counted::cb, c.ctx = &done[i];
    ASSERT_EQ(c2->call(c), 0);
  }
  // Two of f.conn's (its grant) and one of c2's (one credit until a reply).
  ASSERT_TRUE(f.wait([&] { return f.later.size() == 3; })) << f.later.size();
  drop_client_qp(c2);
  ASSERT_TRUE(f.wait([&] { return c2->state() == ConnState::kReconnecting; }));
  for (auto& d : done) EXPECT_EQ(d.count, 0);
  f.cli.reset();
  for (size_t i = 0; i < done.size(); ++i) {
    EXPECT_EQ(done[i].count, 1) << i;
    EXPECT_EQ(done[i].reply.status, CallStatus::kDisconnected) << i;
  }
  f.later.clear();
}


// call() accepts a whole window of calls plus a whole backlog whatever the
// Send completions are doing: a request waiting for its Send's completion
// (the device may still read its buffer) no longer takes a place that a
// new call needs. Once, call() said EAGAIN below credits + backlog while
// completions lagged. Here the server is not polled while the calls go out
// (so nothing it is sent completes), and afterwards every Send completion
// is held back 200 ms while replies flow.
TEST(Recovery, CallsUpToCreditsPlusBacklogAreAcceptedWhileSendCompletionsLag) {
  SKIP_UNLESS_SHM();
  EngineOptions so, co;
  so.credits = co.credits = 8;
  co.backlog = 8;
  Fixture f(so, co);
  warm(f);
  ASSERT_TRUE(f.wait([&] { return f.conn->info().credits == 8; })) << "grant " << f.conn->info().credits;
  Status s = testing::inject_fault(f.conn, Fault{Fault::Kind::kDelayCompletions, 0, 200'000'000});
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  constexpr int kRounds = 4;
  std::vector<Counted> got(kRounds * (8 + 8) + 1);
  std::vector<uint32_t> args(got.size());
  size_t next = 0;
  for (int round = 0; round < kRounds; ++round) {
    // Grants follow load (at most 8 here); the window is what was granted.
    const int grant = static_cast<int>(f.conn->info().credits);
    ASSERT_GE(grant, 1);
    int accepted = 0;
    for (;;) {
      ASSERT_LE(accepted, 8 + 8) << "call() accepted more than credits + backlog";
      args[next] = static_cast<uint32_t>(next);
      Call c{kProg, kVers, kEcho};
      c.args = {reinterpret_cast<const uint8_t*>(&args[next]), sizeof(uint32_t)};
      c.done = Counted::cb, c.ctx = &got[next];
      const int rc = f.conn->call(c);
      if (rc == EAGAIN) break;
      ASSERT_EQ(rc, 0);
      ++accepted, ++next;
      f.cli->poll();  // the client sends what its credits allow; the server sleeps
    }
    EXPECT_EQ(accepted, grant + 8) << "round " << round << ": " << f.conn->outstanding() << " outstanding";
    ASSERT_TRUE(f.wait([&] {
      for (size_t i = 0; i < next; ++i)
        if (got[i].count == 0) return false;
      return true;
    })) << "round " << round;
  }
  for (size_t i = 0; i < next; ++i) {
    EXPECT_EQ(got[i].count, 1) << i;
    EXPECT_EQ(got[i].reply.status, CallStatus::kOk) << i;
    uint32_t v = 0;
    if (got[i].results.size() == 4) std::memcpy(&v, got[i].results.data(), 4);
    EXPECT_EQ(v, i);
  }
}

}  // namespace
}  // namespace tern::rpc
