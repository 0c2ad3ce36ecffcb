// Keepalive measures the server's silence only while it owes an answer: a
// client connection that sat idle for longer than keepalive_ms +
// keepalive_timeout_ms and then makes a call is not declared dead for the
// idle time before it. Found over rxe in the VM stage: of 256 connections
// made one after another, those up for more than 10 s before their first
// call (one credit, no room for a probe) were declared dead by the first
// poll after it, reconnected and sent their calls again.
// (Timings are generous: the server answers within 50 ms and only a stall
// of the test thread near a second fails either test -- keepalive_ms +
// keepalive_timeout_ms in the first, where no probe can go out, and
// keepalive_ms in the second.)
#include <gtest/gtest.h>

#include <string_view>

#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

uint64_t stat(Engine& e, std::string_view name) {
  for (const StatEntry& s : e.stats_view())
    if (name == s.name) return s.counter->get();
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

// The server takes its time, as a loaded one does (a reply that comes in
// the same poll pass as the call hides the defect): it holds the call for
// `ms`, both engines polled, then answers it.
void answer_after(Fixture& f, int ms) {
  ASSERT_TRUE(f.wait([&] { return !f.later.empty(); })) << "the server never got the call";
  f.wait([] { return false; }, ms);
  ASSERT_OK(f.later.back()->reply({}));
  f.later.pop_back();
}

// The first call on a connection idle since it came up: it has one credit
// (no reply has granted more), so the call takes the only one and no probe
// can go out. no_retry makes a wrong "dead" visible as the call's status.
TEST(KeepaliveIdle, FirstCallAfterALongIdleIsAnswered) {
  EngineOptions so, co;
  co.keepalive_ms = 500;
  co.keepalive_timeout_ms = 500;
  Fixture f(so, co);
  // Idle well past keepalive_ms + keepalive_timeout_ms, both engines polled.
  f.wait([] { return false; }, 1250);
  Pending p;
  Call c{kProg, kVers, kLater};
  c.no_retry = true;
  c.done = &on_done;
  c.ctx = &p;
  ASSERT_EQ(f.conn->call(c), 0);
  answer_after(f, 50);
  ASSERT_TRUE(f.wait([&] { return p.done; }, 5000)) << "the call never completed";
  EXPECT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  EXPECT_EQ(stat(*f.cli, "keepalive_failures"), 0u);
  EXPECT_EQ(stat(*f.cli, "declared_dead"), 0u);
  EXPECT_EQ(f.conn->state(), ConnState::kReady);
}

// The same once the connection has been used and gone idle again (its
// grant now has room for a probe): silence is counted from when the call
// went out, so a server that answers within keepalive_ms is not probed.
TEST(KeepaliveIdle, CallsAfterAnIdleGapAreNotDeclaredDead) {
  EngineOptions so, co;
  co.keepalive_ms = 1000;
  co.keepalive_timeout_ms = 1000;
  co.keepalive_idle_ms = 0;  // no idle probes: the gap stays silent
  Fixture f(so, co);
  ASSERT_EQ(f.call(Call{kProg, kVers, kEcho}).reply.status, CallStatus::kOk);
  f.wait([] { return false; }, 1500);
  const uint64_t probes = stat(*f.cli, "keepalive_probes");
  Pending p;
  Call c{kProg, kVers, kLater};
  c.no_retry = true;
  c.done = &on_done;
  c.ctx = &p;
  ASSERT_EQ(f.conn->call(c), 0);
  answer_after(f, 50);
  ASSERT_TRUE(f.wait([&] { return p.done; }, 5000)) << "the call never completed";
  EXPECT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  EXPECT_EQ(stat(*f.cli, "keepalive_probes"), probes) << "a probe went out for the idle time before the call";
  EXPECT_EQ(stat(*f.cli, "keepalive_failures"), 0u);
}

}  // namespace
}  // namespace tern::rpc
