#include "mem/segment.h"

#include <mutex>
#include <vector>

namespace tern::mem {

namespace {
struct Table {
  std::mutex mu;
  std::vector<Segment> segs;
  uint64_t next_id = 1;
};
Table& table() {
  static Table t;
  return t;
}
}  // namespace

uint64_t register_segment(void* base, size_t length, int fd, bool hugepages) {
  Table& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  uint64_t id = t.next_id++;
  t.segs.push_back(Segment{id, base, length, fd, hugepages});
  return id;
}

void unregister_segment(uint64_t id) {
  Table& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  for (size_t i = 0; i < t.segs.size(); ++i) {
    if (t.segs[i].id == id) {
      t.segs.erase(t.segs.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::optional<Segment> find_segment(const void* addr, size_t length) {
  Table& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  auto a = reinterpret_cast<uintptr_t>(addr);
  for (const Segment& s : t.segs) {
    auto b = reinterpret_cast<uintptr_t>(s.base);
    if (a >= b && length <= s.length && a - b <= s.length - length) return s;
  }
  return std::nullopt;
}

}  // namespace tern::mem
