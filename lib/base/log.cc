#include "base/log.h"

#include <time.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace tern {

namespace {

constexpr LogLevel kDefaultLevel = LogLevel::kWarn;

// What TERN_LOG_LEVEL said, read once (before the first log line or the
// first log_level()/log_init() call).
struct EnvLevel {
  LogLevel level = kDefaultLevel;
  bool bad = false;
  std::string value;  // the bad value, for the error
};

const EnvLevel& env_level() {
  static const EnvLevel e = [] {
    EnvLevel r;
    const char* env = std::getenv("TERN_LOG_LEVEL");
    if (env != nullptr && !log_level_from_string(env, &r.level)) {
      r.bad = true;
      r.level = kDefaultLevel;
      r.value = env;
    }
    return r;
  }();
  return e;
}

// Whether a bad TERN_LOG_LEVEL has been dealt with: log_init() hands it to
// a host that checks (tern-nfsd, tern-perf and tern-nfs-read exit with it,
// one line), and then nothing else is said; a host that never calls
// log_init() gets one warning at its first log call instead, which says
// what happens (it goes on at warn). Before, both were printed: "logging at
// warn", then the exit.
std::atomic<bool>& bad_level_handled() {
  static std::atomic<bool> handled{false};
  return handled;
}

std::atomic<int>& level_ref() {
  static std::atomic<int> level{[] {
    const EnvLevel& e = env_level();
    if (e.bad && !bad_level_handled().exchange(true))
      std::fprintf(stderr,
                   "tern warn log: TERN_LOG_LEVEL='%s' is not a log level (want error, warn, info or debug); "
                   "logging at %s\n",
                   e.value.c_str(), log_level_name(kDefaultLevel));
    return static_cast<int>(e.level);
  }()};
  return level;
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

uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

void vlog(LogLevel level, const char* subsystem, const char* peer, const char* fmt, va_list ap) {
  char msg[1024];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  LogRecord rec{level, subsystem, (peer != nullptr && peer[0] != '\0') ? peer : nullptr, msg, realtime_ns()};
  sink_users().fetch_add(1);
  if (const SinkSlot* sink = sink_ref().load()) {
    sink->fn(sink->ctx, rec);
    sink_users().fetch_sub(1);
    return;
  }
  sink_users().fetch_sub(1);
  char line[1400];
  format_log_line(rec, line, sizeof line);
  // One write per line so that lines from two processes do not interleave.
  std::fprintf(stderr, "%s\n", line);
}

}  // namespace

const char* log_level_name(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

Status log_init() {
  const EnvLevel& e = env_level();
  if (!e.bad) return Status::ok();
  bad_level_handled().store(true);  // the host says it (and stops): no warning besides
  return make_error(Errc::kInvalidArgument,
                    "TERN_LOG_LEVEL='%s' is not a log level (want error, warn, info or debug)", e.value.c_str());
}

void set_log_sink(LogSink sink, void* ctx) {
  const SinkSlot* slot = sink == nullptr ? nullptr : new SinkSlot{sink, ctx};
  const SinkSlot* old = sink_ref().exchange(slot);
  // A thread that took `old` registered itself first (vlog), so once the
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

size_t format_log_line(const LogRecord& rec, char* buf, size_t len) {
  time_t secs = static_cast<time_t>(rec.realtime_ns / 1000000000u);
  unsigned us = static_cast<unsigned>(rec.realtime_ns % 1000000000u / 1000u);
  tm t;
  gmtime_r(&secs, &t);
  char when[80];  // room for any tm_year, so the compiler sees no truncation
  std::snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ", t.tm_year + 1900, t.tm_mon + 1,
                t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, us);
  int n;
  if (rec.peer != nullptr)
    n = std::snprintf(buf, len, "%s tern %s %s [%s]: %s", when, log_level_name(rec.level), rec.subsystem, rec.peer,
                      rec.message);
  else
    n = std::snprintf(buf, len, "%s tern %s %s: %s", when, log_level_name(rec.level), rec.subsystem, rec.message);
  return n < 0 ? 0 : static_cast<size_t>(n);
}

void log_write(LogLevel level, const char* subsystem, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, subsystem, nullptr, fmt, ap);
  va_end(ap);
}

void log_write_peer(LogLevel level, const char* subsystem, const char* peer, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, subsystem, peer, fmt, ap);
  va_end(ap);
}

}  // namespace tern
