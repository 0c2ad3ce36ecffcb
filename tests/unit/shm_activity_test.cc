// pmd/shm's poll visits the QPs that have work, not every QP of the CQ
// (docs/shm-driver.md, "Finding the QPs with work"): with many connections
// idle and one busy, polling costs the idle ones nothing but the safety
// net's visit every kSafetyNetNs; and the busy one's messages still flow,
// as do those of a connection that wakes up after a long idle spell.
// ShmQp's "visits" counter is the number of progress() passes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>

#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;

constexpr int kConns = 32;
constexpr uint32_t kMsg = shmtest::ManyQpEnd::kMsg;

class ShmActivityTest : public shmtest::PairTest {
 protected:
  ShmActivityTest() : PairTest("activity") {}
  void SetUp() override {
    PairTest::SetUp();
    connect_all(kConns);
  }

  void send(int conn, uint8_t fill) {
    std::memset(client_.base() + conn * kMsg, fill, kMsg);
    Sge s = client_.sge(static_cast<size_t>(conn) * kMsg, kMsg);
    SendWr w{};
    w.wr_id = 1, w.sg_list = &s, w.num_sge = 1, w.opcode = WrOpcode::kSend, w.flags = kWrSignaled;
    int err = 0;
    ASSERT_EQ(client_.qps[conn]->post_send(&w, 1, &err), 1);
  }
};

// One connection busy, the other 31 idle: the server's polls visit the busy
// one, and the idle ones only when the safety net comes round (every 10 ms,
// or the first time after they were established). Today's code visited
// every QP on every poll: 31 x polls.
TEST_F(ShmActivityTest, PollVisitsOnlyConnectionsWithWork) {
  // Let the handshakes' own visits pass.
  for (int k = 0; k < 200; ++k) poll_both();
  std::vector<uint64_t> before(kConns);
  for (int i = 0; i < kConns; ++i) before[i] = server_visits(i);
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kMessages = 200;
  int got = 0, polls = 0;
  for (int m = 0; m < kMessages; ++m) {
    server_.wcs.clear();
    client_.wcs.clear();
    send(0, static_cast<uint8_t>(m));
    ASSERT_TRUE(wait_for(
        [&] {
          ++polls;
          for (const Wc& wc : server_.wcs)
            if (wc.opcode == WcOpcode::kRecv) return true;
          return false;
        },
        "the busy connection's message"));
    ++got;
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kRecv) {
        ASSERT_EQ(wc.status, WcStatus::kSuccess);
        ASSERT_EQ(wc.byte_len, kMsg);
        server_.post_recvs(server_.qps[0].get(), 0, 1);
      }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(got, kMessages);
  // The safety net visits each idle QP once per 10 ms of polling, plus one
  // each for a net that was already due; the rest would be the defect.
  const uint64_t allowed = static_cast<uint64_t>(ms / 10.0) + 2;
  uint64_t idle_visits = 0;
  for (int i = 1; i < kConns; ++i) idle_visits += server_visits(i) - before[i];
  EXPECT_LE(idle_visits, allowed * (kConns - 1))
      << "over " << polls << " polls in " << ms << " ms, the 31 idle QPs were visited " << idle_visits << " times";
  EXPECT_GT(server_visits(0) - before[0], static_cast<uint64_t>(kMessages) - 1);
}

// A connection idle for a long spell, then busy: its news still arrives
// (its bit, not the safety net: the message lands within a few polls).
TEST_F(ShmActivityTest, IdleConnectionWakesOnItsOwnNews) {
  for (int k = 0; k < 2000; ++k) poll_both();
  for (int conn : {kConns - 1, 7, 0}) {
    server_.wcs.clear();
    send(conn, 0x5a);
    ASSERT_TRUE(wait_for(
        [&] {
          for (const Wc& wc : server_.wcs)
            if (wc.opcode == WcOpcode::kRecv) return true;
          return false;
        },
        "the message"));
    const Wc* r = nullptr;
    for (const Wc& wc : server_.wcs)
      if (wc.opcode == WcOpcode::kRecv) r = &wc;
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->qp_num, server_.qps[conn]->qp_num());
    EXPECT_EQ(r->status, WcStatus::kSuccess);
    const uint8_t* p = server_.base() + (r->wr_id >> 16) * 16 * kMsg + (r->wr_id & 0xffff) % 16 * kMsg;
    for (uint32_t k = 0; k < kMsg; ++k) ASSERT_EQ(p[k], 0x5a);
  }
}

}  // namespace
}  // namespace tern
