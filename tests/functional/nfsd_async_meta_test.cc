// tern-nfsd's calls that run as their caller, off the engine's thread
// (nfsd/caller_pool.h), and its UNSTABLE WRITEs through the storage queue
// (nfsd/storage_queue.h), driven by a Tern client over pmd/shm
// (nfsd_fixture.h):
//   - the engine answers other calls while a metadata job is held on its
//     worker (before, the engine's thread waited for the caller thread);
//   - the caller's identity on that path: a call the caller may not do is
//     still denied, a permitted one makes what it makes as the caller;
//   - a peer runs at most its share of jobs;
//   - an UNSTABLE WRITE is answered from its storage completion, and a
//     device error on it reaches its own caller as NFS3ERR_IO while another
//     client's UNSTABLE WRITE succeeds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

class NfsdAsyncMeta : public Nfsd {
 protected:
  void TearDown() override {
    hold_ = false;
    io_hold_ = false;
    Nfsd::TearDown();
  }
  ServerConfig held_config() {
    ServerConfig cfg;
    cfg.callers.hold = &hold_;
    cfg.storage.hold = &io_hold_;
    return cfg;
  }
  static Bytes create_args(const Fh3& dir, std::string_view name, uint32_t mode) {
    CreateArgs a;
    a.where = {dir, name};
    a.how = CreateMode::kGuarded;
    a.attr.set_mode = true;
    a.attr.mode = mode;
    return enc(a);
  }
  const CallerPoolStats& jobs() const { return server_->nfs->callers().stats(); }
  static CallOpts as(rpc::AuthSys& a, uint32_t uid) {
    a.machine = "test";
    a.uid = uid, a.gid = uid;
    CallOpts o;
    o.auth = &a;
    return o;
  }

  std::atomic<bool> hold_{false}, io_hold_{false};
};

// The defect this guards: a metadata call ran on the caller thread while
// the engine's thread waited for it, so a slow one (a cold directory
// block, a journal commit) stalled every other call of the engine. Held on
// its worker, a CREATE has no answer while another client's GETATTR and
// LOOKUP are answered; released, the CREATE is answered.
TEST_F(NfsdAsyncMeta, TheEngineServesOthersWhileAMetadataJobIsHeld) {
  start({}, true, held_config());
  rpc::Connection* first = conn_;
  rpc::Connection* second = connect(spec_);
  ASSERT_NE(second, nullptr);
  hold_ = true;
  Reply c;
  start_call(Nfs3Proc::kCreate, create_args(root_, "held", 0644), {}, &c);
  ASSERT_TRUE(wait([&] { return jobs().in_flight.get() == 1; }));
  conn_ = second;
  EXPECT_EQ(getattr(root_).status, Nfs3Stat::kOk);
  EXPECT_EQ(lookup(root_, "nothing").status, Nfs3Stat::kNoent);
  conn_ = first;
  EXPECT_FALSE(c.done) << "answered before its job ran";
  hold_ = false;
  ASSERT_TRUE(wait([&] { return c.done; }));
  CreateRes r;
  ASSERT_TRUE(decode(c.results, &r));
  EXPECT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_TRUE(r.obj.has_value());
  struct stat st;
  EXPECT_EQ(stat(path("held").c_str(), &st), 0);
  EXPECT_EQ(jobs().completed.get(), 1u);
  second->close();
}

// Identity on the asynchronous path: the worker acts as the (squashed)
// caller, so the kernel refuses what the caller may not do and owns what
// it makes to the caller.
TEST_F(NfsdAsyncMeta, AJobRunsAsItsCaller) {
  start({}, /*no_root_squash=*/false, ServerConfig{});
  ASSERT_EQ(mkdir(path("locked").c_str(), 0755), 0);  // root's, 0755
  ASSERT_EQ(chown(path("locked").c_str(), 0, 0), 0);
  ASSERT_EQ(mkdir(path("open").c_str(), 0777), 0);
  ASSERT_EQ(chmod(path("open").c_str(), 0777), 0);
  const Fh3 locked = lookup(root_, "locked").obj;
  const Fh3 open = lookup(root_, "open").obj;
  rpc::AuthSys a;
  const CallOpts u1000 = as(a, 1000);
  // Denied: uid 1000 and squashed root (65534) in root's 0755 directory.
  for (const CallOpts& o : {u1000, CallOpts{}}) {
    EXPECT_EQ(status(call(Nfs3Proc::kCreate, create_args(locked, "no", 0644), o)), Nfs3Stat::kAccess);
    MkdirArgs m;
    m.where = {locked, "nodir"};
    EXPECT_EQ(status(call(Nfs3Proc::kMkdir, enc(m), o)), Nfs3Stat::kAccess);
  }
  struct stat st;
  EXPECT_NE(stat(path("locked/no").c_str(), &st), 0);
  EXPECT_NE(stat(path("locked/nodir").c_str(), &st), 0);
  // Permitted: made by uid 1000, and by the anonymous id for squashed root.
  EXPECT_EQ(status(call(Nfs3Proc::kCreate, create_args(open, "mine", 0600), u1000)), Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("open/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(status(call(Nfs3Proc::kCreate, create_args(open, "anon", 0644), {})), Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("open/anon").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  // Another user may not remove, rename or change it; its owner may.
  rpc::AuthSys b;
  const CallOpts u2000 = as(b, 2000);
  SetattrArgs sa;
  sa.obj = lookup(open, "mine").obj;
  sa.attr.set_mode = true;
  sa.attr.mode = 0644;
  EXPECT_EQ(status(call(Nfs3Proc::kSetattr, enc(sa), u2000)), Nfs3Stat::kPerm);
  EXPECT_EQ(status(call(Nfs3Proc::kSetattr, enc(sa), u1000)), Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("open/mine").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  RemoveArgs rm{{locked, "x"}};
  ASSERT_EQ(close(::open(path("locked/x").c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  EXPECT_EQ(status(call(Nfs3Proc::kRemove, enc(rm), u1000)), Nfs3Stat::kAccess);
  EXPECT_EQ(stat(path("locked/x").c_str(), &st), 0);
  // Every one of them ran on the pool or, once its caller had a
  // personality, on the storage ring (none on the engine's thread).
  EXPECT_GE(server_->nfs->stats().caller_deferred.get() + server_->nfs->stats().caller_ring.get(), 9u);
  EXPECT_EQ(jobs().in_flight.get(), 0u);
}

// Back-pressure: a peer runs at most max_per_peer jobs at once; the rest
// wait (the engine goes on) and all are answered in the end.
TEST_F(NfsdAsyncMeta, APeerRunsAtMostItsShareOfJobs) {
  ServerConfig cfg = held_config();
  cfg.callers.max_in_flight = 8;
  cfg.callers.max_per_peer = 2;
  start({}, true, cfg);
  ASSERT_EQ(getattr(root_).status, Nfs3Stat::kOk);  // the connection's credits granted: all calls go out
  hold_ = true;
  constexpr int kCalls = 6;
  std::vector<Reply> rep(kCalls);
  std::vector<std::string> names;
  for (int i = 0; i < kCalls; ++i) names.push_back("f" + std::to_string(i));
  for (int i = 0; i < kCalls; ++i) start_call(Nfs3Proc::kCreate, create_args(root_, names[i], 0644), {}, &rep[i]);
  // Settled: the last submit() counts itself before it starts or queues
  // the job, and these counters are read from another thread.
  ASSERT_TRUE(wait([&] {
    return jobs().submitted.get() == kCalls && jobs().in_flight.get() + jobs().queued.get() == kCalls;
  }))
      << "submitted " << jobs().submitted.get() << " in flight " << jobs().in_flight.get();
  EXPECT_EQ(jobs().in_flight.get(), 2u);
  EXPECT_EQ(jobs().queued.get(), 4u);
  EXPECT_EQ(getattr(root_).status, Nfs3Stat::kOk);
  hold_ = false;
  ASSERT_TRUE(wait([&] {
    for (auto& r : rep)
      if (!r.done) return false;
    return true;
  }));
  for (auto& r : rep) EXPECT_EQ(status(r), Nfs3Stat::kOk);
  EXPECT_EQ(jobs().peer_peak.get(), 2u);
}

// An UNSTABLE WRITE waits on the storage queue, not on the engine's
// thread (it can wait in dirty-page throttling): held there, it has no
// answer while another call is answered. An injected device error on one
// client's UNSTABLE WRITE reaches that client as NFS3ERR_IO; the other
// client's, in flight at the same time, succeeds.
TEST_F(NfsdAsyncMeta, AnUnstableWriteGoesThroughTheQueueAndItsErrorToItsCaller) {
  ServerConfig cfg = held_config();
  cfg.storage.fault = [](void*, const StorageReq& r) -> int {
    return r.kind == StorageKind::kWrite && r.offset == (1u << 20) ? EIO : 0;
  };
  start({}, true, cfg);
  CreateRes c = create(root_, "u");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Fh3 f = *c.obj;
  rpc::Connection* first = conn_;
  rpc::Connection* second = connect(spec_);
  ASSERT_NE(second, nullptr);
  Bytes d(4096);
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint8_t>(i * 13);
  io_hold_ = true;
  Reply bad, good;
  start_call(Nfs3Proc::kWrite, write_args(f, 1u << 20, d, StableHow::kUnstable), {}, &bad);
  conn_ = second;
  start_call(Nfs3Proc::kWrite, write_args(f, 0, d, StableHow::kUnstable), {}, &good);
  conn_ = first;
  ASSERT_TRUE(wait([&] { return io().started.get() == 2; }));
  EXPECT_EQ(getattr(f).status, Nfs3Stat::kOk);
  EXPECT_FALSE(bad.done || good.done) << "answered before its operation completed";
  io_hold_ = false;
  ASSERT_TRUE(wait([&] { return bad.done && good.done; }));
  EXPECT_EQ(status(bad), Nfs3Stat::kIo);
  ASSERT_EQ(status(good), Nfs3Stat::kOk);
  WriteRes w;
  ASSERT_TRUE(decode(good.results, &w));
  EXPECT_EQ(w.count, d.size());
  EXPECT_EQ(w.committed, StableHow::kUnstable);
  EXPECT_EQ(file_bytes("u"), d);
  second->close();
}

}  // namespace
}  // namespace tern::nfsd::test
