// tern-nfsd's group commit (nfsd/sync_batch.h) with two peers writing one
// file: the file's sync answers both peers' calls, so it must not wait
// behind one peer's per-peer storage bound (nfsd/storage_queue.h). Before
// the fix the batch's sync was charged to the peer whose waiter opened it:
// a peer at its share (its own READs in flight on a slow device) held the
// other peer's FILE_SYNC WRITE to the same file unanswered -- one peer
// waiting for another.
//
// Two peers from one process: a pmd/shm peer is named by SO_PEERCRED
// ("pid P uid U"), so the second connection is made by the test's thread
// with another effective uid (a per-thread credential change, raw
// setresuid: glibc's wrapper would change every thread's). The NFS
// credential (AUTH_SYS) stays root's on both.
//
// The storage layer's hooks stand for the device: StorageOptions::hold_if
// keeps finished READs in flight (a device slow for READs only), while
// writes and syncs complete; StorageOptions::fault counts the syncs.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

struct Device {
  std::atomic<bool> slow_reads{false};  // finished READs stay in flight
  std::atomic<int> syncs{0};
};

int count_syncs(void* ctx, const StorageReq& r) {
  if (r.kind == StorageKind::kFsync) static_cast<Device*>(ctx)->syncs.fetch_add(1);
  return 0;
}

bool hold_reads(void* ctx, const StorageReq& r) {
  return r.kind == StorageKind::kRead && static_cast<Device*>(ctx)->slow_reads.load();
}

class NfsdSyncBatchPeers : public Nfsd {
 protected:
  void TearDown() override {
    dev_.slow_reads = false;
    hold_ = false;
    Nfsd::TearDown();
  }
  // TERN_TEST_NFSD_STORAGE=threads: on the worker pool (no io_uring).
  ServerConfig config() {
    ServerConfig cfg;
    storage_mode_from_env(cfg, /*with_sync=*/false);
    cfg.storage.hold = &hold_;
    cfg.storage.fault = &count_syncs;
    cfg.storage.hold_if = &hold_reads;
    cfg.storage.fault_ctx = &dev_;
    cfg.storage.max_in_flight = 64;
    cfg.storage.max_per_peer = 2;
    cfg.read_nowait = false;  // every READ goes through the queue
    return cfg;
  }
  // A second connection that the server sees as another peer: connected
  // by this thread as uid 1000 (the socket made connectable for it).
  rpc::Connection* connect_as_other_peer() {
    EXPECT_TRUE(spec_.starts_with("shm:path=")) << "needs pmd/shm (peers named by SO_PEERCRED)";
    if (!spec_.starts_with("shm:path=")) return nullptr;
    const std::string sock = spec_.substr(9);
    EXPECT_EQ(chmod(sock.c_str(), 0777), 0);
    if (syscall(SYS_setresuid, -1, 1000, -1) != 0) {
      ADD_FAILURE() << "setresuid: " << strerror(errno);
      return nullptr;
    }
    rpc::Connection* c = connect(spec_);
    EXPECT_EQ(syscall(SYS_setresuid, -1, 0, -1), 0);
    return c;
  }
  static WriteRes write_res(const Reply& r) {
    WriteRes w;
    EXPECT_TRUE(decode(r.results, &w));
    return w;
  }

  std::atomic<bool> hold_{false};
  Device dev_;
};

// Peer A fills its share (2) of the storage queue: its FILE_SYNC WRITE to
// "f" completes and opens the file's batch while two READs of A stay on
// the slow device. Peer B's FILE_SYNC WRITE to "f" must be answered all the
// same -- written, synced, durable -- while A's READs are still held: its
// sync is not A's to pay for. Then A's READs complete and every call of
// both is answered.
TEST_F(NfsdSyncBatchPeers, AFileSyncWriteDoesNotWaitForAnotherPeersBound) {
  start({}, true, config());
  ASSERT_NE(server_->nfs->sync_batches(), nullptr) << "the group commit is on by default";
  CreateRes c = create(root_, "f");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  const Fh3 f = *c.obj;
  const Bytes da(4096, 0xa1), db(4096, 0xb2);
  // Something to read (UNSTABLE, through the queue: READs are not held yet).
  ASSERT_EQ(write(f, 8192, Bytes(4096, 0x33), StableHow::kUnstable, false).status, Nfs3Stat::kOk);
  rpc::Connection* a = conn_;
  rpc::Connection* b = connect_as_other_peer();
  ASSERT_NE(b, nullptr);

  dev_.slow_reads = true;
  hold_ = true;  // nothing delivered until A's three calls are in place
  const uint64_t before = io().submitted.get(), started = io().started.get();
  // A: the WRITE first (it takes one of A's two slots), then two READs:
  // the first takes A's other slot, the second waits in A's queue and
  // starts when the WRITE's slot frees -- in the same pass in which the
  // WRITE joins f's batch, so that A is at its share when the sync is due.
  Reply wa, ra1, ra2, wb;
  start_call(Nfs3Proc::kWrite, write_args(f, 0, da, StableHow::kFileSync), {}, &wa);
  // (Its data may come by RDMA Read before its handler runs: the READs
  // would overtake it.)
  ASSERT_TRUE(wait([&] { return io().submitted.get() == before + 1; }));
  start_call(Nfs3Proc::kRead, enc(ReadArgs{f, 8192, 512}), {}, &ra1);
  start_call(Nfs3Proc::kRead, enc(ReadArgs{f, 8192, 512}), {}, &ra2);
  ASSERT_TRUE(wait([&] {
    return io().submitted.get() == before + 3 && io().in_flight.get() == 2 && io().waiting.get() == 1;
  }));
  hold_ = false;
  // Settled: A's WRITE delivered (it joined f's batch), its second READ
  // started, the sync of f submitted (queued or running, whichever).
  ASSERT_TRUE(wait([&] { return io().submitted.get() == before + 4 && io().started.get() >= started + 3; }))
      << "submitted " << io().submitted.get() - before << " started " << io().started.get() - started << " waiting "
      << io().waiting.get() << " in flight " << io().in_flight.get() << " reaped " << io().reaped.get();

  // B writes the same file, FILE_SYNC.
  conn_ = b;
  start_call(Nfs3Proc::kWrite, write_args(f, 4096, db, StableHow::kFileSync), {}, &wb);
  conn_ = a;
  EXPECT_TRUE(wait([&] { return wb.done; }))
      << "peer B's FILE_SYNC WRITE waits for peer A's storage bound (A's READs on the slow device)";
  EXPECT_FALSE(ra1.done || ra2.done) << "the device let A's READs go: the test proves nothing";
  if (wb.done) {
    WriteRes w = write_res(wb);
    EXPECT_EQ(w.status, Nfs3Stat::kOk);
    EXPECT_EQ(w.committed, StableHow::kFileSync);
    EXPECT_GE(dev_.syncs.load(), 1) << "answered FILE_SYNC without a sync";
  }

  dev_.slow_reads = false;
  ASSERT_TRUE(wait([&] { return wa.done && ra1.done && ra2.done && wb.done; }));
  EXPECT_EQ(write_res(wa).status, Nfs3Stat::kOk);
  EXPECT_EQ(write_res(wa).committed, StableHow::kFileSync);
  for (const Reply* r : {&ra1, &ra2}) {
    EXPECT_EQ(r->status, rpc::CallStatus::kOk) << rpc::call_status_name(r->status);
    EXPECT_EQ(status(*r), Nfs3Stat::kOk);
  }
  Bytes disk = file_bytes("f");
  ASSERT_EQ(disk.size(), 3u * 4096);
  EXPECT_EQ(Bytes(disk.begin(), disk.begin() + 4096), da);
  EXPECT_EQ(Bytes(disk.begin() + 4096, disk.begin() + 8192), db);
  b->close();
}

}  // namespace
}  // namespace tern::nfsd::test
