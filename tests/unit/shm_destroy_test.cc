// Destroying a pmd/shm QP takes it out of every list that holds it (its
// CQs', its SRQ's, the device's) in O(1): each QP knows its index in each,
// and the last entry moves into the hole. Many QPs on shared CQs and an SRQ
// are destroyed in a random order; after each destroy every list holds
// exactly the QPs still alive, and every few destroys the CQs' polls (the
// safety net's round robin) still come round to every one of them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/log.h"
#include "rdmadev/rdmadev.h"
#include "shm/shm_internal.h"
#include "shm_test_end.h"

namespace tern::shm {
namespace {

using namespace tern::rdma;

constexpr int kQps = 240;

class ShmDestroyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_level(LogLevel::kWarn);
    path_ = "/tmp/tern-shm-destroy-" + std::to_string(getpid()) + ".sock";
    auto d = open_device("shm:path=" + path_);
    ASSERT_TRUE(d) << d.status().to_string();
    dev_ = std::move(d).value();
    pd_ = std::move(dev_->alloc_pd()).value();
    cq_a_ = std::move(dev_->create_cq(256)).value();
    cq_b_ = std::move(dev_->create_cq(256)).value();
    srq_ = std::move(dev_->create_srq(pd_.get(), 64, 1)).value();
  }
  void TearDown() override {
    qps_.clear();
    srq_.reset();
    cq_a_.reset();
    cq_b_.reset();
    pd_.reset();
    dev_.reset();
    unlink(path_.c_str());
  }

  // QP i: every third on one CQ for both queues, the others sending on A
  // and receiving on B (so a QP sits in two CQs' lists); the even ones on
  // the SRQ.
  void make_qps() {
    for (int i = 0; i < kQps; ++i) {
      QpInit in;
      in.pd = pd_.get();
      in.send_cq = cq_a_.get();
      in.recv_cq = i % 3 == 0 ? cq_a_.get() : cq_b_.get();
      in.srq = i % 2 == 0 ? srq_.get() : nullptr;
      in.sq_depth = 8, in.rq_depth = 8, in.max_send_sge = 1, in.max_recv_sge = 1;
      auto q = dev_->create_qp(in);
      ASSERT_TRUE(q) << q.status().to_string();
      qps_.push_back(std::move(q).value());
      alive_.push_back(i);
    }
  }

  static std::vector<const ShmQp*> sorted(std::vector<const ShmQp*> v) {
    std::sort(v.begin(), v.end());
    return v;
  }
  static std::vector<const ShmQp*> sorted(const std::vector<ShmQp*>& v) {
    return sorted(std::vector<const ShmQp*>(v.begin(), v.end()));
  }
  const ShmQp* shm_qp(int i) const { return static_cast<const ShmQp*>(qps_[i].get()); }

  // Every list holds exactly the live QPs that use it.
  void expect_lists_exact(const char* when) {
    std::vector<const ShmQp*> a, b, srq, all;
    for (int i : alive_) {
      a.push_back(shm_qp(i));  // every QP sends on A
      if (i % 3 != 0) b.push_back(shm_qp(i));
      if (i % 2 == 0) srq.push_back(shm_qp(i));
      all.push_back(shm_qp(i));
    }
    // And each QP knows where it is in each (what its destroy will use).
    for (Cq* c : {cq_a_.get(), cq_b_.get()}) {
      auto* cq = static_cast<ShmCq*>(c);
      for (size_t k = 0; k < cq->attached().size(); ++k)
        EXPECT_EQ(cq->attached()[k]->at_in(cq), k) << (c == cq_a_.get() ? "CQ A, " : "CQ B, ") << when;
    }
    for (size_t k = 0; k < static_cast<ShmSrq*>(srq_.get())->attached().size(); ++k)
      EXPECT_EQ(static_cast<ShmSrq*>(srq_.get())->attached()[k]->srq_at(), k) << "SRQ, " << when;
    for (size_t k = 0; k < static_cast<ShmDevice*>(dev_.get())->all_qps().size(); ++k)
      EXPECT_EQ(static_cast<ShmDevice*>(dev_.get())->all_qps()[k]->dev_at(), k) << "device, " << when;
    EXPECT_EQ(sorted(static_cast<ShmCq*>(cq_a_.get())->attached()), sorted(a)) << "CQ A, " << when;
    EXPECT_EQ(sorted(static_cast<ShmCq*>(cq_b_.get())->attached()), sorted(b)) << "CQ B, " << when;
    EXPECT_EQ(sorted(static_cast<ShmSrq*>(srq_.get())->attached()), sorted(srq)) << "SRQ, " << when;
    EXPECT_EQ(sorted(static_cast<ShmDevice*>(dev_.get())->all_qps()), sorted(all)) << "device, " << when;
  }

  void poll_for(std::chrono::microseconds d) {
    Wc wc[16];
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      cq_a_->poll(wc, 16);
      cq_b_->poll(wc, 16);
    }
  }

  // Polls both CQs until every live QP has been visited again (the safety
  // net looks at each a slice at a time); false if one never is.
  bool every_live_qp_visited() {
    std::vector<uint64_t> before(kQps);
    for (int i : alive_) before[i] = shmtest::counter(qps_[i]->stats(), "visits");
    Wc wc[16];
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);  // a guard only
    while (std::chrono::steady_clock::now() < end) {
      cq_a_->poll(wc, 16);
      cq_b_->poll(wc, 16);
      bool all = true;
      for (int i : alive_) all &= shmtest::counter(qps_[i]->stats(), "visits") > before[i];
      if (all) return true;
    }
    for (int i : alive_)
      if (shmtest::counter(qps_[i]->stats(), "visits") == before[i]) ADD_FAILURE() << "QP " << i << " never visited";
    return false;
  }

  std::string path_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<Pd> pd_;
  std::unique_ptr<Cq> cq_a_, cq_b_;
  std::unique_ptr<Srq> srq_;
  std::vector<std::unique_ptr<Qp>> qps_;  // by creation index; null once destroyed
  std::vector<int> alive_;
};

TEST_F(ShmDestroyTest, RandomOrderLeavesExactlyTheLiveQpsInEveryList) {
  make_qps();
  expect_lists_exact("before any destroy");
  ASSERT_TRUE(every_live_qp_visited());
  std::mt19937 rng(20261128);
  std::vector<int> order = alive_;
  std::shuffle(order.begin(), order.end(), rng);
  int done = 0;
  for (int victim : order) {
    // The QPs the safety net's round has looked at, and those it has not,
    // stay so, but the one destroyed: a QP moved into a hole among the
    // first would wait a round more.
    std::vector<const ShmQp*> looked[2], looked_after[2];
    for (int c = 0; c < 2; ++c) {
      auto* cq = static_cast<ShmCq*>((c == 0 ? cq_a_ : cq_b_).get());
      for (size_t k = 0; k < cq->net_looked(); ++k)
        if (cq->attached()[k] != shm_qp(victim)) looked[c].push_back(cq->attached()[k]);
    }
    qps_[victim].reset();
    for (int c = 0; c < 2; ++c) {
      auto* cq = static_cast<ShmCq*>((c == 0 ? cq_a_ : cq_b_).get());
      looked_after[c].assign(cq->attached().begin(), cq->attached().begin() + static_cast<ptrdiff_t>(cq->net_looked()));
      EXPECT_EQ(sorted(looked_after[c]), sorted(looked[c])) << "looked at in CQ " << "AB"[c] << ", after QP " << victim;
    }
    alive_.erase(std::find(alive_.begin(), alive_.end(), victim));
    ++done;
    expect_lists_exact(("after destroying QP " + std::to_string(victim)).c_str());
    if (HasFailure()) return;
    // Polls past a safety-net slice (1.25 ms) between destroys, so that they
    // land all over the round robin, not only at its start.
    poll_for(std::chrono::microseconds(1500));
    if (done % 40 == 0 || alive_.size() == 1) {
      ASSERT_TRUE(every_live_qp_visited()) << "after " << done << " destroys";
    }
  }
}

}  // namespace
}  // namespace tern::shm
