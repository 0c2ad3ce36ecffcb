// tern-nfs-read-cost: NFSv3 READs of a file already in the page cache,
// through tern-nfsd's server (lib/nfsd's Nfs3Server) on one engine and a
// Tern client engine over pmd/shm, both polled from this one thread, so
// that a run under `valgrind --tool=callgrind` counts the same
// instructions every time: no peer thread spinning, no timing in the loop
// (bench/rpc_cost.cc's approach). scripts/measure-nfs-read-cost.sh runs it
// twice with different READ counts and reports instructions per READ:
// client + server + pmd/shm + the server's NFS work (handle, descriptor
// cache, stat, the read from the page cache, the attributes, the codecs).
// What it exists for: issue 22's "no loss on cached data" -- a READ the
// page cache holds must cost what it cost before the storage path went off
// the engine's thread.
//
//   tern-nfs-read-cost READS [SIZE [chunk|inline [DIR]]]
//
// SIZE bytes per READ (default 4096) at pseudo-random SIZE-aligned offsets
// of a 16 MiB file (a fixed sequence: both runs read the same offsets),
// through a write chunk (default, as the kernel's NFS/RDMA client reads
// 4 KiB and more with its default inline threshold) or inline. DIR: where
// the exported directory is made (default /var/tmp; a disk file system,
// so that RWF_NOWAIT behaves as on a real export). A fixed 1,000 READs
// warm up first, so that two runs differ only by their extra READs. Needs
// root (open_by_handle_at), as tern-nfsd does. Every reply is checked
// (status, count, the bytes' pattern). It says on stderr how the server
// served the READs: at once (RWF_NOWAIT) or through its storage queue --
// a file system that refuses RWF_NOWAIT (tmpfs: EOPNOTSUPP, on 6.18 too)
// sends every READ to the queue, and then this thread polls until the
// kernel's worker completes it, so the count includes that spinning and
// moves from run to run: compare such counts only roughly.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs_program.h"
#include "nfsd/export.h"
#include "nfsd/nfs3_server.h"
#include "nfsd/reply_cache.h"
#include "nfsd/state_dir.h"

using namespace tern;

namespace {

constexpr size_t kFileBytes = 16u << 20;
constexpr long kWarmup = 1000;

int fail(const std::string& what) {
  std::fprintf(stderr, "tern-nfs-read-cost: %s\n", what.c_str());
  return 1;
}

// The file's byte at `off`: a pattern the replies are checked against.
uint8_t pattern(uint64_t off) { return static_cast<uint8_t>((off * 131u) ^ (off >> 12)); }

struct Reply {
  bool done = false;
  rpc::CallStatus status = rpc::CallStatus::kOk;
  std::vector<uint8_t> results;
  uint32_t bulk_len = 0;
};

void on_done(void* ctx, const rpc::CallReply& r) {
  auto* p = static_cast<Reply*>(ctx);
  p->done = true;
  p->status = r.status;
  p->results.assign(r.results.begin(), r.results.end());
  p->bulk_len = r.bulk_recv_len;
}

template <typename A>
std::vector<uint8_t> enc(const A& a) {
  std::vector<uint8_t> b(1024);
  xdr::XdrWriter w(b);
  nfs::nfs3::encode(w, a);
  b.resize(w.ok() ? w.bytes_written() : 0);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tern-nfs-read-cost READS [SIZE [chunk|inline [DIR]]]\n");
    return 2;
  }
  const long reads = std::strtol(argv[1], nullptr, 10);
  const long size = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 4096;
  const bool inline_data = argc > 3 && std::strcmp(argv[3], "inline") == 0;
  const std::string base = argc > 4 ? argv[4] : "/var/tmp";
  if (reads <= 0 || size < 512 || size > (1 << 20) || size % 512 != 0) {
    std::fprintf(stderr, "tern-nfs-read-cost: READS must be > 0, SIZE a multiple of 512 in [512, 1 MiB]\n");
    return 2;
  }
  if (geteuid() != 0) return fail("needs root (open_by_handle_at), as tern-nfsd does");

  // The export: a fresh directory holding one file, written and read once
  // so that every page of it is in the page cache.
  std::string tmp = base + "/tern-nfs-read-cost.XXXXXX";
  if (mkdtemp(tmp.data()) == nullptr) return fail("mkdtemp in " + base + ": " + std::strerror(errno));
  const std::string dir = tmp + "/export", state = tmp + "/state", file = dir + "/data";
  const std::string spec = "shm:path=/tmp/tern-nfs-read-cost-" + std::to_string(getpid()) + ".sock";
  struct Cleanup {
    std::string tmp, sock;
    ~Cleanup() {
      unlink(sock.c_str());
      (void)!std::system(("rm -rf '" + tmp + "'").c_str());
    }
  } cleanup{tmp, spec.substr(std::strlen("shm:path="))};
  if (mkdir(dir.c_str(), 0755) != 0) return fail("mkdir export");
  {
    std::vector<uint8_t> data(kFileBytes);
    for (size_t i = 0; i < data.size(); ++i) data[i] = pattern(i);
    int fd = open(file.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size()) || fsync(fd) != 0 ||
        pread(fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size()))
      return fail(std::string("writing the file: ") + std::strerror(errno));
    close(fd);
  }

  auto sd = nfsd::StateDir::open(state);
  if (!sd) return fail(sd.status().to_string());
  nfsd::ExportOptions eo;
  eo.dir = dir;
  eo.squash.root_squash = false;
  auto exp = nfsd::Export::open(eo, *sd);
  if (!exp) return fail(exp.status().to_string());
  auto drc = nfsd::ReplyCache::open((*sd)->reply_cache_path(), 256);
  if (!drc) return fail(drc.status().to_string());
  nfsd::ServerConfig cfg;  // tern-nfsd's defaults
  cfg.write_verf = nfsd::new_write_verifier();

  // The engines as tern-nfsd's (max_bulk 1 MiB) and a client's.
  rpc::EngineOptions so;
  so.arena_bytes = 64u << 20;
  so.max_bulk = 1u << 20;
  so.max_reply = (256u << 10) + 4096;
  auto srv = rpc::Engine::create(so);
  if (!srv) return fail(srv.status().to_string());
  auto server = std::make_unique<nfsd::Nfs3Server>(**exp, drc->get(), cfg);
  server->attach(**srv);
  if (Status s = (*srv)->listen(spec); !s.is_ok()) return fail(s.to_string());
  rpc::EngineOptions co;
  co.arena_bytes = 64u << 20;
  co.max_reply = 512u << 10;
  auto cli = rpc::Engine::create(co);
  if (!cli) return fail(cli.status().to_string());
  auto conn = (*cli)->connect(spec);
  if (!conn) return fail(conn.status().to_string());
  rpc::Connection* c = *conn;
  while (!c->ready()) {
    (*srv)->poll();
    (*cli)->poll();
    if (c->failed()) return fail("connection failed: " + c->error().to_string());
  }

  rpc::AuthSys auth;
  auth.machine = "tern-nfs-read-cost";
  // One call, answered: both engines stepped until it is.
  auto call = [&](nfs::Nfs3Proc proc, const std::vector<uint8_t>& args, std::span<uint8_t> bulk, Reply* r) {
    *r = Reply{};
    rpc::Call k{nfs::kNfsProgram, nfs::kNfsV3, static_cast<uint32_t>(proc)};
    k.args = args;
    k.auth = &auth;
    k.bulk_recv = bulk;
    k.max_results = inline_data ? static_cast<uint32_t>(size) + 1024 : 0;
    k.ctx = r;
    k.done = on_done;
    if (c->call(k) != 0) return false;
    while (!r->done) {
      (*cli)->poll();
      (*srv)->poll();
    }
    return r->status == rpc::CallStatus::kOk;
  };

  Reply r;
  nfs::nfs3::LookupArgs la;
  la.what.dir = (*exp)->root_fh();
  la.what.name = "data";
  nfs::nfs3::LookupRes lr;
  if (!call(nfs::Nfs3Proc::kLookup, enc(la), {}, &r) || !nfs::nfs3::decode(r.results, &lr) ||
      lr.status != nfs::Nfs3Stat::kOk)
    return fail("LOOKUP of the file failed");

  auto* bulk = static_cast<uint8_t*>((*cli)->alloc(static_cast<size_t>(size)));
  if (bulk == nullptr) return fail("no client buffer");
  nfs::nfs3::ReadArgs ra;
  ra.file = lr.obj;
  ra.count = static_cast<uint32_t>(size);
  const uint64_t blocks = kFileBytes / static_cast<uint64_t>(size);
  uint64_t x = 88172645463325252ull;  // xorshift64: the same offsets every run
  const long total = kWarmup + reads;
  for (long i = 0; i < total; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    ra.offset = (x % blocks) * static_cast<uint64_t>(size);
    std::span<uint8_t> chunk = inline_data ? std::span<uint8_t>() : std::span<uint8_t>(bulk, static_cast<size_t>(size));
    if (!call(nfs::Nfs3Proc::kRead, enc(ra), chunk, &r)) return fail("READ: " + std::string(rpc::call_status_name(r.status)));
    nfs::nfs3::ReadRes rr;
    if (!nfs::nfs3::decode(r.results, inline_data ? -1 : static_cast<int64_t>(r.bulk_len), &rr) ||
        rr.status != nfs::Nfs3Stat::kOk || rr.count != static_cast<uint32_t>(size))
      return fail("READ answered wrongly at offset " + std::to_string(ra.offset));
    const uint8_t* got = inline_data ? rr.data.data() : bulk;
    if (got[0] != pattern(ra.offset) || got[size - 1] != pattern(ra.offset + static_cast<uint64_t>(size) - 1))
      return fail("READ returned the wrong bytes at offset " + std::to_string(ra.offset));
  }
  if (server->stats().read_bytes.get() != static_cast<uint64_t>(total * size)) return fail("server read_bytes disagrees");
  // How the server served them: at once from the page cache (RWF_NOWAIT),
  // or through its storage queue. A server without a storage queue (before
  // issue 22) read every one on the engine's thread; the same source
  // builds against both (the counters are looked for, not named outright).
  auto served = [total](const auto& srv) {
    const auto& st = srv.stats();
    if constexpr (requires { st.read_nowait; st.storage_deferred; srv.storage().backend(); }) {
      std::fprintf(stderr,
                   "tern-nfs-read-cost: %ld READs, %llu at once (RWF_NOWAIT), %llu through the storage queue (%s)\n",
                   total, static_cast<unsigned long long>(st.read_nowait.get()),
                   static_cast<unsigned long long>(st.storage_deferred.get()), srv.storage().backend());
    } else {
      std::fprintf(stderr, "tern-nfs-read-cost: %ld READs, all on the engine's thread (no storage queue)\n", total);
    }
  };
  served(*server);
  c->close();
  for (int i = 0; i < 100; ++i) (*cli)->poll(), (*srv)->poll();
  return 0;
}
