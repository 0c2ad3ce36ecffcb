// Logging from C: the level, and a C sink behind the C++ one.
#include <mutex>
#include <new>

#include <cstdio>

#include "base/log.h"
#include "capi/capi_impl.h"

using namespace tern;

static_assert(TERN_LOG_ERROR == static_cast<int>(LogLevel::kError));
static_assert(TERN_LOG_WARN == static_cast<int>(LogLevel::kWarn));
static_assert(TERN_LOG_INFO == static_cast<int>(LogLevel::kInfo));
static_assert(TERN_LOG_DEBUG == static_cast<int>(LogLevel::kDebug));

namespace {

struct CSink {
  tern_log_fn fn;
  void* ctx;
};

void sink_trampoline(void* ctx, const LogRecord& rec) {
  auto* s = static_cast<CSink*>(ctx);
  // A connection's identity, when the line has one, leads the message as
  // it does on stderr ("[peer] message").
  if (rec.peer != nullptr && rec.peer[0] != 0) {
    char line[1024];
    std::snprintf(line, sizeof line, "[%s] %s", rec.peer, rec.message);
    s->fn(s->ctx, static_cast<tern_log_level>(rec.level), rec.subsystem, line);
    return;
  }
  s->fn(s->ctx, static_cast<tern_log_level>(rec.level), rec.subsystem, rec.message);
}

// The C sink installed now. set_log_sink guarantees the previous sink is not
// running once it returns, so the old record can be freed then; the mutex
// orders concurrent setters.
std::mutex g_sink_mu;
CSink* g_sink = nullptr;

}  // namespace

extern "C" {

void tern_log_set_level(tern_log_level level) noexcept {
  if (level < TERN_LOG_ERROR) level = TERN_LOG_ERROR;
  if (level > TERN_LOG_DEBUG) level = TERN_LOG_DEBUG;
  set_log_level(static_cast<LogLevel>(level));
}

void tern_log_set_sink(tern_log_fn fn, void* ctx) noexcept {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  CSink* next = fn == nullptr ? nullptr : new (std::nothrow) CSink{fn, ctx};
  if (fn != nullptr && next == nullptr) return;  // out of memory: keep the sink there is
  if (next != nullptr) set_log_sink(&sink_trampoline, next);
  else set_log_sink(nullptr, nullptr);
  delete g_sink;
  g_sink = next;
}

}  // extern "C"
