// tern-nfsd's group commit (nfsd/sync_batch.h), driven by a Tern client
// over pmd/shm (nfsd_fixture.h): stable WRITEs of one file written together
// share one sync; a WRITE is answered only after a sync that started after
// its write completed; a failed sync fails every WRITE of its batch, and no
// other file's, and changes the write verifier.
//
// The storage layer's test hooks stand for the device: StorageOptions::hold
// keeps completions in flight (a slow device), StorageOptions::fault sees
// (and can fail) every operation before it runs. Syncs are counted there,
// whatever the backend.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

// What the hook sees and does.
struct Device {
  std::atomic<int> syncs{0};
  std::atomic<int> datasyncs{0};
  std::atomic<bool>* hold = nullptr;
  // A sync holds every completion from then on (its own included).
  std::atomic<bool> hold_at_sync{false};
  // A sync of this inode fails with EIO (0: none).
  std::atomic<uint64_t> fail_ino{0};
};

int device_hook(void* ctx, const StorageReq& r) {
  auto* d = static_cast<Device*>(ctx);
  // A write that syncs itself (RWF_SYNC, RWF_DSYNC: the path without the
  // group commit) is a sync too.
  if (r.kind == StorageKind::kWrite && (r.rw_flags & (RWF_SYNC | RWF_DSYNC)) != 0) d->syncs.fetch_add(1);
  if (r.kind != StorageKind::kFsync) return 0;
  d->syncs.fetch_add(1);
  if ((r.rw_flags & kFsyncDataOnly) != 0) d->datasyncs.fetch_add(1);
  if (d->hold_at_sync.load()) d->hold->store(true);
  struct stat st;
  if (d->fail_ino.load() != 0 && fstat(r.fd, &st) == 0 && st.st_ino == d->fail_ino.load()) return EIO;
  return 0;
}

Bytes pattern(size_t n, uint32_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed * 13 + i * 5 + (i >> 9));
  return b;
}

class NfsdSyncBatch : public Nfsd {
 protected:
  void TearDown() override {
    dev_.hold_at_sync = false;
    hold_ = false;
    Nfsd::TearDown();
  }
  // TERN_TEST_NFSD_STORAGE=threads: on the worker pool (no io_uring).
  ServerConfig config() {
    ServerConfig cfg;
    storage_mode_from_env(cfg, /*with_sync=*/false);
    cfg.storage.hold = &hold_;
    cfg.storage.fault = &device_hook;
    cfg.storage.fault_ctx = &dev_;
    cfg.storage.max_in_flight = 64;
    cfg.storage.max_per_peer = 32;
    dev_.hold = &hold_;
    return cfg;
  }
  static WriteRes write_res(const Reply& r) {
    WriteRes w;
    EXPECT_TRUE(decode(r.results, &w));
    return w;
  }
  bool all_done(const std::vector<Reply>& rep) {
    return wait([&] {
      for (const auto& r : rep)
        if (!r.done) return false;
      return true;
    });
  }

  std::atomic<bool> hold_{false};
  Device dev_;
};

// The defect this guards: each FILE_SYNC WRITE synced itself (RWF_SYNC),
// and io_uring runs a file's buffered writes one at a time, so a file's
// stable WRITEs paid one device sync each, in a row. 16 of them written
// together (their completions held, as a slow device would) share a sync
// (at most a few), and every one is answered FILE_SYNC with its data on
// disk.
TEST_F(NfsdSyncBatch, StableWritesOfOneFileWrittenTogetherShareOneSync) {
  hold_ = true;
  start({}, true, config());
  CreateRes c = create(root_, "f");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Fh3 f = *c.obj;
  constexpr int kWrites = 16;
  std::vector<Bytes> data;
  std::vector<Reply> rep(kWrites);
  for (int i = 0; i < kWrites; ++i) data.push_back(pattern(4096, 1 + i));
  for (int i = 0; i < kWrites; ++i)
    start_call(Nfs3Proc::kWrite, write_args(f, 4096u * i, data[i], StableHow::kFileSync), {}, &rep[i]);
  ASSERT_TRUE(wait([&] { return io().started.get() == kWrites; }));
  EXPECT_EQ(dev_.syncs.load(), 0) << "a sync before any write completed";
  // Every write done before any is delivered, so that they are delivered
  // in one pass (a write the device finished later may rightly start a
  // second sync: that would be timing, not the batching under test).
  ASSERT_TRUE(wait([&] { return io().reaped.get() == kWrites; }));
  hold_ = false;
  ASSERT_TRUE(all_done(rep));
  for (const auto& r : rep) {
    WriteRes w = write_res(r);
    EXPECT_EQ(w.status, Nfs3Stat::kOk);
    EXPECT_EQ(w.count, 4096u);
    EXPECT_EQ(w.committed, StableHow::kFileSync);
  }
  // Every completion was delivered in one pass: one sync for all 16.
  const int syncs = dev_.syncs.load();
  EXPECT_EQ(syncs, 1) << kWrites << " FILE_SYNC WRITEs, " << syncs << " syncs";
  EXPECT_EQ(dev_.datasyncs.load(), 0) << "FILE_SYNC promises the metadata too: fsync, not fdatasync";
  const SyncBatches* sb = server_->nfs->sync_batches();
  ASSERT_NE(sb, nullptr);
  EXPECT_GE(sb->stats().largest.get(), static_cast<uint64_t>(kWrites / syncs));
  EXPECT_EQ(sb->stats().waiters.get(), static_cast<uint64_t>(kWrites));
  Bytes disk = file_bytes("f");
  ASSERT_EQ(disk.size(), 4096u * kWrites);
  for (int i = 0; i < kWrites; ++i)
    EXPECT_EQ(Bytes(disk.begin() + 4096 * i, disk.begin() + 4096 * (i + 1)), data[i]) << "block " << i;
  // DATA_SYNC alone: fdatasync.
  Reply d;
  start_call(Nfs3Proc::kWrite, write_args(f, 0, data[0], StableHow::kDataSync), {}, &d);
  ASSERT_TRUE(wait([&] { return d.done; }));
  EXPECT_EQ(write_res(d).committed, StableHow::kDataSync);
  EXPECT_EQ(dev_.syncs.load(), syncs + 1);
  EXPECT_EQ(dev_.datasyncs.load(), 1);
}

// Order: W1's write completes, its sync S1 starts and is held on the
// "device"; W1 has no answer. W2 (same file) is written while S1 runs: S1
// cannot cover it (it started before W2's data was there), so when S1
// completes W1 is answered and W2 is not -- W2 waits for S2, which starts
// after its write completed, and is answered only when S2 completes. A
// COMMIT that arrives while a sync runs waits for the next one likewise.
TEST_F(NfsdSyncBatch, AWriteIsAnsweredOnlyAfterASyncThatStartedAfterItsWrite) {
  dev_.hold_at_sync = true;
  hold_ = true;
  start({}, true, config());
  CreateRes c = create(root_, "o");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Fh3 f = *c.obj;
  const Bytes d1 = pattern(4096, 7), d2 = pattern(4096, 8);
  Reply w1, w2, cm;
  start_call(Nfs3Proc::kWrite, write_args(f, 0, d1, StableHow::kFileSync), {}, &w1);
  ASSERT_TRUE(wait([&] { return io().started.get() == 1; }));
  EXPECT_EQ(dev_.syncs.load(), 0);
  hold_ = false;  // W1's write completes; S1 starts and holds everything again
  ASSERT_TRUE(wait([&] { return dev_.syncs.load() == 1; })) << "no sync after the write completed";
  EXPECT_FALSE(wait([&] { return w1.done; }, 300)) << "W1 answered before its sync completed";
  start_call(Nfs3Proc::kWrite, write_args(f, 4096, d2, StableHow::kFileSync), {}, &w2);
  start_call(Nfs3Proc::kCommit, enc(CommitArgs{f, 0, 0}), {}, &cm);
  ASSERT_TRUE(wait([&] { return io().started.get() == 3; }));  // W1, S1, W2
  EXPECT_FALSE(wait([&] { return w2.done || cm.done; }, 300));
  hold_ = false;  // S1 and W2's write complete; S2 starts and holds again
  ASSERT_TRUE(wait([&] { return w1.done && dev_.syncs.load() == 2; }));
  EXPECT_EQ(write_res(w1).status, Nfs3Stat::kOk);
  EXPECT_FALSE(wait([&] { return w2.done || cm.done; }, 300))
      << "answered from a sync that started before its write completed (or before the COMMIT)";
  dev_.hold_at_sync = false;
  hold_ = false;
  ASSERT_TRUE(wait([&] { return w2.done && cm.done; }));
  EXPECT_EQ(write_res(w2).status, Nfs3Stat::kOk);
  EXPECT_EQ(write_res(w2).committed, StableHow::kFileSync);
  CommitRes cr;
  ASSERT_TRUE(decode(cm.results, &cr));
  EXPECT_EQ(cr.status, Nfs3Stat::kOk);
  EXPECT_EQ(dev_.syncs.load(), 2) << "W2 and the COMMIT share S2";
  Bytes want = d1;
  want.insert(want.end(), d2.begin(), d2.end());
  EXPECT_EQ(file_bytes("o"), want);
}

// A sync that fails (EIO from the "device") fails every WRITE of its batch
// with NFS3ERR_IO -- the kernel does not say whose pages failed -- and no
// WRITE of another file; the write verifier changes (the error is reported
// once per open file, so a later COMMIT of UNSTABLE data would not see it),
// and a COMMIT of the failing file fails too.
TEST_F(NfsdSyncBatch, AFailedSyncFailsEveryWriteOfItsBatchAndNoOtherFile) {
  hold_ = true;
  start({}, true, config());
  CreateRes ca = create(root_, "bad"), cb = create(root_, "good");
  ASSERT_EQ(ca.status, Nfs3Stat::kOk);
  ASSERT_EQ(cb.status, Nfs3Stat::kOk);
  struct stat st;
  ASSERT_EQ(stat(path("bad").c_str(), &st), 0);
  dev_.fail_ino = st.st_ino;
  const Bytes d = pattern(4096, 9);
  // The verifier before: an UNSTABLE WRITE's.
  Reply u0;
  start_call(Nfs3Proc::kWrite, write_args(*cb.obj, 8192, d, StableHow::kUnstable), {}, &u0);
  ASSERT_TRUE(wait([&] { return io().started.get() == 1; }));
  hold_ = false;
  ASSERT_TRUE(wait([&] { return u0.done; }));
  const Verf3 before = write_res(u0).verf;
  hold_ = true;
  std::vector<Reply> bad(3);
  Reply good;
  for (size_t i = 0; i < bad.size(); ++i)
    start_call(Nfs3Proc::kWrite, write_args(*ca.obj, 4096 * i, d, StableHow::kFileSync), {}, &bad[i]);
  start_call(Nfs3Proc::kWrite, write_args(*cb.obj, 0, d, StableHow::kFileSync), {}, &good);
  ASSERT_TRUE(wait([&] { return io().started.get() == 5; }));
  // Every write done by the device before any is delivered: the three of
  // "bad" then join one sync (else a write that finished a pass later
  // would rightly start a second one).
  ASSERT_TRUE(wait([&] { return io().reaped.get() == 5; }));
  hold_ = false;
  ASSERT_TRUE(all_done(bad));
  ASSERT_TRUE(wait([&] { return good.done; }));
  for (const auto& r : bad) EXPECT_EQ(write_res(r).status, Nfs3Stat::kIo);
  EXPECT_EQ(write_res(good).status, Nfs3Stat::kOk);
  EXPECT_EQ(dev_.syncs.load(), 2) << "one sync per file";
  const SyncBatches* sb = server_->nfs->sync_batches();
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->stats().failed.get(), 1u);
  Reply u1 = call(Nfs3Proc::kWrite, write_args(*cb.obj, 8192, d, StableHow::kUnstable));
  EXPECT_NE(std::memcmp(write_res(u1).verf.data, before.data, sizeof before.data), 0)
      << "the write verifier did not change after a failed sync";
  CommitRes cr = op<CommitRes>(Nfs3Proc::kCommit, CommitArgs{*ca.obj, 0, 0});
  EXPECT_EQ(cr.status, Nfs3Stat::kIo);
}

}  // namespace
}  // namespace tern::nfsd::test
