// The prober/writer matrix (docs/nfs-gateway.md, "Storage"), in one process over pmd/shm: one
// tern-nfsd engine (Nfs3Server with its reply cache, polled as tern-nfsd
// polls it: wait mode when idle) exporting a directory on this machine's
// disk, a "prober" client doing GETATTR in a loop, and "writer" clients
// each on a connection and thread of their own: none, 1 and 4 writing
// 64 KiB FILE_SYNC WRITEs, 4 writing UNSTABLE and COMMITting every 16, and
// as a control 4 writing UNSTABLE and never committing (no storage wait:
// what the prober loses there is the shared CPU and transport). Per
// phase: the prober's calls/s and p99 and their ratio to its solo figures
// of the same run, and the writers' WRITEs/s; then, per phase, what the
// engine's thread did meanwhile (its passes with work: mean, p99, longest;
// busy and asleep shares), which is what a prober's call waits behind. The
// engine's thread is named "engine" (perf report --comm engine). Run by hand (or by
// scripts/measure-nfs-isolation.sh) for the table in docs/nfs-gateway.md.
//
//   tern-nfsd-isolation-measure [--dir DIR] [--seconds S] [--storage auto|uring|threads|sync]
//                               [--unstable-inline]
// --unstable-inline: UNSTABLE WRITEs on the engine's thread, as before
// they went through the storage queue (ServerConfig::unstable_inline).
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
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

std::atomic<bool> g_run{false}, g_stop_clients{false};

struct Client {
  std::unique_ptr<rpc::Engine> eng;
  rpc::Connection* conn = nullptr;
  rpc::AuthSys auth;
  bool ok = false;

  explicit Client(const std::string& spec) {
    rpc::EngineOptions o;
    o.arena_bytes = 16u << 20;
    eng = rpc::Engine::create(o).value();
    auto c = eng->connect(spec);
    if (!c) return;
    conn = *c;
    auto end = Clock::now() + std::chrono::seconds(10);
    while (!conn->ready() && !conn->failed() && Clock::now() < end) eng->poll();
    ok = conn->ready();
    auth.machine = "isolation";
  }
  // One call, waited for (sleeping in the engine's wait mode: the clients
  // must not take the cores the server runs on). Returns its nfsstat3.
  uint32_t call(Nfs3Proc p, std::span<const uint8_t> args, std::span<const uint8_t> bulk = {}) {
    struct R {
      bool done = false;
      uint32_t stat = ~0u;
    } r;
    rpc::Call c;
    c.prog = kNfsProgram, c.vers = kNfsV3, c.proc = static_cast<uint32_t>(p);
    c.args = args;
    c.bulk_send = bulk;
    c.auth = &auth;
    c.ctx = &r;
    c.done = [](void* ctx, const rpc::CallReply& rep) {
      auto* x = static_cast<R*>(ctx);
      x->done = true;
      if (rep.status == rpc::CallStatus::kOk && rep.results.size() >= 4)
        x->stat = uint32_t{rep.results[0]} << 24 | uint32_t{rep.results[1]} << 16 | uint32_t{rep.results[2]} << 8 |
                  rep.results[3];
    };
    if (conn->call(c) != 0) return ~0u;
    while (!r.done)
      if (eng->poll() == 0) (void)eng->wait(50);
    return r.stat;
  }
};

template <typename A>
std::vector<uint8_t> enc(const A& a) {
  std::vector<uint8_t> b(4096);
  xdr::XdrWriter w(b);
  encode(w, a);
  b.resize(w.bytes_written());
  return b;
}

double pct(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

struct Phase {
  const char* name;
  int writers;
  bool stable;
  int commit_every;  // UNSTABLE writers: a COMMIT after this many WRITEs (0: never)
};

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double secs = 4;
  nfsd::StorageOptions so;
  bool unstable_inline = false;
  tern::apps::OptionParser cli("tern-nfsd-isolation-measure", "[options]");
  cli.text("dir", "DIR", "the directory exported (default: a fresh one under /var/tmp)", &dir);
  cli.duration("seconds", "S", "each phase's length (default 4)", 1e6, &secs);
  cli.choice("storage", "MODE", "where storage waits, as tern-nfsd's --storage (default auto)",
             {"auto", "uring", "threads", "sync"}, &so.mode);
  cli.flag("unstable-inline", "UNSTABLE writes on the engine's thread", &unstable_inline);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  char tmpl[] = "/var/tmp/tern-isolation.XXXXXX";
  const std::string top = mkdtemp(tmpl);
  if (dir.empty()) {
    dir = top + "/export";
    mkdir(dir.c_str(), 0777);
  }
  auto sd = nfsd::StateDir::open(top + "/state");
  if (!sd) return std::fprintf(stderr, "%s\n", sd.status().to_string().c_str()), 1;
  nfsd::ExportOptions eo;
  eo.dir = dir;
  eo.squash.root_squash = false;
  auto exp = nfsd::Export::open(eo, *sd);
  if (!exp) return std::fprintf(stderr, "%s\n", exp.status().to_string().c_str()), 1;
  auto drc = nfsd::ReplyCache::open((*sd)->reply_cache_path(), 8192).value();
  nfsd::ServerConfig cfg;
  cfg.write_verf = nfsd::new_write_verifier();
  cfg.storage = so;
  cfg.unstable_inline = unstable_inline;
  rpc::EngineOptions o;
  o.arena_bytes = 128u << 20;
  o.max_bulk = 1u << 20;
  o.max_reply = (256u << 10) + 4096;
  auto eng = rpc::Engine::create(o).value();
  auto srv = std::make_unique<nfsd::Nfs3Server>(**exp, drc.get(), cfg);
  srv->attach(*eng);
  const std::string spec = "shm:path=" + top + "/nfsd.sock";
  if (Status s = eng->listen(spec); !s) return std::fprintf(stderr, "%s\n", s.to_string().c_str()), 1;
  std::atomic<bool> stop_srv{false};
  // What the engine's thread did, per phase (what a prober's call waits
  // behind): its passes that did work, their lengths in µs (the longest
  // 1% and the longest), and the time it slept. Reset by the prober
  // (epoch), read after the phase (a relaxed snapshot: only figures).
  struct Loop {
    std::mutex mu;
    std::vector<double> busy_us;
    double slept_ms = 0;
    uint64_t passes = 0;
  } loop;
  std::thread server([&] {
    pthread_setname_np(pthread_self(), "engine");  // for perf --comm
    std::vector<double> local;
    double slept = 0;
    uint64_t passes = 0;
    Clock::time_point flush = Clock::now();
    while (!stop_srv.load(std::memory_order_relaxed)) {
      const Clock::time_point a = Clock::now();
      const int n = eng->poll();
      const Clock::time_point b = Clock::now();
      ++passes;
      if (n > 0) local.push_back(std::chrono::duration<double, std::micro>(b - a).count());
      else {
        (void)eng->wait(200);  // tern-nfsd's loop (without --busy-poll)
        slept += std::chrono::duration<double, std::milli>(Clock::now() - b).count();
      }
      if (b - flush > std::chrono::milliseconds(50)) {
        std::lock_guard<std::mutex> g(loop.mu);
        loop.busy_us.insert(loop.busy_us.end(), local.begin(), local.end());
        loop.slept_ms += slept;
        loop.passes += passes;
        local.clear(), slept = 0, passes = 0, flush = b;
      }
    }
  });
  const Fh3 root = (*exp)->root_fh();

  // The writers' files (made through the server, as a client would).
  auto make_file = [&](Client& c, const std::string& name, Fh3* fh) {
    CreateArgs a;
    a.where = {root, name};
    a.how = CreateMode::kUnchecked;
    a.attr.set_mode = true;
    a.attr.mode = 0644;
    std::vector<uint8_t> res;
    struct R {
      bool done = false;
      std::vector<uint8_t> res;
    } r;
    rpc::Call call;
    auto args = enc(a);
    call.prog = kNfsProgram, call.vers = kNfsV3, call.proc = static_cast<uint32_t>(Nfs3Proc::kCreate);
    call.args = args;
    call.auth = &c.auth;
    call.ctx = &r;
    call.done = [](void* ctx, const rpc::CallReply& rep) {
      auto* x = static_cast<R*>(ctx);
      x->res.assign(rep.results.begin(), rep.results.end());
      x->done = true;
    };
    (void)c.conn->call(call);
    while (!r.done) c.eng->poll();
    CreateRes cr;
    if (!decode(r.res, &cr) || cr.status != Nfs3Stat::kOk || !cr.obj) return false;
    *fh = *cr.obj;
    return true;
  };

  // The last phase is the control: the same four writers with no storage
  // wait at all (UNSTABLE, never committed), so what the prober loses there
  // is the CPU and the transport it shares with them on this machine, not
  // the disk; a phase's excess over it is what storage still costs.
  const Phase phases[] = {{"none (solo)", 0, true, 0},
                          {"1 writer, 64 KiB FILE_SYNC", 1, true, 0},
                          {"4 writers, 64 KiB FILE_SYNC", 4, true, 0},
                          {"4 writers, 64 KiB UNSTABLE + COMMIT every 16", 4, false, 16},
                          {"4 writers, 64 KiB UNSTABLE, never COMMIT (control: CPU and transport only)", 4, false, 0}};
  std::printf("storage: %s%s; export %s; %.0f s phases\n\n", srv->storage().backend(),
              unstable_inline ? ", UNSTABLE on the engine's thread" : "", dir.c_str(), secs);
  std::printf("| load next to the prober | prober calls/s | prober p99 (ms) | rate vs solo | p99 vs solo | writer WRITEs/s |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  double solo_rate = 0, solo_p99 = 0;
  std::vector<std::string> engine_lines;
  for (const Phase& ph : phases) {
    std::atomic<uint64_t> writes{0};
    std::atomic<bool> stop{false};
    std::atomic<int> ready{0};
    std::vector<std::thread> ws;
    for (int i = 0; i < ph.writers; ++i)
      ws.emplace_back([&, i] {
        Client c(spec);
        Fh3 fh;
        if (!c.ok || !make_file(c, std::string("w").append(std::to_string(i)), &fh)) {
          std::fprintf(stderr, "writer %d: no connection or file\n", i);
          ready++;
          return;
        }
        const uint32_t len = 64u << 10;
        auto* data = static_cast<uint8_t*>(c.eng->alloc(len));
        std::memset(data, 'a' + i, len);
        ready++;
        uint64_t off = 0, n = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          WriteArgs a;
          a.file = fh;
          a.offset = off;
          a.count = len;
          a.stable = ph.stable ? StableHow::kFileSync : StableHow::kUnstable;
          a.data = {data, len};
          std::vector<uint8_t> args(256);
          xdr::XdrWriter w(args);
          encode_write_chunked(w, a);
          args.resize(w.bytes_written());
          if (c.call(Nfs3Proc::kWrite, args, {data, len}) != 0) break;
          off = (off + len) % (64u << 20);
          writes++;
          if (ph.commit_every > 0 && ++n % ph.commit_every == 0) (void)c.call(Nfs3Proc::kCommit, enc(CommitArgs{fh, 0, 0}));
        }
        c.conn->close();
      });
    while (ready.load() < ph.writers) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writers under way
    Client p(spec);
    if (!p.ok) return std::fprintf(stderr, "prober: no connection\n"), 1;
    const auto args = enc(GetattrArgs{root});
    std::vector<double> lat;
    const uint64_t w0 = writes.load();
    {
      std::lock_guard<std::mutex> g(loop.mu);
      loop.busy_us.clear(), loop.slept_ms = 0, loop.passes = 0;
    }
    const Clock::time_point t0 = Clock::now();
    const Clock::time_point end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
    Clock::time_point now;
    while ((now = Clock::now()) < end) {
      const uint32_t st = p.call(Nfs3Proc::kGetattr, args);
      lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - now).count());
      if (st != 0) return std::fprintf(stderr, "prober: GETATTR failed\n"), 1;
    }
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    const double wrate = static_cast<double>(writes.load() - w0) / el;
    stop = true;
    for (auto& t : ws) t.join();
    p.conn->close();
    const double rate = static_cast<double>(lat.size()) / el, p99 = pct(lat, 0.99);
    if (ph.writers == 0) solo_rate = rate, solo_p99 = p99;
    std::printf("| %s | %.0f | %.3f | %.2fx | %.2fx | %.0f |\n", ph.name, rate, p99, rate / solo_rate, p99 / solo_p99,
                wrate);
    {
      std::lock_guard<std::mutex> g(loop.mu);
      const size_t n = loop.busy_us.size();
      double sum = 0;
      for (double x : loop.busy_us) sum += x;
      const double mx = n > 0 ? *std::max_element(loop.busy_us.begin(), loop.busy_us.end()) : 0;
      engine_lines.push_back(std::string(ph.name) + ": " + std::to_string(loop.passes) + " passes, " +
                             std::to_string(n) + " with work (mean " + std::to_string(n ? sum / n : 0) + " us, p99 " +
                             std::to_string(n ? pct(loop.busy_us, 0.99) : 0) + " us, max " + std::to_string(mx) +
                             " us; busy " + std::to_string(sum / 1e4 / el) + "% of the phase), slept " +
                             std::to_string(loop.slept_ms / 10 / el) + "%");
    }
    std::fflush(stdout);
  }
  std::printf("\nthe engine's thread per phase (while the prober ran):\n");
  for (const auto& l : engine_lines) std::printf("  %s\n", l.c_str());
  stop_srv = true;
  server.join();
  srv.reset();
  eng.reset();
  (void)!system(("rm -rf " + top).c_str());
  return 0;
}
