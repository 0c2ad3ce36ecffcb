// tern-nfsd's pieces on their own (lib/nfsd): SipHash-2-4 against its
// reference vectors, signed file handles (any change to one is refused),
// the file-backed reply cache (kept across a reopen, torn slots ignored,
// the oldest reused, a slot that holds another call a miss), credentials
// and squashing, the descriptor cache, the state directory's lock, the
// export's key kept across opens and its handles refused by every other
// export, and the MOUNT service's answers.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nfs/mount3.h"
#include "nfsd/client_spec.h"
#include "nfsd/creds.h"
#include "nfsd/export.h"
#include "nfsd/export_table.h"
#include "nfsd/exports_file.h"
#include "nfsd/fd_cache.h"
#include "nfsd/file_handle.h"
#include "nfsd/mountd.h"
#include "nfsd/reply_cache.h"
#include "base/siphash.h"
#include "nfsd/state_dir.h"
#include "oncrpc/oncrpc.h"

namespace tern::nfsd {
namespace {

using Bytes = std::vector<uint8_t>;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/tern-nfsd-unit.XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { (void)!system(("rm -rf " + path).c_str()); }
};

TEST(FileHandle, SignedAndRefusedWhenAltered) {
  FhCodec codec({1, 2}, 0x01020304);
  KernelHandle kh;
  kh.type = 0x81;
  kh.len = 12;
  for (uint32_t i = 0; i < kh.len; ++i) kh.bytes[i] = static_cast<uint8_t>(i * 7);
  nfs::Fh3 fh;
  ASSERT_TRUE(codec.encode(kh, &fh));
  EXPECT_EQ(fh.len, kFhHeader + 12 + kFhTag);
  KernelHandle back;
  ASSERT_EQ(codec.decode(fh, &back), nfs::Nfs3Stat::kOk);
  EXPECT_EQ(back.type, 0x81u);
  EXPECT_EQ(back.len, 12u);
  EXPECT_EQ(std::memcmp(back.bytes, kh.bytes, 12), 0);
  // Every single-bit change anywhere is refused: in the export id as
  // naming another export (stale), anywhere else as not ours.
  for (uint32_t i = 0; i < fh.len; ++i)
    for (int bit = 0; bit < 8; ++bit) {
      nfs::Fh3 bad = fh;
      bad.data[i] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_EQ(codec.decode(bad, &back), i >= 4 && i < 8 ? nfs::Nfs3Stat::kStale : nfs::Nfs3Stat::kBadhandle)
          << "byte " << i << " bit " << bit;
    }
  // Shorter, longer, empty.
  for (uint32_t len : {0u, 1u, fh.len - 1, fh.len + 1}) {
    nfs::Fh3 bad = fh;
    bad.len = len;
    EXPECT_EQ(codec.decode(bad, &back), nfs::Nfs3Stat::kBadhandle) << len;
  }
  // Another key: not ours. Our key, another export: stale.
  EXPECT_EQ(FhCodec({1, 3}, 0x01020304).decode(fh, &back), nfs::Nfs3Stat::kBadhandle);
  EXPECT_EQ(FhCodec({1, 2}, 0x01020305).decode(fh, &back), nfs::Nfs3Stat::kStale);
  // A kernel handle too large for 64 bytes is not encoded.
  kh.len = kMaxKernelHandle + 1;
  EXPECT_FALSE(codec.encode(kh, &fh));
}

ReplyKey key(uint32_t xid, const char* peer = "10.0.0.2") { return ReplyKey{peer, xid, 100003, 3, 9, 0xabc}; }

TEST(ReplyCache, AnswersRetransmissionsAndKeepsThemAcrossAReopen) {
  TempDir d;
  const std::string path = d.path + "/drc";
  Bytes got;
  {
    auto rc = ReplyCache::open(path, 64).value();
    EXPECT_EQ(rc->begin(key(1), &got), ReplyCache::Found::kNew);
    EXPECT_EQ(rc->begin(key(1), &got), ReplyCache::Found::kInProgress) << "a copy while the first is served";
    rc->done(key(1), Bytes{1, 2, 3, 4});
    ASSERT_EQ(rc->begin(key(1), &got), ReplyCache::Found::kDone);
    EXPECT_EQ(got, (Bytes{1, 2, 3, 4}));
    // Another peer, digest or procedure with the same xid is another call.
    EXPECT_EQ(rc->begin(key(1, "10.0.0.3"), &got), ReplyCache::Found::kNew);
    ReplyKey other = key(1);
    other.digest = 0xabd;
    EXPECT_EQ(rc->begin(other, &got), ReplyCache::Found::kNew);
    rc->forget(other);
    EXPECT_EQ(rc->begin(other, &got), ReplyCache::Found::kNew) << "forgotten: new again";
    rc->done(key(2), Bytes{9});  // done() without begin(): ignored
    EXPECT_EQ(rc->begin(key(2), &got), ReplyCache::Found::kNew);
    rc->done(key(2), Bytes(300, 7));
    EXPECT_EQ(rc->hits(), 1u);
    EXPECT_EQ(rc->in_progress_drops(), 1u);
    EXPECT_EQ(rc->hits_from_file(), 0u);
  }
  // The process is gone: the next one finds both replies in the file.
  auto rc = ReplyCache::open(path, 64).value();
  EXPECT_EQ(rc->loaded(), 2u);
  ASSERT_EQ(rc->begin(key(1), &got), ReplyCache::Found::kDone);
  EXPECT_EQ(got, (Bytes{1, 2, 3, 4}));
  ASSERT_EQ(rc->begin(key(2), &got), ReplyCache::Found::kDone);
  EXPECT_EQ(got, Bytes(300, 7));
  EXPECT_EQ(rc->hits_from_file(), 2u);
  // Too large to keep: not cached (the retransmission runs again).
  EXPECT_EQ(rc->begin(key(3), &got), ReplyCache::Found::kNew);
  rc->done(key(3), Bytes(ReplyCache::kMaxResults + 1, 1));
  EXPECT_EQ(rc->begin(key(3), &got), ReplyCache::Found::kNew);
}

TEST(ReplyCache, TornSlotsAndOtherGeometriesAreNotTrusted) {
  TempDir d;
  const std::string path = d.path + "/drc";
  {
    auto rc = ReplyCache::open(path, 16).value();
    Bytes got;
    for (uint32_t x = 1; x <= 3; ++x) {
      ASSERT_EQ(rc->begin(key(x), &got), ReplyCache::Found::kNew);
      rc->done(key(x), Bytes{static_cast<uint8_t>(x)});
    }
  }
  // A byte of the second slot's results changed, as a write cut short by a
  // death would leave it: that slot fails its check.
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t b = 0x55;
  ASSERT_EQ(pwrite(fd, &b, 1, 4096 + 512 + 112), 1);
  close(fd);
  {
    auto rc = ReplyCache::open(path, 16).value();
    EXPECT_EQ(rc->loaded(), 2u);
    Bytes got;
    EXPECT_EQ(rc->begin(key(1), &got), ReplyCache::Found::kDone);
    EXPECT_EQ(rc->begin(key(2), &got), ReplyCache::Found::kNew);
    EXPECT_EQ(rc->begin(key(3), &got), ReplyCache::Found::kDone);
  }
  // Opened with another slot count: started afresh.
  auto rc = ReplyCache::open(path, 32).value();
  EXPECT_EQ(rc->loaded(), 0u);
  // Not a cache file at all: started afresh too.
  const std::string junk = d.path + "/junk";
  fd = open(junk.c_str(), O_RDWR | O_CREAT, 0600);
  Bytes garbage(4096 + 16 * 512, 0xa5);
  ASSERT_EQ(write(fd, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  close(fd);
  EXPECT_EQ(ReplyCache::open(junk, 16).value()->loaded(), 0u);
}

TEST(ReplyCache, TheOldestSlotIsReusedAndTheRingContinuesAfterAReopen) {
  TempDir d;
  const std::string path = d.path + "/drc";
  Bytes got;
  {
    auto rc = ReplyCache::open(path, 4).value();
    for (uint32_t x = 1; x <= 6; ++x) {
      ASSERT_EQ(rc->begin(key(x), &got), ReplyCache::Found::kNew);
      rc->done(key(x), Bytes{static_cast<uint8_t>(x)});
    }
    EXPECT_EQ(rc->begin(key(1), &got), ReplyCache::Found::kNew) << "the oldest went";
    rc->forget(key(1));
    EXPECT_EQ(rc->begin(key(3), &got), ReplyCache::Found::kDone);
  }
  auto rc = ReplyCache::open(path, 4).value();
  EXPECT_EQ(rc->loaded(), 4u);
  // The next record replaces the oldest (3), not the newest (6).
  ASSERT_EQ(rc->begin(key(7), &got), ReplyCache::Found::kNew);
  rc->done(key(7), Bytes{7});
  EXPECT_EQ(rc->begin(key(3), &got), ReplyCache::Found::kNew);
  rc->forget(key(3));
  EXPECT_EQ(rc->begin(key(6), &got), ReplyCache::Found::kDone);
  EXPECT_EQ(rc->begin(key(7), &got), ReplyCache::Found::kDone);
}

// Two caches over one file, as two instances sharing a state directory
// had: each writes its ring from slot 0, so the second overwrites the
// first's record while the first's index still points at it. A hit must
// check the slot's whole key: before it did, the first cache answered its
// client's retransmission with the other client's reply.
TEST(ReplyCache, ASlotHoldingAnotherCallIsAMiss) {
  TempDir d;
  const std::string path = d.path + "/drc";
  auto a = ReplyCache::open(path, 8).value();
  auto b = ReplyCache::open(path, 8).value();
  Bytes got;
  const ReplyKey mine = key(7, "10.0.0.2"), theirs = key(7, "10.0.0.3");
  ASSERT_EQ(a->begin(mine, &got), ReplyCache::Found::kNew);
  a->done(mine, Bytes{1, 1, 1});
  ASSERT_EQ(b->begin(theirs, &got), ReplyCache::Found::kNew);
  b->done(theirs, Bytes{2, 2, 2});
  got.clear();
  EXPECT_EQ(a->begin(mine, &got), ReplyCache::Found::kNew) << "the slot holds another client's call now";
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(a->hits(), 0u);
  // Entered as in progress again, and recorded again: then a hit.
  EXPECT_EQ(a->begin(mine, &got), ReplyCache::Found::kInProgress);
  a->done(mine, Bytes{3});
  ASSERT_EQ(a->begin(mine, &got), ReplyCache::Found::kDone);
  EXPECT_EQ(got, Bytes{3});
  // Each field of the key counts: rings of one slot, so that the second
  // cache's record lands where the first one's index points, for a call
  // that differs in that field alone.
  for (int field = 0; field < 6; ++field) {
    SCOPED_TRACE(field);
    const std::string one = d.path + "/one-" + std::to_string(field);
    auto c1 = ReplyCache::open(one, 1).value();
    auto c2 = ReplyCache::open(one, 1).value();
    ReplyKey k = key(9), other = key(9);
    switch (field) {
      case 0: other.peer = "10.0.0.9"; break;
      case 1: other.xid ^= 1; break;
      case 2: other.prog ^= 1; break;
      case 3: other.vers ^= 1; break;
      case 4: other.proc ^= 1; break;
      case 5: other.digest ^= 1; break;
    }
    ASSERT_EQ(c1->begin(k, &got), ReplyCache::Found::kNew);
    c1->done(k, Bytes{1});
    ASSERT_EQ(c1->begin(k, &got), ReplyCache::Found::kDone);
    ASSERT_EQ(c2->begin(other, &got), ReplyCache::Found::kNew);
    c2->done(other, Bytes{2});
    EXPECT_EQ(c1->begin(k, &got), ReplyCache::Found::kNew);
  }
}

Bytes call_header(oncrpc::AuthFlavor flavor, uint32_t uid, uint32_t gid, std::vector<uint32_t> gids) {
  oncrpc::CallHeader h;
  h.xid = 5, h.prog = 100003, h.vers = 3, h.proc = 1;
  uint8_t body[400];
  if (flavor == oncrpc::AuthFlavor::kSys) {
    oncrpc::AuthSysParams p;
    p.machinename = "client";
    p.uid = uid, p.gid = gid;
    p.ngids = static_cast<uint32_t>(gids.size());
    for (size_t i = 0; i < gids.size(); ++i) p.gids[i] = gids[i];
    size_t n = oncrpc::encode_auth_sys(p, body);
    h.cred = {flavor, std::span<const uint8_t>(body, n)};
  } else {
    h.cred = {flavor, {}};
  }
  Bytes out(oncrpc::call_size(h));
  out.resize(oncrpc::encode_call(h, out));
  return out;
}

TEST(Creds, SquashingAsTheExportSays) {
  SquashPolicy p;
  Cred c = cred_from_call(call_header(oncrpc::AuthFlavor::kSys, 1000, 100, {100, 0, 7}), p);
  EXPECT_EQ(c.uid, 1000u);
  EXPECT_EQ(c.gid, 100u);
  ASSERT_EQ(c.ngroups, 3u);
  EXPECT_EQ(c.groups[1], 65534u) << "gid 0 among the groups is squashed too";
  EXPECT_TRUE(c.in_group(7));
  EXPECT_FALSE(c.in_group(0));
  c = cred_from_call(call_header(oncrpc::AuthFlavor::kSys, 0, 0, {0}), p);
  EXPECT_EQ(c.uid, 65534u);
  EXPECT_EQ(c.gid, 65534u);
  p.root_squash = false;
  c = cred_from_call(call_header(oncrpc::AuthFlavor::kSys, 0, 0, {0}), p);
  EXPECT_EQ(c.uid, 0u);
  EXPECT_EQ(c.groups[0], 0u);
  p.all_squash = true;
  p.anon_uid = 5, p.anon_gid = 6;
  c = cred_from_call(call_header(oncrpc::AuthFlavor::kSys, 1000, 100, {}), p);
  EXPECT_EQ(c.uid, 5u);
  EXPECT_EQ(c.gid, 6u);
  p.all_squash = false;
  c = cred_from_call(call_header(oncrpc::AuthFlavor::kNone, 0, 0, {}), p);
  EXPECT_EQ(c.uid, 5u) << "AUTH_NONE is anonymous";
  c = cred_from_call(Bytes{1, 2, 3}, p);
  EXPECT_EQ(c.uid, 5u) << "an undecodable header is anonymous";
}

// -1 is no identity to the kernel: a uid or gid of -1 is anonymous, a
// group of -1 is dropped, whatever the squash policy.
TEST(Creds, IdsTheKernelCannotActAsAreAnonymous) {
  for (bool squash : {true, false}) {
    SquashPolicy p;
    p.root_squash = squash;
    p.anon_uid = 77, p.anon_gid = 78;
    Cred c = cred_from_call(call_header(oncrpc::AuthFlavor::kSys, kNoId, kNoId, {kNoId, 5, kNoId, 0}), p);
    EXPECT_EQ(c.uid, 77u);
    EXPECT_EQ(c.gid, 78u);
    ASSERT_EQ(c.ngroups, 2u);
    EXPECT_EQ(c.groups[0], 5u);
    EXPECT_EQ(c.groups[1], squash ? 78u : 0u);
    EXPECT_TRUE(acts_as_valid_ids(c));
    c = cred_from_call(call_header(oncrpc::AuthFlavor::kSys, 1000, kNoId, {}), p);
    EXPECT_EQ(c.uid, 1000u);
    EXPECT_EQ(c.gid, 78u);
  }
}

// The thread's identity as the kernel has it.
struct KernelIds {
  uint32_t fsuid, fsgid;
  std::vector<gid_t> groups;
};
KernelIds kernel_ids() {
  KernelIds k;
  k.fsuid = static_cast<uint32_t>(setfsuid(static_cast<uid_t>(-1)));
  k.fsgid = static_cast<uint32_t>(setfsgid(static_cast<gid_t>(-1)));
  gid_t g[64];
  long n = syscall(SYS_getgroups, 64L, g);
  if (n > 0) k.groups.assign(g, g + n);
  return k;
}

// A refused identity changes nothing: the thread is what it was, and the
// next switch (to the same caller as before, which skips the system calls)
// finds the kernel agreeing with what the object believes.
TEST(Creds, ARefusedIdentityLeavesTheThreadAsItWas) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (setfsuid)";
  std::thread t([] {
    ThreadCreds tc;
    Cred alice;
    alice.uid = 2000, alice.gid = 2001;
    alice.ngroups = 1, alice.groups[0] = 2002;
    ASSERT_TRUE(tc.become(alice).is_ok());
    Cred bads[4];
    bads[0].uid = kNoId, bads[0].gid = 3000;
    bads[1].uid = 3000, bads[1].gid = kNoId;
    bads[2].uid = 3000, bads[2].gid = 3000, bads[2].ngroups = 2, bads[2].groups[0] = 3001, bads[2].groups[1] = kNoId;
    bads[3].uid = 3000, bads[3].gid = 3000, bads[3].ngroups = 17;
    for (const Cred& b : bads) {
      EXPECT_FALSE(tc.become(b).is_ok()) << b.uid << "/" << b.gid;
      ASSERT_TRUE(tc.become(alice).is_ok());
      KernelIds k = kernel_ids();
      EXPECT_EQ(k.fsuid, 2000u) << "the thread is not the caller it believes it is";
      EXPECT_EQ(k.fsgid, 2001u);
      EXPECT_EQ(k.groups, std::vector<gid_t>{2002});
    }
    EXPECT_FALSE(tc.poisoned());
    ASSERT_TRUE(tc.become_root().is_ok());
    KernelIds k = kernel_ids();
    EXPECT_EQ(k.fsuid, 0u);
    EXPECT_EQ(k.fsgid, 0u);
    EXPECT_TRUE(k.groups.empty());
  });
  t.join();
}

TEST(Creds, AThreadActsAsTheCallerAndBack) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (setfsuid)";
  TempDir d;
  chmod(d.path.c_str(), 0777);
  ThreadCreds tc;
  Cred c;
  c.uid = 4321, c.gid = 4322;
  c.ngroups = 1, c.groups[0] = 4323;
  ASSERT_TRUE(tc.become(c).is_ok());
  EXPECT_FALSE(tc.is_root());
  const std::string f = d.path + "/made-as-caller";
  int fd = open(f.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  // A root-only file is out of reach now.
  const std::string r = d.path + "/root-only";
  ASSERT_TRUE(tc.become_root().is_ok());
  fd = open(r.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_TRUE(tc.become(c).is_ok());
  EXPECT_LT(open(r.c_str(), O_RDONLY), 0);
  EXPECT_EQ(errno, EACCES);
  ASSERT_TRUE(tc.become_root().is_ok());
  EXPECT_TRUE(tc.is_root());
  struct stat st;
  ASSERT_EQ(stat(f.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4322u);
  fd = open(r.c_str(), O_RDONLY);
  EXPECT_GE(fd, 0);
  if (fd >= 0) close(fd);
}

TEST(FdCache, LeastRecentlyUsedGoesAndRemovedFilesAreSwept) {
  TempDir d;
  FdCache c(16);
  std::vector<nfs::Fh3> fhs;
  for (int i = 0; i < 17; ++i) {
    const std::string p = d.path + "/f" + std::to_string(i);
    int fd = open(p.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0);
    nfs::Fh3 fh;
    fh.assign(Bytes{static_cast<uint8_t>(i)});
    if (i == 16) {
      ASSERT_NE(c.find(fhs[0]), nullptr);  // 0 is now the most recent; 1 is the oldest
    }
    c.insert(fh, fd);
    fhs.push_back(fh);
  }
  EXPECT_EQ(c.size(), 16u);
  EXPECT_EQ(c.find(fhs[1]), nullptr);
  EXPECT_NE(c.find(fhs[0]), nullptr);
  EXPECT_NE(c.find(fhs[16]), nullptr);
  ASSERT_EQ(unlink((d.path + "/f5").c_str()), 0);
  ASSERT_EQ(unlink((d.path + "/f6").c_str()), 0);
  EXPECT_EQ(c.sweep(), 2u);
  EXPECT_EQ(c.find(fhs[5]), nullptr);
  EXPECT_EQ(c.size(), 14u);
  c.erase(fhs[0]);
  EXPECT_EQ(c.find(fhs[0]), nullptr);
}

// A descriptor lent to a job (FdCache::lend) stays open -- the same file --
// whatever the cache does with its entry meanwhile, and is closed when the
// last of the two lets go: a number closed early could be reused for
// another file before the job ran on it.
TEST(FdCache, ALentDescriptorOutlivesItsEntryAndClosesWithTheLastBorrower) {
  TempDir d;
  auto open_fd = [](int fd) { return fcntl(fd, F_GETFD) >= 0; };
  auto fh_of = [](uint8_t i) {
    nfs::Fh3 fh;
    fh.assign(Bytes{i});
    return fh;
  };
  auto make = [&](FdCache& c, uint8_t i) {
    const std::string p = d.path + "/g" + std::to_string(i);
    const int fd = open(p.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0);
    return c.insert(fh_of(i), fd)->path_fd;
  };
  struct stat want, got;
  auto late = std::make_unique<OwnedFd>();  // outlives the cache
  int lf = -1;
  {
    FdCache c(16);
    // Erased while lent twice: open until both borrowers are gone.
    const int a = make(c, 0);
    ASSERT_EQ(fstat(a, &want), 0);
    auto b1 = std::make_unique<OwnedFd>();
    auto b2 = std::make_unique<OwnedFd>();
    EXPECT_EQ(c.lend(a, b1.get()), a);
    c.lend(a, b2.get());
    c.erase(fh_of(0));
    ASSERT_TRUE(open_fd(a)) << "the cache closed a descriptor on loan";
    b1.reset();
    ASSERT_TRUE(open_fd(a));
    ASSERT_EQ(fstat(b2->fd, &got), 0);
    EXPECT_EQ(got.st_ino, want.st_ino);
    b2.reset();
    EXPECT_FALSE(open_fd(a)) << "the last borrower did not close what the cache had let go";
    // Evicted (a full cache) and swept (its file removed) while lent.
    const int e = make(c, 1);
    OwnedFd be;
    c.lend(e, &be);
    for (uint8_t i = 2; i < 2 + 16; ++i) make(c, i);
    EXPECT_EQ(c.find(fh_of(1)), nullptr);
    EXPECT_TRUE(open_fd(e)) << "eviction closed a descriptor on loan";
    const int w = c.find(fh_of(5))->path_fd;
    {
      OwnedFd bw;
      c.lend(w, &bw);
      ASSERT_EQ(unlink((d.path + "/g5").c_str()), 0);
      EXPECT_GE(c.sweep(), 1u);
      EXPECT_TRUE(open_fd(w)) << "the sweep closed a descriptor on loan";
    }
    EXPECT_FALSE(open_fd(w));
    // Given back while the entry lives: the cache still owns it, open.
    const int k = c.find(fh_of(6))->path_fd;
    { OwnedFd bk; c.lend(k, &bk); }
    EXPECT_TRUE(open_fd(k)) << "giving back closed the cache's own descriptor";
    EXPECT_EQ(c.lent(), 1u);  // be's, still
    // A replaced io descriptor (close_fd) on loan, and the cache destroyed
    // with loans out: each closed by its borrower later.
    auto bk2 = std::make_unique<OwnedFd>();
    c.lend(k, bk2.get());
    const int other = open((d.path + "/g7").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(other, 0);
    auto bo = std::make_unique<OwnedFd>();
    c.lend(other, bo.get());
    c.close_fd(other);
    EXPECT_TRUE(open_fd(other));
    bo.reset();
    EXPECT_FALSE(open_fd(other));
    c.clear();
    EXPECT_TRUE(open_fd(k));
    bk2.reset();
    EXPECT_FALSE(open_fd(k));
    lf = make(c, 40);
    c.lend(lf, late.get());
  }
  EXPECT_TRUE(open_fd(lf)) << "the cache's destruction closed a descriptor on loan";
  late.reset();
  EXPECT_FALSE(open_fd(lf));
}

TEST(Export, TheHandleKeyOutlivesTheProcessAndStaysOutsideTheExport) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  TempDir d;
  const std::string dir = d.path + "/exported", state = d.path + "/state";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ExportOptions o;
  o.dir = dir;
  o.state_dir = state;
  nfs::Fh3 first;
  {
    auto e = Export::open(o);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    first = (*e)->root_fh();
    EXPECT_EQ((*e)->name(), dir);
    int fd = -1;
    ASSERT_EQ((*e)->open_handle(first, &fd), nfs::Nfs3Stat::kOk);
    close(fd);
  }
  struct stat st;
  ASSERT_EQ(stat((state + "/handle-key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto again = Export::open(o);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ((*again)->root_fh(), first) << "the same handle from the same key";
  // Another state directory, another key (and so other export ids): the
  // old handle names no export of it.
  o.state_dir = d.path + "/other-state";
  auto other = Export::open(o);
  ASSERT_TRUE(other.is_ok());
  int fd = -1;
  EXPECT_EQ((*other)->open_handle(first, &fd), nfs::Nfs3Stat::kStale);
  // A state directory inside the export is refused.
  o.state_dir = dir + "/state";
  auto inside = Export::open(o);
  ASSERT_FALSE(inside.is_ok());
  EXPECT_NE(inside.status().message().find("inside the export"), std::string::npos);
  o.state_dir = d.path + "/third-state";
  o.dir = d.path + "/missing";
  auto missing = Export::open(o);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot export"), std::string::npos) << missing.status().message();
}

// One instance per state directory: the second is refused, its error
// naming the holder's pid and what to do; the lock goes with its holder
// (a process's death releases it: flock).
TEST(StateDir, ASecondInstanceIsRefusedNamingTheFirst) {
  TempDir d;
  const std::string state = d.path + "/state";
  {
    auto first = StateDir::open(state);
    ASSERT_TRUE(first.is_ok()) << first.status().to_string();
    auto second = StateDir::open(state);
    ASSERT_FALSE(second.is_ok());
    EXPECT_EQ(second.status().code(), Errc::kBadState);
    const std::string m = second.status().message();
    EXPECT_NE(m.find("pid " + std::to_string(getpid())), std::string::npos) << m;
    EXPECT_NE(m.find("--state-dir"), std::string::npos) << m;
    // Through an export opened on its own as well.
    ExportOptions o;
    o.dir = d.path;
    o.state_dir = state + "/";
    auto e = Export::open(o);
    ASSERT_FALSE(e.is_ok());
    EXPECT_EQ(e.status().code(), Errc::kBadState);
  }
  EXPECT_TRUE(StateDir::open(state).is_ok()) << "free again once the first is gone";
  struct stat st;
  ASSERT_EQ(stat(state.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// The tag is all that keeps a client to its export (open_by_handle_at opens
// anything on the file system), so each export has a key and an id of its
// own: a handle from one export is refused by every other, whether of this
// instance (same stored key, same file system) or of another instance
// exporting the very same directory. Before, two exports under one state
// directory on one file system shared key and id (the device number) and
// each opened the other's handles.
TEST(Export, AHandleOfOneExportIsRefusedByEveryOther) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  TempDir d;
  const std::string a = d.path + "/a", b = d.path + "/b";
  ASSERT_EQ(mkdir(a.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(b.c_str(), 0755), 0);
  int fd = open((a + "/f").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  auto state = StateDir::open(d.path + "/state").value();
  ExportOptions oa, ob;
  oa.dir = a;
  ob.dir = b;
  auto ea = Export::open(oa, state).value();
  auto eb = Export::open(ob, state).value();
  EXPECT_NE(ea->id(), eb->id());
  nfs::Fh3 f;
  ASSERT_EQ(ea->handle_at(ea->root_fd(), "f", &f), nfs::Nfs3Stat::kOk);
  int got = -1;
  ASSERT_EQ(ea->open_handle(f, &got), nfs::Nfs3Stat::kOk);
  close(got);
  EXPECT_EQ(eb->open_handle(f, &got), nfs::Nfs3Stat::kStale) << "another export's handle";
  EXPECT_EQ(eb->open_handle(ea->root_fh(), &got), nfs::Nfs3Stat::kStale);
  EXPECT_EQ(ea->open_handle(eb->root_fh(), &got), nfs::Nfs3Stat::kStale);
  // Relabelled with b's id, a's handle fails b's tag: the key differs too.
  nfs::Fh3 relabelled = f;
  for (int i = 0; i < 4; ++i) relabelled.data[4 + i] = static_cast<uint8_t>(eb->id() >> (24 - 8 * i));
  EXPECT_EQ(eb->open_handle(relabelled, &got), nfs::Nfs3Stat::kBadhandle);
  // The same directory exported with another fsid is another export.
  ExportOptions oa7 = oa;
  oa7.fsid = 7;
  auto ea7 = Export::open(oa7, state).value();
  EXPECT_EQ(ea7->fsid(), 7u);
  EXPECT_NE(ea7->open_handle(f, &got), nfs::Nfs3Stat::kOk);
  // Another instance (its own state directory, its own stored key)
  // exporting the same directory: its ids are others, so the handle names
  // no export it has.
  auto other = StateDir::open(d.path + "/other-state").value();
  auto ea2 = Export::open(oa, other).value();
  EXPECT_EQ(ea2->open_handle(f, &got), nfs::Nfs3Stat::kStale);
  // The same configuration again (a restart): the same handles.
  ea.reset();
  auto again = Export::open(oa, state).value();
  ASSERT_EQ(again->open_handle(f, &got), nfs::Nfs3Stat::kOk);
  close(got);
}

ClientAddr addr(const char* a) { return ClientAddr::from_peer_id(a); }

TEST(ClientSpec, AddressesPrefixesAndWhatAShmPeerIs) {
  auto m = [](const char* spec, const char* who) { return ClientSpec::parse(spec).value().matches(addr(who)); };
  EXPECT_TRUE(m("*", "10.1.2.3"));
  EXPECT_TRUE(m("*", "not an address")) << "anyone is anyone";
  EXPECT_TRUE(m("10.0.0.5", "10.0.0.5"));
  EXPECT_FALSE(m("10.0.0.5", "10.0.0.6"));
  EXPECT_TRUE(m("10.0.0.0/24", "10.0.0.200"));
  EXPECT_FALSE(m("10.0.0.0/24", "10.0.1.1"));
  EXPECT_TRUE(m("10.0.0.0/255.255.255.0", "10.0.0.9"));
  EXPECT_TRUE(m("10.0.0.0/23", "10.0.1.1"));
  EXPECT_TRUE(m("0.0.0.0/0", "192.168.1.1"));
  EXPECT_FALSE(m("0.0.0.0/0", "fe80::1")) << "an IPv4 prefix holds IPv4 addresses only";
  EXPECT_TRUE(m("10.0.0.0/24", "::ffff:10.0.0.7")) << "an IPv4 client on an IPv6 socket";
  EXPECT_TRUE(m("fd00::/8", "fd12:3456::1"));
  EXPECT_FALSE(m("fd00::/8", "fe80::1"));
  EXPECT_TRUE(m("fe80::1", "fe80::1"));
  EXPECT_FALSE(m("10.0.0.0/8", "garbage"));
  // A pmd/shm peer is a process of this host: loopback.
  EXPECT_TRUE(m("localhost", "pid 12 uid 0"));
  EXPECT_TRUE(m("127.0.0.1", "pid 12 uid 0"));
  EXPECT_TRUE(m("127.0.0.0/8", "pid 12 uid 0"));
  EXPECT_FALSE(m("10.0.0.0/8", "pid 12 uid 0"));
  EXPECT_FALSE(m("::1", "pid 12 uid 0"));
  EXPECT_TRUE(m("localhost", "::1"));
  EXPECT_TRUE(m("localhost", "127.0.0.1"));
  EXPECT_FALSE(m("localhost", "10.0.0.1"));
  EXPECT_EQ(addr("pid 1 uid 2").to_string(), "127.0.0.1");
  EXPECT_EQ(addr("::ffff:10.0.0.7").to_string(), "10.0.0.7");
  EXPECT_EQ(ClientSpec::parse("10.0.0.0/24").value().kind(), ClientSpec::Kind::kNetwork);
  EXPECT_EQ(ClientSpec::parse("10.0.0.0/32").value().kind(), ClientSpec::Kind::kHost);
  for (const char* bad : {"", "host.example.com", "*.example.com", "@trusted", "10.0.0.0/33", "10.1.0.0/8",
                          "10.0.0.0/255.0.255.0", "fd00::/129", "10.0.0.0/", "10.0.0.0/x", "1.2.3"}) {
    auto r = ClientSpec::parse(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_FALSE(r.status().message().empty());
    }
  }
}

TEST(ExportsFile, WhatKnfsdAdminsWrite) {
  const char* text =
      "# the lab's exports\n"
      "\n"
      "/srv/data   10.0.0.0/24(rw,no_root_squash,sync,no_subtree_check) \\\n"
      "            10.0.1.7(ro) \\\n"
      "            *(all_squash,anonuid=1000,anongid=1001,sec=sys)   # everyone else\n"
      "/srv/pub/   -rw,all_squash  192.168.0.0/16  localhost(ro,no_all_squash,fsid=42)\n"
      "\"/srv/with space\" fd00::/8(rw)\n"
      "/srv/oct\\040al *(rw,insecure,async,no_wdelay,no_acl)";
  auto r = parse_exports(text, "exports");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 4u);
  const ExportOptions& d = (*r)[0];
  EXPECT_EQ(d.dir, "/srv/data");
  EXPECT_EQ(d.name, "/srv/data");
  EXPECT_EQ(d.origin, "exports:3");
  ASSERT_EQ(d.clients.size(), 3u);
  EXPECT_EQ(d.clients[0].who.text(), "10.0.0.0/24");
  EXPECT_FALSE(d.clients[0].opt.read_only);
  EXPECT_FALSE(d.clients[0].opt.squash.root_squash);
  EXPECT_EQ(d.clients[1].who.text(), "10.0.1.7");
  EXPECT_TRUE(d.clients[1].opt.read_only);
  EXPECT_TRUE(d.clients[1].opt.squash.root_squash) << "exports(5)'s defaults: ro, root_squash";
  EXPECT_EQ(d.clients[2].who.text(), "*");
  EXPECT_TRUE(d.clients[2].opt.read_only);
  EXPECT_TRUE(d.clients[2].opt.squash.all_squash);
  EXPECT_EQ(d.clients[2].opt.squash.anon_uid, 1000u);
  EXPECT_EQ(d.clients[2].opt.squash.anon_gid, 1001u);
  EXPECT_EQ(d.fsid, 0u);
  const ExportOptions& p = (*r)[1];
  EXPECT_EQ(p.dir, "/srv/pub");
  EXPECT_EQ(p.origin, "exports:6");
  EXPECT_EQ(p.fsid, 42u);
  ASSERT_EQ(p.clients.size(), 2u);
  EXPECT_FALSE(p.clients[0].opt.read_only) << "the line's -rw";
  EXPECT_TRUE(p.clients[0].opt.squash.all_squash) << "the line's -all_squash";
  EXPECT_TRUE(p.clients[1].opt.read_only);
  EXPECT_FALSE(p.clients[1].opt.squash.all_squash);
  EXPECT_EQ((*r)[2].dir, "/srv/with space");
  EXPECT_EQ((*r)[2].origin, "exports:7");
  EXPECT_EQ((*r)[3].dir, "/srv/oct al");
  EXPECT_FALSE((*r)[3].clients[0].opt.read_only);
  EXPECT_TRUE(parse_exports("# nothing\n\n", "e").value().empty());

  // Each mistake is an error naming the file, the line and what is wrong.
  const struct {
    const char* text;
    const char* says;
  } bad[] = {
      {"/ok *(rw)\n/ok2 *(ro)\n/a *(rw,bogus)\n", "e:3: *: unknown option 'bogus'"},
      {"/a *(sec=krb5)", "sec=krb5: tern-nfsd serves AUTH_SYS only"},
      {"/a *(sec=sys:krb5p)", "sec=krb5p"},
      {"/a *(secure)", "secure: not supported"},
      {"/a *(subtree_check)", "not supported"},
      {"/a (rw)", "no client before them"},
      {"/a 10.0.0.1 (rw)", "no client before them"},
      {"/a", "lists no client"},
      {"/a *(rw)\n/a/ 10.0.0.1(ro)", "e:2: /a is exported already at e:1"},
      {"/a *(fsid=0)", "fsid=0"},
      {"/a *(fsid=root)", "fsid=root"},
      {"/a *(rw,fsid=1) 10.0.0.1(fsid=2)", "fsid given twice"},
      {"a *(rw)", "not an absolute path"},
      {"/a host.example.com(rw)", "host names"},
      {"/a @netgroup(rw)", "netgroups"},
      {"/a *(rw", "want client(option"},
      {"/a *(rw) *(ro)", "listed twice"},
      {"/a *(anonuid=x)", "anonuid=x"},
      {"/a *(rw,,ro)", "an empty option"},
      {"/a -bogus *(rw)", "unknown option 'bogus'"},
      {"/a\\9 *(rw)", "bad escape"},
  };
  for (const auto& b : bad) {
    auto e = parse_exports(b.text, "e");
    ASSERT_FALSE(e.is_ok()) << b.text;
    EXPECT_NE(e.status().message().find(b.says), std::string::npos) << b.text << " -> " << e.status().message();
    EXPECT_TRUE(e.status().message().starts_with("e:")) << e.status().message();
  }
  auto missing = read_exports_file("/nonexistent/exports");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/exports"), std::string::npos);
}

// exports(5)'s precedence: a client matching several entries uses a host's
// before a network's before anyone's, whatever their order on the line.
TEST(Export, AClientUsesItsMostSpecificEntry) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  TempDir d;
  auto r = parse_exports("/x *(ro) 10.0.0.0/8(rw,all_squash) 10.0.0.7(rw,no_root_squash) 10.0.0.0/16(ro)\n", "e");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ExportOptions o = (*r)[0];
  o.dir = d.path;
  auto e = Export::open(o, StateDir::open(d.path + ".state").value()).value();
  (void)!system(("rm -rf " + d.path + ".state").c_str());
  const ClientRule* host = e->rule_for(addr("10.0.0.7"));
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->who.text(), "10.0.0.7");
  EXPECT_EQ(e->rule_for(addr("10.0.1.1"))->who.text(), "10.0.0.0/8") << "the first network written";
  EXPECT_EQ(e->rule_for(addr("192.168.0.1"))->who.text(), "*");
  EXPECT_EQ(e->rule_for(addr("pid 3 uid 0"))->who.text(), "*");
  auto only = parse_exports("/x 10.0.0.0/8(rw)\n", "e").value();
  only[0].dir = d.path;
  auto e2 = Export::open(only[0], StateDir::open(d.path + ".state2").value()).value();
  (void)!system(("rm -rf " + d.path + ".state2").c_str());
  EXPECT_EQ(e2->rule_for(addr("192.168.0.1")), nullptr) << "not listed";
  EXPECT_EQ(e2->rule_for(addr("pid 3 uid 0")), nullptr);
}

TEST(Mountd, AnswersWhatAClientAsks) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  TempDir d;
  const std::string dir = d.path + "/exported";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ExportOptions o;
  o.dir = dir;
  o.name = "/export/";
  o.state_dir = d.path + "/state";
  auto e = Export::open(o).value();
  EXPECT_EQ(e->name(), "/export");
  auto call = [&](uint32_t prog, uint32_t vers, uint32_t proc, std::string_view path, Bytes* res) {
    oncrpc::CallHeader h;
    h.xid = 77, h.prog = prog, h.vers = vers, h.proc = proc;
    Bytes msg(oncrpc::call_size(h) + 1100);
    size_t n = oncrpc::encode_call(h, msg);
    xdr::XdrWriter w(std::span<uint8_t>(msg.data() + n, msg.size() - n));
    if (!path.empty() || proc == 1) w.put_string(path);
    msg.resize(n + w.bytes_written());
    Bytes reply;
    bool mounted = false;
    EXPECT_TRUE(mountd_answer(*e, msg, &reply, &mounted));
    oncrpc::ReplyHeader rh;
    auto r = oncrpc::decode_reply(reply, &rh);
    EXPECT_EQ(r.status, oncrpc::ReplyDecodeStatus::kOk);
    EXPECT_EQ(rh.xid, 77u);
    res->assign(reply.begin() + static_cast<std::ptrdiff_t>(r.header_len), reply.end());
    return std::make_pair(rh.accept, mounted);
  };
  Bytes res;
  auto [st, mounted] = call(nfs::mount3::kProgram, 3, 1, "/export", &res);
  EXPECT_EQ(st, oncrpc::AcceptStat::kSuccess);
  EXPECT_TRUE(mounted);
  nfs::mount3::MntRes m;
  ASSERT_TRUE(nfs::mount3::decode(res, &m));
  EXPECT_EQ(m.status, nfs::mount3::Stat::kOk);
  EXPECT_EQ(m.fh, e->root_fh());
  EXPECT_EQ(m.flavors, std::vector<uint32_t>{1});
  call(nfs::mount3::kProgram, 3, 1, "/export/", &res);
  ASSERT_TRUE(nfs::mount3::decode(res, &m));
  EXPECT_EQ(m.status, nfs::mount3::Stat::kOk) << "a trailing slash is the same path";
  call(nfs::mount3::kProgram, 3, 1, "/etc", &res);
  ASSERT_TRUE(nfs::mount3::decode(res, &m));
  EXPECT_EQ(m.status, nfs::mount3::Stat::kNoent);
  call(nfs::mount3::kProgram, 3, 5, "", &res);
  std::vector<nfs::mount3::ExportEntry> ex;
  ASSERT_TRUE(nfs::mount3::decode(res, &ex));
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].dir, "/export");
  EXPECT_EQ(call(nfs::mount3::kProgram, 1, 1, "/export", &res).first, oncrpc::AcceptStat::kProgMismatch);
  EXPECT_EQ(call(100003, 3, 0, "", &res).first, oncrpc::AcceptStat::kProgUnavail);
  EXPECT_EQ(call(nfs::mount3::kProgram, 3, 9, "", &res).first, oncrpc::AcceptStat::kProcUnavail);
  EXPECT_EQ(call(nfs::mount3::kProgram, 3, 1, "", &res).first, oncrpc::AcceptStat::kSuccess)
      << "an empty path decodes (and is not the export)";
  // MNT with no path at all: garbage.
  oncrpc::CallHeader h;
  h.xid = 78, h.prog = nfs::mount3::kProgram, h.vers = 3, h.proc = 1;
  Bytes msg(oncrpc::call_size(h));
  msg.resize(oncrpc::encode_call(h, msg));
  Bytes reply;
  bool mounted2;
  ASSERT_TRUE(mountd_answer(*e, msg, &reply, &mounted2));
  oncrpc::ReplyHeader rh;
  oncrpc::decode_reply(reply, &rh);
  EXPECT_EQ(rh.accept, oncrpc::AcceptStat::kGarbageArgs);
  // Not a call: nothing to send.
  EXPECT_FALSE(mountd_answer(*e, Bytes{0, 0, 0, 1, 0, 0, 0, 1}, &reply, &mounted2));
}

// MOUNT with several exports: MNT gives a root handle only to a client the
// export lists (MNT3ERR_ACCES otherwise: before, anyone who reached MOUNT
// got it), and EXPORT lists every export with its client specifications.
TEST(Mountd, MntOnlyForListedClientsAndExportListsThem) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  TempDir d;
  for (const char* s : {"/a", "/b"}) ASSERT_EQ(mkdir((d.path + s).c_str(), 0755), 0);
  auto list = parse_exports("/a 10.0.0.0/24(rw) localhost(ro)\n/b *(ro)\n", "e").value();
  list[0].dir = d.path + "/a";
  list[0].name = "/a";
  list[1].dir = d.path + "/b";
  list[1].name = "/b";
  auto table = ExportTable::open(list, StateDir::open(d.path + "/state").value());
  ASSERT_TRUE(table.is_ok()) << table.status().to_string();
  auto ask = [&](const char* from, uint32_t proc, std::string_view path, Bytes* res) {
    oncrpc::CallHeader h;
    h.xid = 9, h.prog = nfs::mount3::kProgram, h.vers = 3, h.proc = proc;
    Bytes msg(oncrpc::call_size(h) + 1100);
    size_t n = oncrpc::encode_call(h, msg);
    xdr::XdrWriter w(std::span<uint8_t>(msg.data() + n, msg.size() - n));
    if (proc == 1) w.put_string(path);
    msg.resize(n + w.bytes_written());
    Bytes reply;
    bool mounted = false;
    EXPECT_TRUE(mountd_answer(**table, addr(from), msg, &reply, &mounted));
    oncrpc::ReplyHeader rh;
    auto r = oncrpc::decode_reply(reply, &rh);
    EXPECT_EQ(rh.accept, oncrpc::AcceptStat::kSuccess);
    res->assign(reply.begin() + static_cast<std::ptrdiff_t>(r.header_len), reply.end());
    return mounted;
  };
  Bytes res;
  nfs::mount3::MntRes m;
  EXPECT_TRUE(ask("10.0.0.9", 1, "/a", &res));
  ASSERT_TRUE(nfs::mount3::decode(res, &m));
  EXPECT_EQ(m.status, nfs::mount3::Stat::kOk);
  EXPECT_EQ(m.fh, (*table)->exports()[0]->root_fh());
  EXPECT_TRUE(ask("pid 1 uid 0", 1, "/a", &res)) << "a same-host peer is localhost";
  EXPECT_FALSE(ask("10.0.1.9", 1, "/a", &res));
  nfs::mount3::MntRes refused;
  ASSERT_TRUE(nfs::mount3::decode(res, &refused));
  EXPECT_EQ(refused.status, nfs::mount3::Stat::kAccess);
  EXPECT_EQ(refused.fh.len, 0u) << "no handle for a client not listed";
  EXPECT_TRUE(ask("10.0.1.9", 1, "/b", &res));
  EXPECT_TRUE(ask("10.0.1.9", 1, (d.path + "/b/").c_str(), &res)) << "by its directory too";
  EXPECT_FALSE(ask("10.0.0.9", 1, "/c", &res));
  ASSERT_TRUE(nfs::mount3::decode(res, &m));
  EXPECT_EQ(m.status, nfs::mount3::Stat::kNoent);
  ask("10.0.1.9", 5, "", &res);
  std::vector<nfs::mount3::ExportEntry> ex;
  ASSERT_TRUE(nfs::mount3::decode(res, &ex));
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].dir, "/a");
  EXPECT_EQ(ex[0].groups, (std::vector<std::string_view>{"localhost", "10.0.0.0/24"})) << "hosts first";
  EXPECT_EQ(ex[1].dir, "/b");
  EXPECT_EQ(ex[1].groups, (std::vector<std::string_view>{"*"}));
}

}  // namespace
}  // namespace tern::nfsd
