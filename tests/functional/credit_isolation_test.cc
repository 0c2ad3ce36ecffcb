// The server's receive credits against a greedy or a stalled peer, over
// pmd/shm.
//
// The attacker is another process (so another peer to the server: pmd/shm
// names a peer by its process), forked before any engine exists here, that
// plays RPC-over-RDMA by hand (raw_peer.h):
// - greedy: many connections, each asking for 0xffffffff credits; once
//   granted it goes quiet (it stops polling), so that nothing -- no reply --
//   can lower its grants again. A well-behaved client of this process that
//   connects afterwards must still be granted its whole window at once,
//   and its calls complete; the grants never add up to more receive
//   buffers than the server has.
// - stalled: a few connections send calls and never take the replies (on
//   pmd/shm the server's Send lands only when the peer polls). Each
//   connection is dropped once server_rw_timeout_ms passes, with one
//   warning naming the attacker's process, and its credits, calls and
//   buffers come back; the well-behaved client is served throughout.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "chunk_handlers.h"
#include "raw_peer.h"
#include "test_arena.h"

namespace tern::rpc {
namespace {

using namespace tern::rdma;
using namespace tern::test;
namespace rr = tern::rpcrdma;

constexpr uint32_t kProg = 0x20000067, kVers = 1;
constexpr uint32_t kEcho = 1;

// The server's receive queue: 256 buffers, up to 32 connections (so 32
// first credits kept for connections yet to come), 32 credits at most per
// connection.
constexpr uint32_t kRecvBuffers = 256;
constexpr uint32_t kMaxConns = 32;
constexpr int kGreedyConns = 12;  // 12 x 32 credits asked for, 256 buffers
constexpr int kStalledConns = 4;
constexpr int kStalledCalls = 4;  // per connection, after the first
constexpr uint32_t kDeadlineMs = 1000;

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

std::vector<uint8_t> call_msg(uint32_t xid, uint32_t credit) {
  const uint8_t args[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  return rdma_msg(plain_header(xid, credit), rpc_call(xid, kProg, kVers, kEcho, args));
}

// One connection of the attacker and its first call, answered: returns the
// grant the reply carried (0 on failure).
uint32_t open_and_call(const std::string& spec, uint32_t credit, std::vector<std::unique_ptr<RawPeer>>* peers) {
  auto p = std::make_unique<RawPeer>([] {});
  if (!p->open(spec).is_ok() || !p->connect(rr::CmPrivateData{true, 4096, 4096}).is_ok()) return 0;
  const uint32_t xid = 100 + static_cast<uint32_t>(peers->size()) * 100;
  auto sent = p->send(call_msg(xid, credit), 0, 5000);
  if (!sent || *sent != WcStatus::kSuccess) return 0;
  auto r = p->recv(5000);
  if (!r || r->bytes.size() < 16 || be32(r->bytes.data()) != xid) return 0;
  peers->push_back(std::move(p));
  return be32(r->bytes.data() + 8);
}

// The greedy attacker (a child process): kGreedyConns connections, each
// asking for every credit; it reports the sum of its grants and then stops
// progressing until the parent lets it go (or kills it).
[[noreturn]] void greedy(const std::string& spec, int go_fd, int ready_fd) {
  char c;
  if (read(go_fd, &c, 1) != 1) _exit(2);
  std::vector<std::unique_ptr<RawPeer>> peers;
  uint32_t sum = 0;
  for (int i = 0; i < kGreedyConns; ++i) {
    const uint32_t g = open_and_call(spec, 0xffffffff, &peers);
    if (g == 0) _exit(3);
    sum += g;
  }
  if (write(ready_fd, &sum, sizeof sum) != static_cast<ssize_t>(sizeof sum)) _exit(4);
  (void)read(go_fd, &c, 1);  // stops progressing here
  _exit(0);
}

// The stalled attacker: kStalledConns connections; on each a first call
// answered (its grant grows), then kStalledCalls more posted, and it never
// polls again, so that their replies are never taken.
[[noreturn]] void stalled(const std::string& spec, int go_fd, int ready_fd) {
  char c;
  if (read(go_fd, &c, 1) != 1) _exit(2);
  std::vector<std::unique_ptr<RawPeer>> peers;
  for (int i = 0; i < kStalledConns; ++i)
    if (open_and_call(spec, 32, &peers) <= uint32_t{kStalledCalls}) _exit(3);
  // Posted without waiting: waiting would poll the QP, and take replies.
  for (size_t i = 0; i < peers.size(); ++i)
    for (int k = 1; k <= kStalledCalls; ++k)
      if (!peers[i]->post_send(call_msg(static_cast<uint32_t>(1000 + i * 100 + k), 32))) _exit(4);
  const uint32_t ok = 1;
  if (write(ready_fd, &ok, sizeof ok) != static_cast<ssize_t>(sizeof ok)) _exit(5);
  (void)read(go_fd, &c, 1);
  _exit(0);
}

class CreditIsolation : public ::testing::Test {
 protected:
  void TearDown() override {
    if (child > 0) {
      kill(child, SIGKILL);
      waitpid(child, nullptr, 0);
    }
    if (go_w >= 0) close(go_w);
    if (ready_r >= 0) close(ready_r);
    good.reset();
    srv.reset();
    if (!spec.empty()) remove_spec(spec);
  }

  void pump() {
    srv->poll();
    if (good) good->poll();
  }
  bool wait(const std::function<bool()>& pred, int ms) { return poll_until([this] { pump(); }, pred, ms); }

  // Forks the attacker (before any engine or socket of ours exists, so that
  // it inherits nothing), then starts the server.
  void start(void (*attacker)(const std::string&, int, int)) {
    spec = fresh_spec("credit-isolation");
    int go[2], ready[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe2(ready, O_NONBLOCK), 0);
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(go[1]);
      close(ready[0]);
      attacker(spec, go[0], ready[1]);
    }
    close(go[0]);
    close(ready[1]);
    go_w = go[1];
    ready_r = ready[0];
    EngineOptions so;
    so.recv_buffers = kRecvBuffers;
    so.max_connections = kMaxConns;
    so.server_rw_timeout_ms = kDeadlineMs;
    srv = Engine::create(so).value();
    srv->handle(kProg, kVers, kEcho, echo_handler, nullptr);
    ASSERT_TRUE(srv->listen(spec).is_ok());
  }

  // The attacker does its part; its report.
  uint32_t run_attacker() {
    EXPECT_EQ(write(go_w, "G", 1), 1);
    uint32_t report = 0;
    EXPECT_TRUE(wait([&] { return read(ready_r, &report, sizeof report) == static_cast<ssize_t>(sizeof report); },
                     20000))
        << "the attacker did not get its calls in";
    return report;
  }

  void connect_good() {
    good = Engine::create({.arena_bytes = kTestArenaBytes}).value();
    conn = good->connect(spec).value();
    ASSERT_TRUE(wait([&] { return conn->ready() || conn->failed(); }, 5000));
    ASSERT_TRUE(conn->ready()) << conn->error().to_string();
  }

  // n echo calls at once (those beyond the grant wait in the client's
  // backlog); false if they did not all complete within ms.
  void good_calls(int n, int ms, bool* done) {
    *done = false;
    std::vector<Done> d(static_cast<size_t>(n));
    std::vector<uint32_t> args(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      args[i] = 0x5000 + static_cast<uint32_t>(i);
      Call c{kProg, kVers, kEcho};
      c.args = std::span(reinterpret_cast<const uint8_t*>(&args[i]), 4);
      c.done = on_done, c.ctx = &d[i];
      ASSERT_EQ(conn->call(c), 0);
    }
    if (!wait([&] {
          max_grant = std::max(max_grant, conn->info().credits);
          for (const Done& x : d)
            if (!x.done) return false;
          return true;
        },
              ms))
      return;
    *done = true;
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(d[i].r.status, CallStatus::kOk) << call_status_name(d[i].r.status);
      ASSERT_EQ(d[i].results.size(), 4u);
      ASSERT_EQ(std::memcmp(d[i].results.data(), &args[i], 4), 0);
    }
  }

  // The server's grants: all of them, and those of the attacker's process.
  void grants(uint64_t* all, uint64_t* attacker) {
    *all = *attacker = 0;
    const std::string pid = "pid " + std::to_string(child);
    for (const ConnectionStats& s : srv->connection_stats()) {
      if (!s.server) continue;
      *all += s.credits;
      if (s.peer.find(pid + " ") != std::string::npos) *attacker += s.credits;
    }
  }

  std::string spec;
  pid_t child = -1;
  int go_w = -1, ready_r = -1;
  std::unique_ptr<Engine> srv, good;
  Connection* conn = nullptr;
  uint32_t max_grant = 0;  // the most credits the well-behaved client was granted (good_calls)
};

TEST_F(CreditIsolation, APeerAskingForEveryCreditOnManyConnectionsLeavesAnotherItsGrant) {
  if (!on_shm()) GTEST_SKIP() << "a peer per process is pmd/shm's identity";
  ASSERT_NO_FATAL_FAILURE(start(greedy));
  const uint32_t taken = run_attacker();
  ASSERT_GT(taken, kRecvBuffers / 2) << "the attacker was granted little: no attack";
  uint64_t all = 0, attacker = 0;
  grants(&all, &attacker);
  EXPECT_EQ(attacker, taken);
  EXPECT_LE(all, kRecvBuffers);

  // A well-behaved client connects while the attacker holds its grants and
  // has gone quiet (no reply can lower them now). The pool is contested
  // (the attacker wants more), so its grant follows its use: 64 calls at
  // once keep its window busy, and it is granted the whole window
  // (EngineOptions::credits, 32) while they run; they all complete.
  ASSERT_NO_FATAL_FAILURE(connect_good());
  bool done = false;
  ASSERT_NO_FATAL_FAILURE(good_calls(64, 10000, &done));
  ASSERT_TRUE(done) << "the well-behaved client's calls did not complete";
  EXPECT_EQ(max_grant, 32u) << "the well-behaved client was not granted its window (the attacker took " << taken
                            << " of " << kRecvBuffers << " credits)";
  grants(&all, &attacker);
  EXPECT_LE(all, kRecvBuffers) << "the grants add up to more receive buffers than are posted";
  EXPECT_EQ(srv->stats().protocol_errors.get(), 0u);
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0) << "the attacker exited on its own";
}

TEST_F(CreditIsolation, APeerThatNeverTakesItsRepliesLosesItsGrant) {
  if (!on_shm()) GTEST_SKIP() << "the attacker stops taking replies by not polling pmd/shm";
  LogCapture log;
  ASSERT_NO_FATAL_FAILURE(start(stalled));
  ASSERT_NO_FATAL_FAILURE(connect_good());
  bool done = false;
  ASSERT_NO_FATAL_FAILURE(good_calls(8, 5000, &done));
  ASSERT_TRUE(done);
  ASSERT_EQ(run_attacker(), 1u);
  // The attacker's calls are answered and their replies wait for it.
  uint64_t all = 0, attacker = 0;
  grants(&all, &attacker);
  EXPECT_GT(attacker, uint64_t{kStalledConns}) << "the attacker holds no more than first credits: no attack";

  // Every attacker connection is dropped once the deadline passes, with
  // one warning each naming its process and what it did not do.
  ASSERT_TRUE(wait([&] { return srv->stats().rw_timeouts.get() == uint64_t{kStalledConns}; }, 3 * kDeadlineMs + 5000))
      << "rw_timeouts " << srv->stats().rw_timeouts.get() << ", " << testing::accounting(*srv).to_string()
      << ", connections " << srv->stats().connections.get() << "\n"
      << log.dump();
  auto w = log.warnings({"pid " + std::to_string(child), "take the reply"});
  EXPECT_EQ(w.size(), size_t{kStalledConns}) << log.dump();
  // Its calls, send buffers and credits come back with the attacker still
  // there, not polling.
  ASSERT_TRUE(wait(
      [&] {
        uint64_t a = 0, at = 0;
        grants(&a, &at);
        return srv->stats().connections.get() == 1 && at == 0 && testing::accounting(*srv).idle();
      },
      5000))
      << testing::accounting(*srv).to_string() << ", connections " << srv->stats().connections.get();
  EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0) << "the attacker exited on its own";

  // The well-behaved connection is unharmed, and granted its window.
  max_grant = 0;
  ASSERT_NO_FATAL_FAILURE(good_calls(64, 5000, &done));
  ASSERT_TRUE(done);
  EXPECT_TRUE(conn->ready());
  EXPECT_EQ(max_grant, 32u);
  EXPECT_EQ(srv->stats().protocol_errors.get(), 0u);
}

}  // namespace
}  // namespace tern::rpc
