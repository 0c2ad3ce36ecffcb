// The server call's state machine (lib/engine/server_call_machine.h): its
// table allows exactly the transitions the engine's lifecycles take -- listed
// here on their own, edge by edge, with the event that takes each -- enter()
// walks every one of them, and a transition outside the table is caught
// (TERN_CHECK: on in release builds too).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/server_call_machine.h"

namespace tern::rpc {
namespace {

using S = SrvState;

constexpr S kAll[] = {S::kFree, S::kWaitMemory, S::kPulling, S::kInHandler, S::kReplyQueued, S::kSent, S::kOrphaned};
static_assert(std::size(kAll) == kSrvStates);

struct Edge {
  S from, to;
  const char* by;  // what takes it (ServerConn::process and its steps)
};

// Every transition a server call takes, written from the engine's
// lifecycles rather than read off the table.
const Edge kEdges[] = {
    {S::kFree, S::kWaitMemory, "kReceived: a decoded call"},
    {S::kFree, S::kSent, "kErrorAnswer: RDMA_ERROR to a message that never became a call"},
    {S::kWaitMemory, S::kPulling, "start(): memory taken, read chunks to pull"},
    {S::kWaitMemory, S::kInHandler, "start(): memory taken, dispatch() or answer_now()"},
    {S::kWaitMemory, S::kFree, "kConnLost: nothing posted yet"},
    {S::kPulling, S::kInHandler, "kPulled: dispatch(), or answer_now() for a bad RDMA_NOMSG message"},
    {S::kPulling, S::kFree, "kDrained: its READs can no longer land"},
    {S::kInHandler, S::kSent, "kReplied: posted at once"},
    {S::kInHandler, S::kReplyQueued, "kReplied: no send-queue room"},
    {S::kInHandler, S::kFree, "kDropped: drop()"},
    {S::kInHandler, S::kOrphaned, "kConnLost: the handler still holds it"},
    {S::kReplyQueued, S::kSent, "kRoom"},
    {S::kReplyQueued, S::kFree, "kConnLost: never posted"},
    {S::kSent, S::kFree, "kSendReleased, or kDrained after a refused post"},
    {S::kOrphaned, S::kFree, "kDropped: reply() or drop() of an orphan"},
};

// A way from kFree to each state through the lifecycles above.
std::vector<S> path_to(S s) {
  switch (s) {
    case S::kFree: return {};
    case S::kWaitMemory: return {S::kWaitMemory};
    case S::kPulling: return {S::kWaitMemory, S::kPulling};
    case S::kInHandler: return {S::kWaitMemory, S::kInHandler};
    case S::kReplyQueued: return {S::kWaitMemory, S::kInHandler, S::kReplyQueued};
    case S::kSent: return {S::kSent};
    case S::kOrphaned: return {S::kWaitMemory, S::kInHandler, S::kOrphaned};
  }
  return {};
}

std::string name(S s) { return srv_state_name(s); }

TEST(ServerCallMachine, TableAllowsExactlyTheLifecycleTransitions) {
  std::set<std::pair<S, S>> expected;
  for (const Edge& e : kEdges) expected.insert({e.from, e.to});
  for (S from : kAll)
    for (S to : kAll)
      EXPECT_EQ(srv_may_enter(from, to), expected.count({from, to}) == 1)
          << name(from) << " -> " << name(to) << (expected.count({from, to}) ? " is taken by the engine" : " is not");
}

TEST(ServerCallMachine, EnterWalksEveryAllowedTransition) {
  int walked = 0;
  for (const Edge& e : kEdges) {
    SCOPED_TRACE(name(e.from) + " -> " + name(e.to) + " (" + e.by + ")");
    SrvCall sc;
    ASSERT_EQ(sc.state(), S::kFree) << "a new call starts free";
    // Asked first, so that a table missing an edge fails here, by name,
    // instead of stopping the whole binary in enter()'s check.
    for (S s : path_to(e.from)) {
      ASSERT_TRUE(srv_may_enter(sc.state(), s)) << "on the way: " << name(sc.state()) << " -> " << name(s);
      enter(&sc, s);
    }
    ASSERT_EQ(sc.state(), e.from);
    ASSERT_TRUE(srv_may_enter(e.from, e.to));
    enter(&sc, e.to);
    EXPECT_EQ(sc.state(), e.to);
    ++walked;
  }
  // The table allows nothing the walk did not take.
  int allowed = 0;
  for (S from : kAll)
    for (S to : kAll) allowed += srv_may_enter(from, to);
  EXPECT_EQ(walked, allowed);
}

// The lifecycles end to end: each comes back to the pool.
TEST(ServerCallMachine, LifecyclesReturnToThePool) {
  const std::vector<std::vector<S>> lives = {
      {S::kWaitMemory, S::kInHandler, S::kSent, S::kFree},                               // a plain call
      {S::kWaitMemory, S::kPulling, S::kInHandler, S::kReplyQueued, S::kSent, S::kFree},  // read chunks, queued reply
      {S::kSent, S::kFree},                                                              // an RDMA_ERROR answer
      {S::kWaitMemory, S::kInHandler, S::kOrphaned, S::kFree},                           // lost under its handler
      {S::kWaitMemory, S::kFree},                                                        // lost while waiting for memory
      {S::kWaitMemory, S::kPulling, S::kFree},                                           // drained while pulling
      {S::kWaitMemory, S::kInHandler, S::kFree},                                         // dropped by its handler
  };
  SrvCall sc;  // one call, reused as the pool reuses it
  for (const auto& life : lives) {
    for (S s : life) {
      ASSERT_TRUE(srv_may_enter(sc.state(), s)) << name(sc.state()) << " -> " << name(s);
      enter(&sc, s);
    }
    EXPECT_EQ(sc.state(), S::kFree);
  }
}

class ServerCallMachineDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(ServerCallMachineDeathTest, AnsweringTwiceIsCaught) {
  SrvCall sc;
  sc.xid_ = 77;
  enter(&sc, S::kWaitMemory);
  enter(&sc, S::kInHandler);
  enter(&sc, S::kSent);
  EXPECT_DEATH(enter(&sc, S::kInHandler),
               "CHECK failed.*server call [0-9]+ \\(xid 77\\): sent -> in-handler is not a transition");
}

TEST_F(ServerCallMachineDeathTest, FreeingTwiceIsCaught) {
  SrvCall sc;
  EXPECT_DEATH(enter(&sc, S::kFree), "CHECK failed.*free -> free is not a transition");
}

TEST_F(ServerCallMachineDeathTest, FreeingWhileTheDeviceMayWriteIsNotAStep) {
  // A pulling call is freed only by its connection's drain -- through
  // kFree, which the table allows -- never answered before its READs land.
  SrvCall sc;
  enter(&sc, S::kWaitMemory);
  enter(&sc, S::kPulling);
  EXPECT_DEATH(enter(&sc, S::kSent), "CHECK failed.*pulling -> sent is not a transition");
}

}  // namespace
}  // namespace tern::rpc
