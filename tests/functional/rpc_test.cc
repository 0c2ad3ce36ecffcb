// Client and server engines over pmd/shm, both driven from the test thread:
// inline calls, read/write/reply chunks with data checked byte for byte,
// remote invalidation on and off, credits, many calls in flight.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kProg = 0x20000099, kVers = 1;
constexpr uint32_t kEcho = 1;       // results = args; bulk results = bulk args (if any)
constexpr uint32_t kFill = 2;       // args: u32 n, u8 seed -> bulk results: n bytes of pattern(seed)
constexpr uint32_t kBig = 3;        // args: u32 n -> n bytes of inline results (pattern 7)
constexpr uint32_t kLater = 4;      // replies on a later poll (async handler)
constexpr uint32_t kSum = 5;        // read chunk -> u32 sum of bytes, u32 length

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8)); }

std::string sock_path() {
  static int n = 0;
  return "/tmp/tern-rpc-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
}

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

struct Fixture {
  std::unique_ptr<Engine> srv, cli;
  Connection* conn = nullptr;
  std::vector<ServerCall*> later;
  std::string path;

  explicit Fixture(EngineOptions so = {}, EngineOptions co = {}) {
    so.arena_bytes = co.arena_bytes = 48u << 20;
    srv = Engine::create(so).value();
    cli = Engine::create(co).value();
    path = "shm:path=" + sock_path();
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
  ~Fixture() { unlink(path.substr(9).c_str()); }

  bool wait(const std::function<bool()>& pred, int ms = 5000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      srv->poll();
      cli->poll();
      if (pred()) return true;
    }
    return false;
  }

  static void echo(void*, ServerCall* c) { ASSERT_TRUE(c->reply(c->args(), c->bulk()).is_ok()); }
  static void fill(void*, ServerCall* c) {
    uint32_t n;
    uint8_t seed;
    ASSERT_GE(c->args().size(), 5u);
    std::memcpy(&n, c->args().data(), 4);
    seed = c->args()[4];
    ASSERT_LE(n, c->bulk_capacity());
    auto b = c->bulk_buffer(n);
    for (uint32_t i = 0; i < n; ++i) b[i] = pat(seed, i);
    ASSERT_TRUE(c->reply({}, b).is_ok());
  }
  static void big(void*, ServerCall* c) {
    uint32_t n;
    std::memcpy(&n, c->args().data(), 4);
    std::vector<uint8_t> r(n);
    for (uint32_t i = 0; i < n; ++i) r[i] = pat(7, i);
    ASSERT_TRUE(c->reply(r).is_ok());
  }
  static void later_h(void* ctx, ServerCall* c) { static_cast<Fixture*>(ctx)->later.push_back(c); }
  static void sum(void*, ServerCall* c) {
    uint32_t s = 0;
    for (uint8_t b : c->bulk()) s += b;
    uint32_t out[2] = {s, static_cast<uint32_t>(c->bulk().size())};
    ASSERT_TRUE(c->reply(std::span(reinterpret_cast<const uint8_t*>(out), 8)).is_ok());
  }

  Pending call(Call c) {
    Pending p;
    c.prog = kProg, c.vers = kVers, c.done = on_done, c.ctx = &p;
    EXPECT_EQ(conn->call(c), 0);
    EXPECT_TRUE(wait([&] { return p.done; })) << "call never completed";
    return p;
  }
};

TEST(Rpc, InlineEcho) {
  Fixture f;
  std::vector<uint8_t> args(32);
  for (size_t i = 0; i < args.size(); ++i) args[i] = pat(1, i);
  Call c;
  c.proc = kEcho;
  c.args = args;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk);
  EXPECT_EQ(p.results, args);
  EXPECT_EQ(f.cli->stats().local_inv_chains.get(), 0u) << "an inline call registers nothing";
}

TEST(Rpc, ReadChunkIsPulledByTheServer) {
  Fixture f;
  for (uint32_t len : {4096u, 65536u, 1u << 20}) {
    auto* bulk = static_cast<uint8_t*>(f.cli->alloc(len));
    ASSERT_NE(bulk, nullptr);
    uint32_t want = 0;
    for (uint32_t i = 0; i < len; ++i) want += (bulk[i] = pat(len, i));
    Call c;
    c.proc = kSum;
    c.bulk_send = std::span<const uint8_t>(bulk, len);
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    ASSERT_EQ(p.results.size(), 8u);
    uint32_t got[2];
    std::memcpy(got, p.results.data(), 8);
    EXPECT_EQ(got[0], want) << len;
    EXPECT_EQ(got[1], len);
  }
  EXPECT_GE(f.srv->stats().rdma_reads.get(), 3u);
}

TEST(Rpc, WriteChunkIsFilledByTheServer) {
  Fixture f;
  for (uint32_t len : {4096u, 65536u, 1u << 20}) {
    auto* bulk = static_cast<uint8_t*>(f.cli->alloc(len));
    std::memset(bulk, 0xee, len);
    uint8_t args[5];
    std::memcpy(args, &len, 4);
    args[4] = 9;
    Call c;
    c.proc = kFill;
    c.args = args;
    c.bulk_recv = std::span<uint8_t>(bulk, len);
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    EXPECT_EQ(p.reply.bulk_recv_len, len);
    for (uint32_t i = 0; i < len; ++i) ASSERT_EQ(bulk[i], pat(9, i)) << "offset " << i << " of " << len;
  }
}

TEST(Rpc, ReplyChunkCarriesLargeResults) {
  Fixture f;
  uint32_t n = 40000;
  Call c;
  c.proc = kBig;
  c.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
  c.max_results = n;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  ASSERT_EQ(p.results.size(), n);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(p.results[i], pat(7, i)) << i;
  EXPECT_EQ(f.cli->stats().reply_chunks.get(), 1u);
}

}  // namespace
}  // namespace tern::rpc
