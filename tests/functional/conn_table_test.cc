// The server's connection table against a peer that wants all of it: one process fills the table with idle connections, or asks
// for more than its per-peer limit, or keeps a call in flight on every
// connection it holds -- and another process, another peer (pmd/shm names a
// peer by its process), still connects and is answered, or is refused with
// an error that says why.
//
// The greedy peer is a child process forked before the server exists (so it
// inherits none of the server's descriptors): it runs a client engine of its
// own, opens its connections, reports through a pipe how many came up and
// why the others failed, and keeps polling until the test closes its
// control pipe. The server and the well-behaved peer are this process.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

uint64_t stat_of(const Engine& e, const char* name) {
  for (const StatEntry& s : e.stats_view())
    if (std::strcmp(s.name, name) == 0) return s.counter->get();
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

// What the greedy peer says once its connections have settled.
struct Report {
  uint32_t ready = 0, failed = 0, calls_sent = 0;
  int last_errno = 0;   // of the last connection that failed
  char last_error[240] = {};
};

// The greedy peer (a child process): `n` connections to `path`, each with
// a kLater call in flight when `busy`. Never returns.
[[noreturn]] void greedy_peer(const std::string& path, uint32_t n, bool busy, int report_fd, int control_fd) {
  Report rep;
  // The server listens right after the fork: wait for its socket.
  const std::string file = path.substr(9);
  struct stat sb;
  for (int i = 0; i < 5000 && stat(file.c_str(), &sb) != 0; ++i) usleep(1000);
  EngineOptions co;
  co.arena_bytes = 64u << 20;
  co.max_connections = n + 8;
  co.reconnect = false;  // a reaped connection stays gone: the counts stay exact
  auto eng = Engine::create(co);
  if (!eng) _exit(3);
  Engine* e = eng->get();
  std::vector<Connection*> conns;
  for (uint32_t i = 0; i < n; ++i) {
    auto c = e->connect(path);
    if (!c) _exit(4);
    conns.push_back(*c);
  }
  auto settled = [&] {
    for (Connection* c : conns)
      if (!c->ready() && !c->failed()) return false;
    return true;
  };
  poll_until({e}, settled, 15000);
  std::vector<Pending> pend(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (conns[i]->ready()) {
      ++rep.ready;
      if (busy) {
        Call c{kProg, kVers, kLater};
        c.done = on_done, c.ctx = &pend[i];
        if (conns[i]->call(c) == 0) ++rep.calls_sent;
      }
    } else {
      ++rep.failed;
      Status why = conns[i]->error();
      rep.last_errno = why.sys_errno();
      std::snprintf(rep.last_error, sizeof rep.last_error, "%s", why.to_string().c_str());
    }
  }
  // Sent before the report: the server has them when the test reads it.
  poll_until({e}, [] { return false; }, 50);
  if (write(report_fd, &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) _exit(5);
  // Polls on until the test closes the control pipe (or a minute passes).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 100; ++i) e->poll();
    pollfd p{control_fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) break;
  }
  _exit(0);
}

// A server engine of this process and the greedy peer's process.
struct ConnTable : ::testing::Test {
  std::string path = next_spec();
  std::unique_ptr<Engine> srv;
  std::vector<ServerCall*> later;
  pid_t child = -1;
  int report_fd = -1, control_fd = -1;
  Report rep;

  void SetUp() override {
    if (!on_shm()) GTEST_SKIP() << "a peer per process is pmd/shm's identity";
  }

  // Forks the greedy peer, then starts the server (so that the child holds
  // none of its descriptors), and waits for the peer's report.
  void start(EngineOptions so, uint32_t n, bool busy) {
    int rp[2], cp[2];
    ASSERT_EQ(pipe2(rp, O_CLOEXEC), 0);
    ASSERT_EQ(pipe2(cp, O_CLOEXEC), 0);
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(rp[0]);
      close(cp[1]);
      greedy_peer(path, n, busy, rp[1], cp[0]);
    }
    close(rp[1]);
    close(cp[0]);
    report_fd = rp[0];
    control_fd = cp[1];
    ASSERT_EQ(fcntl(report_fd, F_SETFL, O_NONBLOCK), 0);
    so.arena_bytes = 64u << 20;
    srv = Engine::create(so).value();
    srv->handle(kProg, kVers, kEcho, &Fixture::echo, nullptr);
    srv->handle(kProg, kVers, kLater, &hold, this);
    ASSERT_OK(srv->listen(path));
    size_t got = 0;
    ASSERT_TRUE(poll_until({srv.get()}, [&] {
      ssize_t r = read(report_fd, reinterpret_cast<char*>(&rep) + got, sizeof rep - got);
      if (r > 0) got += static_cast<size_t>(r);
      return got == sizeof rep;
    }, 20000)) << "the greedy peer never reported";
  }

  static void hold(void* ctx, ServerCall* c) { static_cast<ConnTable*>(ctx)->later.push_back(c); }

  // The server alone, for `ms` (the greedy peer's connections go idle).
  void idle_for(int ms) { poll_until({srv.get()}, [] { return false; }, ms); }

  // A connection of this process's own (another peer) and an echo on it.
  struct Own {
    std::unique_ptr<Engine> cli;
    Connection* conn = nullptr;
  };
  Own connect_own() {
    Own o;
    EngineOptions co;
    co.arena_bytes = 64u << 20;
    co.reconnect = false;
    o.cli = Engine::create(co).value();
    o.conn = o.cli->connect(path).value();
    EXPECT_TRUE(poll_until({srv.get(), o.cli.get()}, [&] { return o.conn->ready() || o.conn->failed(); }));
    return o;
  }
  void echo_on(Own& o) {
    Pending p;
    uint8_t args[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    Call c{kProg, kVers, kEcho};
    c.args = args;
    c.done = on_done, c.ctx = &p;
    ASSERT_EQ(o.conn->call(c), 0);
    ASSERT_TRUE(poll_until({srv.get(), o.cli.get()}, [&] { return p.done; })) << "the echo was never answered";
    EXPECT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    EXPECT_EQ(p.results, std::vector<uint8_t>(args, args + 8));
  }

  void TearDown() override {
    for (ServerCall* c : later) (void)c->reply({});
    later.clear();
    if (control_fd >= 0) close(control_fd);
    if (report_fd >= 0) close(report_fd);
    if (child > 0) {
      // It leaves once its control pipe closes; the server is polled
      // meanwhile so that its connections go away cleanly.
      int status = 0;
      bool gone = srv ? poll_until({srv.get()}, [&] { return waitpid(child, &status, WNOHANG) == child; }, 10000)
                      : waitpid(child, &status, 0) == child;
      if (!gone) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
      }
      EXPECT_TRUE(gone && WIFEXITED(status) && WEXITSTATUS(status) == 0) << "greedy peer status " << status;
    }
    if (srv) {
      EXPECT_TRUE(poll_until({srv.get()}, [&] { return stat_of(*srv, "connections") == 0; }))
          << stat_of(*srv, "connections") << " connections left";
      testing::Accounting a = testing::accounting(*srv);
      EXPECT_TRUE(a.idle()) << a.to_string();
    }
    remove_spec(path);
  }
};

// One peer fills the table with idle connections: the next peer still gets
// one (an idle one of the greedy peer's is closed for it) and is answered.
TEST_F(ConnTable, APeerFillingTheTableWithIdleConnectionsDoesNotLockOthersOut) {
  EngineOptions so;
  so.max_connections = 16;
  so.idle_reap_ms = 100;
  start(so, 16, false);
  ASSERT_EQ(rep.ready, 16u) << rep.last_error;
  idle_for(300);
  Own o = connect_own();
  ASSERT_TRUE(o.conn->ready()) << "refused: " << o.conn->error().to_string();
  echo_on(o);
  EXPECT_EQ(stat_of(*srv, "connections_reaped"), 1u);
  EXPECT_EQ(stat_of(*srv, "connections_refused"), 0u);
  // The one it took was the greedy peer's: it holds 15, and the table is
  // full again once that one has drained.
  EXPECT_TRUE(poll_until({srv.get(), o.cli.get()}, [&] { return stat_of(*srv, "connections") == 16; }))
      << stat_of(*srv, "connections");
  echo_on(o);
}

// A per-peer limit: the peer asking for more gets the limit and an error
// that names it (EDQUOT); another peer still connects.
TEST_F(ConnTable, APeerPastItsLimitIsRefusedWithAReasonAndOthersStillConnect) {
  EngineOptions so;
  so.max_connections = 16;
  so.max_connections_per_peer = 4;
  start(so, 6, false);
  EXPECT_EQ(rep.ready, 4u);
  EXPECT_EQ(rep.failed, 2u);
  EXPECT_EQ(rep.last_errno, EDQUOT) << rep.last_error;
  EXPECT_NE(std::strstr(rep.last_error, "max_connections_per_peer"), nullptr) << rep.last_error;
  EXPECT_EQ(stat_of(*srv, "connections_refused_peer_limit"), 2u);
  EXPECT_EQ(stat_of(*srv, "connections_refused"), 2u);
  Own o = connect_own();
  ASSERT_TRUE(o.conn->ready()) << "refused: " << o.conn->error().to_string();
  echo_on(o);
  EXPECT_EQ(stat_of(*srv, "connections_reaped"), 0u);
}

// A peer whose every connection has a call in flight is not idle, however
// long its calls take: the newcomer is refused (the table is full, EAGAIN)
// and nothing of the busy peer is closed. Once its calls are answered and
// its connections idle, the newcomer gets one.
TEST_F(ConnTable, APeerWithCallsInFlightIsNotReaped) {
  EngineOptions so;
  so.max_connections = 16;
  so.idle_reap_ms = 100;
  start(so, 16, true);
  ASSERT_EQ(rep.ready, 16u) << rep.last_error;
  ASSERT_EQ(rep.calls_sent, 16u);
  ASSERT_TRUE(poll_until({srv.get()}, [&] { return later.size() == 16; })) << later.size() << " calls held";
  idle_for(300);
  Own refused = connect_own();
  ASSERT_TRUE(refused.conn->failed());
  EXPECT_EQ(refused.conn->error().sys_errno(), EAGAIN) << refused.conn->error().to_string();
  EXPECT_NE(refused.conn->error().message().find("connection table is full"), std::string::npos)
      << refused.conn->error().to_string();
  EXPECT_EQ(stat_of(*srv, "connections_reaped"), 0u);
  EXPECT_EQ(stat_of(*srv, "connections"), 16u);
  refused.conn->close();
  // Answered: the busy peer's connections are idle from now on.
  for (ServerCall* c : later) ASSERT_OK(c->reply({}));
  later.clear();
  idle_for(300);
  Own o = connect_own();
  ASSERT_TRUE(o.conn->ready()) << "refused: " << o.conn->error().to_string();
  echo_on(o);
  EXPECT_EQ(stat_of(*srv, "connections_reaped"), 1u);
}

}  // namespace
}  // namespace tern::rpc
