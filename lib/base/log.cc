#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tern {

namespace {

LogLevel initial_level() {
  LogLevel l = LogLevel::kWarn;
  if (const char* env = std::getenv("TERN_LOG_LEVEL")) log_level_from_string(env, &l);
  return l;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

const char* level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

struct SinkSlot {
  LogSink fn;
  void* ctx;
};
// Swapped whole, so a logging thread never sees a sink with another's context.
std::atomic<const SinkSlot*>& sink_ref() {
  static std::atomic<const SinkSlot*> sink{nullptr};
  return sink;
}

}  // namespace

void set_log_sink(LogSink sink, void* ctx) {
  // Slots are never freed: a thread may still be calling an old one. Hosts
  // set a sink once; tests a handful of times.
  const SinkSlot* slot = sink == nullptr ? nullptr : new SinkSlot{sink, ctx};
  sink_ref().store(slot, std::memory_order_release);
}

void set_log_level(LogLevel level) { level_ref().store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(level_ref().load(std::memory_order_relaxed)); }

bool log_level_from_string(const char* s, LogLevel* out) {
  static const struct { const char* name; LogLevel level; } names[] = {
      {"error", LogLevel::kError}, {"warn", LogLevel::kWarn},
      {"info", LogLevel::kInfo},   {"debug", LogLevel::kDebug}};
  for (const auto& n : names) {
    if (std::strcmp(s, n.name) == 0) {
      *out = n.level;
      return true;
    }
  }
  return false;
}

void log_write(LogLevel level, const char* component, const char* fmt, ...) {
  char buf[1024];
  if (const SinkSlot* sink = sink_ref().load(std::memory_order_acquire)) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sink->fn(sink->ctx, level, component, buf);
    return;
  }
  int n = std::snprintf(buf, sizeof buf, "tern %s %s: ", level_name(level), component);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && static_cast<size_t>(n) < sizeof buf) std::vsnprintf(buf + n, sizeof buf - n, fmt, ap);
  va_end(ap);
  // One write per line so that lines from two processes do not interleave.
  std::fprintf(stderr, "%s\n", buf);
}

}  // namespace tern
