// Minimal leveled logging to stderr. The level comes from TERN_LOG_LEVEL
// (error|warn|info|debug, default warn) or set_log_level(). Logging is for the
// control path; the datapath counts events in statistics instead.
#pragma once

namespace tern {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
bool log_level_from_string(const char* s, LogLevel* out);
void log_write(LogLevel level, const char* component, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// Where log lines go instead of stderr: the host's logger, or a test that
// checks what was said. `line` is the message without the "tern <level>
// <component>: " prefix and without a newline; it is valid only during the
// call. The sink is called on whichever thread logs (engines log from their
// own lcore), so it must be thread-safe. nullptr restores stderr. Once
// set_log_sink returns, the previous sink is not running and will not be
// called again (its ctx may be freed); do not call it from inside a sink.
using LogSink = void (*)(void* ctx, LogLevel level, const char* component, const char* line);
void set_log_sink(LogSink sink, void* ctx);

}  // namespace tern

#define TERN_LOG(level, component, ...)                                              \
  do {                                                                               \
    if (static_cast<int>(::tern::LogLevel::level) <= static_cast<int>(::tern::log_level())) \
      ::tern::log_write(::tern::LogLevel::level, component, __VA_ARGS__);           \
  } while (0)
