// Leveled logging for the control path; the datapath counts events in
// statistics instead. Lines go to stderr, or to the host's logger through
// set_log_sink().
//
// Every stderr line is
//   2025-06-01T12:34:56.123456Z tern warn engine [pid 1234 uid 1000 qp 7]: message
// a CLOCK_REALTIME timestamp in UTC (ISO-8601, microseconds: wall clock, so
// it lines up with the host's and the kernel's logs), "tern", the level, the
// subsystem, the connection identity in brackets when the caller gave one,
// and the message.
//
// The level comes from TERN_LOG_LEVEL (error|warn|info|debug, default warn),
// read once at first use, or from set_log_level(). An unknown TERN_LOG_LEVEL
// is an error, not ignored: the first log call says so on stderr, and
// log_init() returns it, so that the init path that calls it (Runtime::start,
// and the engine's create) fails with a Status the host sees.
#pragma once

#include <cstddef>
#include <cstdint>

#include "result.h"

namespace tern {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
bool log_level_from_string(const char* s, LogLevel* out);
const char* log_level_name(LogLevel level);  // "error", "warn", "info", "debug"

// Whether TERN_LOG_LEVEL, as read at first use, was valid (unset is valid).
// kInvalidArgument names the value and the accepted ones. The level it set
// stays as it is (warn, when the value was bad), whatever set_log_level did
// since; calling this twice is harmless.
Status log_init();

// One log line, as a sink receives it. Strings are valid only during the call.
struct LogRecord {
  LogLevel level;
  const char* subsystem;  // "engine", "shm", "verbs", "runtime", ...
  const char* peer;       // connection identity the caller gave, or nullptr
  const char* message;    // formatted, without prefix or newline
  uint64_t realtime_ns;   // CLOCK_REALTIME when it was logged
};

// The stderr form of a record (without the newline) into buf; returns the
// length it wanted, as snprintf does. For hosts that keep Tern's format.
size_t format_log_line(const LogRecord& rec, char* buf, size_t len);

void log_write(LogLevel level, const char* subsystem, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
// The same about one connection: `peer` names it ("pid 1234 uid 1000 qp 7",
// "10.0.0.2:20049 qp 17"; nullptr or "" for none).
void log_write_peer(LogLevel level, const char* subsystem, const char* peer, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Where log records go instead of stderr: the host's logger, or a test that
// checks what was said. The sink is called on whichever thread logs (engines
// log from their own lcore), so it must be thread-safe. nullptr restores
// stderr. Once set_log_sink returns, the previous sink is not running and will
// not be called again (its ctx may be freed); do not call it from inside a
// sink.
using LogSink = void (*)(void* ctx, const LogRecord& rec);
void set_log_sink(LogSink sink, void* ctx);

}  // namespace tern

#define TERN_LOG(level, subsystem, ...)                                                      \
  do {                                                                                       \
    if (static_cast<int>(::tern::LogLevel::level) <= static_cast<int>(::tern::log_level())) \
      ::tern::log_write(::tern::LogLevel::level, subsystem, __VA_ARGS__);                   \
  } while (0)

// TERN_LOG about a connection: `peer` is its identity string (const char*).
#define TERN_LOG_PEER(level, subsystem, peer, ...)                                           \
  do {                                                                                       \
    if (static_cast<int>(::tern::LogLevel::level) <= static_cast<int>(::tern::log_level())) \
      ::tern::log_write_peer(::tern::LogLevel::level, subsystem, peer, __VA_ARGS__);        \
  } while (0)
