#include "telemetry/metrics_exporter.h"

#include <poll.h>

#include <vector>

#include "base/clock.h"
#include "base/log.h"

namespace tern::telemetry {

Result<MetricsOptions> metrics_options_from_arg(std::string_view spec) {
  MetricsOptions o;
  auto port_of = [](std::string_view v, int* out) {
    if (v.empty() || v.size() > 5) return false;
    int n = 0;
    for (char c : v) {
      if (c < '0' || c > '9') return false;
      n = n * 10 + (c - '0');
    }
    *out = n;
    return n <= 65535;
  };
  size_t colon = spec.rfind(':');
  bool digits = !spec.empty() && spec.find_first_not_of("0123456789") == std::string_view::npos;
  if (digits) {
    if (!port_of(spec, &o.port))
      return make_error(Errc::kInvalidArgument, "metrics: '%.*s' is not a port (0-65535)",
                        static_cast<int>(spec.size()), spec.data());
  } else if (colon != std::string_view::npos && spec.find('/') == std::string_view::npos) {
    o.addr = std::string(spec.substr(0, colon));
    if (!port_of(spec.substr(colon + 1), &o.port))
      return make_error(Errc::kInvalidArgument, "metrics: '%.*s' is not ADDR:PORT", static_cast<int>(spec.size()),
                        spec.data());
  } else if (!spec.empty()) {
    o.file = std::string(spec);
  } else {
    return make_error(Errc::kInvalidArgument, "metrics: empty value (a port, ADDR:PORT or a file)");
  }
  return o;
}

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(const MetricsOptions& o) {
  if (o.port < 0 && o.file.empty()) return std::unique_ptr<MetricsExporter>();
  if (o.port > 65535) return make_error(Errc::kInvalidArgument, "metrics: port %d is not 0-65535", o.port);
  std::unique_ptr<MetricsExporter> e(new MetricsExporter(o));
  if (o.port >= 0) {
    auto s = MetricsServer::open(static_cast<uint16_t>(o.port), o.addr, o.limits);
    if (!s) return s.status();
    e->server_ = std::move(s).value();
  }
  if (!o.file.empty()) {
    // Fail now on an unwritable path, not silently at every interval.
    if (Status st = write_prometheus_file(o.file, o.limits); !st.is_ok()) return st;
  }
  e->thread_ = std::thread([p = e.get()] { p->run(); });
  return e;
}

MetricsExporter::~MetricsExporter() { stop(); }

void MetricsExporter::stop() {
  if (!thread_.joinable()) return;  // stopped already
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
  server_.reset();  // no more scrapes of a run that is over
  if (!opt_.file.empty()) {
    Status st = write_prometheus_file(opt_.file, opt_.limits);
    if (!st.is_ok()) TERN_LOG(kWarn, "telemetry", "%s", st.to_string().c_str());
  }
}

void MetricsExporter::run() {
  uint64_t next_file = monotonic_ns() + uint64_t{opt_.file_interval_ms} * 1'000'000;
  std::vector<pollfd> pfds;
  while (!stop_.load(std::memory_order_relaxed)) {
    pfds.clear();
    if (server_) server_->add_pollfds(&pfds);
    // 100 ms bounds how long stop() waits and how late a client that never
    // sends its request is dropped.
    ::poll(pfds.data(), pfds.size(), 100);
    if (server_) server_->poll();
    if (!opt_.file.empty() && monotonic_ns() >= next_file) {
      next_file = monotonic_ns() + uint64_t{opt_.file_interval_ms} * 1'000'000;
      Status st = write_prometheus_file(opt_.file, opt_.limits);
      if (!st.is_ok()) TERN_LOG(kWarn, "telemetry", "%s", st.to_string().c_str());
    }
  }
}

}  // namespace tern::telemetry
