// pmd/verbs on a machine without RDMA (this one: ibv_get_device_list returns
// NULL with ENOSYS, rdma_cm has no device): opening fails with one clear
// Status that names what is missing, and nothing crashes. On a machine that
// does have RDMA devices the tests that need their absence skip.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>

#include "rdma_presence.h"
#include "rdmadev/rdmadev.h"

namespace tern::rdma {
namespace {

using test::machine_has_rdma;

TEST(VerbsNoDev, DriverIsLinked) {
  auto names = driver_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "verbs"), names.end());
}

TEST(VerbsNoDev, OpenByNameSaysThereIsNoRdmaDevice) {
  if (machine_has_rdma()) GTEST_SKIP() << "this machine has RDMA devices";
  auto d = open_device("verbs:dev=rxe0,addr=169.254.77.1,port=20079");
  ASSERT_FALSE(d.is_ok());
  EXPECT_TRUE(d.status().code() == Errc::kNotFound || d.status().code() == Errc::kUnsupported)
      << d.status().to_string();
  EXPECT_NE(d.status().message().find("no RDMA devices"), std::string::npos) << d.status().to_string();
  EXPECT_NE(d.status().sys_errno(), 0) << "the errno from libibverbs should be kept: " << d.status().to_string();
}

TEST(VerbsNoDev, OpenByAddressFailsTheSameWay) {
  if (machine_has_rdma()) GTEST_SKIP() << "this machine has RDMA devices";
  for (int i = 0; i < 3; ++i) {  // repeatable: nothing half-initialised is left behind
    auto d = open_device("verbs:addr=127.0.0.1");
    ASSERT_FALSE(d.is_ok());
    EXPECT_EQ(d.status().code(), Errc::kNotFound) << d.status().to_string();
  }
}

TEST(VerbsNoDev, ArgumentsAreCheckedFirst) {
  // Spec errors are the caller's and are reported as such, device or not.
  for (const char* bad : {"verbs", "verbs:dev=rxe0,tern_bogus=1", "verbs:dev=rxe0,port=0",
                          "verbs:dev=rxe0,port=70000", "verbs:addr=1.2.3.4,mw=maybe",
                          "verbs:dev=rxe0,ack_timeout=0", "verbs:dev=rxe0,ack_timeout=32",
                          "verbs:dev=rxe0,ack_timeout=soon", "verbs:dev=rxe0,inline=1025",
                          "verbs:dev=rxe0,inline=some"}) {
    auto d = open_device(bad);
    ASSERT_FALSE(d.is_ok()) << bad;
    EXPECT_EQ(d.status().code(), Errc::kInvalidArgument) << bad << ": " << d.status().to_string();
  }
  // ack_timeout in [1, 31] and inline in [0, 1024] are valid: whatever
  // fails now is the device.
  for (const char* good : {"verbs:dev=rxe0,ack_timeout=14", "verbs:dev=rxe0,inline=0", "verbs:dev=rxe0,inline=1024"}) {
    auto d = open_device(good);
    if (!d.is_ok()) EXPECT_NE(d.status().code(), Errc::kInvalidArgument) << good << ": " << d.status().to_string();
  }
}

}  // namespace
}  // namespace tern::rdma
