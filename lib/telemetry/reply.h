// What a telemetry command answers: a dict of named scalars and flat arrays,
// or a list of ids. That is exactly what DPDK 22.11's rte_telemetry can carry
// (one level of nesting, arrays of scalars only, names of [A-Za-z0-9_/]), so
// the EAL exporter (runtime/telemetry_export.h) and the Unix socket
// (telemetry/socket_server.h) show the same thing. Nested things are
// flattened into names: a histogram "rtt" becomes rtt_count, rtt_p99_ns, ...
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../base/histogram.h"
#include "../base/stats.h"

namespace tern::telemetry {

class Reply {
 public:
  enum class Shape : uint8_t {
    kNone,  // nothing added yet: answers JSON null (unknown id, bad parameters)
    kDict,  // add_*(): {"name": value, ...}
    kList,  // append(): [v, v, ...] of one kind
  };
  struct Value {
    enum class Kind : uint8_t { kU64, kI64, kString, kU64Array, kStringArray } kind;
    uint64_t u = 0;
    int64_t i = 0;
    std::string s;
    std::vector<uint64_t> ua;
    std::vector<std::string> sa;
  };

  // Dict entries. Names must match [A-Za-z0-9_/]+ (a provider's bug
  // otherwise: REQUIRE); mixing with append() is too.
  void add_u64(std::string_view name, uint64_t v);
  void add_i64(std::string_view name, int64_t v);
  void add_string(std::string_view name, std::string_view v);
  void add_u64_array(std::string_view name, std::span<const uint64_t> v);
  void add_string_array(std::string_view name, std::vector<std::string> v);
  // Every counter of the view, zeros included, as prefix + name.
  void add_stats(const StatsView& view, std::string_view prefix = {});
  // prefix_count, _min_ns, _max_ns, _mean_ns, _stdev_ns, _p50_ns, _p90_ns,
  // _p99_ns, _p999_ns (integers, ns).
  void add_histogram(std::string_view prefix, const Histogram& h);

  // List entries (all of one kind: ids are numbers or strings). start_list()
  // makes the reply a list even when nothing is appended ("[]").
  void start_list();
  void append(uint64_t v);
  void append(std::string_view v);

  // A histogram as add_histogram() saw it, bucket by bucket, for exporters
  // that carry whole distributions (telemetry/prometheus.h). Not part of
  // json(): rte_telemetry cannot carry it and the flattened names suffice there.
  struct HistogramData {
    std::string name;                // add_histogram()'s prefix
    uint64_t count = 0, sum_ns = 0;  // the bucket sum, so buckets and count agree
    std::vector<std::pair<uint64_t, uint64_t>> buckets;  // (highest value in ns, samples), non-empty ones, ascending
  };
  const std::vector<HistogramData>& histograms() const { return hists_; }

  Shape shape() const { return shape_; }
  const std::vector<std::pair<std::string, Value>>& dict() const { return dict_; }
  const std::vector<Value>& list() const { return list_; }
  // The value alone as JSON (null, an object or an array).
  std::string json() const;

 private:
  void add(std::string_view name, Value v);
  Shape shape_ = Shape::kNone;
  std::vector<std::pair<std::string, Value>> dict_;
  std::vector<Value> list_;
  std::vector<HistogramData> hists_;
};

// Valid as a dict name or as a command (commands also start with '/').
bool valid_name(std::string_view name);

}  // namespace tern::telemetry
