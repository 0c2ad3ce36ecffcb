// Several server engines, each on its own thread, serving one address
// through a ListenGroup (engine.h): connections are dealt to every engine
// in turn and each is served by the engine that accepted it; an engine
// sleeping in wait mode is woken for the connection handed to it; a group
// serves one spec; an engine that leaves gets no more connections, and
// those waiting for it are refused rather than left hanging.
// Over pmd/shm by default; TERN_RPC_DEVICE names another device spec
// without a port (the VM stage: verbs over rxe).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "test_arena.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kProg = 0x20000077, kVers = 1, kWho = 1;

std::string next_spec() {
  static int n = 0;
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  if (dev == nullptr || *dev == 0 || std::string_view(dev) == "shm")
    return "shm:path=/tmp/tern-lg-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
  return std::string(dev) + ",port=" + std::to_string(20500 + n++);
}

// A server engine on a thread of its own that answers kWho with its index.
struct Server {
  uint32_t index;
  std::unique_ptr<Engine> eng;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> run{true};
  bool sleeps;

  Server(uint32_t i, bool wait_mode) : index(i), sleeps(wait_mode) {
    EngineOptions o;
    o.arena_bytes = 32u << 20;
    eng = Engine::create(o).value();
    eng->handle(kProg, kVers, kWho, [](void* ctx, ServerCall* c) {
      uint32_t who = *static_cast<uint32_t*>(ctx);
      (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(&who), 4));
    }, &index);
  }
  void start() {
    thread = std::thread([this] {
      while (!stop.load()) {
        if (!run.load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        // Asleep for up to 10 s: only a wake-up makes it answer sooner.
        if (eng->poll() == 0 && sleeps) (void)eng->wait(10000);
      }
    });
  }
  ~Server() {
    stop.store(true);
    if (thread.joinable()) {
      // A sleeper is woken by its engine's own fd only; this test waits.
      thread.join();
    }
  }
};

bool poll_until(Engine* e, const std::function<bool()>& pred, int ms = 10000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    e->poll();
    if (pred()) return true;
  }
  return false;
}

// Which engine answered a call on c (-1: none).
int who(Engine* cli, Connection* c) {
  struct R {
    bool done = false;
    int who = -1;
  } r;
  Call call{kProg, kVers, kWho};
  call.ctx = &r;
  call.done = [](void* ctx, const CallReply& rep) {
    auto* p = static_cast<R*>(ctx);
    p->done = true;
    if (rep.status == CallStatus::kOk && rep.results.size() == 4) std::memcpy(&p->who, rep.results.data(), 4);
  };
  if (c->call(call) != 0) return -1;
  if (!poll_until(cli, [&] { return r.done; })) return -1;
  return r.who;
}

void remove_spec(const std::string& s) {
  if (s.starts_with("shm:path=")) unlink(s.c_str() + 9);
}

TEST(ListenGroup, ConnectionsAreDealtToEveryEngine) {
  const std::string spec = next_spec();
  auto group = ListenGroup::create();
  std::vector<std::unique_ptr<Server>> s;
  for (uint32_t i = 0; i < 3; ++i) {
    s.push_back(std::make_unique<Server>(i, false));
    ASSERT_TRUE(s[i]->eng->listen(spec, group).is_ok());
  }
  for (auto& x : s) x->start();
  auto cli = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  std::vector<Connection*> conns;
  for (int i = 0; i < 6; ++i) {
    auto c = cli->connect(spec);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    ASSERT_TRUE(poll_until(cli.get(), [&] { return (*c)->ready() || (*c)->failed(); }));
    ASSERT_TRUE((*c)->ready()) << (*c)->error().to_string();
    conns.push_back(*c);
  }
  // In turn: 0, 1, 2, 0, 1, 2 -- and each connection is served by its engine alone.
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(who(cli.get(), conns[i]), i % 3) << "connection " << i;
  EXPECT_EQ(group->dealt(), (std::vector<uint64_t>{2, 2, 2}));
  for (auto& x : s) EXPECT_EQ(x->eng->stats().connections.get(), 2u);
  for (Connection* c : conns) c->close();
  cli.reset();
  s.clear();
  remove_spec(spec);
}

TEST(ListenGroup, SleepingEnginesAreWokenForTheirConnections) {
  const std::string spec = next_spec();
  auto group = ListenGroup::create();
  std::vector<std::unique_ptr<Server>> s;
  for (uint32_t i = 0; i < 2; ++i) {
    s.push_back(std::make_unique<Server>(i, true));
    ASSERT_TRUE(s[i]->eng->listen(spec, group).is_ok());
  }
  for (auto& x : s) x->start();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both asleep
  auto cli = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  for (int i = 0; i < 4; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto c = cli->connect(spec);
    ASSERT_TRUE(c.is_ok());
    ASSERT_TRUE(poll_until(cli.get(), [&] { return (*c)->ready() || (*c)->failed(); }, 5000));
    ASSERT_TRUE((*c)->ready());
    EXPECT_EQ(who(cli.get(), *c), i % 2);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3))
        << "a sleeping engine (10 s timeout) took its connection only when its sleep ran out";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // asleep again
  }
  // A sleeping engine's wait returns on its own fd for the stop; close first.
  for (auto& x : s) x->stop.store(true);
  cli.reset();  // the disconnects wake them
  s.clear();
  remove_spec(spec);
}

TEST(ListenGroup, AGroupServesOneSpecAndAMemberThatLeftGetsNoMore) {
  const std::string spec = next_spec(), other = next_spec();
  auto group = ListenGroup::create();
  std::vector<std::unique_ptr<Server>> s;
  for (uint32_t i = 0; i < 3; ++i) s.push_back(std::make_unique<Server>(i, false));
  ASSERT_TRUE(s[0]->eng->listen(spec, group).is_ok());
  Status bad = s[1]->eng->listen(other, group);
  EXPECT_EQ(bad.code(), Errc::kInvalidArgument) << bad.to_string();
  ASSERT_TRUE(s[1]->eng->listen(spec, group).is_ok());
  ASSERT_TRUE(s[2]->eng->listen(spec, group).is_ok());
  EXPECT_EQ(s[2]->eng->listen(spec, group).code(), Errc::kBadState) << "twice";
  for (auto& x : s) x->start();
  s[2].reset();  // leaves the group
  auto cli = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  for (int i = 0; i < 4; ++i) {
    auto c = cli->connect(spec);
    ASSERT_TRUE(c.is_ok());
    ASSERT_TRUE(poll_until(cli.get(), [&] { return (*c)->ready() || (*c)->failed(); }));
    ASSERT_TRUE((*c)->ready());
    EXPECT_EQ(who(cli.get(), *c), i % 2);
  }
  EXPECT_EQ(group->dealt(), (std::vector<uint64_t>{2, 2, 0}));
  cli.reset();
  s.clear();
  remove_spec(spec);
}

// A connection handed to an engine that never picks it up, and then goes:
// the client is refused, not left waiting.
TEST(ListenGroup, AConnectionWaitingForAnEngineThatLeavesIsRefused) {
  const std::string spec = next_spec();
  auto group = ListenGroup::create();
  auto a = std::make_unique<Server>(0, false);
  auto b = std::make_unique<Server>(1, false);
  ASSERT_TRUE(a->eng->listen(spec, group).is_ok());
  ASSERT_TRUE(b->eng->listen(spec, group).is_ok());
  b->run.store(false);  // b's thread does not poll
  a->start();
  b->start();
  EngineOptions co;
  co.reconnect = false;
  auto cli = Engine::create(co).value();
  auto c1 = cli->connect(spec).value();
  ASSERT_TRUE(poll_until(cli.get(), [&] { return c1->ready() || c1->failed(); }));
  ASSERT_TRUE(c1->ready());
  auto c2 = cli->connect(spec).value();
  ASSERT_TRUE(poll_until(cli.get(), [&] { return group->dealt()[1] == 1; }));
  poll_until(cli.get(), [] { return false; }, 200);
  EXPECT_FALSE(c2->ready()) << "b never polled";
  b.reset();  // leaves: the request waiting in its inbox is refused
  ASSERT_TRUE(poll_until(cli.get(), [&] { return c2->failed(); })) << "still waiting for an engine that is gone";
  EXPECT_EQ(who(cli.get(), c1), 0);
  cli.reset();
  a.reset();
  remove_spec(spec);
}

}  // namespace
}  // namespace tern::rpc
