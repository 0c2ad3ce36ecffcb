// tern-nfs-read: reads one file from an NFS server over RPC-over-RDMA with
// Tern's engine, the way a person checks that a server, a fabric and Tern
// work together: connect, NFSv4 NULL, resolve the path (PUTROOTFH + LOOKUP
// per component), GETATTR, then READs through write chunks with --qd in
// flight. Reports bytes, time, MB/s, per-READ latency (p50/p99) and how the
// chunks' rkeys were invalidated; --verify compares every byte with a local
// copy. NFSv4.0 without OPEN (READ-bypass stateid, RFC 7530 §9.1.4.3).
// Every call has a deadline (--timeout), READs included; NFS4ERR_DELAY is
// waited out with backoff and a lost connection is resumed (NfsClient), and
// the report says how often that happened.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/version.h"
#include "cli_args.h"
#include "nfs/fattr4.h"
#include "nfs/nfs_client.h"
#include "nfs/nfs_program.h"
#include "perf_stats.h"
#include "telemetry/socket_thread.h"

using namespace tern;
using namespace tern::nfs;
namespace apps = tern::apps;

namespace {

struct Args {
  std::string server, dev, path, verify;
  std::string telemetry;  // --telemetry, else $TERN_TELEMETRY_SOCK
  uint16_t port = 20049;
  uint32_t vers = 4;
  uint64_t chunk = 1u << 20;
  uint32_t qd = 4;
  uint32_t timeout_ms = 10000;
  apps::OutFile json;
  bool quiet = false;
  bool busy_poll = false;
};

// The command line, as one table (apps/option_parser.h) that parses it and
// prints --help. Returns -1 to go on, else the exit status (0 after --help,
// 2 bad usage, said).
int parse(int argc, char** argv, Args* a) {
  apps::OptionParser p("tern-nfs-read", "--server ADDR[:PORT] --path /dir/file [options]");
  p.version(std::string("tern-nfs-read ") + tern::version());
  p.heading(
      "\n"
      "Reads a file from an NFS/RDMA server (e.g. Linux nfsd with an rdma listener)\n"
      "through RDMA write chunks and reports throughput and latency. Flags mean what\n"
      "they mean in tern-perf: sizes take K/M suffixes, durations are seconds or\n"
      "carry a unit (500ms), latencies are in ns, \"-\" is stdout.\n");
  p.custom("server", "ADDR[:PORT]",
           "the server: an IPv4 address or name, an IPv6 address\n"
           "([fe80::1]:20049, or bare without a port); port default\n"
           "20049 (NFS/RDMA)",
           "ADDR, ADDR:PORT, [IPV6] or [IPV6]:PORT (port 1 to 65535)",
           [a](std::string_view v, std::string*) { return apps::parse_host_port(v, &a->server, &a->port); });
  p.text("path", "PATH", "file to read, from the server's NFSv4 root (its fsid=0 export)", &a->path);
  p.text("dev", "NAME|SPEC",
         "RDMA device (default: the one that reaches ADDR): a name\n"
         "(mlx5_0), or a device spec (verbs:dev=rxe0,mw=off) that the\n"
         "server's addr= and port= are added to",
         &a->dev);
  p.custom("vers", "4", "NFS version; only 4 (4.0, no OPEN) reads files", "4 (NFSv4.0 READ is what is implemented)",
           [a](std::string_view v, std::string*) { return v == "4" ? (a->vers = 4, true) : false; });
  p.count("size", "N",
          "bytes per READ (default 1M; --chunk is the same), capped by\n"
          "the server's maxread and the engine's 1 MiB chunk limit",
          4096, 1u << 30, &a->chunk)
      .shorthand('s');
  p.count("chunk", "N", "the same as --size", 4096, 1u << 30, &a->chunk);
  p.count("qd", "N", "READs in flight (1 to 64, default 4)", 1, 64, &a->qd).shorthand('q');
  p.text("verify", "FILE", "compare every byte with this local file", &a->verify);
  p.text("json", "FILE",
         "also write the result as one JSON object (\"-\": stdout, and\n"
         "the human report goes to stderr)",
         &a->json.name);
  p.custom("timeout", "S",
           "deadline of each call -- every READ included, with its\n"
           "NFS4ERR_DELAY retries and any reconnect -- and of\n"
           "connecting (default 10)",
           "a duration of 1ms to 3600s (10, 500ms)", [a](std::string_view v, std::string*) {
             double secs = 0;
             if (!apps::parse_duration(std::string(v).c_str(), 3600, &secs) || secs < 0.001) return false;
             a->timeout_ms = static_cast<uint32_t>(secs * 1000 + 0.5);
             return true;
           });
  p.flag("quiet", "no progress line", &a->quiet);
  p.text("telemetry", "PATH",
         "answer telemetry on this Unix socket while reading (default\n"
         "$TERN_TELEMETRY_SOCK): tern-stats -s PATH /tern/engine,0",
         &a->telemetry);
  p.flag("busy-poll",
         "spin on the CPU while waiting for replies (lowest latency);\n"
         "by default it sleeps in the engine's wait mode",
         &a->busy_poll);
  p.epilogue("\nExit: 0 read (and verified), 1 error, 2 usage, 3 verify found a difference.");
  if (int rc = p.run(argc, argv); rc >= 0) return rc;
  if (a->server.empty() || a->path.empty()) return p.usage_error("--server and --path are required");
  if (std::string why; !a->json.name.empty() && !a->json.open(&why)) return p.usage_error(why);
  return -1;
}

// The engine's device spec: verbs on the named device (or the one that routes
// to the server), or the spec given, with the server's address and port
// (but a shm spec, which has none).
std::string device_spec(const Args& a) {
  // pmd/shm names its server by socket path, not address: --server is only
  // what the report calls it (the app tests' fake server).
  if (a.dev.rfind("shm:", 0) == 0) return a.dev;
  std::string base = a.dev.find(':') != std::string::npos ? a.dev + ","
                     : a.dev.empty()                      ? std::string("verbs:")
                                                          : "verbs:dev=" + a.dev + ",";
  return base + "addr=" + a.server + ",port=" + std::to_string(a.port);
}

// "ADDR:PORT", with brackets around an IPv6 address.
std::string server_name(const Args& a) {
  bool v6 = a.server.find(':') != std::string::npos;
  return (v6 ? "[" + a.server + "]" : a.server) + ":" + std::to_string(a.port);
}

// One READ in flight: its buffer and what it asked for.
struct Slot {
  uint8_t* buf = nullptr;
  uint64_t offset = 0;
  uint32_t len = 0;
  bool busy = false;
};

struct Run {
  NfsClient* cli = nullptr;
  FileHandle fh;
  uint64_t size = 0;
  uint32_t chunk = 0;
  std::vector<Slot> slots;
  std::deque<std::pair<uint64_t, uint32_t>> todo;  // (offset, len) not yet read
  uint64_t bytes = 0;
  uint32_t reads = 0;
  apps::LatencyHistogram lat;  // per READ, ns
  Status error;
  int verify_fd = -1;
  std::vector<uint8_t> local;  // verify scratch
  int64_t mismatch_at = -1;
};

struct Ctx {
  Run* run;
  Slot* slot;
};

void on_read(void* p, const ReadDone& d) {
  auto* c = static_cast<Ctx*>(p);
  Run& r = *c->run;
  Slot& s = *c->slot;
  s.busy = false;
  if (!d.status.is_ok()) {
    if (r.error.is_ok()) r.error = d.status;
    return;
  }
  ++r.reads;
  r.lat.add(static_cast<double>(d.latency_ns));
  r.bytes += d.count;
  if (d.count < s.len && !d.eof) r.todo.emplace_back(s.offset + d.count, s.len - d.count);  // short READ: ask again
  else if (d.count < s.len && s.offset + d.count < r.size && r.error.is_ok())
    r.error = make_error(Errc::kRemoteError, "READ at %" PRIu64 ": end of file after %u bytes, but the file has %" PRIu64,
                         s.offset, d.count, r.size);
  if (r.verify_fd >= 0 && d.count > 0 && r.mismatch_at < 0) {
    r.local.resize(d.count);
    ssize_t got = pread(r.verify_fd, r.local.data(), d.count, static_cast<off_t>(s.offset));
    if (got != static_cast<ssize_t>(d.count)) {
      r.mismatch_at = static_cast<int64_t>(s.offset + std::max<ssize_t>(got, 0));
    } else if (std::memcmp(r.local.data(), s.buf, d.count) != 0) {
      uint32_t i = 0;
      while (r.local[i] == s.buf[i]) ++i;
      r.mismatch_at = static_cast<int64_t>(s.offset + i);
    }
  }
}

int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "tern-nfs-read: %s: %s\n", what, s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (int rc = parse(argc, argv, &a); rc >= 0) return rc;
  // A bad TERN_LOG_LEVEL: one line and exit 2, as tern-nfsd and tern-perf.
  if (Status st = log_init(); !st) {
    std::fprintf(stderr, "tern-nfs-read: %s\n", st.message().c_str());
    return 2;
  }
  // Telemetry answers from a thread of its own, off the read loop.
  auto tel = telemetry::start_socket_thread(a.telemetry);
  if (!tel) {
    std::fprintf(stderr, "tern-nfs-read: --telemetry: %s\n", tel.status().to_string().c_str());
    return 1;
  }

  NfsClientOptions o;
  o.spec = device_spec(a);
  o.timeout_ms = a.timeout_ms;
  o.wait = !a.busy_poll;  // a tool waiting on a server need not burn a core
  // Room for qd buffers of the largest chunk, plus the engine's own buffers.
  o.engine.arena_bytes = std::max<size_t>(64u << 20, size_t{a.qd} * (1u << 20) + (32u << 20));
  auto cr = NfsClient::connect(o);
  if (!cr.is_ok()) {
    std::fprintf(stderr, "tern-nfs-read: cannot connect to %s (%s): %s\n", server_name(a).c_str(), o.spec.c_str(),
                 cr.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<NfsClient> cli = std::move(cr.value());
  if (Status s = cli->null(kNfsV4); !s.is_ok()) return fail("NFSv4 NULL (is this an NFSv4 server?)", s);

  auto root = cli->lookup("/", {Attr::kMaxread});
  if (!root.is_ok()) return fail("GETATTR of the server's root", root.status());
  auto file = cli->lookup(a.path, {Attr::kType, Attr::kSize, Attr::kFileid});
  if (!file.is_ok()) return fail(a.path.c_str(), file.status());
  if (file->attrs.type != FileType::kReg) {
    std::fprintf(stderr, "tern-nfs-read: %s: is a %s, not a regular file\n", a.path.c_str(),
                 file_type_name(file->attrs.type));
    return 1;
  }

  Run run;
  run.cli = cli.get();
  run.fh = file->fh;
  run.size = file->attrs.size;
  uint64_t maxread = root->attrs.maxread != 0 ? root->attrs.maxread : (1u << 20);
  run.chunk = static_cast<uint32_t>(std::min<uint64_t>({a.chunk, maxread, o.engine.max_bulk}));
  if (run.chunk < a.chunk && !a.quiet)
    std::fprintf(stderr, "tern-nfs-read: --chunk %" PRIu64 " capped to %u (server maxread %" PRIu64 ", engine max %u)\n",
                 a.chunk, run.chunk, maxread, o.engine.max_bulk);
  if (!a.verify.empty()) {
    run.verify_fd = open(a.verify.c_str(), O_RDONLY);
    if (run.verify_fd < 0) {
      std::fprintf(stderr, "tern-nfs-read: --verify %s: %s\n", a.verify.c_str(), std::strerror(errno));
      return 1;
    }
  }
  for (uint64_t off = 0; off < run.size; off += run.chunk)
    run.todo.emplace_back(off, static_cast<uint32_t>(std::min<uint64_t>(run.chunk, run.size - off)));
  run.slots.resize(a.qd);
  std::vector<Ctx> ctxs(a.qd);
  for (uint32_t i = 0; i < a.qd; ++i) {
    run.slots[i].buf = cli->alloc(run.chunk);
    if (run.slots[i].buf == nullptr) return fail("buffers", make_error(Errc::kNoResources, "engine arena full"));
    ctxs[i] = Ctx{&run, &run.slots[i]};
  }
  const rpc::EngineStats& st = cli->engine().stats();
  uint64_t inv0 = st.remote_invalidations.get(), local0 = st.local_inv_chains.get();
  uint64_t reconn0 = st.reconnects.get();
  NfsClientStats ns0 = cli->stats();
  bool tty = !a.quiet && isatty(STDERR_FILENO);

  uint64_t t0 = monotonic_ns(), last_progress = t0;
  for (;;) {
    bool busy = false;
    for (uint32_t i = 0; i < a.qd && run.error.is_ok(); ++i) {
      Slot& s = run.slots[i];
      if (!s.busy && !run.todo.empty()) {
        auto [off, len] = run.todo.front();
        int err = cli->read_async(run.fh, off, {s.buf, len}, &on_read, &ctxs[i]);
        if (err != 0) {  // refused outright (bad memory, too large): NfsClient retries everything else itself
          run.error = make_sys_error(Errc::kInvalidArgument, err, "READ at %" PRIu64 " not sent", off);
          break;
        }
        run.todo.pop_front();
        s.offset = off;
        s.len = len;
        s.busy = true;
      }
      busy |= s.busy;
    }
    if (!busy && (run.todo.empty() || !run.error.is_ok())) break;
    cli->poll();
    if (tty && monotonic_ns() - last_progress > 200'000'000) {
      last_progress = monotonic_ns();
      double secs = static_cast<double>(last_progress - t0) / 1e9;
      std::fprintf(stderr, "\r  %.1f / %.1f MiB  %.1f MB/s   ", static_cast<double>(run.bytes) / (1 << 20),
                   static_cast<double>(run.size) / (1 << 20), static_cast<double>(run.bytes) / 1e6 / secs);
    }
  }
  double secs = static_cast<double>(monotonic_ns() - t0) / 1e9;
  if (tty) std::fprintf(stderr, "\r%60s\r", "");
  if (!run.error.is_ok()) return fail(a.path.c_str(), run.error);

  if (run.verify_fd >= 0 && run.mismatch_at < 0) {
    off_t local_size = lseek(run.verify_fd, 0, SEEK_END);
    if (local_size != static_cast<off_t>(run.size))  // the shorter one ends where they differ
      run.mismatch_at = std::min<int64_t>(local_size, static_cast<int64_t>(run.size));
  }
  double mbps = secs > 0 ? static_cast<double>(run.bytes) / 1e6 / secs : 0;
  uint64_t rinv = st.remote_invalidations.get() - inv0, linv = st.local_inv_chains.get() - local0;
  uint64_t reconnects = st.reconnects.get() - reconn0;
  const NfsClientStats& ns = cli->stats();
  uint64_t retransmits = ns.retransmits - ns0.retransmits, delay_retries = ns.delay_retries - ns0.delay_retries,
           reissues = ns.reissues - ns0.reissues, new_conns = ns.new_connections - ns0.new_connections;
  rpc::ConnectionInfo ci = cli->connection().info();
  apps::Percentiles lat = apps::percentiles(run.lat);
  const char* verified = a.verify.empty() ? "null" : (run.mismatch_at < 0 ? "true" : "false");
  FILE* out = a.json.is_stdout() ? stderr : stdout;  // the human report
  std::fprintf(out, "%s: %" PRIu64 " bytes in %.3f s, %.1f MB/s\n", a.path.c_str(), run.bytes, secs, mbps);
  std::fprintf(out, "  %u READs of up to %u bytes, %u in flight\n", run.reads, run.chunk, a.qd);
  std::fprintf(out, "  latency per READ, ns:  min %.0f  p50 %.0f  p99 %.0f  p99.9 %.0f  max %.0f  mean %.0f  stdev %.0f\n",
               lat.min_ns, lat.p50_ns, lat.p99_ns, lat.p999_ns, lat.max_ns, lat.mean_ns, lat.stdev_ns);
  std::fprintf(out, "  rkeys invalidated by the server (Send With Invalidate): %" PRIu64 ", LOCAL_INV chains: %" PRIu64 "\n",
               rinv, linv);
  std::fprintf(out, "  connection: inline %u/%u bytes, %u credits\n", ci.inline_send, ci.inline_recv, ci.credits);
  std::fprintf(out,
               "  recovery: %" PRIu64 " reconnects, %" PRIu64 " READs retransmitted, %" PRIu64
               " NFS4ERR_DELAY retries, %" PRIu64 " READs reissued on %" PRIu64 " new connections\n",
               reconnects, retransmits, delay_retries, reissues, new_conns);
  if (!a.verify.empty())
    std::fprintf(out, "  verify against %s: %s\n", a.verify.c_str(), run.mismatch_at < 0 ? "identical" : "DIFFERENT");
  if (a.json.f != nullptr) {
    std::fprintf(a.json.f,
                 "{\"tool\":\"tern-nfs-read\",\"server\":\"%s\",\"path\":\"%s\",\"bytes\":%" PRIu64
                 ",\"seconds\":%.6f,\"mb_per_s\":%.2f,\"reads\":%u,\"size\":%u,\"chunk\":%u,\"qd\":%u,"
                 "\"latency_ns\":{\"min\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"p99_9\":%.1f,\"max\":%.1f,\"mean\":%.1f,"
                 "\"stdev\":%.1f,\"samples\":%" PRIu64 "},\"lat_us_p50\":%.1f,\"lat_us_p99\":%.1f,"
                 "\"remote_invalidations\":%" PRIu64 ",\"local_inv_chains\":%" PRIu64
                 ",\"inline_send\":%u,\"inline_recv\":%u,\"credits\":%u,\"reconnects\":%" PRIu64
                 ",\"retransmits\":%" PRIu64 ",\"delay_retries\":%" PRIu64 ",\"reissues\":%" PRIu64
                 ",\"new_connections\":%" PRIu64 ",\"verified\":%s}\n",
                 apps::json_escape(server_name(a)).c_str(), apps::json_escape(a.path).c_str(), run.bytes, secs, mbps,
                 run.reads, run.chunk, run.chunk, a.qd, lat.min_ns, lat.p50_ns, lat.p99_ns, lat.p999_ns, lat.max_ns,
                 lat.mean_ns, lat.stdev_ns, lat.count, lat.p50_ns / 1000, lat.p99_ns / 1000, rinv, linv, ci.inline_send,
                 ci.inline_recv, ci.credits, reconnects, retransmits, delay_retries, reissues, new_conns, verified);
    if (std::string why; !a.json.close(&why)) {
      std::fprintf(stderr, "tern-nfs-read: %s\n", why.c_str());
      return 1;
    }
  }
  if (run.mismatch_at >= 0) {
    std::fprintf(stderr, "tern-nfs-read: %s differs from %s at byte %" PRId64 "\n", a.path.c_str(), a.verify.c_str(),
                 run.mismatch_at);
    return 3;
  }
  return 0;
}
