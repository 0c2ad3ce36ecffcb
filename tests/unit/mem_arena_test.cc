#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "mem/arena.h"

namespace tern::mem {
namespace {

std::unique_ptr<Arena> make(size_t size, HugePages huge = HugePages::kNever) {
  ArenaOptions o;
  o.size = size;
  o.huge = huge;
  o.name = "unit-arena";
  Result<std::unique_ptr<Arena>> r = Arena::create(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

TEST(Arena, NormalPagesRoundedToPageSize) {
  auto a = make(4097);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->size(), 8192u);
  EXPECT_EQ(a->page_size(), 4096u);
  EXPECT_FALSE(a->hugepages());
  EXPECT_NE(a->base(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->base()) % 4096, 0u);
  EXPECT_GE(a->fd(), 0);
  EXPECT_EQ(a->used(), 0u);
  // The whole range is mapped and writable.
  std::memset(a->base(), 0xab, a->size());
  EXPECT_EQ(static_cast<unsigned char*>(a->base())[a->size() - 1], 0xab);
}

TEST(Arena, MappingIsTheMemfd) {
  auto a = make(4096);
  ASSERT_NE(a, nullptr);
  std::memcpy(a->base(), "tern", 4);
  char buf[4] = {};
  ASSERT_EQ(pread(a->fd(), buf, 4, 0), 4);
  EXPECT_EQ(std::memcmp(buf, "tern", 4), 0);
}

TEST(Arena, ZeroSizeRejected) {
  ArenaOptions o;
  o.size = 0;
  Result<std::unique_ptr<Arena>> r = Arena::create(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kInvalidArgument);
}

TEST(Arena, CarveAlignsAndAdvances) {
  auto a = make(4096);
  ASSERT_NE(a, nullptr);
  auto* base = static_cast<char*>(a->base());
  void* p1 = a->carve(1, 1);
  EXPECT_EQ(p1, base);
  EXPECT_EQ(a->used(), 1u);
  void* p2 = a->carve(10);  // default alignment: a cache line
  EXPECT_EQ(p2, base + 64);
  void* p3 = a->carve(100, 256);
  EXPECT_EQ(p3, base + 256);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p3) % 256, 0u);
  EXPECT_EQ(a->used(), 356u);
}

TEST(Arena, CarveExhaustionReturnsNull) {
  auto a = make(4096);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(a->carve(4000, 1), nullptr);
  EXPECT_EQ(a->carve(97, 1), nullptr);
  EXPECT_EQ(a->used(), 4000u) << "a failed carve must not consume space";
  // Alignment padding alone can overflow: 4000 rounds up to 4096.
  EXPECT_EQ(a->carve(1, 4096), nullptr);
  EXPECT_NE(a->carve(96, 1), nullptr) << "exactly the remaining bytes";
  EXPECT_EQ(a->used(), 4096u);
  EXPECT_EQ(a->carve(1, 1), nullptr);
  EXPECT_EQ(a->carve(SIZE_MAX, 1), nullptr);
}

TEST(Arena, CarveRejectsHugeRequestWithoutOverflow) {
  auto a = make(4096);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(a->carve(8, 1), nullptr);
  EXPECT_EQ(a->carve(SIZE_MAX - 4, 1), nullptr);
  EXPECT_EQ(a->used(), 8u);
}

TEST(ArenaDeathTest, CarveAlignmentMustBePowerOfTwo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto a = make(4096);
  ASSERT_NE(a, nullptr);
  EXPECT_DEATH(a->carve(8, 48), "REQUIRE failed.*48 is not a power of two");
  EXPECT_DEATH(a->carve(8, 0), "REQUIRE failed");
}

TEST(Arena, Contains) {
  auto a = make(8192);
  ASSERT_NE(a, nullptr);
  auto* b = static_cast<char*>(a->base());
  EXPECT_TRUE(a->contains(b, 1));
  EXPECT_TRUE(a->contains(b, a->size()));
  EXPECT_TRUE(a->contains(b + a->size() - 1, 1));
  EXPECT_TRUE(a->contains(b + 100, 0));
  EXPECT_FALSE(a->contains(b + a->size(), 1));
  EXPECT_FALSE(a->contains(b + a->size() - 1, 2));
  EXPECT_FALSE(a->contains(b - 1, 1));
  EXPECT_FALSE(a->contains(b, a->size() + 1));
  EXPECT_FALSE(a->contains(b + 1, SIZE_MAX));
}

TEST(Arena, AutoFallsBackToNormalPagesWithoutFreeHugepages) {
  if (free_hugepages_2m() > 0) {
    // With hugepages free, kAuto must use them for a small arena.
    auto a = make(1 << 20, HugePages::kAuto);
    ASSERT_NE(a, nullptr);
    EXPECT_TRUE(a->hugepages());
    EXPECT_EQ(a->size(), 2u << 20);
    return;
  }
  auto a = make(1 << 20, HugePages::kAuto);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->hugepages());
  EXPECT_EQ(a->page_size(), 4096u);
  EXPECT_EQ(a->size(), 1u << 20);
}

TEST(Arena, RequireHugepages) {
  ArenaOptions o;
  o.size = 1 << 20;
  o.huge = HugePages::kRequire;
  o.name = "unit-huge";
  uint64_t free_pages = free_hugepages_2m();
  Result<std::unique_ptr<Arena>> r = Arena::create(o);
  if (free_pages == 0) {
    ASSERT_FALSE(r.is_ok()) << "kRequire succeeded with no free hugepages";
    EXPECT_EQ(r.status().code(), Errc::kNoResources);
    EXPECT_NE(r.status().message().find("hugepages"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("unit-huge"), std::string::npos) << r.status().message();
  } else {
    ASSERT_TRUE(r.is_ok()) << free_pages << " hugepages free, yet: " << r.status().to_string();
    EXPECT_TRUE((*r)->hugepages());
    EXPECT_EQ((*r)->page_size(), 2u << 20);
    EXPECT_EQ((*r)->size(), 2u << 20);
  }
}

}  // namespace
}  // namespace tern::mem
