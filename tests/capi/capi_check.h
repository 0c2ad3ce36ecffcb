/*
 * The C API tests' one check: on failure, prints where, what and the
 * library's last error, then exits 1 (the test fails; no unwinding in C).
 */
#ifndef TERN_TESTS_CAPI_CHECK_H
#define TERN_TESTS_CAPI_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "tern/tern.h"

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fflush(stdout);                                                          \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n  tern_last_error: %s\n", tern_last_error());         \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#endif
