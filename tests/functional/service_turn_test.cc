// Whose turn a server engine's poll pass serves when calls of several peers
// are in hand (lib/engine/peer_service.h, docs/engine.md "Service order
// among peers"), over pmd/shm where a peer is a process: a flooding peer (a
// child process), served alone until now, has a burst of calls in the
// server's receive queue when one call of another peer (this process)
// arrives. The pass that serves that call must serve no flood call, before
// it or after it: the flooder was served last, so it sits that pass out and
// has the next turn. A thread that polls the server and then its client
// (tern-isolation-measure) sees the reply only after the server's whole
// pass, so a flood call served next to it costs the call its full time.
// And the flooder is not starved: the very next pass serves it.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine_testing.h"
#include "flood_peer.h"
#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

using namespace floodpeer;

// Numbered server passes, alone, until the call `id` ran; returns that pass
// (0: it never did). A function of its own so that callgrind can count what
// those passes cost (--toggle-collect).
[[gnu::noinline]] int serve_until(Engine* srv, Server* s, size_t from, uint64_t id) {
  for (int i = 1; i <= 1000; ++i) {
    s->pass = i;
    srv->poll();
    for (size_t j = from; j < s->log.size(); ++j)
      if (s->log[j].id == id) return i;
  }
  return 0;
}

TEST(ServiceTurn, APeerServedLastSitsOutThePassOfAPeerThatWaitedAndHasTheNext) {
  if (!on_shm()) GTEST_SKIP() << "peers are processes on pmd/shm";
  Fixture f;
  Server s;
  f.srv->handle(kProg, kVers, kMark, &Server::mark, &s);
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    flooder(f.path, up[1], down[0]);
  }
  close(up[1]);
  close(down[0]);
  // Serve its warm-up (the flooder alone: served as it comes) until 'w'.
  char ch = 0;
  pollfd pf{up[0], POLLIN, 0};
  ASSERT_TRUE(poll_until({f.srv.get(), f.cli.get()}, [&] { return ::poll(&pf, 1, 0) == 1; }, 30000))
      << "the flooding peer did not warm up";
  ASSERT_TRUE(read_byte(up[0], &ch, 1000) && ch == 'w') << "the flooding peer failed: " << int(ch);
  ASSERT_FALSE(s.log.empty());
  // The server is not polled until the burst and the good call are both in
  // its receive queue.
  ASSERT_EQ(write(down[1], "g", 1), 1);
  ASSERT_TRUE(read_byte(up[0], &ch, 30000)) << "the flooding peer did not send its burst";
  const int burst = ch;
  ASSERT_GE(burst, 2) << "the flooding peer had fewer than 2 calls out at once";
  Pending gp;
  const uint64_t good_id = 1;
  Call k{kProg, kVers, kMark};
  k.args = std::span(reinterpret_cast<const uint8_t*>(&good_id), 8);
  k.done = on_done, k.ctx = &gp;
  ASSERT_EQ(f.conn->call(k), 0);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < end) f.cli->poll();
  const size_t logged = s.log.size();

  const int pass = serve_until(f.srv.get(), &s, logged, good_id);
  ASSERT_NE(pass, 0) << "the good call never ran";
  auto flood_in = [&](int p) {
    int n = 0;
    for (size_t j = logged; j < s.log.size(); ++j) n += s.log[j].pass == p && s.log[j].id >= kFloodIds;
    return n;
  };
  int earlier = 0;
  for (int p = 1; p < pass; ++p) earlier += flood_in(p);
  EXPECT_EQ(earlier, 0) << "flood calls were served in passes before the good call's";
  EXPECT_EQ(flood_in(pass), 0) << flood_in(pass) << " of the flooding peer's " << burst
                               << " calls were served in the good call's pass (the flooder was served last)";
  // The flooder's turn is the next pass.
  s.pass = pass + 1;
  f.srv->poll();
  EXPECT_GE(flood_in(pass + 1), 1) << "the flooding peer was not served in the pass after the good call's";
  s.pass = 0;
  ASSERT_TRUE(f.wait([&] { return gp.done; }, 5000));
  EXPECT_EQ(gp.reply.status, CallStatus::kOk);

  (void)!write(down[1], "q", 1);
  int st = -1;
  if (!poll_until({f.srv.get(), f.cli.get()}, [&] { return waitpid(child, &st, WNOHANG) == child; }, 30000)) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
  }
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the flooding peer's calls did not all succeed";
  close(up[0]);
  close(down[1]);
  // Nothing is left out of the server's pools.
  testing::Accounting a;
  ASSERT_TRUE(f.wait([&] { return (a = testing::accounting(*f.srv)).idle(); }, 5000)) << a.to_string();
}

}  // namespace
}  // namespace tern::rpc
