#include "base/check.h"

#include <cstdarg>

namespace tern::detail {

void check_failed(const char* kind, const char* file, int line, const char* cond, const char* fmt,
                  ...) {
  std::fprintf(stderr, "tern: %s failed at %s:%d: %s", kind, file, line, cond);
  if (fmt != nullptr && fmt[0] != '\0') {
    std::fputs(": ", stderr);
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

bool debug_checks_compiled() {
#if defined(TERN_DEBUG) && TERN_DEBUG
  return true;
#else
  return false;
#endif
}

}  // namespace tern::detail
