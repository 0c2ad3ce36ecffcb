#include "telemetry/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"

namespace tern::telemetry {

Result<std::unique_ptr<MetricsServer>> MetricsServer::open(uint16_t port, const std::string& addr,
                                                           PrometheusLimits limits) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1)
    return make_error(Errc::kInvalidArgument, "metrics: '%s' is not an IPv4 address", addr.c_str());
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_sys_error(Errc::kNoResources, errno, "metrics: socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 16) != 0) {
    int e = errno;
    close(fd);
    return make_sys_error(e == EADDRINUSE ? Errc::kBadState : Errc::kInvalidArgument, e,
                          "metrics: cannot listen on %s:%u", addr.c_str(), static_cast<unsigned>(port));
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  uint16_t bound = ntohs(sa.sin_port);
  TERN_LOG(kInfo, "telemetry", "Prometheus metrics at http://%s:%u/metrics", addr.c_str(),
           static_cast<unsigned>(bound));
  return std::unique_ptr<MetricsServer>(new MetricsServer(fd, bound, limits));
}

MetricsServer::~MetricsServer() {
  for (const Client& c : clients_) close(c.fd);
  close(listen_fd_);
}

void MetricsServer::add_pollfds(std::vector<pollfd>* out) const {
  out->push_back(pollfd{listen_fd_, POLLIN, 0});
  for (const Client& c : clients_) out->push_back(pollfd{c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
}

void MetricsServer::answer(Client& c) {
  // "GET /metrics HTTP/1.x" (a query string is ignored); HEAD is not worth
  // supporting for a scrape target.
  std::string_view req(c.in);
  std::string_view line = req.substr(0, req.find_first_of("\r\n"));
  std::string_view target;
  if (line.substr(0, 4) == "GET ") {
    target = line.substr(4);
    target = target.substr(0, target.find(' '));
    target = target.substr(0, target.find('?'));
  }
  std::string body, status;
  const char* type = "text/plain; charset=utf-8";
  if (target == "/metrics") {
    status = "200 OK";
    body = render_prometheus(limits_);
    type = "text/plain; version=0.0.4; charset=utf-8";
  } else {
    status = line.substr(0, 4) == "GET " ? "404 Not Found" : "405 Method Not Allowed";
    body = "tern: only GET /metrics is served\n";
  }
  c.out = "HTTP/1.0 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
          "\r\nConnection: close\r\n\r\n" + body;
  c.sent = 0;
}

int MetricsServer::poll() {
  uint64_t now = monotonic_ns() / 1'000'000;
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (clients_.size() >= kMaxClients) {
      close(fd);  // a scraper retries; a flood does not grow our table
      continue;
    }
    clients_.push_back(Client{fd, now, {}, {}, 0});
  }
  int done = 0;
  for (size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    bool drop = false;
    if (c.out.empty()) {
      char buf[1024];
      for (;;) {
        ssize_t n = recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        if (n <= 0) {
          drop = true;
          break;
        }
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxRequest) {
          drop = true;
          break;
        }
        if (c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) {
          answer(c);
          break;
        }
      }
      if (!drop && c.out.empty() && now - c.since_ms > kRequestTimeoutMs) drop = true;
    }
    if (!drop && !c.out.empty()) {
      while (c.sent < c.out.size()) {
        ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        if (n <= 0) {
          drop = true;
          break;
        }
        c.sent += static_cast<size_t>(n);
      }
      if (c.sent == c.out.size()) {
        ++done;
        drop = true;  // HTTP/1.0: the close ends the body
      } else if (now - c.since_ms > 2 * kRequestTimeoutMs) {
        drop = true;  // a reader that stopped reading is not waited for
      }
    }
    if (drop) {
      close(c.fd);
      clients_[i] = std::move(clients_.back());
      clients_.pop_back();
    } else {
      ++i;
    }
  }
  return done;
}

}  // namespace tern::telemetry
