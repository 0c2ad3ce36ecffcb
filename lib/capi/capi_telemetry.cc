// Telemetry from C: the Unix-socket exporter on its own thread
// (telemetry/socket_thread.h), since a C host has no place to call
// SocketServer::poll() from that the API could name.
#include <cerrno>
#include <mutex>

#include "capi/capi_impl.h"
#include "telemetry/socket_thread.h"

using namespace tern;

namespace {
// One per process, like the registry it serves; the mutex orders concurrent
// opens and closes.
std::mutex g_mu;
std::unique_ptr<telemetry::SocketThread> g_socket;
}  // namespace

extern "C" {

int tern_telemetry_open(const char* path) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_socket != nullptr)
    return capi::fail_static(-EALREADY, "tern_telemetry_open: the telemetry socket is already open; close it first");
  auto t = telemetry::start_socket_thread(path != nullptr ? path : "");
  if (!t) return capi::fail(t.status());
  if (t.value() == nullptr)
    return capi::fail_static(-EINVAL, "tern_telemetry_open: no path given and TERN_TELEMETRY_SOCK is not set");
  g_socket = std::move(t.value());
  return 0;
}

void tern_telemetry_close(void) noexcept {
  std::lock_guard<std::mutex> lock(g_mu);
  g_socket.reset();
}

}  // extern "C"
