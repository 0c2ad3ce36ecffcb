// The order a server engine serves received calls of several peers in
// (lib/engine/peer_service.h, docs/engine.md "Service order"), over pmd/shm
// where a peer is a process: a flooding peer (a child process) has its calls
// in the server's receive queue when one call of another peer (this
// process) arrives; the server's next poll pass must serve that call after
// at most one flood call (one round), not after all of them, and hold the
// rest of the flood for later passes. And a connection torn down while calls
// of it are held: they go back (the engine's accounting is idle after), and
// none reaches another connection, such as one made in its slot afterwards.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/engine_testing.h"
#include "flood_peer.h"
#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

using namespace floodpeer;
constexpr uint64_t kNewIds = 5'000, kGoodId = 1;
constexpr int kQuantum = 1;  // ConnCore::kServiceQuantum

// Pipes between the test and the flooding child.
struct Pipes {
  int up[2] = {-1, -1};    // child -> test
  int down[2] = {-1, -1};  // test -> child
  bool make() { return pipe(up) == 0 && pipe(down) == 0; }
};

struct Burst : ::testing::Test {
  Fixture f;
  Server s;
  Pipes p;
  pid_t child = -1;
  int burst = 0;
  std::string flood_peer;

  void SetUp() override {
    if (!on_shm()) GTEST_SKIP() << "peers are processes on pmd/shm";
    f.srv->handle(kProg, kVers, kMark, &Server::mark, &s);
    ASSERT_TRUE(p.make());
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(p.up[0]);
      close(p.down[1]);
      flooder(f.path, p.up[1], p.down[0]);
    }
    close(p.up[1]);
    close(p.down[0]);
    // Serve its warm-up until it says 'w'.
    char ch = 0;
    pollfd pf{p.up[0], POLLIN, 0};
    ASSERT_TRUE(poll_until({f.srv.get(), f.cli.get()}, [&] { return ::poll(&pf, 1, 0) == 1; }, 30000))
        << "the flooding peer did not warm up";
    ASSERT_TRUE(read_byte(p.up[0], &ch, 1000) && ch == 'w') << "the flooding peer failed: " << int(ch);
    ASSERT_FALSE(s.log.empty());
    flood_peer = s.log.back().peer;
    // The server is not polled from here until the burst and the good call
    // are both in its receive queue.
    ASSERT_EQ(write(p.down[1], "g", 1), 1);
    ASSERT_TRUE(read_byte(p.up[0], &ch, 30000)) << "the flooding peer did not send its burst";
    burst = ch;
    ASSERT_GE(burst, 2) << "the flooding peer had fewer than 2 calls out at once";
  }

  void TearDown() override {
    if (child <= 0) return;
    (void)!write(p.down[1], "q", 1);
    int st = -1;
    if (!poll_until({f.srv.get(), f.cli.get()}, [&] { return waitpid(child, &st, WNOHANG) == child; }, 30000)) {
      kill(child, SIGKILL);
      waitpid(child, &st, 0);
    }
    close(p.up[0]);
    close(p.down[1]);
  }

  // The good peer's one call, moved out of its engine.
  void good_call(Pending* gp, const uint64_t* id) {
    Call k{kProg, kVers, kMark};
    k.args = std::span(reinterpret_cast<const uint8_t*>(id), 8);
    k.done = on_done, k.ctx = gp;
    ASSERT_EQ(f.conn->call(k), 0);
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (std::chrono::steady_clock::now() < end) f.cli->poll();
  }

  // Polls the server alone, one numbered pass at a time, until the good
  // call ran; returns that pass.
  int serve_until_good() {
    for (int i = 1; i <= 1000; ++i) {
      s.pass = i;
      f.srv->poll();
      for (const Handled& h : s.log)
        if (h.id == kGoodId && h.pass == i) return i;
    }
    return 0;
  }
  int flood_in_pass(int pass, bool before_good) const {
    int n = 0;
    for (const Handled& h : s.log) {
      if (h.pass != pass) continue;
      if (before_good && h.id == kGoodId) break;
      n += h.id >= kFloodIds;
    }
    return n;
  }
};

TEST_F(Burst, AnotherPeersCallIsServedAfterAtMostOneRoundOfTheFlood) {
  Pending gp;
  const uint64_t id = kGoodId;
  good_call(&gp, &id);
  const int pass = serve_until_good();
  ASSERT_NE(pass, 0) << "the good call never ran";
  const int ahead = flood_in_pass(pass, true);
  EXPECT_LE(ahead, kQuantum) << ahead << " of the flooding peer's " << burst
                             << " calls were served ahead of the other peer's one call in its pass";
  // The flood was in hand when the good call ran: the rest was held, not
  // served in that pass (work for the next one).
  EXPECT_LT(flood_in_pass(pass, false), burst) << "the whole flood was served in the good call's pass";
  ASSERT_TRUE(f.wait([&] { return gp.done; }, 5000));
  EXPECT_EQ(gp.reply.status, CallStatus::kOk);
}

TEST_F(Burst, HeldCallsOfATornDownConnectionGoBackAndReachNoOtherConnection) {
  Pending gp;
  const uint64_t id = kGoodId;
  good_call(&gp, &id);
  const int pass = serve_until_good();
  ASSERT_NE(pass, 0) << "the good call never ran";
  const int served = flood_in_pass(pass, false);
  ASSERT_LT(served, burst) << "nothing of the flood was held back for a later pass";
  // The flooding peer dies with calls of it held by the server.
  kill(child, SIGKILL);
  int st = -1;
  waitpid(child, &st, 0);
  child = -1;
  s.pass = 0;
  ASSERT_TRUE(f.wait([&] { return gp.done; }, 5000));
  // Its connection goes; everything it held comes back.
  ASSERT_TRUE(f.wait([&] { return f.srv->connection_stats().size() == 1; }, 10000))
      << "the dead peer's connection was not reclaimed";
  // A new connection (likely in the freed slot) makes calls of its own.
  auto e2 = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  auto c2 = e2->connect(f.path);
  ASSERT_TRUE(c2.is_ok());
  Connection* conn2 = c2.value();
  ASSERT_TRUE(poll_until({f.srv.get(), e2.get()}, [&] { return conn2->ready() || conn2->failed(); }, 10000));
  ASSERT_TRUE(conn2->ready());
  std::vector<uint64_t> ids(64);
  std::vector<Pending> ps(64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = kNewIds + i;
    Call k{kProg, kVers, kMark};
    k.args = std::span(reinterpret_cast<const uint8_t*>(&ids[i]), 8);
    k.done = on_done, k.ctx = &ps[i];
    ASSERT_EQ(conn2->call(k), 0);
  }
  ASSERT_TRUE(poll_until({f.srv.get(), e2.get()}, [&] {
    for (auto& q : ps)
      if (!q.done) return false;
    return true;
  }));
  for (auto& q : ps) EXPECT_EQ(q.reply.status, CallStatus::kOk);
  // Every flood call that ran, ran as the flooding peer's; the new
  // connection's calls ran once each.
  int news = 0;
  for (const Handled& h : s.log) {
    if (h.id >= kFloodIds) {
      EXPECT_EQ(h.peer, flood_peer) << "flood call " << h.id - kFloodIds << " ran on another peer's connection";
    }
    if (h.id >= kNewIds && h.id < kFloodIds) ++news;
  }
  EXPECT_EQ(news, 64);
  e2.reset();
  ASSERT_TRUE(f.wait([&] { return f.srv->connection_stats().size() == 1; }, 10000));
  // Nothing is left out of the server's pools.
  testing::Accounting a;
  ASSERT_TRUE(f.wait([&] { return (a = testing::accounting(*f.srv)).idle(); }, 5000)) << a.to_string();
}

}  // namespace
}  // namespace tern::rpc
