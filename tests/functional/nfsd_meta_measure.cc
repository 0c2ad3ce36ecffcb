// What one metadata call costs through tern-nfsd, in one process over
// pmd/shm: one engine (an Nfs3Server, polled as tern-nfsd polls it: wait
// mode when idle) exporting a directory on this machine's disk, one client
// making each call and waiting for it (busy-polling its own engine). Per
// procedure: the mean and median time from the call to its reply, over N
// rounds of CREATE, GETATTR, SETATTR, LOOKUP, SYMLINK, READLINK, RENAME,
// LINK, REMOVE (x3), MKDIR, RMDIR, FSSTAT on fresh names. Run by hand for
// docs/nfs-gateway.md ("Calls that run as the caller").
//
//   tern-nfsd-meta-measure [--dir DIR] [--rounds N] [--only getattr|mkdir|create|read] [--ring]
//
// --ring puts MKDIR, SYMLINK, REMOVE, RMDIR, RENAME and LINK on the storage
// ring under io_uring personalities (ServerConfig::caller_ring; default:
// the caller pool).
//
// --only runs one kind of call N times instead (getattr: GETATTR of the
// root; mkdir: MKDIR then RMDIR; create: CREATE then REMOVE; read: a 512-byte
// READ of a file in the page cache, inline -- the cached READ path, for
// instruction counts under callgrind) and prints,
// besides the times, the process's context switches per call (every
// thread's voluntary and involuntary ones, from /proc/self/task): what a
// hand-off to another thread costs in wake-ups, a count the machine's load
// does not change much. Run it under `strace -f -c` for the system calls.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs_program.h"
#include "nfsd/export.h"
#include "nfsd/nfs3_server.h"
#include "nfsd/reply_cache.h"
#include "nfsd/state_dir.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::nfs;
using namespace tern::nfs::nfs3;
using Clock = std::chrono::steady_clock;

namespace {

template <typename A>
std::vector<uint8_t> enc(const A& a) {
  std::vector<uint8_t> b(4096);
  xdr::XdrWriter w(b);
  encode(w, a);
  b.resize(w.bytes_written());
  return b;
}

struct Client {
  std::unique_ptr<rpc::Engine> eng;
  rpc::Connection* conn = nullptr;
  rpc::AuthSys auth;
  std::map<std::string, std::vector<double>> us;  // per procedure

  explicit Client(const std::string& spec) {
    rpc::EngineOptions o;
    o.arena_bytes = 16u << 20;
    eng = rpc::Engine::create(o).value();
    auto c = eng->connect(spec);
    if (!c) return;
    conn = *c;
    auto end = Clock::now() + std::chrono::seconds(10);
    while (!conn->ready() && !conn->failed() && Clock::now() < end) eng->poll();
    auth.machine = "meta";
    auth.uid = 1000, auth.gid = 1000;
  }
  bool ok() const { return conn != nullptr && conn->ready(); }
  // One call, waited for and timed; its results in *res.
  bool call(const char* name, Nfs3Proc p, const std::vector<uint8_t>& args, std::vector<uint8_t>* res) {
    struct R {
      bool done = false;
      std::vector<uint8_t>* res;
    } r{false, res};
    rpc::Call c;
    c.prog = kNfsProgram, c.vers = kNfsV3, c.proc = static_cast<uint32_t>(p);
    c.args = args;
    c.auth = &auth;
    c.ctx = &r;
    c.done = [](void* ctx, const rpc::CallReply& rep) {
      auto* x = static_cast<R*>(ctx);
      x->done = true;
      if (rep.status == rpc::CallStatus::kOk) x->res->assign(rep.results.begin(), rep.results.end());
      else x->res->clear();
    };
    const auto t0 = Clock::now();
    if (conn->call(c) != 0) return false;
    while (!r.done) eng->poll();
    us[name].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    return res->size() >= 4 && (*res)[0] == 0 && (*res)[1] == 0 && (*res)[2] == 0 && (*res)[3] == 0;
  }
};

// Context switches of every thread of this process so far.
uint64_t context_switches() {
  uint64_t n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    FILE* f = std::fopen(("/proc/self/task/" + std::string(e->d_name) + "/status").c_str(), "r");
    if (f == nullptr) continue;
    char line[256];
    unsigned long long v;
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
          std::sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
        n += v;
    std::fclose(f);
  }
  closedir(d);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  int rounds = 1000;
  std::string only;
  bool ring = false;
  tern::apps::OptionParser cli("tern-nfsd-meta-measure", "[options]");
  cli.text("dir", "DIR", "the directory exported (default: a fresh one under /var/tmp)", &dir);
  cli.integer("rounds", "N", "calls of each procedure (default 1000)", 1, 1 << 30, &rounds);
  cli.custom("only", "KIND", "run one kind of call N times instead: getattr, mkdir, create or read",
             "getattr, mkdir, create or read", [&only](std::string_view v, std::string*) {
               if (v != "getattr" && v != "mkdir" && v != "create" && v != "read") return false;
               only = std::string(v);
               return true;
             });
  cli.flag("ring", "MKDIR, SYMLINK, REMOVE, RMDIR, RENAME and LINK on the storage ring as the caller", &ring);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  char tmpl[] = "/var/tmp/tern-meta.XXXXXX";
  const std::string top = mkdtemp(tmpl);
  if (dir.empty()) dir = top + "/export";
  mkdir(dir.c_str(), 0777);
  chmod(dir.c_str(), 0777);
  auto sd = nfsd::StateDir::open(top + "/state");
  if (!sd) return std::fprintf(stderr, "%s\n", sd.status().to_string().c_str()), 1;
  nfsd::ExportOptions eo;
  eo.dir = dir;
  auto exp = nfsd::Export::open(eo, *sd);
  if (!exp) return std::fprintf(stderr, "%s\n", exp.status().to_string().c_str()), 1;
  auto drc = nfsd::ReplyCache::open((*sd)->reply_cache_path(), 8192).value();
  nfsd::ServerConfig cfg;
  cfg.write_verf = nfsd::new_write_verifier();
  cfg.caller_ring = ring;
  rpc::EngineOptions o;
  o.arena_bytes = 64u << 20;
  auto eng = rpc::Engine::create(o).value();
  auto srv = std::make_unique<nfsd::Nfs3Server>(**exp, drc.get(), cfg);
  srv->attach(*eng);
  const std::string spec = "shm:path=" + top + "/nfsd.sock";
  if (Status s = eng->listen(spec); !s) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  std::atomic<bool> stop{false};
  std::thread server([&] {
    while (!stop.load(std::memory_order_relaxed))
      if (eng->poll() == 0) (void)eng->wait(200);  // tern-nfsd's loop (without --busy-poll)
  });
  const Fh3 root = (*exp)->root_fh();
  Client c(spec);
  if (!c.ok()) return std::fprintf(stderr, "no connection\n"), 1;
  std::vector<uint8_t> res;
  int failed = 0;
  auto handle = [&](const std::vector<uint8_t>& r, Fh3* fh) {
    CreateRes cr;
    if (!decode(r, &cr) || !cr.obj) return false;
    *fh = *cr.obj;
    return true;
  };
  if (!only.empty()) {
    Fh3 file;  // --only read's
    if (only == "read") {
      const int fd = ::open((dir + "/r").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const std::vector<uint8_t> data(4096, 0x5a);
      const bool wrote = fd >= 0 && ::write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
      if (fd >= 0) ::close(fd);
      LookupRes lr;
      if (!wrote || !c.call("lookup", Nfs3Proc::kLookup, enc(LookupArgs{{root, "r"}}), &res) || !decode(res, &lr))
        return std::fprintf(stderr, "--only read: no file to read\n"), 1;
      file = lr.obj;
    }
    const uint64_t cs0 = context_switches();
    int calls = 0;
    for (int i = 0; i < rounds; ++i) {
      const std::string n = "o" + std::to_string(i);
      if (only == "getattr") {
        failed += !c.call("getattr", Nfs3Proc::kGetattr, enc(GetattrArgs{root}), &res);
        calls += 1;
      } else if (only == "mkdir") {
        MkdirArgs ma;
        ma.where = {root, n};
        ma.attr.set_mode = true;
        ma.attr.mode = 0755;
        failed += !c.call("mkdir", Nfs3Proc::kMkdir, enc(ma), &res);
        failed += !c.call("rmdir", Nfs3Proc::kRmdir, enc(RemoveArgs{{root, n}}), &res);
        calls += 2;
      } else if (only == "create") {
        CreateArgs ca;
        ca.where = {root, n};
        ca.how = CreateMode::kGuarded;
        ca.attr.set_mode = true;
        ca.attr.mode = 0644;
        failed += !c.call("create", Nfs3Proc::kCreate, enc(ca), &res);
        failed += !c.call("remove", Nfs3Proc::kRemove, enc(RemoveArgs{{root, n}}), &res);
        calls += 2;
      } else if (only == "read") {
        failed += !c.call("read", Nfs3Proc::kRead, enc(ReadArgs{file, 0, 512}), &res);
        calls += 1;
      } else {
        return std::fprintf(stderr, "--only: getattr, mkdir, create or read\n"), 2;
      }
    }
    const uint64_t cs = context_switches() - cs0;
    const nfsd::Nfs3Stats& st = srv->stats();
    std::printf("%d calls (%s), %d failed: %.2f context switches per call (all threads); %llu on the pool, %llu on the "
                "ring\n",
                calls, only.c_str(), failed, calls > 0 ? static_cast<double>(cs) / calls : 0.0,
                static_cast<unsigned long long>(st.caller_deferred.get()),
                static_cast<unsigned long long>(st.caller_ring.get()));
    rounds = 0;
  }
  for (int i = 0; i < rounds; ++i) {
    const std::string n = std::to_string(i), f = "f" + n, g = "g" + n, h = "h" + n, s = "s" + n, d = "d" + n;
    CreateArgs ca;
    ca.where = {root, f};
    ca.how = CreateMode::kGuarded;
    ca.attr.set_mode = true;
    ca.attr.mode = 0644;
    Fh3 fh, sh;
    failed += !c.call("create", Nfs3Proc::kCreate, enc(ca), &res) || !handle(res, &fh);
    failed += !c.call("getattr", Nfs3Proc::kGetattr, enc(GetattrArgs{fh}), &res);
    SetattrArgs sa;
    sa.obj = fh;
    sa.attr.set_mode = true;
    sa.attr.mode = 0600;
    failed += !c.call("setattr", Nfs3Proc::kSetattr, enc(sa), &res);
    failed += !c.call("lookup", Nfs3Proc::kLookup, enc(LookupArgs{{root, f}}), &res);
    SymlinkArgs sy;
    sy.where = {root, s};
    const std::string target = "some/where/" + n;
    sy.target = target;
    failed += !c.call("symlink", Nfs3Proc::kSymlink, enc(sy), &res) || !handle(res, &sh);
    failed += !c.call("readlink", Nfs3Proc::kReadlink, enc(ReadlinkArgs{sh}), &res);
    failed += !c.call("rename", Nfs3Proc::kRename, enc(RenameArgs{{root, f}, {root, g}}), &res);
    failed += !c.call("link", Nfs3Proc::kLink, enc(LinkArgs{fh, {root, h}}), &res);
    failed += !c.call("remove", Nfs3Proc::kRemove, enc(RemoveArgs{{root, h}}), &res);
    failed += !c.call("remove", Nfs3Proc::kRemove, enc(RemoveArgs{{root, g}}), &res);
    failed += !c.call("remove", Nfs3Proc::kRemove, enc(RemoveArgs{{root, s}}), &res);
    MkdirArgs ma;
    ma.where = {root, d};
    ma.attr.set_mode = true;
    ma.attr.mode = 0755;
    failed += !c.call("mkdir", Nfs3Proc::kMkdir, enc(ma), &res);
    failed += !c.call("rmdir", Nfs3Proc::kRmdir, enc(RemoveArgs{{root, d}}), &res);
    failed += !c.call("fsstat", Nfs3Proc::kFsstat, enc(FsArgs{root}), &res);
  }
  if (only.empty()) std::printf("%d rounds, export %s, %d calls failed\n\n", rounds, dir.c_str(), failed);
  std::printf("| procedure | mean (us) | median (us) | p99 (us) |\n| --- | ---: | ---: | ---: |\n");
  for (auto& [name, v] : c.us) {
    double sum = 0;
    for (double x : v) sum += x;
    std::sort(v.begin(), v.end());
    std::printf("| %s | %.1f | %.1f | %.1f |\n", name.c_str(), sum / static_cast<double>(v.size()), v[v.size() / 2],
                v[std::min(v.size() - 1, v.size() * 99 / 100)]);
  }
  stop = true;
  server.join();
  srv.reset();
  eng.reset();
  (void)!system(("rm -rf " + top).c_str());
  return failed == 0 ? 0 : 1;
}
