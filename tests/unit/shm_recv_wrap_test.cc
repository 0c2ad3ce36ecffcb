// pmd/shm's receive queue wraps its slots by a compare, not by `% depth`
// (the depth is the host's choice and need not be a power of two): with a
// depth of 3, messages through many wraps each land in the receive posted
// for them, in post order, and a full queue refuses a fourth receive.
#include <gtest/gtest.h>

#include <cstring>

#include "shm_test_end.h"

namespace tern::shm {
namespace {

using namespace tern::rdma;

class ShmRecvWrapTest : public shmtest::PairTest {
 protected:
  ShmRecvWrapTest() : PairTest("recvwrap") {}
  // The client sends `len` bytes of `fill` (one signaled SEND, wr_id `id`)
  // and waits for the server's next receive completion.
  void send_one(uint64_t id, int fill, uint32_t len) {
    Qp* cq = client_.qps[0].get();
    std::memset(client_.base(), fill, len);
    Sge s = client_.sge(0, len);
    SendWr w = shmtest::signaled_send(id, &s);
    int err = 0;
    ASSERT_EQ(cq->post_send(&w, 1, &err), 1) << "message " << id << ", errno " << err;
    const size_t before = server_.wcs.size();
    ASSERT_TRUE(wait_for([&] { return server_.wcs.size() > before; }, "the message's receive completion"));
  }
};

TEST_F(ShmRecvWrapTest, AQueueOfThreeWrapsInPostOrder) {
  constexpr uint32_t kDepth = 3, kMsg = 64, kMessages = 20;
  client_.qps.push_back(client_.make_qp());
  ASSERT_TRUE(client_.dev->connect(client_.qps[0].get(), {}).is_ok());
  ASSERT_TRUE(wait_for([&] { return !requests_.empty(); }, "a connect request"));
  QpInit in;
  in.pd = server_.pd.get(), in.send_cq = server_.cq.get(), in.recv_cq = server_.cq.get();
  in.sq_depth = 8, in.rq_depth = kDepth, in.max_send_sge = 1, in.max_recv_sge = 1;
  auto q = server_.dev->create_qp(in);
  ASSERT_TRUE(q) << q.status().to_string();
  server_.qps.push_back(std::move(q).value());
  Qp* sq = server_.qps[0].get();
  // Receive k goes into slot k % 3 of the server's arena, wr_id 1000 + k.
  auto post = [&](uint32_t k) {
    Sge s = server_.sge((k % kDepth) * kMsg, kMsg);
    RecvWr r{1000 + k, &s, 1};
    int err = 0;
    return sq->post_recv(&r, 1, &err);
  };
  for (uint32_t k = 0; k < kDepth; ++k) ASSERT_EQ(post(k), 1);
  EXPECT_NE(post(kDepth), 1) << "a fourth receive fitted a queue of three";
  ASSERT_TRUE(server_.dev->accept(requests_.front(), sq, {}).is_ok());
  requests_.clear();
  ASSERT_TRUE(wait_for([&] { return client_.qps[0]->state() == QpState::kRts; }, "the connection"));
  for (uint32_t i = 0; i < kMessages; ++i) {
    ASSERT_NO_FATAL_FAILURE(send_one(i, static_cast<int>(0x40 + i), kMsg));
    const Wc& wc = server_.wcs.back();
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << "message " << i;
    EXPECT_EQ(wc.wr_id, 1000u + i) << "message " << i << " landed in another receive than the one posted for it";
    EXPECT_EQ(wc.byte_len, kMsg);
    EXPECT_EQ(server_.base()[(i % kDepth) * kMsg], 0x40 + i) << "message " << i << "'s bytes";
    // Its slot back, as receive i + 3: the ring's tail goes round again.
    ASSERT_EQ(post(i + kDepth), 1) << "repost after message " << i;
  }
  // The client's sends all completed.
  ASSERT_TRUE(wait_for([&] { return client_.wcs.size() >= kMessages; }, "the sends' completions"));
  for (uint32_t i = 0; i < kMessages; ++i) EXPECT_EQ(client_.wcs[i].wr_id, i);
}

// A post checks an lkey's key once for a batch that names it again (the
// engine's receive buffers all come from one MR), but every SGE's range:
// a receive in the middle of a batch that reaches past its MR must still
// fail the message that lands in it, between two that land.
TEST_F(ShmRecvWrapTest, OneLkeyInABatchStillChecksEachReceivesRange) {
  constexpr uint32_t kMsg = 64, kMrLen = 4096;
  client_.qps.push_back(client_.make_qp());
  ASSERT_TRUE(client_.dev->connect(client_.qps[0].get(), {}).is_ok());
  ASSERT_TRUE(wait_for([&] { return !requests_.empty(); }, "a connect request"));
  QpInit in;
  in.pd = server_.pd.get(), in.send_cq = server_.cq.get(), in.recv_cq = server_.cq.get();
  in.sq_depth = 8, in.rq_depth = 8, in.max_send_sge = 1, in.max_recv_sge = 1;
  auto q = server_.dev->create_qp(in);
  ASSERT_TRUE(q) << q.status().to_string();
  server_.qps.push_back(std::move(q).value());
  Qp* sq = server_.qps[0].get();
  // An MR over the arena's first 4 KiB; the arena (and the test's own MR)
  // goes on past it, so a receive past its end is memory the process has.
  auto small = server_.pd->reg_mr(server_.base(), kMrLen, kAccessLocalWrite);
  ASSERT_TRUE(small) << small.status().to_string();
  const uint32_t lkey = (*small)->lkey();
  auto at = [&](size_t off) { return Sge{reinterpret_cast<uint64_t>(server_.base() + off), kMsg, lkey}; };
  // One post of three: inside, straddling the MR's end, inside.
  Sge s[3] = {at(0), at(kMrLen - kMsg / 2), at(kMsg)};
  RecvWr r[3] = {{2000, &s[0], 1}, {2001, &s[1], 1}, {2002, &s[2], 1}};
  int err = 0;
  ASSERT_EQ(sq->post_recv(r, 3, &err), 3) << "errno " << err;
  ASSERT_TRUE(server_.dev->accept(requests_.front(), sq, {}).is_ok());
  requests_.clear();
  ASSERT_TRUE(wait_for([&] { return client_.qps[0]->state() == QpState::kRts; }, "the connection"));
  for (uint32_t i = 0; i < 2; ++i) ASSERT_NO_FATAL_FAILURE(send_one(i, static_cast<int>(0x60 + i), kMsg));
  ASSERT_GE(server_.wcs.size(), 2u);
  EXPECT_EQ(server_.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(server_.wcs[0].wr_id, 2000u);
  EXPECT_EQ(server_.base()[0], 0x60);
  EXPECT_EQ(server_.wcs[1].wr_id, 2001u);
  EXPECT_EQ(server_.wcs[1].status, WcStatus::kLocProtErr)
      << "a receive reaching past its MR took a message (the batch's one key check skipped its range)";
  EXPECT_NE(server_.base()[kMrLen - kMsg / 2], 0x61) << "the message was written past the MR";
}

}  // namespace
}  // namespace tern::shm
