// pmd/shm's safety net (docs/shm-driver.md, "The safety net") looks at a
// CQ's QPs a slice at a time, round robin: no single poll pays a visit of
// every idle QP (at a thousand connections that was a thousand visits in
// one poll, once per 10 ms, on both sides), and every idle QP is still
// visited, so news its peer never flagged is still found.
// ShmQp's "visits" counter is the number of progress() passes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <vector>

#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;

constexpr int kConns = 32;
constexpr int kSlices = 8;    // pmd/shm's kNetSlices
constexpr int kLookMax = 8;   // pmd/shm's kNetLookMax
// More QPs than kSlices * kLookMax: an eighth is more than a slice may be.
constexpr int kManyConns = 160;

class ShmNetSlicesTest : public shmtest::PairTest {
 protected:
  ShmNetSlicesTest() : PairTest("net-slices") {}
  void SetUp() override {
    PairTest::SetUp();
    connect_all(conns());
  }
  virtual int conns() const { return kConns; }
  // Polls the server until every idle QP was visited twice (so the round
  // robin wrapped); returns the most QPs one poll visited.
  uint64_t most_visits_in_one_poll(int n);
};

class ShmNetSlicesManyTest : public ShmNetSlicesTest {
 protected:
  int conns() const override { return kManyConns; }
};

uint64_t ShmNetSlicesTest::most_visits_in_one_poll(int n) {
  for (int k = 0; k < 2000; ++k) server_.poll(), client_.poll(), poll_cm();  // the handshakes' own visits
  std::vector<uint64_t> start(n), last(n);
  for (int i = 0; i < n; ++i) start[i] = last[i] = server_visits(i);
  uint64_t most = 0;
  long polls = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);  // a guard only
  bool all_twice = false;
  while (!all_twice && std::chrono::steady_clock::now() < end) {
    server_.poll();
    ++polls;
    uint64_t in_poll = 0;
    all_twice = true;
    for (int i = 0; i < n; ++i) {
      const uint64_t v = server_visits(i);
      in_poll += v - last[i];
      last[i] = v;
      all_twice &= v - start[i] >= 2;
    }
    most = std::max(most, in_poll);
  }
  EXPECT_TRUE(all_twice) << "after " << polls << " polls, some idle QP was not visited twice";
  return most;
}

// Every connection idle: each server poll visits at most one slice of the
// QPs, and the looks still come round to every one of them.
TEST_F(ShmNetSlicesTest, EachPollLooksAtOneSliceAndAllAreVisited) {
  const uint64_t most = most_visits_in_one_poll(kConns);
  EXPECT_LE(most, static_cast<uint64_t>(kConns / kSlices)) << "one poll visited " << most << " of " << kConns << " idle QPs";
}

// A big CQ gets more, smaller slices: no poll pays for an eighth of it (at
// 1,024 idle connections, 128 looks at lines of the peer's memory in one
// poll were the others' calls' p99), and every idle QP is still visited.
TEST_F(ShmNetSlicesManyTest, ASliceIsLookedAtInPieces) {
  const uint64_t most = most_visits_in_one_poll(kManyConns);
  EXPECT_LE(most, static_cast<uint64_t>(kLookMax)) << "one poll visited " << most << " of " << kManyConns << " idle QPs";
}

}  // namespace
}  // namespace tern
