// Latency samples and percentiles for tern-perf.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
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

// Latency samples with bounded memory: every sample is kept until `cap`, then
// every other one is dropped and from then on only every 2nd (4th, ...) is
// recorded, so that a long run still yields an even sample over its whole
// length (not just its first seconds) in at most cap x 4 bytes.
class SampleSet {
 public:
  explicit SampleSet(size_t cap = 4u << 20) : cap_(std::max<size_t>(cap, 2)) {
    v_.reserve(std::min<size_t>(cap_, 1u << 20));
  }

  void add(double ns) {
    if (++seen_ % stride_ != 0) return;
    if (v_.size() == cap_) {
      size_t j = 0;
      for (size_t i = 1; i < v_.size(); i += 2) v_[j++] = v_[i];
      v_.resize(j);
      stride_ *= 2;
    }
    v_.push_back(ns < 4e9 ? static_cast<uint32_t>(ns) : UINT32_MAX);  // saturate at ~4 s
  }
  uint64_t seen() const { return seen_; }
  size_t kept() const { return v_.size(); }
  // Appends the kept samples (ns) to `out`.
  void append_to(std::vector<double>* out) const {
    out->reserve(out->size() + v_.size());
    for (uint32_t x : v_) out->push_back(static_cast<double>(x));
  }

 private:
  size_t cap_;
  uint64_t stride_ = 1, seen_ = 0;
  std::vector<uint32_t> v_;
};

// The latency row both tern-perf modes print under their heading.
inline void print_latency(const Percentiles& p) {
  std::printf("    min %8.0f   p50 %8.0f   p99 %8.0f   p99.9 %8.0f   max %8.0f   mean %8.0f\n", p.min_ns, p.p50_ns,
              p.p99_ns, p.p999_ns, p.max_ns, p.mean_ns);
}

}  // namespace tern::apps
