// The Unix-socket exporter (socket_server.h) on a thread of its own, for a
// program or a C host that has no poll loop to call SocketServer::poll()
// from -- tern-perf, tern-nfsd and tern-nfs-read, whose loops are the
// datapath's, and the C API's tern_telemetry_open(). Providers then run on
// this thread, which registry.h already allows (as DPDK's telemetry thread).
//
// The thread sleeps in poll(2) on the listening socket and wakes at least
// every kWakeMs to answer connected clients, so a request waits at most that
// long; it never touches the datapath.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "../base/result.h"
#include "socket_server.h"

namespace tern::telemetry {

class SocketThread {
 public:
  static constexpr int kWakeMs = 10;

  // Listens at `path` (SocketServer::open's rules) and starts the thread.
  static Result<std::unique_ptr<SocketThread>> start(const std::string& path);
  ~SocketThread();  // stops the thread, closes the socket, removes the file
  SocketThread(const SocketThread&) = delete;
  SocketThread& operator=(const SocketThread&) = delete;

  const std::string& path() const { return server_->path(); }

 private:
  explicit SocketThread(std::unique_ptr<SocketServer> s) : server_(std::move(s)) {}
  void run();
  std::unique_ptr<SocketServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// What a program's --telemetry flag does: `path` if given, else
// $TERN_TELEMETRY_SOCK; nullptr (not an error) when both are empty.
Result<std::unique_ptr<SocketThread>> start_socket_thread(const std::string& path);

}  // namespace tern::telemetry
