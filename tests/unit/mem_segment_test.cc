#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "mem/arena.h"
#include "mem/segment.h"

namespace tern::mem {
namespace {

std::unique_ptr<Arena> make(size_t size) {
  ArenaOptions o;
  o.size = size;
  o.huge = HugePages::kNever;
  o.name = "unit-segment";
  Result<std::unique_ptr<Arena>> r = Arena::create(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

TEST(Segment, ArenaIsRegistered) {
  auto a = make(16384);
  ASSERT_NE(a, nullptr);
  auto* b = static_cast<char*>(a->base());
  std::optional<Segment> s = find_segment(b + 100, 50);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->base, a->base());
  EXPECT_EQ(s->length, a->size());
  EXPECT_EQ(s->fd, a->fd());
  EXPECT_EQ(s->hugepages, a->hugepages());
  EXPECT_NE(s->id, 0u);

  EXPECT_TRUE(find_segment(b, a->size()).has_value());
  EXPECT_TRUE(find_segment(b + a->size() - 8, 8).has_value());
}

TEST(Segment, RangesCrossingTheEdgesAreRejected) {
  auto a = make(16384);
  ASSERT_NE(a, nullptr);
  auto* b = static_cast<char*>(a->base());
  EXPECT_FALSE(find_segment(b + a->size() - 8, 9).has_value());
  EXPECT_FALSE(find_segment(b + a->size(), 1).has_value());
  EXPECT_FALSE(find_segment(b, a->size() + 1).has_value());
  EXPECT_FALSE(find_segment(b - 1, 2).has_value());
}

TEST(Segment, UnregisteredWhenArenaIsDestroyed) {
  auto a = make(16384);
  ASSERT_NE(a, nullptr);
  void* base = a->base();
  ASSERT_TRUE(find_segment(base, 1).has_value());
  a.reset();
  EXPECT_FALSE(find_segment(base, 1).has_value());
}

TEST(Segment, TwoArenasAreToldApart) {
  auto a = make(8192), b = make(8192);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto sa = find_segment(a->base(), 8), sb = find_segment(b->base(), 8);
  ASSERT_TRUE(sa && sb);
  EXPECT_NE(sa->id, sb->id);
  EXPECT_EQ(sa->fd, a->fd());
  EXPECT_EQ(sb->fd, b->fd());
}

TEST(Segment, DirectRegistration) {
  static char buf[256], other[64];
  uint64_t id = register_segment(buf, sizeof buf, 123, false);
  uint64_t id2 = register_segment(other, sizeof other, -1, false);
  EXPECT_NE(id, id2);
  std::optional<Segment> s = find_segment(buf + 16, 16);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->id, id);
  EXPECT_EQ(s->fd, 123);
  unregister_segment(id);
  EXPECT_FALSE(find_segment(buf + 16, 16).has_value());
  EXPECT_TRUE(find_segment(other, sizeof other).has_value()) << "unregistering one segment removed another";
  unregister_segment(id2);
  EXPECT_FALSE(find_segment(other, sizeof other).has_value());
  unregister_segment(id);  // unknown ids are ignored
}

}  // namespace
}  // namespace tern::mem
