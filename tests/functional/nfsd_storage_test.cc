// tern-nfsd's storage path off the engine's thread (nfsd/storage_queue.h),
// driven by a Tern client over pmd/shm (nfsd_fixture.h): a stable WRITE is
// answered only once its operation completed, and other calls are answered
// meanwhile; READs the page cache cannot serve come back right from their
// completion; a denied call stays denied (nothing reaches the queue); a
// peer runs at most its share of operations; a device error reaches its
// own caller as NFS3ERR_IO; a call whose connection is lost while its
// operation runs is freed when it completes; a sleeping engine wakes for a
// storage completion.
//
// The "device" is the export's own file system; tests hold completions
// (StorageOptions::hold: what a slow device does) and inject errors
// (StorageOptions::fault: what a failing one does) in the storage layer.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

class NfsdStorage : public Nfsd {
 protected:
  // Nothing held at the end: the server answers what it has in flight
  // before it goes (Nfs3Server's destructor).
  void TearDown() override {
    hold_ = false;
    Nfsd::TearDown();
  }
  // TERN_TEST_NFSD_STORAGE=threads or =sync runs every test on that backend
  // (=sync: the path before, what these tests guard against).
  static ServerConfig base_config() {
    ServerConfig cfg;
    storage_mode_from_env(cfg, /*with_sync=*/true);
    return cfg;
  }
  ServerConfig held_config() {
    ServerConfig cfg = base_config();
    cfg.storage.hold = &hold_;
    return cfg;
  }
  void put_file(const std::string& rel, const Bytes& b) {
    int fd = ::open(path(rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, b.data(), b.size()), static_cast<ssize_t>(b.size()));
    close(fd);
  }
  Fh3 handle_of(const std::string& name) {
    LookupRes l = lookup(root_, name);
    EXPECT_EQ(l.status, Nfs3Stat::kOk);
    return l.obj;
  }

  std::atomic<bool> hold_{false};
  Reply wake_;  // a call whose answer nobody waits for (it outlives the test's body)
};

Bytes pattern(size_t n, uint32_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 10));
  return b;
}

// The defect this guards: the engine's thread waited out every FILE_SYNC
// write, so the other calls of that engine waited for it too. With the
// operation held on the "device", the WRITE has no reply yet while a
// GETATTR on the same engine is answered; released, the WRITE is answered
// FILE_SYNC. (On the synchronous path the GETATTR never comes back.)
TEST_F(NfsdStorage, AStableWriteIsAnsweredOnlyOnceDoneAndNobodyWaitsForIt) {
  hold_ = true;
  start({}, true, held_config());
  CreateRes c = create(root_, "f");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Fh3 f = *c.obj;
  const Bytes data = pattern(8192, 1);
  Reply w;
  start_call(Nfs3Proc::kWrite, write_args(f, 0, data, StableHow::kFileSync), {}, &w);
  // The data reached the file (the operation ran); its completion is held.
  ASSERT_TRUE(wait([&] { return io().started.get() == 1 && file_bytes("f") == data; }));
  EXPECT_FALSE(wait([&] { return w.done; }, 300)) << "answered before its operation completed";
  GetattrRes g = getattr(f);
  EXPECT_EQ(g.status, Nfs3Stat::kOk);
  EXPECT_FALSE(w.done);
  hold_ = false;
  ASSERT_TRUE(wait([&] { return w.done; }));
  WriteRes r;
  ASSERT_TRUE(decode(w.results, &r));
  EXPECT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(r.count, data.size());
  EXPECT_EQ(r.committed, StableHow::kFileSync);
  ASSERT_TRUE(r.wcc.after);
  EXPECT_EQ(r.wcc.after->size, data.size());
  // With the group commit (sync_batch.h) the WRITE was two operations:
  // the write, then its file's sync.
  const uint64_t write_ops = server_->nfs->sync_batches() != nullptr ? 2 : 1;
  // COMMIT the same way: held, then answered.
  hold_ = true;
  Reply cm;
  start_call(Nfs3Proc::kCommit, enc(CommitArgs{f, 0, 0}), {}, &cm);
  ASSERT_TRUE(wait([&] { return io().started.get() == write_ops + 1; }));
  EXPECT_FALSE(wait([&] { return cm.done; }, 300));
  hold_ = false;
  ASSERT_TRUE(wait([&] { return cm.done; }));
  EXPECT_EQ(status(cm), Nfs3Stat::kOk);
  // With the group commit the COMMIT was two too: its reservation under
  // the peer's bound (StorageKind::kReserve), then its file's sync.
  EXPECT_EQ(io().completed.get(), write_ops + (server_->nfs->sync_batches() != nullptr ? 2 : 1));
}

// READs that go through the queue (RWF_NOWAIT off: every one) bring the
// right bytes, counts and eof, through a write chunk and inline; with it
// on, cached data is answered at once, and data evicted from the page
// cache (EAGAIN) goes through the queue.
TEST_F(NfsdStorage, ReadsAreAnsweredFromTheirCompletion) {
  ServerConfig cfg = base_config();
  cfg.read_nowait = false;
  start({}, true, cfg);
  const Bytes data = pattern(300u << 10, 2);
  put_file("r.bin", data);
  const Fh3 f = handle_of("r.bin");
  const uint32_t cap = 256u << 10;
  auto* buf = static_cast<uint8_t*>(cli_->alloc(cap));
  ReadRes r = read(f, 0, cap, {buf, cap}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_TRUE(r.data_in_chunk);
  EXPECT_EQ(r.count, cap);
  EXPECT_FALSE(r.eof);
  EXPECT_EQ(std::memcmp(buf, data.data(), cap), 0);
  r = read(f, 200u << 10, cap, {buf, cap}, nullptr);  // to the end
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(r.count, 100u << 10);
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(std::memcmp(buf, data.data() + (200u << 10), 100u << 10), 0);
  Bytes got;
  r = read(f, 10, 100, {}, &got);  // inline
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(got, Bytes(data.begin() + 10, data.begin() + 110));
  r = read(f, 1u << 30, 4096, {buf, 4096}, nullptr);  // past the end
  EXPECT_EQ(r.count, 0u);
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(server_->nfs->stats().storage_deferred.get(), 4u);
  EXPECT_EQ(server_->nfs->stats().read_nowait.get(), 0u);

  // RWF_NOWAIT first (the default): the page cache answers at once.
  stop_instance();
  start({}, true, base_config());
  const Fh3 f2 = handle_of("r.bin");
  (void)read(f2, 0, cap, {buf, cap}, nullptr);  // cached by now
  r = read(f2, 0, cap, {buf, cap}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(std::memcmp(buf, data.data(), cap), 0);
  EXPECT_GE(server_->nfs->stats().read_nowait.get(), 1u);
  const uint64_t before = server_->nfs->stats().storage_deferred.get();
  // Out of the page cache: RWF_NOWAIT says EAGAIN, the queue reads it.
  int fd = ::open(path("r.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  close(fd);
  std::memset(buf, 0, cap);
  r = read(f2, 4096, cap, {buf, cap}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(r.count, cap);
  EXPECT_EQ(std::memcmp(buf, data.data() + 4096, cap), 0);
  EXPECT_GT(server_->nfs->stats().storage_deferred.get(), before);
}

// Identity on the asynchronous path: what the synchronous path denied --
// another user's 0600 file, squashed root -- is denied before anything is
// submitted, and the file is untouched.
TEST_F(NfsdStorage, ADeniedCallStaysDeniedOnTheAsynchronousPath) {
  start({}, /*no_root_squash=*/false, base_config());
  const Bytes keep = pattern(4096, 3);
  put_file("secret", keep);
  ASSERT_EQ(chmod(path("secret").c_str(), 0600), 0);
  ASSERT_EQ(chown(path("secret").c_str(), 2000, 2000), 0);
  const Fh3 f = handle_of("secret");
  rpc::AuthSys other;
  other.machine = "test";
  other.uid = 1000, other.gid = 1000;
  CallOpts as_other;
  as_other.auth = &other;
  const Bytes evil = pattern(4096, 4);
  for (const CallOpts& o : {as_other, CallOpts{}}) {  // uid 1000; root, squashed
    for (StableHow how : {StableHow::kFileSync, StableHow::kDataSync}) {
      Reply w = call(Nfs3Proc::kWrite, write_args(f, 0, evil, how), o);
      EXPECT_EQ(status(w), Nfs3Stat::kAccess);
    }
    Bytes got;
    EXPECT_EQ(read(f, 0, 4096, {}, &got, o).status, Nfs3Stat::kAccess);
    EXPECT_TRUE(got.empty());
  }
  EXPECT_EQ(io().submitted.get(), 0u);
  EXPECT_EQ(file_bytes("secret"), keep);
  // Its owner may (the same rules as before): through the queue.
  rpc::AuthSys owner;
  owner.machine = "test";
  owner.uid = 2000, owner.gid = 2000;
  CallOpts as_owner;
  as_owner.auth = &owner;
  Reply w = call(Nfs3Proc::kWrite, write_args(f, 0, evil, StableHow::kFileSync), as_owner);
  EXPECT_EQ(status(w), Nfs3Stat::kOk);
  // The write, and with the group commit (sync_batch.h) its file's sync.
  EXPECT_EQ(io().submitted.get(), server_->nfs->sync_batches() != nullptr ? 2u : 1u);
  EXPECT_EQ(file_bytes("secret"), evil);
}

// Back-pressure: a peer runs at most max_per_peer operations at once, the
// rest wait in its queue (the engine's loop goes on), and all of them are
// answered in the end.
TEST_F(NfsdStorage, APeerRunsAtMostItsShare) {
  hold_ = true;
  ServerConfig cfg = held_config();
  cfg.storage.max_in_flight = 8;
  cfg.storage.max_per_peer = 3;
  start({}, true, cfg);
  CreateRes c = create(root_, "many");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Fh3 f = *c.obj;
  constexpr int kCalls = 10;
  std::vector<Bytes> data;
  std::vector<Reply> rep(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    data.push_back(pattern(1024, 10 + i));
    start_call(Nfs3Proc::kWrite, write_args(f, 1024u * i, data.back(), StableHow::kFileSync), {}, &rep[i]);
  }
  // Settled: the last submit() counts itself before it queues, and these
  // gauges are read from another thread than the engine's.
  ASSERT_TRUE(wait([&] {
    return io().submitted.get() == kCalls && io().in_flight.get() + io().waiting.get() == kCalls;
  }));
  EXPECT_EQ(io().in_flight.get(), 3u);
  EXPECT_EQ(io().waiting.get(), 7u);
  EXPECT_EQ(io().queued.get(), 7u);
  // The engine is not blocked: other calls are answered.
  EXPECT_EQ(getattr(f).status, Nfs3Stat::kOk);
  hold_ = false;
  ASSERT_TRUE(wait([&] {
    for (auto& r : rep)
      if (!r.done) return false;
    return true;
  }));
  for (auto& r : rep) EXPECT_EQ(status(r), Nfs3Stat::kOk);
  // Its share, and with the group commit its file's sync, which is charged
  // to it (and to any other peer it answers) without waiting for its
  // share (storage_queue.h, "shared operation").
  EXPECT_GE(io().peer_peak.get(), 3u);
  EXPECT_LE(io().peer_peak.get(), server_->nfs->sync_batches() != nullptr ? 4u : 3u);
  EXPECT_EQ(io().in_flight.get(), 0u);
  Bytes disk = file_bytes("many");
  ASSERT_EQ(disk.size(), 1024u * kCalls);
  for (int i = 0; i < kCalls; ++i) EXPECT_EQ(Bytes(disk.begin() + 1024 * i, disk.begin() + 1024 * (i + 1)), data[i]);
}

// The engine-wide bound holds too when it is the smaller one.
TEST_F(NfsdStorage, TheEngineRunsAtMostItsBound) {
  hold_ = true;
  ServerConfig cfg = held_config();
  cfg.storage.max_in_flight = 2;
  cfg.storage.max_per_peer = 16;
  start({}, true, cfg);
  CreateRes c = create(root_, "few");
  const Fh3 f = *c.obj;
  std::vector<Reply> rep(5);
  const Bytes d = pattern(512, 5);
  for (size_t i = 0; i < rep.size(); ++i)
    start_call(Nfs3Proc::kWrite, write_args(f, 512 * i, d, StableHow::kDataSync), {}, &rep[i]);
  ASSERT_TRUE(wait([&] { return io().submitted.get() == rep.size(); }));
  EXPECT_EQ(io().in_flight.get(), 2u);
  hold_ = false;
  ASSERT_TRUE(wait([&] {
    for (auto& r : rep)
      if (!r.done) return false;
    return true;
  }));
  for (auto& r : rep) EXPECT_EQ(status(r), Nfs3Stat::kOk);
}

// A device error (EIO, injected in the storage layer where dm-error is
// not at hand) reaches the call whose operation failed as NFS3ERR_IO; the
// other connection's WRITE (of another file: a failed sync fails every
// WRITE of that file it covered, nfsd_sync_batch_test.cc), in flight at the
// same time, succeeds.
TEST_F(NfsdStorage, ADeviceErrorReachesItsCallerAsNfs3errIo) {
  ServerConfig cfg = held_config();
  static std::atomic<uint64_t> bad_ino{0};
  cfg.storage.fault = [](void*, const StorageReq& r) -> int {
    if (r.kind == StorageKind::kWrite && r.offset == (1u << 20)) return EIO;
    struct stat st;
    if (r.kind == StorageKind::kFsync && fstat(r.fd, &st) == 0 && st.st_ino == bad_ino.load()) return EIO;
    return 0;
  };
  hold_ = true;  // both in flight together
  start({}, true, cfg);
  CreateRes c = create(root_, "dev");
  const Fh3 f = *c.obj;
  CreateRes c2 = create(root_, "other");
  ASSERT_EQ(c2.status, Nfs3Stat::kOk);
  struct stat dst;
  ASSERT_EQ(stat(path("dev").c_str(), &dst), 0);
  bad_ino = dst.st_ino;
  rpc::Connection* first = conn_;
  rpc::Connection* second = connect(spec_);
  ASSERT_NE(second, nullptr);
  const Bytes d = pattern(4096, 6);
  Reply bad, good;
  start_call(Nfs3Proc::kWrite, write_args(f, 1u << 20, d, StableHow::kFileSync), {}, &bad);
  conn_ = second;
  start_call(Nfs3Proc::kWrite, write_args(*c2.obj, 0, d, StableHow::kFileSync), {}, &good);
  conn_ = first;
  ASSERT_TRUE(wait([&] { return io().started.get() == 2; }));
  hold_ = false;
  ASSERT_TRUE(wait([&] { return bad.done && good.done; }));
  EXPECT_EQ(status(bad), Nfs3Stat::kIo);
  EXPECT_EQ(status(good), Nfs3Stat::kOk);
  EXPECT_EQ(file_bytes("other"), d);
  EXPECT_EQ(io().failed.get(), 1u);
  CommitRes cm = op<CommitRes>(Nfs3Proc::kCommit, CommitArgs{f, 0, 0});
  EXPECT_EQ(cm.status, Nfs3Stat::kIo);
  second->close();
}

// A call whose connection goes while its operation is on the device: the
// completion answers a call the engine has orphaned, which frees it; the
// server goes on serving.
TEST_F(NfsdStorage, ACallWhoseConnectionIsLostMidOperationIsFreed) {
  hold_ = true;
  ServerConfig cfg = held_config();
  cfg.read_nowait = false;
  start({}, true, cfg);
  const Bytes data = pattern(64u << 10, 7);
  put_file("gone", data);
  const Fh3 f = handle_of("gone");
  rpc::Connection* doomed = connect(spec_);
  ASSERT_NE(doomed, nullptr);
  rpc::Connection* keep = conn_;
  conn_ = doomed;
  (void)call(Nfs3Proc::kNull, {});  // its credits granted: both calls go out
  auto* buf = static_cast<uint8_t*>(cli_->alloc(64u << 10));
  Reply r1, r2;
  CallOpts o;
  o.bulk_recv = {buf, 64u << 10};
  start_call(Nfs3Proc::kRead, enc(ReadArgs{f, 0, 64u << 10}), o, &r1);
  start_call(Nfs3Proc::kWrite, write_args(f, 0, {data.data(), 1024}, StableHow::kFileSync), {}, &r2);
  conn_ = keep;
  ASSERT_TRUE(wait([&] { return io().started.get() == 2; }))
      << "submitted " << io().submitted.get() << " started " << io().started.get() << " r1 " << r1.done << " "
      << rpc::call_status_name(r1.status) << " r2 " << r2.done;
  const uint64_t gone = server_->eng->stats().disconnects.get();
  doomed->close();
  ASSERT_TRUE(wait([&] { return server_->eng->stats().disconnects.get() > gone && r1.done && r2.done; }));
  hold_ = false;
  // Settled: everything submitted has completed. The orphaned FILE_SYNC
  // WRITE may or may not be followed by its file's group-commit sync (a third
  // operation), depending on whether its completion or the batch's flush comes
  // first in the server's pass: both are right (no one waits for that data), so
  // the count is 2 or 3 -- waiting for exactly 2 failed 1 run in 15 at load.
  ASSERT_TRUE(wait([&] {
    return io().in_flight.get() == 0 && io().waiting.get() == 0 && io().completed.get() == io().submitted.get() &&
           io().completed.get() >= 2;
  })) << "submitted " << io().submitted.get() << " started " << io().started.get() << " completed "
      << io().completed.get() << " in_flight " << io().in_flight.get() << " waiting " << io().waiting.get();
  EXPECT_LE(io().completed.get(), server_->nfs->sync_batches() != nullptr ? 3u : 2u);
  EXPECT_EQ(io().failed.get(), 0u);
  EXPECT_EQ(getattr(f).status, Nfs3Stat::kOk);
  EXPECT_EQ(read(f, 0, 4096, {buf, 4096}, nullptr).status, Nfs3Stat::kOk);
}

// The reply cache on the asynchronous path: a FILE_SYNC WRITE's result is
// recorded before its reply leaves (the server "dies" right after
// recording it, as --test-crash-after does), and the next server answers
// the client's retransmission from the file with that result.
TEST_F(NfsdStorage, AStableWriteIsInTheReplyCacheBeforeItsReplyLeaves) {
  ServerConfig cfg = base_config();
  cfg.crash_after_proc = static_cast<int>(Nfs3Proc::kWrite);
  cfg.crash_after_n = 1;
  std::atomic<bool> died{false};
  cfg.on_crash = [](void* ctx) { static_cast<std::atomic<bool>*>(ctx)->store(true); };
  cfg.on_crash_ctx = &died;
  start({}, true, cfg);
  CreateRes c = create(root_, "once");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Bytes d = pattern(2048, 9);
  Reply r;
  start_call(Nfs3Proc::kWrite, write_args(*c.obj, 0, d, StableHow::kFileSync), {}, &r);
  ASSERT_TRUE(wait([&] { return died.load(); }));
  EXPECT_EQ(file_bytes("once"), d) << "the write ran before its result was recorded";
  EXPECT_FALSE(r.done);
  stop_instance();
  start({}, true, base_config());
  ASSERT_TRUE(wait([&] { return r.done; }, 20000)) << "the client never got an answer";
  ASSERT_EQ(r.status, rpc::CallStatus::kOk);
  WriteRes w;
  ASSERT_TRUE(decode(r.results, &w));
  EXPECT_EQ(w.status, Nfs3Stat::kOk);
  EXPECT_EQ(w.count, d.size());
  EXPECT_EQ(w.committed, StableHow::kFileSync);
  EXPECT_EQ(server_->nfs->stats().drc_replays.get(), 1u);
  EXPECT_EQ(server_->nfs->storage().stats().submitted.get(), 0u) << "not run again";
}

// Wait mode with storage in flight: an engine asleep in wait() wakes for
// the storage completion (its eventfd is in the engine's wait set), not at
// its timeout.
TEST_F(NfsdStorage, ASleepingEngineWakesForAStorageCompletion) {
  ServerConfig cfg = base_config();
  cfg.read_nowait = false;
  // Each operation takes a while on the worker pool (the slow device), so
  // the engine is asleep before it completes (it goes to sleep within
  // microseconds of handing the operation over; 100 ms is ample). Without
  // the queue's eventfd in its wait set, only the engine's own periodic
  // deadlines (seconds) would wake it: the guard below is far above the
  // operation's 100 ms and below those.
  cfg.storage.mode = StorageOptions::Mode::kThreads;
  cfg.storage.fault = [](void*, const StorageReq&) -> int {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return 0;
  };
  start({}, true, cfg);
  server_->halt();  // polled here instead, sleeping when idle
  std::atomic<bool> stop{false}, exited{false};
  rpc::Engine* eng = server_->eng.get();
  std::thread t([&] {
    for (;;) {
      if (eng->poll() > 0) continue;
      if (stop.load()) break;  // idle: what it had to answer is out
      auto r = eng->wait(120000);  // far beyond the test's guard below
      if (!r) {
        ADD_FAILURE() << r.status().to_string();
        break;
      }
    }
    exited = true;
  });
  CreateRes c = create(root_, "w");
  EXPECT_EQ(c.status, Nfs3Stat::kOk);
  const Bytes d = pattern(16384, 8);
  for (int i = 0; i < 5 && c.obj; ++i) {
    Reply w;
    start_call(Nfs3Proc::kWrite, write_args(*c.obj, 16384u * i, d, StableHow::kFileSync), {}, &w);
    EXPECT_TRUE(wait([&] { return w.done; }, 3000)) << "the engine slept through its storage completion";
    EXPECT_EQ(status(w), Nfs3Stat::kOk);
    Bytes got;
    Reply rd;
    start_call(Nfs3Proc::kRead, enc(ReadArgs{*c.obj, 16384u * i, 100}), {}, &rd);
    EXPECT_TRUE(wait([&] { return rd.done; }, 3000)) << "the engine slept through its storage completion";
    ReadRes rr;
    EXPECT_TRUE(decode(rd.results, -1, &rr));
    EXPECT_EQ(rr.status, Nfs3Stat::kOk);
    got.assign(rr.data.begin(), rr.data.end());
    EXPECT_EQ(got, Bytes(d.begin(), d.begin() + 100));
  }
  stop = true;
  start_call(Nfs3Proc::kNull, {}, {}, &wake_);  // wakes it; idle again, it stops
  EXPECT_TRUE(wait([&] { return exited.load(); }, 60000));  // the client polled meanwhile: the call goes out
  t.join();
}

}  // namespace
}  // namespace tern::nfsd::test
