// tern-perf's outputs: human tables, CSV, JSON and the gnuplot PNG.
#include "perf_report.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

namespace tern::apps {

namespace {

bool ends_with_png(const std::string& s) {
  if (s.size() < 5) return false;
  std::string tail = s.substr(s.size() - 4);
  for (char& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == ".png";
}

// The gnuplot on PATH, or "".
std::string find_gnuplot() {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t colon = p.find(':', pos);
    std::string dir = p.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos);
    std::string cand = (dir.empty() ? "." : dir) + "/gnuplot";
    if (access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  return "";
}

// A gnuplot single-quoted string: '' stands for one quote.
std::string gp_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

bool prepare_outputs(Options* o, std::string* why) {
  if (o->json.is_stdout() && o->csv.is_stdout()) {
    *why = "--json - and --csv - cannot both go to stdout";
    return false;
  }
  if (!o->json.name.empty() && !o->json.open(why)) return false;
  if (!o->csv.name.empty() && !o->csv.open(why)) return false;
  if (!o->plot.empty()) {
    if (!ends_with_png(o->plot)) {
      *why = "--plot draws a PNG: give a name ending in .png, not '" + o->plot + "'";
      return false;
    }
    if (find_gnuplot().empty()) {
      *why = "--plot needs gnuplot, which is not on PATH (scripts/setup.sh installs gnuplot-nox; apt-get install "
             "gnuplot-nox)";
      return false;
    }
    // Can we create it? A file made only to find out is not left behind.
    bool existed = access(o->plot.c_str(), F_OK) == 0;
    FILE* f = std::fopen(o->plot.c_str(), "a");
    if (f == nullptr) {
      *why = "cannot write " + o->plot + ": " + std::strerror(errno);
      return false;
    }
    std::fclose(f);
    if (!existed) unlink(o->plot.c_str());
  }
  return true;
}

FILE* Reporter::out() const { return o_.json.is_stdout() || o_.csv.is_stdout() ? stderr : stdout; }

void Reporter::print_latency(const RunReport& r) const {
  FILE* f = out();
  Percentiles p = percentiles(r.lat);
  std::fprintf(f, "    %-16s %9s %9s %9s %9s %9s %9s %9s\n", "ns", "min", "p50", "p99", "p99.9", "max", "mean",
               "stdev");
  std::fprintf(f, "    %-16s %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f\n", "round trip", p.min_ns, p.p50_ns, p.p99_ns,
               p.p999_ns, p.max_ns, p.mean_ns, p.stdev_ns);
  std::fprintf(f, "    %-16s %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f\n", "one-way (rtt/2)", p.min_ns / 2,
               p.p50_ns / 2, p.p99_ns / 2, p.p999_ns / 2, p.max_ns / 2, p.mean_ns / 2, p.stdev_ns / 2);
  if (!o_.histogram || r.lat.count() == 0) return;
  // Quarter-octave rows (16 fine buckets each); empty ones are left out.
  constexpr unsigned kPerRow = LatencyHistogram::kSub / 4;
  constexpr unsigned kRows = LatencyHistogram::kBuckets / kPerRow;
  std::vector<uint64_t> rows(kRows, 0);
  for (unsigned b = 0; b < LatencyHistogram::kBuckets; ++b) rows[b / kPerRow] += r.lat.bucket_count(b);
  unsigned first = 0, last = kRows - 1;
  while (rows[first] == 0) ++first;
  while (rows[last] == 0) --last;
  uint64_t peak = *std::max_element(rows.begin(), rows.end());
  std::fprintf(f, "  histogram (round trip, ns)\n");
  uint64_t cum = 0;
  for (unsigned i = first; i <= last; ++i) {
    if (rows[i] == 0) continue;
    cum += rows[i];
    int bar = static_cast<int>((rows[i] * 40 + peak - 1) / peak);
    uint64_t lo = LatencyHistogram::lower(i * kPerRow), hi = LatencyHistogram::upper(i * kPerRow + kPerRow - 1);
    std::fprintf(f, "    %9" PRIu64 " - %-9" PRIu64 " %-40.*s %12" PRIu64 " %6.2f%% %7.3f%%\n", lo, hi, bar,
                 "########################################", rows[i],
                 100.0 * static_cast<double>(rows[i]) / static_cast<double>(r.lat.count()),
                 100.0 * static_cast<double>(cum) / static_cast<double>(r.lat.count()));
  }
}

void Reporter::add(RunReport r) {
  if (csv_.f != nullptr) {
    FILE* f = csv_.f;
    if (!csv_header_done_) {
      std::fprintf(f,
                   "mode,transport,dev,size,qd,bulk,bulk_dir,engines,requests,seconds,requests_per_s,gbps,"
                   "rtt_min_ns,rtt_p50_ns,rtt_p99_ns,rtt_p99_9_ns,rtt_max_ns,rtt_mean_ns,rtt_stdev_ns,"
                   "one_way_p50_ns,one_way_p99_ns,cpu_share\n");
      csv_header_done_ = true;
    }
    Percentiles p = percentiles(r.lat);
    std::fprintf(f, "%s,%s,%s,%u,%u,%u,%s,%u,%" PRIu64 ",%.6f,%.1f,%.9g,%.0f,%.0f,%.0f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,%.3f\n",
                 r.mode.c_str(), r.transport.c_str(), csv_field(r.dev).c_str(), r.size, r.qd, r.bulk,
                 r.bulk_dir.c_str(), r.engines, r.requests, r.seconds, r.rps, r.gbps, p.min_ns, p.p50_ns, p.p99_ns,
                 p.p999_ns, p.max_ns, p.mean_ns, p.stdev_ns, p.p50_ns / 2, p.p99_ns / 2, r.cpu_share);
    std::fflush(f);  // a sweep's rows appear as they are measured
  }
  runs_.push_back(std::move(r));
}

void Reporter::write_json_object(FILE* f, const RunReport& r) const {
  Percentiles p = percentiles(r.lat);
  std::fprintf(f,
               "{\"tool\":\"tern-perf\",\"mode\":\"%s\",\"transport\":\"%s\",\"dev\":\"%s\",\"size\":%u,\"qd\":%u,"
               "\"bulk\":%u,\"bulk_dir\":\"%s\",\"engines\":%u,\"requests\":%" PRIu64 ",\"seconds\":%.6f,"
               "\"requests_per_s\":%.1f,\"gbps\":%.9g,",
               r.mode.c_str(), r.transport.c_str(), json_escape(r.dev).c_str(), r.size, r.qd, r.bulk,
               r.bulk_dir.c_str(), r.engines, r.requests, r.seconds, r.rps, r.gbps);
  std::fprintf(f,
               "\"latency_ns\":{\"min\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"p99_9\":%.1f,\"max\":%.1f,\"mean\":%.1f,"
               "\"stdev\":%.1f,\"samples\":%" PRIu64 "},",
               p.min_ns, p.p50_ns, p.p99_ns, p.p999_ns, p.max_ns, p.mean_ns, p.stdev_ns, p.count);
  std::fprintf(f,
               "\"one_way_ns\":{\"min\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"p99_9\":%.1f,\"max\":%.1f,\"mean\":%.1f},",
               p.min_ns / 2, p.p50_ns / 2, p.p99_ns / 2, p.p999_ns / 2, p.max_ns / 2, p.mean_ns / 2);
  // busy is null, not false, for a run too short to judge: false would
  // claim the machine was quiet when nothing was measured.
  std::fprintf(f, "\"cpu_share\":%.3f,\"preempted\":%" PRIu64 ",\"busy\":%s", r.cpu_share, r.preempted,
               !r.busy_judged ? "null" : r.busy ? "true" : "false");
  if (o_.histogram) {
    std::fprintf(f, ",\"histogram_ns\":[");
    bool first = true;
    for (unsigned b = 0; b < LatencyHistogram::kBuckets; ++b) {
      if (r.lat.bucket_count(b) == 0) continue;
      std::fprintf(f, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "]", first ? "" : ",", LatencyHistogram::lower(b),
                   LatencyHistogram::upper(b), r.lat.bucket_count(b));
      first = false;
    }
    std::fprintf(f, "]");
  }
  std::fprintf(f, "%s}", r.extra_json.c_str());
}

bool Reporter::plot(std::string* why) const {
  char data[] = "/tmp/tern-perf-plot-XXXXXX";
  int fd = mkstemp(data);
  if (fd < 0) {
    *why = std::string("cannot create a temporary file: ") + std::strerror(errno);
    return false;
  }
  FILE* d = fdopen(fd, "w");
  // Per run, one gnuplot data block: bucket middle, bucket upper bound, share
  // of the run's requests (%), cumulative share (%).
  for (const RunReport& r : runs_) {
    double total = static_cast<double>(std::max<uint64_t>(r.lat.count(), 1)), cum = 0;
    for (unsigned b = 0; b < LatencyHistogram::kBuckets; ++b) {
      uint64_t n = r.lat.bucket_count(b);
      if (n == 0) continue;
      cum += static_cast<double>(n);
      double lo = static_cast<double>(LatencyHistogram::lower(b)), hi = static_cast<double>(LatencyHistogram::upper(b));
      std::fprintf(d, "%.1f %.1f %.6f %.6f\n", (lo + hi) / 2, hi, 100.0 * static_cast<double>(n) / total,
                   100.0 * cum / total);
    }
    std::fprintf(d, "\n\n");
  }
  std::fclose(d);
  const RunReport& r0 = runs_.front();
  std::string script = "set terminal pngcairo size 960,560 noenhanced font ',10'\n";
  script += "set output " + gp_quote(o_.plot) + "\n";
  script += "set logscale x\nset grid xtics ytics mxtics\nset key below\n";
  script += "set xlabel 'round-trip latency (ns; one-way is half)'\n";
  script += "set y2label 'cumulative (% of requests)'\nset y2range [0:100]\nset ytics nomirror\nset y2tics 10\n";
  char title[512];
  if (runs_.size() == 1) {
    Percentiles p = percentiles(r0.lat);
    std::snprintf(title, sizeof title, "tern-perf %s  size %u  qd %u%s  %s  (%" PRIu64 " round trips)",
                  r0.mode.c_str(), r0.size, r0.qd,
                  r0.bulk != 0 ? (" bulk " + std::to_string(r0.bulk) + " " + r0.bulk_dir).c_str() : "",
                  r0.dev.c_str(), p.count);
    script += "set title " + gp_quote(title) + "\n";
    script += "set ylabel 'requests per bucket (%)'\nset yrange [0:*]\n";
    const std::pair<const char*, double> marks[] = {{"p50", p.p50_ns}, {"p99", p.p99_ns}, {"p99.9", p.p999_ns}};
    int k = 1;
    for (auto [name, v] : marks) {
      if (v <= 0) continue;
      script += "set arrow " + std::to_string(k) + " from " + std::to_string(v) + ", graph 0 to " +
                std::to_string(v) + ", graph 1 nohead dashtype 2 lc rgb 'gray40'\n";
      script += "set label " + std::to_string(k) + " '" + std::string(name) + "' at " + std::to_string(v) +
                ", graph 0.97 left offset 0.5,0 tc rgb 'gray30'\n";
      ++k;
    }
    script += "plot " + gp_quote(data) + " index 0 using 1:3 with impulses lw 2 lc rgb '#3060c0' title 'per bucket', " +
              gp_quote(data) + " index 0 using 2:4 axes x1y2 with steps lw 2 lc rgb '#c03020' title 'cumulative'\n";
  } else {
    std::snprintf(title, sizeof title, "tern-perf %s  qd %u  %s  (latency distribution per size)", r0.mode.c_str(),
                  r0.qd, r0.dev.c_str());
    script += "set title " + gp_quote(title) + "\n";
    script += "unset ytics\nset key outside right\n";
    script += "plot ";
    for (size_t i = 0; i < runs_.size(); ++i) {
      uint32_t sz = runs_[i].bulk != 0 ? runs_[i].bulk : runs_[i].size;
      script += (i ? ", " : "") + gp_quote(data) + " index " + std::to_string(i) + " using 2:4 axes x1y2 with steps lw 2 title " +
                gp_quote(std::to_string(sz) + " B");
    }
    script += "\n";
  }
  FILE* gp = popen("gnuplot", "w");
  if (gp == nullptr) {
    unlink(data);
    *why = std::string("cannot run gnuplot: ") + std::strerror(errno);
    return false;
  }
  std::fputs(script.c_str(), gp);
  int st = pclose(gp);
  unlink(data);
  struct stat sb;
  if (st != 0 || stat(o_.plot.c_str(), &sb) != 0 || sb.st_size == 0) {
    *why = "gnuplot could not draw " + o_.plot + " (exit status " + std::to_string(st) + ")";
    return false;
  }
  return true;
}

int Reporter::finish() {
  int rc = 0;
  std::string why;
  if (o_.sweep && !runs_.empty()) {
    FILE* f = out();
    std::fprintf(f, "\n  %9s %11s %12s %9s %9s %9s %9s %9s %9s %9s %9s %10s\n", "bytes", "requests", "req/s", "Gb/s",
                 "rtt min", "rtt p50", "rtt p99", "rtt p99.9", "rtt max", "rtt mean", "rtt stdev", "1-way p50");
    for (const RunReport& r : runs_) {
      Percentiles p = percentiles(r.lat);
      std::fprintf(f, "  %9u %11" PRIu64 " %12.0f %9.3f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %10.0f\n",
                   r.bulk != 0 ? r.bulk : r.size, r.requests, r.rps, r.gbps, p.min_ns, p.p50_ns, p.p99_ns, p.p999_ns,
                   p.max_ns, p.mean_ns, p.stdev_ns, p.p50_ns / 2);
    }
  }
  if (json_.f != nullptr && !runs_.empty()) {
    FILE* f = json_.f;
    if (!o_.sweep) {
      write_json_object(f, runs_.front());
    } else {
      std::fprintf(f, "{\"tool\":\"tern-perf\",\"sweep\":[");
      for (size_t i = 0; i < runs_.size(); ++i) {
        if (i) std::fprintf(f, ",");
        write_json_object(f, runs_[i]);
      }
      std::fprintf(f, "]}");
    }
    std::fprintf(f, "\n");
  }
  if (!json_.close(&why)) std::fprintf(stderr, "tern-perf: %s\n", why.c_str()), rc = 1;
  if (!csv_.close(&why)) std::fprintf(stderr, "tern-perf: %s\n", why.c_str()), rc = 1;
  if (!o_.plot.empty() && !runs_.empty()) {
    if (!plot(&why)) std::fprintf(stderr, "tern-perf: --plot: %s\n", why.c_str()), rc = 1;
    else if (!o_.quiet) std::fprintf(stderr, "tern-perf: latency distribution drawn in %s\n", o_.plot.c_str());
  }
  return rc;
}

}  // namespace tern::apps
