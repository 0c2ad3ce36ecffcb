#include "telemetry/reply.h"

#include "base/check.h"
#include "base/json.h"

namespace tern::telemetry {

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '/';
    if (!ok) return false;
  }
  return true;
}

void Reply::add(std::string_view name, Value v) {
  TERN_REQUIRE(shape_ != Shape::kList, "telemetry reply: add_*(\"%.*s\") after append()",
               static_cast<int>(name.size()), name.data());
  TERN_REQUIRE(valid_name(name), "telemetry reply: name \"%.*s\" is not [A-Za-z0-9_/]+",
               static_cast<int>(name.size()), name.data());
  shape_ = Shape::kDict;
  dict_.emplace_back(std::string(name), std::move(v));
}

void Reply::add_u64(std::string_view name, uint64_t v) {
  Value x{Value::Kind::kU64};
  x.u = v;
  add(name, std::move(x));
}

void Reply::add_i64(std::string_view name, int64_t v) {
  Value x{Value::Kind::kI64};
  x.i = v;
  add(name, std::move(x));
}

void Reply::add_string(std::string_view name, std::string_view v) {
  Value x{Value::Kind::kString};
  x.s = std::string(v);
  add(name, std::move(x));
}

void Reply::add_u64_array(std::string_view name, std::span<const uint64_t> v) {
  Value x{Value::Kind::kU64Array};
  x.ua.assign(v.begin(), v.end());
  add(name, std::move(x));
}

void Reply::add_string_array(std::string_view name, std::vector<std::string> v) {
  Value x{Value::Kind::kStringArray};
  x.sa = std::move(v);
  add(name, std::move(x));
}

void Reply::add_stats(const StatsView& view, std::string_view prefix) {
  for (const auto& e : view) add_u64(std::string(prefix) + e.name, e.counter->get());
}

void Reply::add_histogram(std::string_view prefix, const Histogram& h) {
  std::string p(prefix);
  add_u64(p + "_count", h.count());
  add_u64(p + "_min_ns", h.min());
  add_u64(p + "_max_ns", h.max());
  add_u64(p + "_mean_ns", static_cast<uint64_t>(h.mean() + 0.5));
  add_u64(p + "_stdev_ns", static_cast<uint64_t>(h.stdev() + 0.5));
  add_u64(p + "_p50_ns", h.percentile(50));
  add_u64(p + "_p90_ns", h.percentile(90));
  add_u64(p + "_p99_ns", h.percentile(99));
  add_u64(p + "_p999_ns", h.percentile(99.9));
  // The buckets as read now: their sum is the count an exporter reports,
  // so that _count equals the +Inf bucket even while the owner records.
  HistogramData d;
  d.name = p;
  for (size_t i = 0; i < Histogram::kBuckets; ++i)
    if (uint64_t n = h.bucket_count(i)) {
      d.buckets.emplace_back(Histogram::bucket_high(i), n);
      d.count += n;
    }
  d.sum_ns = h.sum();
  hists_.push_back(std::move(d));
}

void Reply::start_list() {
  TERN_REQUIRE(shape_ != Shape::kDict, "telemetry reply: start_list() after add_*()");
  shape_ = Shape::kList;
}

void Reply::append(uint64_t v) {
  TERN_REQUIRE(shape_ != Shape::kDict, "telemetry reply: append() after add_*()");
  TERN_REQUIRE(list_.empty() || list_[0].kind == Value::Kind::kU64, "telemetry reply: a list holds one kind");
  shape_ = Shape::kList;
  Value x{Value::Kind::kU64};
  x.u = v;
  list_.push_back(std::move(x));
}

void Reply::append(std::string_view v) {
  TERN_REQUIRE(shape_ != Shape::kDict, "telemetry reply: append() after add_*()");
  TERN_REQUIRE(list_.empty() || list_[0].kind == Value::Kind::kString, "telemetry reply: a list holds one kind");
  shape_ = Shape::kList;
  Value x{Value::Kind::kString};
  x.s = std::string(v);
  list_.push_back(std::move(x));
}

namespace {

void value_json(const Reply::Value& v, JsonWriter& w) {
  switch (v.kind) {
    case Reply::Value::Kind::kU64: w.u64(v.u); return;
    case Reply::Value::Kind::kI64: w.i64(v.i); return;
    case Reply::Value::Kind::kString: w.str(v.s); return;
    case Reply::Value::Kind::kU64Array:
      w.begin_array();
      for (uint64_t u : v.ua) w.u64(u);
      w.end_array();
      return;
    case Reply::Value::Kind::kStringArray:
      w.begin_array();
      for (const std::string& s : v.sa) w.str(s);
      w.end_array();
      return;
  }
}

}  // namespace

std::string Reply::json() const {
  std::string out;
  JsonWriter w(out, JsonWriter::Style::kSpaced);
  switch (shape_) {
    case Shape::kNone: w.null(); break;
    case Shape::kDict:
      w.begin_object();
      for (const auto& [name, value] : dict_) {
        w.key(name);
        value_json(value, w);
      }
      w.end_object();
      break;
    case Shape::kList:
      w.begin_array();
      for (const Value& value : list_) value_json(value, w);
      w.end_array();
      break;
  }
  return out;
}

}  // namespace tern::telemetry
