// Control messages over the AF_UNIX SOCK_SEQPACKET socket: each message is
// delivered whole or not at all, and may carry one fd (SCM_RIGHTS).
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shm/shm_internal.h"

namespace tern::shm {

ShmMsg make_msg(ShmMsgType type) {
  ShmMsg m;
  std::memset(&m, 0, sizeof m);
  m.magic = kAreaMagic;
  m.version = kLayoutVersion;
  m.type = type;
  return m;
}

int send_msg(int sock, const ShmMsg& m, int fd) {
  iovec iov{const_cast<ShmMsg*>(&m), sizeof m};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    std::memset(cbuf, 0, sizeof cbuf);
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (r == static_cast<ssize_t>(sizeof m)) return 0;
    if (r < 0 && errno == EINTR) continue;
    // A full socket buffer on a control message means the peer stopped reading;
    // treat it like any other send failure (the caller reports disconnect).
    return r < 0 ? errno : EMSGSIZE;
  }
}

int recv_msg(int sock, ShmMsg* m, int* fd) {
  *fd = -1;
  iovec iov{m, sizeof *m};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t r;
  do {
    r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
  // Take every fd that came along, keep at most one: a peer sending several
  // must not make us leak descriptors. This comes before the r == 0 check: a
  // zero-length message can carry fds too.
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (*fd < 0) *fd = f;
      else close(f);
    }
  }
  if (r == 0) {  // orderly shutdown, the peer died, or an empty message: all end the connection
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return -ECONNRESET;
  }
  if (!msg_valid(*m, r) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return -EPROTO;
  }
  return 1;
}

bool msg_valid(const ShmMsg& m, ssize_t got) {
  return got == static_cast<ssize_t>(sizeof m) && m.magic == kAreaMagic && m.version == kLayoutVersion &&
         m.type >= kMsgHello && m.type <= kMsgMax && m.pdata_len <= kMaxPrivateData;
}

}  // namespace tern::shm
