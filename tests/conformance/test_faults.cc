// Fault injection (Qp::inject_fault): each fault must surface through the
// ordinary interface -- error completions, flushes, kDisconnected -- never a
// crash or a hang. Skipped for drivers without fault injection.
#include <cstring>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

class FaultTest : public ConnectedTest {
 protected:
  void SetUp() override {
    ConnectedTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(client.alloc(64 << 10, kAccessLocalWrite, &src));
    ASSERT_TRUE(server.alloc(64 << 10, kAccessAll, &dst));
    ASSERT_TRUE(client.alloc(4 * 256, kAccessLocalWrite, &crecv));
    ASSERT_TRUE(server.alloc(4 * 256, kAccessLocalWrite, &srecv));
    for (int i = 0; i < 4; ++i) {
      cr[i] = crecv.sge(i * 256, 256);
      sr[i] = srecv.sge(i * 256, 256);
    }
  }

  Buf src, dst, crecv, srecv;
  Sge cr[4], sr[4];
};
TERN_CONFORMANCE_SUITE(FaultTest);

TEST_P(FaultTest, FailAfterWrs) {
  Fault f{Fault::Kind::kFailAfterWrs};
  f.count = 2;
  TERN_INJECT_OR_SKIP(client.qp, f);
  ASSERT_TRUE(client.post_recv({wr_recv(50, &cr[0], 1)}));
  constexpr int kN = 5;
  Sge sg[kN];
  std::vector<SendWr> w;
  for (int i = 0; i < kN; ++i) {
    fill_pattern(src.p + i * 4096, 4096, 500 + i);
    sg[i] = src.sge(i * 4096, 4096);
    w.push_back(wr_write(1 + i, &sg[i], 1, dst.addr(i * 4096), dst.rkey(), i != 3));  // #4 unsignaled
  }
  ASSERT_TRUE(client.post_send(w));
  std::vector<Wc> s, r;
  ASSERT_TRUE(poller.wait_send(client, kN, &s));
  EXPECT_TRUE(wc_is(s[0], 1, WcStatus::kSuccess));
  EXPECT_TRUE(wc_is(s[1], 2, WcStatus::kSuccess));
  EXPECT_TRUE(s[2].wr_id == 3 && s[2].status != WcStatus::kSuccess)
      << "the WR after `count` executed ones must fail: " << to_string(s[2]);
  EXPECT_TRUE(all_flushed({s[3], s[4]}, {4, 5})) << "the rest flush, the unsignaled one included";
  ASSERT_TRUE(poller.wait_recv(client, 1, &r));
  EXPECT_TRUE(all_flushed(r, {50}));
  EXPECT_EQ(client.qp->state(), QpState::kError);
  EXPECT_TRUE(check_pattern(dst.p, 4096, 500, "WRITE 1"));
  EXPECT_TRUE(check_pattern(dst.p + 4096, 4096, 501, "WRITE 2"));
  EXPECT_TRUE(check_filled(dst.p + 2 * 4096, 3 * 4096, 0, "WRITEs 3-5, which never executed"));
  EXPECT_TRUE(poller.wait_disconnected(client)) << "a QP that went to error is reported once";
}

TEST_P(FaultTest, DelayCompletions) {
  constexpr auto kDelay = std::chrono::milliseconds(100);
  Fault f{Fault::Kind::kDelayCompletions};
  f.delay_ns = std::chrono::nanoseconds(kDelay).count();
  TERN_INJECT_OR_SKIP(client.qp, f);
  fill_pattern(src.p, 4096, 7);
  Sge sg = src.sge(0, 4096);
  auto t0 = SteadyClock::now();
  ASSERT_TRUE(client.post_send({wr_write(1, &sg, 1, dst.addr(), dst.rkey())}));
  // Not seen early...
  ASSERT_TRUE(poller.wait_until([&] { return !client.send_wcs.empty() || SteadyClock::now() - t0 >= kDelay / 2; },
                                "half the delay"));
  EXPECT_TRUE(client.send_wcs.empty()) << "a completion arrived before half the injected delay";
  // ...but within a bounded time.
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(client, &wc, kDelay + kWait));
  auto elapsed = SteadyClock::now() - t0;
  EXPECT_TRUE(wc_is(wc, 1, WcStatus::kSuccess, WcOpcode::kRdmaWrite));
  EXPECT_GE(elapsed, kDelay * 98 / 100) << "completion held back less than delay_ns";
  EXPECT_TRUE(check_pattern(dst.p, 4096, 7, "delayed WRITE"));
  EXPECT_EQ(client.qp->state(), QpState::kRts);
}

TEST_P(FaultTest, DropConnection) {
  ASSERT_TRUE(server.post_recv({wr_recv(20, &sr[0], 1), wr_recv(21, &sr[1], 1)}));
  Fault f{Fault::Kind::kDropConnection};
  TERN_INJECT_OR_SKIP(client.qp, f);
  ASSERT_TRUE(poller.wait_disconnected(server)) << "the peer vanished";
  std::vector<Wc> r;
  ASSERT_TRUE(poller.wait_recv(server, 2, &r));
  EXPECT_TRUE(all_flushed(r, {20, 21}));
  EXPECT_EQ(server.qp->state(), QpState::kError);
  // Posting at the survivor flushes at once.
  Sge sg = dst.sge(0, 64);
  ASSERT_TRUE(server.post_send({wr_send(22, &sg, 1, false)}));
  std::vector<Wc> s;
  ASSERT_TRUE(poller.wait_send(server, 1, &s));
  EXPECT_TRUE(all_flushed(s, {22}));
}

TEST_P(FaultTest, CorruptDescriptorIsContained) {
  ASSERT_TRUE(server.post_recv({wr_recv(20, &sr[0], 1), wr_recv(21, &sr[1], 1)}));
  Fault f{Fault::Kind::kCorruptNextDesc};
  TERN_INJECT_OR_SKIP(client.qp, f);
  fill_pattern(src.p, 128, 8);
  Sge sg = src.sge(0, 128);
  ASSERT_TRUE(client.post_send({wr_send(1, &sg, 1), wr_send(2, &sg, 1, false)}));

  // The receiver rejects the garbage: its QP goes to error and its receives
  // complete unsuccessfully, in order; nothing crashes.
  std::vector<Wc> r, s;
  ASSERT_TRUE(poller.wait_recv(server, 2, &r));
  EXPECT_TRUE(r[0].wr_id == 20 && r[0].status != WcStatus::kSuccess) << to_string(r);
  EXPECT_TRUE(all_flushed({r[1]}, {21}));
  EXPECT_TRUE(poller.wait_state(server, QpState::kError));
  // The sender learns that its SEND failed, and the one behind it flushes.
  ASSERT_TRUE(poller.wait_send(client, 2, &s));
  EXPECT_TRUE(s[0].wr_id == 1 && s[0].status != WcStatus::kSuccess) << to_string(s);
  EXPECT_TRUE(all_flushed({s[1]}, {2}));
  EXPECT_TRUE(poller.wait_state(client, QpState::kError));
  EXPECT_TRUE(poller.wait_disconnected(server));
  EXPECT_TRUE(poller.wait_disconnected(client));
}

}  // namespace
}  // namespace tern::conformance
