// tern-nfsd's name-space calls run as their caller on the storage ring
// under an io_uring personality (nfsd/caller_op.h, personality_cache.h),
// driven by a Tern client over pmd/shm (nfsd_fixture.h):
//   - a caller's first call runs on the pool and registers its
//     personality; its next MKDIR, SYMLINK, REMOVE, RMDIR, RENAME and LINK
//     go to the ring;
//   - on the ring, what the caller may not do stays denied (uid 1000 and
//     squashed root in root's 0755 directory: NFS3ERR_ACCES, nothing
//     changed) and what it may do is done as the caller (its ownership).
// Without the personality the ring would run them as the server (root),
// and the denied ones would succeed: this is what the test guards.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

class NfsdCallerRing : public Nfsd {
 protected:
  static CallOpts as(rpc::AuthSys& a, uint32_t uid) {
    a.machine = "test";
    a.uid = uid, a.gid = uid;
    CallOpts o;
    o.auth = &a;
    return o;
  }
  Nfs3Stat mkdir_as(const Fh3& dir, std::string_view name, const CallOpts& o) {
    MkdirArgs m;
    m.where = {dir, name};
    m.attr.set_mode = true;
    m.attr.mode = 0755;
    return status(call(Nfs3Proc::kMkdir, enc(m), o));
  }
  Nfs3Stat symlink_as(const Fh3& dir, std::string_view name, const CallOpts& o) {
    SymlinkArgs s;
    s.where = {dir, name};
    s.target = "some/where";
    return status(call(Nfs3Proc::kSymlink, enc(s), o));
  }
  const Nfs3Stats& stats() const { return server_->nfs->stats(); }
};

TEST_F(NfsdCallerRing, ADeniedCallStaysDeniedUnderAPersonality) {
  ServerConfig cfg;
  cfg.caller_ring = true;
  start({}, /*no_root_squash=*/false, cfg);
  if (!server_->nfs->storage().runs_caller_ops()) GTEST_SKIP() << "no io_uring here: the pool does all of it";
  ASSERT_EQ(mkdir(path("locked").c_str(), 0755), 0);  // root's, 0755
  ASSERT_EQ(chown(path("locked").c_str(), 0, 0), 0);
  ASSERT_EQ(mkdir(path("locked/sub").c_str(), 0755), 0);
  ASSERT_EQ(close(::open(path("locked/x").c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  ASSERT_EQ(mkdir(path("open").c_str(), 0777), 0);
  ASSERT_EQ(chmod(path("open").c_str(), 0777), 0);
  const Fh3 locked = lookup(root_, "locked").obj;
  const Fh3 open = lookup(root_, "open").obj;
  const Fh3 x = lookup(locked, "x").obj;
  rpc::AuthSys a;
  const CallOpts u1000 = as(a, 1000);
  const CallOpts squashed{};  // root, squashed to 65534
  // The first call of each identity runs on the pool and registers it.
  ASSERT_EQ(mkdir_as(open, "warm1000", u1000), Nfs3Stat::kOk);
  ASSERT_EQ(mkdir_as(open, "warmanon", squashed), Nfs3Stat::kOk);
  ASSERT_TRUE(wait([&] { return stats().personalities.get() == 2; }))
      << "personalities " << stats().personalities.get() << " failed " << stats().personality_failed.get();
  const uint64_t pool0 = stats().caller_deferred.get(), ring0 = stats().caller_ring.get();
  // Denied on the ring, for both.
  for (const CallOpts& o : {u1000, squashed}) {
    EXPECT_EQ(mkdir_as(locked, "nodir", o), Nfs3Stat::kAccess);
    EXPECT_EQ(symlink_as(locked, "nolink", o), Nfs3Stat::kAccess);
    EXPECT_EQ(status(call(Nfs3Proc::kRemove, enc(RemoveArgs{{locked, "x"}}), o)), Nfs3Stat::kAccess);
    EXPECT_EQ(status(call(Nfs3Proc::kRmdir, enc(RemoveArgs{{locked, "sub"}}), o)), Nfs3Stat::kAccess);
    EXPECT_EQ(status(call(Nfs3Proc::kRename, enc(RenameArgs{{locked, "x"}, {open, "stolen"}}), o)),
              Nfs3Stat::kAccess);
    // Another's file: NFS3ERR_PERM where protected_hardlinks refuses it
    // first, else NFS3ERR_ACCES for the directory; never done.
    const Nfs3Stat l = status(call(Nfs3Proc::kLink, enc(LinkArgs{x, {locked, "x2"}}), o));
    EXPECT_TRUE(l == Nfs3Stat::kPerm || l == Nfs3Stat::kAccess) << static_cast<int>(l);
  }
  struct stat st;
  EXPECT_NE(lstat(path("locked/nodir").c_str(), &st), 0);
  EXPECT_NE(lstat(path("locked/nolink").c_str(), &st), 0);
  EXPECT_EQ(stat(path("locked/x").c_str(), &st), 0);
  EXPECT_EQ(stat(path("locked/sub").c_str(), &st), 0);
  EXPECT_NE(lstat(path("open/stolen").c_str(), &st), 0);
  EXPECT_NE(lstat(path("locked/x2").c_str(), &st), 0);
  // Permitted on the ring: made as the caller.
  EXPECT_EQ(mkdir_as(open, "d1000", u1000), Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("open/d1000").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  EXPECT_EQ(symlink_as(open, "sanon", squashed), Nfs3Stat::kOk);
  ASSERT_EQ(lstat(path("open/sanon").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_uid, 65534u);
  // Every one of them went to the ring, none to the pool.
  ASSERT_TRUE(wait([&] { return stats().caller_ring.get() == ring0 + 14; })) << stats().caller_ring.get() - ring0;
  EXPECT_EQ(stats().caller_deferred.get(), pool0);
  EXPECT_EQ(server_->nfs->storage().stats().in_flight.get(), 0u);
}

// Off (ServerConfig::caller_ring = false, the default), every call stays
// on the pool and no personality is registered.
TEST_F(NfsdCallerRing, OffKeepsEveryCallOnThePool) {
  ServerConfig cfg;
  cfg.caller_ring = false;
  start({}, /*no_root_squash=*/false, cfg);
  ASSERT_EQ(mkdir(path("open").c_str(), 0777), 0);
  ASSERT_EQ(chmod(path("open").c_str(), 0777), 0);
  const Fh3 open = lookup(root_, "open").obj;
  rpc::AuthSys a;
  const CallOpts u1000 = as(a, 1000);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(mkdir_as(open, "d" + std::to_string(i), u1000), Nfs3Stat::kOk);
  EXPECT_EQ(stats().caller_ring.get(), 0u);
  EXPECT_EQ(stats().personalities.get(), 0u);
  EXPECT_EQ(stats().caller_deferred.get(), 3u);
  struct stat st;
  ASSERT_EQ(stat(path("open/d2").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
}

}  // namespace
}  // namespace tern::nfsd::test
