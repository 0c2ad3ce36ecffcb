#include "telemetry/prometheus.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string_view>
#include <vector>

#include "telemetry/registry.h"

namespace tern::telemetry {

namespace {

// The histogram's upper bounds (ns): 1-2-5 steps from 1 us to 10 s, the
// range RPC latencies live in. A Histogram bucket is counted under the first
// bound at or above its highest value, so a sample can appear one bound late
// by at most the bucket's width (3.1% of its value: base/histogram.h).
constexpr uint64_t kBoundsNs[] = {
    1'000,       2'000,       5'000,       10'000,        20'000,        50'000,         100'000,    200'000,
    500'000,     1'000'000,   2'000'000,   5'000'000,     10'000'000,    20'000'000,     50'000'000, 100'000'000,
    200'000'000, 500'000'000, 1'000'000'000, 2'000'000'000, 5'000'000'000, 10'000'000'000};

// Engine counters that go down as well as up: gauges, without _total.
bool engine_gauge(std::string_view n) {
  return n == "connections" || n == "rkeys_live" || n == "bulk_pool_in_use" || n == "bulk_pool_high_water" ||
         n == "waiting_for_memory";
}

std::string metric_name(std::string_view s) {
  std::string o(s);
  for (char& c : o)
    if (c == '/') c = '_';
  return o;
}

std::string escape(std::string_view v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string label_text(const Labels& l, const char* extra_key = nullptr, const std::string& extra_val = {}) {
  std::string o = "{";
  bool first = true;
  auto add = [&](std::string_view k, std::string_view v) {
    if (!first) o += ',';
    first = false;
    o.append(k).append("=\"").append(escape(v)).append("\"");
  };
  for (const auto& [k, v] : l) add(k, v);
  if (extra_key != nullptr) add(extra_key, extra_val);
  return o + "}";
}

// A histogram being summed (the folded "other" series) or shown.
struct Hist {
  uint64_t count = 0, sum_ns = 0;
  std::map<uint64_t, uint64_t> buckets;  // highest value (ns) -> samples
  void add(const Reply::HistogramData& d) {
    count += d.count;
    sum_ns += d.sum_ns;
    for (const auto& [hi, n] : d.buckets) buckets[hi] += n;
  }
};

// Families in first-seen order, each with its samples, so that every
// family's samples are together under one # HELP / # TYPE (the format
// requires it).
class Exposition {
 public:
  void sample(const std::string& name, const char* type, const std::string& help, const Labels& l, uint64_t v) {
    family(name, type, help) += name + label_text(l) + " " + std::to_string(v) + "\n";
  }
  void histogram(const std::string& name, const std::string& help, const Labels& l, const Hist& h) {
    std::string& out = family(name, "histogram", help);
    uint64_t cum = 0;
    auto it = h.buckets.begin();
    char le[32];
    for (uint64_t bound : kBoundsNs) {
      for (; it != h.buckets.end() && it->first <= bound; ++it) cum += it->second;
      std::snprintf(le, sizeof le, "%g", static_cast<double>(bound) / 1e9);
      out += name + "_bucket" + label_text(l, "le", le) + " " + std::to_string(cum) + "\n";
    }
    out += name + "_bucket" + label_text(l, "le", "+Inf") + " " + std::to_string(h.count) + "\n";
    char sum[48];
    std::snprintf(sum, sizeof sum, "%.9f", static_cast<double>(h.sum_ns) / 1e9);
    out += name + "_sum" + label_text(l) + " " + sum + "\n";
    out += name + "_count" + label_text(l) + " " + std::to_string(h.count) + "\n";
  }
  std::string text() const {
    std::string o;
    for (const auto& f : order_) o += f->head + f->body;
    return o;
  }

 private:
  struct Family {
    std::string head, body;
  };
  std::string& family(const std::string& name, const char* type, const std::string& help) {
    auto [it, fresh] = families_.try_emplace(name);
    if (fresh) {
      it->second.head = "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
      order_.push_back(&it->second);
    }
    return it->second.body;
  }
  std::map<std::string, Family> families_;
  std::vector<const Family*> order_;
};

std::vector<std::string> ids(const std::string& kind, const std::string& prefix) {
  Reply r;
  std::vector<std::string> v;
  if (!run_command("/tern/" + kind + "s", prefix, &r)) return v;
  for (const auto& x : r.list()) v.push_back(x.s);
  return v;
}

bool get(const std::string& kind, const std::string& id, Reply* r) {
  return run_command("/tern/" + kind, id, r) && r->shape() == Reply::Shape::kDict;
}

const Reply::Value* find(const Reply& r, std::string_view name) {
  for (const auto& [k, v] : r.dict())
    if (k == name) return &v;
  return nullptr;
}
std::string str(const Reply& r, std::string_view name) {
  const Reply::Value* v = find(r, name);
  return v != nullptr && v->kind == Reply::Value::Kind::kString ? v->s : std::string();
}
uint64_t u64(const Reply& r, std::string_view name) {
  const Reply::Value* v = find(r, name);
  return v != nullptr && v->kind == Reply::Value::Kind::kU64 ? v->u : 0;
}

// Counters of a source (u64 entries, the flattened histogram and identity
// fields left out), summed into `into` when folding.
void counters(const Reply& r, const std::vector<std::string_view>& skip, std::map<std::string, uint64_t>* into) {
  for (const auto& [k, v] : r.dict()) {
    if (v.kind != Reply::Value::Kind::kU64 || k.rfind("rtt_", 0) == 0) continue;
    bool skipped = false;
    for (auto s : skip) skipped |= k == s;
    if (!skipped) (*into)[k] += v.u;
  }
}

const Reply::HistogramData* hist(const Reply& r, std::string_view name) {
  for (const auto& h : r.histograms())
    if (h.name == name) return &h;
  return nullptr;
}

void engine_series(Exposition& x, const std::string& eid, const PrometheusLimits& lim) {
  Labels el = {{"engine", eid}};
  Reply er;
  if (get("engine", eid, &er)) {
    for (const auto& [k, v] : er.dict()) {
      if (v.kind != Reply::Value::Kind::kU64) continue;
      bool gauge = engine_gauge(k);
      std::string n = "tern_engine_" + metric_name(k) + (gauge ? "" : "_total");
      x.sample(n, gauge ? "gauge" : "counter", "Engine-wide " + k + " (docs/observability.md)", el, v.u);
    }
  }

  // Connections: the first max_conns by id have series of their own.
  struct Folded {
    std::map<std::string, uint64_t> c;
    Hist h;
    uint64_t n = 0;
  };
  std::map<std::string, Folded> other_conns;  // by side
  size_t shown = 0;
  uint64_t folded_conns = 0;
  auto conn_out = [&](const Labels& l, const std::map<std::string, uint64_t>& c, const Hist& h) {
    for (const auto& [k, v] : c)
      x.sample("tern_conn_" + metric_name(k) + "_total", "counter", "Per connection: " + k + " (docs/observability.md)",
               l, v);
    x.histogram("tern_conn_rtt_seconds", "Per connection round trip (client: call to completion; server: receive to reply posted)",
                l, h);
  };
  for (const std::string& cid : ids("conn", eid)) {
    Reply cr;
    if (!get("conn", cid, &cr)) continue;  // gone since it was listed
    std::map<std::string, uint64_t> c;
    counters(cr, {"id"}, &c);
    Hist h;
    if (const auto* d = hist(cr, "rtt")) h.add(*d);
    std::string side = str(cr, "side");
    if (shown < lim.max_conns) {
      ++shown;
      conn_out({{"engine", eid}, {"conn", std::to_string(u64(cr, "id"))}, {"side", side}, {"peer", str(cr, "peer")}}, c,
               h);
    } else {
      Folded& f = other_conns[side];
      for (const auto& [k, v] : c) f.c[k] += v;
      if (const auto* d = hist(cr, "rtt")) f.h.add(*d);
      ++folded_conns;
    }
  }
  for (const auto& [side, f] : other_conns)
    conn_out({{"engine", eid}, {"conn", "other"}, {"side", side}, {"peer", "other"}}, f.c, f.h);

  // Procedures, likewise bounded.
  std::map<std::string, Folded> other_procs;
  shown = 0;
  uint64_t folded_procs = 0;
  auto proc_out = [&](const Labels& l, const std::map<std::string, uint64_t>& c, const Hist& h) {
    for (const auto& [k, v] : c)
      x.sample("tern_proc_" + metric_name(k) + "_total", "counter", "Per procedure and side: " + k, l, v);
    x.histogram("tern_proc_rtt_seconds", "Per procedure round trip, as tern_conn_rtt_seconds", l, h);
  };
  for (const std::string& pid : ids("proc", eid)) {
    Reply pr;
    if (!get("proc", pid, &pr)) continue;
    std::map<std::string, uint64_t> c;
    counters(pr, {"prog", "vers", "proc"}, &c);
    Hist h;
    if (const auto* d = hist(pr, "rtt")) h.add(*d);
    std::string side = str(pr, "side");
    uint64_t prog = u64(pr, "prog"), vers = u64(pr, "vers"), proc = u64(pr, "proc");
    if (shown < lim.max_procs) {
      ++shown;
      proc_out({{"engine", eid},
                {"side", side},
                {"prog", prog_label(prog)},
                {"vers", std::to_string(vers)},
                {"proc", proc_label(prog, vers, proc)}},
               c, h);
    } else {
      Folded& f = other_procs[side];
      for (const auto& [k, v] : c) f.c[k] += v;
      if (const auto* d = hist(pr, "rtt")) f.h.add(*d);
      ++folded_procs;
    }
  }
  for (const auto& [side, f] : other_procs)
    proc_out({{"engine", eid}, {"side", side}, {"prog", "other"}, {"vers", "other"}, {"proc", "other"}}, f.c, f.h);

  const std::string fh = "Sources past the exporter's bound, summed into the conn=\"other\" / proc=\"other\" series";
  x.sample("tern_exporter_series_folded", "gauge", fh, {{"engine", eid}, {"kind", "conn"}}, folded_conns);
  x.sample("tern_exporter_series_folded", "gauge", fh, {{"engine", eid}, {"kind", "proc"}}, folded_procs);
}

}  // namespace

std::string prog_label(uint64_t prog) {
  switch (prog) {
    case 100000: return "portmapper";
    case 100003: return "nfs";
    case 100005: return "mount";
    case 100021: return "nlockmgr";
    case 100024: return "status";
    case 100227: return "nfs_acl";
    case 4294967295: return "unserved";  // the server's shared entry for calls no handler serves
  }
  return std::to_string(prog);
}

std::string proc_label(uint64_t prog, uint64_t vers, uint64_t proc) {
  // RFC 1813's procedure numbers for NFSv3 and MOUNTv3.
  static constexpr const char* kNfs3[] = {"NULL",   "GETATTR", "SETATTR", "LOOKUP", "ACCESS",      "READLINK",
                                          "READ",   "WRITE",   "CREATE",  "MKDIR",  "SYMLINK",     "MKNOD",
                                          "REMOVE", "RMDIR",   "RENAME",  "LINK",   "READDIR",     "READDIRPLUS",
                                          "FSSTAT", "FSINFO",  "PATHCONF", "COMMIT"};
  static constexpr const char* kMount3[] = {"NULL", "MNT", "DUMP", "UMNT", "UMNTALL", "EXPORT"};
  if (prog == 100003 && vers == 3 && proc < std::size(kNfs3)) return kNfs3[proc];
  if (prog == 100005 && vers == 3 && proc < std::size(kMount3)) return kMount3[proc];
  return std::to_string(proc);
}

std::string render_prometheus(const PrometheusLimits& limits) {
  Exposition x;
  for (const std::string& eid : ids("engine", "")) engine_series(x, eid, limits);
  return x.text();
}

Status write_prometheus_file(const std::string& path, const PrometheusLimits& limits) {
  std::string text = render_prometheus(limits);
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return make_sys_error(Errc::kInvalidArgument, errno, "metrics: cannot write %s", tmp.c_str());
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    unlink(tmp.c_str());
    return make_sys_error(Errc::kNoResources, e, "metrics: cannot write %s", path.c_str());
  }
  return Status::ok();
}

}  // namespace tern::telemetry
