// The conformance binary's main: GoogleTest, or one child body when the
// binary is re-run as a fork tests' peer process (see Child).
#include <gtest/gtest.h>

#include "conformance_fixture.h"

int main(int argc, char** argv) {
  if (auto code = tern::conformance::run_child_body_if_asked(argc, argv)) return *code;
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
