// A build without the EAL runtime (-Deal=disabled): Runtime says so instead of
// failing to link or crashing, and pinning still works.
#include <gtest/gtest.h>

#include "runtime/eal.h"

namespace tern::runtime {
namespace {

TEST(RuntimeNoEal, StartAndAttachAreUnsupported) {
  auto rt = Runtime::start(EalOptions{});
  ASSERT_FALSE(rt);
  EXPECT_EQ(rt.status().code(), Errc::kUnsupported) << rt.status().to_string();
  auto at = Runtime::attach();
  ASSERT_FALSE(at);
  EXPECT_EQ(at.status().code(), Errc::kUnsupported) << at.status().to_string();
}

TEST(RuntimeNoEal, PinCurrentThreadWorks) {
  EXPECT_TRUE(pin_current_thread(0).is_ok());
  EXPECT_EQ(pin_current_thread(1u << 20).code(), Errc::kInvalidArgument);
}

}  // namespace
}  // namespace tern::runtime
