// Per-engine statistics counters. Each counter has one writer (the thread that
// owns the engine or driver object), so increments are plain relaxed stores, no
// locked read-modify-write on the datapath; any thread may read a snapshot.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tern {

class Counter {
 public:
  void add(uint64_t n = 1) { __atomic_store_n(&v_, v_ + n, __ATOMIC_RELAXED); }
  // For the few counters that are gauges (how many X exist right now).
  void sub(uint64_t n = 1) { __atomic_store_n(&v_, v_ - n, __ATOMIC_RELAXED); }
  void set(uint64_t n) { __atomic_store_n(&v_, n, __ATOMIC_RELAXED); }
  uint64_t get() const { return __atomic_load_n(&v_, __ATOMIC_RELAXED); }
  void reset() { __atomic_store_n(&v_, 0, __ATOMIC_RELAXED); }

 private:
  uint64_t v_ = 0;
};

// A named, ordered view of counters for tools and logs.
struct StatEntry {
  const char* name;
  const Counter* counter;
};
using StatsView = std::vector<StatEntry>;

// "name=value name=value ..." skipping zeros unless all_values.
std::string format_stats(const StatsView& view, bool all_values = false);

}  // namespace tern
