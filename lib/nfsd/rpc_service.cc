#include "nfsd/rpc_service.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <cstring>

#include "base/log.h"

namespace tern::nfsd {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxRecord = 64u << 10;
constexpr int kUdpPerPass = 64;

// The client's address without its port: what the per-address share counts.
std::string address_of(const sockaddr_storage& ss) {
  char b[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, b, sizeof b);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, b, sizeof b);
  return b;
}

uint16_t port_of(const sockaddr_storage& ss) {
  return ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port
                                        : reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
}

}  // namespace

void rpc_accepted(std::vector<uint8_t>* out, uint32_t xid, oncrpc::AcceptStat st, std::span<const uint8_t> results,
                  uint32_t low, uint32_t high) {
  oncrpc::ReplyHeader h;
  h.xid = xid;
  h.stat = oncrpc::ReplyStat::kAccepted;
  h.accept = st;
  h.mismatch_low = low, h.mismatch_high = high;
  out->resize(oncrpc::reply_size(h) + results.size());
  size_t n = oncrpc::encode_reply(h, *out);
  if (!results.empty()) std::memcpy(out->data() + n, results.data(), results.size());
  out->resize(n + results.size());
}

RpcDecoded rpc_decode_call(std::span<const uint8_t> msg, oncrpc::CallHeader* h, size_t* header_len,
                           std::vector<uint8_t>* reply) {
  oncrpc::CallDecodeResult d = oncrpc::decode_call(msg, h);
  if (d.status == oncrpc::CallDecodeStatus::kOk) {
    *header_len = d.header_len;
    return RpcDecoded::kCall;
  }
  if (d.status == oncrpc::CallDecodeStatus::kDrop || d.status == oncrpc::CallDecodeStatus::kNotACall)
    return RpcDecoded::kNothing;
  oncrpc::ReplyHeader rh;
  if (!oncrpc::error_reply_for(d, h->xid, &rh)) return RpcDecoded::kNothing;
  reply->resize(oncrpc::reply_size(rh));
  reply->resize(oncrpc::encode_reply(rh, *reply));
  return RpcDecoded::kAnswered;
}

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
  if (opt.max_conns == 0 || opt.max_per_address == 0 || opt.record_ms == 0 || opt.idle_ms == 0)
    return make_error(Errc::kInvalidArgument, "%s: connection limits must be above 0", opt.name.c_str());
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
    if (bind(s->tcp_fd_, reinterpret_cast<sockaddr*>(&a), sl) != 0 || listen(s->tcp_fd_, static_cast<int>(opt.max_conns)) != 0)
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
  // A bounded batch per pass: datagrams sent without pause must not keep
  // the thread from the TCP connections (poll() reports the rest again).
  for (int i = 0; i < kUdpPerPass; ++i) {
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
    std::string addr;          // the peer's address, for its share of the table
    std::vector<uint8_t> in;   // bytes received, not yet a whole fragment
    std::vector<uint8_t> msg;  // fragments of the record being assembled
    Clock::time_point last;    // the last byte received (or the accept)
    Clock::time_point record;  // the first byte of the record under way; max(): none
  };
  const auto record_limit = std::chrono::milliseconds(opt_.record_ms);
  const auto idle_limit = std::chrono::milliseconds(opt_.idle_ms);
  // Deadlines are looked at every pass: a quarter of the shortest, at most 1 s.
  const int pass_ms = static_cast<int>(std::clamp<uint32_t>(std::min(opt_.record_ms, opt_.idle_ms) / 4, 10, 1000));
  std::vector<Conn> conns;
  std::vector<uint8_t> reply;
  std::vector<uint8_t> dgram(kMaxRecord);
  auto drop_at = [&](size_t i) {
    close(conns[i].fd);
    conns[i] = std::move(conns.back());
    conns.pop_back();
  };
  // Which connection makes room for a newcomer from `addr`: its own oldest
  // when the address is at its share; else, with every slot taken, the
  // least recently active one of the address holding the most.
  auto victim = [&](const std::string& addr) -> int64_t {
    size_t mine = 0;
    int64_t my_oldest = -1;
    for (size_t i = 0; i < conns.size(); ++i)
      if (conns[i].addr == addr) {
        ++mine;
        if (my_oldest < 0 || conns[i].last < conns[static_cast<size_t>(my_oldest)].last)
          my_oldest = static_cast<int64_t>(i);
      }
    if (mine >= opt_.max_per_address) return my_oldest;
    if (conns.size() < opt_.max_conns) return -1;
    size_t most = 0;
    int64_t v = -1;
    for (size_t i = 0; i < conns.size(); ++i) {
      size_t n = 0;
      for (const Conn& o : conns) n += o.addr == conns[i].addr;
      if (n > most || (n == most && conns[i].last < conns[static_cast<size_t>(v)].last)) {
        most = n;
        v = static_cast<int64_t>(i);
      }
    }
    return v;
  };
  auto last_tick = Clock::now();
  for (;;) {
    std::vector<pollfd> pfds;
    pfds.push_back({stop_fd_, POLLIN, 0});
    pfds.push_back({tcp_fd_, POLLIN, 0});  // fd -1 is ignored by poll
    pfds.push_back({udp_fd_, POLLIN, 0});
    pfds.push_back({lo_fd_, POLLIN, 0});
    for (const Conn& c : conns) pfds.push_back({c.fd, POLLIN, 0});
    int n = poll(pfds.data(), pfds.size(), pass_ms);
    if (n < 0 && errno != EINTR) {
      TERN_LOG(kError, "nfsd", "%s: poll failed (%s); the service stops", opt_.name.c_str(), strerror(errno));
      break;
    }
    if (pfds[0].revents != 0) break;
    auto now = Clock::now();
    if (opt_.tick && now - last_tick >= std::chrono::seconds(1)) {
      last_tick = now;
      opt_.tick();
    }
    if (pfds[2].revents & POLLIN) serve_udp(udp_fd_, bound_, dgram, reply);
    if (pfds[3].revents & POLLIN) serve_udp(lo_fd_, lo_addr_, dgram, reply);
    // The connections polled first (the table changes below as newcomers
    // are let in), deadlines included.
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
          if (c.in.empty() && c.msg.empty()) c.record = now;
          c.in.insert(c.in.end(), buf, buf + got);
        }
        // Whole fragments: a 4-byte mark (last-fragment bit, length), then the bytes.
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
            // Replies are small: a socket that cannot take one at once is
            // not reading its answers, and is dropped.
            if (send(c.fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(out.size()))
              drop = true;
          }
          c.msg.clear();
          // The next record's clock starts with its own first byte.
          c.record = c.in.empty() ? Clock::time_point::max() : now;
        }
      }
      // A record is due whole by its deadline however it trickles; a
      // connection with nothing under way may stay idle a while longer.
      const bool partial = !c.in.empty() || !c.msg.empty();
      if (!drop && ((partial && now - c.record > record_limit) || (!partial && now - c.last > idle_limit))) {
        timed_out_.fetch_add(1, std::memory_order_relaxed);
        drop = true;
      }
      if (drop) {
        drop_at(i);
        --i;
      }
    }
    if (pfds[1].revents & POLLIN) {
      for (;;) {
        Conn c{};
        socklen_t pl = sizeof c.peer;
        c.fd = accept4(tcp_fd_, reinterpret_cast<sockaddr*>(&c.peer), &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c.fd < 0) break;
        c.addr = address_of(c.peer);
        if (int64_t v = victim(c.addr); v >= 0) {
          replaced_.fetch_add(1, std::memory_order_relaxed);
          drop_at(static_cast<size_t>(v));
        }
        socklen_t ll = sizeof c.local;
        getsockname(c.fd, reinterpret_cast<sockaddr*>(&c.local), &ll);
        now = Clock::now();
        c.last = now;
        c.record = Clock::time_point::max();
        conns.push_back(std::move(c));
      }
    }
  }
  for (Conn& c : conns) close(c.fd);
}

}  // namespace tern::nfsd
