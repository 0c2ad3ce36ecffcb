// tern-perf: a perftest-style tool. A server echoes requests; a client measures
// round-trip latency (min/p50/p99/p99.9/max) or throughput (requests/s, Gb/s)
// with a given message size and queue depth, and prints a readable table and
// optionally JSON.
//
// Mode "send" (this version): each request is one SEND, each response one SEND
// back, through the driver interface directly; it is the baseline the RPC
// engine's overhead is measured against.
#include <getopt.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "mem/arena.h"
#include "perf_stats.h"
#include "rdmadev/rdmadev.h"
#include "runtime/eal.h"

using namespace tern;
using namespace tern::rdma;

namespace {

struct Options {
  bool server = false;
  std::string dev = "shm:path=/tmp/tern-perf.sock";
  std::string mode = "lat";  // lat | bw
  uint32_t size = 32;
  uint32_t qd = 1;
  double seconds = 2.0;
  uint64_t iters = 0;  // 0: run for `seconds`
  uint32_t warmup = 1000;
  int lcore = -1;      // -1: do not pin
  bool use_eal = false;
  bool once = false;
  std::string json;
  bool quiet = false;
};

void usage() {
  std::fprintf(stderr,
               "usage: tern-perf server [options]\n"
               "       tern-perf client [options]\n"
               "  --dev SPEC       device (default shm:path=/tmp/tern-perf.sock); drivers: %s\n"
               "  --mode lat|bw    client: latency (one at a time by default) or throughput\n"
               "  --size N         message bytes (default 32, at least 8)\n"
               "  --qd N           requests in flight (default 1 for lat, 32 for bw)\n"
               "  --seconds S      run time (default 2)\n"
               "  --iters N        run N requests instead of a time\n"
               "  --warmup N       requests before measuring (default 1000)\n"
               "  --lcore N        run pinned to CPU/lcore N\n"
               "  --eal            start DPDK EAL and run the engine on lcore --lcore\n"
               "  --once           server: exit after the first client leaves\n"
               "  --json FILE      client: also write results as JSON\n"
               "  --quiet          no progress lines\n",
               [] {
                 std::string s;
                 for (auto& n : driver_names()) s += (s.empty() ? "" : ", ") + n;
                 return s;
               }()
                   .c_str());
}

bool parse(int argc, char** argv, Options* o) {
  if (argc < 2) return false;
  std::string role = argv[1];
  if (role == "server") o->server = true;
  else if (role != "client") return false;
  static option longs[] = {{"dev", 1, nullptr, 'd'},    {"mode", 1, nullptr, 'm'},   {"size", 1, nullptr, 's'},
                           {"qd", 1, nullptr, 'q'},     {"seconds", 1, nullptr, 't'}, {"iters", 1, nullptr, 'n'},
                           {"warmup", 1, nullptr, 'w'}, {"lcore", 1, nullptr, 'l'},  {"eal", 0, nullptr, 'E'},
                           {"once", 0, nullptr, 'o'},   {"json", 1, nullptr, 'j'},   {"quiet", 0, nullptr, 'Q'},
                           {"help", 0, nullptr, 'h'},   {nullptr, 0, nullptr, 0}};
  bool qd_set = false;
  optind = 2;
  int c;
  while ((c = getopt_long(argc, argv, "", longs, nullptr)) != -1) {
    switch (c) {
      case 'd': o->dev = optarg; break;
      case 'm': o->mode = optarg; break;
      case 's': o->size = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0)); break;
      case 'q': o->qd = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0)), qd_set = true; break;
      case 't': o->seconds = std::strtod(optarg, nullptr); break;
      case 'n': o->iters = std::strtoull(optarg, nullptr, 0); break;
      case 'w': o->warmup = static_cast<uint32_t>(std::strtoul(optarg, nullptr, 0)); break;
      case 'l': o->lcore = std::atoi(optarg); break;
      case 'E': o->use_eal = true; break;
      case 'o': o->once = true; break;
      case 'j': o->json = optarg; break;
      case 'Q': o->quiet = true; break;
      default: return false;
    }
  }
  if (o->mode != "lat" && o->mode != "bw") {
    std::fprintf(stderr, "tern-perf: --mode must be lat or bw\n");
    return false;
  }
  if (!qd_set) o->qd = o->mode == "bw" ? 32 : 1;
  if (o->size < 8 || o->size > (64u << 20) || o->qd == 0 || o->qd > 1024 || o->seconds <= 0) {
    std::fprintf(stderr, "tern-perf: need 8 <= --size <= 64Mi, 1 <= --qd <= 1024, --seconds > 0\n");
    return false;
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
  // because its previous SEND is known complete. False on an error completion.
  bool wait_room(Endpoint& ep) {
    while (!can_send())
      if (!reap(ep)) return false;
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
        if (!tx.wait_room(ep)) {
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
    if (!tx.wait_room(ep)) return false;
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
  while (ok && done_n < total) {
    int n = ep.rcq->poll(wc, 32);
    uint64_t now = now_ticks();
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
    std::printf("    min %8.0f   p50 %8.0f   p99 %8.0f   p99.9 %8.0f   max %8.0f   mean %8.0f\n", r.lat.min_ns,
                r.lat.p50_ns, r.lat.p99_ns, r.lat.p999_ns, r.lat.max_ns, r.lat.mean_ns);
  }
  std::printf("  driver: %s\n", r.stats.c_str());
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "tern-perf: cannot write %s: %s\n", o.json.c_str(), std::strerror(errno));
      return 1;
    }
    std::fprintf(f,
                 "{\"mode\":\"send/%s\",\"dev\":\"%s\",\"size\":%u,\"qd\":%u,\"requests\":%" PRIu64
                 ",\"seconds\":%.6f,\"requests_per_s\":%.1f,\"gbps\":%.4f,"
                 "\"latency_ns\":{\"min\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"p99_9\":%.1f,\"max\":%.1f,\"mean\":%.1f}}\n",
                 o.mode.c_str(), o.dev.c_str(), o.size, o.qd, r.requests, r.seconds, rps, gbps, r.lat.min_ns,
                 r.lat.p50_ns, r.lat.p99_ns, r.lat.p999_ns, r.lat.max_ns, r.lat.mean_ns);
    std::fclose(f);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) {
    usage();
    return 2;
  }
  auto body = [&o]() { return o.server ? run_server(o) : run_client(o); };
  if (!o.use_eal) {
    if (o.lcore >= 0) {
      if (Status st = runtime::pin_current_thread(static_cast<unsigned>(o.lcore)); !st)
        std::fprintf(stderr, "tern-perf: %s (running unpinned)\n", st.to_string().c_str());
    }
    return body();
  }
  // EAL: the main lcore waits, the engine runs pinned on a worker lcore.
  unsigned lc = o.lcore >= 0 ? static_cast<unsigned>(o.lcore) : 1;
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
