#include "nfsd/rpc_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "base/log.h"

namespace tern::nfsd {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxRecord = 64u << 10;
constexpr size_t kMaxClients = 64;
constexpr auto kIdle = std::chrono::minutes(5);

uint16_t port_of(const sockaddr_storage& ss) {
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

}  // namespace

Result<sockaddr_storage> parse_ip(const std::string& addr, uint16_t port, socklen_t* len) {
  sockaddr_storage ss{};
  if (auto* s4 = reinterpret_cast<sockaddr_in*>(&ss); inet_pton(AF_INET, addr.c_str(), &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    *len = sizeof *s4;
    return ss;
  }
  ss = {};
  if (auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss); inet_pton(AF_INET6, addr.c_str(), &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    *len = sizeof *s6;
    return ss;
  }
  return make_error(Errc::kInvalidArgument, "%s is not an IPv4 or IPv6 address", addr.c_str());
}

Result<std::unique_ptr<RpcService>> RpcService::start(const RpcServiceOptions& opt, RpcHandler handler) {
  std::unique_ptr<RpcService> s(new RpcService());
  s->opt_ = opt;
  s->handler_ = std::move(handler);
  socklen_t sl = 0;
  auto ss = parse_ip(opt.addr, opt.port, &sl);
  if (!ss) return make_error(Errc::kInvalidArgument, "%s: %s", opt.name.c_str(), ss.status().message().c_str());
  sockaddr_storage a = *ss;
  const int one = 1;
  // TCP first; UDP then takes the port TCP got, so that one port serves both
  // (what rpcbind shows and what clients expect of a lock manager).
  if (opt.tcp) {
    s->tcp_fd_ = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->tcp_fd_ < 0) return make_sys_error(Errc::kNoResources, errno, "%s: socket", opt.name.c_str());
    setsockopt(s->tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s->tcp_fd_, reinterpret_cast<sockaddr*>(&a), sl) != 0 || listen(s->tcp_fd_, 64) != 0)
      return make_sys_error(errno == EADDRINUSE ? Errc::kBadState : Errc::kInvalidArgument, errno,
                            "%s: cannot listen on tcp %s port %u", opt.name.c_str(), opt.addr.c_str(), opt.port);
    socklen_t l = sizeof a;
    getsockname(s->tcp_fd_, reinterpret_cast<sockaddr*>(&a), &l);
  }
  if (opt.udp) {
    s->udp_fd_ = socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->udp_fd_ < 0) return make_sys_error(Errc::kNoResources, errno, "%s: socket", opt.name.c_str());
    if (bind(s->udp_fd_, reinterpret_cast<sockaddr*>(&a), sl) != 0)
      return make_sys_error(errno == EADDRINUSE ? Errc::kBadState : Errc::kInvalidArgument, errno,
                            "%s: cannot bind udp %s port %u", opt.name.c_str(), opt.addr.c_str(), port_of(a));
    socklen_t l = sizeof a;
    getsockname(s->udp_fd_, reinterpret_cast<sockaddr*>(&a), &l);
  }
  s->bound_ = a;
  s->port_ = port_of(a);
  if (opt.udp && opt.loopback_udp && a.ss_family == AF_INET) {
    const uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(&a)->sin_addr.s_addr);
    if (ip != INADDR_ANY && (ip >> 24) != 127) {
      sockaddr_in lo{};
      lo.sin_family = AF_INET;
      lo.sin_port = htons(s->port_);
      lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      s->lo_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (s->lo_fd_ < 0 || bind(s->lo_fd_, reinterpret_cast<sockaddr*>(&lo), sizeof lo) != 0)
        return make_sys_error(Errc::kBadState, errno, "%s: cannot bind udp 127.0.0.1 port %u", opt.name.c_str(),
                              s->port_);
      std::memcpy(&s->lo_addr_, &lo, sizeof lo);
    }
  }
  s->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->stop_fd_ < 0) return make_sys_error(Errc::kNoResources, errno, "%s: eventfd", opt.name.c_str());
  s->thread_ = std::thread([p = s.get()] { p->run(); });
  return s;
}

RpcService::~RpcService() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  for (int fd : {stop_fd_, tcp_fd_, udp_fd_, lo_fd_})
    if (fd >= 0) close(fd);
}

void RpcService::serve_udp(int fd, const sockaddr_storage& local, std::vector<uint8_t>& dgram,
                           std::vector<uint8_t>& reply) {
  for (;;) {
    RpcRequest req;
    socklen_t pl = sizeof req.peer;
    ssize_t got = recvfrom(fd, dgram.data(), dgram.size(), 0, reinterpret_cast<sockaddr*>(&req.peer), &pl);
    if (got < 0) break;
    req.msg = std::span<const uint8_t>(dgram.data(), static_cast<size_t>(got));
    req.local = local;
    req.tcp = false;
    calls_.fetch_add(1, std::memory_order_relaxed);
    reply.clear();
    if (handler_(req, &reply))
      (void)!sendto(fd, reply.data(), reply.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&req.peer), pl);
  }
}

void RpcService::run() {
  struct Conn {
    int fd;
    sockaddr_storage peer, local;
    std::vector<uint8_t> in;   // bytes received, not yet a whole fragment
    std::vector<uint8_t> msg;  // fragments of the record being assembled
    Clock::time_point last;
  };
  std::vector<Conn> conns;
  std::vector<uint8_t> reply;
  std::vector<uint8_t> dgram(kMaxRecord);
  auto last_tick = Clock::now();
  for (;;) {
    std::vector<pollfd> pfds;
    pfds.push_back({stop_fd_, POLLIN, 0});
    pfds.push_back({tcp_fd_, POLLIN, 0});  // fd -1 is ignored by poll
    pfds.push_back({udp_fd_, POLLIN, 0});
    pfds.push_back({lo_fd_, POLLIN, 0});
    for (const Conn& c : conns) pfds.push_back({c.fd, POLLIN, 0});
    int n = poll(pfds.data(), pfds.size(), 1000);
    if (n < 0 && errno != EINTR) {
      TERN_LOG(kError, "nfsd", "%s: poll failed (%s); the service stops", opt_.name.c_str(), strerror(errno));
      break;
    }
    if (pfds[0].revents != 0) break;
    const auto now = Clock::now();
    if (opt_.tick && now - last_tick >= std::chrono::seconds(1)) {
      last_tick = now;
      opt_.tick();
    }
    if (n <= 0) continue;
    if (pfds[1].revents & POLLIN) {
      for (;;) {
        Conn c{};
        socklen_t pl = sizeof c.peer;
        c.fd = accept4(tcp_fd_, reinterpret_cast<sockaddr*>(&c.peer), &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c.fd < 0) break;
        if (conns.size() >= kMaxClients) {
          close(c.fd);
          continue;
        }
        socklen_t ll = sizeof c.local;
        getsockname(c.fd, reinterpret_cast<sockaddr*>(&c.local), &ll);
        c.last = now;
        conns.push_back(std::move(c));
      }
    }
    if (pfds[2].revents & POLLIN) serve_udp(udp_fd_, bound_, dgram, reply);
    if (pfds[3].revents & POLLIN) serve_udp(lo_fd_, lo_addr_, dgram, reply);
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      bool drop = false;
      const short ev = i + 4 < pfds.size() && pfds[i + 4].fd == c.fd ? pfds[i + 4].revents : 0;
      if (ev != 0) {
        uint8_t buf[8192];
        ssize_t got = read(c.fd, buf, sizeof buf);
        if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) drop = true;
        if (got > 0) {
          c.last = now;
          c.in.insert(c.in.end(), buf, buf + got);
        }
        while (!drop && c.in.size() >= 4) {
          const uint32_t mark = uint32_t{c.in[0]} << 24 | uint32_t{c.in[1]} << 16 | uint32_t{c.in[2]} << 8 | c.in[3];
          const size_t len = mark & 0x7fffffffu;
          if (c.msg.size() + len > kMaxRecord) {
            drop = true;
            break;
          }
          if (c.in.size() < 4 + len) break;
          c.msg.insert(c.msg.end(), c.in.begin() + 4, c.in.begin() + 4 + static_cast<std::ptrdiff_t>(len));
          c.in.erase(c.in.begin(), c.in.begin() + 4 + static_cast<std::ptrdiff_t>(len));
          if ((mark & 0x80000000u) == 0) continue;
          RpcRequest req;
          req.msg = c.msg;
          req.peer = c.peer;
          req.local = c.local;
          req.tcp = true;
          calls_.fetch_add(1, std::memory_order_relaxed);
          reply.clear();
          if (handler_(req, &reply)) {
            std::vector<uint8_t> out(4 + reply.size());
            const uint32_t m = 0x80000000u | static_cast<uint32_t>(reply.size());
            out[0] = static_cast<uint8_t>(m >> 24), out[1] = static_cast<uint8_t>(m >> 16);
            out[2] = static_cast<uint8_t>(m >> 8), out[3] = static_cast<uint8_t>(m);
            std::memcpy(out.data() + 4, reply.data(), reply.size());
            if (send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(out.size()))
              drop = true;
          }
          c.msg.clear();
        }
      }
      if (!drop && now - c.last > kIdle) drop = true;
      if (drop) {
        close(c.fd);
        conns[i] = std::move(conns.back());
        conns.pop_back();
        --i;
      }
    }
  }
  for (Conn& c : conns) close(c.fd);
}

}  // namespace tern::nfsd
