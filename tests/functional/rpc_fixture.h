// The client-and-server fixture of the RPC functional tests: two engines
// driven from the test thread, a connection between them, and handlers for
// the procedures the tests call. Over pmd/shm by default; TERN_RPC_DEVICE
// names another device spec without a port (the VM stage of
// scripts/test.sh: "verbs:dev=rxe0,addr=169.254.77.1"), to which each test
// adds a port of its own.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "test_arena.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kProg = 0x20000099, kVers = 1;
constexpr uint32_t kEcho = 1;       // results = args; bulk results = bulk args (if any)
constexpr uint32_t kFill = 2;       // args: u32 n, u8 seed -> bulk results: n bytes of pattern(seed)
constexpr uint32_t kBig = 3;        // args: u32 n -> n bytes of inline results (pattern 7)
constexpr uint32_t kLater = 4;      // replies on a later poll (async handler)
constexpr uint32_t kSum = 5;        // read chunk -> u32 sum of bytes, u32 length

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8)); }

std::string next_spec() {
  static int n = 0;
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  if (dev == nullptr || *dev == 0 || std::string_view(dev) == "shm")
    return "shm:path=/tmp/tern-rpc-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
  return std::string(dev) + ",port=" + std::to_string(20300 + n++);
}

void remove_spec(const std::string& spec) {
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
}

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    ::tern::Status tern_st_ = (expr);                   \
    ASSERT_TRUE(tern_st_.is_ok()) << tern_st_.to_string(); \
  } while (0)

struct Pending {
  bool done = false;
  CallReply reply{};
  std::vector<uint8_t> results;
};

void on_done(void* ctx, const CallReply& r) {
  auto* p = static_cast<Pending*>(ctx);
  p->done = true;
  p->reply = r;
  p->results.assign(r.results.begin(), r.results.end());
}

// Polls the engines until pred() holds (true) or `ms` pass (false).
bool poll_until(std::initializer_list<Engine*> engines, const std::function<bool()>& pred, int ms = 5000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < end) {
    for (Engine* e : engines) e->poll();
    if (pred()) return true;
  }
  return false;
}

struct Fixture {
  std::unique_ptr<Engine> srv, cli;
  Connection* conn = nullptr;
  std::vector<ServerCall*> later;
  std::string path;

  explicit Fixture(EngineOptions so = {}, EngineOptions co = {}) {
    so.arena_bytes = co.arena_bytes = kTestArenaBytes;
    // A device without fast registration (the VM stage's verbs mw=off) serves
    // chunks only through the registration cache, which is for trusted peers.
    if (const char* t = std::getenv("TERN_RPC_TRUSTED_PEERS"); t != nullptr && std::string_view(t) == "1")
      co.trusted_peers = true;
    srv = Engine::create(so).value();
    cli = Engine::create(co).value();
    path = next_spec();
    srv->handle(kProg, kVers, kEcho, &echo, this);
    srv->handle(kProg, kVers, kFill, &fill, this);
    srv->handle(kProg, kVers, kBig, &big, this);
    srv->handle(kProg, kVers, kLater, &later_h, this);
    srv->handle(kProg, kVers, kSum, &sum, this);
    EXPECT_TRUE(srv->listen(path).is_ok());
    auto c = cli->connect(path);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    conn = c.value();
    EXPECT_TRUE(wait([&] { return conn->ready() || conn->failed(); }));
    EXPECT_TRUE(conn->ready()) << conn->error().to_string();
  }
  ~Fixture() { remove_spec(path); }

  // Polls only the client (the server may be gone).
  bool wait_client(const std::function<bool()>& pred, int ms = 5000) { return poll_until({cli.get()}, pred, ms); }
  bool wait(const std::function<bool()>& pred, int ms = 5000) { return poll_until({srv.get(), cli.get()}, pred, ms); }

  static void echo(void*, ServerCall* c) { ASSERT_OK(c->reply(c->args(), c->bulk())); }
  static void fill(void*, ServerCall* c) {
    uint32_t n;
    uint8_t seed;
    ASSERT_GE(c->args().size(), 5u);
    std::memcpy(&n, c->args().data(), 4);
    seed = c->args()[4];
    ASSERT_LE(n, c->bulk_capacity());
    auto b = c->bulk_buffer(n);
    for (uint32_t i = 0; i < n; ++i) b[i] = pat(seed, i);
    ASSERT_OK(c->reply({}, b));
  }
  static void big(void*, ServerCall* c) {
    uint32_t n;
    std::memcpy(&n, c->args().data(), 4);
    std::vector<uint8_t> r(n);
    for (uint32_t i = 0; i < n; ++i) r[i] = pat(7, i);
    ASSERT_OK(c->reply(r));
  }
  static void later_h(void* ctx, ServerCall* c) { static_cast<Fixture*>(ctx)->later.push_back(c); }
  static void sum(void*, ServerCall* c) {
    uint32_t s = 0;
    for (uint8_t b : c->bulk()) s += b;
    uint32_t out[2] = {s, static_cast<uint32_t>(c->bulk().size())};
    ASSERT_OK(c->reply(std::span(reinterpret_cast<const uint8_t*>(out), 8)));
  }

  // A kFill call: the server fills `len` bytes of `bulk` (a write chunk) with
  // pattern `seed`; checks the status, the returned length and every byte.
  void fill_and_check(uint8_t* bulk, uint32_t len, uint8_t seed) {
    std::memset(bulk, 0xee, len);
    uint8_t args[5];
    std::memcpy(args, &len, 4);
    args[4] = seed;
    Call c;
    c.proc = kFill;
    c.args = args;
    c.bulk_recv = std::span<uint8_t>(bulk, len);
    Pending p = call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    EXPECT_EQ(p.reply.bulk_recv_len, len);
    for (uint32_t i = 0; i < len; ++i) ASSERT_EQ(bulk[i], pat(seed, i)) << "offset " << i << " of " << len;
  }

  Pending call(Call c) {
    Pending p;
    c.prog = kProg, c.vers = kVers, c.done = on_done, c.ctx = &p;
    EXPECT_EQ(conn->call(c), 0);
    EXPECT_TRUE(wait([&] { return p.done; })) << "call never completed";
    return p;
  }
};

}  // namespace
}  // namespace tern::rpc
