// pmd/shm's shared receive queue against a hostile peer: a server's QPs on
// one SRQ, one connected to a well-behaved client (the real driver), the
// others each to a hand-made client (tests/fuzz/shm_peer.h) that writes one
// descriptor the server must refuse. Whatever it writes, its connection
// alone fails: the SRQ's receives stay posted, nothing is written into
// them, no completion appears, and the good client's messages then land in
// them, oldest first.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>

#include "../fuzz/shm_peer.h"
#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "shm_test_end.h"
#include "shm/shm_layout.h"

namespace tern::shm {
namespace {

using namespace tern::rdma;

constexpr uint32_t kSlots = 16;            // the hostile client's rings
constexpr uint32_t kSlotShift = 4;
static_assert(kSlots == 1u << kSlotShift);
constexpr uint32_t kRecvs = 4;
constexpr size_t kRecvLen = 256;
constexpr size_t kSegLen = 64 << 10;       // the hostile client's exported memory
constexpr uint8_t kUntouched = 0xEE;

using shmtest::counter;

// One end of a connection made with the real driver.
struct End {
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Srq> srq;
  std::vector<std::unique_ptr<Qp>> qps;
  ~End() {
    qps.clear();
    srq.reset();
    scq.reset();
    rcq.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  void open(const std::string& spec, const char* name) {
    arena = std::move(mem::Arena::create({.size = 1u << 20, .huge = mem::HugePages::kNever, .name = name})).value();
    auto d = open_device(spec);
    ASSERT_TRUE(d) << d.status().to_string();
    dev = std::move(d).value();
    pd = std::move(dev->alloc_pd()).value();
    mr = std::move(pd->reg_mr(arena->base(), arena->size(), kAccessLocalWrite)).value();
    scq = std::move(dev->create_cq(256)).value();
    rcq = std::move(dev->create_cq(256)).value();
  }
  uint8_t* base() const { return static_cast<uint8_t*>(arena->base()); }
  QpInit qp_init() const {
    QpInit in;
    in.pd = pd.get(), in.send_cq = scq.get(), in.recv_cq = rcq.get();
    in.sq_depth = 32, in.rq_depth = 32, in.max_send_sge = 2, in.max_recv_sge = 1;
    in.srq = srq.get();
    return in;
  }
};

// A client written by hand: its own connection area, hello and segment.
struct Hostile {
  int sock = -1;
  int area_fd = -1;
  uint8_t* area = nullptr;
  uint32_t prod = 0;
  ~Hostile() {
    if (area != nullptr) munmap(area, area_size(kSlots));
    if (area_fd >= 0) close(area_fd);
    if (sock >= 0) close(sock);
  }
  ShmDesc* slots() { return reinterpret_cast<ShmDesc*>(area + kSlotsOffset); }
  // Writes d into the next slot and publishes it with the seq word given
  // (by default the one its ring index calls for).
  void publish(const ShmDesc& d, uint32_t seq) {
    ShmDesc* slot = &slots()[prod % kSlots];
    std::memcpy(reinterpret_cast<uint8_t*>(slot) + sizeof(uint32_t), reinterpret_cast<const uint8_t*>(&d) + sizeof(uint32_t),
                sizeof d - sizeof(uint32_t));
    std::atomic_ref<uint32_t>(slot->seq).store(seq, std::memory_order_release);
    ++prod;
  }
  void publish(const ShmDesc& d) { publish(d, slot_seq(prod, kSlotShift)); }
};

class ShmSrqPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_level(LogLevel::kError);  // each refused descriptor is logged at info
    path_ = "/tmp/tern-srq-unit-" + std::to_string(getpid()) + ".sock";
    unlink(path_.c_str());
    server_.open("shm:path=" + path_, "tern-srq-server");
    ASSERT_FALSE(HasFatalFailure());
    ASSERT_TRUE(server_.dev->listen().is_ok());
    auto s = server_.dev->create_srq(server_.pd.get(), 8, 1);
    ASSERT_TRUE(s) << s.status().to_string();
    server_.srq = std::move(s).value();
    client_.open("shm:path=" + path_, "tern-srq-client");
    ASSERT_FALSE(HasFatalFailure());
    client_.qps.push_back(std::move(client_.dev->create_qp(client_.qp_init())).value());
    ASSERT_TRUE(client_.dev->connect(client_.qps[0].get(), {}).is_ok());
    good_ = accept_next();
    ASSERT_NE(good_, nullptr);
    ASSERT_TRUE(wait_for([&] { return client_.qps[0]->state() == QpState::kRts; }, "the good client connected"));

    std::memset(server_.base(), kUntouched, kRecvs * kRecvLen);
    std::vector<Sge> sg(kRecvs);
    std::vector<RecvWr> w(kRecvs);
    for (uint32_t k = 0; k < kRecvs; ++k) {
      sg[k] = Sge{reinterpret_cast<uint64_t>(server_.base() + k * kRecvLen), kRecvLen, server_.mr->lkey()};
      w[k] = RecvWr{100 + k, &sg[k], 1};
    }
    int err = 0;
    ASSERT_EQ(server_.srq->post_recv(w.data(), kRecvs, &err), static_cast<int>(kRecvs));
  }
  void TearDown() override {
    server_.qps.clear();
    client_.qps.clear();
    unlink(path_.c_str());
  }

  // Polls everything (both CQs of both real ends, both CMs) until pred().
  bool wait_for(const std::function<bool()>& pred, const char* what) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
      poll_all();
      if (pred()) return true;
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  }
  void poll_all() {
    Wc wc[16];
    for (End* e : {&server_, &client_}) {
      int n = e->rcq->poll(wc, 16);
      for (int i = 0; i < n; ++i) (e == &server_ ? server_recv_ : client_recv_).push_back(wc[i]);
      n = e->scq->poll(wc, 16);
      for (int i = 0; i < n; ++i) (e == &server_ ? server_send_ : client_send_).push_back(wc[i]);
      CmEvent ev;
      while (e->dev->poll_cm(&ev)) (e == &server_ ? server_cm_ : client_cm_).push_back(std::move(ev));
    }
  }
  // Accepts the next connection request on a new server QP of the SRQ.
  Qp* accept_next() {
    ConnRequest* req = nullptr;
    if (!wait_for(
            [&] {
              for (auto it = server_cm_.begin(); it != server_cm_.end(); ++it)
                if (it->type == CmEventType::kConnectRequest) {
                  req = it->request;
                  server_cm_.erase(it);
                  return true;
                }
              return false;
            },
            "a connect request"))
      return nullptr;
    auto q = server_.dev->create_qp(server_.qp_init());
    EXPECT_TRUE(q) << q.status().to_string();
    if (!q) return nullptr;
    server_.qps.push_back(std::move(q).value());
    Qp* qp = server_.qps.back().get();
    EXPECT_TRUE(server_.dev->accept(req, qp, {}).is_ok());
    return qp;
  }
  // A hand-made client, connected, its 64 KiB segment 0 exported.
  std::unique_ptr<Hostile> connect_hostile(Qp** server_qp) {
    auto h = std::make_unique<Hostile>();
    h->sock = fuzz::connect_client(path_);
    EXPECT_GE(h->sock, 0);
    size_t len = area_size(kSlots);
    h->area_fd = fuzz::make_memfd(len, fuzz::kGoodSeals, 0);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, h->area_fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    h->area = static_cast<uint8_t*>(p);
    fuzz::init_area(h->area, kSlots);
    ShmMsg m = fuzz::hello_msg(kSlots);
    fuzz::send_raw(h->sock, &m, sizeof m, &h->area_fd, 1);
    *server_qp = accept_next();
    int seg = fuzz::make_memfd(kSegLen, fuzz::kGoodSeals, 0xAB);
    ShmMsg s;
    std::memset(&s, 0, sizeof s);
    s.magic = kAreaMagic;
    s.version = kLayoutVersion;
    s.type = kMsgSegment;
    s.seg_index = 0;
    s.seg_length = kSegLen;
    fuzz::send_raw(h->sock, &s, sizeof s, &seg, 1);
    close(seg);
    return h;
  }
  static ShmDesc send_desc(uint32_t len) {
    ShmDesc d;
    std::memset(&d, 0, sizeof d);
    d.op = kOpSend;
    d.num_sge = 1;
    d.length = len;
    d.sge[0] = ShmSge{0, len, 0};
    return d;
  }
  // A SEND whose `len` bytes travel in its slot (no SGEs), as a small
  // message does; its bytes are left zero.
  static ShmDesc inline_desc(uint32_t len) {
    ShmDesc d = send_desc(0);
    d.num_sge = 0;
    d.flags = kDescInline;
    d.length = len;
    return d;
  }

  std::string path_;
  End server_, client_;
  Qp* good_ = nullptr;
  std::vector<Wc> server_recv_, server_send_, client_recv_, client_send_;
  std::vector<CmEvent> server_cm_, client_cm_;
};

struct Case {
  const char* what;
  std::function<void(ShmDesc&)> make;  // from a valid 64-byte SEND at index 0
  bool reaches_a_receive;              // the checks get as far as taking one
};

TEST_F(ShmSrqPeerTest, NoPeerCanUseUpOrWriteAnotherPeersSrqReceives) {
  const Case cases[] = {
      {"a SEND larger than the receive", [](ShmDesc& d) { d.length = 1024, d.sge[0].length = 1024; }, true},
      {"a SEND_WITH_INV of an rkey that names no fast MR", [](ShmDesc& d) { d.op = kOpSendInv, d.key = 0x12345; },
       true},
      {"an inline message longer than a slot holds",
       [](ShmDesc& d) { d.flags = kDescInline, d.num_sge = 0, d.length = kMaxInline + 1; }, false},
      {"an inline message that also names SGEs", [](ShmDesc& d) { d.flags = kDescInline; }, false},
      {"an inline RDMA WRITE", [](ShmDesc& d) { d.op = kOpWrite, d.flags = kDescInline, d.num_sge = 0; }, false},
      {"an unknown op", [](ShmDesc& d) { d.op = 9; }, false},
      {"too many SGEs", [](ShmDesc& d) { d.num_sge = kMaxSge + 1; }, false},
      {"an SGE in a segment it never exported", [](ShmDesc& d) { d.sge[0].seg = 7; }, false},
      {"an SGE past the end of its segment", [](ShmDesc& d) { d.sge[0].offset = kSegLen - 10; }, false},
      {"a second SGE that is bad, the first good",
       [](ShmDesc& d) {
         d.num_sge = 2, d.length = 128;
         d.sge[1] = ShmSge{0, 64, uint64_t{1} << 40};
       },
       false},
      {"a length that is not the sum of its SGEs", [](ShmDesc& d) { d.length = 32; }, false},
  };
  uint64_t returned = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Qp* bad = nullptr;
    auto h = connect_hostile(&bad);
    ASSERT_NE(bad, nullptr);
    ShmDesc d = send_desc(64);
    c.make(d);
    h->publish(d);
    ASSERT_TRUE(wait_for([&] { return bad->state() == QpState::kError; }, "the hostile connection to fail"));
    bool told = false;
    for (const CmEvent& ev : server_cm_) told |= ev.type == CmEventType::kDisconnected && ev.qp == bad && ev.peer_fault;
    EXPECT_TRUE(told) << "kDisconnected with peer_fault for the hostile QP";
    server_cm_.clear();
    EXPECT_TRUE(server_recv_.empty()) << "a receive completed: wr_id " << server_recv_[0].wr_id << " qp "
                                      << server_recv_[0].qp_num;
    EXPECT_EQ(server_.srq->posted(), kRecvs) << "a receive left the SRQ";
    for (size_t i = 0; i < kRecvs * kRecvLen; ++i)
      ASSERT_EQ(server_.base()[i], kUntouched) << "receive memory written at byte " << i;
    EXPECT_EQ(good_->state(), QpState::kRts);
    if (c.reaches_a_receive) ++returned;
    EXPECT_EQ(counter(server_.srq->stats(), "returned"), returned);
    server_.qps.pop_back();  // the hostile QP, destroyed while its peer is still there
  }
  EXPECT_EQ(counter(server_.srq->stats(), "consumed"), 0u);

  // The good client's messages take every receive, oldest first.
  Sge src{reinterpret_cast<uint64_t>(client_.base()), 200, client_.mr->lkey()};
  for (uint32_t k = 0; k < kRecvs; ++k) {
    std::memset(client_.base(), static_cast<int>(k + 1), 200);
    SendWr w = shmtest::signaled_send(k, &src);
    int err = 0;
    ASSERT_EQ(client_.qps[0]->post_send(&w, 1, &err), 1);
    ASSERT_TRUE(wait_for([&] { return server_recv_.size() == 1 && client_send_.size() == 1; }, "the message"));
    const Wc& r = server_recv_[0];
    EXPECT_EQ(r.wr_id, 100 + k);
    EXPECT_EQ(r.status, WcStatus::kSuccess);
    EXPECT_EQ(r.qp_num, good_->qp_num());
    EXPECT_EQ(r.byte_len, 200u);
    EXPECT_EQ(server_.base()[k * kRecvLen], k + 1);
    EXPECT_EQ(server_.base()[k * kRecvLen + 199], k + 1);
    EXPECT_EQ(server_.base()[k * kRecvLen + 200], kUntouched);
    EXPECT_EQ(client_send_[0].status, WcStatus::kSuccess);
    server_recv_.clear();
    client_send_.clear();
  }
  EXPECT_EQ(counter(server_.srq->stats(), "consumed"), kRecvs);
  EXPECT_EQ(counter(server_.srq->stats(), "posted"), kRecvs);
}

// Layout v4: a slot is published by its seq word alone. A slot whose word is
// not the one its ring index calls for -- never written, a stale lap, a lap
// ahead, any other value -- is not executed, and costs nobody anything; once
// the peer stores the right word, it is. Inline messages land byte for byte.
TEST_F(ShmSrqPeerTest, ASlotIsExecutedOnlyOnceItsSeqWordPublishesIt) {
  Qp* bad = nullptr;
  auto h = connect_hostile(&bad);
  ASSERT_NE(bad, nullptr);
  ShmDesc d = send_desc(64);
  for (uint32_t seq : {0u, slot_seq(kSlots, kSlotShift), slot_seq(0, kSlotShift) + 5, 0xffffffffu}) {
    SCOPED_TRACE(seq);
    h->prod = 0;
    h->publish(d, seq);
    for (int i = 0; i < 2000; ++i) poll_all();
    EXPECT_EQ(bad->state(), QpState::kRts);
    EXPECT_TRUE(server_recv_.empty());
    EXPECT_EQ(server_.srq->posted(), kRecvs);
  }
  // The right word: executed, from the peer's segment (0xAB).
  h->prod = 0;
  h->publish(d);
  ASSERT_TRUE(wait_for([&] { return server_recv_.size() == 1; }, "the published message"));
  EXPECT_EQ(server_recv_[0].status, WcStatus::kSuccess);
  EXPECT_EQ(server_recv_[0].qp_num, bad->qp_num());
  EXPECT_EQ(server_recv_[0].byte_len, 64u);
  EXPECT_EQ(server_.base()[0], 0xAB);
  EXPECT_EQ(server_.base()[63], 0xAB);
  EXPECT_EQ(server_.base()[64], kUntouched);

  // An inline message: its bytes come from the slot, not from any segment.
  ShmDesc in = send_desc(0);
  in.num_sge = 0;
  in.flags = kDescInline;
  in.length = kMaxInline;
  uint8_t* msg = reinterpret_cast<uint8_t*>(&in) + kInlineOffset;
  for (uint32_t k = 0; k < kMaxInline; ++k) msg[k] = static_cast<uint8_t>(k * 7 + 1);
  h->publish(in);
  ASSERT_TRUE(wait_for([&] { return server_recv_.size() == 2; }, "the inline message"));
  EXPECT_EQ(server_recv_[1].status, WcStatus::kSuccess);
  EXPECT_EQ(server_recv_[1].byte_len, kMaxInline);
  for (uint32_t k = 0; k < kMaxInline; ++k)
    ASSERT_EQ(server_.base()[kRecvLen + k], static_cast<uint8_t>(k * 7 + 1)) << "byte " << k;
  EXPECT_EQ(server_.base()[kRecvLen + kMaxInline], kUntouched);
  EXPECT_EQ(bad->state(), QpState::kRts);
}


// Layout 8: a SEND carries its producer's consumer index of our ring
// (kDescAcked, ShmDesc::acked), which we retire our WRs by instead of
// loading cons. Peer input like cons: one naming a descriptor we never
// published fails that connection alone (a protocol error); one behind
// what we know is an older message's and changes nothing; one inside the
// window completes our WRs below it, as the same lie in cons would -- the
// peer's own loss.
TEST_F(ShmSrqPeerTest, ASendsAckIsCheckedLikeCons) {
  struct AckCase {
    uint32_t acked;
    bool fails, completes;
  };
  for (const AckCase& c : {AckCase{0xfffffff0u, false, false}, AckCase{2, true, false}, AckCase{1, false, true}}) {
    SCOPED_TRACE(c.acked);
    Qp* bad = nullptr;
    auto h = connect_hostile(&bad);
    ASSERT_NE(bad, nullptr);
    // One signaled Send of ours outstanding to the hostile peer, which
    // never executes it: our only descriptor in its ring (index 0).
    Sge src{reinterpret_cast<uint64_t>(server_.base() + kRecvs * kRecvLen), 16, server_.mr->lkey()};
    SendWr w = shmtest::signaled_send(77, &src);
    int err = 0;
    ASSERT_EQ(bad->post_send(&w, 1, &err), 1);
    ShmDesc in = send_desc(0);
    in.num_sge = 0;
    in.flags = kDescInline | kDescAcked;
    in.length = 8;
    in.acked = c.acked;
    h->publish(in);
    ASSERT_TRUE(wait_for([&] { return !server_recv_.empty(); }, "the hostile message executed"));
    for (int i = 0; i < 200; ++i) poll_all();
    bool told = false;
    for (const CmEvent& ev : server_cm_) told |= ev.type == CmEventType::kDisconnected && ev.qp == bad && ev.peer_fault;
    bool completed = false, flushed = false;
    for (const Wc& wc : server_send_)
      if (wc.wr_id == 77) (wc.status == WcStatus::kSuccess ? completed : flushed) = true;
    EXPECT_EQ(bad->state(), c.fails ? QpState::kError : QpState::kRts);
    EXPECT_EQ(told, c.fails) << "kDisconnected with peer_fault for the hostile QP";
    EXPECT_EQ(completed, c.completes);
    EXPECT_EQ(flushed, c.fails) << "our Send, which the peer never executed, flushed with its QP";
    EXPECT_EQ(good_->state(), QpState::kRts);
    server_recv_.clear();
    server_send_.clear();
    server_cm_.clear();
    server_.qps.pop_back();
  }
}

// A visit counts the slots published behind the first before it executes
// any (their seq words loaded back to back, shm_responder.cc): that count
// only says how far to go. Executing still stops at the first slot that
// fails its checks: the ones before it land, byte for byte and counted,
// the bad one is refused by its index, and nothing behind it is executed
// or acknowledged, however many were seen published.
TEST_F(ShmSrqPeerTest, ABadSlotStopsTheBatchItWasSeenIn) {
  constexpr uint32_t kLen = 48;  // past the seq word's line: the second line is read too
  Qp* bad = nullptr;
  auto h = connect_hostile(&bad);
  ASSERT_NE(bad, nullptr);
  fuzz::PeerLink link;  // one bit, one visit: the five slots in one batch
  ASSERT_TRUE(link.take_accept(h->sock));
  auto inline_send = [](uint8_t byte) {
    ShmDesc d = inline_desc(kLen);
    std::memset(reinterpret_cast<uint8_t*>(&d) + kInlineOffset, byte, kLen);
    return d;
  };
  h->publish(inline_send(0x21));
  h->publish(inline_send(0x22));
  ShmDesc broken = inline_send(0x23);
  broken.length = kMaxInline + 1;  // more than a slot holds
  h->publish(broken);
  h->publish(inline_send(0x24));
  h->publish(inline_send(0x25));
  link.notify();
  ASSERT_TRUE(wait_for([&] { return bad->state() == QpState::kError; }, "the bad slot refused"));
  for (int i = 0; i < 200; ++i) poll_all();
  link.unmap();
  std::vector<Wc> landed;
  for (const Wc& wc : server_recv_)
    if (wc.qp_num == bad->qp_num()) landed.push_back(wc);
  ASSERT_EQ(landed.size(), 2u) << "the two slots before the bad one, and nothing else";
  for (uint32_t k = 0; k < 2; ++k) {
    EXPECT_EQ(landed[k].status, WcStatus::kSuccess);
    EXPECT_EQ(landed[k].wr_id, 100u + k);
    EXPECT_EQ(landed[k].byte_len, kLen);
    for (uint32_t i = 0; i < kRecvLen; ++i)
      ASSERT_EQ(server_.base()[k * kRecvLen + i], i < kLen ? 0x21 + k : kUntouched) << "receive " << k << " byte " << i;
  }
  for (uint32_t i = 2 * kRecvLen; i < kRecvs * kRecvLen; ++i)
    ASSERT_EQ(server_.base()[i], kUntouched) << "byte " << i << ": written by a slot behind the bad one";
  EXPECT_EQ(server_.srq->posted(), kRecvs - 2);
  EXPECT_EQ(counter(bad->stats(), "descs_in"), 2u);
  EXPECT_EQ(counter(server_.srq->stats(), "consumed"), 2u);
  // The server's record names the bad slot, and its consumer index
  // acknowledges exactly the two executed.
  const ShmEndpoint& srv_ep = reinterpret_cast<const ShmEndpoint*>(h->area + kEndpointOffset)[1];
  EXPECT_EQ(srv_ep.state.load(std::memory_order_acquire), kEpError);
  EXPECT_EQ(srv_ep.err_valid, 1u);
  EXPECT_EQ(srv_ep.err_index, 2u);
  EXPECT_EQ(reinterpret_cast<const ShmRing*>(h->area + kRingOffset)[0].cons.load(std::memory_order_acquire), 2u);
  EXPECT_EQ(good_->state(), QpState::kRts);
}

// A visit's batch is counted by its size (exec_batch_*: 1, 2-3, 4-7, 8-15,
// 16-31, 32): three slots published before the server looks are one visit
// of three; one more, one of one.
TEST_F(ShmSrqPeerTest, AVisitCountsTheBatchItExecuted) {
  Qp* bad = nullptr;
  auto h = connect_hostile(&bad);
  ASSERT_NE(bad, nullptr);
  fuzz::PeerLink link;
  ASSERT_TRUE(link.take_accept(h->sock));
  const ShmDesc d = inline_desc(16);
  for (int i = 0; i < 3; ++i) h->publish(d);
  link.notify();
  ASSERT_TRUE(wait_for([&] { return server_recv_.size() == 3; }, "three messages"));
  h->publish(d);
  link.notify();
  ASSERT_TRUE(wait_for([&] { return server_recv_.size() == 4; }, "the fourth"));
  link.unmap();
  const StatsView st = bad->stats();
  EXPECT_EQ(counter(st, "exec_batch_1"), 1u);
  EXPECT_EQ(counter(st, "exec_batch_2_3"), 1u);
  EXPECT_EQ(counter(st, "exec_batch_4_7") + counter(st, "exec_batch_8_15") + counter(st, "exec_batch_16_31") +
                counter(st, "exec_batch_32"),
            0u);
  EXPECT_EQ(counter(st, "descs_in"), 4u);
  EXPECT_EQ(bad->state(), QpState::kRts);
}

// The look-ahead walks the ring by pointer, and the seq word a slot must
// hold changes where the ring wraps (the next lap's): four slots published
// at once across the wrap (ring indices 14-17 of 16 slots) are still one
// batch of four. A look that kept the first lap's word there would stop at
// index 16 and split them in two.
TEST_F(ShmSrqPeerTest, ALookAheadReadsOnAcrossTheRingsWrap) {
  Qp* bad = nullptr;
  auto h = connect_hostile(&bad);
  ASSERT_NE(bad, nullptr);
  fuzz::PeerLink link;
  ASSERT_TRUE(link.take_accept(h->sock));
  const ShmDesc d = inline_desc(16);
  auto repost = [&] {
    for (const Wc& wc : server_recv_) {
      Sge sg{reinterpret_cast<uint64_t>(server_.base() + (wc.wr_id - 100) * kRecvLen), kRecvLen, server_.mr->lkey()};
      RecvWr w{wc.wr_id, &sg, 1};
      int err = 0;
      ASSERT_EQ(server_.srq->post_recv(&w, 1, &err), 1);
    }
    server_recv_.clear();
  };
  constexpr uint32_t kBefore = kSlots - 2;  // one at a time, up to two slots before the wrap
  for (uint32_t i = 0; i < kBefore; ++i) {
    h->publish(d);
    link.notify();
    ASSERT_TRUE(wait_for([&] { return server_recv_.size() == 1; }, "a message"));
    repost();
  }
  static_assert(kRecvs == 4);
  for (uint32_t i = 0; i < kRecvs; ++i) h->publish(d);
  link.notify();
  ASSERT_TRUE(wait_for([&] { return server_recv_.size() == kRecvs; }, "the four across the wrap"));
  link.unmap();
  for (const Wc& wc : server_recv_) EXPECT_EQ(wc.status, WcStatus::kSuccess);
  const StatsView st = bad->stats();
  EXPECT_EQ(counter(st, "exec_batch_1"), kBefore);
  EXPECT_EQ(counter(st, "exec_batch_2_3"), 0u) << "the batch across the wrap was cut in two";
  EXPECT_EQ(counter(st, "exec_batch_4_7"), 1u);
  EXPECT_EQ(counter(st, "descs_in"), kBefore + kRecvs);
  EXPECT_EQ(bad->state(), QpState::kRts);
}

// An inline SEND's length bounds the copy out of its slot, so the responder
// checks a copy of it, never the slot itself: a peer may rewrite the slot at
// any moment. Here a thread plays that peer, flipping every slot's length
// between two valid values as fast as it can while the server executes
// message after message: each must land with exactly the bytes its
// completion reports. A responder that read the length again after checking
// it would copy one value and report the other (bytes written past the
// reported length, or reported bytes never written).
TEST_F(ShmSrqPeerTest, AnInlineMessageLandsWithTheLengthItWasCheckedWith) {
  constexpr uint32_t kShort = 8, kLong = 200, kMessages = 200000;
  static_assert(kLong <= kMaxInline && kLong <= kRecvLen);
  constexpr uint8_t kByte = 0x11;
  Qp* bad = nullptr;
  auto h = connect_hostile(&bad);
  ASSERT_NE(bad, nullptr);
  fuzz::PeerLink link;  // the server's polls visit a QP whose bit is set
  ASSERT_TRUE(link.take_accept(h->sock));
  // Every slot holds the same inline SEND; a message is published by its
  // seq word alone, so that the length word is only ever stored atomically.
  for (uint32_t s = 0; s < kSlots; ++s) {
    ShmDesc* slot = &h->slots()[s];
    slot->op = kOpSend;
    slot->num_sge = 0;
    slot->flags = kDescInline;
    slot->key = 0;
    std::atomic_ref<uint32_t>(slot->length).store(kShort, std::memory_order_relaxed);
    slot->raddr = 0;
    std::memset(reinterpret_cast<uint8_t*>(slot) + kInlineOffset, kByte, kMaxInline);
  }
  // The peer flips the length of the slot published last, which is the one
  // the server is executing (or about to).
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> current{0};
  std::atomic<uint64_t> flips{0};  // written by the peer's thread alone
  std::thread peer([&] {
    uint32_t v = kLong;
    while (!stop.load(std::memory_order_relaxed)) {
      ShmDesc* slot = &h->slots()[current.load(std::memory_order_relaxed) % kSlots];
      std::atomic_ref<uint32_t>(slot->length).store(v, std::memory_order_relaxed);
      v ^= kShort ^ kLong;
      flips.store(flips.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  });
  struct Join {  // on every way out, a failed assertion's too
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop.store(true, std::memory_order_relaxed);
      t.join();
    }
  } join{stop, peer};
  uint32_t landed[2] = {0, 0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (uint32_t m = 0; m < kMessages && std::chrono::steady_clock::now() < until; ++m) {
    current.store(h->prod, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(h->slots()[h->prod % kSlots].seq)
        .store(slot_seq(h->prod, kSlotShift), std::memory_order_release);
    ++h->prod;
    link.notify();
    if (!wait_for([&] { return !server_recv_.empty(); }, "the message")) break;
    const Wc r = server_recv_[0];
    server_recv_.clear();
    ASSERT_EQ(r.status, WcStatus::kSuccess);
    ASSERT_TRUE(r.byte_len == kShort || r.byte_len == kLong) << r.byte_len;
    ++landed[r.byte_len == kLong];
    const uint32_t k = static_cast<uint32_t>(r.wr_id - 100);
    ASSERT_LT(k, kRecvs);
    uint8_t* buf = server_.base() + k * kRecvLen;
    for (uint32_t i = 0; i < kRecvLen; ++i)
      ASSERT_EQ(buf[i], i < r.byte_len ? kByte : kUntouched)
          << "message " << m << " reported " << r.byte_len << " bytes; byte " << i;
    std::memset(buf, kUntouched, kRecvLen);
    Sge sg{reinterpret_cast<uint64_t>(buf), kRecvLen, server_.mr->lkey()};
    RecvWr w{r.wr_id, &sg, 1};
    int err = 0;
    ASSERT_EQ(server_.srq->post_recv(&w, 1, &err), 1);
  }
  link.unmap();
  EXPECT_EQ(bad->state(), QpState::kRts);
  EXPECT_GT(landed[0] + landed[1], 0u);
  // Both lengths landing shows the peer's stores raced the server's reads
  // (on a loaded machine its thread may not have run much: not asserted).
  std::printf("landed %u short, %u long; the peer flipped the length %llu times\n", landed[0], landed[1],
              static_cast<unsigned long long>(flips.load(std::memory_order_relaxed)));
}

}  // namespace
}  // namespace tern::shm
