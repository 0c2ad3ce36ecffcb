// The client request's state machine (lib/engine/request_machine.h): the
// transitions the engine is designed to make, written out here on their
// own, against the table that ReqMachine::enter checks. Every designed
// transition is taken (from kFree, along designed ones only) and allowed;
// every other one, from every state, is caught by the always-on check --
// so a table entry changed either way fails a test.
#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "engine/request_machine.h"

namespace tern::rpc {
namespace {

using S = ReqState;

// The designed machine (docs/engine.md, "A call, client side").
const std::vector<std::pair<S, S>>& designed() {
  static const std::vector<std::pair<S, S>> edges = {
      {S::kFree, S::kBacklog},             // call() or a keepalive probe
      {S::kBacklog, S::kSent},             // its chain is posted
      {S::kBacklog, S::kCompleted},        // refused, expired, or the connection failed for good
      {S::kSent, S::kInvalidating},        // its reply came
      {S::kSent, S::kOrphaned},            // the connection was lost (or refused the post)
      {S::kSent, S::kAbandoned},           // expired with nothing registered
      {S::kInvalidating, S::kOrphaned},    // the connection was lost before the fence
      {S::kInvalidating, S::kCompleted},   // fenced: the callback runs
      {S::kOrphaned, S::kBacklog},         // drained, sent again on the new connection
      {S::kOrphaned, S::kCompleted},       // drained, fails (or keeps its reply's results)
      {S::kCompleted, S::kFree},           // both owners let go
      {S::kAbandoned, S::kCompleted},      // its late reply came, or the drain
  };
  return edges;
}

bool is_designed(S from, S to) {
  for (const auto& [f, t] : designed())
    if (f == from && t == to) return true;
  return false;
}

std::vector<S> all_states() {
  std::vector<S> v;
  for (int i = 0; i < kReqStates; ++i) v.push_back(static_cast<S>(i));
  return v;
}

// The shortest designed path from kFree to `to` (kFree itself: empty).
std::vector<S> path_to(S to) {
  std::vector<int> prev(kReqStates, -2);
  std::deque<S> q{S::kFree};
  prev[static_cast<int>(S::kFree)] = -1;
  while (!q.empty()) {
    S s = q.front();
    q.pop_front();
    for (const auto& [f, t] : designed())
      if (f == s && prev[static_cast<int>(t)] == -2) {
        prev[static_cast<int>(t)] = static_cast<int>(s);
        q.push_back(t);
      }
  }
  std::vector<S> path;
  if (prev[static_cast<int>(to)] == -2) return path;
  for (int s = static_cast<int>(to); s != static_cast<int>(S::kFree); s = prev[s]) path.insert(path.begin(), static_cast<S>(s));
  return path;
}

// A machine walked from kFree to `s` through enter() alone.
ReqMachine at(S s) {
  ReqMachine m;
  for (S step : path_to(s)) m.enter(step);
  return m;
}

TEST(RequestMachine, EveryStateIsReachableFromFree) {
  for (S s : all_states()) {
    ReqMachine m = at(s);
    EXPECT_EQ(m.state(), s) << req_state_name(s);
  }
}

TEST(RequestMachine, TheTableIsTheDesignedMachine) {
  for (S f : all_states())
    for (S t : all_states())
      EXPECT_EQ(req_transition_allowed(f, t), is_designed(f, t)) << req_state_name(f) << " -> " << req_state_name(t);
}

TEST(RequestMachine, EveryDesignedTransitionIsTaken) {
  for (const auto& [f, t] : designed()) {
    SCOPED_TRACE(std::string(req_state_name(f)) + " -> " + req_state_name(t));
    ReqMachine m = at(f);
    ASSERT_EQ(m.state(), f);
    m.enter(t);
    EXPECT_EQ(m.state(), t);
  }
}

TEST(RequestMachine, OneCallsWholeLifeAndARetry) {
  ReqMachine m;
  EXPECT_EQ(m.state(), S::kFree);
  for (S s : {S::kBacklog, S::kSent, S::kOrphaned, S::kBacklog, S::kSent, S::kInvalidating, S::kCompleted, S::kFree}) {
    m.enter(s);
    EXPECT_EQ(m.state(), s);
  }
}

TEST(RequestMachineDeathTest, EveryOtherTransitionIsCaught) {
  int caught = 0;
  for (S f : all_states())
    for (S t : all_states()) {
      if (is_designed(f, t)) continue;
      SCOPED_TRACE(std::string(req_state_name(f)) + " -> " + req_state_name(t));
      ReqMachine m = at(f);
      ASSERT_EQ(m.state(), f);
      const std::string msg = std::string("CHECK failed.*request: ") + req_state_name(f) + " -> " + req_state_name(t) +
                              " is not a transition";
      EXPECT_DEATH(m.enter(t), msg);
      ++caught;
    }
  EXPECT_EQ(caught, kReqStates * kReqStates - static_cast<int>(designed().size()));
}

// The mistakes the table exists for, by name.
TEST(RequestMachineDeathTest, ACompletedCallIsNeverSentOrAnsweredAgain) {
  ReqMachine done = at(S::kCompleted);
  EXPECT_DEATH(done.enter(S::kSent), "completed -> sent");
  EXPECT_DEATH(done.enter(S::kInvalidating), "completed -> invalidating");
  ReqMachine sent = at(S::kSent);
  EXPECT_DEATH(sent.enter(S::kFree), "sent -> free");          // freed while the server may write its chunks
  EXPECT_DEATH(sent.enter(S::kCompleted), "sent -> completed");  // completed with registrations unfenced (I3)
}

}  // namespace
}  // namespace tern::rpc
