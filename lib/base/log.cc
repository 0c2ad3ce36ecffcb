#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

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
// Threads inside a sink call right now: set_log_sink frees the old slot (and
// returns, so its caller may free ctx) only once none can still be using it.
std::atomic<int>& sink_users() {
  static std::atomic<int> users{0};
  return users;
}

}  // namespace

void set_log_sink(LogSink sink, void* ctx) {
  const SinkSlot* slot = sink == nullptr ? nullptr : new SinkSlot{sink, ctx};
  const SinkSlot* old = sink_ref().exchange(slot);
  // A thread that took `old` registered itself first (log_write), so once the
  // count drops to zero nobody holds it. Never call this from inside a sink.
  while (sink_users().load() != 0) std::this_thread::yield();
  delete old;
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
  sink_users().fetch_add(1);
  if (const SinkSlot* sink = sink_ref().load()) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    sink->fn(sink->ctx, level, component, buf);
    sink_users().fetch_sub(1);
    return;
  }
  sink_users().fetch_sub(1);
  int n = std::snprintf(buf, sizeof buf, "tern %s %s: ", level_name(level), component);
  va_list ap;
  va_start(ap, fmt);
  if (n >= 0 && static_cast<size_t>(n) < sizeof buf) std::vsnprintf(buf + n, sizeof buf - n, fmt, ap);
  va_end(ap);
  // One write per line so that lines from two processes do not interleave.
  std::fprintf(stderr, "%s\n", buf);
}

}  // namespace tern
