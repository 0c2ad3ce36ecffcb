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
#include <getopt.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/version.h"
#include "mem/arena.h"
#include "perf_common.h"
#include "perf_stats.h"
#include "rdmadev/rdmadev.h"
#include "runtime/eal.h"

using namespace tern;
using namespace tern::rdma;
using tern::apps::BulkDir;
using tern::apps::Options;

namespace {

void usage(FILE* f) {
  std::fprintf(f,
               "usage: tern-perf server [options]\n"
               "       tern-perf client [options]\n"
               "\n"
               "Transport (the server and the client must agree):\n"
               "  (default)        raw driver SEND/SEND echo: the baseline\n"
               "  --rpc            ONC RPC calls through the RPC engine to tern-perf's echo program\n"
               "\n"
               "Both ends:\n"
               "  --dev SPEC       device (default shm:path=/tmp/tern-perf.sock); drivers: %s\n"
               "  --lcore LIST     pin to these CPUs/lcores: one per engine (\"0,1\"), or the first\n"
               "                   of consecutive ones (\"0\")\n"
               "  --eal            start DPDK EAL and run the engine(s) on lcores from --lcore\n"
               "  --quiet          no progress or status lines\n"
               "\n"
               "Client:\n"
               "  --mode MODE      lat: latency, one call at a time by default\n"
               "                   bw: throughput, --qd calls in flight\n"
               "                   rpc-lat, rpc-bw: the same with --rpc implied\n"
               "  --size N         message bytes (send: default 32, at least 8); with --rpc the\n"
               "                   inline argument bytes of every call (default 32, 16 to 64 KiB,\n"
               "                   a multiple of 4; echoed back when there is no --bulk)\n"
               "  --qd N           requests in flight (default 1 for lat, 32 for bw; at most 1024)\n"
               "  --seconds S      run time after the warm-up (default 2)\n"
               "  --iters N        run N requests (per engine) instead of a time\n"
               "  --warmup N       requests before measuring (default 1000)\n"
               "  --json FILE      also write the results as JSON\n"
               "  --timeout S      fail when no response comes for S seconds (default 5)\n"
               "\n"
               "Client, --rpc only:\n"
               "  --bulk N         also move N bytes per call through a chunk (16 B to 16 MiB;\n"
               "                   suffixes K, M: 64K, 1M)\n"
               "  --bulk-dir DIR   read: client -> server, the call offers a read chunk and the\n"
               "                   server pulls it with RDMA READ and answers with a small result\n"
               "                   (default); write: server -> client, the call offers a write\n"
               "                   chunk and the server fills it with RDMA WRITE\n"
               "  --engines N      N client engines, each on its own thread and CPU with its own\n"
               "                   connection to server engine i (default 1)\n"
               "  --check-every N  besides the ids and lengths of every call and the stamps at\n"
               "                   both ends of every bulk buffer, check every warm-up call and\n"
               "                   every Nth call's bulk data byte for byte (default 64; 1: all).\n"
               "                   Those calls are left out of the latency percentiles\n"
               "\n"
               "Server:\n"
               "  --once           exit after the first client leaves (each engine's, with --rpc)\n"
               "  --engines N      --rpc: N engines on N threads; engine i > 0 listens on the\n"
               "                   --dev path with \".i\" appended (/tmp/p.sock.1)\n"
               "  --credits N      --rpc: credits granted per connection (default 32)\n"
               "  --max-bulk N     --rpc: largest chunk served per call (default 1M)\n"
               "  --clients N      --rpc: connections each engine can take over its life (default\n"
               "                   4): the engine never reuses a closed connection's buffers, and\n"
               "                   each holds about (credits + 20) x (max-bulk + 72 KiB)\n"
               "\n"
               "Exit status: 0 done, 1 failed (no server, lost connection, wrong data), 2 bad usage.\n",
               [] {
                 std::string s;
                 for (auto& n : driver_names()) s += (s.empty() ? "" : ", ") + n;
                 return s;
               }()
                   .c_str());
}

// A count with an optional binary suffix (K, M, G); false on junk or overflow.
bool parse_count(const char* s, uint64_t max, uint64_t* out) {
  if (s == nullptr || *s == '\0' || *s == '-') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 0);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (*end != '\0' || v > (max >> shift)) return false;
  *out = static_cast<uint64_t>(v) << shift;
  return true;
}

bool parse_seconds(const char* s, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 1e6) return false;
  *out = v;
  return true;
}

bool parse_cpus(const char* s, std::vector<unsigned>* out) {
  out->clear();
  std::string str = s;
  size_t pos = 0;
  while (pos <= str.size()) {
    size_t comma = str.find(',', pos);
    std::string item = str.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    uint64_t v;
    if (!parse_count(item.c_str(), 1023, &v)) return false;
    out->push_back(static_cast<unsigned>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return !out->empty();
}

bool bad(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
bool bad(const char* fmt, ...) {
  std::fprintf(stderr, "tern-perf: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  return false;
}

// Returns false (after saying why) on bad usage; *help when --help was asked.
bool parse(int argc, char** argv, Options* o, bool* help) {
  *help = false;
  if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    *help = true;
    return true;
  }
  if (argc < 2) return bad("%s", "say server or client");
  std::string role = argv[1];
  if (role == "server") o->server = true;
  else if (role != "client") return bad("the first argument must be server or client, not '%s'", argv[1]);
  enum : int {
    kDev = 1000, kMode, kSize, kQd, kSeconds, kIters, kWarmup, kLcore, kEal, kOnce, kJson, kQuiet, kHelp, kRpc,
    kBulk, kBulkDir, kEngines, kCheckEvery, kTimeout, kCredits, kMaxBulk, kClients
  };
  static option longs[] = {{"dev", 1, nullptr, kDev},         {"mode", 1, nullptr, kMode},
                           {"size", 1, nullptr, kSize},       {"qd", 1, nullptr, kQd},
                           {"seconds", 1, nullptr, kSeconds}, {"iters", 1, nullptr, kIters},
                           {"warmup", 1, nullptr, kWarmup},   {"lcore", 1, nullptr, kLcore},
                           {"eal", 0, nullptr, kEal},         {"once", 0, nullptr, kOnce},
                           {"json", 1, nullptr, kJson},       {"quiet", 0, nullptr, kQuiet},
                           {"help", 0, nullptr, kHelp},       {"rpc", 0, nullptr, kRpc},
                           {"bulk", 1, nullptr, kBulk},       {"bulk-dir", 1, nullptr, kBulkDir},
                           {"engines", 1, nullptr, kEngines}, {"check-every", 1, nullptr, kCheckEvery},
                           {"timeout", 1, nullptr, kTimeout}, {"credits", 1, nullptr, kCredits},
                           {"max-bulk", 1, nullptr, kMaxBulk}, {"clients", 1, nullptr, kClients},
                           {nullptr, 0, nullptr, 0}};
  bool qd_set = false;
  bool rpc_only_used = false, client_only_used = false, server_only_used = false;
  const char* rpc_only_name = nullptr;
  const char* side_name = nullptr;
  optind = 2;
  opterr = 1;  // getopt names an unknown option itself
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    const char* name = nullptr;
    for (const option& l : longs)
      if (l.val == c) name = l.name;
    switch (c) {
      case kDev: o->dev = optarg; break;
      case kMode:
        o->mode = optarg;
        if (o->mode == "rpc-lat" || o->mode == "rpc-bw") o->rpc = true, o->mode = o->mode.substr(4);
        if (o->mode != "lat" && o->mode != "bw")
          return bad("--mode must be lat, bw, rpc-lat or rpc-bw, not '%s'", optarg);
        break;
      case kSize:
        if (!parse_count(optarg, 64u << 20, &v)) return bad("--size: '%s' is not a byte count", optarg);
        o->size = static_cast<uint32_t>(v);
        break;
      case kQd:
        if (!parse_count(optarg, 1024, &v) || v == 0) return bad("--qd must be in [1, 1024], not '%s'", optarg);
        o->qd = static_cast<uint32_t>(v), qd_set = true;
        break;
      case kSeconds:
        if (!parse_seconds(optarg, &o->seconds)) return bad("--seconds must be a positive number, not '%s'", optarg);
        break;
      case kIters:
        if (!parse_count(optarg, UINT64_MAX / 2, &o->iters) || o->iters == 0)
          return bad("--iters must be a positive count, not '%s'", optarg);
        break;
      case kWarmup:
        if (!parse_count(optarg, 1u << 30, &v)) return bad("--warmup: '%s' is not a count", optarg);
        o->warmup = static_cast<uint32_t>(v);
        break;
      case kLcore:
        if (!parse_cpus(optarg, &o->lcores)) return bad("--lcore wants CPU numbers such as 0 or 0,1, not '%s'", optarg);
        break;
      case kEal: o->use_eal = true; break;
      case kOnce: o->once = true; break;
      case kJson: o->json = optarg; break;
      case kQuiet: o->quiet = true; break;
      case kHelp: *help = true; return true;
      case kRpc: o->rpc = true; break;
      case kBulk:
        if (!parse_count(optarg, 16u << 20, &v) || (v != 0 && v < 16))
          return bad("--bulk must be 0 or 16 bytes to 16 MiB, not '%s'", optarg);
        o->bulk = static_cast<uint32_t>(v);
        rpc_only_used = true, rpc_only_name = name, client_only_used = true, side_name = name;
        break;
      case kBulkDir:
        if (std::strcmp(optarg, "read") == 0) o->bulk_dir = BulkDir::kRead;
        else if (std::strcmp(optarg, "write") == 0) o->bulk_dir = BulkDir::kWrite;
        else return bad("--bulk-dir must be read or write, not '%s'", optarg);
        rpc_only_used = true, rpc_only_name = name, client_only_used = true, side_name = name;
        break;
      case kEngines:
        if (!parse_count(optarg, 64, &v) || v == 0) return bad("--engines must be in [1, 64], not '%s'", optarg);
        o->engines = static_cast<uint32_t>(v);
        rpc_only_used = true, rpc_only_name = name;
        break;
      case kCheckEvery:
        if (!parse_count(optarg, UINT32_MAX, &v) || v == 0) return bad("--check-every must be >= 1, not '%s'", optarg);
        o->check_every = static_cast<uint32_t>(v);
        rpc_only_used = true, rpc_only_name = name, client_only_used = true, side_name = name;
        break;
      case kTimeout:
        if (!parse_seconds(optarg, &o->timeout)) return bad("--timeout must be a positive number, not '%s'", optarg);
        break;
      case kCredits:
        if (!parse_count(optarg, 1024, &v) || v == 0) return bad("--credits must be in [1, 1024], not '%s'", optarg);
        o->credits = static_cast<uint32_t>(v);
        rpc_only_used = true, rpc_only_name = name, server_only_used = true, side_name = name;
        break;
      case kMaxBulk:
        if (!parse_count(optarg, 16u << 20, &v) || v < 4096)
          return bad("--max-bulk must be 4 KiB to 16 MiB, not '%s'", optarg);
        o->max_bulk = static_cast<uint32_t>(v);
        rpc_only_used = true, rpc_only_name = name, server_only_used = true, side_name = name;
        break;
      case kClients:
        if (!parse_count(optarg, 1024, &v) || v == 0) return bad("--clients must be in [1, 1024], not '%s'", optarg);
        o->clients = static_cast<uint32_t>(v);
        rpc_only_used = true, rpc_only_name = name, server_only_used = true, side_name = name;
        break;
      default: return false;  // getopt has said what it did not understand
    }
  }
  if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
  // Options new with --rpc are strict about their side; the older ones are
  // accepted and ignored on the other side, as they always were.
  if (rpc_only_used && !o->rpc) return bad("--%s needs --rpc (on both ends)", rpc_only_name);
  if (o->server && client_only_used) return bad("--%s is a client option", side_name);
  if (!o->server && server_only_used) return bad("--%s is a server option", side_name);
  if (!qd_set) o->qd = o->mode == "bw" ? 32 : 1;
  if (o->rpc) {
    if (o->size < 16 || o->size > (64u << 10) || o->size % 4 != 0)
      return bad("%s", "with --rpc, --size must be 16 to 64 KiB and a multiple of 4 (XDR)");
    if (static_cast<uint64_t>(o->qd) * o->bulk > (1ull << 30))
      return bad("%s", "--qd x --bulk must stay under 1 GiB (the client's registered buffers)");
    if (!o->lcores.empty() && o->lcores.size() != 1 && o->lcores.size() < o->engines)
      return bad("%s", "--lcore must name one CPU, or one per engine");
  } else {
    if (o->size < 8) return bad("%s", "--size must be at least 8 (the sequence number)");
    if (o->lcores.size() > 1) return bad("%s", "--lcore names one CPU without --rpc");
  }
  return true;
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
  // because its previous SEND is known complete. False on an error
  // completion, or when no slot frees up within `timeout_s` (a peer that
  // stopped polling never completes our SENDs over pmd/shm).
  bool wait_room(Endpoint& ep, double timeout_s) {
    if (can_send()) return true;
    uint64_t deadline = now_ticks() + static_cast<uint64_t>(timeout_s * tick_hz());
    while (!can_send()) {
      if (!reap(ep)) return false;
      if (now_ticks() > deadline) {
        std::fprintf(stderr, "tern-perf: no SEND completed within %.1f s (the peer stopped polling?)\n", timeout_s);
        return false;
      }
    }
    return true;
  }
  // Returns false on an error completion.
  bool reap(Endpoint& ep) {
    Wc wc[16];
    int n = ep.scq->poll(wc, 16);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) {
        std::fprintf(stderr, "tern-perf: send failed: %s\n", wc_status_name(wc[i].status));
        return false;
      }
      freed = wc[i].wr_id;
    }
    return true;
  }
};

// The client announces its message size and queue depth in the connection's
// private data; the server sizes that connection's buffers from them.
struct Hello {
  char magic[4];
  uint32_t size;
  uint32_t qd;
};
static_assert(sizeof(Hello) <= 56, "fits rdma_cm private data");

// Server: waits for a client, builds queues for what it asked, accepts.
Status accept_client(Endpoint& ep, Options o) {
  CmEvent ev;
  for (;;) {
    if (!ep.dev->poll_cm(&ev)) {
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
        std::fprintf(stderr, "tern-perf server: rejecting a client with a bad hello\n");
        (void)ep.dev->reject(ev.request, {});
        continue;
      }
      o.size = h.size;
      o.qd = h.qd;
      TERN_TRY(make_queues(o, &ep));
      for (uint32_t i = 0; i < o.qd; ++i) post_recv_slot(ep, i);
      TERN_TRY(ep.dev->accept(ev.request, ep.qp.get(), {}));
    } else if (ev.type == CmEventType::kEstablished) {
      return Status::ok();
    }
  }
}

// Client: waits for the server's answer to connect().
Status wait_established(Endpoint& ep, const Options& o) {
  uint64_t deadline = monotonic_ns() + 5'000'000'000ull;
  CmEvent ev;
  while (monotonic_ns() < deadline) {
    if (!ep.dev->poll_cm(&ev)) {
      usleep(100);
      continue;
    }
    if (ev.type == CmEventType::kEstablished) return Status::ok();
    return make_error(Errc::kDisconnected, "%s: %s", cm_event_name(ev.type), ev.status.to_string().c_str());
  }
  return make_error(Errc::kTimedOut, "no answer from %s within 5 s", o.dev.c_str());
}

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
  if (!o.quiet) std::fprintf(stderr, "tern-perf server: listening on %s\n", o.dev.c_str());
  for (;;) {
    // Queues are rebuilt per client; the device (and its listener) stays.
    Endpoint ep;
    ep.dev = std::move(dev.value());
    if (Status st = accept_client(ep, o); !st) {
      std::fprintf(stderr, "tern-perf server: %s\n", st.to_string().c_str());
      return 1;
    }
    o.qd = ep.qp->init().rq_depth;
    Sender tx;
    tx.cap = o.qd * 2;
    uint64_t echoed = 0, tx_i = 0;
    Wc wc[32];
    CmEvent ev;
    bool done = false;
    uint64_t polls = 0;
    while (!done) {
      int n = ep.rcq->poll(wc, 32);
      for (int i = 0; i < n && !done; ++i) {
        if (wc[i].status != WcStatus::kSuccess) {
          done = true;  // flushed: the client left
          break;
        }
        // Echo: copy into a send slot so the receive buffer can go back at once.
        if (!tx.wait_room(ep, o.timeout)) {
          done = true;
          break;
        }
        uint8_t* out = ep.tx + static_cast<size_t>(tx_i++ % (o.qd * 2)) * ep.slot;
        std::memcpy(out, ep.rx + wc[i].wr_id * ep.slot, wc[i].byte_len);
        post_recv_slot(ep, static_cast<uint32_t>(wc[i].wr_id));
        if (tx.send(ep, out, wc[i].byte_len) != 1) done = true;
        ++echoed;
      }
      if (!tx.reap(ep)) done = true;
      if ((++polls & 0xfff) == 0 && ep.dev->poll_cm(&ev) && ev.type == CmEventType::kDisconnected) done = true;
    }
    if (!o.quiet) std::fprintf(stderr, "tern-perf server: client left after %" PRIu64 " requests\n", echoed);
    // Destroy the QP before its CQs, PD and memory; keep the device.
    ep.qp.reset();
    dev = std::move(ep.dev);
    if (o.once) return 0;
  }
}

struct ClientResult {
  uint64_t requests = 0;
  double seconds = 0;
  apps::Percentiles lat;
  std::string stats;
};

int run_client(const Options& o) {
  Endpoint ep;
  auto dev = open_device(o.dev);
  if (!dev) {
    std::fprintf(stderr, "tern-perf client: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  ep.dev = std::move(dev.value());
  if (Status st = make_queues(o, &ep); !st) {
    std::fprintf(stderr, "tern-perf client: %s\n", st.to_string().c_str());
    return 1;
  }
  for (uint32_t i = 0; i < o.qd; ++i) post_recv_slot(ep, i);
  Hello h{{'P', 'E', 'R', 'F'}, o.size, o.qd};
  if (Status st = ep.dev->connect(ep.qp.get(), std::span(reinterpret_cast<const uint8_t*>(&h), sizeof h)); !st) {
    std::fprintf(stderr, "tern-perf client: %s\n", st.to_string().c_str());
    return 1;
  }
  if (Status st = wait_established(ep, o); !st) {
    std::fprintf(stderr, "tern-perf client: %s\n", st.to_string().c_str());
    return 1;
  }
  Sender tx;
  tx.cap = o.qd * 2;
  std::vector<uint64_t> sent_at(o.qd * 2, 0);
  std::vector<double> samples;
  samples.reserve(o.iters ? o.iters : 1u << 22);
  uint64_t next_id = 0, done_n = 0, measured = 0;
  uint64_t total = o.iters ? o.iters + o.warmup : UINT64_MAX;
  uint64_t t_start = 0, t_end = 0, t_deadline = UINT64_MAX, t_progress = 0;
  uint64_t tick_s = static_cast<uint64_t>(tick_hz());

  auto issue = [&]() -> bool {
    if (!tx.wait_room(ep, o.timeout)) return false;
    uint64_t id = next_id++;
    uint8_t* buf = ep.tx + static_cast<size_t>(id % (o.qd * 2)) * ep.slot;
    std::memcpy(buf, &id, 8);
    for (uint32_t k = 8; k < o.size; ++k) buf[k] = static_cast<uint8_t>(id + k);
    sent_at[id % sent_at.size()] = now_ticks();
    return tx.send(ep, buf, o.size) == 1;
  };
  for (uint32_t i = 0; i < o.qd && next_id < total; ++i)
    if (!issue()) return 1;
  Wc wc[32];
  bool ok = true;
  // A response must come within --timeout of the previous one (or of the
  // start): a server that stopped, or one in --rpc mode, which answers
  // nothing a raw client understands, must not leave the client spinning.
  const uint64_t stall_ticks = static_cast<uint64_t>(o.timeout * static_cast<double>(tick_s));
  uint64_t last_response = now_ticks();
  while (ok && done_n < total) {
    int n = ep.rcq->poll(wc, 32);
    uint64_t now = now_ticks();
    if (n > 0) {
      last_response = now;
    } else if (now - last_response > stall_ticks) {
      std::fprintf(stderr,
                   "tern-perf client: no response for %.1f s with %" PRIu64
                   " requests outstanding (is the server running, and in the same mode: --rpc or not?)\n",
                   o.timeout, next_id - done_n);
      ok = false;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) {
        std::fprintf(stderr, "tern-perf client: receive failed: %s\n", wc_status_name(wc[i].status));
        ok = false;
        break;
      }
      const uint8_t* rb = ep.rx + wc[i].wr_id * ep.slot;
      uint64_t id;
      std::memcpy(&id, rb, 8);
      if (wc[i].byte_len != o.size || id >= next_id || rb[o.size - 1] != static_cast<uint8_t>(id + o.size - 1)) {
        std::fprintf(stderr, "tern-perf client: response %" PRIu64 " is corrupt\n", id);
        ok = false;
        break;
      }
      ++done_n;
      if (done_n == o.warmup) {
        t_start = now;
        t_deadline = o.iters ? UINT64_MAX : now + static_cast<uint64_t>(o.seconds * static_cast<double>(tick_s));
        t_progress = now + tick_s;
      } else if (done_n > o.warmup) {
        ++measured;
        if (o.mode == "lat") samples.push_back(ns_from_ticks(now - sent_at[id % sent_at.size()]));
      }
      post_recv_slot(ep, static_cast<uint32_t>(wc[i].wr_id));
      if (now >= t_deadline) total = done_n;  // stop issuing; drain what is in flight
      if (next_id < total && !issue()) ok = false;
    }
    if (ok && !tx.reap(ep)) ok = false;
    if (t_start && now >= t_progress && !o.quiet) {
      double el = static_cast<double>(now - t_start) / static_cast<double>(tick_s);
      std::fprintf(stderr, "  %5.1f s  %10.0f req/s\n", el, static_cast<double>(measured) / el);
      t_progress += tick_s;
    }
    if (now >= t_deadline && next_id == done_n) break;
  }
  t_end = now_ticks();
  if (!ok) return 1;
  (void)ep.dev->disconnect(ep.qp.get());  // best effort: results are in hand

  ClientResult r;
  r.requests = measured;
  r.seconds = t_start ? static_cast<double>(t_end - t_start) / tick_hz() : 0;
  r.lat = apps::percentiles(std::move(samples));
  r.stats = format_stats(ep.qp->stats());
  double rps = r.seconds > 0 ? static_cast<double>(r.requests) / r.seconds : 0;
  double gbps = rps * o.size * 8 / 1e9;

  std::printf("tern-perf  mode=send/%s  dev=%s  size=%u  qd=%u\n", o.mode.c_str(), o.dev.c_str(), o.size, o.qd);
  std::printf("  requests      %12" PRIu64 "   in %.2f s\n", r.requests, r.seconds);
  std::printf("  throughput    %12.0f req/s   %.3f Gb/s each way\n", rps, gbps);
  if (o.mode == "lat") {
    std::printf("  latency (round trip, ns)\n");
    apps::print_latency(r.lat);
  }
  std::printf("  driver: %s\n", r.stats.c_str());
  if (!o.json.empty()) {
    FILE* f = apps::open_json(o.json);
    if (f == nullptr) return 1;
    std::fprintf(f,
                 "{\"mode\":\"send/%s\",\"dev\":\"%s\",\"size\":%u,\"qd\":%u,\"requests\":%" PRIu64
                 ",\"seconds\":%.6f,\"requests_per_s\":%.1f,\"gbps\":%.4f,"
                 "\"latency_ns\":{\"min\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"p99_9\":%.1f,\"max\":%.1f,\"mean\":%.1f}}\n",
                 o.mode.c_str(), apps::json_escape(o.dev).c_str(), o.size, o.qd, r.requests, r.seconds, rps, gbps, r.lat.min_ns,
                 r.lat.p50_ns, r.lat.p99_ns, r.lat.p999_ns, r.lat.max_ns, r.lat.mean_ns);
    std::fclose(f);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("tern-perf %s\n", tern::version());
    return 0;
  }
  Options o;
  bool help = false;
  if (!parse(argc, argv, &o, &help)) {
    std::fprintf(stderr, "\n");
    usage(stderr);
    return 2;
  }
  if (help) {
    usage(stdout);
    return 0;
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
