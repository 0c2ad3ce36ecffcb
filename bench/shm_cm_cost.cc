// tern-shm-cm-cost: what pmd/shm's connection management costs a device
// that already holds N QPs, for counting under callgrind (instructions do
// not move with the machine's load). Each measured step is a function of
// its own, so that
//   valgrind --tool=callgrind --toggle-collect='cost_*' tern-shm-cm-cost N
// followed by callgrind_annotate --inclusive=yes gives each one's total:
//   cost_connect   kReps connects (client device: N idle QPs beside)
//   cost_accept    kReps accepts (server device: N idle QPs beside)
//   cost_poll_cm   kPolls poll_cm calls with nothing pending (client device)
//   cost_destroy   kReps destroys of QPs whose unreachable event is still
//                  queued, behind and ahead of N - 1 others' (a third device)
// Only the public rdmadev API is used, so the same file measures any
// revision (scripts/measure-cm-cost.sh builds it against a base).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "rdmadev/rdmadev.h"

using namespace tern;
using namespace tern::rdma;

namespace {

constexpr int kReps = 16;
constexpr int kPolls = 1000;

struct Side {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> cq;
  std::vector<std::unique_ptr<Qp>> qps;
  explicit Side(const std::string& args) {
    auto d = open_device(args);
    if (!d) {
      std::fprintf(stderr, "open %s: %s\n", args.c_str(), d.status().to_string().c_str());
      std::exit(1);
    }
    dev = std::move(d).value();
    pd = std::move(dev->alloc_pd()).value();
    cq = std::move(dev->create_cq(4096)).value();
  }
  ~Side() {
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
};

__attribute__((noinline)) void cost_connect(Device* dev, Qp* qp) {
  if (!dev->connect(qp, {}).is_ok()) std::abort();
}

__attribute__((noinline)) void cost_accept(Device* dev, ConnRequest* req, Qp* qp) {
  if (!dev->accept(req, qp, {}).is_ok()) std::abort();
}

__attribute__((noinline)) int cost_poll_cm(Device* dev) {
  int n = 0;
  CmEvent ev;
  for (int i = 0; i < kPolls; ++i) n += dev->poll_cm(&ev) ? 1 : 0;
  return n;
}

__attribute__((noinline)) void cost_destroy(std::unique_ptr<Qp>& qp) { qp.reset(); }

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const std::string path = "/tmp/tern-shm-cm-cost-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  {
    Side server("shm:path=" + path + ",ring=16"), client("shm:path=" + path + ",ring=16");
    if (!server.dev->listen().is_ok()) return 1;
    for (int i = 0; i < n; ++i) {
      server.make_qp();
      client.make_qp();
    }
    CmEvent ev;
    for (int r = 0; r < kReps; ++r) {
      Qp* cq = client.make_qp();
      cost_connect(client.dev.get(), cq);
      ConnRequest* req = nullptr;
      while (req == nullptr)
        if (server.dev->poll_cm(&ev) && ev.type == CmEventType::kConnectRequest) req = ev.request;
      cost_accept(server.dev.get(), req, server.make_qp());
      while (cq->state() != QpState::kRts) (void)client.dev->poll_cm(&ev);
      while (server.dev->poll_cm(&ev)) {
      }
    }
    if (cost_poll_cm(client.dev.get()) != 0) std::fprintf(stderr, "poll_cm found events\n");
  }
  unlink(path.c_str());
  int destroys = 0;
  {
    // Nobody listens here: each connect queues its unreachable event.
    Side lone("shm:path=" + path + "-none,ring=16");
    for (int i = 0; i < n; ++i) {
      Qp* qp = lone.make_qp();
      if (!lone.dev->connect(qp, {}).is_ok()) return 1;
    }
    for (int r = 0; r < kReps && r < n; ++r) {
      cost_destroy(lone.qps[static_cast<size_t>(r) * n / kReps]);
      ++destroys;
    }
  }
  std::printf("qps %d reps %d polls %d destroys %d\n", n, kReps, kPolls, destroys);
  return 0;
}
