// tern-engine-cost: the engine's own CPU time per RPC, client side and
// server side, with the driver's share subtracted.
//
// Both ends run in one thread on one core, so no cache line crosses cores and
// nothing waits: every nanosecond counted is work. Each loop pass times, with
// the TSC, the client's part (call() for every free slot, then the client
// engine's poll()) and the server's part (the server engine's poll(): its
// driver executes the client's descriptors, the handler echoes). The same
// message flow is driven through the driver alone -- the client posts a
// Send of the call's size (every 16th signaled, as the engine does), the
// server takes it from its receive queue, reposts the receive and sends a
// reply of the reply's size, the client takes that and reposts -- and timed
// the same way. engine = RPC - raw, per side.
//
// Both flows are set up once and then run in alternating blocks of --calls
// calls (RPC, raw, RPC, raw, ...), --rounds blocks each: what the machine
// does to one core's speed over seconds (this VM's host moves it by tens of
// percent) reaches an RPC block and the raw block beside it alike, so each
// pair's difference is steadier than two separately timed runs. Printed:
// the medians, and the spread of the per-pair engine figure (its 25th-75th
// percentiles and its range over the pairs).
//
//   tern-engine-cost [--calls N] [--qd N] [--rounds N] [--json FILE]
//
// The timing includes two TSC reads per side per pass (the same in both
// flows, so they cancel in the difference). Run it pinned on a quiet core,
// as scripts/compare-ucx.sh does (taskset -c 0).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "bench_util.h"
#include "engine/engine.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::rpc;
using namespace tern::rdma;
using tern::bench::die;

namespace {

constexpr uint32_t kProg = 0x20000042, kVers = 1, kEcho = 1;
constexpr uint32_t kArgs = 32;
// What the engine puts on the wire for a 32-byte echo (RPC-over-RDMA header,
// RPC call or reply header, the arguments or results): the raw flow sends
// the same sizes.
constexpr uint32_t kCallBytes = 28 + 40 + kArgs;
constexpr uint32_t kReplyBytes = 28 + 24 + kArgs;

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }

struct Slot {
  bool busy = false;
  bool done = false;
  CallStatus status = CallStatus::kOk;
};
void on_done(void* p, const CallReply& r) {
  auto* s = static_cast<Slot*>(p);
  s->done = true;
  s->status = r.status;
  if (r.status == CallStatus::kOk && r.results.size() != kArgs) s->status = CallStatus::kBadReply;
}

struct Split {
  double client_ns = 0, server_ns = 0;  // per RPC
  long dropped = 0;                     // passes left out (see Passes)
};

// Each side's loop passes of one block, timed. A pass over kStallFactor
// times the block's median pass of that side is one in which the CPU was
// taken away (an interrupt, the hypervisor, another task: tens of
// microseconds, where a pass is a few hundred ns) and is left out, its work
// with it -- a few passes in tens of thousands -- so that what the machine
// does beside the program does not enter the figure.
constexpr uint64_t kStallFactor = 10;
struct Passes {
  std::vector<uint64_t> client, server;
  void clear() { client.clear(), server.clear(); }
  static uint64_t kept(std::vector<uint64_t>& v, long* dropped) {
    if (v.empty()) return 0;
    std::vector<uint64_t> s = v;
    std::nth_element(s.begin(), s.begin() + static_cast<long>(s.size() / 2), s.end());
    const uint64_t cap = kStallFactor * std::max<uint64_t>(s[s.size() / 2], 1);
    uint64_t sum = 0;
    for (uint64_t t : v) {
      if (t > cap) {
        ++*dropped;
        continue;
      }
      sum += t;
    }
    return sum;
  }
  Split split(long calls) {
    Split r;
    r.client_ns = ns_from_ticks(kept(client, &r.dropped)) / static_cast<double>(calls);
    r.server_ns = ns_from_ticks(kept(server, &r.dropped)) / static_cast<double>(calls);
    return r;
  }
};

// Two engines over pmd/shm echoing 32 bytes, kept across blocks.
class RpcFlow {
 public:
  explicit RpcFlow(long qd) : qd_(qd), slots_(static_cast<size_t>(qd)) {
    spec_ = "shm:path=/tmp/tern-engine-cost-" + std::to_string(getpid()) + ".sock";
    EngineOptions so;
    so.arena_bytes = 64u << 20;
    auto srv = Engine::create(so);
    if (!srv) die("server engine: %s", srv.status().to_string().c_str());
    srv_ = std::move(*srv);
    srv_->handle(kProg, kVers, kEcho, echo, nullptr);
    if (Status st = srv_->listen(spec_); !st.is_ok()) die("listen: %s", st.to_string().c_str());
    EngineOptions co;
    co.arena_bytes = 32u << 20;
    auto cli = Engine::create(co);
    if (!cli) die("client engine: %s", cli.status().to_string().c_str());
    cli_ = std::move(*cli);
    auto conn = cli_->connect(spec_);
    if (!conn) die("connect: %s", conn.status().to_string().c_str());
    c_ = *conn;
    while (!c_->ready()) {
      srv_->poll();
      cli_->poll();
      if (c_->failed()) die("connection failed: %s", c_->error().to_string().c_str());
    }
    for (uint32_t i = 0; i < kArgs; ++i) args_[i] = static_cast<uint8_t>(i);
    run(2000, false);  // warm-up
  }
  ~RpcFlow() { unlink(spec_.substr(std::strlen("shm:path=")).c_str()); }

  // `calls` calls, `qd` in flight; the block ends when all have finished.
  Split run(long calls, bool timed = true) {
    long issued = 0, finished = 0;
    passes_.clear();
    while (finished < calls) {
      const uint64_t t0 = now_ticks();
      for (long k = 0; k < qd_ && issued < calls; ++k) {
        Slot& s = slots_[static_cast<size_t>(k)];
        if (s.busy) continue;
        s = Slot{true, false, CallStatus::kOk};
        Call call{kProg, kVers, kEcho};
        call.args = args_;
        call.done = on_done;
        call.ctx = &s;
        if (c_->call(call) != 0) die("call refused");
        ++issued;
      }
      cli_->poll();
      const uint64_t t1 = now_ticks();
      srv_->poll();
      const uint64_t t2 = now_ticks();
      if (timed) passes_.client.push_back(t1 - t0), passes_.server.push_back(t2 - t1);
      for (Slot& s : slots_) {
        if (!s.busy || !s.done) continue;
        if (s.status != CallStatus::kOk) die("call failed: %s", call_status_name(s.status));
        s.busy = false;
        ++finished;
      }
    }
    return timed ? passes_.split(calls) : Split{};
  }

 private:
  long qd_;
  Passes passes_;
  std::vector<Slot> slots_;
  std::string spec_;
  std::unique_ptr<Engine> srv_, cli_;
  Connection* c_ = nullptr;
  uint8_t args_[kArgs];
};

// The same messages through the driver alone, kept across blocks.
class RawFlow {
 public:
  explicit RawFlow(long qd) : qd_(qd), pair_(8u << 20, 8u << 20, sizes()) {
    pair_.connect();
    csend_ = pair_.client.alloc(kSlot * 64, kAccessLocalWrite);
    crecv_ = pair_.client.alloc(kSlot * 64, kAccessLocalWrite);
    ssend_ = pair_.server.alloc(kSlot * 64, kAccessLocalWrite);
    srecv_ = pair_.server.alloc(kSlot * 64, kAccessLocalWrite);
    for (uint32_t i = 0; i < 64; ++i) post_recv(pair_.client, crecv_, i), post_recv(pair_.server, srecv_, i);
    run(2000, false);  // warm-up
  }
  ~RawFlow() {
    // Let the last unsignaled sends retire before the pair goes.
    Wc wc[32];
    for (int i = 0; i < 100; ++i) pair_.client.cq->poll(wc, 32), pair_.server.cq->poll(wc, 32);
  }

  Split run(long calls, bool timed = true) {
    bench::Side& cl = pair_.client;
    bench::Side& sv = pair_.server;
    long sent = 0, got = 0;
    passes_.clear();
    Wc wc[32];
    while (got < calls) {
      const uint64_t t0 = now_ticks();
      while (inflight_ < qd_ && sent < calls) {
        send(cl, csend_, csent_++, kCallBytes);
        ++sent;
        ++inflight_;
      }
      int n = cl.cq->poll(wc, 32);
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != WcStatus::kSuccess) die("client completion: %s", bench::wc_string(wc[i]).c_str());
        if (wc[i].opcode != WcOpcode::kRecv) continue;
        if (wc[i].byte_len != kReplyBytes) die("reply of %u bytes", wc[i].byte_len);
        post_recv(cl, crecv_, static_cast<uint32_t>(wc[i].wr_id));
        ++got;
        --inflight_;
      }
      const uint64_t t1 = now_ticks();
      n = sv.cq->poll(wc, 32);
      for (int i = 0; i < n; ++i) {
        if (wc[i].status != WcStatus::kSuccess) die("server completion: %s", bench::wc_string(wc[i]).c_str());
        if (wc[i].opcode != WcOpcode::kRecv) continue;
        if (wc[i].byte_len != kCallBytes) die("call of %u bytes", wc[i].byte_len);
        post_recv(sv, srecv_, static_cast<uint32_t>(wc[i].wr_id));
        send(sv, ssend_, ssent_++, kReplyBytes);
      }
      const uint64_t t2 = now_ticks();
      if (timed) passes_.client.push_back(t1 - t0), passes_.server.push_back(t2 - t1);
    }
    return timed ? passes_.split(calls) : Split{};
  }

 private:
  static constexpr size_t kSlot = 256;
  static bench::QpSizes sizes() {
    bench::QpSizes sz;
    sz.sq_depth = 256, sz.rq_depth = 256, sz.cq_depth = 1024;
    return sz;
  }
  static void post_recv(bench::Side& s, const bench::Buf& b, uint32_t i) {
    Sge g = b.sge((i % 64) * kSlot, kSlot);
    RecvWr w{i, &g, 1};
    s.post_recv(&w, 1);
  }
  static void send(bench::Side& s, const bench::Buf& b, uint64_t n, uint32_t len) {
    Sge g = b.sge((n % 64) * kSlot, len);
    SendWr w;
    w.wr_id = n;
    w.sg_list = &g;
    w.num_sge = 1;
    w.opcode = WrOpcode::kSend;
    w.flags = (n % 16 == 15) ? kWrSignaled : 0;
    s.post_send(&w, 1);
  }
  long qd_;
  Passes passes_;
  bench::Pair pair_;
  bench::Buf csend_, crecv_, ssend_, srecv_;
  uint64_t csent_ = 0, ssent_ = 0;
  long inflight_ = 0;
};

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (pos - static_cast<double>(i)) * (v[i + 1] - v[i]);
}
double median(const std::vector<double>& v) { return quantile(v, 0.5); }

struct Spread {
  double median, p25, p75, min, max;
};
Spread spread(const std::vector<double>& v) {
  return {median(v), quantile(v, 0.25), quantile(v, 0.75), *std::min_element(v.begin(), v.end()),
          *std::max_element(v.begin(), v.end())};
}

}  // namespace

int main(int argc, char** argv) {
  bench::detail::g_prog = "tern-engine-cost";
  long calls = 20000, qd = 1, rounds = 50;
  std::string json_path;
  bool verbose = false;
  tern::apps::OptionParser cli("tern-engine-cost", "[options]");
  cli.integer("calls", "N", "calls per block (default 20000)", 1000, 1l << 40, &calls);
  cli.integer("qd", "N", "calls in flight (default 1)", 1, 32, &qd);
  cli.integer("rounds", "N", "blocks of each flow, alternated; the medians are reported (default 50)", 1, 100000,
              &rounds);
  cli.text("json", "FILE", "also write the results as JSON", &json_path);
  cli.flag("verbose", "print every block pair", &verbose);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  const char* json = json_path.empty() ? nullptr : json_path.c_str();
  RpcFlow rpc(qd);
  RawFlow raw(qd);
  std::vector<double> rc, rs, wc, ws, ec, es;
  long dropped = 0;
  for (long r = 0; r < rounds; ++r) {
    // Each pair's order alternates, so neither flow always runs first.
    Split a, b;
    if (r % 2 == 0) {
      a = rpc.run(calls);
      b = raw.run(calls);
    } else {
      b = raw.run(calls);
      a = rpc.run(calls);
    }
    rc.push_back(a.client_ns), rs.push_back(a.server_ns), wc.push_back(b.client_ns), ws.push_back(b.server_ns);
    ec.push_back(a.client_ns - b.client_ns), es.push_back(a.server_ns - b.server_ns);
    dropped += a.dropped + b.dropped;
    if (verbose)
      std::fprintf(stderr, "pair %ld/%ld: RPC client %.0f server %.0f ns, raw client %.0f server %.0f ns\n", r + 1,
                   rounds, a.client_ns, a.server_ns, b.client_ns, b.server_ns);
  }
  const Spread sc = spread(ec), ss = spread(es);
  const double mc = median(rc), ms = median(rs), mwc = median(wc), mws = median(ws);
  std::printf("CPU time per RPC, one thread, 32-byte echo, %ld in flight (medians of %ld alternated blocks of %ld calls)\n",
              qd, rounds, calls);
  std::printf("%-36s %11s %11s\n", "", "client", "server");
  std::printf("%-36s %8.0f ns %8.0f ns\n", "RPC through the engines", mc, ms);
  std::printf("%-36s %8.0f ns %8.0f ns\n", "the same Sends, driver only", mwc, mws);
  std::printf("%-36s %8.0f ns %8.0f ns\n", "the engine's own (RPC - raw, paired)", sc.median, ss.median);
  auto span = [](double a, double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f-%.0f ns", a, b);
    return std::string(buf);
  };
  std::printf("%-36s %11s %11s\n", "  25th-75th percentile of the pairs", span(sc.p25, sc.p75).c_str(),
              span(ss.p25, ss.p75).c_str());
  std::printf("%-36s %11s %11s\n", "  range of the pairs", span(sc.min, sc.max).c_str(), span(ss.min, ss.max).c_str());
  std::printf("passes left out as stalls (over %llux the block's median pass): %ld\n",
              static_cast<unsigned long long>(kStallFactor), dropped);
  if (json != nullptr) {
    FILE* f = std::fopen(json, "w");
    if (f == nullptr) die("cannot write %s", json);
    std::fprintf(f,
                 "{\"qd\": %ld, \"calls\": %ld, \"rounds\": %ld, \"rpc_client_ns\": %.1f, \"rpc_server_ns\": %.1f, "
                 "\"raw_client_ns\": %.1f, \"raw_server_ns\": %.1f, \"engine_client_ns\": %.1f, "
                 "\"engine_server_ns\": %.1f, \"engine_client_p25_p75_ns\": [%.1f, %.1f], "
                 "\"engine_server_p25_p75_ns\": [%.1f, %.1f], \"engine_client_range_ns\": [%.1f, %.1f], "
                 "\"engine_server_range_ns\": [%.1f, %.1f], \"stall_passes_dropped\": %ld}\n",
                 qd, calls, rounds, mc, ms, mwc, mws, sc.median, ss.median, sc.p25, sc.p75, ss.p25, ss.p75, sc.min,
                 sc.max, ss.min, ss.max, dropped);
    std::fclose(f);
  }
  return 0;
}
