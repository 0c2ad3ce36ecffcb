// A test driver, "refusereg:path=...": pmd/shm whose Pd::reg_mr refuses any
// range overlapping a window the test sets, as a device out of locked memory
// or MR resources would. Everything else is shm's, unchanged. It exists to
// test what the engine does when its registration cache cannot register a
// call's memory (the call fails with kNoRegistration; nothing hangs).
// It also hands out connection events that name no QP when the test asks
// (g_null_qp_events): a driver may report a CM event for an id whose QP is
// gone or never was, and the engine must drop it, not dereference it.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "rdmadev/rdmadev.h"
#include "rdmadev/rdmadev_driver.h"

namespace tern::test {

struct RefusedWindow {
  uint64_t addr = 0, len = 0;
  bool overlaps(const void* p, uint64_t n) const {
    auto a = reinterpret_cast<uint64_t>(p);
    return len != 0 && a < addr + len && addr < a + n;
  }
};
inline RefusedWindow g_refused;
// Connection events with qp == nullptr still to hand out from poll_cm, ahead
// of the real ones: established, rejected (with a Tern refusal's reason),
// unreachable, disconnected (peer fault), in turn.
inline int g_null_qp_events = 0;

class RefusingPd final : public rdma::Pd {
 public:
  explicit RefusingPd(std::unique_ptr<rdma::Pd> inner) : inner_(std::move(inner)) {}
  Result<std::unique_ptr<rdma::Mr>> reg_mr(void* addr, uint64_t length, uint32_t access) override {
    if (g_refused.overlaps(addr, length))
      return make_error(Errc::kNoResources, "refusereg: registration of %p+%llu refused (test)", addr,
                        static_cast<unsigned long long>(length));
    return inner_->reg_mr(addr, length, access);
  }
  Result<std::unique_ptr<rdma::FastMr>> alloc_fast_mr(uint32_t max_depth) override {
    return inner_->alloc_fast_mr(max_depth);
  }
  rdma::Pd* inner() const { return inner_.get(); }

 private:
  std::unique_ptr<rdma::Pd> inner_;
};

class RefusingDevice final : public rdma::Device {
 public:
  explicit RefusingDevice(std::unique_ptr<rdma::Device> inner) : inner_(std::move(inner)) {}
  const rdma::DeviceCaps& caps() const override { return inner_->caps(); }
  Result<std::unique_ptr<rdma::Pd>> alloc_pd() override {
    auto pd = inner_->alloc_pd();
    if (!pd) return pd.status();
    return std::unique_ptr<rdma::Pd>(new RefusingPd(std::move(pd).value()));
  }
  Result<std::unique_ptr<rdma::Cq>> create_cq(uint32_t capacity) override { return inner_->create_cq(capacity); }
  Result<std::unique_ptr<rdma::Qp>> create_qp(const rdma::QpInit& init) override {
    rdma::QpInit in = init;
    in.pd = static_cast<RefusingPd*>(init.pd)->inner();
    return inner_->create_qp(in);
  }
  Status listen() override { return inner_->listen(); }
  Status connect(rdma::Qp* qp, std::span<const uint8_t> pd) override { return inner_->connect(qp, pd); }
  Status accept(rdma::ConnRequest* req, rdma::Qp* qp, std::span<const uint8_t> pd) override {
    return inner_->accept(req, qp, pd);
  }
  Status reject(rdma::ConnRequest* req, std::span<const uint8_t> pd) override { return inner_->reject(req, pd); }
  Status disconnect(rdma::Qp* qp) override { return inner_->disconnect(qp); }
  bool poll_cm(rdma::CmEvent* ev) override {
    if (g_null_qp_events > 0) {
      static constexpr rdma::CmEventType kTypes[] = {rdma::CmEventType::kEstablished, rdma::CmEventType::kRejected,
                                                     rdma::CmEventType::kUnreachable, rdma::CmEventType::kDisconnected};
      const int n = g_null_qp_events--;
      *ev = rdma::CmEvent{kTypes[n % 4]};
      ev->qp = nullptr;
      if (ev->type == rdma::CmEventType::kRejected) ev->private_data = {'T', 'r', 'j', 1};  // table full
      ev->peer_fault = ev->type == rdma::CmEventType::kDisconnected;
      return true;
    }
    return inner_->poll_cm(ev);
  }

 private:
  std::unique_ptr<rdma::Device> inner_;
};

class RefusingDriver final : public rdma::Driver {
 public:
  const char* name() const override { return "refusereg"; }
  const char* usage() const override { return "refusereg:path=<socket> (test: shm with refusable reg_mr)"; }
  Result<std::unique_ptr<rdma::Device>> open(const DevArgs& args) override {
    auto d = rdma::open_device("shm:path=" + args.get("path"));
    if (!d) return d.status();
    return std::unique_ptr<rdma::Device>(new RefusingDevice(std::move(d).value()));
  }
};

}  // namespace tern::test
