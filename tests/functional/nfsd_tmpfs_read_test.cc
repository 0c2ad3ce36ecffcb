// A READ of a file on tmpfs is served at once on the engine's thread, not
// through the storage queue: tmpfs refuses RWF_NOWAIT (EOPNOTSUPP), so
// without a rule of its own every READ of a tmpfs export went to an
// io_uring worker and back (twice the instructions of a cached READ;
// docs/nfs-gateway.md, "Cached READs"). Its data is memory, so reading it
// where the call arrives waits for no device.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

class NfsdTmpfsRead : public Nfsd {
 protected:
  void SetUp() override {
    Nfsd::SetUp();
    if (IsSkipped()) return;
    struct statfs sf;
    if (statfs("/dev/shm", &sf) != 0 || sf.f_type != TMPFS_MAGIC) GTEST_SKIP() << "/dev/shm is not a tmpfs";
    char t[] = "/dev/shm/tern-nfsd-tmpfs.XXXXXX";
    ASSERT_NE(mkdtemp(t), nullptr);
    shm_ = t;
    chmod(shm_.c_str(), 0777);
  }
  void TearDown() override {
    Nfsd::TearDown();
    if (!shm_.empty()) (void)!std::system(("rm -rf '" + shm_ + "'").c_str());
  }
  std::string shm_;
};

TEST_F(NfsdTmpfsRead, ACachedReadOfATmpfsFileIsServedAtOnce) {
  Bytes data(64 << 10);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  {
    int fd = ::open((shm_ + "/t.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    close(fd);
  }
  ExportOptions o;
  o.dir = shm_;
  start(o);
  auto lr = lookup(root_, "t.bin");
  ASSERT_EQ(lr.status, Nfs3Stat::kOk);
  auto* buf = static_cast<uint8_t*>(cli_->alloc(16384));
  ASSERT_NE(buf, nullptr);
  // Through a write chunk, inline, and a short one at the end of the file.
  auto r = read(lr.obj, 4096, 16384, {buf, 16384}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  ASSERT_EQ(r.count, 16384u);
  EXPECT_EQ(std::memcmp(buf, data.data() + 4096, 16384), 0);
  Bytes got;
  r = read(lr.obj, 100, 1000, {}, &got);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(got, Bytes(data.begin() + 100, data.begin() + 1100));
  r = read(lr.obj, data.size() - 10, 4096, {buf, 4096}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(r.count, 10u);
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(std::memcmp(buf, data.data() + data.size() - 10, 10), 0);
  // Every one answered on the engine's thread: none went to the queue.
  server_->halt();
  EXPECT_EQ(server_->nfs->stats().read_nowait.get(), 3u);
  EXPECT_EQ(server_->nfs->stats().storage_deferred.get(), 0u);
  EXPECT_EQ(server_->nfs->storage().stats().submitted.get(), 0u);
}

}  // namespace
}  // namespace tern::nfsd::test
