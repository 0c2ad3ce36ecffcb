// Interop with the Linux kernel's NFS/RDMA server (svcrdma + nfsd): a Tern
// client engine over pmd/verbs talks NFSv3/v4 NULL and NFSv4.0 COMPOUNDs to
// it, moving READ data through write chunks and WRITE data through read
// chunks, and checks every byte against the exported file itself.
//
// Runs where the kernel server runs: the rxe VM (scripts/rxe-vm; `RXEVM=1`
// there). The test starts the server with `kernel-nfsd-start` unless
// TERN_NFS_SPEC names one already running (then TERN_NFS_EXPORT must be its
// exported directory, for the direct file checks). Anywhere else every test
// is skipped with the reason: a skip is not a pass.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "engine/engine.h"
#include "nfs/nfs_client.h"
#include "nfs/nfs_program.h"

namespace tern::nfs {
namespace {

constexpr uint32_t kMiB = 1u << 20;
constexpr uint32_t kFileSize = 4 * kMiB;  // the file READ reads
constexpr uint32_t kWriteSize = 2 * kMiB;  // what WRITE writes (two 1 MiB WRITEs)
constexpr uint32_t kChunk = kMiB;          // per READ/WRITE: engine max_bulk, nfsd's default max rsize

// A pattern that differs from page to page and file to file, so a misplaced
// page or an old file's bytes cannot pass for the right ones.
uint8_t pat(uint32_t seed, uint64_t i) { return static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 12) * 29 + 1); }

std::string env_or(const char* name, const char* def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : def;
}

// Why these tests cannot run here; empty when they can.
std::string why_not_here() {
  if (std::getenv("TERN_NFS_SPEC") != nullptr) return {};
  if (std::getenv("RXEVM") == nullptr)
    return "needs the kernel NFS/RDMA server: run in the rxe VM (scripts/rxe-vm/rxe-vm run -- <this binary>) "
           "or set TERN_NFS_SPEC and TERN_NFS_EXPORT";
  if (access("/dev/infiniband/rdma_cm", R_OK | W_OK) != 0) return "RXEVM is set but /dev/infiniband/rdma_cm is missing";
  return {};
}

bool write_file(const std::string& path, uint32_t seed, uint32_t size) {
  std::vector<uint8_t> b(size);
  for (uint32_t i = 0; i < size; ++i) b[i] = pat(seed, i);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  return std::fclose(f) == 0 && ok;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> b;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return b;
  uint8_t buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
  std::fclose(f);
  return b;
}

// First mismatching offset of buf against pattern seed from `base`, or -1.
int64_t first_mismatch(const uint8_t* buf, uint32_t len, uint32_t seed, uint64_t base) {
  for (uint32_t i = 0; i < len; ++i)
    if (buf[i] != pat(seed, base + i)) return static_cast<int64_t>(i);
  return -1;
}

class NfsRdma : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    skip_ = why_not_here();
    if (!skip_.empty()) return;
    export_ = env_or("TERN_NFS_EXPORT", "/export");
    if (std::getenv("TERN_NFS_SPEC") == nullptr) {
      // One fork for the whole suite: the VM is slow at them.
      if (std::system("kernel-nfsd-start >/dev/null") != 0) {
        setup_error_ = "kernel-nfsd-start failed";
        return;
      }
    }
    if (!write_file(export_ + "/read.bin", 1, kFileSize) || !write_file(export_ + "/small.txt", 2, 1000)) {
      setup_error_ = "cannot create the test files in " + export_;
      return;
    }
    // The WRITE target exists and is empty: without OPEN the client cannot create it.
    if (!write_file(export_ + "/write.bin", 0, 0)) {
      setup_error_ = "cannot create write.bin in " + export_;
      return;
    }
    mkdir((export_ + "/dir").c_str(), 0755);
    NfsClientOptions o;
    o.spec = env_or("TERN_NFS_SPEC", "verbs:dev=rxe0,addr=169.254.77.1,port=20049");
    o.engine.arena_bytes = 64u << 20;
    o.timeout_ms = 20000;
    auto c = NfsClient::connect(o);
    if (!c.is_ok()) {
      setup_error_ = "connect: " + c.status().to_string();
      return;
    }
    cli_ = std::move(c.value()).release();
  }
  static void TearDownTestSuite() {
    delete cli_;
    cli_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    ASSERT_NE(cli_, nullptr);
  }

  static NfsFile lookup_ok(const std::string& path) {
    auto f = cli_->lookup(path, {Attr::kType, Attr::kSize, Attr::kFileid, Attr::kMaxread, Attr::kMaxwrite});
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    return f.is_ok() ? f.value() : NfsFile{};
  }

  static inline std::string skip_, setup_error_, export_;
  static inline NfsClient* cli_ = nullptr;
};

TEST_F(NfsRdma, NullV3AndV4) {
  Status s3 = cli_->null(kNfsV3);
  EXPECT_TRUE(s3.is_ok()) << s3.to_string();
  Status s4 = cli_->null(kNfsV4);
  EXPECT_TRUE(s4.is_ok()) << s4.to_string();
}

TEST_F(NfsRdma, ConnectionParametersFromTheKernelsPrivateData) {
  rpc::ConnectionInfo ci = cli_->connection().info();
  // svcrdma advertises 4 KiB both ways (sc_max_req_size) and we offer 4 KiB.
  EXPECT_EQ(ci.inline_send, 4096u);
  EXPECT_EQ(ci.inline_recv, 4096u);
  // We offered Send With Invalidate; the kernel's own flag (0) is about what
  // it receives, not what it sends.
  EXPECT_TRUE(ci.remote_invalidation);
  EXPECT_GE(ci.credits, 1u);
}

TEST_F(NfsRdma, LookupGivesTypeSizeAndFileid) {
  NfsFile f = lookup_ok("/read.bin");
  struct stat st {};
  ASSERT_EQ(stat((export_ + "/read.bin").c_str(), &st), 0);
  EXPECT_TRUE(f.attrs.present.has(Attr::kType));
  EXPECT_EQ(f.attrs.type, FileType::kReg);
  EXPECT_EQ(f.attrs.size, kFileSize);
  EXPECT_EQ(f.attrs.fileid, static_cast<uint64_t>(st.st_ino));
  EXPECT_GT(f.fh.len, 0u);

  NfsFile d = lookup_ok("/dir");
  EXPECT_EQ(d.attrs.type, FileType::kDir);
  NfsFile root = lookup_ok("/");
  EXPECT_EQ(root.attrs.type, FileType::kDir);
  // nfsd's largest READ, 1 MiB by default: what every READ here stays under.
  EXPECT_GE(root.attrs.maxread, kChunk);
}

TEST_F(NfsRdma, MissingNameIsNoent) {
  auto f = cli_->lookup("/dir/nothing-here", {Attr::kType});
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), Errc::kNotFound);
  EXPECT_NE(f.status().message().find("NFS4ERR_NOENT"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("nothing-here"), std::string::npos) << f.status().message();
  // A file used as a directory.
  auto g = cli_->lookup("/small.txt/x", {Attr::kType});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("NFS4ERR_NOTDIR"), std::string::npos) << g.status().message();
}

TEST_F(NfsRdma, GetattrByFileHandle) {
  NfsFile f = lookup_ok("/small.txt");
  auto a = cli_->getattr(f.fh, {Attr::kSize, Attr::kType, Attr::kFileid, Attr::kOwner, Attr::kMode});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->size, 1000u);
  EXPECT_EQ(a->fileid, f.attrs.fileid);
  EXPECT_FALSE(a->owner.empty());
}

// READ through a write chunk: the kernel RDMA-Writes the data into our
// buffer and invalidates the chunk's rkey with its Send With Invalidate.
TEST_F(NfsRdma, ReadThroughWriteChunkMatchesTheFile) {
  NfsFile f = lookup_ok("/read.bin");
  auto* buf = cli_->alloc(kChunk);
  ASSERT_NE(buf, nullptr);
  const rpc::EngineStats& st = cli_->engine().stats();
  uint64_t inv0 = st.remote_invalidations.get(), local0 = st.local_inv_chains.get(), wc0 = st.write_chunks.get();
  uint32_t reads = 0;
  for (uint64_t off = 0; off < kFileSize; off += kChunk) {
    std::memset(buf, 0xee, kChunk);
    auto r = cli_->read(f.fh, off, {buf, kChunk});
    ASSERT_TRUE(r.is_ok()) << "offset " << off << ": " << r.status().to_string();
    ASSERT_EQ(r->count, kChunk);
    EXPECT_EQ(r->eof, off + kChunk == kFileSize);
    ASSERT_EQ(first_mismatch(buf, kChunk, 1, off), -1) << "offset " << off;
    ++reads;
  }
  EXPECT_EQ(st.write_chunks.get() - wc0, reads);
  EXPECT_EQ(st.remote_invalidations.get() - inv0, reads);
  EXPECT_EQ(st.local_inv_chains.get() - local0, 0u);
}

TEST_F(NfsRdma, ShortReadAtTheEndSaysEof) {
  NfsFile f = lookup_ok("/small.txt");
  auto* buf = cli_->alloc(kChunk);
  auto r = cli_->read(f.fh, 0, {buf, 64 * 1024});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->count, 1000u);
  EXPECT_TRUE(r->eof);
  EXPECT_EQ(first_mismatch(buf, 1000, 2, 0), -1);
  auto past = cli_->read(f.fh, 5000, {buf, 4096});
  ASSERT_TRUE(past.is_ok()) << past.status().to_string();
  EXPECT_EQ(past->count, 0u);
  EXPECT_TRUE(past->eof);
}

struct Pipeline {
  uint32_t done = 0, failed = 0;
  std::string first_error;
  std::vector<uint64_t> lat;
};
void on_read(void* ctx, const ReadDone& d) {
  auto* p = static_cast<Pipeline*>(ctx);
  ++p->done;
  p->lat.push_back(d.latency_ns);
  if (!d.status.is_ok() || d.count != 256 * 1024) {
    if (p->failed++ == 0) p->first_error = d.status.to_string() + " count " + std::to_string(d.count);
  }
}

// Several READs in flight: credits and write chunks of different calls.
TEST_F(NfsRdma, PipelinedReadsEachLandInTheirOwnBuffer) {
  NfsFile f = lookup_ok("/read.bin");
  constexpr uint32_t kPiece = 256 * 1024, kPieces = kFileSize / kPiece;
  auto* buf = cli_->alloc(kFileSize);
  std::memset(buf, 0, kFileSize);
  Pipeline p;
  uint32_t issued = 0;
  uint64_t deadline = monotonic_ns() + 60'000'000'000ull;
  while (p.done < kPieces && monotonic_ns() < deadline) {
    while (issued < kPieces && cli_->outstanding() < 8) {
      int err = cli_->read_async(f.fh, uint64_t{issued} * kPiece, {buf + uint64_t{issued} * kPiece, kPiece}, &on_read, &p);
      ASSERT_EQ(err, 0);
      ++issued;
    }
    cli_->poll();
  }
  ASSERT_EQ(p.done, kPieces);
  ASSERT_EQ(p.failed, 0u) << p.first_error;
  EXPECT_EQ(first_mismatch(buf, kFileSize, 1, 0), -1);
}

// WRITE through a read chunk (the kernel pulls the data with RDMA Reads),
// then the same bytes back through NFS READ and straight from the export.
TEST_F(NfsRdma, WriteThroughReadChunkReadsBackEqual) {
  NfsFile f = lookup_ok("/write.bin");
  auto* out = cli_->alloc(kChunk);
  auto* in = cli_->alloc(kChunk);
  const rpc::EngineStats& st = cli_->engine().stats();
  uint64_t inv0 = st.remote_invalidations.get(), local0 = st.local_inv_chains.get(), rc0 = st.read_chunks.get();
  for (uint64_t off = 0; off < kWriteSize; off += kChunk) {
    for (uint32_t i = 0; i < kChunk; ++i) out[i] = pat(3, off + i);
    auto w = cli_->write(f.fh, off, {out, kChunk}, StableHow::kFileSync);
    ASSERT_TRUE(w.is_ok()) << "offset " << off << ": " << w.status().to_string();
    EXPECT_EQ(w->count, kChunk);
    EXPECT_EQ(w->committed, StableHow::kFileSync);
  }
  // Each attempt carried one read chunk, one rkey: the kernel invalidated it
  // with its reply (also the attempts it refused with NFS4ERR_GRACE while
  // its grace period ran, which the client retried).
  uint64_t chunks = st.read_chunks.get() - rc0;
  EXPECT_GE(chunks, kWriteSize / kChunk);
  EXPECT_EQ(st.remote_invalidations.get() - inv0, chunks);
  EXPECT_EQ(st.local_inv_chains.get() - local0, 0u);

  auto a = cli_->getattr(f.fh, {Attr::kSize});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->size, kWriteSize);
  for (uint64_t off = 0; off < kWriteSize; off += kChunk) {
    auto r = cli_->read(f.fh, off, {in, kChunk});
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    ASSERT_EQ(r->count, kChunk);
    ASSERT_EQ(first_mismatch(in, kChunk, 3, off), -1) << "NFS READ back at " << off;
  }
  std::vector<uint8_t> direct = read_file(export_ + "/write.bin");
  ASSERT_EQ(direct.size(), kWriteSize);
  EXPECT_EQ(first_mismatch(direct.data(), kWriteSize, 3, 0), -1) << "the file in " << export_;
}

TEST_F(NfsRdma, UnstableWriteThenCommit) {
  NfsFile f = lookup_ok("/write.bin");
  auto* out = cli_->alloc(4096);
  for (uint32_t i = 0; i < 4096; ++i) out[i] = pat(4, i);
  auto w = cli_->write(f.fh, kWriteSize, {out, 4096}, StableHow::kUnstable);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(w->count, 4096u);
  auto v = cli_->commit(f.fh, 0, 0);
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  // Same server instance: same write verifier.
  EXPECT_EQ(v.value(), w->verf);
  std::vector<uint8_t> direct = read_file(export_ + "/write.bin");
  ASSERT_EQ(direct.size(), kWriteSize + 4096);
  EXPECT_EQ(first_mismatch(direct.data() + kWriteSize, 4096, 4, 0), -1);
}

// Runs last (gtest keeps declaration order): the whole session's counters.
TEST_F(NfsRdma, ZzSessionStatistics) {
  const rpc::EngineStats& st = cli_->engine().stats();
  std::printf("session: calls %llu, write chunks %llu, read chunks %llu, remote invalidations %llu, "
              "LOCAL_INV chains %llu, credit waits %llu, bad headers %llu\n",
              (unsigned long long)st.calls.get(), (unsigned long long)st.write_chunks.get(),
              (unsigned long long)st.read_chunks.get(), (unsigned long long)st.remote_invalidations.get(),
              (unsigned long long)st.local_inv_chains.get(), (unsigned long long)st.credit_waits.get(),
              (unsigned long long)st.bad_headers.get());
  EXPECT_EQ(st.bad_headers.get(), 0u);
  EXPECT_EQ(st.rdma_errors_received.get(), 0u);
  // Every chunk-carrying call here carried exactly one rkey.
  EXPECT_EQ(st.remote_invalidations.get(), st.write_chunks.get() + st.read_chunks.get());
  EXPECT_EQ(st.local_inv_chains.get(), 0u);
}

}  // namespace
}  // namespace tern::nfs
