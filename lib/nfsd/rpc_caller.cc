#include "nfsd/rpc_caller.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>

#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

namespace oc = tern::oncrpc;

namespace {

using Clock = std::chrono::steady_clock;

// Replies over 64 KiB are not something any of our peers sends for the
// calls we make; a bigger record is garbage.
constexpr size_t kMaxReply = 64u << 10;

uint32_t next_xid() {
  // Random start so that two processes (or a restarted one) do not reuse
  // each other's xids against one peer's reply cache.
  static std::atomic<uint32_t> xid{static_cast<uint32_t>(std::random_device{}())};
  return xid.fetch_add(1, std::memory_order_relaxed);
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Binds a port in 600..1023 (the range libraries leave to such clients),
// trying each once; false when none was free (the caller goes on unbound).
bool bind_reserved(int fd, sockaddr_storage ss, socklen_t len) {
  for (uint16_t p = 1023; p >= 600; --p) {
    if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(p);
    else reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(p);
    if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0) return true;
    if (errno != EADDRINUSE) return false;
  }
  return false;
}

// What the reply says, as the call's result.
Result<std::vector<uint8_t>> results_of(std::span<const uint8_t> msg, uint32_t xid, const RpcPeer& peer, bool* mine) {
  oc::ReplyHeader h;
  oc::ReplyDecodeResult d = oc::decode_reply(msg, &h);
  *mine = d.status != oc::ReplyDecodeStatus::kDrop && d.status != oc::ReplyDecodeStatus::kNotAReply && h.xid == xid;
  if (!*mine) return make_error(Errc::kRemoteError, "not our reply");
  if (d.status != oc::ReplyDecodeStatus::kOk)
    return make_error(Errc::kRemoteError, "%s answered garbage", rpc_peer_name(peer).c_str());
  if (h.stat != oc::ReplyStat::kAccepted)
    return make_error(Errc::kRemoteError, "%s denied the call (%s, auth_stat %u)", rpc_peer_name(peer).c_str(),
                      h.reject == oc::RejectStat::kRpcMismatch ? "RPC_MISMATCH" : "AUTH_ERROR",
                      static_cast<unsigned>(h.auth));
  if (h.accept != oc::AcceptStat::kSuccess)
    return make_error(Errc::kRemoteError, "%s answered accept_stat %u (1 PROG_UNAVAIL, 2 PROG_MISMATCH, "
                      "3 PROC_UNAVAIL, 4 GARBAGE_ARGS)", rpc_peer_name(peer).c_str(), static_cast<unsigned>(h.accept));
  return std::vector<uint8_t>(msg.begin() + static_cast<std::ptrdiff_t>(d.header_len), msg.end());
}

// Reads exactly n bytes before the deadline.
Status read_full(int fd, uint8_t* p, size_t n, Clock::time_point deadline, const RpcPeer& peer) {
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, remaining_ms(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return make_error(Errc::kTimedOut, "no reply from %s in time", rpc_peer_name(peer).c_str());
    ssize_t got = read(fd, p, n);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return make_error(Errc::kDisconnected, "%s closed the connection", rpc_peer_name(peer).c_str());
    p += got, n -= static_cast<size_t>(got);
  }
  return Status::ok();
}

}  // namespace

Result<RpcPeer> rpc_peer_ip(const std::string& ip, uint16_t port, RpcTransport t) {
  RpcPeer p;
  p.transport = t;
  if (auto* s4 = reinterpret_cast<sockaddr_in*>(&p.addr); inet_pton(AF_INET, ip.c_str(), &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    p.len = sizeof *s4;
    return p;
  }
  p.addr = {};
  if (auto* s6 = reinterpret_cast<sockaddr_in6*>(&p.addr); inet_pton(AF_INET6, ip.c_str(), &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    p.len = sizeof *s6;
    return p;
  }
  return make_error(Errc::kInvalidArgument, "%s is not an IPv4 or IPv6 address", ip.c_str());
}

RpcPeer rpc_peer_of(const sockaddr_storage& ss, uint16_t port, RpcTransport t) {
  RpcPeer p;
  p.transport = t;
  p.addr = ss;
  if (ss.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&p.addr)->sin6_port = htons(port);
    p.len = sizeof(sockaddr_in6);
  } else {
    reinterpret_cast<sockaddr_in*>(&p.addr)->sin_port = htons(port);
    p.len = sizeof(sockaddr_in);
  }
  return p;
}

Result<RpcPeer> rpc_peer_unix(const std::string& path) {
  RpcPeer p;
  auto* su = reinterpret_cast<sockaddr_un*>(&p.addr);
  if (path.size() >= sizeof su->sun_path)
    return make_error(Errc::kInvalidArgument, "socket path %s is too long", path.c_str());
  su->sun_family = AF_UNIX;
  std::memcpy(su->sun_path, path.c_str(), path.size() + 1);
  p.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  p.transport = RpcTransport::kStream;
  return p;
}

std::string rpc_peer_name(const RpcPeer& p) {
  char host[INET6_ADDRSTRLEN] = {};
  if (p.addr.ss_family == AF_UNIX) return std::string("unix:") + reinterpret_cast<const sockaddr_un*>(&p.addr)->sun_path;
  const char* proto = p.transport == RpcTransport::kStream ? "tcp" : "udp";
  if (p.addr.ss_family == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&p.addr);
    inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    return std::string(proto) + " " + host + ":" + std::to_string(ntohs(s4->sin_port));
  }
  const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&p.addr);
  inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
  return std::string(proto) + " [" + host + "]:" + std::to_string(ntohs(s6->sin6_port));
}

Result<std::vector<uint8_t>> rpc_call(const RpcPeer& peer, uint32_t prog, uint32_t vers, uint32_t proc,
                                      std::span<const uint8_t> args, const RpcCallOptions& opt) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(opt.timeout_ms);
  const bool stream = peer.transport == RpcTransport::kStream;
  // AUTH_SYS as root of this host: what rpcbind and statd expect of a local
  // service, and what a client's lockd accepts on its callback program.
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  oc::AuthSysParams sys;
  sys.machinename = std::string_view(host, strnlen(host, oc::kMaxMachineNameSize));
  uint8_t cred[oc::kMaxAuthSysBodySize];
  oc::CallHeader h;
  h.xid = next_xid();
  h.prog = prog, h.vers = vers, h.proc = proc;
  h.cred.flavor = oc::AuthFlavor::kSys;
  h.cred.body = std::span<const uint8_t>(cred, oc::encode_auth_sys(sys, cred));
  std::vector<uint8_t> msg(4 + oc::call_size(h) + args.size());
  const size_t hl = oc::encode_call(h, std::span(msg).subspan(4));
  if (hl == 0) return make_error(Errc::kInternal, "call header did not encode");
  if (!args.empty()) std::memcpy(msg.data() + 4 + hl, args.data(), args.size());
  const uint32_t rec = static_cast<uint32_t>(hl + args.size());
  const uint32_t mark = 0x80000000u | rec;
  msg[0] = static_cast<uint8_t>(mark >> 24), msg[1] = static_cast<uint8_t>(mark >> 16);
  msg[2] = static_cast<uint8_t>(mark >> 8), msg[3] = static_cast<uint8_t>(mark);

  Fd s;
  s.fd = socket(peer.addr.ss_family, (stream ? SOCK_STREAM : SOCK_DGRAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s.fd < 0) return make_sys_error(Errc::kNoResources, errno, "socket for a call to %s", rpc_peer_name(peer).c_str());
  if (peer.addr.ss_family != AF_UNIX) {
    sockaddr_storage src{};
    src.ss_family = peer.addr.ss_family;
    if (opt.source != nullptr) src = *opt.source;
    const socklen_t sl = src.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    bool bound = opt.reserved_port && geteuid() == 0 && bind_reserved(s.fd, src, sl);
    if (!bound && opt.source != nullptr) {
      if (src.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&src)->sin_port = 0;
      else reinterpret_cast<sockaddr_in6*>(&src)->sin6_port = 0;
      if (bind(s.fd, reinterpret_cast<sockaddr*>(&src), sl) != 0)
        return make_sys_error(Errc::kInvalidArgument, errno, "cannot bind the source address of a call to %s",
                              rpc_peer_name(peer).c_str());
    }
  }
  if (connect(s.fd, reinterpret_cast<const sockaddr*>(&peer.addr), peer.len) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    return make_sys_error(e == ECONNREFUSED || e == ENOENT ? Errc::kDisconnected : Errc::kRemoteError, e,
                          "cannot reach %s", rpc_peer_name(peer).c_str());
  }
  if (stream) {
    pollfd pfd{s.fd, POLLOUT, 0};
    if (poll(&pfd, 1, remaining_ms(deadline)) <= 0)
      return make_error(Errc::kTimedOut, "cannot connect to %s in time", rpc_peer_name(peer).c_str());
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0)
      return make_sys_error(err == ECONNREFUSED ? Errc::kDisconnected : Errc::kRemoteError, err, "cannot reach %s",
                            rpc_peer_name(peer).c_str());
    // The call is small: the socket buffer takes it whole.
    if (send(s.fd, msg.data(), msg.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(msg.size()))
      return make_sys_error(Errc::kDisconnected, errno, "cannot send to %s", rpc_peer_name(peer).c_str());
    // Replies to other xids cannot come on our own connection; the record
    // may come in several fragments.
    std::vector<uint8_t> reply;
    for (;;) {
      uint8_t m[4];
      TERN_TRY(read_full(s.fd, m, 4, deadline, peer));
      const uint32_t fm = uint32_t{m[0]} << 24 | uint32_t{m[1]} << 16 | uint32_t{m[2]} << 8 | m[3];
      const size_t len = fm & 0x7fffffffu;
      if (reply.size() + len > kMaxReply)
        return make_error(Errc::kRemoteError, "%s sent a reply over 64 KiB", rpc_peer_name(peer).c_str());
      const size_t at = reply.size();
      reply.resize(at + len);
      TERN_TRY(read_full(s.fd, reply.data() + at, len, deadline, peer));
      if (fm & 0x80000000u) break;
    }
    bool mine = false;
    auto r = results_of(reply, h.xid, peer, &mine);
    if (!mine) return make_error(Errc::kRemoteError, "%s answered another xid", rpc_peer_name(peer).c_str());
    return r;
  }
  // Datagram: the record without its mark, sent again on silence.
  const int attempts = opt.attempts < 1 ? 1 : opt.attempts;
  const int slice = opt.timeout_ms / attempts;
  std::vector<uint8_t> buf(kMaxReply);
  for (int a = 0; a < attempts; ++a) {
    (void)!send(s.fd, msg.data() + 4, rec, MSG_NOSIGNAL);
    const auto until = std::min(deadline, Clock::now() + std::chrono::milliseconds(slice));
    for (;;) {
      pollfd pfd{s.fd, POLLIN, 0};
      int r = poll(&pfd, 1, remaining_ms(until));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      ssize_t got = recv(s.fd, buf.data(), buf.size(), 0);
      if (got < 0 && errno == ECONNREFUSED)
        return make_sys_error(Errc::kDisconnected, errno, "nothing listens at %s", rpc_peer_name(peer).c_str());
      if (got <= 0) continue;
      bool mine = false;
      auto res = results_of(std::span<const uint8_t>(buf.data(), static_cast<size_t>(got)), h.xid, peer, &mine);
      if (mine) return res;  // a stale reply to another xid is skipped
    }
  }
  return make_error(Errc::kTimedOut, "no reply from %s in %d ms", rpc_peer_name(peer).c_str(), opt.timeout_ms);
}

}  // namespace tern::nfsd
