// Prometheus' text exposition format (0.0.4) of what the telemetry registry
// holds: the engines' counters, and per connection and per procedure their
// counters and latency histograms. It is rendered from the same providers the
// Unix socket and rte_telemetry call (registry.h), so it shows the same
// figures and obeys the same thread rule: it may run on any thread, and
// providers read only single-writer counters and histograms.
//
// Series (every one labelled engine="<engine id>"):
//   tern_engine_<counter>_total                 counters of Engine::stats_view()
//   tern_engine_<gauge>                         the few that go down (connections, rkeys_live, ...)
//   tern_conn_<counter>_total{conn,side,peer}   per connection
//   tern_conn_rtt_seconds{conn,side,peer}       histogram
//   tern_proc_{ops,errors,bytes_sent,bytes_received}_total{side,prog,vers,proc}
//   tern_proc_rtt_seconds{side,prog,vers,proc}  histogram
//   tern_exporter_series_folded{engine,kind}    sources folded into "other" (below)
//
// Cardinality is bounded: per engine, at most max_conns connections and
// max_procs procedures get series of their own (the first in the registry's
// order, ids sorted as strings); the
// rest are summed into one series with conn="other" (peer="other") or
// proc="other", and tern_exporter_series_folded says how many were folded.
// So a server with 10,000 clients exposes at most max_conns + 1 connection
// series per engine, whatever its peers do.
#pragma once

#include <cstddef>
#include <string>

#include "../base/result.h"

namespace tern::telemetry {

struct PrometheusLimits {
  size_t max_conns = 64;   // per engine; the rest: conn="other"
  size_t max_procs = 128;  // per engine; the rest: proc="other"
};

// The whole exposition, as GET /metrics answers it.
std::string render_prometheus(const PrometheusLimits& limits = {});

// For node_exporter's textfile collector: written to PATH.tmp.<pid>, then
// renamed over PATH, so the collector never reads half a file.
Status write_prometheus_file(const std::string& path, const PrometheusLimits& limits = {});

// Label values for a procedure: "nfs", "mount", ... for the programs Tern
// serves, NFSv3's and MOUNTv3's procedure names ("READ", "MNT"); the number
// in decimal otherwise.
std::string prog_label(uint64_t prog);
std::string proc_label(uint64_t prog, uint64_t vers, uint64_t proc);

}  // namespace tern::telemetry
