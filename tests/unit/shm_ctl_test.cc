// pmd/shm's control-message receiver against a peer's odd messages: whatever
// arrives, every fd that came with it is either handed to the caller or
// closed. (tests/fuzz/fuzz_shm_ctl.cc fuzzes the same path; these are the
// cases it found.)
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shm/shm_internal.h"

namespace tern::shm {
namespace {

int open_fds() {
  DIR* d = opendir("/proc/self/fd");
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

void send_with_fd(int sock, const void* buf, size_t len, int fd) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  cmsghdr* c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ASSERT_EQ(sendmsg(sock, &mh, 0), static_cast<ssize_t>(len));
}

struct Pair : ::testing::Test {
  int s[2] = {-1, -1};
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, s), 0); }
  void TearDown() override {
    close(s[0]);
    close(s[1]);
  }
};

// An empty message ends the connection, like an orderly shutdown; the fd it
// carried must not stay open in the receiver.
TEST_F(Pair, EmptyMessageWithFdIsClosed) {
  int mfd = memfd_create("t", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  send_with_fd(s[0], "", 0, mfd);
  close(mfd);
  int before = open_fds();
  ShmMsg m;
  int fd = 123;
  EXPECT_EQ(recv_msg(s[1], &m, &fd), -ECONNRESET);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(open_fds(), before);
}

TEST_F(Pair, ShortMessageWithFdIsClosed) {
  int mfd = memfd_create("t", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  ShmMsg out = make_msg(kMsgSegment);
  send_with_fd(s[0], &out, sizeof out - 1, mfd);
  close(mfd);
  int before = open_fds();
  ShmMsg m;
  int fd = 123;
  EXPECT_EQ(recv_msg(s[1], &m, &fd), -EPROTO);
  EXPECT_EQ(fd, -1);
  EXPECT_EQ(open_fds(), before);
}

TEST_F(Pair, ValidMessageHandsTheFdOver) {
  int mfd = memfd_create("t", MFD_CLOEXEC);
  ASSERT_GE(mfd, 0);
  ShmMsg out = make_msg(kMsgSegment);
  send_with_fd(s[0], &out, sizeof out, mfd);
  close(mfd);
  ShmMsg m;
  int fd = -1;
  ASSERT_EQ(recv_msg(s[1], &m, &fd), 1);
  EXPECT_EQ(m.type, kMsgSegment);
  ASSERT_GE(fd, 0);
  close(fd);
}

}  // namespace
}  // namespace tern::shm
