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
using shmtest::counter;
using End = shmtest::ManyQpEnd;

class ShmNetSlicesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_level(LogLevel::kWarn);
    path_ = "/tmp/tern-shm-net-slices-" + std::to_string(getpid()) + ".sock";
    unlink(path_.c_str());
    for (End* e : {&server_, &client_}) {
      e->arena = std::move(mem::Arena::create({.size = 4u << 20, .huge = mem::HugePages::kNever, .name = "tern-net"}))
                     .value();
      e->dev = std::move(open_device("shm:path=" + path_ + ",ring=64")).value();
      e->pd = std::move(e->dev->alloc_pd()).value();
      e->mr = std::move(e->pd->reg_mr(e->arena->base(), e->arena->size(), kAccessLocalWrite)).value();
      e->cq = std::move(e->dev->create_cq(4096)).value();
    }
    ASSERT_TRUE(server_.dev->listen().is_ok());
    for (int i = 0; i < kConns; ++i) {
      client_.qps.push_back(client_.make_qp());
      ASSERT_TRUE(client_.dev->connect(client_.qps.back().get(), {}).is_ok());
      ASSERT_TRUE(wait_for([&] { return !requests_.empty(); }, "a connect request"));
      server_.qps.push_back(server_.make_qp());
      server_.post_recvs(server_.qps.back().get(), i, 16);
      ASSERT_TRUE(server_.dev->accept(requests_.front(), server_.qps.back().get(), {}).is_ok());
      requests_.clear();
    }
    ASSERT_TRUE(wait_for(
        [&] {
          for (auto& q : client_.qps)
            if (q->state() != QpState::kRts) return false;
          return true;
        },
        "every connection established"));
  }
  void TearDown() override { unlink(path_.c_str()); }

  void poll_cm() {
    CmEvent ev;
    while (server_.dev->poll_cm(&ev))
      if (ev.type == CmEventType::kConnectRequest) requests_.push_back(ev.request);
    while (client_.dev->poll_cm(&ev)) {
    }
  }
  bool wait_for(const std::function<bool()>& pred, const char* what) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      server_.poll();
      client_.poll();
      poll_cm();
      if (pred()) return true;
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  }
  uint64_t server_visits(int conn) { return counter(server_.qps[conn]->stats(), "visits"); }

  std::string path_;
  End server_, client_;
  std::vector<ConnRequest*> requests_;
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
