// PersonalityCache (nfsd/personality_cache.h): one personality per
// identity, found only for exactly that identity; bounded, the least
// recently used one retired and given back to the ring only once nothing
// queued still uses it; a duplicate registration given back at once.
#include "nfsd/personality_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace tern::nfsd {
namespace {

struct Ring {
  std::vector<int> unregistered;
  static void un(void* ctx, int id) { static_cast<Ring*>(ctx)->unregistered.push_back(id); }
};

Cred user(uint32_t uid, std::vector<uint32_t> groups = {}) {
  Cred c;
  c.uid = uid, c.gid = uid;
  c.ngroups = static_cast<uint32_t>(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) c.groups[i] = groups[i];
  return c;
}

TEST(PersonalityCache, FindsOnlyTheSameIdentity) {
  Ring r;
  PersonalityCache pc(4, &Ring::un, &r);
  EXPECT_EQ(pc.acquire(user(1000)), 0);
  pc.add(user(1000, {10}), 7);
  EXPECT_EQ(pc.acquire(user(1000)), 0) << "other groups: another identity";
  EXPECT_EQ(pc.acquire(user(1001, {10})), 0);
  EXPECT_EQ(pc.acquire(user(1000, {10})), 7);
  pc.release(7);
  pc.add(user(1000, {10}), 8);  // a second registration for it (two first calls raced)
  EXPECT_EQ(r.unregistered, std::vector<int>{8});
  EXPECT_EQ(pc.size(), 1u);
}

TEST(PersonalityCache, RetiresTheLeastRecentlyUsedOnceUnused) {
  Ring r;
  PersonalityCache pc(2, &Ring::un, &r);
  pc.add(user(1), 1);
  pc.add(user(2), 2);
  EXPECT_EQ(pc.acquire(user(1)), 1);  // 1 in use (queued), and now the more recent
  EXPECT_EQ(pc.acquire(user(2)), 2);
  pc.release(2);
  EXPECT_EQ(pc.acquire(user(1)), 1);  // 1 used twice, most recent
  pc.add(user(3), 3);                 // full: 2 is the least recent, unused: given back now
  EXPECT_EQ(r.unregistered, std::vector<int>{2});
  EXPECT_EQ(pc.acquire(user(2)), 0);
  pc.add(user(4), 4);                 // 1 is the least recent now, still used twice: retired, kept
  EXPECT_EQ(r.unregistered, std::vector<int>{2});
  EXPECT_EQ(pc.retired(), 1u);
  EXPECT_EQ(pc.acquire(user(1)), 0) << "a retired identity is not given out again";
  pc.release(1);
  EXPECT_EQ(r.unregistered, std::vector<int>{2});
  pc.release(1);  // its last queued operation completed
  EXPECT_EQ(r.unregistered, (std::vector<int>{2, 1}));
  EXPECT_EQ(pc.retired(), 0u);
  EXPECT_EQ(pc.size(), 2u);
}

TEST(PersonalityCache, GivesEveryIdBackAtTheEnd) {
  Ring r;
  {
    PersonalityCache pc(2, &Ring::un, &r);
    pc.add(user(1), 1);
    pc.add(user(2), 2);
    pc.add(user(0), 0);  // not an id: ignored
  }
  EXPECT_EQ(r.unregistered, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace tern::nfsd
