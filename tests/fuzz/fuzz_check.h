// What a fuzz target does when an invariant of the code under test breaks:
// say which, then trap, so that libFuzzer records the input as a crash. Not
// TERN_CHECK: that may be compiled differently, and a fuzzer must never stop
// checking.
#pragma once

#include <cstdio>

#define FUZZ_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fputc('\n', stderr);                                                   \
      __builtin_trap();                                                           \
    }                                                                             \
  } while (0)

// A view lies inside the n bytes at base it was decoded from.
#define FUZZ_CHECK_WITHIN(view, base, n)                                                          \
  FUZZ_CHECK((view).empty() || (reinterpret_cast<const uint8_t*>((view).data()) >= (base) &&       \
                                reinterpret_cast<const uint8_t*>((view).data()) + (view).size() <= \
                                    (base) + (n)),                                                 \
             "%s points outside the input", #view)
