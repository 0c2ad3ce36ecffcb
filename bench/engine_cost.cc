// tern-engine-cost: the engine's own CPU time per RPC, client side and
// server side, with the driver's share subtracted.
//
// Both ends run in one thread on one core, so no cache line crosses cores and
// nothing waits: every nanosecond counted is work. Each loop pass times, with
// the TSC, the client's part (call() for every free slot, then the client
// engine's poll()) and the server's part (the server engine's poll(): its
// driver executes the client's descriptors, the handler echoes). The same
// message flow is then driven through the driver alone -- the client posts a
// Send of the call's size (every 16th signaled, as the engine does), the
// server takes it from its receive queue, reposts the receive and sends a
// reply of the reply's size, the client takes that and reposts -- and timed
// the same way. engine = RPC - raw, per side. Rounds alternate RPC and raw;
// the medians are printed.
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
};

Split run_rpc(long calls, long qd) {
  std::string spec = "shm:path=/tmp/tern-engine-cost-" + std::to_string(getpid()) + ".sock";
  EngineOptions so;
  so.arena_bytes = 64u << 20;
  auto srv = Engine::create(so);
  if (!srv) die("server engine: %s", srv.status().to_string().c_str());
  (*srv)->handle(kProg, kVers, kEcho, echo, nullptr);
  if (Status st = (*srv)->listen(spec); !st.is_ok()) die("listen: %s", st.to_string().c_str());
  EngineOptions co;
  co.arena_bytes = 32u << 20;
  auto cli = Engine::create(co);
  if (!cli) die("client engine: %s", cli.status().to_string().c_str());
  auto conn = (*cli)->connect(spec);
  if (!conn) die("connect: %s", conn.status().to_string().c_str());
  Connection* c = *conn;
  while (!c->ready()) {
    (*srv)->poll();
    (*cli)->poll();
    if (c->failed()) die("connection failed: %s", c->error().to_string().c_str());
  }
  uint8_t args[kArgs];
  for (uint32_t i = 0; i < kArgs; ++i) args[i] = static_cast<uint8_t>(i);
  std::vector<Slot> slots(static_cast<size_t>(qd));
  const long warm = 2000, total = warm + calls;
  long issued = 0, finished = 0;
  uint64_t tc = 0, ts = 0;
  while (finished < total) {
    const bool timed = finished >= warm;
    const uint64_t t0 = now_ticks();
    for (long k = 0; k < qd && issued < total; ++k) {
      Slot& s = slots[static_cast<size_t>(k)];
      if (s.busy) continue;
      s = Slot{true, false, CallStatus::kOk};
      Call call{kProg, kVers, kEcho};
      call.args = args;
      call.done = on_done;
      call.ctx = &s;
      if (c->call(call) != 0) die("call refused");
      ++issued;
    }
    (*cli)->poll();
    const uint64_t t1 = now_ticks();
    (*srv)->poll();
    const uint64_t t2 = now_ticks();
    if (timed) tc += t1 - t0, ts += t2 - t1;
    for (Slot& s : slots) {
      if (!s.busy || !s.done) continue;
      if (s.status != CallStatus::kOk) die("call failed: %s", call_status_name(s.status));
      s.busy = false;
      ++finished;
    }
  }
  std::string path = spec.substr(std::strlen("shm:path="));
  unlink(path.c_str());
  return Split{ns_from_ticks(tc) / static_cast<double>(calls), ns_from_ticks(ts) / static_cast<double>(calls)};
}

Split run_raw(long calls, long qd) {
  bench::QpSizes sz;
  sz.sq_depth = 256, sz.rq_depth = 256, sz.cq_depth = 1024;
  bench::Pair pair(8u << 20, 8u << 20, sz);
  pair.connect();
  bench::Side& cl = pair.client;
  bench::Side& sv = pair.server;
  const size_t slot = 256;
  bench::Buf csend = cl.alloc(slot * 64, kAccessLocalWrite);
  bench::Buf crecv = cl.alloc(slot * 64, kAccessLocalWrite);
  bench::Buf ssend = sv.alloc(slot * 64, kAccessLocalWrite);
  bench::Buf srecv = sv.alloc(slot * 64, kAccessLocalWrite);
  auto post_recv = [&](bench::Side& s, const bench::Buf& b, uint32_t i) {
    Sge g = b.sge((i % 64) * slot, slot);
    RecvWr w{i, &g, 1};
    s.post_recv(&w, 1);
  };
  for (uint32_t i = 0; i < 64; ++i) post_recv(cl, crecv, i), post_recv(sv, srecv, i);
  uint64_t csent = 0, ssent = 0, crecvd = 0;
  auto send = [&](bench::Side& s, const bench::Buf& b, uint64_t n, uint32_t len) {
    Sge g = b.sge((n % 64) * slot, len);
    SendWr w;
    w.wr_id = n;
    w.sg_list = &g;
    w.num_sge = 1;
    w.opcode = WrOpcode::kSend;
    w.flags = (n % 16 == 15) ? kWrSignaled : 0;
    s.post_send(&w, 1);
  };
  const long warm = 2000, total = warm + calls;
  uint64_t tc = 0, ts = 0;
  long inflight = 0;
  Wc wc[32];
  while (static_cast<long>(crecvd) < total) {
    const bool timed = static_cast<long>(crecvd) >= warm;
    const uint64_t t0 = now_ticks();
    while (inflight < qd && static_cast<long>(csent) < total) {
      send(cl, csend, csent++, kCallBytes);
      ++inflight;
    }
    int n = cl.cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) die("client completion: %s", bench::wc_string(wc[i]).c_str());
      if (wc[i].opcode != WcOpcode::kRecv) continue;
      if (wc[i].byte_len != kReplyBytes) die("reply of %u bytes", wc[i].byte_len);
      post_recv(cl, crecv, static_cast<uint32_t>(wc[i].wr_id));
      ++crecvd;
      --inflight;
    }
    const uint64_t t1 = now_ticks();
    n = sv.cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) die("server completion: %s", bench::wc_string(wc[i]).c_str());
      if (wc[i].opcode != WcOpcode::kRecv) continue;
      if (wc[i].byte_len != kCallBytes) die("call of %u bytes", wc[i].byte_len);
      post_recv(sv, srecv, static_cast<uint32_t>(wc[i].wr_id));
      send(sv, ssend, ssent++, kReplyBytes);
    }
    const uint64_t t2 = now_ticks();
    if (timed) tc += t1 - t0, ts += t2 - t1;
  }
  // Let the last unsignaled sends retire before the pair goes.
  for (int i = 0; i < 100; ++i) cl.cq->poll(wc, 32), sv.cq->poll(wc, 32);
  return Split{ns_from_ticks(tc) / static_cast<double>(calls), ns_from_ticks(ts) / static_cast<double>(calls)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  bench::detail::g_prog = "tern-engine-cost";
  long calls = 200000, qd = 1, rounds = 5;
  std::string json_path;
  tern::apps::OptionParser cli("tern-engine-cost", "[options]");
  cli.integer("calls", "N", "calls per round (default 200000)", 1000, 1l << 40, &calls);
  cli.integer("qd", "N", "calls in flight (default 1)", 1, 32, &qd);
  cli.integer("rounds", "N", "rounds; the medians are reported (default 5)", 1, 1000, &rounds);
  cli.text("json", "FILE", "also write the results as JSON", &json_path);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  const char* json = json_path.empty() ? nullptr : json_path.c_str();
  std::vector<double> rc, rs, wc, ws;
  for (long r = 0; r < rounds; ++r) {
    Split a = run_rpc(calls, qd);
    Split b = run_raw(calls, qd);
    rc.push_back(a.client_ns), rs.push_back(a.server_ns), wc.push_back(b.client_ns), ws.push_back(b.server_ns);
    std::fprintf(stderr, "round %ld/%ld: RPC client %.0f server %.0f ns, raw client %.0f server %.0f ns\n", r + 1,
                 rounds, a.client_ns, a.server_ns, b.client_ns, b.server_ns);
  }
  const double mc = median(rc), ms = median(rs), mwc = median(wc), mws = median(ws);
  std::vector<double> ec, es;
  for (size_t i = 0; i < rc.size(); ++i) ec.push_back(rc[i] - wc[i]), es.push_back(rs[i] - ws[i]);
  const double mec = median(ec), mes = median(es);
  std::printf("CPU time per RPC, one thread, 32-byte echo, %ld in flight (medians of %ld rounds of %ld calls)\n", qd,
              rounds, calls);
  std::printf("%-28s %10s %10s\n", "", "client", "server");
  std::printf("%-28s %8.0f ns %8.0f ns\n", "RPC through the engines", mc, ms);
  std::printf("%-28s %8.0f ns %8.0f ns\n", "the same Sends, driver only", mwc, mws);
  std::printf("%-28s %8.0f ns %8.0f ns\n", "the engine's own (RPC - raw)", mec, mes);
  if (json != nullptr) {
    FILE* f = std::fopen(json, "w");
    if (f == nullptr) die("cannot write %s", json);
    std::fprintf(f,
                 "{\"qd\": %ld, \"calls\": %ld, \"rounds\": %ld, \"rpc_client_ns\": %.1f, \"rpc_server_ns\": %.1f, "
                 "\"raw_client_ns\": %.1f, \"raw_server_ns\": %.1f, \"engine_client_ns\": %.1f, "
                 "\"engine_server_ns\": %.1f}\n",
                 qd, calls, rounds, mc, ms, mwc, mws, mec, mes);
    std::fclose(f);
  }
  return 0;
}
