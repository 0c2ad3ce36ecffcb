// pmd/mlx5 on a machine without RDMA (this one): opening fails with one
// clear Status naming mlx5 and what is missing, repeatably, and nothing
// crashes; spec mistakes are reported as such first. On a machine with RDMA
// devices the tests that need their absence skip.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>

#include "rdma_presence.h"
#include "rdmadev/rdmadev.h"

namespace tern::rdma {
namespace {

using test::machine_has_rdma;

TEST(Mlx5NoDev, DriverIsLinkedBesideVerbs) {
  auto names = driver_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "mlx5"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "verbs"), names.end()) << "mlx5 is built on pmd/verbs";
}

TEST(Mlx5NoDev, OpenByNameSaysThereIsNoRdmaDevice) {
  if (machine_has_rdma()) GTEST_SKIP() << "this machine has RDMA devices";
  auto d = open_device("mlx5:dev=mlx5_0,addr=192.0.2.1,port=20079");
  ASSERT_FALSE(d.is_ok());
  const Status& s = d.status();
  EXPECT_EQ(s.code(), Errc::kNotFound) << s.to_string();
  EXPECT_EQ(s.message().rfind("mlx5: ", 0), 0u) << "the message names the driver asked for: " << s.to_string();
  EXPECT_NE(s.message().find("no RDMA devices"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("mlx5_ib"), std::string::npos) << "and what to load: " << s.to_string();
  EXPECT_NE(s.sys_errno(), 0) << "the errno from libibverbs is kept: " << s.to_string();
}

TEST(Mlx5NoDev, OpenByAddressFailsTheSameWayEveryTime) {
  if (machine_has_rdma()) GTEST_SKIP() << "this machine has RDMA devices";
  for (int i = 0; i < 3; ++i) {  // nothing half-initialised is left behind
    auto d = open_device("mlx5:addr=127.0.0.1");
    ASSERT_FALSE(d.is_ok());
    EXPECT_EQ(d.status().code(), Errc::kNotFound) << d.status().to_string();
    EXPECT_NE(d.status().message().find("mlx5"), std::string::npos) << d.status().to_string();
  }
}

TEST(Mlx5NoDev, ArgumentsAreCheckedFirst) {
  // The same keys as verbs:, and spec errors are the caller's, device or not.
  for (const char* bad : {"mlx5", "mlx5:dev=mlx5_0,tern_bogus=1", "mlx5:dev=mlx5_0,port=0",
                          "mlx5:dev=mlx5_0,port=70000", "mlx5:dev=mlx5_0,depth=0", "mlx5:addr=1.2.3.4,mw=maybe"}) {
    auto d = open_device(bad);
    ASSERT_FALSE(d.is_ok()) << bad;
    EXPECT_EQ(d.status().code(), Errc::kInvalidArgument) << bad << ": " << d.status().to_string();
  }
  auto d = open_device("mlx5:dev=mlx5_0,port=0");
  EXPECT_EQ(d.status().message().rfind("mlx5: ", 0), 0u) << d.status().to_string();
}

}  // namespace
}  // namespace tern::rdma
