// Two engines on two lcores: the runtime starts EAL and launches a server
// engine on lcore 1; a client engine on the main lcore issues a mix of inline
// and chunked calls with many in flight and checks every result. Engines
// share nothing, so the only cross-thread traffic is the driver's shared
// memory (and the stop flag): what the TSan build checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "runtime/eal.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kProg = 0x20000077, kVers = 1, kEcho = 1, kSum = 2, kFill = 3;
uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 13 + i * 5 + (i >> 9)); }

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }
void sum(void*, ServerCall* c) {
  uint32_t s = 0;
  for (uint8_t b : c->bulk()) s += b;
  (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(&s), 4));
}
void fill(void*, ServerCall* c) {
  uint32_t seed;
  std::memcpy(&seed, c->args().data(), 4);
  auto b = c->bulk_buffer(c->bulk_capacity());
  for (size_t i = 0; i < b.size(); ++i) b[i] = pat(seed, i);
  (void)c->reply({}, b);
}

struct Slot {
  bool busy = false;
  uint32_t kind = 0, seed = 0, want = 0;
  uint8_t* bulk = nullptr;
  uint8_t args[16];
  int* done = nullptr;
  std::string* error = nullptr;
};

void on_done(void* ctx, const CallReply& r) {
  auto* s = static_cast<Slot*>(ctx);
  s->busy = false;
  ++*s->done;
  auto fail = [&](const std::string& m) {
    if (s->error->empty()) *s->error = m;
  };
  if (r.status != CallStatus::kOk) return fail(std::string("call failed: ") + call_status_name(r.status));
  if (s->kind == kEcho) {
    if (r.results.size() != 16 || std::memcmp(r.results.data(), s->args, 16) != 0) fail("echo mismatch");
  } else if (s->kind == kSum) {
    uint32_t got;
    if (r.results.size() != 4) return fail("sum size");
    std::memcpy(&got, r.results.data(), 4);
    if (got != s->want) fail("sum mismatch");
  } else {
    if (r.bulk_recv_len != 4096) return fail("fill length");
    for (size_t i = 0; i < 4096; ++i)
      if (s->bulk[i] != pat(s->seed, i)) return fail("fill data mismatch at " + std::to_string(i));
  }
}

TEST(RpcLcores, ClientAndServerEnginesOnTwoLcores) {
  runtime::EalOptions eo;
  eo.lcores = "0-1";
  eo.huge = runtime::HugeMode::kOff;
  auto rt = runtime::Runtime::start(eo);
  ASSERT_TRUE(rt.is_ok()) << rt.status().to_string();
  auto workers = (*rt)->worker_lcores();
  ASSERT_FALSE(workers.empty());

  std::string path = "/tmp/tern-rpc-lcores-" + std::to_string(getpid()) + ".sock";
  std::string spec = "shm:path=" + path;
  std::atomic<int> server_state{0};  // 1 listening, 2 failed
  ASSERT_TRUE((*rt)->launch(workers[0], [&]() -> int {
                 EngineOptions so;
                 so.arena_bytes = 96u << 20;
                 so.max_bulk = 64u << 10;
                 auto srv = Engine::create(so);
                 if (!srv) return server_state = 2, 1;
                 (*srv)->handle(kProg, kVers, kEcho, echo, nullptr);
                 (*srv)->handle(kProg, kVers, kSum, sum, nullptr);
                 (*srv)->handle(kProg, kVers, kFill, fill, nullptr);
                 if (!(*srv)->listen(spec)) return server_state = 2, 1;
                 server_state = 1;
                 while (!(*rt)->stop_requested()) (*srv)->poll();
                 return 0;
               }).is_ok());
  auto t0 = std::chrono::steady_clock::now();
  while (server_state == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) usleep(1000);
  ASSERT_EQ(server_state.load(), 1);

  EngineOptions co;
  co.arena_bytes = 64u << 20;
  auto cli = Engine::create(co).value();
  Connection* conn = cli->connect(spec).value();
  while (!conn->ready() && !conn->failed() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    cli->poll();
  ASSERT_TRUE(conn->ready()) << conn->error().to_string();

  constexpr int kCalls = 6000, kDepth = 16;
  std::vector<Slot> slots(kDepth);
  int done = 0, issued = 0;
  std::string error;
  for (auto& s : slots) {
    s.bulk = static_cast<uint8_t*>(cli->alloc(4096));
    s.done = &done;
    s.error = &error;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done < kCalls && error.empty() && std::chrono::steady_clock::now() < deadline) {
    for (auto& s : slots) {
      if (s.busy || issued == kCalls) continue;
      Call c;
      c.prog = kProg, c.vers = kVers, c.done = on_done, c.ctx = &s;
      s.kind = static_cast<uint32_t>(issued % 3) + 1;
      s.seed = static_cast<uint32_t>(issued);
      c.proc = s.kind;
      if (s.kind == kEcho) {
        for (int i = 0; i < 16; ++i) s.args[i] = pat(s.seed, i);
        c.args = std::span<const uint8_t>(s.args, 16);
      } else if (s.kind == kSum) {
        s.want = 0;
        for (size_t i = 0; i < 4096; ++i) s.want += (s.bulk[i] = pat(s.seed, i));
        c.bulk_send = std::span<const uint8_t>(s.bulk, 4096);
      } else {
        std::memset(s.bulk, 0, 4096);
        std::memcpy(s.args, &s.seed, 4);
        c.args = std::span<const uint8_t>(s.args, 4);
        c.bulk_recv = std::span<uint8_t>(s.bulk, 4096);
      }
      ASSERT_EQ(conn->call(c), 0);
      s.busy = true;
      ++issued;
    }
    cli->poll();
  }
  EXPECT_EQ(error, "");
  EXPECT_EQ(done, kCalls);
  conn->close();
  for (int i = 0; i < 1000; ++i) cli->poll();
  (*rt)->request_stop();
  EXPECT_EQ((*rt)->wait_all(), 0);
  cli.reset();
  unlink(path.c_str());
}

}  // namespace
}  // namespace tern::rpc
