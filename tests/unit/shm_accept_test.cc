// pmd/shm's connection events as an engine polls them, once a millisecond
// inside a datapath pass: a listening device with no connection waiting
// makes no accept4 call (on this 2-vCPU VM one finding nothing takes ~3 us,
// the larger part of that tick, and it landed in ~1% of a well-behaved
// client's echoes: docs/performance.md, "Echo p99 under the cache flood,
// repeated"), and a connection that arrives is still accepted by the next
// poll.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "rdmadev/rdmadev.h"

namespace {
int g_accept_calls = 0, g_accepted = 0;
}  // namespace

// Every accept4 of this program (pmd/shm is linked in), counted, then made.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  ++g_accept_calls;
  const int r = static_cast<int>(syscall(SYS_accept4, fd, addr, len, flags));
  if (r >= 0) ++g_accepted;
  return r;
}

namespace tern::shm {
namespace {

TEST(ShmAccept, AQuietListenerIsNotAskedAndANewcomerIsTakenAtTheNextPoll) {
  char tmpl[] = "/tmp/tern-accept-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, path = dir + "/srv";
  {
    auto dev = rdma::open_device("shm:path=" + path);
    ASSERT_TRUE(dev) << dev.status().to_string();
    ASSERT_TRUE((*dev)->listen().is_ok());
    rdma::CmEvent ev;
    for (int i = 0; i < 100; ++i) EXPECT_FALSE((*dev)->poll_cm(&ev));
    // The first poll may look (the device cannot know yet); none after it.
    EXPECT_LE(g_accept_calls, 1) << "accept4 calls in 100 polls with nobody connecting";

    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    ASSERT_GE(s, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.data(), path.size());
    ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    (void)(*dev)->poll_cm(&ev);
    EXPECT_EQ(g_accepted, 1) << "the connection waiting was not accepted by the next poll";

    const int before = g_accept_calls;
    for (int i = 0; i < 100; ++i) (void)(*dev)->poll_cm(&ev);
    EXPECT_LE(g_accept_calls - before, 1) << "accept4 calls in 100 polls after the newcomer was taken";
    close(s);
  }
  unlink(path.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace tern::shm
