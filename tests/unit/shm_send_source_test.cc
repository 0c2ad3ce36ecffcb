// pmd/shm remembers the key checks of the lkey a Send's source last passed
// (ShmPd::lookup_source): a host's Sends name one registration, and those
// checks were a good part of a post. Whatever changes the MR table must make
// it forget them: the next Send naming that lkey -- the very one just used --
// is refused (LOC_PROT_ERR, nothing sent) once its MR is deregistered and a
// new MR has taken its table entry over the same memory, or once its fast
// registration is invalidated (and the MR registered again over the same
// memory under a new key). A refused Send fails its QP, as in verbs: each
// case after one gets a connection of its own, on the same PD.
#include <gtest/gtest.h>

#include <cstring>

#include "shm_test_end.h"

namespace tern::shm {
namespace {

using namespace tern::rdma;

class ShmSendSourceTest : public shmtest::PairTest {
 protected:
  ShmSendSourceTest() : PairTest("sendsrc") {}
  // One more client QP, connected and ready; send() and local() use the
  // newest. Its first Send (from the test's own MR) takes the general path,
  // which grows the send queue's array; the Sends after it take the inline
  // path, which remembers their lkeys.
  void connect_one() {
    const int i = static_cast<int>(client_.qps.size());
    client_.qps.push_back(client_.make_qp());
    ASSERT_TRUE(client_.dev->connect(client_.qps.back().get(), {}).is_ok());
    ASSERT_NO_FATAL_FAILURE(accept_next(i));
    ASSERT_TRUE(wait_for([&] { return client_.qps.back()->state() == QpState::kRts; }, "the connection"));
    bool got = false;
    ASSERT_EQ(send(1000 + static_cast<uint64_t>(i), client_.base(), client_.mr->lkey(), 0x7f, &got),
              WcStatus::kSuccess);
    ASSERT_TRUE(got);
  }
  // Posts one signaled 32-byte Send of `fill` from `src` under `lkey` and
  // waits for its completion; returns its status. *received: whether the
  // server got a message.
  WcStatus send(uint64_t id, uint8_t* src, uint32_t lkey, int fill, bool* received) {
    std::memset(src, fill, kLen);
    Sge s{reinterpret_cast<uint64_t>(src), kLen, lkey};
    SendWr w = shmtest::signaled_send(id, &s);
    const size_t recvs = received_count();
    const WcStatus st = post_and_wait(w);
    // A message the Send delivered has landed by the time it completes.
    for (int k = 0; k < 16; ++k) poll_both();
    *received = received_count() > recvs;
    return st;
  }
  // A local WR (kRegMr, kLocalInv) posted signaled and waited for.
  WcStatus local(SendWr w) {
    w.flags = kWrSignaled;
    return post_and_wait(w);
  }
  WcStatus post_and_wait(const SendWr& w) {
    int err = 0;
    EXPECT_EQ(client_.qps.back()->post_send(&w, 1, &err), 1) << "errno " << err;
    const Wc* done = nullptr;
    wait_for(
        [&] {
          for (const Wc& wc : client_.wcs)
            if (wc.wr_id == w.wr_id) done = &wc;
          return done != nullptr;
        },
        "the WR's completion");
    return done == nullptr ? WcStatus::kGeneralErr : done->status;
  }
  size_t received_count() const {
    size_t n = 0;
    for (const Wc& wc : server_.wcs) n += wc.opcode == WcOpcode::kRecv && wc.status == WcStatus::kSuccess;
    return n;
  }
  static constexpr uint32_t kLen = 32;
};

TEST_F(ShmSendSourceTest, ADeregisteredMrsLkeyIsRefusedWhenANewMrTakesItsEntry) {
  uint8_t* src = client_.base() + 8192;
  bool got = false;
  // Plainly deregistered.
  ASSERT_NO_FATAL_FAILURE(connect_one());
  auto a = client_.pd->reg_mr(src, 4096, kAccessLocalWrite);
  ASSERT_TRUE(a) << a.status().to_string();
  const uint32_t a_lkey = (*a)->lkey();
  ASSERT_EQ(send(1, src, a_lkey, 0x11, &got), WcStatus::kSuccess);
  ASSERT_TRUE(got);
  a->reset();
  EXPECT_EQ(send(2, src, a_lkey, 0x22, &got), WcStatus::kLocProtErr) << "a Send from a deregistered MR";
  EXPECT_FALSE(got);
  // Deregistered, and a new MR over the same memory in its entry (its key
  // byte moved on): the lkey just used names nothing.
  ASSERT_NO_FATAL_FAILURE(connect_one());
  auto b = client_.pd->reg_mr(src, 4096, kAccessLocalWrite);
  ASSERT_TRUE(b) << b.status().to_string();
  const uint32_t b_lkey = (*b)->lkey();
  ASSERT_EQ(rkey_index(b_lkey), rkey_index(a_lkey)) << "the test wants the freed entry reused";
  ASSERT_EQ(send(3, src, b_lkey, 0x33, &got), WcStatus::kSuccess);
  ASSERT_TRUE(got);
  b->reset();
  auto c = client_.pd->reg_mr(src, 4096, kAccessLocalWrite);
  ASSERT_TRUE(c) << c.status().to_string();
  ASSERT_EQ(rkey_index((*c)->lkey()), rkey_index(b_lkey));
  ASSERT_NE((*c)->lkey(), b_lkey);
  EXPECT_EQ(send(4, src, b_lkey, 0x44, &got), WcStatus::kLocProtErr)
      << "a Send under a deregistered MR's lkey, its entry now another MR's over the same memory";
  EXPECT_FALSE(got);
  // The new MR's own lkey works.
  ASSERT_NO_FATAL_FAILURE(connect_one());
  EXPECT_EQ(send(5, src, (*c)->lkey(), 0x55, &got), WcStatus::kSuccess);
  EXPECT_TRUE(got);
}

TEST_F(ShmSendSourceTest, AnInvalidatedFastMrsLkeyIsRefusedByTheNextSend) {
  auto f = client_.pd->alloc_fast_mr(4);
  ASSERT_TRUE(f) << f.status().to_string();
  FastMr* fmr = f->get();
  uint8_t* src = client_.base() + 16384;
  auto reg = [&](uint64_t id) {
    SendWr w{};
    w.wr_id = id, w.opcode = WrOpcode::kRegMr;
    w.reg.mr = fmr, w.reg.addr = reinterpret_cast<uint64_t>(src), w.reg.length = 4096;
    w.reg.lkey = client_.mr->lkey(), w.reg.access = kAccessLocalWrite, w.reg.rkey = fmr->bump_rkey();
    return local(w);
  };
  auto inv = [&](uint64_t id) {
    SendWr w{};
    w.wr_id = id, w.opcode = WrOpcode::kLocalInv, w.invalidate_rkey = fmr->rkey();
    return local(w);
  };
  bool got = false;
  // Invalidated: the entry keeps its range, but the lkey just used is dead.
  ASSERT_NO_FATAL_FAILURE(connect_one());
  ASSERT_EQ(reg(1), WcStatus::kSuccess);
  ASSERT_EQ(send(2, src, fmr->rkey(), 0x11, &got), WcStatus::kSuccess);
  ASSERT_TRUE(got);
  ASSERT_EQ(inv(3), WcStatus::kSuccess);
  EXPECT_EQ(send(4, src, fmr->rkey(), 0x22, &got), WcStatus::kLocProtErr) << "a Send from an invalidated fast MR";
  EXPECT_FALSE(got);
  // Invalidated and registered again over the same memory under a new key:
  // the old key is dead, the new one works.
  ASSERT_NO_FATAL_FAILURE(connect_one());
  ASSERT_EQ(reg(5), WcStatus::kSuccess);
  ASSERT_EQ(send(6, src, fmr->rkey(), 0x33, &got), WcStatus::kSuccess);
  ASSERT_TRUE(got);
  const uint32_t old_key = fmr->rkey();
  ASSERT_EQ(inv(7), WcStatus::kSuccess);
  ASSERT_EQ(reg(8), WcStatus::kSuccess);
  EXPECT_EQ(send(9, src, old_key, 0x44, &got), WcStatus::kLocProtErr)
      << "the old key of a fast MR registered again over the same memory";
  EXPECT_FALSE(got);
  client_.qps.clear();  // before the fast MR they registered
}

}  // namespace
}  // namespace tern::shm
