// tern-nfsd: an NFSv3 server (RFC 1813) over RPC-over-RDMA on Tern's
// engine, serving one local directory, that the Linux kernel's NFS client
// mounts:
//
//   tern-nfsd --export /srv/data --listen verbs:addr=10.0.0.1,port=20050 --mount-port 20048
//   mount -t nfs -o vers=3,proto=rdma,port=20050,mountport=20048,mountproto=tcp 10.0.0.1:/srv/data /mnt
//
// One engine per thread (--engines, pinned with --cores); the connections
// (a client's nconnect=N among them) are spread over them. MOUNT v3 is
// served over TCP on --mount-port. docs/nfs-gateway.md says how to run it,
// what it serves and what it does not.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/log.h"
#include "base/version.h"
#include "cli_args.h"
#include "engine/engine.h"
#include "nfs/nfs3_types.h"
#include "nfsd/export.h"
#include "nfsd/host_services.h"
#include "nfsd/mountd.h"
#include "nfsd/nfs3_server.h"
#include "nfsd/reply_cache.h"

using namespace tern;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_dump{false};

void on_signal(int sig) {
  if (sig == SIGUSR1) g_dump.store(true);
  else g_stop.store(true);
}

void usage(FILE* f) {
  std::fprintf(f,
               "usage: tern-nfsd --export DIR (--listen SPEC | --addr IP [--port N] [--dev NAME]) [options]\n"
               "  --export DIR          the directory served\n"
               "  --name PATH           the path clients mount (default: DIR)\n"
               "  --listen SPEC         device spec to listen on: verbs:addr=IP,port=N[,dev=NAME] or\n"
               "                        shm:path=SOCKET (tests)\n"
               "  --addr IP, --port N, --dev NAME   the same as --listen verbs:addr=IP,port=N,dev=NAME\n"
               "                        (port default 20049)\n"
               "  --mount-port N        MOUNT v3 over TCP on this port (default 20048; 0: any free one;\n"
               "                        'off': none)\n"
               "  --mount-addr IP       address MOUNT listens on (default: --addr, else 0.0.0.0)\n"
               "  --nlm-port N          NLM v4 locks over TCP and UDP on this port (default 0: any free one;\n"
               "                        'off': none, clients mount with nolock)\n"
               "  --nlm-grace S         after start, grant only reclaimed locks for S seconds (default 90)\n"
               "  --no-rpcbind          do not register MOUNT, NFS and NLM with the local rpcbind\n"
               "  --engines N           engines (threads), connections spread over them (default 1)\n"
               "  --cores LIST          pin engine i to the i-th core of LIST (e.g. 2,3)\n"
               "  --ro                  read-only export\n"
               "  --no-root-squash      trust uid 0 from clients (default: it becomes --anon-uid)\n"
               "  --all-squash          every caller is --anon-uid/--anon-gid\n"
               "  --anon-uid N, --anon-gid N   the squashed identity (default 65534)\n"
               "  --state-dir DIR       handle key and reply cache (default /var/lib/tern-nfsd)\n"
               "  --drc-slots N         reply cache slots (default 8192; 0: no reply cache)\n"
               "  --arena-mb N          registered memory per engine, MiB (default 128)\n"
               "  --credits N           credits granted per connection (default 64)\n"
               "  --busy-poll           never sleep when idle (default: sleep in epoll when idle)\n"
               "  --stats-interval S    print the counters every S seconds (default: at exit only)\n"
               "  --test-crash-after PROC:N   tests only: SIGKILL this process after recording the\n"
               "                        reply of the N-th PROC call (e.g. mkdir:1) in the reply cache\n"
               "  --version, --help\n"
               "Counters on SIGUSR1 and at exit (SIGINT, SIGTERM); TERN_LOG_LEVEL=info says more.\n");
}

struct Args {
  nfsd::ExportOptions exp;
  std::string listen;
  std::string addr, dev;
  uint32_t port = 20049;
  int mount_port = 20048;  // -1: off
  std::string mount_addr;
  int nlm_port = 0;  // -1: off
  uint32_t nlm_grace = 90;
  bool rpcbind = true;
  uint32_t engines = 1;
  std::vector<int> cores;
  uint32_t drc_slots = 8192;
  uint64_t arena_mb = 128;
  uint32_t credits = 64;
  bool busy = false;
  double stats_interval = 0;
  int crash_proc = -1;
  uint32_t crash_n = 0;
};

int proc_by_name(const std::string& n) {
  for (uint32_t p = 0; p < nfs::kNfs3ProcCount; ++p) {
    std::string name = nfs::nfs3_proc_name(static_cast<nfs::Nfs3Proc>(p));
    std::string lower;
    for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n == name || n == lower) return static_cast<int>(p);
  }
  return -1;
}

// 0: parsed; 1: an error (said); 2: --help/--version (done).
int parse(int argc, char** argv, Args* a) {
  auto need = [&](int& i) -> const char* {
    if (i + 1 >= argc) {
      std::fprintf(stderr, "tern-nfsd: %s needs a value\n", argv[i]);
      return nullptr;
    }
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    const char* v = nullptr;
    uint64_t n = 0;
    auto count = [&](uint64_t max) {
      if ((v = need(i)) == nullptr) return false;
      if (!apps::parse_count(v, max, &n)) {
        std::fprintf(stderr, "tern-nfsd: %s %s: not a number up to %llu\n", f.c_str(), v,
                     static_cast<unsigned long long>(max));
        return false;
      }
      return true;
    };
    if (f == "--help" || f == "-h") {
      usage(stdout);
      return 2;
    } else if (f == "--version") {
      std::printf("tern-nfsd %s\n", TERN_VERSION_STRING);
      return 2;
    } else if (f == "--export") {
      if ((v = need(i)) == nullptr) return 1;
      a->exp.dir = v;
    } else if (f == "--name") {
      if ((v = need(i)) == nullptr) return 1;
      a->exp.name = v;
    } else if (f == "--listen") {
      if ((v = need(i)) == nullptr) return 1;
      a->listen = v;
    } else if (f == "--addr") {
      if ((v = need(i)) == nullptr) return 1;
      a->addr = v;
    } else if (f == "--dev") {
      if ((v = need(i)) == nullptr) return 1;
      a->dev = v;
    } else if (f == "--port") {
      if (!count(65535)) return 1;
      a->port = static_cast<uint32_t>(n);
    } else if (f == "--mount-port") {
      if (i + 1 < argc && std::string(argv[i + 1]) == "off") {
        a->mount_port = -1;
        ++i;
      } else {
        if (!count(65535)) return 1;
        a->mount_port = static_cast<int>(n);
      }
    } else if (f == "--mount-addr") {
      if ((v = need(i)) == nullptr) return 1;
      a->mount_addr = v;
    } else if (f == "--nlm-port") {
      if (i + 1 < argc && std::string(argv[i + 1]) == "off") {
        a->nlm_port = -1;
        ++i;
      } else {
        if (!count(65535)) return 1;
        a->nlm_port = static_cast<int>(n);
      }
    } else if (f == "--nlm-grace") {
      if (!count(3600)) return 1;
      a->nlm_grace = static_cast<uint32_t>(n);
    } else if (f == "--no-rpcbind") {
      a->rpcbind = false;
    } else if (f == "--engines") {
      if (!count(64)) return 1;
      if (n == 0) {
        std::fprintf(stderr, "tern-nfsd: --engines 0\n");
        return 1;
      }
      a->engines = static_cast<uint32_t>(n);
    } else if (f == "--cores") {
      if ((v = need(i)) == nullptr) return 1;
      std::string s = v;
      size_t p = 0;
      while (p <= s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        std::string one = s.substr(p, q - p);
        if (!apps::parse_count(one.c_str(), 4095, &n)) {
          std::fprintf(stderr, "tern-nfsd: --cores %s: '%s' is not a core number\n", v, one.c_str());
          return 1;
        }
        a->cores.push_back(static_cast<int>(n));
        p = q + 1;
      }
    } else if (f == "--ro") {
      a->exp.read_only = true;
    } else if (f == "--no-root-squash") {
      a->exp.squash.root_squash = false;
    } else if (f == "--all-squash") {
      a->exp.squash.all_squash = true;
    } else if (f == "--anon-uid") {
      if (!count(UINT32_MAX)) return 1;
      a->exp.squash.anon_uid = static_cast<uint32_t>(n);
    } else if (f == "--anon-gid") {
      if (!count(UINT32_MAX)) return 1;
      a->exp.squash.anon_gid = static_cast<uint32_t>(n);
    } else if (f == "--state-dir") {
      if ((v = need(i)) == nullptr) return 1;
      a->exp.state_dir = v;
    } else if (f == "--drc-slots") {
      if (!count(1u << 22)) return 1;
      a->drc_slots = static_cast<uint32_t>(n);
    } else if (f == "--arena-mb") {
      if (!count(65536)) return 1;
      if (n < 16) {
        std::fprintf(stderr, "tern-nfsd: --arena-mb %llu: at least 16\n", static_cast<unsigned long long>(n));
        return 1;
      }
      a->arena_mb = n;
    } else if (f == "--credits") {
      if (!count(1024)) return 1;
      if (n == 0) return std::fprintf(stderr, "tern-nfsd: --credits 0\n"), 1;
      a->credits = static_cast<uint32_t>(n);
    } else if (f == "--busy-poll") {
      a->busy = true;
    } else if (f == "--stats-interval") {
      if ((v = need(i)) == nullptr) return 1;
      if (!apps::parse_duration(v, 86400, &a->stats_interval)) {
        std::fprintf(stderr, "tern-nfsd: --stats-interval %s: not a duration\n", v);
        return 1;
      }
    } else if (f == "--test-crash-after") {
      if ((v = need(i)) == nullptr) return 1;
      std::string s = v;
      size_t c = s.find(':');
      a->crash_proc = proc_by_name(s.substr(0, c));
      if (a->crash_proc < 0 || c == std::string::npos ||
          !apps::parse_count(s.c_str() + c + 1, UINT32_MAX, &n) || n == 0) {
        std::fprintf(stderr, "tern-nfsd: --test-crash-after %s: want PROC:N (e.g. mkdir:1)\n", v);
        return 1;
      }
      a->crash_n = static_cast<uint32_t>(n);
    } else {
      std::fprintf(stderr, "tern-nfsd: unknown option %s (--help lists them)\n", f.c_str());
      return 1;
    }
  }
  if (a->exp.dir.empty()) {
    std::fprintf(stderr, "tern-nfsd: --export DIR is required\n");
    return 1;
  }
  if (a->listen.empty()) {
    if (a->addr.empty()) {
      std::fprintf(stderr, "tern-nfsd: give --listen SPEC or --addr IP\n");
      return 1;
    }
    a->listen = "verbs:addr=" + a->addr + ",port=" + std::to_string(a->port) + (a->dev.empty() ? "" : ",dev=" + a->dev);
  } else if (!a->addr.empty() || !a->dev.empty()) {
    std::fprintf(stderr, "tern-nfsd: --listen and --addr/--dev are alternatives\n");
    return 1;
  }
  if (a->mount_addr.empty()) {
    // MOUNT where the RDMA listener is, when that is an IP address.
    const std::string& l = a->listen;
    size_t p = l.find("addr=");
    if (l.starts_with("verbs:") || l.starts_with("mlx5:")) {
      if (p != std::string::npos) a->mount_addr = l.substr(p + 5, l.find(',', p) - (p + 5));
    }
    if (a->mount_addr.empty()) a->mount_addr = "0.0.0.0";
  }
  if (!a->cores.empty() && a->cores.size() < a->engines) {
    std::fprintf(stderr, "tern-nfsd: --cores names %zu cores for %u engines\n", a->cores.size(), a->engines);
    return 1;
  }
  return 0;
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
    std::fprintf(stderr, "tern-nfsd: cannot pin an engine to core %d (it runs unpinned)\n", cpu);
}

struct Worker {
  std::unique_ptr<rpc::Engine> eng;
  std::unique_ptr<nfsd::Nfs3Server> srv;
  std::thread thread;
  Status failed;
};

void print_stats(const std::vector<std::unique_ptr<Worker>>& ws, const nfsd::ReplyCache* drc, const nfsd::Mountd* md) {
  uint64_t calls[nfs::kNfs3ProcCount] = {};
  uint64_t errors = 0, garbage = 0, replays = 0, drops = 0, rbytes = 0, wbytes = 0, rchunks = 0;
  for (const auto& w : ws) {
    const nfsd::Nfs3Stats& s = w->srv->stats();
    for (uint32_t p = 0; p < nfs::kNfs3ProcCount; ++p) calls[p] += s.calls[p].get();
    errors += s.errors.get(), garbage += s.garbage.get(), replays += s.drc_replays.get(), drops += s.drc_drops.get();
    rbytes += s.read_bytes.get(), wbytes += s.write_bytes.get(), rchunks += s.read_chunk_replies.get();
  }
  std::string line = "tern-nfsd: stats:";
  uint64_t all = 0;
  for (uint32_t p = 0; p < nfs::kNfs3ProcCount; ++p) {
    all += calls[p];
    if (calls[p] == 0) continue;
    std::string n = nfs::nfs3_proc_name(static_cast<nfs::Nfs3Proc>(p));
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    line += " " + n + "=" + std::to_string(calls[p]);
  }
  line += " calls=" + std::to_string(all) + " errors=" + std::to_string(errors) + " garbage=" + std::to_string(garbage) +
          " read_bytes=" + std::to_string(rbytes) + " write_bytes=" + std::to_string(wbytes) +
          " read_chunk_replies=" + std::to_string(rchunks) + " drc_replays=" + std::to_string(replays) +
          " drc_drops=" + std::to_string(drops);
  if (drc != nullptr)
    line += " drc_loaded=" + std::to_string(drc->loaded()) + " drc_file_hits=" + std::to_string(drc->hits_from_file());
  if (md != nullptr) line += " mounts=" + std::to_string(md->mounts());
  // The transport's side (summed over engines): chunks as the clients sent
  // them, and the Sends With Invalidate that invalidated a client's rkey.
  uint64_t rch = 0, wch = 0, rpl = 0, swi = 0, rdma_err = 0, bad = 0;
  std::string conns;
  for (size_t i = 0; i < ws.size(); ++i) {
    const rpc::EngineStats& es = ws[i]->eng->stats();
    rch += es.read_chunks.get(), wch += es.write_chunks.get(), rpl += es.reply_chunks.get();
    swi += es.remote_invalidations.get(), rdma_err += es.rdma_errors_sent.get(), bad += es.bad_headers.get();
    conns += (i ? "," : "") + std::to_string(es.connections.get());
  }
  line += " read_chunks=" + std::to_string(rch) + " write_chunks=" + std::to_string(wch) +
          " reply_chunks=" + std::to_string(rpl) + " send_with_inv=" + std::to_string(swi) +
          " rdma_errors=" + std::to_string(rdma_err) + " bad_headers=" + std::to_string(bad);
  line += " connections=" + conns;
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int r = parse(argc, argv, &a); r != 0) return r == 2 ? 0 : 2;
  if (Status s = log_init(); !s) {
    std::fprintf(stderr, "tern-nfsd: %s\n", s.to_string().c_str());
    return 2;
  }
  auto exp = nfsd::Export::open(a.exp);
  if (!exp) {
    std::fprintf(stderr, "tern-nfsd: %s\n", exp.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<nfsd::ReplyCache> drc;
  if (a.drc_slots > 0) {
    auto r = nfsd::ReplyCache::open((*exp)->state_dir() + "/reply-cache", a.drc_slots);
    if (!r) {
      std::fprintf(stderr, "tern-nfsd: %s\n", r.status().to_string().c_str());
      return 1;
    }
    drc = std::move(*r);
  }
  nfsd::ServerConfig cfg;
  cfg.write_verf = nfsd::new_write_verifier();
  cfg.crash_after_proc = a.crash_proc;
  cfg.crash_after_n = a.crash_n;

  rpc::EngineOptions eo;
  eo.arena_bytes = static_cast<size_t>(a.arena_mb) << 20;
  eo.credits = a.credits;
  eo.max_bulk = std::max(cfg.rtmax, cfg.wtmax);
  eo.max_reply = (256u << 10) + 4096;
  std::vector<std::unique_ptr<Worker>> workers;
  for (uint32_t i = 0; i < a.engines; ++i) {
    auto w = std::make_unique<Worker>();
    auto e = rpc::Engine::create(eo);
    if (!e) {
      std::fprintf(stderr, "tern-nfsd: engine %u: %s\n", i, e.status().to_string().c_str());
      return 1;
    }
    w->eng = std::move(*e);
    w->srv = std::make_unique<nfsd::Nfs3Server>(**exp, drc.get(), cfg);
    w->srv->attach(*w->eng);
    workers.push_back(std::move(w));
  }
  // Engine 0 listens; with more engines it deals the connections out.
  std::shared_ptr<rpc::ListenGroup> group = a.engines > 1 ? rpc::ListenGroup::create() : nullptr;
  for (uint32_t i = 0; i < a.engines; ++i) {
    Status s = group ? workers[i]->eng->listen(a.listen, group) : workers[i]->eng->listen(a.listen);
    if (!s) {
      std::fprintf(stderr, "tern-nfsd: cannot listen on %s: %s\n", a.listen.c_str(), s.to_string().c_str());
      return 1;
    }
  }
  std::unique_ptr<nfsd::Mountd> md;
  if (a.mount_port >= 0) {
    auto m = nfsd::Mountd::start(**exp, nfsd::MountdOptions{a.mount_addr, static_cast<uint16_t>(a.mount_port)});
    if (!m) {
      std::fprintf(stderr, "tern-nfsd: %s\n", m.status().to_string().c_str());
      return 1;
    }
    md = std::move(*m);
  }
  // MOUNT over UDP, NLM, and their rpcbind registration (with NFS's).
  nfsd::HostServicesOptions ho;
  ho.rpcbind = a.rpcbind;
  ho.mount_addr = a.mount_addr;
  ho.mount_port = md ? md->port() : 0;
  if (size_t p = a.listen.find("port="); p != std::string::npos && a.mount_addr != "0.0.0.0") {
    ho.nfs_addr = a.mount_addr;  // the RDMA listener's address (see parse())
    ho.nfs_port = static_cast<uint16_t>(std::atoi(a.listen.c_str() + p + 5));
  }
  ho.nlm = a.nlm_port >= 0;
  ho.nlm_opt.addr = a.mount_addr;
  ho.nlm_opt.port = static_cast<uint16_t>(a.nlm_port < 0 ? 0 : a.nlm_port);
  ho.nlm_opt.grace_seconds = static_cast<int>(a.nlm_grace);
  auto hs = nfsd::HostServices::start(**exp, ho);
  if (!hs) {
    std::fprintf(stderr, "tern-nfsd: %s\n", hs.status().to_string().c_str());
    return 1;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::fprintf(stderr, "tern-nfsd: serving %s as %s on %s, %u engine%s%s; MOUNT %s%s%s; %s; reply cache %s\n",
               (*exp)->options().dir.c_str(), (*exp)->name().c_str(), a.listen.c_str(), a.engines,
               a.engines == 1 ? "" : "s", a.busy ? " (busy-polling)" : "", md ? "tcp " : "off",
               md ? a.mount_addr.c_str() : "", md ? (":" + std::to_string(md->port())).c_str() : "",
               (*hs)->describe().c_str(),
               drc ? ((*exp)->state_dir() + "/reply-cache (" + std::to_string(drc->loaded()) + " replies kept)").c_str()
                   : "off");

  for (uint32_t i = 0; i < a.engines; ++i) {
    Worker* w = workers[i].get();
    const int core = a.cores.empty() ? -1 : a.cores[i];
    w->thread = std::thread([w, core, busy = a.busy] {
      if (core >= 0) pin(core);
      auto last_tick = std::chrono::steady_clock::now();
      while (!g_stop.load(std::memory_order_relaxed)) {
        int n = w->eng->poll();
        if (n == 0 && !busy) {
          auto r = w->eng->wait(200);
          if (!r) {
            w->failed = r.status();
            g_stop.store(true);
            break;
          }
        }
        auto now = std::chrono::steady_clock::now();
        if (now - last_tick > std::chrono::seconds(1)) {
          last_tick = now;
          w->srv->tick();
        }
      }
    });
  }
  auto last_stats = std::chrono::steady_clock::now();
  while (!g_stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    bool dump = g_dump.exchange(false);
    if (a.stats_interval > 0 &&
        std::chrono::steady_clock::now() - last_stats > std::chrono::duration<double>(a.stats_interval)) {
      last_stats = std::chrono::steady_clock::now();
      dump = true;
    }
    if (dump) print_stats(workers, drc.get(), md.get());
  }
  for (auto& w : workers) w->thread.join();
  int rc = 0;
  for (auto& w : workers)
    if (!w->failed.is_ok()) {
      std::fprintf(stderr, "tern-nfsd: %s\n", w->failed.to_string().c_str());
      rc = 1;
    }
  print_stats(workers, drc.get(), md.get());
  std::fprintf(stderr, "tern-nfsd: %s\n", (*hs)->stats().c_str());
  hs->reset();  // unregistered from rpcbind first
  md.reset();
  workers.clear();  // each engine completes its calls and closes its connections
  return rc;
}
