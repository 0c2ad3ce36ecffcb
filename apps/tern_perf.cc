// tern-perf: a perftest-style tool. A server echoes requests; a client measures
// round-trip latency (min/p50/p99/p99.9/max) or throughput (requests/s, Gb/s)
// with a given message size and queue depth, and prints a readable table and
// optionally JSON.
//
// Two transports, chosen on both ends alike:
//  - "send" (the default): each request is one SEND, each response one SEND
//    back, through the driver interface directly; it is the baseline the RPC
//    engine's overhead is measured against. This file.
//  - "rpc" (--rpc): ONC RPC calls through the RPC engine (lib/engine) to an
//    echo-style program, inline or with bulk data through read or write
//    chunks, from one or more engines. perf_rpc.cc.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/version.h"
#include "mem/arena.h"
#include "option_parser.h"
#include "perf_common.h"
#include "perf_report.h"
#include "perf_stats.h"
#include "rdmadev/rdmadev.h"
#include "runtime/eal.h"
#include "telemetry/metrics_exporter.h"
#include "telemetry/socket_thread.h"

using namespace tern;
using namespace tern::rdma;
using tern::apps::BulkDir;
using tern::apps::Options;

namespace {

// The largest --rpc --size whose call fits a 4 KiB inline threshold with
// its headers (an echo's call also names a reply chunk for its results).
constexpr uint32_t kRpcMaxSize = 3992;

using apps::parse_count;

// The largest raw message a sweep goes up to by default: perftest's 8 MiB,
// or less so that the client's 3 x qd buffers of it stay under 256 MiB.
uint32_t default_raw_top(uint32_t qd) {
  uint32_t top = 8u << 20;
  while (top > 8 && static_cast<uint64_t>(top) * qd * 3 > (256ull << 20)) top /= 2;
  return top;
}

// The command line, as one table (apps/option_parser.h) that parses it and
// prints --help. The role comes first: tern-perf server|client [options].
// Returns -1 to go on, else the exit status (0 after --help, 2 bad usage,
// said).
int parse(int argc, char** argv, apps::OptionParser* pp, Options* o) {
  apps::OptionParser& p = *pp;
  std::string drivers;
  for (auto& n : driver_names()) drivers += (drivers.empty() ? "" : ", ") + n;
  p.version(std::string("tern-perf ") + tern::version());
  p.heading(
      "\n"
      "A perftest-style tool: the server echoes, the client measures round trips\n"
      "(latency, and one-way as half of it, as perftest's send_lat reports) or\n"
      "throughput. Sizes take K, M, G suffixes (64K); durations are seconds, or\n"
      "with a unit (500ms, 2s).\n"
      "\n"
      "Transport (the server and the client must agree):\n"
      "  (default)               raw driver SEND/SEND echo: the baseline");
  p.flag("rpc", "ONC RPC calls through the RPC engine to tern-perf's echo program", &o->rpc);
  p.heading("\nBoth ends:");
  p.text("dev", "SPEC", "device (default shm:path=/tmp/tern-perf.sock); drivers: " + drivers, &o->dev);
  p.integers("lcore", "LIST",
             "pin to these CPUs/lcores: one per engine (\"0,1\"), or the first\n"
             "of consecutive ones (\"0\")",
             0, 1023, 1, 1024, &o->lcores);
  p.flag("eal", "start DPDK EAL and run the engine(s) on lcores from --lcore", &o->use_eal);
  p.flag("quiet", "no progress or status lines", &o->quiet);
  p.text("telemetry", "PATH",
         "answer telemetry on this Unix socket (default $TERN_TELEMETRY_SOCK):\n"
         "tern-stats -s PATH /tern/engine,0 (with --eal, DPDK's socket too)",
         &o->telemetry);
  p.heading("\nClient:");
  p.custom("mode", "MODE",
           "lat: latency, one request at a time by default\n"
           "bw: throughput, --qd requests in flight\n"
           "rpc-lat, rpc-bw: the same with --rpc implied",
           "lat, bw, rpc-lat or rpc-bw", [o](std::string_view v, std::string*) {
             if (v == "rpc-lat" || v == "rpc-bw") o->rpc = true, v.remove_prefix(4);
             if (v != "lat" && v != "bw") return false;
             o->mode = std::string(v);
             return true;
           });
  p.count("size", "N",
          "message bytes (default 32). Raw: 8 to 64M. --rpc: the inline\n"
          "argument bytes of every call, 16 to 3992 and a multiple of 4\n"
          "(the call must fit the 4 KiB inline threshold; more data: --bulk)",
          0, 64u << 20, &o->size)
      .shorthand('s');
  p.flag("all-sizes",
         "sweep: every power of two from the smallest size (raw 8, --rpc\n"
         "16) up to --size (default: raw 8M, less when the client's 3 x qd\n"
         "buffers of it would pass 256M; --rpc 2048, or with --bulk up to\n"
         "--bulk), one run each over one connection; --iters 1000 per\n"
         "size unless --iters or --seconds say otherwise",
         &o->sweep)
      .shorthand('a');
  p.count("qd", "N",
          "requests in flight (default 1 for lat, 32 for bw; at most 1024)\n"
          "(perftest's -t; its -q, a QP count, is --engines here)",
          1, 1024, &o->qd)
      .shorthand('q');
  p.duration("seconds", "S", "run time after the warm-up (default 2)", 1e6, &o->seconds).shorthand('D');
  p.duration("duration", "S", "the same as --seconds", 1e6, &o->seconds);
  p.count("iters", "N", "run N requests (per engine) instead of a time", 1, UINT64_MAX / 2, &o->iters).shorthand('n');
  p.custom("warmup", "N|S",
           "warm-up before measuring: N requests, or a time with a unit\n"
           "(2s); default 1000 requests or 1 s, whichever ends first",
           "a count (1000) or a time (2s, 500ms)", [o](std::string_view v, std::string*) {
             std::string w(v);
             if (!w.empty() && w.back() == 's') {  // a time: 2s, 500ms
               if (!apps::parse_duration(w.c_str(), 3600, &o->warmup_s)) return false;
               o->warmup = UINT64_MAX;
               return true;
             }
             if (!parse_count(w.c_str(), 1ull << 40, &o->warmup)) return false;
             o->warmup_s = 0;
             return true;
           });
  p.duration("timeout", "S", "fail when no response comes for S (default 5)", 1e6, &o->timeout);
  p.text("json", "FILE", "also write the results as JSON (\"-\": stdout)", &o->json.name);
  p.text("csv", "FILE",
         "also write them as CSV, a row per run (\"-\": stdout)\n"
         "(either one on stdout moves the human report to stderr)",
         &o->csv.name);
  p.flag("histogram", "print the latency histogram (and put it in the JSON)", &o->histogram);
  p.flag("engine-stats",
         "--rpc: print each engine's counters (JSON) on stderr at the end,\n"
         "and its connections' (the driver's among them)",
         &o->engine_stats);
  p.flag("breakdown",
         "--rpc: time each stage of every call (client: queue, wire,\n"
         "invalidate, complete; server: pull, wait, handler, post) and\n"
         "print where the round trip goes on stderr at the end",
         &o->breakdown);
  p.custom("metrics", "PORT|ADDR:PORT|FILE",
           "Prometheus metrics (the engines' counters and latency histograms):\n"
           "served at http://127.0.0.1:PORT/metrics while running, or\n"
           "written to FILE for node_exporter's textfile collector",
           "a port, ADDR:PORT or a file path", [o](std::string_view v, std::string*) {
             if (!tern::telemetry::metrics_options_from_arg(v)) return false;
             o->metrics = std::string(v);
             return true;
           });
  p.text("trace", "FILE",
         "--rpc: trace one call in 64, stage by stage, and write them as\n"
         "Chrome trace-event JSON at the end (FILE.<engine> with -e > 1)",
         &o->trace);
  p.text("plot", "FILE.png", "draw the latency distribution (needs gnuplot)", &o->plot);
  p.flag("wait",
         "--rpc: sleep in epoll when idle instead of busy-polling\n"
         "(the engine's wait mode; both ends may use it)",
         &o->wait);
  p.heading("\nClient, --rpc only:");
  p.custom("bulk", "N", "also move N bytes per call through a chunk (16 to 16M)", "0 or 16 bytes to 16 MiB",
           [o](std::string_view v, std::string*) {
             uint64_t n = 0;
             if (!parse_count(std::string(v).c_str(), 16u << 20, &n) || (n != 0 && n < 16)) return false;
             o->bulk = static_cast<uint32_t>(n);
             return true;
           });
  p.choice("bulk-dir", "DIR",
           "read: client -> server, the call offers a read chunk and the\n"
           "server pulls it with RDMA READ (default); write: server ->\n"
           "client, the call offers a write chunk the server fills",
           {"read", "write"}, &o->bulk_dir);
  static_assert(static_cast<int>(BulkDir::kRead) == 0 && static_cast<int>(BulkDir::kWrite) == 1);
  p.count("engines", "N",
          "client: N engines, each on its own thread and CPU with its own\n"
          "connection to server engine i (default 1); server: N engines on\n"
          "N threads; engine i > 0 listens on the --dev path with \".i\"\n"
          "appended (/tmp/p.sock.1)",
          1, 64, &o->engines);
  p.count("check-every", "N",
          "besides the ids, lengths and stamps of every call, check every\n"
          "warm-up call and every Nth call's data byte for byte (default\n"
          "64; 1: all); with --bulk those calls are left out of the\n"
          "latency percentiles",
          1, UINT32_MAX, &o->check_every);
  p.heading("\nServer:");
  p.flag("once", "exit after the first client leaves (each engine's, with --rpc)", &o->once);
  p.count("credits", "N", "--rpc: credits granted per connection (default 32)", 1, 1024, &o->credits);
  p.count("max-bulk", "N", "--rpc: largest chunk served per call (default 1M)", 4096, 16u << 20, &o->max_bulk);
  p.count("clients", "N",
          "--rpc: connections each engine holds at once (default 4); a\n"
          "closed connection's buffers go to the next one. Each holds\n"
          "about (credits + 20) x (max-bulk + 72 KiB)",
          1, 1024, &o->clients);
  p.epilogue(
      "\nExit status: 0 done, 1 failed (no server, lost connection, wrong data, an output\n"
      "not written), 2 bad usage.");
  // The role first; --help and --version may come without one.
  bool has_role = argc >= 2 && argv[1][0] != '-';
  // perftest habits get a hint with the error: its -t (tx depth) and the
  // server's host as a positional argument.
  if (p.parse(argc, argv, has_role ? 2 : 1) == apps::OptionParser::Outcome::kUsageError) {
    std::string why = p.error();
    if (why.starts_with("unknown option '-t'"))
      why += " (perftest's -t, the tx depth, is --qd/-q here: requests in flight)";
    else if (why.starts_with("unexpected argument"))
      why += " (tern-perf takes no server host: the client reaches the server through --dev, e.g. "
             "--dev verbs:addr=HOST or --dev shm:path=/tmp/p.sock)";
    return p.usage_error(why);
  }
  if (int rc = p.run(argc, argv, has_role ? 2 : 1); rc >= 0) return rc;
  if (argc < 2) return p.usage_error("say server or client");
  std::string role = argv[1];
  if (role == "server") o->server = true;
  else if (role != "client") return p.usage_error("the first argument must be server or client, not '" + role + "'");
  o->size_set = p.given("size");
  bool qd_set = p.given("qd"), time_set = p.given("seconds") || p.given("duration") || p.given("iters");
  // Options new with --rpc are strict about their side; the older ones are
  // accepted and ignored on the other side, as they always were.
  // --metrics and --trace read engines, which the raw transport has none of:
  // without --rpc they would give an exposition or a trace with nothing in it.
  for (const char* n : {"bulk", "bulk-dir", "engines", "check-every", "credits", "max-bulk", "clients", "metrics",
                        "trace"})
    if (p.given(n) && !o->rpc) return p.usage_error(std::string("--") + n + " needs --rpc (on both ends)");
  for (const char* n : {"json", "csv", "plot", "histogram", "all-sizes", "bulk", "bulk-dir", "check-every"})
    if (o->server && p.given(n)) return p.usage_error(std::string("--") + n + " is a client option");
  for (const char* n : {"credits", "max-bulk", "clients", "once"})
    if (!o->server && p.given(n))
      return p.usage_error(std::string("--") + n + " is a server option (tern-perf server --" + n + " ...)");
  // A count and a time both given: which one would end the run? Refused
  // rather than one silently ignored (-n used to win over -D unsaid).
  if (p.given("iters") && (p.given("seconds") || p.given("duration")))
    return p.usage_error("give --iters (-n) or --seconds (-D), not both: a run ends after a count or a time");
  if (!qd_set) o->qd = o->mode == "bw" ? 32 : 1;
  if (o->sweep && !time_set) o->iters = 1000;  // perftest's -a: a fixed count per size
  if (o->rpc) {
    if (o->size < 16 || o->size > kRpcMaxSize || o->size % 4 != 0)
      return p.usage_error("with --rpc, --size must be 16 to " + std::to_string(kRpcMaxSize) +
                           " and a multiple of 4 (XDR): the call must fit the connection's "
                           "4 KiB inline threshold, headers included; move more data with --bulk");
    if (static_cast<uint64_t>(o->qd) * o->bulk > (1ull << 30))
      return p.usage_error("--qd x --bulk must stay under 1 GiB (the client's registered buffers)");
    if (!o->lcores.empty() && o->lcores.size() != 1 && o->lcores.size() < o->engines)
      return p.usage_error("--lcore must name one CPU, or one per engine");
    if (o->sweep && o->engines > 1) return p.usage_error("-a (a size sweep) runs one engine: leave out --engines");
    if (o->sweep && !o->size_set && o->bulk == 0) o->size = 2048;
  } else {
    if (o->size < 8) return p.usage_error("--size must be at least 8 (the sequence number)");
    if (o->lcores.size() > 1) return p.usage_error("--lcore names one CPU without --rpc");
    if (o->sweep && !o->size_set) o->size = default_raw_top(o->qd);
    if (static_cast<uint64_t>(o->size) * o->qd * 3 > (1ull << 30))
      return p.usage_error("--qd x --size must stay under 340 MiB (three buffers per request in flight)");
  }
  return -1;
}

// One side's resources: device, memory, queues, and a connected QP.
struct Endpoint {
  std::unique_ptr<Device> dev;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Qp> qp;
  uint8_t* rx = nullptr;  // qd receive buffers
  uint8_t* tx = nullptr;  // 2*qd send buffers
  uint32_t slot = 0;
};

// Memory and queues sized for `o.size` x `o.qd`; ep->dev is already open.
Status make_queues(const Options& o, Endpoint* ep) {
  ep->slot = (o.size + 63) & ~63u;
  size_t bytes = static_cast<size_t>(ep->slot) * o.qd * 3 + (1u << 20);
  auto arena = mem::Arena::create({.size = bytes, .name = "tern-perf"});
  TERN_TRY(arena);
  ep->arena = std::move(arena.value());
  ep->rx = static_cast<uint8_t*>(ep->arena->carve(static_cast<size_t>(ep->slot) * o.qd, 4096));
  ep->tx = static_cast<uint8_t*>(ep->arena->carve(static_cast<size_t>(ep->slot) * o.qd * 2, 4096));
  auto pd = ep->dev->alloc_pd();
  TERN_TRY(pd);
  ep->pd = std::move(pd.value());
  auto mr = ep->pd->reg_mr(ep->arena->base(), ep->arena->size(), kAccessLocalWrite);
  TERN_TRY(mr);
  ep->mr = std::move(mr.value());
  auto scq = ep->dev->create_cq(o.qd * 4 + 64);
  TERN_TRY(scq);
  auto rcq = ep->dev->create_cq(o.qd * 2 + 64);
  TERN_TRY(rcq);
  ep->scq = std::move(scq.value());
  ep->rcq = std::move(rcq.value());
  QpInit qi;
  qi.pd = ep->pd.get();
  qi.send_cq = ep->scq.get();
  qi.recv_cq = ep->rcq.get();
  qi.sq_depth = o.qd * 2 + 32;
  qi.rq_depth = o.qd;
  qi.max_send_sge = 1;
  qi.max_recv_sge = 1;
  auto qp = ep->dev->create_qp(qi);
  TERN_TRY(qp);
  ep->qp = std::move(qp.value());
  return Status::ok();
}

bool post_recv_slot(Endpoint& ep, uint32_t i) {
  Sge s{reinterpret_cast<uint64_t>(ep.rx + static_cast<size_t>(i) * ep.slot), ep.slot, ep.mr->lkey()};
  RecvWr wr{i, &s, 1};
  int err = 0;
  return ep.qp->post_recv(&wr, 1, &err) == 1;
}

// What reaping the send queue found.
enum class Reaped { kOk, kFlushed, kFailed };

// Sends with selective signaling: one signaled SEND per kSignalEvery, whose
// completion frees every earlier send slot (verbs' in-order completion).
struct Sender {
  static constexpr uint32_t kSignalEvery = 16;
  uint64_t posted = 0, freed = 0;
  uint32_t since_signal = 0;
  uint32_t cap = 0;

  bool can_send() const { return posted - freed < cap; }
  // Returns 1 on success, 0 when the SQ has no room (poll and retry), -1 on error.
  int send(Endpoint& ep, const uint8_t* buf, uint32_t len) {
    if (!can_send()) return 0;
    bool sig = ++since_signal >= kSignalEvery || posted - freed + 1 >= cap;
    Sge s{reinterpret_cast<uint64_t>(buf), len, ep.mr->lkey()};
    SendWr wr;
    wr.wr_id = posted + 1;  // "every send up to this one is done"
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.opcode = WrOpcode::kSend;
    wr.flags = sig ? kWrSignaled : 0;
    int err = 0;
    if (ep.qp->post_send(&wr, 1, &err) != 1) return err == EAGAIN ? 0 : -1;
    if (sig) since_signal = 0;
    ++posted;
    return 1;
  }
  // Polls until a send slot is free: only then may its buffer be rewritten,
  // because its previous SEND is known complete. Not kOk on an error
  // completion, when `peer_gone` (asked now and then) says the peer left, or
  // when no slot frees up within `timeout_s` (a peer that stopped polling
  // never completes our SENDs over pmd/shm).
  template <typename PeerGone>
  Reaped wait_room(Endpoint& ep, double timeout_s, PeerGone peer_gone) {
    if (can_send()) return Reaped::kOk;
    uint64_t deadline = now_ticks() + static_cast<uint64_t>(timeout_s * tick_hz());
    uint32_t spins = 0;
    while (!can_send()) {
      if (Reaped r = reap(ep); r != Reaped::kOk) return r;
      if ((++spins & 0x3ff) == 0 && peer_gone()) return Reaped::kFlushed;
      if (now_ticks() > deadline) {
        std::fprintf(stderr, "tern-perf: no SEND completed within %.1f s (the peer stopped polling?)\n", timeout_s);
        return Reaped::kFailed;
      }
    }
    return Reaped::kOk;
  }
  // kFlushed: the QP went to error because the peer left, which flushes
  // whatever was still queued; the caller decides whether that is news.
  // Any other error completion is said here.
  Reaped reap(Endpoint& ep) {
    Wc wc[16];
    int n = ep.scq->poll(wc, 16);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status == WcStatus::kWrFlushErr) return Reaped::kFlushed;
      if (wc[i].status != WcStatus::kSuccess) {
        std::fprintf(stderr, "tern-perf: send failed: %s\n", wc_status_name(wc[i].status));
        return Reaped::kFailed;
      }
      freed = wc[i].wr_id;
    }
    return Reaped::kOk;
  }
};

// The client announces its (largest) message size and queue depth in the
// connection's private data; the server sizes that connection's buffers from
// them.
struct Hello {
  char magic[4];
  uint32_t size;
  uint32_t qd;
};
static_assert(sizeof(Hello) <= 56, "fits rdma_cm private data");

// The server's connection events: those that come while a client is
// served (the next client's request) wait here for accept_client(), instead
// of being dropped and leaving that client to time out.
struct CmInbox {
  std::deque<CmEvent> kept;
  // The next event, kept ones first.
  bool next(Device& dev, CmEvent* ev) {
    if (kept.empty()) return dev.poll_cm(ev);
    *ev = std::move(kept.front());
    kept.pop_front();
    return true;
  }
  // While a client is served: true when it has left (a disconnect event);
  // other events are kept for later.
  bool client_left(Device& dev) {
    CmEvent ev;
    bool left = false;
    while (dev.poll_cm(&ev)) {
      if (ev.type == CmEventType::kDisconnected) left = true;
      else kept.push_back(std::move(ev));
    }
    return left;
  }
};

// Server: waits for a client, builds queues for what it asked, accepts.
// kDisconnected when a signal asked us to stop.
Status accept_client(Endpoint& ep, Options o, CmInbox& inbox) {
  CmEvent ev;
  for (;;) {
    if (apps::g_stop.load()) return make_error(Errc::kDisconnected, "stopped");
    if (!inbox.next(*ep.dev, &ev)) {
      usleep(1000);
      continue;
    }
    if (ev.type == CmEventType::kConnectRequest) {
      Hello h;
      if (ev.private_data.size() != sizeof h) {
        std::fprintf(stderr, "tern-perf server: rejecting a client that is not a raw tern-perf client (--rpc? this "
                             "server runs without it)\n");
        (void)ep.dev->reject(ev.request, {});
        continue;
      }
      std::memcpy(&h, ev.private_data.data(), sizeof h);
      if (std::memcmp(h.magic, "PERF", 4) != 0 || h.size < 8 || h.size > (64u << 20) || h.qd == 0 || h.qd > 1024) {
        std::fprintf(stderr, "tern-perf server: rejecting a client whose hello asks for what this server does not "
                             "serve (size %u, qd %u)\n", h.size, h.qd);
        (void)ep.dev->reject(ev.request, {});
        continue;
      }
      o.size = h.size;
      o.qd = h.qd;
      TERN_TRY(make_queues(o, &ep));
      for (uint32_t i = 0; i < o.qd; ++i) post_recv_slot(ep, i);
      if (Status st = ep.dev->accept(ev.request, ep.qp.get(), {}); !st) {
        // The client gave up while it waited for us (it was kept in the
        // inbox while another was served): its leaving is its business,
        // not a reason for the server to exit. Drop its queues (the QP
        // before what it uses) and wait for the next.
        std::fprintf(stderr, "tern-perf server: a client left before it was accepted (%s); waiting for the next\n",
                     st.to_string().c_str());
        ep.qp.reset();
        ep.rcq.reset();
        ep.scq.reset();
        ep.mr.reset();
        ep.pd.reset();
        ep.arena.reset();
        continue;
      }
    } else if (ev.type == CmEventType::kEstablished) {
      return Status::ok();
    }
  }
}

// Client: waits for the server's answer to connect().
Status wait_established(Endpoint& ep, const Options& o) {
  uint64_t deadline = monotonic_ns() + static_cast<uint64_t>(o.timeout * 1e9);
  CmEvent ev;
  while (monotonic_ns() < deadline) {
    if (!ep.dev->poll_cm(&ev)) {
      usleep(100);
      continue;
    }
    if (ev.type == CmEventType::kEstablished) return Status::ok();
    if (ev.type == CmEventType::kRejected)
      return make_error(Errc::kRemoteError, "%s rejected the connection (see the server's output: a --rpc server "
                        "rejects raw clients)", o.dev.c_str());
    return ev.status.is_ok() ? make_error(Errc::kDisconnected, "%s", cm_event_name(ev.type)) : ev.status;
  }
  return make_error(Errc::kTimedOut,
                    "the server at %s did not accept the connection within %.1f s: it is busy with another "
                    "client (a raw server serves one at a time), or it stopped polling; --timeout S waits longer",
                    o.dev.c_str(), o.timeout);
}

void on_stop_signal(int) { apps::g_stop.store(true); }  // a lock-free atomic store: async-signal-safe

int run_server(Options o) {
  auto dev = open_device(o.dev);
  if (!dev) {
    std::fprintf(stderr, "tern-perf server: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  if (Status st = (*dev)->listen(); !st) {
    std::fprintf(stderr, "tern-perf server: %s\n", st.to_string().c_str());
    return 1;
  }
  // SIGINT and SIGTERM end the server cleanly: the device's destructor
  // removes the socket.
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (!o.quiet) std::fprintf(stderr, "tern-perf server: listening on %s\n", o.dev.c_str());
  CmInbox inbox;
  for (;;) {
    // Queues are rebuilt per client; the device (and its listener) stays.
    Endpoint ep;
    ep.dev = std::move(dev.value());
    if (Status st = accept_client(ep, o, inbox); !st) {
      if (apps::g_stop.load()) return 0;
      std::fprintf(stderr, "tern-perf server: %s\n", st.to_string().c_str());
      return 1;
    }
    o.qd = ep.qp->init().rq_depth;
    Sender tx;
    tx.cap = o.qd * 2;
    uint64_t echoed = 0, tx_i = 0;
    Wc wc[32];
    bool done = false, failed = false;
    auto client_left = [&] { return inbox.client_left(*ep.dev); };
    uint64_t polls = 0;
    while (!done) {
      int n = ep.rcq->poll(wc, 32);
      for (int i = 0; i < n && !done; ++i) {
        if (wc[i].status != WcStatus::kSuccess) {
          done = true;  // flushed: the client left
          break;
        }
        // Echo: copy into a send slot so the receive buffer can go back at once.
        if (Reaped r = tx.wait_room(ep, o.timeout, client_left); r != Reaped::kOk) {
          failed = r == Reaped::kFailed, done = true;
          break;
        }
        uint8_t* out = ep.tx + static_cast<size_t>(tx_i++ % (o.qd * 2)) * ep.slot;
        std::memcpy(out, ep.rx + wc[i].wr_id * ep.slot, wc[i].byte_len);
        post_recv_slot(ep, static_cast<uint32_t>(wc[i].wr_id));
        if (tx.send(ep, out, wc[i].byte_len) != 1) done = true;
        ++echoed;
      }
      // A flushed SEND means the client left with echoes still queued: the
      // normal end of a run, not worth a line.
      if (Reaped r = tx.reap(ep); r != Reaped::kOk) failed = r == Reaped::kFailed, done = true;
      if ((++polls & 0xfff) == 0 && (client_left() || apps::g_stop.load())) done = true;
    }
    if (!o.quiet)
      std::fprintf(stderr, "tern-perf server: client left after %" PRIu64 " requests%s\n", echoed,
                   failed ? " (a send failed)" : "");
    // Destroy the QP before its CQs, PD and memory; keep the device.
    ep.qp.reset();
    dev = std::move(ep.dev);
    if (o.once || apps::g_stop.load()) return 0;
  }
}

uint32_t be32_at(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

// A response that is no echo of ours but an RPC-over-RDMA header (RFC 8166:
// xid, vers 1, credits, proc RDMA_MSG..RDMA_ERROR): an RPC server answering
// the raw SEND it could not parse.
bool looks_like_rpcrdma(const uint8_t* p, uint32_t len) {
  return len >= 16 && be32_at(p + 4) == 1 && be32_at(p + 12) <= 4;
}

// The raw client's connection, and the request ids it has used: ids go on
// across the runs of a sweep, so that a late response cannot pass as a new one.
struct RawClient {
  const Options& o;
  Endpoint ep;
  Sender tx;
  std::vector<uint64_t> sent_at;
  uint64_t next_id = 0;
  uint64_t responses = 0;  // over the connection's life
};

// One run of `size`-byte requests over an established connection: warm-up,
// then --iters requests or --seconds of them. Fills *r; false (said) on
// failure.
bool measure(RawClient& c, uint32_t size, apps::RunReport* r) {
  const Options& o = c.o;
  Endpoint& ep = c.ep;
  const uint64_t first_id = c.next_id;
  const double hz = tick_hz();
  const uint64_t tick_s = static_cast<uint64_t>(hz);
  uint64_t issued = 0, done = 0, measured = 0;
  uint64_t limit = UINT64_MAX;  // requests of this run to issue; known once the warm-up ends (or the time is up)
  bool warming = o.warmup > 0;
  uint64_t t0 = now_ticks();
  uint64_t warm_until = warming && o.warmup_s > 0 ? t0 + static_cast<uint64_t>(o.warmup_s * hz) : UINT64_MAX;
  uint64_t t_start = 0, t_end = 0, deadline = UINT64_MAX, t_progress = t0 + tick_s;
  apps::CpuMeter cpu;

  auto server_left = [&] {
    CmEvent ev;
    return ep.dev->poll_cm(&ev) && ev.type == CmEventType::kDisconnected;
  };
  auto start_measuring = [&](uint64_t now) {
    warming = false;
    t_start = t_end = now;
    if (o.iters != 0) limit = std::max(issued, done + o.iters);
    else deadline = now + static_cast<uint64_t>(o.seconds * hz);
    t_progress = now + tick_s;
    cpu.start();
  };
  auto issue = [&]() -> bool {
    if (Reaped rr = c.tx.wait_room(ep, o.timeout, [&] { return server_left(); }); rr != Reaped::kOk) {
      if (rr == Reaped::kFlushed) std::fprintf(stderr, "tern-perf client: the connection to %s is lost\n", o.dev.c_str());
      return false;
    }
    uint64_t id = c.next_id++;
    uint8_t* buf = ep.tx + static_cast<size_t>(id % (o.qd * 2)) * ep.slot;
    std::memcpy(buf, &id, 8);
    for (uint32_t k = 8; k < size; ++k) buf[k] = static_cast<uint8_t>(id + k);
    c.sent_at[id % c.sent_at.size()] = now_ticks();
    ++issued;
    return c.tx.send(ep, buf, size) == 1;
  };
  if (!warming) start_measuring(now_ticks());
  for (uint32_t i = 0; i < o.qd && issued < limit; ++i)
    if (!issue()) return false;
  Wc wc[32];
  // A response must come within --timeout of the previous one (or of the
  // start): a server that stopped must not leave the client spinning.
  const uint64_t stall_ticks = static_cast<uint64_t>(o.timeout * hz);
  uint64_t last_response = now_ticks(), polls = 0, now = last_response;
  uint32_t idle = 0;
  while (done < issued || issued < limit) {
    int n = ep.rcq->poll(wc, 32);
    // The clock when responses came (their receive time), else on every
    // 64th empty poll (for the deadlines): where reading it is a system call
    // (the rxe VM's guest distrusts its TSC and reads the HPET), a read per
    // empty poll made the loop that should see the response slow.
    if (n > 0 || (++idle & 63) == 0) now = now_ticks();
    if (n > 0) {
      last_response = now;
    } else if (now - last_response > stall_ticks) {
      std::fprintf(stderr,
                   "tern-perf client: no response for %.1f s with %" PRIu64
                   " requests outstanding (is the server running, and in the same mode: --rpc or not?)\n",
                   o.timeout, issued - done);
      return false;
    }
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) {
        std::fprintf(stderr, "tern-perf client: receive failed: %s%s\n", wc_status_name(wc[i].status),
                     wc[i].status == WcStatus::kWrFlushErr ? " (the connection is lost: did the server stop?)" : "");
        return false;
      }
      const uint8_t* rb = ep.rx + wc[i].wr_id * ep.slot;
      uint32_t len = wc[i].byte_len;
      uint64_t id = 0;
      if (len >= 8) std::memcpy(&id, rb, 8);
      // An echo of ours: the length sent, an id of this run still out, and
      // the pattern's last byte (past the id, when there is one).
      bool echo = len == size && id >= first_id && id < c.next_id &&
                  (size == 8 || rb[size - 1] == static_cast<uint8_t>(id + size - 1));
      if (!echo) {
        if (c.responses == 0 && looks_like_rpcrdma(rb, len))
          std::fprintf(stderr,
                       "tern-perf client: the server at %s speaks RPC (it answered with an RPC-over-RDMA header, "
                       "not an echo): use --rpc, or start the server without it\n",
                       o.dev.c_str());
        else if (len != size)
          std::fprintf(stderr, "tern-perf client: a response of %u bytes to %u-byte requests: not a tern-perf echo\n",
                       len, size);
        else
          std::fprintf(stderr, "tern-perf client: a response (id %" PRIu64 ") is not the echo of any request in "
                       "flight: the data is corrupt\n", id);
        return false;
      }
      ++done, ++c.responses;
      if (!warming) {
        ++measured;
        t_end = now;
        r->lat.add(ns_from_ticks(now - c.sent_at[id % c.sent_at.size()]));
      } else if (done >= o.warmup || now >= warm_until) {
        start_measuring(now);
      }
      post_recv_slot(ep, static_cast<uint32_t>(wc[i].wr_id));
      if (now >= deadline && limit == UINT64_MAX) limit = issued;  // time is up: drain what is in flight
      if (issued < limit && !issue()) return false;
    }
    if (Reaped rr = c.tx.reap(ep); rr != Reaped::kOk) {
      if (rr == Reaped::kFlushed) std::fprintf(stderr, "tern-perf client: the connection to %s is lost\n", o.dev.c_str());
      return false;
    }
    if (warming && now >= warm_until) start_measuring(now);  // a time-bounded warm-up with nothing in flight
    if (now >= deadline && limit == UINT64_MAX) limit = issued;
    if (now >= t_progress && !o.quiet) {
      if (warming) {
        std::fprintf(stderr, "  warm-up %5.1f s  %10" PRIu64 " requests\n", static_cast<double>(now - t0) / hz, done);
      } else {
        double el = static_cast<double>(now - t_start) / hz;
        std::fprintf(stderr, "  %5.1f s  %10.0f req/s\n", el, static_cast<double>(measured) / el);
      }
      t_progress += tick_s;
    }
    // The server leaving shows as flushed receives, or only as a control
    // event when nothing of ours is in flight.
    if ((++polls & 0xfff) == 0 && server_left()) {
      std::fprintf(stderr, "tern-perf client: the server at %s closed the connection\n", o.dev.c_str());
      return false;
    }
  }
  cpu.stop();
  r->mode = "send/" + o.mode;
  r->transport = "send";
  r->dev = o.dev;
  r->size = size;
  r->qd = o.qd;
  r->requests = measured;
  r->seconds = t_end > t_start ? static_cast<double>(t_end - t_start) / hz : 0;
  r->rps = r->seconds > 0 ? static_cast<double>(measured) / r->seconds : 0;
  r->gbps = r->rps * size * 8 / 1e9;
  r->cpu_share = cpu.share;
  r->preempted = cpu.preempted;
  r->busy = cpu.busy();
  r->busy_judged = cpu.judged();
  return true;
}

int run_client(const Options& o) {
  const std::vector<uint32_t> sizes = apps::sweep_sizes(o, 8, o.size);
  RawClient c{o, {}, {}, {}, 0, 0};
  Endpoint& ep = c.ep;
  auto dev = open_device(o.dev);
  if (!dev) {
    std::fprintf(stderr, "tern-perf client: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  ep.dev = std::move(dev.value());
  Options sized = o;
  sized.size = sizes.back();  // one connection for every size of a sweep: buffers for the largest
  if (Status st = make_queues(sized, &ep); !st) {
    std::fprintf(stderr, "tern-perf client: %s\n", st.to_string().c_str());
    return 1;
  }
  for (uint32_t i = 0; i < o.qd; ++i) post_recv_slot(ep, i);
  Hello h{{'P', 'E', 'R', 'F'}, sized.size, o.qd};
  if (Status st = ep.dev->connect(ep.qp.get(), std::span(reinterpret_cast<const uint8_t*>(&h), sizeof h)); !st) {
    std::fprintf(stderr, "tern-perf client: %s\n", st.to_string().c_str());
    return 1;
  }
  if (Status st = wait_established(ep, o); !st) {
    std::fprintf(stderr, "tern-perf client: %s\n", st.to_string().c_str());
    return 1;
  }
  c.tx.cap = o.qd * 2;
  c.sent_at.assign(o.qd * 2, 0);
  apps::Reporter rep(o);
  FILE* out = rep.out();
  for (uint32_t size : sizes) {
    apps::RunReport r;
    if (!measure(c, size, &r)) return 1;
    if (!o.sweep) {
      std::fprintf(out, "tern-perf  mode=send/%s  dev=%s  size=%u  qd=%u\n", o.mode.c_str(), o.dev.c_str(), size,
                   o.qd);
      std::fprintf(out, "  requests      %12" PRIu64 "   in %.2f s\n", r.requests, r.seconds);
      std::fprintf(out, "  throughput    %12.0f req/s   %.3f Gb/s each way\n", r.rps, r.gbps);
      std::fprintf(out, "  latency (%" PRIu64 " samples%s)\n", r.lat.count(),
                   o.mode == "bw" ? ", under load: --qd in flight" : "");
      rep.print_latency(r);
      std::fprintf(out, "  driver: %s\n", format_stats(ep.qp->stats()).c_str());
      if (r.cpu_share >= 0)
        std::fprintf(out, "  cpu           the client had a CPU %.0f%% of the run (%" PRIu64 " preemptions)%s\n",
                     100 * r.cpu_share, r.preempted, r.busy ? ": the machine was busy, figures are low" : "");
    } else if (!o.quiet) {
      std::fprintf(stderr, "  size %9u: %10.0f req/s  rtt p50 %8.0f ns\n", size, r.rps, r.lat.percentile(0.5));
    }
    rep.add(std::move(r));
  }
  (void)ep.dev->disconnect(ep.qp.get());  // best effort: results are in hand
  return rep.finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("tern-perf %s\n", tern::version());
    return 0;
  }
  Options o;
  apps::OptionParser p("tern-perf", "server|client [options]");
  if (int rc = parse(argc, argv, &p, &o); rc >= 0) return rc;
  // A bad TERN_LOG_LEVEL is a usage error, one line, as in tern-nfsd and
  // tern-nfs-read (it used to be a warning here and an exit there).
  if (Status st = log_init(); !st) return p.usage_error(st.message());
  // Outputs are opened before the run, so that a bad path costs no run.
  if (std::string why; !o.server && !apps::prepare_outputs(&o, &why)) {
    return p.usage_error(why);
  }
  // Prometheus, from a thread of its own for the whole run (never an engine's).
  tern::telemetry::MetricsOptions mo;
  if (!o.metrics.empty()) {
    auto m = tern::telemetry::metrics_options_from_arg(o.metrics);
    if (!m) return p.usage_error(m.status().to_string());
    mo = *m;
    mo.file_interval_ms = 1000;  // runs are seconds long: the file shows the last second's figures
  }
  auto metrics = tern::telemetry::MetricsExporter::start(mo);
  if (!metrics) {
    std::fprintf(stderr, "tern-perf: %s\n", metrics.status().to_string().c_str());
    return 1;
  }
  // The file's last write while the engines still exist (run_engines), not
  // at exit, when they are gone: the file is for their final counters.
  if (*metrics) o.at_end = [m = metrics->get()] { m->stop(); };
  // Telemetry answers from a thread of its own, off the engines' loops.
  auto tel = telemetry::start_socket_thread(o.telemetry);
  if (!tel) {
    std::fprintf(stderr, "tern-perf: --telemetry: %s\n", tel.status().to_string().c_str());
    return 1;
  }
  if (o.rpc) return o.server ? apps::run_rpc_server(o) : apps::run_rpc_client(o);

  int lcore = o.lcores.empty() ? -1 : static_cast<int>(o.lcores[0]);
  auto body = [&o]() { return o.server ? run_server(o) : run_client(o); };
  if (!o.use_eal) {
    if (lcore >= 0) {
      if (Status st = runtime::pin_current_thread(static_cast<unsigned>(lcore)); !st)
        std::fprintf(stderr, "tern-perf: %s (running unpinned)\n", st.to_string().c_str());
    }
    return body();
  }
  // EAL: the main lcore waits, the engine runs pinned on a worker lcore.
  unsigned lc = lcore >= 0 ? static_cast<unsigned>(lcore) : 1;
  unsigned main_lc = lc == 0 ? 1 : 0;
  runtime::EalOptions eo;
  eo.lcores = std::to_string(main_lc) + "," + std::to_string(lc);
  // EAL would make the lowest lcore the main one; the engine wants `lc`.
  eo.extra_args = {"--main-lcore", std::to_string(main_lc)};
  apps::eal_telemetry(o, &eo);
  auto rt = runtime::Runtime::start(eo);
  if (!rt) {
    std::fprintf(stderr, "tern-perf: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  if (Status st = (*rt)->launch(lc, body); !st) {
    std::fprintf(stderr, "tern-perf: %s\n", st.to_string().c_str());
    return 1;
  }
  return (*rt)->wait_all();
}
