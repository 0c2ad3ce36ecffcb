// pmd/sim's scheduler: nothing happens at post time; a QP's completions keep
// its order while QPs interleave as the seed says; the same seed gives the
// same interleaving; the virtual clock is the process's clock while set.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "rdmadev/rdmadev.h"
#include "sim/sim_world.h"

namespace tern::sim {
namespace {

using namespace tern::rdma;

constexpr int kWrites = 40;

// A client with two QPs connected to a server with two: each client QP
// posts kWrites signaled WRITEs into the server's memory.
struct Pair {
  std::shared_ptr<World> world;
  std::unique_ptr<Device> sdev, cdev;
  std::unique_ptr<Pd> spd, cpd;
  std::unique_ptr<Cq> scq, ccq;
  std::vector<uint8_t> smem = std::vector<uint8_t>(4096), cmem = std::vector<uint8_t>(4096);
  std::unique_ptr<Mr> smr, cmr;
  std::unique_ptr<Qp> sqp[2], cqp[2];

  explicit Pair(uint64_t seed) {
    const std::string w = "unit-" + std::to_string(seed);
    world = World::open(w, seed);
    world->set_auto_steps(0);  // the test steps the world itself
    sdev = std::move(open_device("sim:world=" + w + ",addr=s")).value();
    cdev = std::move(open_device("sim:world=" + w + ",addr=s")).value();
    spd = std::move(sdev->alloc_pd()).value();
    cpd = std::move(cdev->alloc_pd()).value();
    scq = std::move(sdev->create_cq(1024)).value();
    ccq = std::move(cdev->create_cq(1024)).value();
    smr = std::move(spd->reg_mr(smem.data(), smem.size(), kAccessLocalWrite | kAccessRemoteWrite)).value();
    cmr = std::move(cpd->reg_mr(cmem.data(), cmem.size(), kAccessLocalWrite)).value();
    EXPECT_TRUE(sdev->listen());
    for (int i = 0; i < 2; ++i) {
      QpInit si{spd.get(), scq.get(), scq.get()}, ci{cpd.get(), ccq.get(), ccq.get()};
      ci.sq_depth = 128;
      sqp[i] = std::move(sdev->create_qp(si)).value();
      cqp[i] = std::move(cdev->create_qp(ci)).value();
      EXPECT_TRUE(cdev->connect(cqp[i].get(), {}));
      // The server's own kEstablished of an earlier QP may come first.
      CmEvent ev;
      bool got = false;
      for (int guard = 0; guard < 1000 && !got; ++guard) {
        while (!got && sdev->poll_cm(&ev)) got = ev.type == CmEventType::kConnectRequest;
        if (!got) {
          EXPECT_TRUE(world->step());
        }
      }
      EXPECT_TRUE(got);
      if (!got) return;
      EXPECT_TRUE(sdev->accept(ev.request, sqp[i].get(), {}));
    }
  }
  // Runs the world until both client QPs are connected.
  bool connected() {
    for (int guard = 0; guard < 1000; ++guard) {
      CmEvent ev;
      while (cdev->poll_cm(&ev) || sdev->poll_cm(&ev)) {
      }
      if (cqp[0]->state() == QpState::kRts && cqp[1]->state() == QpState::kRts) return true;
      if (!world->step()) break;
    }
    return false;
  }
  ~Pair() {
    for (auto& q : cqp) q.reset();
    for (auto& q : sqp) q.reset();
  }

  void post_writes() {
    ASSERT_TRUE(connected());
    Sge sg{reinterpret_cast<uint64_t>(cmem.data()), 64, cmr->lkey()};
    for (int q = 0; q < 2; ++q)
      for (int i = 0; i < kWrites; ++i) {
        SendWr w;
        w.wr_id = static_cast<uint64_t>(q) << 32 | static_cast<uint64_t>(i);
        w.sg_list = &sg;
        w.num_sge = 1;
        w.opcode = WrOpcode::kRdmaWrite;
        w.flags = kWrSignaled;
        w.remote_addr = reinterpret_cast<uint64_t>(smem.data()) + 64u * static_cast<uint64_t>(i);
        w.rkey = smr->rkey();
        int err = 0;
        ASSERT_EQ(cqp[q]->post_send(&w, 1, &err), 1) << err;
      }
  }

  // The order completions appear in, as "q:i".
  std::vector<uint64_t> drain() {
    std::vector<uint64_t> order;
    Wc wc[16];
    for (int guard = 0; guard < 100000 && order.size() < 2 * kWrites; ++guard) {
      (void)world->step();
      int n = ccq->poll(wc, 16);
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(wc[k].status, WcStatus::kSuccess);
        order.push_back(wc[k].wr_id);
      }
    }
    return order;
  }
};

TEST(SimScheduler, NothingHappensAtPostTime) {
  Pair p(5);
  std::memset(p.cmem.data(), 0x5A, 64);
  p.post_writes();
  Wc wc;
  EXPECT_EQ(p.ccq->poll(&wc, 1), 0);  // auto progress is off: no step, no completion
  EXPECT_EQ(p.smem[0], 0);            // and nothing written
  EXPECT_EQ(p.drain().size(), 2u * kWrites);
  EXPECT_EQ(p.smem[0], 0x5A);
}

TEST(SimScheduler, EachQpKeepsItsOrderWhileQpsInterleaveBySeed) {
  std::vector<std::vector<uint64_t>> orders;
  for (uint64_t seed : {1, 2, 3}) {
    Pair p(seed);
    p.post_writes();
    std::vector<uint64_t> order = p.drain();
    ASSERT_EQ(order.size(), 2u * kWrites);
    uint64_t next[2] = {0, 0};
    for (uint64_t id : order) {
      uint64_t q = id >> 32, i = id & 0xffffffff;
      ASSERT_EQ(i, next[q]) << "QP " << q << " completed out of order (seed " << seed << ")";
      ++next[q];
    }
    orders.push_back(order);
  }
  // Different seeds interleave the two QPs differently.
  EXPECT_TRUE(orders[0] != orders[1] || orders[1] != orders[2]);
  // The same seed, the same interleaving.
  Pair again(1);
  again.post_writes();
  EXPECT_EQ(again.drain(), orders[0]);
}

TEST(SimScheduler, QpToErrorFlushesEveryOutstandingWrInOrder) {
  Pair p(9);
  p.post_writes();
  for (int i = 0; i < 5; ++i) (void)p.world->step();
  auto* q = p.world->pick_connected_qp();
  ASSERT_NE(q, nullptr);
  p.world->fail_qp(q);
  std::vector<uint64_t> order;
  Wc wc[16];
  uint64_t flushed = 0, errors = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    if (!p.world->step()) break;
    int n = p.ccq->poll(wc, 16);
    for (int k = 0; k < n; ++k) {
      order.push_back(wc[k].wr_id);
      flushed += wc[k].status == WcStatus::kWrFlushErr;
      errors += wc[k].status != WcStatus::kSuccess && wc[k].status != WcStatus::kWrFlushErr;
    }
  }
  int n;
  while ((n = p.ccq->poll(wc, 16)) > 0)
    for (int k = 0; k < n; ++k) order.push_back(wc[k].wr_id), flushed += wc[k].status == WcStatus::kWrFlushErr;
  // Every WR completed once (a failed or flushed one too), each QP in order.
  EXPECT_EQ(order.size(), 2u * kWrites);
  EXPECT_GT(flushed + errors, 0u);
  uint64_t next[2] = {0, 0};
  for (uint64_t id : order) {
    uint64_t qi = id >> 32, i = id & 0xffffffff;
    EXPECT_EQ(i, next[qi]);
    ++next[qi];
  }
}

TEST(SimScheduler, VirtualClockIsTheProcessClockWhileInstalled) {
  auto w = World::open("unit-clock", 1);
  const ClockSource before = clock_source();
  w->install_clock();
  EXPECT_EQ(clock_source(), ClockSource::kVirtual);
  EXPECT_EQ(tick_hz(), 1e9);
  const uint64_t t0 = now_ticks();
  EXPECT_EQ(t0, w->now_ns());
  w->advance(5'000'000'000ull);
  EXPECT_EQ(now_ticks() - t0, 5'000'000'000ull);
  EXPECT_EQ(monotonic_ns(), w->now_ns());
  w->uninstall_clock();
  EXPECT_EQ(clock_source(), before);
  EXPECT_NE(monotonic_ns(), w->now_ns());
}

}  // namespace
}  // namespace tern::sim
