// The bulk pool against a peer that stops progressing, over pmd/shm.
//
// The attacker is another process (so another peer to the server: pmd/shm
// names a peer by its process) with many connections. Each sends one call
// with a large read chunk (or a large write chunk) and then never polls
// again: on pmd/shm the server's RDMA READ of the chunk, or its WRITE into
// it, is executed by the peer's driver when the peer polls, so those calls
// hold their bulk-pool memory for as long as the attacker likes. Together
// they ask for more than the whole pool.
//
// What must hold: a well-behaved client's 64 KiB calls (an echo through a
// read and a write chunk, a fill into a write chunk) are served at once,
// from the part of the pool a peer beyond its share may not take -- before
// any attacker connection is dropped; every attacker connection is dropped
// once server_rw_timeout_ms passes, with one warning naming the attacker's
// process and what it did not do; and the server's accounting comes back
// to idle while the attacker is still there, not polling.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

constexpr uint32_t kProg = 0x20000066, kVers = 1;
constexpr uint32_t kEcho = 1;  // results = args; the read chunk's data back into the write chunk
constexpr uint32_t kFill = 2;  // args: u32 n -> n bytes of 0xA5 into the write chunk

// A small pool, so that a dozen connections fill it: eight blocks of
// max_bulk, of which the reserve (an eighth) is one.
constexpr uint32_t kBlock = 256u << 10;
constexpr size_t kPool = size_t{8} * kBlock;
constexpr int kAttackConns = 12;  // 12 blocks asked for, 8 in the pool
// server_rw_timeout_ms. The test waits it out twice (the attacker's calls
// that held memory are dropped, then those that got it after them), so it
// is most of the test's time; the well-behaved client's calls, in the same
// poll loop as the server, need a few milliseconds of it. The guards below
// are absolute, not multiples of it: a loaded machine gets the same slack.
constexpr uint32_t kDeadlineMs = 1000;
constexpr uint32_t kGood = 64u << 10;


// The attacker, in a child process: kAttackConns connections, each with one
// call whose chunk is a whole pool block, then nothing -- it blocks on a
// pipe without polling until the parent lets it go (or dies). Exit codes
// say where it failed.
[[noreturn]] void attack(const std::string& spec, bool writes, int go_fd, int ready_fd) {
  char c;
  if (read(go_fd, &c, 1) != 1) _exit(2);
  std::vector<std::unique_ptr<RawPeer>> peers;
  std::vector<std::vector<uint8_t>> msgs;
  // Every connection and its chunk's registration first (these wait, and
  // so poll the QPs).
  for (int i = 0; i < kAttackConns; ++i) {
    auto p = std::make_unique<RawPeer>([] {});
    if (!p->open(spec).is_ok() || !p->connect(rr::CmPrivateData{true, 4096, 4096}).is_ok()) _exit(3);
    uint8_t* mem = p->buf(kBlock);
    std::memset(mem, 0x11, kBlock);
    const uint32_t rkey = p->offer(mem, kBlock, writes ? kAccessRemoteWrite : kAccessRemoteRead);
    if (rkey == 0) _exit(4);
    const uint32_t xid = 100 + static_cast<uint32_t>(i);
    rr::Header h = plain_header(xid, 1);
    h.chunks.clear();
    std::vector<uint8_t> args;
    if (writes) {
      h.chunks.nwrites = 1;
      h.chunks.writes[0].nsegments = 1;
      h.chunks.writes[0].segments[0] = rr::Segment{rkey, kBlock, reinterpret_cast<uint64_t>(mem)};
      const uint32_t n = kBlock;
      args.assign(reinterpret_cast<const uint8_t*>(&n), reinterpret_cast<const uint8_t*>(&n) + 4);
    } else {
      const auto pos = static_cast<uint32_t>(rpc_call(xid, kProg, kVers, kEcho).size());
      h.chunks.nreads = 1;
      h.chunks.reads[0] = rr::ReadSegment{pos, rr::Segment{rkey, kBlock, reinterpret_cast<uint64_t>(mem)}};
    }
    msgs.push_back(rdma_msg(h, rpc_call(xid, kProg, kVers, writes ? kFill : kEcho, args)));
    peers.push_back(std::move(p));
  }
  // Then every call, posted without waiting for its completion: waiting
  // would poll the QP, and the server's READ or WRITE of the chunk (posted
  // as soon as the call lands) would run in that poll.
  for (size_t i = 0; i < peers.size(); ++i)
    if (!peers[i]->post_send(msgs[i])) _exit(5);
  if (write(ready_fd, "R", 1) != 1) _exit(6);
  (void)read(go_fd, &c, 1);  // stops progressing here
  _exit(0);
}


class BulkIsolation : public ::testing::TestWithParam<bool> {
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
    good->poll();
  }
  bool wait(const std::function<bool()>& pred, int ms) { return poll_until([this] { pump(); }, pred, ms); }

  // The well-behaved client's calls, both in flight at once: an echo of
  // 64 KiB through a read chunk and back through a write chunk, and a fill
  // of 64 KiB into a write chunk; their data checked. False if they did not
  // complete within `ms`.
  void good_calls(int ms, bool* done) {
    *done = false;
    ++round;
    for (uint32_t i = 0; i < kGood; ++i) in[i] = static_cast<uint8_t>(round * 7 + i * 13 + (i >> 10));
    std::memset(back, 0, kGood);
    std::memset(out, 0, kGood);
    Done d1, d2;
    uint8_t arg[4] = {1, 2, 3, 4};
    Call e{kProg, kVers, kEcho};
    e.args = arg;
    e.bulk_send = std::span<const uint8_t>(in, kGood);
    e.bulk_recv = std::span<uint8_t>(back, kGood);
    e.done = on_done, e.ctx = &d1;
    ASSERT_EQ(conn->call(e), 0);
    uint32_t n = kGood;
    Call f{kProg, kVers, kFill};
    f.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
    f.bulk_recv = std::span<uint8_t>(out, kGood);
    f.done = on_done, f.ctx = &d2;
    ASSERT_EQ(conn->call(f), 0);
    if (!wait([&] { return d1.done && d2.done; }, ms)) return;
    *done = true;
    ASSERT_EQ(d1.r.status, CallStatus::kOk) << call_status_name(d1.r.status);
    ASSERT_EQ(d1.r.bulk_recv_len, kGood);
    ASSERT_EQ(std::memcmp(in, back, kGood), 0) << "the echo came back wrong";
    ASSERT_EQ(d2.r.status, CallStatus::kOk) << call_status_name(d2.r.status);
    ASSERT_EQ(d2.r.bulk_recv_len, kGood);
    for (uint32_t i = 0; i < kGood; ++i) ASSERT_EQ(out[i], 0xA5) << i;
  }

  void run(bool writes) {
    if (!on_shm()) GTEST_SKIP() << "the attacker stops progressing by not polling pmd/shm";
    spec = fresh_spec("bulk-isolation");
    // The attacker's process first, before any engine or socket exists
    // here, so that it inherits nothing of ours.
    int go[2], ready[2];
    ASSERT_EQ(pipe(go), 0);
    ASSERT_EQ(pipe2(ready, O_NONBLOCK), 0);
    child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(go[1]);
      close(ready[0]);
      attack(spec, writes, go[0], ready[1]);
    }
    close(go[0]);
    close(ready[1]);
    go_w = go[1];
    ready_r = ready[0];

    LogCapture log;
    EngineOptions so;
    so.max_bulk = kBlock;
    so.bulk_pool_bytes = kPool;
    so.server_rw_timeout_ms = kDeadlineMs;
    srv = Engine::create(so).value();
    srv->handle(kProg, kVers, kEcho, echo_handler, nullptr);
    srv->handle(kProg, kVers, kFill, fill_handler, nullptr);
    ASSERT_TRUE(srv->listen(spec).is_ok());
    good = Engine::create({.arena_bytes = kTestArenaBytes}).value();
    conn = good->connect(spec).value();
    ASSERT_TRUE(wait([&] { return conn->ready() || conn->failed(); }, 5000));
    ASSERT_TRUE(conn->ready()) << conn->error().to_string();
    in = static_cast<uint8_t*>(good->alloc(kGood));
    back = static_cast<uint8_t*>(good->alloc(kGood));
    out = static_cast<uint8_t*>(good->alloc(kGood));
    bool done = false;
    ASSERT_NO_FATAL_FAILURE(good_calls(5000, &done));
    ASSERT_TRUE(done) << "the calls fail even without an attacker";

    // The attack: every attacker call holds a block or waits for one.
    ASSERT_EQ(write(go_w, "G", 1), 1);
    char c = 0;
    // The guard bounds the attacker's set-up only (twelve raw peers, each
    // with its own arena, device and registration, connected one by one):
    // 4-12 s under TSan at load 18-21, past 20 s with more load. Nothing of
    // the server's is timed by it. An attacker that died says so at once.
    ssize_t got = -1;
    ASSERT_TRUE(wait([&] { return (got = read(ready_r, &c, 1)) >= 0; }, 60000))
        << "the attacker did not get its calls in";
    if (got == 0) {
      int st = 0;
      const bool reaped = waitpid(child, &st, 0) == child;
      if (reaped) child = -1;
      FAIL() << "the attacker exited before its calls were in: status " << (reaped ? st : -1);
    }
    ASSERT_TRUE(wait(
        [&] {
          return testing::accounting(*srv).bulk_blocks_out + srv->stats().waiting_for_memory.get() ==
                 uint64_t{kAttackConns};
        },
        5000))
        << testing::accounting(*srv).to_string() << ", waiting " << srv->stats().waiting_for_memory.get() << "\n"
        << log.dump();
    EXPECT_GT(srv->stats().waiting_for_memory.get(), 0u) << "the attacker's calls fit the pool: no attack";
    EXPECT_EQ(srv->stats().rw_timeouts.get(), 0u);

    // The well-behaved client is served now, not once the deadline has
    // dropped attackers (guard: well past two rounds of deadlines).
    ASSERT_NO_FATAL_FAILURE(good_calls(10000, &done));
    ASSERT_TRUE(done) << "the well-behaved client's calls wait behind the attacker's";
    EXPECT_EQ(srv->stats().rw_timeouts.get(), 0u)
        << "the well-behaved client was served only after attacker connections were dropped";

    // Every attacker connection is dropped once the deadline passes -- those
    // that held memory first, then those whose calls got it after them.
    ASSERT_TRUE(wait([&] { return srv->stats().rw_timeouts.get() == uint64_t{kAttackConns}; }, 11000))
        << "rw_timeouts " << srv->stats().rw_timeouts.get() << ", " << testing::accounting(*srv).to_string()
        << ", waiting " << srv->stats().waiting_for_memory.get() << ", connections "
        << srv->stats().connections.get() << ", disconnects " << srv->stats().disconnects.get() << "\n"
        << log.dump();
    // One warning per connection, naming the attacker's process and what it
    // did not do.
    auto w = log.warnings({"pid " + std::to_string(child), writes ? "take the reply" : "RDMA READ"});
    EXPECT_EQ(w.size(), size_t{kAttackConns}) << log.dump();
    // The server is back to idle with the attacker still there, not polling:
    // nothing waited for it to let go.
    ASSERT_TRUE(wait(
        [&] {
          return srv->stats().connections.get() == 1 && srv->stats().waiting_for_memory.get() == 0 &&
                 testing::accounting(*srv).idle();
        },
        5000))
        << testing::accounting(*srv).to_string() << ", connections " << srv->stats().connections.get();
    EXPECT_EQ(waitpid(child, nullptr, WNOHANG), 0) << "the attacker exited on its own";

    // And the well-behaved connection is unharmed.
    ASSERT_NO_FATAL_FAILURE(good_calls(5000, &done));
    ASSERT_TRUE(done);
    EXPECT_TRUE(conn->ready());
    EXPECT_EQ(srv->stats().protocol_errors.get(), 0u);
  }

  std::string spec;
  pid_t child = -1;
  int go_w = -1, ready_r = -1;
  std::unique_ptr<Engine> srv, good;
  Connection* conn = nullptr;
  uint8_t *in = nullptr, *back = nullptr, *out = nullptr;
  int round = 0;
};

TEST_P(BulkIsolation, AStalledPeerCannotHoldThePoolFromOthers) { run(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Chunks, BulkIsolation, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("WriteChunks") : std::string("ReadChunks");
                         });

}  // namespace
}  // namespace tern::rpc
