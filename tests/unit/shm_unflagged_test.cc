// pmd/shm tells a producer that its consumer index moved only for
// descriptors the producer flagged as waited for (kDescAckWanted: a
// signaled WR, a filling ring), to keep that notification off the
// one-connection datapath. What the producer queued behind an unflagged
// descriptor and must complete in order -- a local WR, a failure -- has it
// come back on its own next poll (ShmQp::complete_sends), not wait for the
// safety net's visit 10 ms later or for traffic that may never come.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern {
namespace {

using namespace tern::rdma;

struct End {
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;
  std::vector<Wc> wcs;
  ~End() {
    qp.reset();
    cq.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  void poll() {
    Wc wc[16];
    int n = cq->poll(wc, 16);
    wcs.insert(wcs.end(), wc, wc + n);
  }
};

// An unsignaled Send (not flagged: the ring is nearly empty), then a
// signaled WR behind it that completes locally and only after the Send
// does: a REG_MR (local_wr), or a Send with a bad lkey (a failure). Its
// completion must surface within a bounded number of polls, with no news
// from the peer.
void run(bool local_wr) {
  set_log_level(LogLevel::kError);
  const std::string path = "/tmp/tern-shm-unflagged-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  End s, c;
  for (End* e : {&s, &c}) {
    e->arena = std::move(mem::Arena::create({.size = 1u << 20, .huge = mem::HugePages::kNever, .name = "tern-unfl"}))
                   .value();
    e->dev = std::move(open_device("shm:path=" + path + ",ring=64")).value();
    e->pd = std::move(e->dev->alloc_pd()).value();
    e->mr = std::move(e->pd->reg_mr(e->arena->base(), e->arena->size(), kAccessLocalWrite)).value();
    e->cq = std::move(e->dev->create_cq(64)).value();
    QpInit in;
    in.pd = e->pd.get(), in.send_cq = e->cq.get(), in.recv_cq = e->cq.get();
    in.sq_depth = 16, in.rq_depth = 16, in.max_send_sge = 1, in.max_recv_sge = 1;
    e->qp = std::move(e->dev->create_qp(in)).value();
  }
  ASSERT_TRUE(s.dev->listen().is_ok());
  Sge rs{reinterpret_cast<uint64_t>(s.arena->base()), 64, s.mr->lkey()};
  RecvWr r{7, &rs, 1};
  int err = 0;
  ASSERT_EQ(s.qp->post_recv(&r, 1, &err), 1);
  ASSERT_TRUE(c.dev->connect(c.qp.get(), {}).is_ok());
  bool accepted = false;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       c.qp->state() != QpState::kRts && std::chrono::steady_clock::now() < end;) {
    CmEvent ev;
    while (s.dev->poll_cm(&ev))
      if (ev.type == CmEventType::kConnectRequest && !accepted) {
        ASSERT_TRUE(s.dev->accept(ev.request, s.qp.get(), {}).is_ok());
        accepted = true;
      }
    while (c.dev->poll_cm(&ev)) {
    }
  }
  ASSERT_EQ(c.qp->state(), QpState::kRts);
  // 64 polls of each CQ: the safety net's first look at the clock (every
  // 64th poll) is behind us, and the next is 64 polls away -- more than
  // the test makes below, so only the QP's own revisit can surface the
  // failure, whatever the machine's load.
  for (int k = 0; k < 64; ++k) s.poll(), c.poll();
  c.wcs.clear();

  Sge good{reinterpret_cast<uint64_t>(c.arena->base()), 32, c.mr->lkey()};
  Sge bad{reinterpret_cast<uint64_t>(c.arena->base()), 32, c.mr->lkey() ^ 0x100};
  std::unique_ptr<FastMr> fmr;
  SendWr w[2]{};
  w[0].wr_id = 1, w[0].sg_list = &good, w[0].num_sge = 1, w[0].opcode = WrOpcode::kSend, w[0].flags = 0;
  w[1].wr_id = 2, w[1].sg_list = &bad, w[1].num_sge = 1, w[1].opcode = WrOpcode::kSend, w[1].flags = kWrSignaled;
  if (local_wr) {
    fmr = std::move(c.pd->alloc_fast_mr(4)).value();
    w[1] = SendWr{};
    w[1].wr_id = 2, w[1].opcode = WrOpcode::kRegMr, w[1].flags = kWrSignaled;
    w[1].reg.mr = fmr.get(), w[1].reg.addr = reinterpret_cast<uint64_t>(c.arena->base()), w[1].reg.length = 4096;
    w[1].reg.lkey = c.mr->lkey(), w[1].reg.access = kAccessLocalWrite, w[1].reg.rkey = fmr->bump_rkey();
  }
  (void)c.qp->post_send(w, 2, &err);
  // Polls in this thread only, a bounded number of them (fewer than the 64
  // to the net's next look): the failure must surface within them.
  const auto t0 = std::chrono::steady_clock::now();
  int rounds = 0;
  const Wc* failed = nullptr;
  // The client first: its post's own visit comes before the server has
  // executed the Send, so later visits need a reason.
  for (; rounds < 60 && failed == nullptr; ++rounds) {
    c.poll();
    s.poll();
    for (const Wc& wc : c.wcs)
      if (wc.wr_id == 2) failed = &wc;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_NE(failed, nullptr) << "no completion for the WR behind the Send after " << rounds << " rounds (" << ms
                            << " ms)";
  EXPECT_EQ(failed->status, local_wr ? WcStatus::kSuccess : WcStatus::kLocProtErr);
  bool got = false;
  for (const Wc& wc : s.wcs) got |= wc.opcode == WcOpcode::kRecv && wc.status == WcStatus::kSuccess;
  EXPECT_TRUE(got);
  if (local_wr) c.qp.reset();  // before the fast MR it registered
  unlink(path.c_str());
}

TEST(ShmUnflaggedTest, FailureBehindUnsignaledSendCompletesWithoutNews) { run(false); }
TEST(ShmUnflaggedTest, LocalWrBehindUnsignaledSendCompletesWithoutNews) { run(true); }

}  // namespace
}  // namespace tern
