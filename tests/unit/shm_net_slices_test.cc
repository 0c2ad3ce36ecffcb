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
constexpr int kSlices = 8;  // pmd/shm's kNetSlices

class ShmNetSlicesTest : public shmtest::PairTest {
 protected:
  ShmNetSlicesTest() : PairTest("net-slices") {}
  void SetUp() override {
    PairTest::SetUp();
    connect_all(kConns);
  }
};

// Every connection idle: each server poll visits at most one slice of the
// QPs, and the looks still come round to every one of them (twice each,
// so the round robin wrapped).
TEST_F(ShmNetSlicesTest, EachPollLooksAtOneSliceAndAllAreVisited) {
  for (int k = 0; k < 2000; ++k) server_.poll(), client_.poll(), poll_cm();  // the handshakes' own visits
  std::vector<uint64_t> start(kConns), last(kConns);
  for (int i = 0; i < kConns; ++i) start[i] = last[i] = server_visits(i);
  uint64_t most = 0;
  long polls = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);  // a guard only
  bool all_twice = false;
  while (!all_twice && std::chrono::steady_clock::now() < end) {
    server_.poll();
    ++polls;
    uint64_t in_poll = 0;
    all_twice = true;
    for (int i = 0; i < kConns; ++i) {
      const uint64_t v = server_visits(i);
      in_poll += v - last[i];
      last[i] = v;
      all_twice &= v - start[i] >= 2;
    }
    most = std::max(most, in_poll);
  }
  EXPECT_TRUE(all_twice) << "after " << polls << " polls, some idle QP was not visited twice";
  EXPECT_LE(most, static_cast<uint64_t>(kConns / kSlices))
      << "one poll visited " << most << " of " << kConns << " idle QPs";
}

}  // namespace
}  // namespace tern
