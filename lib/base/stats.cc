#include "base/stats.h"

#include <cinttypes>
#include <cstdio>

namespace tern {

std::string format_stats(const StatsView& view, bool all_values) {
  std::string out;
  for (const auto& e : view) {
    uint64_t v = e.counter->get();
    if (v == 0 && !all_values) continue;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s%s=%" PRIu64, out.empty() ? "" : " ", e.name, v);
    out += buf;
  }
  return out;
}

}  // namespace tern
