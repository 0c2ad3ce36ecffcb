// A client process chooses the device token its hellos carry, and a server
// makes one link (a page and an fd) per (pid, token): a process naming a new
// token per connection must not cost the server a link per connection
// (docs/shm-driver.md, "Finding the QPs with work"). Hand-made hellos.
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "../fuzz/shm_peer.h"
#include "base/log.h"
#include "rdmadev/rdmadev.h"
#include "shm/shm_layout.h"

namespace tern::shm {
namespace {

using namespace tern::rdma;

constexpr uint32_t kSlots = 16;

// memfds of ours named "tern-shm-link": the links this process holds open.
int open_links() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
    char target[256] = {};
    std::string p = std::string("/proc/self/fd/") + e->d_name;
    ssize_t r = readlink(p.c_str(), target, sizeof target - 1);
    if (r > 0 && std::strstr(target, "memfd:tern-shm-link") != nullptr) ++n;
  }
  if (d != nullptr) closedir(d);
  return n;
}

TEST(ShmLinkLimit, TokensPerProcessAreCapped) {
  set_log_level(LogLevel::kError);
  const std::string path = "/tmp/tern-link-limit-" + std::to_string(getpid()) + ".sock";
  unlink(path.c_str());
  auto dev = std::move(open_device("shm:path=" + path)).value();
  auto pd = std::move(dev->alloc_pd()).value();
  auto cq = std::move(dev->create_cq(256)).value();
  ASSERT_TRUE(dev->listen().is_ok());
  const int before = open_links();
  constexpr int kConns = 24;
  std::vector<int> socks;
  std::vector<std::unique_ptr<Qp>> qps;
  for (int i = 0; i < kConns; ++i) {
    int sock = fuzz::connect_client(path);
    ASSERT_GE(sock, 0);
    socks.push_back(sock);
    size_t len = area_size(kSlots);
    int afd = fuzz::make_memfd(len, fuzz::kGoodSeals, 0);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, afd, 0);
    ASSERT_NE(p, MAP_FAILED);
    fuzz::init_area(static_cast<uint8_t*>(p), kSlots);
    munmap(p, len);
    ShmMsg m = fuzz::hello_msg(kSlots);
    m.seg_length = 1000 + static_cast<uint64_t>(i);  // a new device token each time
    fuzz::send_raw(sock, &m, sizeof m, &afd, 1);
    close(afd);
    ConnRequest* req = nullptr;
    for (int k = 0; k < 100000 && req == nullptr; ++k) {
      CmEvent ev;
      if (dev->poll_cm(&ev) && ev.type == CmEventType::kConnectRequest) req = ev.request;
    }
    ASSERT_NE(req, nullptr) << "connection " << i;
    QpInit in;
    in.pd = pd.get(), in.send_cq = cq.get(), in.recv_cq = cq.get();
    in.sq_depth = 16, in.rq_depth = 16, in.max_send_sge = 1, in.max_recv_sge = 1;
    qps.push_back(std::move(dev->create_qp(in)).value());
    ASSERT_TRUE(dev->accept(req, qps.back().get(), {}).is_ok());
  }
  EXPECT_LE(open_links() - before, 8)
      << kConns << " connections with " << kConns << " tokens from one process";
  qps.clear();
  EXPECT_EQ(open_links(), before) << "links left open after their QPs were destroyed";
  for (int s : socks) close(s);
  cq.reset();
  pd.reset();
  dev.reset();
  unlink(path.c_str());
}

}  // namespace
}  // namespace tern::shm
