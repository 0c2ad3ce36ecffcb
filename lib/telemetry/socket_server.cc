#include "telemetry/socket_server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "telemetry/registry.h"

namespace tern::telemetry {

Result<std::unique_ptr<SocketServer>> SocketServer::open(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path)
    return make_error(Errc::kInvalidArgument, "telemetry: socket path '%s' is empty or longer than %zu bytes",
                      path.c_str(), sizeof sa.sun_path - 1);
  std::memcpy(sa.sun_path, path.data(), path.size());
  struct stat sb;
  if (lstat(path.c_str(), &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode))
      return make_error(Errc::kInvalidArgument, "telemetry: %s exists and is not a socket", path.c_str());
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    bool alive = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (probe >= 0) close(probe);
    if (alive) return make_error(Errc::kBadState, "telemetry: another process answers on %s", path.c_str());
    unlink(path.c_str());
  }
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_sys_error(Errc::kNoResources, errno, "telemetry: socket");
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 16) != 0) {
    int e = errno;
    close(fd);
    return make_sys_error(Errc::kInvalidArgument, e, "telemetry: cannot listen on %s", path.c_str());
  }
  TERN_LOG(kInfo, "telemetry", "answering on %s", path.c_str());
  return std::unique_ptr<SocketServer>(new SocketServer(fd, path));
}

Result<std::unique_ptr<SocketServer>> SocketServer::open_from_env() {
  const char* p = std::getenv("TERN_TELEMETRY_SOCK");
  if (p == nullptr || p[0] == '\0') return std::unique_ptr<SocketServer>();
  return open(p);
}

SocketServer::~SocketServer() {
  for (int c : clients_) close(c);
  close(listen_fd_);
  unlink(path_.c_str());
}

bool SocketServer::greet(int fd) {
  std::string hello = info_json();
  return send(fd, hello.data(), hello.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size());
}

int SocketServer::poll() {
  for (;;) {
    int c = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) break;
    if (clients_.size() >= kMaxClients || !greet(c)) {
      close(c);
      continue;
    }
    clients_.push_back(c);
  }
  int answered = 0;
  for (size_t i = 0; i < clients_.size();) {
    int c = clients_[i];
    bool drop = false;
    // A few requests per client per poll: a client that never stops asking
    // must not hold the host's poll loop.
    for (int budget = 8; budget > 0; --budget) {
      char buf[1024];
      ssize_t n = recv(c, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
      if (n <= 0) {
        drop = true;  // closed, or an error: either way this client is done
        break;
      }
      std::string_view req(buf, static_cast<size_t>(n));
      while (!req.empty() && (req.back() == '\n' || req.back() == '\r' || req.back() == '\0')) req.remove_suffix(1);
      std::string reply = handle_request(req);
      // A client that does not read its replies is dropped, not waited for.
      if (send(c, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(reply.size())) {
        drop = true;
        break;
      }
      ++answered;
    }
    if (drop) {
      close(c);
      clients_[i] = clients_.back();
      clients_.pop_back();
    } else {
      ++i;
    }
  }
  return answered;
}

}  // namespace tern::telemetry
