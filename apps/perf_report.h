// tern-perf's results, the same way for both transports: the human report
// (the latency rows, round trip and one-way, the histogram, the sweep
// table), one CSV row per run, the JSON object (or, after a sweep, an object
// holding one per size), and a PNG of the latency distribution drawn by
// gnuplot.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "perf_common.h"
#include "perf_stats.h"

namespace tern::apps {

// One measured run: one size of a sweep, or the whole run without -a.
struct RunReport {
  std::string mode;       // "send/lat", "rpc/bw", ...
  std::string transport;  // "send" or "rpc"
  std::string dev;
  uint32_t size = 0, qd = 0, bulk = 0, engines = 1;
  std::string bulk_dir = "none";
  uint64_t requests = 0;
  double seconds = 0, rps = 0, gbps = 0;
  LatencyHistogram lat;     // round trips, ns
  double cpu_share = -1;    // the measuring threads' CPU time over wall time (the lowest); -1: not known
  uint64_t preempted = 0;   // their involuntary context switches
  bool busy = false;        // a measuring thread had a CPU less than 90% of a long enough run
  bool busy_judged = false; // some measuring thread ran long enough (0.2 s) to judge; else JSON busy is null
  std::string extra_json;   // more members of the JSON object, each with its leading ','
};

// Before the run: opens --json and --csv, and checks that --plot can be
// drawn (a .png name, a gnuplot to draw it, a file we can create), so that
// a mistake costs no measurement. False with *why set.
bool prepare_outputs(Options* o, std::string* why);

class Reporter {
 public:
  // Takes over --json's and --csv's files (opened by prepare_outputs).
  explicit Reporter(const Options& o) : o_(o), json_(o.json), csv_(o.csv) {}
  // The human report's stream: stdout, or stderr when --json or --csv
  // writes to stdout.
  FILE* out() const;
  // Column heads and the round-trip and one-way rows (perftest's send_lat
  // reports half the round trip), and the histogram with --histogram.
  void print_latency(const RunReport& r) const;
  // Records a run: its CSV row now, the rest in finish().
  void add(RunReport r);
  // The sweep table (-a), the JSON, the plot. 0, or 1 when one of them
  // could not be written (said on stderr; the report above stands).
  int finish();

 private:
  void write_json_object(FILE* f, const RunReport& r) const;
  bool plot(std::string* why) const;
  const Options& o_;
  OutFile json_, csv_;
  std::vector<RunReport> runs_;
  bool csv_header_done_ = false;
};

}  // namespace tern::apps
