// Opening devices, capabilities, and control objects (CQs, QPs, MRs).
#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

TEST(Devices, AtLeastOneDevice) {
  auto devs = conformance_devices();
  std::string names;
  for (const auto& n : driver_names()) names += " " + n;
  ASSERT_FALSE(devs.empty()) << "no device to test: TERN_CONFORMANCE_DEVICES is unset and no driver among {shm} "
                                "is linked (drivers:"
                             << names << ")";
}

TEST(OpenDevice, UnknownDriverIsNotFoundAndNamesTheDrivers) {
  auto d = open_device("tern_no_such_driver:path=/x");
  ASSERT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), Errc::kNotFound) << to_string(d.status());
  for (const auto& n : driver_names())
    EXPECT_NE(d.status().message().find(n), std::string::npos)
        << "message should list driver '" << n << "': " << d.status().message();
}

class DeviceTest : public ConformanceTest {};
TERN_CONFORMANCE_SUITE(DeviceTest);

TEST_P(DeviceTest, CapsAreSane) {
  const DeviceCaps& c = caps();
  // mlx5: on a device without mlx5dv (or UMR) runs as plain verbs and says so.
  if (GetParam().driver == "mlx5" && c.driver == "verbs") {
    EXPECT_FALSE(c.fast_reg_zero_based) << "the verbs fallback registers with memory windows";
  } else {
    EXPECT_EQ(c.driver, GetParam().driver);
  }
  EXPECT_FALSE(c.name.empty());
  EXPECT_GE(c.max_qp_wr, 8u) << "this suite posts chains of up to 8 WRs without polling";
  EXPECT_GE(c.max_send_sge, 1u);
  EXPECT_GE(c.max_recv_sge, 1u);
  EXPECT_GE(c.max_cqe, 1u);
  EXPECT_GT(c.max_mr_size, 0u);
  EXPECT_GE(c.max_private_data, 8u) << "RFC 8797 needs at least 8 bytes of CM private data";
  if (c.fast_reg) {
    EXPECT_GT(c.max_fast_reg_depth, 0u) << "fast_reg without a registration depth";
    EXPECT_GT(c.fast_reg_page_size, 0u);
    EXPECT_EQ(c.fast_reg_page_size & (c.fast_reg_page_size - 1), 0u) << "page size must be a power of two";
  } else {
    EXPECT_EQ(c.max_fast_reg_depth, 0u) << "max_fast_reg_depth 0 means no fast registration";
    EXPECT_FALSE(c.remote_invalidation) << "remote invalidation invalidates fast-registered MRs";
    EXPECT_FALSE(c.memory_windows);
  }
  // Both Devices opened on one spec describe the same device.
  EXPECT_EQ(client.caps().driver, c.driver);
  EXPECT_EQ(client.caps().max_qp_wr, c.max_qp_wr);
}

TEST_P(DeviceTest, UnknownArgumentIsInvalidArgument) {
  std::string bad = spec + (spec.find(':') == std::string::npos ? ":" : ",") + "tern_bogus=1";
  auto d = open_device(bad);
  ASSERT_FALSE(d.is_ok()) << "open_device(\"" << bad << "\") accepted an unknown argument";
  EXPECT_EQ(d.status().code(), Errc::kInvalidArgument) << to_string(d.status());
  EXPECT_NE(d.status().message().find("tern_bogus"), std::string::npos)
      << "the message should name the bad key: " << d.status().message();
}

TEST_P(DeviceTest, DriverArgumentsAreChecked) {
  // Each driver's own arguments: a value it cannot use is refused, never
  // taken for a default.
  std::vector<std::string> bads;
  if (GetParam().driver == "shm")
    bads = {"shm", "shm:path=", spec + ",depth=lots"};
  else if (GetParam().driver == "sim")
    bads = {"sim:qp_bound=2", "sim:srq=lots", "sim:srq=4097", "sim:seed=x", "sim:addr=a,port=b"};
  else
    GTEST_SKIP() << "no bad arguments listed for driver " << GetParam().driver;
  for (const std::string& bad : bads) {
    auto d = open_device(bad);
    ASSERT_FALSE(d.is_ok()) << "open_device(\"" << bad << "\") succeeded";
    EXPECT_EQ(d.status().code(), Errc::kInvalidArgument) << bad << ": " << to_string(d.status());
  }
}

TEST_P(DeviceTest, ShmRegistersOnlyArenaMemory) {
  if (GetParam().driver != "shm") GTEST_SKIP() << "shm-specific: only memfd-backed memory can be shared";
  void* heap = std::aligned_alloc(4096, 8192);
  ASSERT_NE(heap, nullptr);
  {
    auto m = server.pd->reg_mr(heap, 8192, kAccessAll);
    EXPECT_FALSE(m.is_ok()) << "shm registered heap memory it cannot pass to a peer";
  }  // any Mr is released before its memory
  std::free(heap);
}

TEST_P(DeviceTest, CqHasAtLeastTheAskedCapacity) {
  uint32_t want = std::min<uint32_t>(64, caps().max_cqe);
  auto cq = server.dev->create_cq(want);
  ASSERT_TRUE(cq.is_ok()) << to_string(cq.status());
  EXPECT_GE((*cq)->capacity(), want);
  Wc wc[4];
  EXPECT_EQ((*cq)->poll(wc, 4), 0) << "a new CQ has no completions";
  if (caps().max_cqe < UINT32_MAX) {
    auto big = server.dev->create_cq(caps().max_cqe + 1);
    EXPECT_FALSE(big.is_ok()) << "create_cq(max_cqe + 1) succeeded";
  }
}

TEST_P(DeviceTest, QpBeyondDeviceLimitsIsRefused) {
  if (caps().max_qp_wr < UINT32_MAX) {
    QpInit in = server.default_qp_init();
    in.sq_depth = caps().max_qp_wr + 1;
    auto q = server.dev->create_qp(in);
    EXPECT_FALSE(q.is_ok()) << "create_qp with sq_depth max_qp_wr+1 succeeded";
    in = server.default_qp_init();
    in.rq_depth = caps().max_qp_wr + 1;
    q = server.dev->create_qp(in);
    EXPECT_FALSE(q.is_ok()) << "create_qp with rq_depth max_qp_wr+1 succeeded";
  }
  QpInit in = server.default_qp_init();
  in.max_send_sge = caps().max_send_sge + 1;
  auto q = server.dev->create_qp(in);
  EXPECT_FALSE(q.is_ok()) << "create_qp with max_send_sge above caps succeeded";
  in = server.default_qp_init();
  in.max_recv_sge = caps().max_recv_sge + 1;
  q = server.dev->create_qp(in);
  EXPECT_FALSE(q.is_ok()) << "create_qp with max_recv_sge above caps succeeded";
}

TEST_P(DeviceTest, NewQpsAreInitWithDistinctNumbers) {
  std::set<uint32_t> nums{server.qp->qp_num()};
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<Qp> q;
    ASSERT_TRUE(server.create_qp(server.default_qp_init(), &q));
    EXPECT_EQ(q->state(), QpState::kInit);
    EXPECT_TRUE(nums.insert(q->qp_num()).second) << "qp_num " << q->qp_num() << " reused";
    EXPECT_GE(q->init().sq_depth, server.default_qp_init().sq_depth);
    EXPECT_GE(q->init().rq_depth, server.default_qp_init().rq_depth);
    EXPECT_EQ(q->init().pd, server.pd.get());
    server.extra_qps.push_back(std::move(q));
  }
  EXPECT_EQ(server.qp->state(), QpState::kInit);
}

TEST_P(DeviceTest, ReceivesMayBePostedBeforeConnecting) {
  Buf b;
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &b));
  Sge sge = b.sge();
  RecvWr r = wr_recv(1, &sge, 1);
  int err = 0;
  EXPECT_EQ(server.qp->post_recv(&r, 1, &err), 1) << "err " << err;
  poller.settle();
  EXPECT_TRUE(server.recv_wcs.empty()) << server.describe();
}

TEST_P(DeviceTest, PostSendBeforeConnectingIsNotConnected) {
  Buf b;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &b));
  Sge sge = b.sge(0, 64);
  SendWr w = wr_send(1, &sge, 1);
  int err = 0;
  EXPECT_EQ(client.qp->post_send(&w, 1, &err), 0);
  EXPECT_EQ(err, ENOTCONN);
  poller.settle();
  EXPECT_TRUE(client.send_wcs.empty()) << "a refused post must not complete: " << client.describe();
}

TEST_P(DeviceTest, MrReportsWhatWasRegistered) {
  uint8_t* p = server.carve(3 * 4096);
  ASSERT_NE(p, nullptr);
  Mr *a = nullptr, *b = nullptr;
  ASSERT_TRUE(server.reg(p, 4096, kAccessAll, &a));
  ASSERT_TRUE(server.reg(p + 4096, 2 * 4096, kAccessLocalWrite | kAccessRemoteRead, &b));
  EXPECT_EQ(a->access(), kAccessAll);
  EXPECT_EQ(b->access(), kAccessLocalWrite | kAccessRemoteRead);
  EXPECT_NE(a->rkey(), b->rkey());
  EXPECT_NE(a->lkey(), b->lkey());
  // Overlapping registrations of the same memory are allowed and distinct.
  Mr* c = nullptr;
  ASSERT_TRUE(server.reg(p, 3 * 4096, kAccessLocalWrite, &c));
  EXPECT_NE(c->lkey(), a->lkey());
}

TEST_P(DeviceTest, FastMrAllocationAndKeyBump) {
  TERN_SKIP_UNLESS_CAP(fast_reg);
  uint32_t depth = std::min<uint32_t>(4, caps().max_fast_reg_depth);
  FastMr* f = nullptr;
  ASSERT_TRUE(server.alloc_fast_mr(depth, &f));
  EXPECT_GE(f->max_depth(), depth);
  FastMr* g = nullptr;
  ASSERT_TRUE(server.alloc_fast_mr(depth, &g));
  EXPECT_NE(rkey_index(f->rkey()), rkey_index(g->rkey())) << "two fast MRs share an rkey index";

  uint32_t before = f->rkey();
  for (int i = 0; i < 300; ++i) {  // wraps the key byte
    uint32_t prev = f->rkey();
    uint32_t next = f->bump_rkey();
    EXPECT_EQ(next, f->rkey());
    ASSERT_EQ(rkey_index(next), rkey_index(before)) << "bump_rkey changed the index";
    ASSERT_EQ(rkey_key(next), static_cast<uint8_t>(rkey_key(prev) + 1));
  }
  if (caps().max_fast_reg_depth < UINT32_MAX) {
    auto big = server.pd->alloc_fast_mr(caps().max_fast_reg_depth + 1);
    EXPECT_FALSE(big.is_ok()) << "alloc_fast_mr(max_fast_reg_depth + 1) succeeded";
  }
}

}  // namespace
}  // namespace tern::conformance
