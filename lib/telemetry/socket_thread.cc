#include "telemetry/socket_thread.h"

#include <poll.h>

#include <cstdlib>

namespace tern::telemetry {

Result<std::unique_ptr<SocketThread>> SocketThread::start(const std::string& path) {
  auto s = SocketServer::open(path);
  if (!s) return s.status();
  std::unique_ptr<SocketThread> t(new SocketThread(std::move(s.value())));
  t->thread_ = std::thread([p = t.get()] { p->run(); });
  return t;
}

SocketThread::~SocketThread() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void SocketThread::run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    server_->poll();
    // Woken by a new client at once; requests of connected ones wait for the
    // next wake-up, at most kWakeMs (the server does not expose their fds).
    pollfd p{server_->fd(), POLLIN, 0};
    ::poll(&p, 1, kWakeMs);
  }
}

Result<std::unique_ptr<SocketThread>> start_socket_thread(const std::string& path) {
  std::string where = path;
  if (where.empty()) {
    const char* env = std::getenv("TERN_TELEMETRY_SOCK");
    if (env != nullptr) where = env;
  }
  if (where.empty()) return std::unique_ptr<SocketThread>();
  return SocketThread::start(where);
}

}  // namespace tern::telemetry
