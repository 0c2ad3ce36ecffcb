// Three kinds of checks, after kj:
//   TERN_REQUIRE(cond, fmt...)  the caller broke an API precondition. Always on;
//                               aborts with the caller's mistake named.
//   TERN_ASSERT(cond)           Tern's own invariant. On in debug builds and
//                               tests (TERN_DEBUG), compiled out otherwise.
//   TERN_CHECK(cond)            invariant whose violation must never be silent,
//                               even in release builds (cheap, off the hot path).
// Input a peer controls (wire headers, shared-memory descriptors) is never
// checked with these: it is validated and turned into an error status.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace tern::detail {
[[noreturn]] void check_failed(const char* kind, const char* file, int line, const char* cond,
                               const char* fmt, ...) __attribute__((format(printf, 5, 6)));
// Whether the library itself was compiled with TERN_DEBUG: its TERN_ASSERTs
// and the test switches and hooks compiled in with them. A test, whose own
// flags may differ, asks this rather than its own TERN_DEBUG.
bool debug_checks_compiled();
}  // namespace tern::detail

#define TERN_LIKELY(x) __builtin_expect(!!(x), 1)
#define TERN_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define TERN_REQUIRE(cond, ...)                                                        \
  do {                                                                                 \
    if (TERN_UNLIKELY(!(cond)))                                                        \
      ::tern::detail::check_failed("REQUIRE", __FILE__, __LINE__, #cond, "" __VA_ARGS__); \
  } while (0)

#define TERN_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (TERN_UNLIKELY(!(cond)))                                                        \
      ::tern::detail::check_failed("CHECK", __FILE__, __LINE__, #cond, "" __VA_ARGS__); \
  } while (0)

#if defined(TERN_DEBUG) && TERN_DEBUG
#define TERN_ASSERT(cond, ...)                                                         \
  do {                                                                                 \
    if (TERN_UNLIKELY(!(cond)))                                                        \
      ::tern::detail::check_failed("ASSERT", __FILE__, __LINE__, #cond, "" __VA_ARGS__); \
  } while (0)
#else
#define TERN_ASSERT(cond, ...) \
  do {                         \
    (void)sizeof(!(cond));     \
  } while (0)
#endif
