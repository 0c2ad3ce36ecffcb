// pmd/shm's memory per connection (docs/shm-driver.md): the send queue
// array grows while WRs are outstanding and an idle QP gives memory back
// (the array shrinks, its outbound ring's slot pages are punched out of the
// connection area). Neither may change what the QP does: WRs outstanding
// while the array grows keep their order and wr_ids, and a connection that
// was trimmed carries SENDs, WRITEs and READs byte for byte afterwards.
// (tern-shm-idle-memory measures the memory itself.)
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>

#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "shm_test_end.h"

namespace tern {
namespace {

using namespace tern::rdma;

using shmtest::counter;

struct End {
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Qp> qp;
  std::vector<Wc> send_wcs, recv_wcs;
  ~End() {
    qp.reset();
    scq.reset();
    rcq.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  uint8_t* base() const { return static_cast<uint8_t*>(arena->base()); }
  Sge sge(size_t off, uint32_t len) const { return Sge{reinterpret_cast<uint64_t>(base() + off), len, mr->lkey()}; }
  void poll() {
    Wc wc[64];
    int n = scq->poll(wc, 64);
    send_wcs.insert(send_wcs.end(), wc, wc + n);
    n = rcq->poll(wc, 64);
    recv_wcs.insert(recv_wcs.end(), wc, wc + n);
  }
};

class ShmMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_level(LogLevel::kWarn);
    path_ = "/tmp/tern-shm-mem-" + std::to_string(getpid()) + ".sock";
    unlink(path_.c_str());
    for (End* e : {&server_, &client_}) {
      e->arena = std::move(mem::Arena::create({.size = 4u << 20, .huge = mem::HugePages::kNever, .name = "tern-mem"}))
                     .value();
      e->dev = std::move(open_device("shm:path=" + path_ + ",ring=64")).value();
      e->pd = std::move(e->dev->alloc_pd()).value();
      e->mr = std::move(e->pd->reg_mr(e->arena->base(), e->arena->size(),
                                      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead))
                  .value();
      e->scq = std::move(e->dev->create_cq(1024)).value();
      e->rcq = std::move(e->dev->create_cq(1024)).value();
      QpInit in;
      in.pd = e->pd.get(), in.send_cq = e->scq.get(), in.recv_cq = e->rcq.get();
      in.sq_depth = 832, in.rq_depth = 64, in.max_send_sge = 2, in.max_recv_sge = 1;
      e->qp = std::move(e->dev->create_qp(in)).value();
    }
    ASSERT_TRUE(server_.dev->listen().is_ok());
    ASSERT_TRUE(client_.dev->connect(client_.qp.get(), {}).is_ok());
    ASSERT_TRUE(wait_for([&] { return !cm_.empty(); }, "the connect request"));
    ASSERT_EQ(cm_[0].type, CmEventType::kConnectRequest);
    ASSERT_TRUE(server_.dev->accept(cm_[0].request, server_.qp.get(), {}).is_ok());
    ASSERT_TRUE(wait_for([&] { return client_.qp->state() == QpState::kRts && cm_.size() == 3; }, "established"));
    cm_.clear();
  }
  void TearDown() override {
    server_.qp.reset();
    client_.qp.reset();
    unlink(path_.c_str());
  }
  bool wait_for(const std::function<bool()>& pred, const char* what,
                std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      server_.poll();
      client_.poll();
      CmEvent ev;
      while (server_.dev->poll_cm(&ev)) cm_.push_back(std::move(ev));
      while (client_.dev->poll_cm(&ev)) cm_.push_back(std::move(ev));
      if (pred()) return true;
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  }

  // Polls both ends for d, expecting nothing in particular.
  void settle(std::chrono::milliseconds d) {
    auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      server_.poll();
      client_.poll();
      CmEvent ev;
      while (server_.dev->poll_cm(&ev)) cm_.push_back(std::move(ev));
      while (client_.dev->poll_cm(&ev)) cm_.push_back(std::move(ev));
    }
  }

  // Client to server: n WRITEs of 256-byte patterns (seed s+k), then a
  // SEND and a READ back of the first WRITE's target, all checked.
  void traffic(uint32_t n, uint8_t s) {
    std::vector<SendWr> w;
    std::vector<Sge> sg(n + 2);
    for (uint32_t k = 0; k < n; ++k) {
      std::memset(client_.base() + k * 256, s + k, 256);
      sg[k] = client_.sge(k * 256, 256);
      SendWr x{};
      x.wr_id = 10000 + k, x.sg_list = &sg[k], x.num_sge = 1, x.opcode = WrOpcode::kRdmaWrite;
      x.remote_addr = reinterpret_cast<uint64_t>(server_.base() + (1u << 20) + k * 256);
      x.rkey = server_.mr->rkey();
      x.flags = k + 1 == n ? kWrSignaled : 0;
      w.push_back(x);
    }
    Sge rs = server_.sge(2u << 20, 256);
    RecvWr r{77, &rs, 1};
    int err = 0;
    ASSERT_EQ(server_.qp->post_recv(&r, 1, &err), 1);
    sg[n] = client_.sge(0, 200);
    SendWr snd{};
    snd.wr_id = 20000, snd.sg_list = &sg[n], snd.num_sge = 1, snd.opcode = WrOpcode::kSend, snd.flags = kWrSignaled;
    w.push_back(snd);
    sg[n + 1] = client_.sge(3u << 20, 256);
    SendWr rd{};
    rd.wr_id = 20001, rd.sg_list = &sg[n + 1], rd.num_sge = 1, rd.opcode = WrOpcode::kRdmaRead;
    rd.remote_addr = reinterpret_cast<uint64_t>(server_.base() + (1u << 20));
    rd.rkey = server_.mr->rkey();
    rd.flags = kWrSignaled;
    w.push_back(rd);
    ASSERT_EQ(client_.qp->post_send(w.data(), static_cast<int>(w.size()), &err), static_cast<int>(w.size()));
    ASSERT_TRUE(wait_for([&] { return client_.send_wcs.size() == 3 && server_.recv_wcs.size() == 1; }, "traffic"));
    EXPECT_EQ(client_.send_wcs[0].wr_id, 10000 + n - 1);
    EXPECT_EQ(client_.send_wcs[1].wr_id, 20000u);
    EXPECT_EQ(client_.send_wcs[2].wr_id, 20001u);
    for (const Wc& wc : client_.send_wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess);
    EXPECT_EQ(server_.recv_wcs[0].wr_id, 77u);
    EXPECT_EQ(server_.recv_wcs[0].byte_len, 200u);
    for (uint32_t k = 0; k < n; ++k)
      for (uint32_t b = 0; b < 256; b += 85)
        ASSERT_EQ(server_.base()[(1u << 20) + k * 256 + b], static_cast<uint8_t>(s + k)) << "WRITE " << k;
    EXPECT_EQ(server_.base()[(2u << 20) + 199], s) << "SEND";
    EXPECT_EQ(client_.base()[(3u << 20) + 255], s) << "READ";
    client_.send_wcs.clear();
    server_.recv_wcs.clear();
  }

  std::string path_;
  End server_, client_;
  std::vector<CmEvent> cm_;
};

TEST_F(ShmMemoryTest, OutstandingWrsKeepTheirOrderWhileTheSendQueueGrows) {
  traffic(5, 1);  // the queue's head is past 0 when it grows below
  // A SEND with no receive posted waits, and holds everything behind it:
  // 300 WRs outstanding, the array doubling from 16 with entries wrapped.
  Sge s = client_.sge(0, 64);
  std::vector<SendWr> w(301);
  std::vector<Sge> sg(300);
  w[0] = SendWr{};
  w[0].wr_id = 1, w[0].sg_list = &s, w[0].num_sge = 1, w[0].opcode = WrOpcode::kSend, w[0].flags = kWrSignaled;
  for (uint32_t k = 0; k < 300; ++k) {
    std::memset(client_.base() + (1u << 20) + k * 64, static_cast<int>(k & 0xff), 64);
    sg[k] = client_.sge((1u << 20) + k * 64, 64);
    w[k + 1] = SendWr{};
    w[k + 1].wr_id = 100 + k, w[k + 1].sg_list = &sg[k], w[k + 1].num_sge = 1;
    w[k + 1].opcode = WrOpcode::kRdmaWrite, w[k + 1].flags = k % 7 == 0 ? kWrSignaled : 0;
    w[k + 1].remote_addr = reinterpret_cast<uint64_t>(server_.base() + (1u << 20) + k * 64);
    w[k + 1].rkey = server_.mr->rkey();
  }
  int err = 0;
  const uint64_t grows = counter(client_.qp->stats(), "sq_grows");
  ASSERT_EQ(client_.qp->post_send(w.data(), 301, &err), 301);
  EXPECT_GE(counter(client_.qp->stats(), "sq_grows"), grows + 5) << "16 -> 512";
  settle(std::chrono::milliseconds(50));
  EXPECT_TRUE(client_.send_wcs.empty()) << "the SEND must wait for a receive";
  Sge rs = server_.sge(2u << 20, 256);
  RecvWr r{5, &rs, 1};
  ASSERT_EQ(server_.qp->post_recv(&r, 1, &err), 1);
  const size_t want = 1 + 43;  // the SEND, and every 7th WRITE
  ASSERT_TRUE(wait_for([&] { return client_.send_wcs.size() == want; }, "the completions"));
  EXPECT_EQ(client_.send_wcs[0].wr_id, 1u);
  for (size_t i = 1; i < want; ++i) {
    EXPECT_EQ(client_.send_wcs[i].wr_id, 100 + (i - 1) * 7) << "completion " << i;
    EXPECT_EQ(client_.send_wcs[i].status, WcStatus::kSuccess);
  }
  for (uint32_t k = 0; k < 300; ++k)
    ASSERT_EQ(server_.base()[(1u << 20) + k * 64 + 63], static_cast<uint8_t>(k & 0xff)) << "WRITE " << k;
}

TEST_F(ShmMemoryTest, AnIdleConnectionGivesMemoryBackAndWorksAfterwards) {
  // Busy enough to go round the 64-slot ring several times, the send queue
  // array grown to 256.
  for (uint8_t round = 0; round < 4; ++round) traffic(200, static_cast<uint8_t>(10 + round));
  EXPECT_EQ(counter(client_.qp->stats(), "idle_trims"), 0u);
  // Idle, both sides polled as an idle engine polls them (poll_cm included).
  ASSERT_TRUE(wait_for([&] { return counter(client_.qp->stats(), "idle_trims") == 1 &&
                                    counter(server_.qp->stats(), "idle_trims") == 1; },
                       "both QPs to trim"))
      << "idle_trims: client " << counter(client_.qp->stats(), "idle_trims") << ", server "
      << counter(server_.qp->stats(), "idle_trims") << " (twice, or never idle for a second?)";
  EXPECT_EQ(counter(client_.qp->stats(), "idle_trims"), 1u);
  EXPECT_EQ(counter(server_.qp->stats(), "idle_trims"), 1u);
  // Once: staying idle gives back nothing more.
  settle(std::chrono::milliseconds(1500));
  EXPECT_EQ(counter(client_.qp->stats(), "idle_trims"), 1u);
  EXPECT_TRUE(cm_.empty()) << "an idle connection must stay up";
  // Everything works again, on punched slot pages and a regrown array, and
  // the connection can trim again after.
  const uint64_t grows = counter(client_.qp->stats(), "sq_grows");
  for (uint8_t round = 0; round < 4; ++round) traffic(200, static_cast<uint8_t>(50 + round));
  EXPECT_GT(counter(client_.qp->stats(), "sq_grows"), grows);
  EXPECT_EQ(client_.qp->state(), QpState::kRts);
  EXPECT_EQ(server_.qp->state(), QpState::kRts);
}

// An RDMA READ is granted by the owner of the memory when it executes the
// descriptor, and its data copied by the initiator when it retires it. If
// the owner's QP is lost in between (the peer vanished, or its host dropped
// the connection) the owner may fence and reuse that memory at once, as a
// host does once its QP has drained (the engine completes the call whose
// read chunk it was). The initiator must then never complete the READ
// successfully with what the memory holds now: on a real device the
// response left with the old bytes. Found by tern-soak: a server that saw
// its connection's loss late (slow, or SIGSTOPped) ran a call on a read
// chunk that already held the client's next call's data.
TEST_F(ShmMemoryTest, AReadNeverCompletesWithDataWrittenAfterItsOwnerFencedIt) {
  constexpr uint32_t kLen = 8192;
  uint8_t* src = server_.base() + (1u << 20);
  uint8_t* dst = client_.base() + (3u << 20);
  std::memset(src, 0xa5, kLen);
  std::memset(dst, 0, kLen);
  Sge sg = client_.sge(3u << 20, kLen);
  SendWr rd{};
  rd.wr_id = 30001, rd.sg_list = &sg, rd.num_sge = 1, rd.opcode = WrOpcode::kRdmaRead, rd.flags = kWrSignaled;
  rd.remote_addr = reinterpret_cast<uint64_t>(src);
  rd.rkey = server_.mr->rkey();
  int err = 0;
  ASSERT_EQ(client_.qp->post_send(&rd, 1, &err), 1);
  // Only the owner runs: it executes the READ (grants the range).
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < end) server_.poll();
  ASSERT_TRUE(client_.send_wcs.empty());
  // The owner's QP is lost, and the memory goes to its next use.
  ASSERT_TRUE(server_.qp->inject_fault(Fault{Fault::Kind::kDropConnection}).is_ok());
  std::memset(src, 0x5a, kLen);
  ASSERT_TRUE(wait_for([&] { return !client_.send_wcs.empty(); }, "the READ's completion"));
  const Wc& wc = client_.send_wcs[0];
  EXPECT_EQ(wc.wr_id, 30001u);
  if (wc.status == WcStatus::kSuccess) {
    for (uint32_t i = 0; i < kLen; ++i)
      ASSERT_EQ(dst[i], 0xa5) << "a successful READ carried bytes written after its owner fenced them, at " << i;
  }
  EXPECT_NE(wc.status, WcStatus::kSuccess) << "the data is gone: the READ is flushed";
}

// The same for a Send: once the sender's QP is lost it flushes the Sends
// the receiver has not executed, and its host reuses their buffers at once.
// The receiver, executing late, must not deliver the newer bytes as the
// message. (tern-soak: a server ran an orphaned call whose arguments were
// the client's next message, under the first one's length.)
TEST_F(ShmMemoryTest, ASendFlushedByItsSenderIsNeverReceivedWithNewerBytes) {
  constexpr uint32_t kLen = 2048;
  uint8_t* src = client_.base() + (1u << 20);
  uint8_t* dst = server_.base() + (2u << 20);
  std::memset(src, 0xa5, kLen);
  std::memset(dst, 0, kLen);
  Sge rs = server_.sge(2u << 20, kLen);
  RecvWr r{88, &rs, 1};
  int err = 0;
  ASSERT_EQ(server_.qp->post_recv(&r, 1, &err), 1);
  Sge sg = client_.sge(1u << 20, kLen);
  SendWr snd{};
  snd.wr_id = 40001, snd.sg_list = &sg, snd.num_sge = 1, snd.opcode = WrOpcode::kSend, snd.flags = kWrSignaled;
  ASSERT_EQ(client_.qp->post_send(&snd, 1, &err), 1);
  // The sender's QP is lost before the receiver ran; its Send is flushed
  // and the buffer goes to its next use.
  ASSERT_TRUE(client_.qp->inject_fault(Fault{Fault::Kind::kDropConnection}).is_ok());
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < end && client_.send_wcs.empty()) client_.poll();
  ASSERT_EQ(client_.send_wcs.size(), 1u);
  EXPECT_EQ(client_.send_wcs[0].status, WcStatus::kWrFlushErr);
  std::memset(src, 0x5a, kLen);
  settle(std::chrono::milliseconds(100));
  for (const Wc& wc : server_.recv_wcs) {
    if (wc.status != WcStatus::kSuccess) continue;
    for (uint32_t i = 0; i < kLen; ++i)
      ASSERT_EQ(dst[i], 0xa5) << "a message received with bytes its sender wrote after flushing it, at " << i;
  }
}

}  // namespace
}  // namespace tern
