// Latency samples and percentiles for tern-perf.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tern::apps {

struct Percentiles {
  double min_ns = 0, p50_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0, mean_ns = 0;
  uint64_t count = 0;
};

// Nearest-rank percentiles over a copy of the samples (ns).
inline Percentiles percentiles(std::vector<double> s) {
  Percentiles p;
  if (s.empty()) return p;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(s.size() - 1) + 0.5);
    return s[std::min(i, s.size() - 1)];
  };
  double sum = 0;
  for (double v : s) sum += v;
  p.count = s.size();
  p.min_ns = s.front();
  p.p50_ns = at(0.50);
  p.p99_ns = at(0.99);
  p.p999_ns = at(0.999);
  p.max_ns = s.back();
  p.mean_ns = sum / static_cast<double>(s.size());
  return p;
}

}  // namespace tern::apps
