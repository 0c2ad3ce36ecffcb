// pmd/shm control messages over the AF_UNIX SOCK_SEQPACKET socket: each
// message is delivered whole or not at all, and may carry one fd
// (SCM_RIGHTS). Framing and the checks every message read gets (make_msg,
// send_msg, recv_msg, msg_valid), and an established QP's end of its
// connection's socket: taking the socket and learning who holds the other
// end (set_socket, peer), and reading what the peer sends once connected
// (drain_ctl: segments, wakes, goodbye). The handshake's messages are
// shm_device.cc's; what a "segment" message brings is shm_segments.cc's.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

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

bool ShmQp::drain_ctl() {
  if (sock_ < 0 || peer_gone_) return false;
  for (;;) {
    ShmMsg m;
    int fd = -1;
    int r = recv_msg(sock_, &m, &fd);
    if (r == 0) return true;
    if (r == -EPROTO) {
      protocol_error(make_error(Errc::kRemoteError, "malformed control message"));
      return false;
    }
    if (r < 0) {
      peer_gone_ = true;
      return false;
    }
    Status bad;
    if (m.type == kMsgSegment) {
      bad = map_peer_segment(m, fd);
    } else if (m.type == kMsgWake) {
      // Its work is in the rings, and progress() finds it -- unless this
      // WAKE is read after this pass's progress, by the connection-event
      // poll of the very poll() that is a host's second look before it
      // sleeps: then the WAKE was the only news of that work. Keep it on our
      // own eventfd while armed, so the sleep ends at once.
      st_.wakes_received.add();
      if (dev_->armed()) dev_->self_wake();
      look_at_cons();  // the peer set our bit before it rang (an ack, maybe); a visit costs little
    } else if (m.type == kMsgBye) {
      peer_gone_ = true;  // the state word says the same; this covers a peer that never mapped it
    } else {
      bad = make_error(Errc::kRemoteError, "unexpected control message type %u on an established connection",
                       unsigned{m.type});
    }
    if (fd >= 0) close(fd);
    if (!bad.is_ok()) {
      protocol_error(std::move(bad));
      return false;
    }
    if (peer_gone_) return false;
  }
}

void ShmQp::set_socket(int fd) {
  sock_ = fd;
  dev_->own_fd(fd, this);
  dev_->watch_fd(fd);  // a hang-up or a message wakes a sleeping host
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    peer_pid_ = cred.pid;
    peer_uid_ = static_cast<int>(cred.uid);
  }
}

std::string ShmQp::peer() const {
  if (sock_ < 0 && peer_pid_ < 0) return {};
  return "pid " + std::to_string(peer_pid_) + " uid " + std::to_string(peer_uid_) + " qp " + std::to_string(peer_qpn_);
}

std::string ShmQp::peer_host() const {
  if (sock_ < 0 && peer_pid_ < 0) return {};
  return "pid " + std::to_string(peer_pid_) + " uid " + std::to_string(peer_uid_);
}

}  // namespace tern::shm
