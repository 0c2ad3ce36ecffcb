// What pmd/shm unit tests that drive the driver directly share: one side of
// a connection set (an arena, a device, one CQ for many QPs), a fixture with
// a server and a client side on one socket, and a lookup of a device counter
// by name.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/stats.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern::shmtest {

// The device counter `name` (ShmDevice::stats()); a test failure if none.
inline uint64_t counter(const StatsView& v, const char* name) {
  for (const StatEntry& e : v)
    if (std::strcmp(e.name, name) == 0) return e.counter->get();
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

// A signaled SEND of `sge` (one entry) with `wr_id`.
inline rdma::SendWr signaled_send(uint64_t wr_id, rdma::Sge* sge) {
  rdma::SendWr w;
  w.wr_id = wr_id;
  w.sg_list = sge;
  w.num_sge = 1;
  w.opcode = rdma::WrOpcode::kSend;
  w.flags = rdma::kWrSignaled;
  return w;
}

// One side with many QPs on one CQ, each receiving into 16 slots of kMsg
// bytes of its own in the arena (QP q's k-th receive: wr_id q << 16 | k).
struct ManyQpEnd {
  static constexpr uint32_t kMsg = 64;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<rdma::Device> dev;
  std::unique_ptr<rdma::Pd> pd;
  std::unique_ptr<rdma::Mr> mr;
  std::unique_ptr<rdma::Cq> cq;
  // If set (before the QPs are made), the QPs' send CQ, and poll() polls it
  // first and then cq, as an engine's pass polls its send and receive CQs.
  std::unique_ptr<rdma::Cq> scq;
  std::vector<std::unique_ptr<rdma::Qp>> qps;
  std::vector<rdma::Wc> wcs;
  ~ManyQpEnd() {
    qps.clear();
    scq.reset();
    cq.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  uint8_t* base() const { return static_cast<uint8_t*>(arena->base()); }
  rdma::Sge sge(size_t off, uint32_t len) const {
    return rdma::Sge{reinterpret_cast<uint64_t>(base() + off), len, mr->lkey()};
  }
  void poll() {
    rdma::Wc wc[64];
    int n;
    if (scq) {
      n = scq->poll(wc, 64);
      wcs.insert(wcs.end(), wc, wc + n);
    }
    n = cq->poll(wc, 64);
    wcs.insert(wcs.end(), wc, wc + n);
  }
  std::unique_ptr<rdma::Qp> make_qp() {
    rdma::QpInit in;
    in.pd = pd.get(), in.send_cq = scq ? scq.get() : cq.get(), in.recv_cq = cq.get();
    in.sq_depth = 64, in.rq_depth = 16, in.max_send_sge = 1, in.max_recv_sge = 1;
    return std::move(dev->create_qp(in)).value();
  }
  void post_recvs(rdma::Qp* qp, int q, int n) {
    for (int k = 0; k < n; ++k) {
      rdma::Sge s = sge((static_cast<size_t>(q) * 16 + static_cast<size_t>(k % 16)) * kMsg, kMsg);
      rdma::RecvWr r{static_cast<uint64_t>(q) << 16 | static_cast<uint64_t>(k), &s, 1};
      int err = 0;
      ASSERT_EQ(qp->post_recv(&r, 1, &err), 1);
    }
  }
};

// A server side and a client side on one socket, opened by SetUp; the test
// connects as many QPs as it needs (connect_all, or connect/accept_next by
// hand). poll_both() is what every wait polls; a test that must act on each
// poll (e.g. a hostile writer) overrides on_poll().
class PairTest : public ::testing::Test {
 protected:
  // `tag` names the socket and arenas (one per test file).
  explicit PairTest(const char* tag, LogLevel level = LogLevel::kWarn) : tag_(tag), level_(level) {}

  void SetUp() override {
    set_log_level(level_);
    path_ = "/tmp/tern-shm-" + tag_ + "-" + std::to_string(getpid()) + ".sock";
    unlink(path_.c_str());
    for (ManyQpEnd* e : {&server_, &client_}) {
      e->arena = std::move(mem::Arena::create({.size = 4u << 20, .huge = mem::HugePages::kNever, .name = "tern-t"}))
                     .value();
      e->dev = std::move(rdma::open_device("shm:path=" + path_ + ",ring=64")).value();
      e->pd = std::move(e->dev->alloc_pd()).value();
      e->mr = std::move(e->pd->reg_mr(e->arena->base(), e->arena->size(), rdma::kAccessLocalWrite)).value();
      e->cq = std::move(e->dev->create_cq(4096)).value();
    }
    ASSERT_TRUE(server_.dev->listen().is_ok());
  }
  void TearDown() override { unlink(path_.c_str()); }

  // n client QPs connected and accepted (server QP i receives into its own
  // 16 slots), then every one of them ready to send.
  void connect_all(int n) {
    for (int i = 0; i < n; ++i) {
      client_.qps.push_back(client_.make_qp());
      ASSERT_TRUE(client_.dev->connect(client_.qps.back().get(), {}).is_ok());
      accept_next(i);
    }
    ASSERT_TRUE(wait_for(
        [&] {
          for (auto& q : client_.qps)
            if (q->state() != rdma::QpState::kRts) return false;
          return true;
        },
        "every connection established"));
  }
  // Waits for the next connect request and accepts it on a new server QP
  // with 16 receives posted (as server QP i).
  void accept_next(int i) {
    ASSERT_TRUE(wait_for([&] { return !requests_.empty(); }, "a connect request"));
    server_.qps.push_back(server_.make_qp());
    server_.post_recvs(server_.qps.back().get(), i, 16);
    ASSERT_TRUE(server_.dev->accept(requests_.front(), server_.qps.back().get(), {}).is_ok());
    requests_.clear();
  }
  void poll_cm() {
    rdma::CmEvent ev;
    while (server_.dev->poll_cm(&ev))
      if (ev.type == rdma::CmEventType::kConnectRequest) requests_.push_back(ev.request);
    while (client_.dev->poll_cm(&ev)) {
    }
  }
  virtual void on_poll() {}
  void poll_both() {
    on_poll();
    server_.poll();
    client_.poll();
    poll_cm();
  }
  // Polls both sides until pred() holds; a test failure after 10 s (a guard
  // against a hang, not a timing assertion).
  bool wait_for(const std::function<bool()>& pred, const char* what) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      poll_both();
      if (pred()) return true;
    }
    ADD_FAILURE() << "timed out waiting for " << what;
    return false;
  }
  // How many progress() passes pmd/shm made over server QP `conn`.
  uint64_t server_visits(int conn) { return counter(server_.qps[conn]->stats(), "visits"); }

  std::string tag_;
  LogLevel level_;
  std::string path_;
  ManyQpEnd server_, client_;
  std::vector<rdma::ConnRequest*> requests_;
};

}  // namespace tern::shmtest
