#include "nfsd/mountd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "base/log.h"
#include "nfs/mount3.h"
#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

namespace oc = tern::oncrpc;
namespace m3 = tern::nfs::mount3;

namespace {

constexpr size_t kMaxRecord = 64u << 10;

std::string normalized(std::string_view p) {
  std::string s(p);
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

void accepted(std::vector<uint8_t>* out, uint32_t xid, oc::AcceptStat st, std::span<const uint8_t> results,
              uint32_t low = 0, uint32_t high = 0) {
  oc::ReplyHeader h;
  h.xid = xid;
  h.stat = oc::ReplyStat::kAccepted;
  h.accept = st;
  h.mismatch_low = low, h.mismatch_high = high;
  out->resize(oc::reply_size(h) + results.size());
  size_t n = oc::encode_reply(h, *out);
  if (!results.empty()) std::memcpy(out->data() + n, results.data(), results.size());
  out->resize(n + results.size());
}

}  // namespace

bool mountd_answer(const Export& exp, std::span<const uint8_t> call, std::vector<uint8_t>* reply, bool* mounted) {
  return mountd_answer(*ExportTable::of_one(exp), ClientAddr::from_peer_id("127.0.0.1"), call, reply, mounted);
}

bool mountd_answer(const ExportTable& exports, const ClientAddr& from, std::span<const uint8_t> call,
                   std::vector<uint8_t>* reply, bool* mounted) {
  *mounted = false;
  oc::CallHeader h;
  oc::CallDecodeResult d = oc::decode_call(call, &h);
  if (d.status == oc::CallDecodeStatus::kDrop || d.status == oc::CallDecodeStatus::kNotACall) return false;
  if (d.status != oc::CallDecodeStatus::kOk) {
    oc::ReplyHeader rh;
    if (!oc::error_reply_for(d, h.xid, &rh)) return false;
    reply->resize(oc::reply_size(rh));
    reply->resize(oc::encode_reply(rh, *reply));
    return true;
  }
  if (h.prog != m3::kProgram) {
    accepted(reply, h.xid, oc::AcceptStat::kProgUnavail, {});
    return true;
  }
  if (h.vers != m3::kVersion) {
    accepted(reply, h.xid, oc::AcceptStat::kProgMismatch, {}, m3::kVersion, m3::kVersion);
    return true;
  }
  std::span<const uint8_t> args = call.subspan(d.header_len);
  // EXPORT's list grows with the exports and their clients.
  std::vector<uint8_t> buf(kMaxRecord);
  xdr::XdrWriter w(buf);
  switch (static_cast<m3::Proc>(h.proc)) {
    case m3::Proc::kNull:
    case m3::Proc::kUmntall:
      break;
    case m3::Proc::kMnt: {
      std::string_view path;
      if (!m3::decode_dirpath(args, &path)) {
        accepted(reply, h.xid, oc::AcceptStat::kGarbageArgs, {});
        return true;
      }
      m3::MntRes r;
      const Export* exp = exports.by_path(normalized(path));
      if (exp == nullptr) {
        r.status = m3::Stat::kNoent;
      } else if (exp->rule_for(from) == nullptr) {
        r.status = m3::Stat::kAccess;  // not on the export's list: no root handle
      } else {
        r.status = m3::Stat::kOk;
        r.fh = exp->root_fh();
        r.flavors = {static_cast<uint32_t>(oc::AuthFlavor::kSys)};
        *mounted = true;
      }
      m3::encode(w, r);
      break;
    }
    case m3::Proc::kUmnt: {
      std::string_view path;
      if (!m3::decode_dirpath(args, &path)) {
        accepted(reply, h.xid, oc::AcceptStat::kGarbageArgs, {});
        return true;
      }
      break;  // void: the server keeps no list of mounts
    }
    case m3::Proc::kDump:
      m3::encode(w, std::span<const m3::MountEntry>());
      break;
    case m3::Proc::kExport: {
      std::vector<m3::ExportEntry> list;
      for (const auto& e : exports.exports()) {
        m3::ExportEntry x{e->name(), {}};
        for (const ClientRule& r : e->rules()) x.groups.push_back(r.who.text());
        list.push_back(std::move(x));
      }
      m3::encode(w, std::span<const m3::ExportEntry>(list));
      break;
    }
    default:
      accepted(reply, h.xid, oc::AcceptStat::kProcUnavail, {});
      return true;
  }
  accepted(reply, h.xid, w.ok() ? oc::AcceptStat::kSuccess : oc::AcceptStat::kSystemErr,
           w.ok() ? w.written() : std::span<const uint8_t>());
  return true;
}

Result<std::unique_ptr<Mountd>> Mountd::start(const Export& exp, const MountdOptions& opt) {
  auto own = std::make_unique<PublishedExports>(ExportTable::of_one(exp));
  auto m = start(*own, opt);
  if (m) (*m)->own_ = std::move(own);
  return m;
}

Result<std::unique_ptr<Mountd>> Mountd::start(const PublishedExports& pub, const MountdOptions& opt) {
  if (opt.max_clients == 0 || opt.max_per_address == 0 || opt.record_ms == 0 || opt.idle_ms == 0)
    return make_error(Errc::kInvalidArgument, "tern-nfsd: MOUNT's limits must be above 0");
  std::unique_ptr<Mountd> m(new Mountd(pub, opt));
  sockaddr_storage ss{};
  socklen_t sl;
  int family;
  if (auto* s4 = reinterpret_cast<sockaddr_in*>(&ss); inet_pton(AF_INET, opt.addr.c_str(), &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons(opt.port);
    sl = sizeof *s4;
    family = AF_INET;
  } else if (auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss); inet_pton(AF_INET6, opt.addr.c_str(), &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(opt.port);
    sl = sizeof *s6;
    family = AF_INET6;
  } else {
    return make_error(Errc::kInvalidArgument, "tern-nfsd: MOUNT address %s is not an IPv4 or IPv6 address",
                      opt.addr.c_str());
  }
  m->listen_fd_ = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (m->listen_fd_ < 0) return make_sys_error(Errc::kNoResources, errno, "tern-nfsd: socket for MOUNT");
  int one = 1;
  setsockopt(m->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(m->listen_fd_, reinterpret_cast<sockaddr*>(&ss), sl) != 0 || listen(m->listen_fd_, static_cast<int>(opt.max_clients)) != 0)
    return make_sys_error(errno == EADDRINUSE ? Errc::kBadState : Errc::kInvalidArgument, errno,
                          "tern-nfsd: cannot listen for MOUNT on %s port %u", opt.addr.c_str(), opt.port);
  if (getsockname(m->listen_fd_, reinterpret_cast<sockaddr*>(&ss), &sl) == 0)
    m->port_ = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  m->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m->stop_fd_ < 0) return make_sys_error(Errc::kNoResources, errno, "tern-nfsd: eventfd");
  m->thread_ = std::thread([p = m.get()] { p->run(); });
  return m;
}

Mountd::~Mountd() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) close(stop_fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

namespace {

// The client's address without its port: what the per-address share counts.
std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  char b[INET6_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return b;
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, b, sizeof b);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr, b, sizeof b);
  return b;
}

}  // namespace

void Mountd::run() {
  using Clock = std::chrono::steady_clock;
  struct Client {
    int fd;
    std::string addr;          // the peer's address, for its share of the table
    ClientAddr peer;           // the same, which MNT checks against the export's list
    std::vector<uint8_t> in;   // bytes received, not yet a whole record
    std::vector<uint8_t> msg;  // fragments of the record being assembled
    Clock::time_point last;    // the last byte received (or the accept)
    Clock::time_point record;  // the first byte of the record under way; max(): none
  };
  const auto record_limit = std::chrono::milliseconds(opt_.record_ms);
  const auto idle_limit = std::chrono::milliseconds(opt_.idle_ms);
  // Deadlines are looked at every tick: a quarter of the shortest, at most 1 s.
  const int tick_ms = static_cast<int>(std::clamp<uint32_t>(std::min(opt_.record_ms, opt_.idle_ms) / 4, 10, 1000));
  std::vector<Client> clients;
  std::vector<uint8_t> reply;
  auto drop_at = [&](size_t i) {
    close(clients[i].fd);
    clients[i] = std::move(clients.back());
    clients.pop_back();
  };
  // Which connection makes room for a newcomer from `addr`: its own oldest
  // when the address is at its share; else, with every slot taken, the
  // least recently active one of the address holding the most.
  auto victim = [&](const std::string& addr) -> int64_t {
    size_t mine = 0;
    int64_t my_oldest = -1;
    for (size_t i = 0; i < clients.size(); ++i)
      if (clients[i].addr == addr) {
        ++mine;
        if (my_oldest < 0 || clients[i].last < clients[static_cast<size_t>(my_oldest)].last)
          my_oldest = static_cast<int64_t>(i);
      }
    if (mine >= opt_.max_per_address) return my_oldest;
    if (clients.size() < opt_.max_clients) return -1;
    size_t most = 0;
    int64_t v = -1;
    for (size_t i = 0; i < clients.size(); ++i) {
      size_t n = 0;
      for (const Client& o : clients) n += o.addr == clients[i].addr;
      if (n > most || (n == most && clients[i].last < clients[static_cast<size_t>(v)].last)) {
        most = n;
        v = static_cast<int64_t>(i);
      }
    }
    return v;
  };
  for (;;) {
    std::vector<pollfd> pfds;
    pfds.push_back({stop_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (const Client& c : clients) pfds.push_back({c.fd, POLLIN, 0});
    int n = poll(pfds.data(), pfds.size(), tick_ms);
    if (n < 0 && errno != EINTR) break;
    if (pfds[0].revents != 0) break;
    auto now = Clock::now();
    // Read what came first, against the connections polled (the table
    // changes below as newcomers are let in).
    for (size_t i = 0; i < clients.size(); ++i) {
      Client& c = clients[i];
      bool drop = false;
      const short ev = i + 2 < pfds.size() && pfds[i + 2].fd == c.fd ? pfds[i + 2].revents : 0;
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
          bool mounted = false;
          calls_.fetch_add(1, std::memory_order_relaxed);
          if (mountd_answer(*pub_.current(), c.peer, c.msg, &reply, &mounted)) {
            if (mounted) mounts_.fetch_add(1, std::memory_order_relaxed);
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
        sockaddr_storage peer{};
        socklen_t peer_len = sizeof peer;
        int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        std::string addr = peer_address(fd);
        if (int64_t v = victim(addr); v >= 0) {
          replaced_.fetch_add(1, std::memory_order_relaxed);
          drop_at(static_cast<size_t>(v));
        }
        now = Clock::now();
        clients.push_back({fd, std::move(addr), ClientAddr::from_sockaddr(reinterpret_cast<const sockaddr*>(&peer)), {},
                           {}, now, Clock::time_point::max()});
      }
    }
  }
  for (Client& c : clients) close(c.fd);
}

}  // namespace tern::nfsd
