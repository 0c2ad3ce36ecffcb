// Telemetry without EAL: an opt-in Unix socket that answers the registry's
// commands (registry.h) with JSON, speaking DPDK's telemetry v2 protocol — a
// SOCK_SEQPACKET socket that greets each client with /info's JSON and answers
// every message "CMD[,PARAMS]" with {"CMD": value} — so scripts/tern-stats
// and DPDK's own dpdk-telemetry.py both read it.
//
// No thread of its own: the host calls poll() from its poll loop (or when
// fd() is readable), and providers run there. Not thread-safe: one thread
// polls a server.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../base/result.h"

namespace tern::telemetry {

class SocketServer {
 public:
  static constexpr size_t kMaxClients = 16;

  // Listens at `path`. A socket file left by a dead process is replaced; a
  // live one is kBadState.
  static Result<std::unique_ptr<SocketServer>> open(const std::string& path);
  // At $TERN_TELEMETRY_SOCK; nullptr (not an error) when it is unset or empty.
  static Result<std::unique_ptr<SocketServer>> open_from_env();
  ~SocketServer();  // closes every socket and removes the file
  SocketServer(const SocketServer&) = delete;
  SocketServer& operator=(const SocketServer&) = delete;

  // Accepts waiting clients and answers every request queued; never blocks.
  // Returns how many requests it answered.
  int poll();
  int fd() const { return listen_fd_; }
  const std::string& path() const { return path_; }
  size_t clients() const { return clients_.size(); }

 private:
  SocketServer(int fd, std::string path) : listen_fd_(fd), path_(std::move(path)) {}
  bool greet(int fd);
  int listen_fd_;
  std::string path_;
  std::vector<int> clients_;
};

}  // namespace tern::telemetry
