// DPDK calls exit() on some inputs (--help, rte_panic paths). meson judges a
// test by its exit code alone, so a premature exit(0) would pass; this turns
// any exit before gtest finished into a failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace tern::test {

class ExitGuard : public ::testing::Environment {
 public:
  void SetUp() override {
    std::atexit([] {
      if (!finished_) {
        std::fputs("tern test: process exited before the tests finished\n", stderr);
        std::_Exit(1);
      }
    });
  }
  void TearDown() override { finished_ = true; }

 private:
  static inline bool finished_ = false;
};

inline ::testing::Environment* const kExitGuard = ::testing::AddGlobalTestEnvironment(new ExitGuard);

}  // namespace tern::test
