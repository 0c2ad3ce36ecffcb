// pmd/mlx5 without hardware: the kRegMr -> UMR plan (pure).
#include <gtest/gtest.h>

#include <string>

#include "mlx5/mlx5_umr_plan.h"
#include "rdmadev/rdmadev.h"

namespace tern::mlx5 {
namespace {

using rdma::kAccessLocalWrite;
using rdma::kAccessRemoteRead;
using rdma::kAccessRemoteWrite;
using rdma::make_rkey;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint32_t kPage = 4096;

// ---------------------------------------------------------------- the plan

struct PlanTest : ::testing::Test {
  UmrTarget target{make_rkey(0x4242, 0x10), 4, 16, kPage};
  UmrSource src{0x100000, 1 << 20, 0x55};  // a 1 MiB MR at 1 MiB
  UmrPlan plan;

  UmrRefusal run(uint64_t addr, uint64_t len, uint32_t access = kAccessRemoteWrite | kAccessRemoteRead,
                 uint8_t key = 0x11) {
    return plan_umr(target, &src, UmrRequest{addr, len, access, make_rkey(0x4242, key)}, &plan);
  }
};

TEST_F(PlanTest, OneRangeIsOneEntryOverItsMr) {
  ASSERT_EQ(run(0x100000 + 8192, 3 * kPage), UmrRefusal::kNone);
  ASSERT_EQ(plan.num_sge, 1);
  EXPECT_EQ(plan.sge[0].addr, 0x100000u + 8192);
  EXPECT_EQ(plan.sge[0].length, 3 * kPage);
  EXPECT_EQ(plan.sge[0].lkey, 0x55u) << "the entry borrows the long-lived MR's translation";
  EXPECT_EQ(plan.access_flags,
            unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
}

TEST_F(PlanTest, NewKeyIsTheMkeysIndexWithTheRequestsKeyByte) {
  ASSERT_EQ(run(0x100000, kPage, kAccessRemoteRead, 0x11), UmrRefusal::kNone);
  EXPECT_EQ(plan.new_key, make_rkey(0x4242, 0x11));
  // The key byte wraps as FastMr::bump_rkey wraps it.
  target.key = make_rkey(0x4242, 0xff);
  ASSERT_EQ(run(0x100000, kPage, kAccessRemoteRead, 0x00), UmrRefusal::kNone);
  EXPECT_EQ(plan.new_key, make_rkey(0x4242, 0x00));
}

TEST_F(PlanTest, RkeyOfAnotherMkeyIsRefused) {
  UmrRequest r{0x100000, kPage, kAccessRemoteRead, make_rkey(0x4243, 0x11)};
  EXPECT_EQ(plan_umr(target, &src, r, &plan), UmrRefusal::kWrongMkey);
}

TEST_F(PlanTest, AccessFlagsMapToIbvAccess) {
  EXPECT_EQ(umr_access_flags(0), 0u);
  EXPECT_EQ(umr_access_flags(kAccessLocalWrite), unsigned{IBV_ACCESS_LOCAL_WRITE});
  EXPECT_EQ(umr_access_flags(kAccessRemoteRead), unsigned{IBV_ACCESS_REMOTE_READ});
  EXPECT_EQ(umr_access_flags(kAccessRemoteWrite), unsigned{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE})
      << "remote write needs local write (IB spec)";
  EXPECT_EQ(umr_access_flags(kAccessLocalWrite | kAccessRemoteRead),
            unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ});
  ASSERT_EQ(run(0x100000, kPage, kAccessRemoteRead), UmrRefusal::kNone);
  EXPECT_EQ(plan.access_flags, unsigned{IBV_ACCESS_REMOTE_READ}) << "a read-only registration stays read-only";
}

TEST_F(PlanTest, UnalignedRangesAreMappedAndCountedByPagesTouched) {
  // 4 KiB starting 100 bytes into a page touches two pages.
  EXPECT_EQ(pages_spanned(0x100000 + 100, kPage, kPage), 2u);
  target.max_depth = 1;
  EXPECT_EQ(run(0x100000 + 100, kPage), UmrRefusal::kTooDeep);
  target.max_depth = 2;
  ASSERT_EQ(run(0x100000 + 100, kPage), UmrRefusal::kNone);
  EXPECT_EQ(plan.sge[0].addr, 0x100000u + 100) << "byte-granular: no rounding to pages";
  EXPECT_EQ(plan.sge[0].length, kPage);
  // An odd length in the middle of a page is fine too.
  ASSERT_EQ(run(0x100000 + 7, 13), UmrRefusal::kNone);
  EXPECT_EQ(plan.sge[0].length, 13u);
}

TEST_F(PlanTest, DepthIsAPageLimit) {
  ASSERT_EQ(run(0x100000, 16 * kPage), UmrRefusal::kNone) << "exactly max_depth aligned pages";
  EXPECT_EQ(run(0x100000, 16 * kPage + 1), UmrRefusal::kTooDeep);
  EXPECT_EQ(run(0x100000 + kPage - 1, 15 * kPage + 2), UmrRefusal::kTooDeep) << "touches 17 pages";
}

TEST_F(PlanTest, RangeMustLieInsideItsMr) {
  EXPECT_EQ(run(0x100000 - 1, 16), UmrRefusal::kOutsideSource) << "starts before the MR";
  EXPECT_EQ(run(0x100000 + (1 << 20) - 8, 16), UmrRefusal::kOutsideSource) << "ends after the MR";
  EXPECT_EQ(run(0x100000 + (1 << 20), 1), UmrRefusal::kOutsideSource) << "starts at its end";
  ASSERT_EQ(run(0x100000 + (1 << 20) - 16, 16), UmrRefusal::kNone) << "its last bytes";
  // No overflow: a huge length or an address near the top must not wrap into range.
  target.max_depth = UINT32_MAX;
  EXPECT_EQ(run(0x100000 + 8, UINT64_MAX - 4), UmrRefusal::kOutsideSource);
  EXPECT_EQ(run(UINT64_MAX - 8, 16), UmrRefusal::kOutsideSource);
}

TEST_F(PlanTest, EmptyOrUnknownIsRefused) {
  EXPECT_EQ(run(0x100000, 0), UmrRefusal::kEmpty);
  UmrRequest r{0x100000, kPage, kAccessRemoteRead, make_rkey(0x4242, 1)};
  EXPECT_EQ(plan_umr(target, nullptr, r, &plan), UmrRefusal::kNoSource) << "reg.lkey names no MR of the PD";
}

TEST_F(PlanTest, LongRangesTakeOneEntryPer2GiB) {
  EXPECT_EQ(umr_entries_for(2 * kGiB), 1u);
  EXPECT_EQ(umr_entries_for(2 * kGiB + 1), 2u);
  src = UmrSource{0x40000000, 16 * kGiB, 0x99};
  target.max_depth = UINT32_MAX;
  ASSERT_EQ(run(0x40000000 + 4096, 5 * kGiB), UmrRefusal::kNone);
  ASSERT_EQ(plan.num_sge, 3);
  uint64_t pos = 0x40000000 + 4096;
  const uint32_t want[3] = {uint32_t(2 * kGiB), uint32_t(2 * kGiB), uint32_t(kGiB)};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.sge[i].addr, pos) << "entry " << i << " continues where the last ended";
    EXPECT_EQ(plan.sge[i].length, want[i]) << "entry " << i;
    EXPECT_EQ(plan.sge[i].lkey, 0x99u);
    pos += plan.sge[i].length;
  }
  target.max_entries = 2;
  EXPECT_EQ(run(0x40000000, 5 * kGiB), UmrRefusal::kTooManyEntries) << "more than the mkey was created with";
  target.max_entries = 16;
  EXPECT_EQ(run(0x40000000, 9 * kGiB), UmrRefusal::kTooManyEntries) << "more than one default WQE carries";
}

TEST(UmrRefusalName, EveryRefusalHasAName) {
  for (int r = 0; r <= static_cast<int>(UmrRefusal::kTooManyEntries); ++r)
    EXPECT_STRNE(umr_refusal_name(static_cast<UmrRefusal>(r)), "?") << r;
}


}  // namespace
}  // namespace tern::mlx5
