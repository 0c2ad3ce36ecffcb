// What a program turns on with one flag: Prometheus metrics served on a
// local port (metrics_server.h) and/or written to a file for
// node_exporter's textfile collector (prometheus.h), from a thread of its
// own, so no engine thread ever renders, writes or waits for a scraper.
// Providers run on this thread under the registry lock and read only
// single-writer counters (registry.h), as under DPDK's telemetry thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "../base/result.h"
#include "metrics_server.h"

namespace tern::telemetry {

struct MetricsOptions {
  int port = -1;                 // < 0: no HTTP; 0: any free port
  std::string addr = "127.0.0.1";
  std::string file;              // empty: no textfile
  uint32_t file_interval_ms = 5000;  // how often the file is rewritten (and once more at stop)
  PrometheusLimits limits;
};

// A program's --metrics value: "PORT" (127.0.0.1:PORT), "ADDR:PORT" (an
// IPv4 address to listen on, e.g. 0.0.0.0:9464 for a remote Prometheus) or
// a file path (anything else: the textfile, rewritten every 5 s and at exit).
// kInvalidArgument for a bad port or address.
Result<MetricsOptions> metrics_options_from_arg(std::string_view spec);

class MetricsExporter {
 public:
  // Nothing (nullptr, not an error) when neither a port nor a file is asked for.
  static Result<std::unique_ptr<MetricsExporter>> start(const MetricsOptions& o);
  ~MetricsExporter();  // stop(), if not done yet
  // Stops serving and writes the file a last time, now. A program whose
  // engines go before it exits calls this while they still exist, or the
  // last file would be written with none of their series. Once; later
  // calls (and the destructor's) do nothing. Not thread-safe against itself.
  void stop();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;
  uint16_t port() const { return server_ ? server_->port() : 0; }

 private:
  explicit MetricsExporter(const MetricsOptions& o) : opt_(o) {}
  void run();
  MetricsOptions opt_;
  std::unique_ptr<MetricsServer> server_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tern::telemetry
