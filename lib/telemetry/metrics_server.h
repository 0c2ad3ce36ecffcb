// An opt-in local HTTP/1.0 responder for Prometheus: GET /metrics answers
// render_prometheus() (prometheus.h); anything else is 404. One request per
// connection (HTTP/1.0, "Connection: close"), which is how Prometheus
// scrapes a small target.
//
// Like the Unix-socket exporter it has no thread of its own and never
// blocks: the host calls poll() (from its poll loop, when fd() is readable,
// or from MetricsExporter's thread) and every socket is non-blocking. A
// reply larger than the socket buffer is sent over later polls. At most
// kMaxClients connections; one that has not sent a whole request within
// kRequestTimeoutMs, or sends more than kMaxRequest bytes, is closed.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../base/result.h"
#include "prometheus.h"

namespace tern::telemetry {

class MetricsServer {
 public:
  static constexpr size_t kMaxClients = 16;
  static constexpr size_t kMaxRequest = 4096;
  static constexpr uint64_t kRequestTimeoutMs = 5000;

  // Listens on addr:port (TCP; port 0 picks one, see port()). addr defaults
  // to loopback: the counters name peers, so exposing them wider is the
  // host's explicit choice.
  static Result<std::unique_ptr<MetricsServer>> open(uint16_t port, const std::string& addr = "127.0.0.1",
                                                     PrometheusLimits limits = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Accepts, reads, answers and sends what it can without blocking. Returns
  // how many replies it completed.
  int poll();
  int fd() const { return listen_fd_; }
  uint16_t port() const { return port_; }
  // What poll() waits for, as poll(2) entries appended to *out: the
  // listener and clients reading (POLLIN), clients with a reply to send
  // (POLLOUT), so a host's poll(2) sleeps until there is something to do.
  void add_pollfds(std::vector<pollfd>* out) const;

 private:
  struct Client {
    int fd;
    uint64_t since_ms;
    std::string in, out;
    size_t sent = 0;
  };
  MetricsServer(int fd, uint16_t port, PrometheusLimits l) : listen_fd_(fd), port_(port), limits_(l) {}
  void answer(Client& c);
  int listen_fd_;
  uint16_t port_;
  PrometheusLimits limits_;
  std::vector<Client> clients_;
};

}  // namespace tern::telemetry
