// tern-nfsd: an NFSv3 server (RFC 1813) over RPC-over-RDMA on Tern's
// engine, serving the directories of an exports file (or one, --export),
// that the Linux kernel's NFS client mounts:
//
//   tern-nfsd --exports /etc/tern-nfsd/exports --listen verbs:addr=10.0.0.1,port=20050 --mount-port 20048
//   mount -t nfs -o vers=3,proto=rdma,port=20050,mountport=20048,mountproto=tcp 10.0.0.1:/srv/data /mnt
//
// One engine per thread (--engines, pinned with --cores); the connections
// (a client's nconnect=N among them) are spread over them. MOUNT v3 is
// served over TCP on --mount-port. SIGHUP rereads the exports file, SIGUSR1
// prints the counters, SIGTERM/SIGINT stop it. docs/nfs-gateway.md says
// how to run it (a systemd unit: apps/tern-nfsd.service.in), what it
// serves and what it does not.
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/version.h"
#include "cli_args.h"
#include "engine/engine.h"
#include "nfs/nfs3_types.h"
#include "nfsd/export.h"
#include "nfsd/export_table.h"
#include "nfsd/exports_file.h"
#include "nfsd/lock_file.h"
#include "nfsd/host_services.h"
#include "nfsd/mountd.h"
#include "nfsd/nfs3_server.h"
#include "nfsd/published_exports.h"
#include "nfsd/reply_cache.h"
#include "nfsd/state_dir.h"
#include "telemetry/metrics_exporter.h"
#include "telemetry/socket_thread.h"

using namespace tern;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_dump{false};
std::atomic<bool> g_reload{false};

void on_signal(int sig) {
  if (sig == SIGUSR1) g_dump.store(true);
  else if (sig == SIGHUP) g_reload.store(true);
  else g_stop.store(true);
}

// One line of tern-nfsd's own on stderr, whatever TERN_LOG_LEVEL says (what
// it serves, its counters, a reload's outcome), in the project's log
// format: a UTC timestamp, "tern", the level, "tern-nfsd", the message.
void say(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void say(LogLevel level, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  // The program's name is the record's component, said once: lib/nfsd's
  // messages do not name it (test error_wording).
  const char* msg = buf;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  LogRecord rec{level, "tern-nfsd", nullptr, msg,
                static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec)};
  char line[2304];
  format_log_line(rec, line, sizeof line);
  std::fprintf(stderr, "%s\n", line);
}

struct Args {
  nfsd::ExportOptions exp;
  std::string exports_file;
  std::string pidfile;
  std::string metrics;  // --metrics: Prometheus (telemetry/metrics_exporter.h)
  std::string telemetry;  // --telemetry, else $TERN_TELEMETRY_SOCK
  bool export_flags = false;  // --name, --ro, squash flags: --export's alone
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
  nfsd::StorageOptions storage;
  bool group_commit = true;
  uint32_t drc_slots = 8192;
  uint64_t arena_mb = 128;
  uint32_t credits = 64;
  // The engine's per-peer bounds (EngineOptions); defaults are the engine's.
  uint32_t max_connections = rpc::EngineOptions{}.max_connections;
  uint32_t max_connections_per_peer = rpc::EngineOptions{}.max_connections_per_peer;
  uint32_t idle_reap_ms = rpc::EngineOptions{}.idle_reap_ms;
  uint32_t rw_timeout_ms = rpc::EngineOptions{}.server_rw_timeout_ms;
  bool busy = false;
  bool caller_ring = false;
  uint32_t spin_us = 0;
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

// The command line, as one table (apps/option_parser.h): --help is printed
// from it, and every option takes --opt=value as well as --opt value.
// 0: parsed; 1: a usage error (said, one line); 2: --help/--version (done).
int parse(int argc, char** argv, Args* a) {
  apps::OptionParser p("tern-nfsd",
                       "(--exports FILE | --export DIR) (--listen SPEC | --addr IP [--port N] [--dev NAME])\n"
                       "                 [options]");
  p.version(std::string("tern-nfsd ") + TERN_VERSION_STRING);
  // "N" or "off" (-1): the MOUNT and NLM ports.
  auto port_or_off = [](int* out) {
    return [out](std::string_view v, std::string*) {
      int64_t n = 0;
      if (v == "off") return *out = -1, true;
      if (!apps::parse_integer(v, 0, 65535, &n)) return false;
      *out = static_cast<int>(n);
      return true;
    };
  };
  p.text("exports", "FILE",
         "the exports, as exports(5) writes them: a path per line, its clients\n"
         "(*, an address, address/prefix, localhost) with their options\n"
         "(ro, rw, root_squash, no_root_squash, all_squash, anonuid=, anongid=,\n"
         "sec=sys, fsid=N); reread on SIGHUP",
         &a->exports_file)
      .once();
  p.text("export", "DIR", "one directory served to every client (the options below say how)", &a->exp.dir).once();
  p.text("name", "PATH", "the path clients mount (--export; default: DIR)", &a->exp.name);
  p.text("listen", "SPEC",
         "device spec to listen on: verbs:addr=IP,port=N[,dev=NAME] or\n"
         "shm:path=SOCKET (tests)",
         &a->listen);
  p.text("addr", "IP", "with --port and --dev: the same as --listen verbs:addr=IP,port=N,dev=NAME", &a->addr);
  p.integer("port", "N", "the RDMA port with --addr (default 20049)", 0, 65535, &a->port);
  p.text("dev", "NAME", "the RDMA device with --addr", &a->dev);
  p.custom("mount-port", "N",
           "MOUNT v3 over TCP on this port (default 20048; 0: any free one;\n"
           "'off': none)",
           "a port in [0, 65535] or 'off'", port_or_off(&a->mount_port));
  p.text("mount-addr", "IP",
         "address MOUNT listens on (default: --addr's; 127.0.0.1 with a shm:\n"
         "listener; else 0.0.0.0)",
         &a->mount_addr);
  p.custom("nlm-port", "N",
           "NLM v4 locks over TCP and UDP on this port (default 0: any free one;\n"
           "'off': none, clients mount with nolock)",
           "a port in [0, 65535] or 'off'", port_or_off(&a->nlm_port));
  p.integer("nlm-grace", "S",
            "after start, grant only reclaimed locks for S seconds (default 90);\n"
            "the clients that held locks are told to reclaim them (SM_NOTIFY)",
            0, 3600, &a->nlm_grace);
  p.flag("no-rpcbind", "do not register MOUNT, NFS and NLM with the local rpcbind", &a->rpcbind, false);
  p.count("engines", "N", "engines (threads), connections spread over them (default 1)", 1, 64, &a->engines);
  p.integers("cores", "LIST", "pin engine i to the i-th core of LIST (e.g. 2,3)", 0, 4095, 1, 4096, &a->cores);
  p.flag("ro", "read-only export (--export)", &a->exp.read_only);
  p.flag("no-root-squash", "trust uid 0 from clients (--export; default: it becomes --anon-uid)",
         &a->exp.squash.root_squash, false);
  p.flag("all-squash", "every caller is --anon-uid/--anon-gid (--export)", &a->exp.squash.all_squash);
  // -1 is no identity (nfsd/creds.h): not a value to squash to.
  p.integer("anon-uid", "N", "the squashed identity (--export; default 65534)", 0, UINT32_MAX - 1,
            &a->exp.squash.anon_uid);
  p.integer("anon-gid", "N", "the squashed group (--export; default 65534)", 0, UINT32_MAX - 1, &a->exp.squash.anon_gid);
  p.text("state-dir", "DIR",
         "handle key and reply cache (default /var/lib/tern-nfsd); one instance\n"
         "per state directory (locked)",
         &a->exp.state_dir);
  p.custom("metrics", "PORT|ADDR:PORT|FILE",
           "Prometheus metrics (per-procedure latency, per-connection and\n"
           "engine counters) at http://127.0.0.1:PORT/metrics (ADDR:PORT to\n"
           "listen elsewhere), or a file for node_exporter's textfile collector",
           "a port, ADDR:PORT or a file path", [a](std::string_view v, std::string*) {
             if (!tern::telemetry::metrics_options_from_arg(v)) return false;
             a->metrics = std::string(v);
             return true;
           });
  p.text("pidfile", "PATH", "write the pid there once serving (locked; removed at a clean exit)", &a->pidfile);
  p.text("telemetry", "PATH",
         "answer telemetry (counters, per-procedure latency) on this Unix socket\n"
         "(default $TERN_TELEMETRY_SOCK): tern-stats -s PATH /tern/procs",
         &a->telemetry);
  p.count("drc-slots", "N", "reply cache slots (default 8192; 0: no reply cache)", 0, 1u << 22, &a->drc_slots);
  p.count("arena-mb", "N", "registered memory per engine, MiB (default 128)", 16, 65536, &a->arena_mb);
  p.count("credits", "N", "credits granted per connection (default 64)", 1, 1024, &a->credits);
  p.count("max-connections", "N", "connections per engine (default 1024)", 1, 1u << 20, &a->max_connections);
  p.count("max-connections-per-peer", "N",
          "connections one client (address) may hold per engine\n"
          "(default 0: no limit of its own; see docs/security.md)",
          0, 1u << 20, &a->max_connections_per_peer);
  p.integer("idle-reap-ms", "N",
            "with the table full, a client under its fair share gets an\n"
            "idle (N ms) connection of the client holding the most\n"
            "(default 10000; 0: never)",
            0, 86400000, &a->idle_reap_ms);
  p.integer("rw-timeout-ms", "N",
            "a client that does not complete a READ of its chunks or take a\n"
            "reply within N ms loses that connection (default 5000; 0: never)",
            0, 86400000, &a->rw_timeout_ms);
  p.flag("busy-poll", "never sleep when idle (default: sleep in epoll when idle)", &a->busy);
  using Mode = nfsd::StorageOptions::Mode;
  static_assert(static_cast<int>(Mode::kAuto) == 0 && static_cast<int>(Mode::kUring) == 1 &&
                static_cast<int>(Mode::kThreads) == 2 && static_cast<int>(Mode::kSync) == 3);
  p.choice("storage", "MODE",
           "where READs that miss the page cache, FILE_SYNC/DATA_SYNC WRITEs\n"
           "and COMMITs wait: auto (io_uring, else worker threads; default),\n"
           "uring, threads, sync (on the engine's thread, as before)",
           {"auto", "uring", "threads", "sync"}, &a->storage.mode);
  p.count("storage-inflight", "N", "storage operations in flight per engine (default 64)", 1, 4096,
          &a->storage.max_in_flight);
  p.count("storage-per-peer", "N", "... and per client (default 16; less when clients share the engine)", 1, 4096,
          &a->storage.max_per_peer);
  p.choice("caller-ring", "on|off",
           "MKDIR, SYMLINK, REMOVE, RMDIR, RENAME, LINK as the caller on the\n"
           "storage ring under an io_uring personality (default off: on the\n"
           "caller pool's threads)",
           {"off", "on"}, &a->caller_ring);
  p.integer("spin-us", "N",
            "in wait mode, poll up to N us before sleeping while the engine's\n"
            "own operations (caller jobs, storage) are in flight (default 0)",
            0, 1000000, &a->spin_us);
  p.choice("group-commit", "on|off",
           "stable WRITEs and COMMITs of a file share one fsync (default on;\n"
           "off: each stable WRITE syncs itself, RWF_SYNC, as before)",
           {"off", "on"}, &a->group_commit);
  p.duration("stats-interval", "S", "print the counters every S seconds (default: at exit only)", 86400,
             &a->stats_interval);
  p.custom("test-crash-after", "PROC:N",
           "tests only: SIGKILL this process after recording the\n"
           "reply of the N-th PROC call (e.g. mkdir:1) in the reply cache",
           "PROC:N (e.g. mkdir:1)", [a](std::string_view v, std::string*) {
             size_t c = v.find(':');
             int64_t n = 0;
             if (c == std::string_view::npos) return false;
             a->crash_proc = proc_by_name(std::string(v.substr(0, c)));
             if (a->crash_proc < 0 || !apps::parse_integer(v.substr(c + 1), 1, UINT32_MAX, &n)) return false;
             a->crash_n = static_cast<uint32_t>(n);
             return true;
           });
  p.epilogue(
      "Counters on SIGUSR1 and at exit (SIGINT, SIGTERM); SIGHUP rereads --exports FILE (connections\n"
      "stay); TERN_LOG_LEVEL=info says more. Log lines: UTC time, level, what (docs/observability.md).\n"
      "Exit: 0 after a clean stop, 1 when it cannot serve, 2 bad usage.");
  switch (p.parse(argc, argv)) {
    case apps::OptionParser::Outcome::kRun: break;
    case apps::OptionParser::Outcome::kHelp: p.print_help(stdout); return 2;
    case apps::OptionParser::Outcome::kVersion: std::printf("tern-nfsd %s\n", TERN_VERSION_STRING); return 2;
    case apps::OptionParser::Outcome::kUsageError:
      // One log line, as every other refusal to start.
      say(LogLevel::kError, "%s (--help lists the options)", p.error().c_str());
      return 1;
  }
  for (const char* f : {"name", "ro", "no-root-squash", "all-squash", "anon-uid", "anon-gid"})
    if (p.given(f)) a->export_flags = true;
  if (a->exp.dir.empty() && a->exports_file.empty()) {
    say(LogLevel::kError, "--exports FILE or --export DIR is required");
    return 1;
  }
  if (!a->exp.dir.empty() && !a->exports_file.empty()) {
    say(LogLevel::kError, "--exports FILE and --export DIR are alternatives (list DIR in FILE)");
    return 1;
  }
  if (!a->exports_file.empty() && a->export_flags) {
    say(LogLevel::kError,
        "--name, --ro, --no-root-squash, --all-squash, --anon-uid and --anon-gid go with "
        "--export DIR; with --exports FILE write them in the file (ro, no_root_squash, all_squash, "
        "anonuid=, anongid=)");
    return 1;
  }
  if (a->listen.empty()) {
    if (a->addr.empty()) {
      say(LogLevel::kError, "give --listen SPEC or --addr IP");
      return 1;
    }
    a->listen = "verbs:addr=" + a->addr + ",port=" + std::to_string(a->port) + (a->dev.empty() ? "" : ",dev=" + a->dev);
  } else if (!a->addr.empty() || !a->dev.empty()) {
    say(LogLevel::kError, "--listen and --addr/--dev are alternatives");
    return 1;
  }
  // tern-nfsd sets its umask to 0 (clients send the modes they want), so a
  // shm socket would be born 0777: anyone on the host could connect. Unless
  // the spec says otherwise, only tern-nfsd's own user may.
  if (a->listen.starts_with("shm:") && a->listen.find("mode=") == std::string::npos) a->listen += ",mode=0600";
  if (a->mount_addr.empty()) {
    // MOUNT where the RDMA listener is, when that is an IP address.
    const std::string& l = a->listen;
    size_t p = l.find("addr=");
    if (l.starts_with("verbs:") || l.starts_with("mlx5:")) {
      if (p != std::string::npos) a->mount_addr = l.substr(p + 5, l.find(',', p) - (p + 5));
    }
    // A shm listener serves this host's processes only: MOUNT with it.
    if (a->mount_addr.empty() && l.starts_with("shm:")) a->mount_addr = "127.0.0.1";
    if (a->mount_addr.empty()) a->mount_addr = "0.0.0.0";
  }
  if (!a->cores.empty() && a->cores.size() < a->engines) {
    say(LogLevel::kError, "--cores names %zu cores for %u engines", a->cores.size(), a->engines);
    return 1;
  }
  return 0;
}

// The exports in force: the file's (read again on each reload), or the one
// --export DIR names.
Result<std::shared_ptr<const nfsd::ExportTable>> load_exports(const Args& a,
                                                              const std::shared_ptr<const nfsd::StateDir>& state) {
  std::vector<nfsd::ExportOptions> list;
  if (!a.exports_file.empty()) {
    auto r = nfsd::read_exports_file(a.exports_file);
    if (!r) return r.status();
    list = std::move(*r);
  } else {
    list.push_back(a.exp);
  }
  return nfsd::ExportTable::open(list, state);
}

// "/srv/a as /a, /srv/b" for the log: what each export serves and as what.
std::string describe(const nfsd::ExportTable& t) {
  std::string s;
  for (const auto& e : t.exports()) {
    if (!s.empty()) s += ", ";
    s += e->options().dir;
    if (e->name() != e->options().dir) s += " as " + e->name();
  }
  return s.empty() ? "nothing" : s;
}

// SIGHUP: the exports file read and checked again, and published whole if
// it is good; the engines take it up between calls, their connections
// untouched (published_exports.h). A file that does not load leaves the
// table in force as it is, and says why.
void reload(const Args& a, const std::shared_ptr<const nfsd::StateDir>& state, nfsd::PublishedExports* exports) {
  if (a.exports_file.empty()) {
    say(LogLevel::kWarn, "SIGHUP: nothing to reload (serving --export %s; --exports FILE can be reloaded)",
        a.exp.dir.c_str());
    return;
  }
  auto t = load_exports(a, state);
  if (!t) {
    say(LogLevel::kError, "reload of %s refused, still serving %s: %s", a.exports_file.c_str(),
        describe(*exports->current()).c_str(), t.status().message().c_str());
    return;
  }
  const uint64_t gen = exports->publish(*t);
  say(LogLevel::kInfo, "reloaded %s: serving %s (exports generation %llu)", a.exports_file.c_str(),
      describe(**t).c_str(), static_cast<unsigned long long>(gen));
}

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
    say(LogLevel::kWarn, "cannot pin an engine to core %d (it runs unpinned)", cpu);
}

struct Worker {
  std::unique_ptr<rpc::Engine> eng;
  std::unique_ptr<nfsd::Nfs3Server> srv;
  std::thread thread;
  Status failed;
};

void print_stats(const std::vector<std::unique_ptr<Worker>>& ws, const nfsd::ReplyCache* drc, const nfsd::Mountd* md) {
  uint64_t calls[nfs::kNfs3ProcCount] = {};
  uint64_t errors = 0, garbage = 0, replays = 0, drops = 0, rbytes = 0, wbytes = 0, rchunks = 0, refused = 0;
  uint64_t nowait = 0, deferred = 0, io_queued = 0, io_failed = 0, caller_jobs = 0, caller_queued = 0, wnowait = 0;
  uint64_t caller_ring = 0, personalities = 0, personality_failed = 0;
  uint64_t syncs = 0, synced = 0, io_peak = 0;
  const char* backend = "";
  for (const auto& w : ws) {
    const nfsd::Nfs3Stats& s = w->srv->stats();
    for (uint32_t p = 0; p < nfs::kNfs3ProcCount; ++p) calls[p] += s.calls[p].get();
    errors += s.errors.get(), garbage += s.garbage.get(), replays += s.drc_replays.get(), drops += s.drc_drops.get();
    refused += s.refused.get();
    nowait += s.read_nowait.get(), deferred += s.storage_deferred.get();
    const nfsd::StorageStats& io = w->srv->storage().stats();
    io_queued += io.queued.get(), io_failed += io.failed.get();
    io_peak = std::max<uint64_t>(io_peak, io.peer_peak.get());
    backend = w->srv->storage().backend();
    caller_jobs += s.caller_deferred.get(), wnowait += s.write_nowait.get();
    caller_queued += w->srv->callers().stats().queued.get();
    caller_ring += s.caller_ring.get(), personalities += s.personalities.get();
    personality_failed += s.personality_failed.get();
    if (const nfsd::SyncBatches* sb = w->srv->sync_batches(); sb != nullptr)
      syncs += sb->stats().syncs.get(), synced += sb->stats().waiters.get();
    rbytes += s.read_bytes.get(), wbytes += s.write_bytes.get(), rchunks += s.read_chunk_replies.get();
  }
  std::string line = "stats:";
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
          " drc_drops=" + std::to_string(drops) + " refused=" + std::to_string(refused) +
          " storage=" + backend + " storage_deferred=" + std::to_string(deferred) +
          " read_nowait=" + std::to_string(nowait) + " storage_queued=" + std::to_string(io_queued) +
          " storage_failed=" + std::to_string(io_failed) + " storage_peer_peak=" + std::to_string(io_peak) +
          " write_nowait=" + std::to_string(wnowait) +
          " caller_jobs=" + std::to_string(caller_jobs) + " caller_queued=" + std::to_string(caller_queued) +
          " caller_ring=" + std::to_string(caller_ring) + " personalities=" + std::to_string(personalities) +
          " personality_failed=" + std::to_string(personality_failed) +
          " syncs=" + std::to_string(syncs) + " synced=" + std::to_string(synced);
  if (drc != nullptr)
    line += " drc_loaded=" + std::to_string(drc->loaded()) + " drc_file_hits=" + std::to_string(drc->hits_from_file());
  if (md != nullptr)
    line += " mounts=" + std::to_string(md->mounts()) + " mount_timeouts=" + std::to_string(md->timed_out()) +
            " mount_replaced=" + std::to_string(md->replaced());
  // The transport's side (summed over engines): chunks as the clients sent
  // them, and the Sends With Invalidate that invalidated a client's rkey.
  uint64_t rch = 0, wch = 0, rpl = 0, swi = 0, rdma_err = 0, bad = 0;
  std::string conns;
  for (size_t i = 0; i < ws.size(); ++i) {
    const rpc::EngineStats& es = ws[i]->eng->stats();
    rch += es.read_chunks.get(), wch += es.write_chunks.get(), rpl += es.reply_chunks.get();
    swi += es.remote_invalidations.get(), rdma_err += es.rdma_errors_sent.get(), bad += es.bad_headers.get();
    if (i > 0) conns += ',';
    conns += std::to_string(es.connections.get());
  }
  line += " read_chunks=" + std::to_string(rch) + " write_chunks=" + std::to_string(wch) +
          " reply_chunks=" + std::to_string(rpl) + " send_with_inv=" + std::to_string(swi) +
          " rdma_errors=" + std::to_string(rdma_err) + " bad_headers=" + std::to_string(bad);
  line += " connections=" + conns;
  say(LogLevel::kInfo, "%s", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int r = parse(argc, argv, &a); r != 0) return r == 2 ? 0 : 2;
  if (Status s = log_init(); !s) {
    say(LogLevel::kError, "%s", s.message().c_str());
    return 2;
  }
  // The pidfile first, locked for the process's life: a live instance
  // holding it keeps this one from starting. The pid goes in once serving.
  std::unique_ptr<nfsd::LockFile> pidfile;
  if (!a.pidfile.empty()) {
    auto p = nfsd::LockFile::acquire(a.pidfile, "the pidfile " + a.pidfile);
    if (!p) {
      say(LogLevel::kError, "%s", p.status().to_string().c_str());
      return 1;
    }
    pidfile = std::move(*p);
  }
  // Telemetry answers from a thread of its own, off the engines' loops.
  auto tel = telemetry::start_socket_thread(a.telemetry);
  if (!tel) {
    say(LogLevel::kError, "--telemetry: %s", tel.status().to_string().c_str());
    return 1;
  }
  // Removed however main returns, failed start included, while still
  // locked (destroyed before `pidfile`): nobody else can have made a new
  // file of that name yet.
  struct RemovePidfile {
    nfsd::LockFile* f;
    ~RemovePidfile() {
      if (f != nullptr) f->remove();
    }
  } remove_pidfile{pidfile.get()};
  // The state directory next: its lock says whether another instance owns it.
  auto state = nfsd::StateDir::open(a.exp.state_dir);
  if (!state) {
    say(LogLevel::kError, "%s", state.status().to_string().c_str());
    return 1;
  }
  auto table = load_exports(a, *state);
  if (!table) {
    say(LogLevel::kError, "%s", table.status().to_string().c_str());
    return 1;
  }
  nfsd::PublishedExports exports(*table);
  std::unique_ptr<nfsd::ReplyCache> drc;
  if (a.drc_slots > 0) {
    auto r = nfsd::ReplyCache::open((*state)->reply_cache_path(), a.drc_slots);
    if (!r) {
      say(LogLevel::kError, "%s", r.status().to_string().c_str());
      return 1;
    }
    drc = std::move(*r);
  }
  nfsd::ServerConfig cfg;
  cfg.write_verf = nfsd::new_write_verifier();
  cfg.crash_after_proc = a.crash_proc;
  cfg.crash_after_n = a.crash_n;
  cfg.storage = a.storage;
  cfg.caller_ring = a.caller_ring;
  cfg.group_commit = a.group_commit;

  rpc::EngineOptions eo;
  eo.arena_bytes = static_cast<size_t>(a.arena_mb) << 20;
  eo.credits = a.credits;
  eo.max_connections = a.max_connections;
  eo.max_connections_per_peer = a.max_connections_per_peer;
  eo.idle_reap_ms = a.idle_reap_ms;
  eo.server_rw_timeout_ms = a.rw_timeout_ms;
  eo.max_bulk = std::max(cfg.rtmax, cfg.wtmax);
  eo.max_reply = (256u << 10) + 4096;
  std::vector<std::unique_ptr<Worker>> workers;
  for (uint32_t i = 0; i < a.engines; ++i) {
    auto w = std::make_unique<Worker>();
    auto e = rpc::Engine::create(eo);
    if (!e) {
      say(LogLevel::kError, "engine %u: %s", i, e.status().to_string().c_str());
      return 1;
    }
    w->eng = std::move(*e);
    w->srv = std::make_unique<nfsd::Nfs3Server>(exports, drc.get(), cfg);
    w->srv->attach(*w->eng);
    workers.push_back(std::move(w));
  }
  // Prometheus, from a thread of its own (never an engine's); declared after
  // the engines, so stopped (and the file written a last time) before them.
  std::unique_ptr<telemetry::MetricsExporter> metrics;
  if (!a.metrics.empty()) {
    auto mo = telemetry::metrics_options_from_arg(a.metrics);
    auto m = mo ? telemetry::MetricsExporter::start(*mo) : Result<std::unique_ptr<telemetry::MetricsExporter>>(mo.status());
    if (!m) {
      say(LogLevel::kError, "%s", m.status().to_string().c_str());
      return 1;
    }
    metrics = std::move(*m);
  }
  // Engine 0 listens; with more engines it deals the connections out.
  std::shared_ptr<rpc::ListenGroup> group = a.engines > 1 ? rpc::ListenGroup::create() : nullptr;
  for (uint32_t i = 0; i < a.engines; ++i) {
    Status s = group ? workers[i]->eng->listen(a.listen, group) : workers[i]->eng->listen(a.listen);
    if (!s) {
      say(LogLevel::kError, "cannot listen on %s: %s", a.listen.c_str(), s.to_string().c_str());
      return 1;
    }
  }
  std::unique_ptr<nfsd::Mountd> md;
  if (a.mount_port >= 0) {
    auto m = nfsd::Mountd::start(exports, nfsd::MountdOptions{a.mount_addr, static_cast<uint16_t>(a.mount_port)});
    if (!m) {
      say(LogLevel::kError, "%s", m.status().to_string().c_str());
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
  ho.nlm_opt.notify.path = (*state)->lock_holders_path();
  auto hs = nfsd::HostServices::start(exports, ho);
  if (!hs) {
    say(LogLevel::kError, "%s", hs.status().to_string().c_str());
    return 1;
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  say(LogLevel::kInfo, "serving %s on %s, %u engine%s%s; MOUNT %s%s%s; %s; reply cache %s",
               describe(**table).c_str(), a.listen.c_str(), a.engines, a.engines == 1 ? "" : "s",
               a.busy ? " (busy-polling)" : "", md ? "tcp " : "off", md ? a.mount_addr.c_str() : "",
               md ? (":" + std::to_string(md->port())).c_str() : "", (*hs)->describe().c_str(),
               drc ? ((*state)->reply_cache_path() + " (" + std::to_string(drc->loaded()) + " replies kept)").c_str()
                   : "off");

  if (pidfile) {
    if (Status s = pidfile->write_pid(); !s) {
      say(LogLevel::kError, "%s", s.to_string().c_str());
      return 1;
    }
  }

  for (uint32_t i = 0; i < a.engines; ++i) {
    Worker* w = workers[i].get();
    const int core = a.cores.empty() ? -1 : a.cores[i];
    w->thread = std::thread([w, core, busy = a.busy, spin = std::chrono::microseconds(a.spin_us)] {
      if (core >= 0) pin(core);
      // Named for perf's --comm and /proc's task list (the caller pool's
      // and storage workers are named too): where a call's time goes.
      pthread_setname_np(pthread_self(), "tern-engine");
      // The engine's clock (base/clock.h: the TSC where it can be), not
      // steady_clock: where the kernel's clock is a system call (an
      // emulated guest's hpet), a read per pass was one per call or more.
      // And only every kTickStride passes, a sleep counting for 16: the
      // second's tick is late by at most a few passes or ~0.8 s idle.
      constexpr uint32_t kTickStride = 64;
      const uint64_t second = ticks_from_ns(1'000'000'000), spin_ticks = ticks_from_ns(spin.count() * 1000ull);
      uint64_t last_tick = now_ticks();
      uint32_t stride = 0;
      // Since when the engine has had nothing to do while its own
      // operations (caller jobs, storage) were in flight (--spin-us).
      uint64_t idle_since = 0;
      bool idle = false;
      while (!g_stop.load(std::memory_order_relaxed)) {
        int n = w->eng->poll();
        if (n > 0) idle = false;
        if (n == 0 && !busy && spin_ticks > 0 && w->srv->work_in_flight()) {
          // Their completion is near: polling for it costs less than
          // arming, sleeping and being woken through the eventfd.
          const uint64_t t = now_ticks();
          if (!idle) idle = true, idle_since = t;
          if (t - idle_since < spin_ticks) continue;
        }
        if (n == 0 && !busy) {
          idle = false;
          stride += 15;
          auto r = w->eng->wait(200);
          if (!r) {
            w->failed = r.status();
            g_stop.store(true);
            break;
          }
        }
        if (++stride < kTickStride) continue;
        stride = 0;
        if (const uint64_t now = now_ticks(); now - last_tick > second) {
          last_tick = now;
          w->srv->tick();
        }
      }
    });
  }
  auto last_stats = std::chrono::steady_clock::now();
  while (!g_stop.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (g_reload.exchange(false)) reload(a, *state, &exports);
    bool dump = g_dump.exchange(false);
    if (a.stats_interval > 0 &&
        std::chrono::steady_clock::now() - last_stats > std::chrono::duration<double>(a.stats_interval)) {
      last_stats = std::chrono::steady_clock::now();
      dump = true;
    }
    if (dump) {
      print_stats(workers, drc.get(), md.get());
      say(LogLevel::kInfo, "%s", (*hs)->stats().c_str());
    }
  }
  for (auto& w : workers) w->thread.join();
  int rc = 0;
  for (auto& w : workers)
    if (!w->failed.is_ok()) {
      say(LogLevel::kError, "%s", w->failed.to_string().c_str());
      rc = 1;
    }
  print_stats(workers, drc.get(), md.get());
  say(LogLevel::kInfo, "%s", (*hs)->stats().c_str());
  hs->reset();  // unregistered from rpcbind first
  md.reset();
  workers.clear();  // each engine completes its calls and closes its connections
  return rc;
}
