// pmd/shm's connection management costs what is pending, not how many QPs
// the device holds (docs/shm-driver.md, "Connection management at scale"):
// connect, accept and disconnect find their QP from the QP itself,
// poll_cm reads only the handshakes in flight, and a destroy drops the QP's
// own queued events without walking everyone else's. Counted, not timed:
// the device counts every QP and queued event those paths look at
// (ShmDevice::cm_looked_at), beside hundreds of idle QPs. And what the
// shortcuts must keep: every event is delivered once, in order, or dropped
// with its QP.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/log.h"
#include "rdmadev/rdmadev.h"
#include "shm/shm_internal.h"

namespace tern::shm {
namespace {

using namespace tern::rdma;

constexpr int kIdle = 400;

struct End {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::vector<std::unique_ptr<Qp>> qps;
  explicit End(const std::string& args) {
    dev = std::move(open_device(args)).value();
    pd = std::move(dev->alloc_pd()).value();
    cq = std::move(dev->create_cq(1024)).value();
  }
  ~End() {
    qps.clear();
    cq.reset();
    pd.reset();
    dev.reset();
  }
  Qp* make_qp() {
    QpInit in;
    in.pd = pd.get(), in.send_cq = cq.get(), in.recv_cq = cq.get();
    in.sq_depth = 4, in.rq_depth = 4, in.max_send_sge = 1, in.max_recv_sge = 1;
    qps.push_back(std::move(dev->create_qp(in)).value());
    return qps.back().get();
  }
  uint64_t looked() const { return static_cast<ShmDevice*>(dev.get())->cm_looked_at(); }
};

class ShmCmScaleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_level(LogLevel::kWarn);
    path_ = "/tmp/tern-shm-cmscale-" + std::to_string(getpid()) + ".sock";
    unlink(path_.c_str());
  }
  void TearDown() override {
    unlink(path_.c_str());
    unlink((path_ + "-none").c_str());
  }
  std::string path_;
};

TEST_F(ShmCmScaleTest, ConnectAcceptAndPollCmLookOnlyAtHandshakesInFlight) {
  End server("shm:path=" + path_ + ",ring=16"), client("shm:path=" + path_ + ",ring=16");
  ASSERT_TRUE(server.dev->listen().is_ok());
  for (int i = 0; i < kIdle; ++i) {
    server.make_qp();
    client.make_qp();
  }
  const uint64_t c0 = client.looked(), s0 = server.looked();
  Qp* cqp = client.make_qp();
  ASSERT_TRUE(client.dev->connect(cqp, {}).is_ok());
  EXPECT_EQ(client.looked(), c0) << "connect looked at other QPs";
  CmEvent ev;
  ConnRequest* req = nullptr;
  int client_polls = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (req == nullptr && std::chrono::steady_clock::now() < deadline) {
    if (server.dev->poll_cm(&ev) && ev.type == CmEventType::kConnectRequest) req = ev.request;
    (void)client.dev->poll_cm(&ev);  // the answer is not there yet: one QP in flight to read
    ++client_polls;
  }
  ASSERT_NE(req, nullptr);
  Qp* sqp = server.make_qp();
  ASSERT_TRUE(server.dev->accept(req, sqp, {}).is_ok());
  EXPECT_EQ(server.looked(), s0) << "accept or the server's polls looked at other QPs";
  bool established = false;
  while (!established && std::chrono::steady_clock::now() < deadline) {
    if (client.dev->poll_cm(&ev) && ev.type == CmEventType::kEstablished) {
      EXPECT_EQ(ev.qp, cqp);
      established = true;
    }
    ++client_polls;
  }
  ASSERT_TRUE(established);
  // At most the one QP in flight per poll, whatever the 400 idle ones.
  EXPECT_LE(client.looked() - c0, static_cast<uint64_t>(client_polls))
      << "over " << client_polls << " polls of a device with " << kIdle << " idle QPs";
  // Nothing in flight: a poll_cm looks at no QP at all.
  const uint64_t c1 = client.looked();
  for (int k = 0; k < 200; ++k) EXPECT_FALSE(client.dev->poll_cm(&ev));
  EXPECT_EQ(client.looked(), c1);
  // Disconnect finds its QP as connect did; the events it queues arrive.
  ASSERT_TRUE(client.dev->disconnect(cqp).is_ok());
  EXPECT_EQ(client.looked(), c1);
  ASSERT_TRUE(client.dev->poll_cm(&ev));
  EXPECT_EQ(ev.type, CmEventType::kDisconnected);
  EXPECT_EQ(ev.qp, cqp);
  // A QP of another device is refused, as before.
  EXPECT_FALSE(client.dev->connect(server.qps[0].get(), {}).is_ok());
  EXPECT_FALSE(client.dev->disconnect(server.qps[0].get()).is_ok());
}

TEST_F(ShmCmScaleTest, DestroyDropsItsOwnEventsAndTheRestArriveOnceInOrder) {
  // Nobody listens: every connect queues its QP's unreachable event.
  End lone("shm:path=" + path_ + "-none,ring=16");
  for (int i = 0; i < kIdle; ++i) ASSERT_TRUE(lone.dev->connect(lone.make_qp(), {}).is_ok());
  std::vector<Qp*> order;
  for (auto& q : lone.qps) order.push_back(q.get());
  // Every fifth QP destroyed, its event still queued among 399 others':
  // each destroy looks at its own event alone.
  std::set<Qp*> gone;
  for (int i = kIdle - 1; i >= 0; i -= 5) {
    const uint64_t before = lone.looked();
    gone.insert(lone.qps[static_cast<size_t>(i)].get());
    lone.qps[static_cast<size_t>(i)].reset();
    EXPECT_EQ(lone.looked() - before, 1u) << "destroying QP " << i;
  }
  // The others' events, each once, in the order they were queued.
  std::vector<Qp*> got;
  CmEvent ev;
  while (lone.dev->poll_cm(&ev)) {
    EXPECT_EQ(ev.type, CmEventType::kUnreachable);
    got.push_back(ev.qp);
  }
  std::vector<Qp*> want;
  for (Qp* q : order)
    if (gone.count(q) == 0) want.push_back(q);
  EXPECT_EQ(got, want);
}

TEST_F(ShmCmScaleTest, AQpGoneOrGivenUpMidHandshakeLeavesNothingBehind) {
  End server("shm:path=" + path_ + ",ring=16"), client("shm:path=" + path_ + ",ring=16");
  ASSERT_TRUE(server.dev->listen().is_ok());
  // One destroyed while its connect is in flight, one abandoned
  // (disconnect), one left to finish: only the last is heard of again.
  Qp* a = client.make_qp();
  Qp* b = client.make_qp();
  Qp* c = client.make_qp();
  for (Qp* q : {a, b, c}) ASSERT_TRUE(client.dev->connect(q, {}).is_ok());
  client.qps[0].reset();
  ASSERT_TRUE(client.dev->disconnect(b).is_ok());
  std::vector<ConnRequest*> reqs;
  std::vector<CmEvent> client_events;
  CmEvent ev;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool c_up = false;
  while (!c_up && std::chrono::steady_clock::now() < deadline) {
    while (server.dev->poll_cm(&ev))
      if (ev.type == CmEventType::kConnectRequest) reqs.push_back(ev.request);
    for (ConnRequest* r : reqs) (void)server.dev->accept(r, server.make_qp(), {});
    reqs.clear();
    while (client.dev->poll_cm(&ev)) {
      EXPECT_EQ(ev.qp, c) << "an event for a QP destroyed or given up on, type " << static_cast<int>(ev.type);
      c_up |= ev.qp == c && ev.type == CmEventType::kEstablished;
    }
  }
  EXPECT_TRUE(c_up);
  EXPECT_EQ(b->state(), QpState::kError);
}

// A QP destroyed with two events queued (established, then disconnected)
// takes both along; the events queued around them still arrive in order.
TEST_F(ShmCmScaleTest, DestroyTakesEveryQueuedEventOfItsQp) {
  End server("shm:path=" + path_ + ",ring=16"), client("shm:path=" + path_ + ",ring=16");
  ASSERT_TRUE(server.dev->listen().is_ok());
  constexpr int kConns = 3;
  for (int i = 0; i < kConns; ++i) ASSERT_TRUE(client.dev->connect(client.make_qp(), {}).is_ok());
  std::vector<ConnRequest*> reqs;
  CmEvent ev;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (reqs.size() < kConns && std::chrono::steady_clock::now() < deadline)
    if (server.dev->poll_cm(&ev) && ev.type == CmEventType::kConnectRequest) reqs.push_back(ev.request);
  ASSERT_EQ(reqs.size(), static_cast<size_t>(kConns));
  // Accepted, not polled: each server QP's established event waits.
  for (ConnRequest* r : reqs) ASSERT_TRUE(server.dev->accept(r, server.make_qp(), {}).is_ok());
  Qp* s0 = server.qps[0].get();
  Qp* s2 = server.qps[2].get();
  ASSERT_TRUE(server.dev->disconnect(server.qps[1].get()).is_ok());  // its disconnected event joins
  const uint64_t before = server.looked();
  server.qps[1].reset();
  EXPECT_EQ(server.looked() - before, 2u);
  std::vector<std::pair<Qp*, CmEventType>> got;
  while (server.dev->poll_cm(&ev)) got.emplace_back(ev.qp, ev.type);
  std::vector<std::pair<Qp*, CmEventType>> want = {{s0, CmEventType::kEstablished},
                                                    {s2, CmEventType::kEstablished}};
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tern::shm
