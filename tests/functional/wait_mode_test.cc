// Engine wait mode (engine.h: wait_fd, prepare_wait, wait): a client and a
// server engine, each on its own thread, that sleep in epoll whenever
// they are idle still complete every call -- and really sleep; and the
// second look in prepare_wait() finds a reply that arrived before the arm,
// instead of sleeping through it. Over pmd/shm by default; TERN_RPC_DEVICE
// names another device spec without a port (the VM stage), as in rpc_test.
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "engine/engine.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kProg = 0x20000098, kVers = 1, kEcho = 1;
// A sleep that lasts this long means a lost wake-up: everything here is a
// round trip of microseconds.
constexpr int kLostWakeupMs = 3000;

std::string next_spec() {
  static int n = 0;
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  if (dev == nullptr || *dev == 0 || std::string_view(dev) == "shm")
    return "shm:path=/tmp/tern-wait-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
  return std::string(dev) + ",port=" + std::to_string(20400 + n++);
}

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }

// A server with the echo and a client connected to it, both polled by the
// test's own thread.
struct Pair {
  std::string spec;
  std::unique_ptr<Engine> srv, cli;
  Connection* conn = nullptr;
};
void connect_pair(Pair* p) {
  p->spec = next_spec();
  p->srv = Engine::create({.arena_bytes = 64u << 20}).value();
  p->cli = Engine::create({.arena_bytes = 64u << 20}).value();
  p->srv->handle(kProg, kVers, kEcho, &echo, nullptr);
  ASSERT_TRUE(p->srv->listen(p->spec).is_ok());
  p->conn = p->cli->connect(p->spec).value();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!p->conn->ready() && !p->conn->failed() && std::chrono::steady_clock::now() < end)
    p->cli->poll(), p->srv->poll();
  ASSERT_TRUE(p->conn->ready());
}

// What one engine's host loop did.
struct HostCounts {
  uint64_t polls = 0;     // poll() calls
  uint64_t sleeps = 0;    // epoll_wait calls made after prepare_wait() said idle
  uint64_t wakeups = 0;   // ... that ended because the engine's fd was readable
  uint64_t timeouts = 0;  // ... that ended by timeout: a lost wake-up
  uint64_t rechecks = 0;  // prepare_wait() said "work came meanwhile"
};

// The protocol of engine.h, with the engine's fd inside the host's own epoll
// set (next to `extra_fd`, the host's own business), until done().
void host_loop(Engine* eng, int extra_fd, HostCounts* n, const std::function<bool()>& done) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  int efd = eng->wait_fd();
  ASSERT_GE(efd, 0) << "no wait mode";
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = efd;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, efd, &ev), 0);
  if (extra_fd >= 0) {
    ev.data.fd = extra_fd;
    ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, extra_fd, &ev), 0);
  }
  while (!done()) {
    ++n->polls;
    if (eng->poll() > 0) continue;
    auto idle = eng->prepare_wait();
    ASSERT_TRUE(idle.is_ok()) << idle.status().to_string();
    if (!*idle) {
      ++n->rechecks;
      continue;
    }
    ++n->sleeps;
    epoll_event got[2];
    int k = epoll_wait(ep, got, 2, kLostWakeupMs);
    if (k == 0) ++n->timeouts;
    for (int i = 0; i < k; ++i)
      if (got[i].data.fd == efd) ++n->wakeups;
  }
  close(ep);
}

TEST(WaitMode, BothSidesSleepBetweenCallsAndEveryCallCompletes) {
  const std::string spec = next_spec();
  // Its engines run on two threads, each sleeping on its own; a pmd/sim
  // world is stepped by one thread only (docs/sim.md), so over sim the two
  // would race on the world (ASan saw it). The sim's own wait mode is
  // tern-sim --wait-mode.
  if (spec.starts_with("sim:")) GTEST_SKIP() << "a sim world has one thread; this test needs two";
  constexpr int kCalls = 300;
  std::atomic<bool> listening{false}, failed{false};
  int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(stop_fd, 0);
  std::atomic<bool> stop{false};
  // The client's engine is made before the server listens: the server's
  // first sleep waits for the connect, a matter of microseconds. Made after,
  // that sleep also waited out the client engine's creation (64 MiB arena),
  // which under TSan on a loaded machine took over kLostWakeupMs and was
  // counted as a lost wake-up.
  auto cli = Engine::create({.arena_bytes = 64u << 20}).value();
  HostCounts srv_n;
  std::thread server([&] {
    auto srv = Engine::create({.arena_bytes = 64u << 20}).value();
    srv->handle(kProg, kVers, kEcho, &echo, nullptr);
    if (!srv->listen(spec).is_ok()) {
      failed = true;
      listening = true;
      return;
    }
    listening = true;
    host_loop(srv.get(), stop_fd, &srv_n, [&] { return stop.load(); });
  });
  while (!listening) std::this_thread::yield();
  ASSERT_FALSE(failed) << "server could not listen on " << spec;

  Connection* conn = cli->connect(spec).value();
  HostCounts cli_n;
  // Connecting sleeps too: kEstablished must wake the client.
  host_loop(cli.get(), -1, &cli_n, [&] { return conn->ready() || conn->failed(); });
  ASSERT_TRUE(conn->ready()) << conn->error().to_string();

  struct Done {
    bool done = false;
    CallStatus status = CallStatus::kOk;
    uint32_t value = 0;
  } d;
  HostCounts connect_n = cli_n;
  cli_n = {};
  for (uint32_t i = 0; i < kCalls; ++i) {
    d = {};
    Call c{kProg, kVers, kEcho};
    c.args = {reinterpret_cast<const uint8_t*>(&i), sizeof i};
    c.ctx = &d;
    c.done = [](void* ctx, const CallReply& r) {
      auto* p = static_cast<Done*>(ctx);
      p->done = true;
      p->status = r.status;
      if (r.results.size() == 4) std::memcpy(&p->value, r.results.data(), 4);
    };
    ASSERT_EQ(conn->call(c), 0);
    host_loop(cli.get(), -1, &cli_n, [&] { return d.done; });
    ASSERT_EQ(d.status, CallStatus::kOk) << "call " << i;
    ASSERT_EQ(d.value, i);
  }
  conn->close();
  host_loop(cli.get(), -1, &cli_n, [&] { return conn->failed(); });
  stop = true;
  const uint64_t one = 1;
  ASSERT_EQ(write(stop_fd, &one, sizeof one), 8);
  server.join();
  close(stop_fd);
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);

  auto say = [](const char* who, const HostCounts& n) {
    return std::string(who) + ": " + std::to_string(n.polls) + " polls, " + std::to_string(n.sleeps) + " sleeps, " +
           std::to_string(n.wakeups) + " wake-ups, " + std::to_string(n.timeouts) + " timeouts, " +
           std::to_string(n.rechecks) + " second looks that found work";
  };
  const std::string counts = say("client", cli_n) + "; " + say("server", srv_n) + "; connect: " + say("client", connect_n);
  std::printf("%d calls; %s\n", kCalls, counts.c_str());
  SCOPED_TRACE(counts);
  // No sleep may have outlasted the round trip it was waiting for.
  EXPECT_EQ(cli_n.timeouts, 0u);
  EXPECT_EQ(srv_n.timeouts, 0u);
  EXPECT_EQ(connect_n.timeouts, 0u);
  // They slept, and were woken by the engine: the server between calls
  // (the client has a reply to take before it sends the next call), the
  // client when the reply is slower than its way to prepare_wait().
  EXPECT_GE(srv_n.wakeups + cli_n.wakeups, uint64_t{kCalls} / 4);
  // And did not spin: a busy loop polls hundreds of times per round trip
  // with a peer that wakes from sleep; a host in wait mode a handful (the
  // reply, the Send completion every 16 calls, a second look now and then).
  EXPECT_LE(cli_n.polls, uint64_t{kCalls} * 8);
  EXPECT_LE(srv_n.polls, uint64_t{kCalls} * 8);
}

TEST(WaitMode, SecondLookFindsAReplyThatCameBeforeTheArm) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  auto& [spec, srv, cli, conn] = p;
  // Both idle: arming finds nothing, and the fd stays quiet.
  for (int i = 0; i < 100; ++i) cli->poll(), srv->poll();
  auto idle = cli->prepare_wait();
  ASSERT_TRUE(idle.is_ok()) << idle.status().to_string();
  EXPECT_TRUE(*idle);
  epoll_event ev;
  EXPECT_EQ(epoll_wait(cli->wait_fd(), &ev, 1, 0), 0) << "an idle armed engine's fd is readable";
  cli->poll();  // consumes the (absent) wake-up

  bool done = false;
  uint32_t x = 42;
  Call c{kProg, kVers, kEcho};
  c.args = {reinterpret_cast<const uint8_t*>(&x), sizeof x};
  c.ctx = &done;
  c.done = [](void* ctx, const CallReply& r) { *static_cast<bool*>(ctx) = r.status == CallStatus::kOk; };
  ASSERT_EQ(conn->call(c), 0);
  // The server answers; the client does not poll, so the reply waits for it
  // (on the wire, in its CQ, or in pmd/shm's ring) when it arms.
  uint64_t replies0 = srv->stats().replies.get();
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (srv->stats().replies.get() == replies0 && std::chrono::steady_clock::now() < end) srv->poll();
  ASSERT_GT(srv->stats().replies.get(), replies0);
  for (int i = 0; i < 100; ++i) srv->poll();  // the reply's Send on its way (verbs)
  idle = cli->prepare_wait();
  ASSERT_TRUE(idle.is_ok());
  EXPECT_FALSE(*idle) << "prepare_wait() would have slept with the reply already there";
  EXPECT_TRUE(done) << "the second look ran the call's completion";
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
}

// A sleeping engine's own deadlines wake it: prepare_wait() arms the
// engine's timer for the call's timeout (relative to one reading of the
// engine's ticks), and the wake-up runs the deadline. The
// server never answers (it is not polled after the connection is made).
TEST(WaitMode, ASleepingClientWakesForItsCallsDeadline) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  auto& [spec, srv, cli, conn] = p;

  struct Got {
    bool done = false;
    CallStatus status = CallStatus::kOk;
  } got;
  uint32_t x = 42;
  Call c{kProg, kVers, kEcho};
  c.args = {reinterpret_cast<const uint8_t*>(&x), sizeof x};
  c.timeout_ns = 300'000'000;
  c.ctx = &got;
  c.done = [](void* ctx, const CallReply& r) {
    auto* g = static_cast<Got*>(ctx);
    g->done = true, g->status = r.status;
  };
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(conn->call(c), 0);
  HostCounts n;
  host_loop(cli.get(), -1, &n, [&] { return got.done; });
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(got.status, CallStatus::kTimedOut);
  EXPECT_GE(n.sleeps, 1u) << "the client never slept: nothing tested";
  EXPECT_EQ(n.timeouts, 0u) << "the engine's timer did not wake it (slept " << kLostWakeupMs << " ms)";
  // One sleep, ended by the timer (two if the timer's clock ran a little
  // ahead of the ticks); many means it woke early, again and again.
  EXPECT_LE(n.sleeps, 3u) << "the timer fired before the deadline";
  EXPECT_GE(ms, 290);
  EXPECT_LT(ms, kLostWakeupMs);
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
}

// A host poller's eventfd (add_poller) is drained when the engine wakes,
// but only if epoll said it fired: reading every poller's eventfd on every
// wake-up was a system call each, most of them EAGAIN. One signalled after
// the wake-up is left readable, so the next sleep ends at once and drains
// it: late by a poll, never lost.
TEST(WaitMode, AWakeUpReadsOnlyThePollersEventfdsThatFired) {
  auto eng = Engine::create({.arena_bytes = 16u << 20}).value();
  const int a = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), b = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  auto none = [](void*) { return 0; };
  eng->add_poller(none, nullptr, a);
  eng->add_poller(none, nullptr, b);
  for (int i = 0; i < 10; ++i) eng->poll();
  const uint64_t one = 1;
  uint64_t v = 0;
  ASSERT_EQ(write(b, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  auto slept = eng->wait(kLostWakeupMs);
  ASSERT_TRUE(slept.is_ok()) << slept.status().to_string();
  EXPECT_TRUE(*slept) << "the engine did not sleep: nothing tested";
  // a's completion comes after the wake-up, before the poll that drains.
  ASSERT_EQ(write(a, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  eng->poll();
  EXPECT_EQ(read(b, &v, sizeof v), -1) << "the eventfd that woke the engine was not drained";
  EXPECT_EQ(read(a, &v, sizeof v), static_cast<ssize_t>(sizeof v)) << "an eventfd epoll did not report was read";
  // Put back: the next sleep must end at once for it, and drain it.
  ASSERT_EQ(write(a, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  const auto t0 = std::chrono::steady_clock::now();
  slept = eng->wait(kLostWakeupMs);
  ASSERT_TRUE(slept.is_ok());
  eng->poll();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(kLostWakeupMs / 2))
      << "a pending poller's eventfd did not end the sleep";
  EXPECT_EQ(read(a, &v, sizeof v), -1) << "the pending eventfd was not drained by the wake-up it caused";
  // A poller that found work had its eventfd signalled for it, most
  // likely: drained before the engine sleeps, or the sleep would end at
  // once for nothing.
  eng.reset();
  eng = Engine::create({.arena_bytes = 16u << 20}).value();
  static bool pending = false;
  eng->add_poller([](void*) { return std::exchange(pending, false) ? 1 : 0; }, nullptr, a);
  for (int i = 0; i < 10; ++i) eng->poll();
  ASSERT_EQ(write(a, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  pending = true;
  EXPECT_EQ(eng->poll(), 1);
  auto idle = eng->prepare_wait();
  ASSERT_TRUE(idle.is_ok()) << idle.status().to_string();
  EXPECT_TRUE(*idle);
  EXPECT_EQ(read(a, &v, sizeof v), -1) << "a poller's eventfd, signalled for work it did, was left to end the sleep";
  eng->poll();
  eng.reset();
  close(a);
  close(b);
}

}  // namespace
}  // namespace tern::rpc
