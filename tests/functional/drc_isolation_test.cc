// The duplicate request cache under a hostile neighbour, over pmd/shm: a
// victim's non-idempotent call runs, its reply is lost with the
// connection; before the victim reconnects, another peer (another process:
// peers are processes on shm) makes 4,100 calls of its own through the same
// cache of 4,096 entries. The victim's retransmission must be answered from
// the cache with the first run's results -- the call ran once. With the
// cache shared first-come, the flood evicted the victim's entry and the
// call ran twice.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <vector>

#include "engine/duplicate_cache.h"
#include "engine/engine_testing.h"
#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

using rdma::Fault;

constexpr uint32_t kAdd = 10;  // args: u64 id; results: u32 how many times that (peer, id) ran

bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

struct Server {
  DuplicateCache drc{4096};
  std::map<std::pair<std::string, uint64_t>, uint32_t> runs;
  Connection* victim_conn = nullptr;
  bool drop_victim_reply = false;
  uint64_t total_runs = 0;

  static void add(void* ctx, ServerCall* c) {
    auto* s = static_cast<Server*>(ctx);
    std::vector<uint8_t> cached;
    switch (s->drc.begin(c, &cached)) {
      case DuplicateCache::Found::kDone:
        (void)c->reply(cached);
        return;
      case DuplicateCache::Found::kInProgress:
        return;
      case DuplicateCache::Found::kNew:
        break;
    }
    uint64_t id = 0;
    std::memcpy(&id, c->args().data(), std::min<size_t>(8, c->args().size()));
    const uint32_t n = ++s->runs[{std::string(c->peer_id()), id}];
    ++s->total_runs;
    std::span<const uint8_t> res(reinterpret_cast<const uint8_t*>(&n), 4);
    s->drc.done(*c, res);
    if (s->drop_victim_reply) {
      // The victim's QP vanishes before this reply reaches it.
      s->drop_victim_reply = false;
      Status st = testing::inject_fault(s->victim_conn, Fault{Fault::Kind::kDropConnection});
      EXPECT_TRUE(st.is_ok()) << st.to_string();
    }
    (void)c->reply(res);
  }
};

// The other peer: its own process and engine, `calls` kAdd calls with
// distinct ids, a window of 16 in flight. Exits 0 when every call was
// answered OK.
[[noreturn]] void flood(const std::string& path, int calls) {
  auto eng = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  auto c = eng->connect(path);
  if (!c.is_ok()) _exit(2);
  Connection* conn = c.value();
  if (!poll_until({eng.get()}, [&] { return conn->ready() || conn->failed(); }, 10000) || !conn->ready()) _exit(3);
  int sent = 0, done = 0, bad = 0;
  std::vector<uint64_t> ids(static_cast<size_t>(calls));
  struct Ctx {
    int* done;
    int* bad;
  } ctx{&done, &bad};
  auto cb = [](void* p, const CallReply& r) {
    auto* x = static_cast<Ctx*>(p);
    ++*x->done;
    if (r.status != CallStatus::kOk) ++*x->bad;
  };
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done < calls && std::chrono::steady_clock::now() < end) {
    while (sent < calls && sent - done < 16) {
      ids[static_cast<size_t>(sent)] = 1000000 + static_cast<uint64_t>(sent);
      Call k{kProg, kVers, kAdd};
      k.args = std::span(reinterpret_cast<const uint8_t*>(&ids[static_cast<size_t>(sent)]), 8);
      k.done = cb, k.ctx = &ctx;
      if (conn->call(k) != 0) break;
      ++sent;
    }
    eng->poll();
  }
  _exit(done == calls && bad == 0 ? 0 : 4);
}

TEST(DrcIsolation, AnotherPeersFloodDoesNotMakeAVictimsCallRunTwice) {
  if (!on_shm()) GTEST_SKIP() << "peers are processes on pmd/shm";
  EngineOptions fast;
  fast.reconnect_min_ms = 5;
  fast.reconnect_max_ms = 50;
  Fixture f({}, fast);
  Server s;
  s.victim_conn = f.conn;
  f.srv->handle(kProg, kVers, kAdd, &Server::add, &s);
  ASSERT_EQ(f.call(Call{kProg, kVers, kEcho}).reply.status, CallStatus::kOk);

  // The victim's call: it runs, and its reply is lost with the connection.
  // The victim's engine is not polled again until the flood is over, so it
  // neither reconnects nor sends the call again before then.
  s.drop_victim_reply = true;
  Pending vp;
  const uint64_t vid = 7;
  Call v{kProg, kVers, kAdd};
  v.args = std::span(reinterpret_cast<const uint8_t*>(&vid), 8);
  v.done = on_done, v.ctx = &vp;
  ASSERT_EQ(f.conn->call(v), 0);
  ASSERT_TRUE(poll_until({f.srv.get(), f.cli.get()}, [&] { return s.total_runs == 1; }, 5000));
  ASSERT_FALSE(vp.done);

  // The flood, from another process (another peer).
  constexpr int kFlood = 4100;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) flood(f.path, kFlood);
  int st = -1;
  const bool flooded = poll_until({f.srv.get()}, [&] { return waitpid(child, &st, WNOHANG) == child; }, 90000);
  if (!flooded) {
    kill(child, SIGKILL);
    waitpid(child, &st, 0);
  }
  ASSERT_TRUE(flooded) << "the flooding peer did not finish";
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the flooding peer's calls failed: status " << st;
  EXPECT_EQ(s.total_runs, 1u + kFlood);

  // Now the victim reconnects and sends its call again.
  ASSERT_TRUE(f.wait([&] { return vp.done; }, 10000)) << "the victim's call never completed";
  EXPECT_EQ(vp.reply.status, CallStatus::kOk);
  EXPECT_EQ(vp.reply.retransmits, 1u) << "its reply was lost: it was sent again";
  uint32_t n = 0;
  ASSERT_EQ(vp.results.size(), 4u);
  std::memcpy(&n, vp.results.data(), 4);
  EXPECT_EQ(n, 1u) << "answered with the first run's results";
  uint32_t victim_runs = 0;
  for (auto& [k, r] : s.runs)
    if (k.second == vid) victim_runs += r;
  EXPECT_EQ(victim_runs, 1u) << "the victim's non-idempotent call ran more than once";
  EXPECT_GE(s.drc.hits(), 1u);
}

}  // namespace
}  // namespace tern::rpc
