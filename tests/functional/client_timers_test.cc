// A client engine's millisecond tick looks only at the connections with a
// timer due (docs/engine.md, "Timers"), not at every client connection
// every millisecond: with many connections each making a call now and
// then, that walk cost about one connection visit per call. The timers
// themselves still fire: a call's deadline, and keepalive's probe of a
// silent server, each on a connection among many quiet ones.
// (Timings are generous: only a stall of the test thread of seconds fails.)
#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

constexpr int kConns = 64;

uint64_t stat(Engine& e, std::string_view name) {
  for (const StatEntry& s : e.stats_view())
    if (name == s.name) return s.counter->get();
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

struct Many {
  Fixture f;
  std::vector<Connection*> conns;
  explicit Many(EngineOptions co) : f({}, co) {
    conns.push_back(f.conn);
    for (int i = 1; i < kConns; ++i) {
      auto c = f.cli->connect(f.path);
      EXPECT_TRUE(c.is_ok()) << c.status().to_string();
      conns.push_back(c.value());
    }
    EXPECT_TRUE(f.wait([&] {
      for (Connection* c : conns)
        if (!c->ready()) return false;
      return true;
    }));
  }
};

// Every connection makes a call, then all are quiet for 300 ms (nothing in
// flight, idle keepalive 30 s away): the tick has nothing to look at. The
// walk of every connection visited each of the 64 about 300 times.
TEST(ClientTimers, QuietConnectionsAreNotVisited) {
  Many m(EngineOptions{});
  for (Connection* c : m.conns) {
    Pending p;
    Call call{kProg, kVers, kEcho};
    call.done = &on_done;
    call.ctx = &p;
    ASSERT_EQ(c->call(call), 0);
    ASSERT_TRUE(m.f.wait([&] { return p.done; })) << "a call never completed";
    ASSERT_EQ(p.reply.status, CallStatus::kOk);
  }
  const uint64_t before = stat(*m.f.cli, "timer_visits");
  m.f.wait([] { return false; }, 300);
  const uint64_t visits = stat(*m.f.cli, "timer_visits") - before;
  // Each connection's call filed it once (its deadline, keepalive), at most.
  EXPECT_LE(visits, static_cast<uint64_t>(2 * kConns)) << "the tick looked at quiet connections " << visits << " times";
}

// Among the quiet ones, one call with a 100 ms deadline that the server
// holds: it times out, and a connection whose server stays silent while a
// call is owed is probed (keepalive_ms), all through the filed timers.
TEST(ClientTimers, DeadlinesAndKeepaliveStillFire) {
  EngineOptions co;
  co.keepalive_ms = 200;
  co.keepalive_timeout_ms = 5000;
  Many m(co);
  Pending p;
  Call call{kProg, kVers, kLater};
  call.timeout_ns = 100'000'000;
  call.no_retry = true;
  call.done = &on_done;
  call.ctx = &p;
  ASSERT_EQ(m.conns[kConns / 2]->call(call), 0);
  ASSERT_TRUE(m.f.wait([&] { return p.done; }, 5000)) << "the call's deadline never fired";
  EXPECT_EQ(p.reply.status, CallStatus::kTimedOut) << call_status_name(p.reply.status);

  // A call the server holds for longer than keepalive_ms: a probe goes out
  // (a first call answered, so its grant has room for one).
  ASSERT_EQ(m.f.call(Call{kProg, kVers, kEcho}).reply.status, CallStatus::kOk);
  Pending q;
  Call held{kProg, kVers, kLater};
  held.done = &on_done;
  held.ctx = &q;
  const uint64_t probes = stat(*m.f.cli, "keepalive_probes");
  ASSERT_EQ(m.conns[0]->call(held), 0);
  ASSERT_TRUE(m.f.wait([&] { return stat(*m.f.cli, "keepalive_probes") > probes; }, 5000)) << "no keepalive probe";
  for (ServerCall* sc : m.f.later) ASSERT_OK(sc->reply({}));
  m.f.later.clear();
  ASSERT_TRUE(m.f.wait([&] { return q.done; }, 5000));
  EXPECT_EQ(q.reply.status, CallStatus::kOk) << call_status_name(q.reply.status);
}

}  // namespace
}  // namespace tern::rpc
