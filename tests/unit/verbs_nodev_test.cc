// pmd/verbs on a machine without RDMA (this one: ibv_get_device_list returns
// NULL with ENOSYS, rdma_cm has no device): opening fails with one clear
// Status that names what is missing, and nothing crashes. On a machine that
// does have RDMA devices the tests that need their absence skip.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "rdma_presence.h"
#include "rdmadev/rdmadev.h"
#include "verbs/verbs_cm_reaper.h"

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
    if (!d.is_ok()) {
      EXPECT_NE(d.status().code(), Errc::kInvalidArgument) << good << ": " << d.status().to_string();
    }
  }
}

// The CM id reaper while the kernel's CM is slow (a destroy blocked for
// 20-65 s in the rxe VM): every id handed over is destroyed exactly once,
// and its backlog is counted, so that the device can stop making ids at
// kMaxBacklog (refusing requests, failing connects) instead of queueing
// without bound. A destroy that blocks until the test lets it go.
std::atomic<bool> g_cm_released{false};
std::atomic<int> g_cm_destroyed{0};
int slow_destroy(rdma_cm_id*) {
  while (!g_cm_released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  g_cm_destroyed.fetch_add(1);
  return 0;
}

TEST(VerbsCmReaper, BacklogIsCountedWhileTheCmIsSlow) {
  constexpr size_t kMax = verbs::CmReaper::kMaxBacklog;
  static char ids[kMax + 1];  // never dereferenced: only handed over
  auto id = [](size_t i) { return reinterpret_cast<rdma_cm_id*>(&ids[i]); };
  verbs::CmReaper r(slow_destroy);
  for (size_t i = 0; i + 1 < kMax; ++i) r.reap(id(i));
  EXPECT_EQ(r.backlog(), kMax - 1);
  EXPECT_FALSE(r.full());
  r.reap(id(kMax - 1));
  EXPECT_EQ(r.backlog(), kMax);
  EXPECT_TRUE(r.full()) << "at kMaxBacklog the device must stop making ids";
  g_cm_released = true;
  for (int ms = 0; r.backlog() != 0 && ms < 10000; ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(r.backlog(), 0u);
  EXPECT_FALSE(r.full());
  r.stop();
  EXPECT_EQ(g_cm_destroyed.load(), static_cast<int>(kMax));
}

// One peer churning connections while the CM is slow fills only its share
// of the reaper's queue: at kMaxPerPeer its own requests are refused
// (peer_full), another peer's are not, and the whole is far from
// kMaxBacklog. Its share comes back as its destroys return.
std::atomic<bool> g_peer_released{false};
int slow_destroy_peer(rdma_cm_id*) {
  while (!g_peer_released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

TEST(VerbsCmReaper, OnePeersChurnFillsOnlyItsShare) {
  constexpr size_t kPeer = verbs::CmReaper::kMaxPerPeer;
  static_assert(kPeer > 0 && kPeer * 2 < verbs::CmReaper::kMaxBacklog);
  static char ids[kPeer + 1];
  auto id = [](size_t i) { return reinterpret_cast<rdma_cm_id*>(&ids[i]); };
  verbs::CmReaper r(slow_destroy_peer);
  const std::string churner = "192.0.2.7", other = "192.0.2.8";
  for (size_t i = 0; i + 1 < kPeer; ++i) r.reap(id(i), churner);
  EXPECT_FALSE(r.peer_full(churner));
  r.reap(id(kPeer - 1), churner);
  EXPECT_EQ(r.peer_backlog(churner), kPeer);
  EXPECT_TRUE(r.peer_full(churner)) << "a peer at its share must be refused";
  EXPECT_FALSE(r.peer_full(other)) << "another peer must still be accepted";
  EXPECT_FALSE(r.full());
  r.reap(id(kPeer), "");  // an id of no named peer: counted in the whole only
  EXPECT_EQ(r.backlog(), kPeer + 1);
  EXPECT_EQ(r.peer_backlog(""), 0u);
  g_peer_released = true;
  for (int ms = 0; r.backlog() != 0 && ms < 10000; ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(r.backlog(), 0u);
  EXPECT_EQ(r.peer_backlog(churner), 0u);
  EXPECT_FALSE(r.peer_full(churner));
  r.stop();
}

// One id the CM holds (its destroy does not return) must not hold up the
// ids handed over after it: they count against their peer's share until
// destroyed, so with one thread a single stuck destroy refused that peer
// every connection for as long as the CM held the id (50 s and more in the
// rxe VM). The ids behind it are destroyed while it hangs; only the stuck
// one stays counted.
std::atomic<bool> g_stuck_released{false};
std::atomic<int> g_unstuck_destroyed{0};
char g_stuck_ids[65];
int stuck_first_destroy(rdma_cm_id* id) {
  if (reinterpret_cast<char*>(id) == &g_stuck_ids[0]) {
    while (!g_stuck_released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } else {
    g_unstuck_destroyed.fetch_add(1);
  }
  return 0;
}

TEST(VerbsCmReaper, OneStuckDestroyDoesNotHoldUpTheIdsBehindIt) {
  constexpr int kBehind = 64;
  auto id = [](int i) { return reinterpret_cast<rdma_cm_id*>(&g_stuck_ids[i]); };
  verbs::CmReaper r(stuck_first_destroy);
  const std::string peer = "192.0.2.9";
  r.reap(id(0), peer);
  for (int i = 1; i <= kBehind; ++i) r.reap(id(i), peer);
  // A guard, not a measure: the ids behind are destroyed by other threads
  // whenever those get to run.
  for (int ms = 0; g_unstuck_destroyed.load() < kBehind && ms < 20000; ++ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(g_unstuck_destroyed.load(), kBehind) << "the ids behind a stuck destroy waited for it";
  for (int ms = 0; r.backlog() != 1 && ms < 20000; ++ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(r.backlog(), 1u) << "only the stuck id is still being destroyed";
  EXPECT_EQ(r.peer_backlog(peer), 1u);
  EXPECT_LE(r.threads(), verbs::CmReaper::kMaxThreads);
  g_stuck_released = true;
  r.stop();
  EXPECT_EQ(r.backlog(), 0u);
}

}  // namespace
}  // namespace tern::rdma
