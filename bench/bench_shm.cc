// pmd/shm microbenchmarks (Google Benchmark).
//
// Two engines in one process: a "client" driven by the benchmark thread,
// pinned to CPU 0, and a "server" driven by a peer thread pinned to CPU 1, each
// with its own shm Device/Arena/PD/CQ/QP. The shm driver moves data only when a
// side polls, so the peer thread busy-polls its CQ for the whole timed loop.
// Every benchmark call builds and connects a fresh pair (outside the timed
// region), warms it up, checks the data it moved, and tears it down.
//
//   BM_CacheLineRoundTrip   raw cross-core cache-line ping-pong: the scale
//   BM_SendPingPong/size    SEND -> peer RECV -> peer SEND back -> RECV
//   BM_SendMessageRate      one-way 64-byte SENDs, 64 in flight
//   BM_RdmaWriteBandwidth   RDMA WRITEs of `size`, 16 in flight; fresh:1 dirties
//                           every source line before each write
//   BM_RegMrLocalInv        REG_MR + LOCAL_INV pairs on fast MRs, 1 or 16 per post
//
// See docs/performance.md for results and how to read them.
#include <benchmark/benchmark.h>

#include <cinttypes>
#include <cstring>

#include "bench_util.h"

namespace tern::bench {
namespace {

// Seconds per benchmark unless --benchmark_min_time says otherwise (main()
// passes it as a default flag, so that the command line can override it).
constexpr const char* kDefaultMinTime = "--benchmark_min_time=0.3";

// ================================================================ 1. raw cache line
// BM_CacheLineRoundTrip is in bench_util.h (every benchmark program measures it).

// ================================================================ 2. SEND ping-pong

// The echo server, PingClient and PingPongRig are in bench_util.h (shared with
// tern-bench-engine, which measures the same ping-pong next to RPC round trips).

void BM_SendPingPong(benchmark::State& state) {
  CallScope scope;
  PingPongRig rig(static_cast<size_t>(state.range(0)));
  // The raw cache-line round trip right next to this measurement, for x_cl_adj.
  double cl_adj = measure_line_rtt_ns(kServerCpu, 3, std::chrono::milliseconds(10));
  rig.start(kServerCpu);  // and 2000 checked round trips of warm-up

  PingClient& pc = *rig.pc;
  uint64_t first = pc.seq;
  uint64_t t0 = now_ns();
  for (auto _ : state) pc.round_trip(false);
  uint64_t t1 = now_ns();
  rig.finish();  // one more checked round trip, then the echo server stops
  if (pc.seq - first != static_cast<uint64_t>(state.iterations()) + 1) die("client: round-trip count is off");

  double rtt = static_cast<double>(t1 - t0) / static_cast<double>(state.iterations());
  state.counters["rtt_ns"] = rtt;
  state.counters["x_cl"] = rtt / g_cl_rtt_ns;
  state.counters["cl_adj_ns"] = cl_adj;
  state.counters["x_cl_adj"] = rtt / cl_adj;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// ================================================================ 3. message rate

constexpr uint64_t kMrWindow = 64;       // client sends in flight
constexpr size_t kMrSize = 64;           // bytes per message
constexpr uint32_t kMrRecvBufs = 256;    // server receives posted
constexpr uint32_t kMrRepostBatch = 32;

struct SinkResult {
  uint64_t received = 0;
  uint64_t full_checks = 0;
};

// Receives, checks every message's sequence number (and every 1024th message's
// whole payload), reposts receives 32 at a time.
void sink_server(Side& s, const Buf& rbuf, SinkResult* out, const std::atomic<bool>& stop) {
  Wc wc[32];
  RecvWr reposts[kMrRepostBatch];
  Sge repost_sge[kMrRepostBatch];
  uint32_t npend = 0;
  uint64_t expect = 1;
  while (!stop.load(std::memory_order_relaxed)) {
    int n = s.cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) return peer_fail("sink server: %s", wc_string(wc[i]).c_str());
      if (wc[i].opcode != WcOpcode::kRecv || wc[i].wr_id >= kMrRecvBufs || wc[i].byte_len != kMrSize)
        return peer_fail("sink server: unexpected completion %s", wc_string(wc[i]).c_str());
      uint64_t idx = wc[i].wr_id;
      const uint8_t* m = rbuf.p + idx * kMrSize;
      uint64_t seq;
      std::memcpy(&seq, m, sizeof seq);
      if (seq != expect)
        return peer_fail("sink server: message %" PRIu64 " carries sequence %" PRIu64, expect, seq);
      if (seq % 1024 == 1) {
        // The client fills send buffer k with pattern k+1, then stamps the sequence.
        uint32_t seed = static_cast<uint32_t>(seq % kMrWindow) + 1;
        if (long long bad = find_pattern_mismatch(m, kMrSize, seed, sizeof seq); bad >= 0)
          return peer_fail("sink server: message %" PRIu64 " differs at byte %lld", seq, bad);
        ++out->full_checks;
      }
      ++expect;
      repost_sge[npend] = rbuf.sge(idx * kMrSize, kMrSize);
      reposts[npend] = RecvWr{idx, &repost_sge[npend], 1};
      if (++npend == kMrRepostBatch) {
        int err = 0;
        if (s.qp->post_recv(reposts, static_cast<int>(npend), &err) != static_cast<int>(npend))
          return peer_fail("sink server: post_recv failed, err %d", err);
        npend = 0;
      }
    }
  }
  out->received = expect - 1;
}

void BM_SendMessageRate(benchmark::State& state) {
  CallScope scope;
  const uint64_t burst = static_cast<uint64_t>(state.range(0));  // sends per post_send chain
  Pair pair(4u << 20, 4u << 20);
  Side& c = pair.client;
  Side& s = pair.server;
  Buf rbuf = s.alloc(kMrRecvBufs * kMrSize, kAccessLocalWrite);
  Buf sbuf = c.alloc(kMrWindow * kMrSize, kAccessLocalWrite);
  for (uint64_t b = 0; b < kMrWindow; ++b) fill_pattern(sbuf.p + b * kMrSize, kMrSize, static_cast<uint32_t>(b + 1));
  {
    std::vector<Sge> sg(kMrRecvBufs);
    std::vector<RecvWr> rw(kMrRecvBufs);
    for (uint32_t i = 0; i < kMrRecvBufs; ++i) {
      sg[i] = rbuf.sge(i * kMrSize, kMrSize);
      rw[i] = RecvWr{i, &sg[i], 1};
    }
    s.post_recv(rw.data(), static_cast<int>(kMrRecvBufs));
  }
  pair.connect();

  SinkResult sink;
  PeerThread server;
  server.start(kServerCpu, [&](const std::atomic<bool>& stop) { sink_server(s, rbuf, &sink, stop); });

  uint64_t seq = 0, completed = 0;
  SendWr wrs[16];
  Sge sges[16];
  auto reap = [&](const char* what) {
    Waiter w(what);
    for (;;) {
      Wc wc[32];
      int n = c.cq->poll(wc, 32);
      for (int i = 0; i < n; ++i) {
        check_wc(wc[i], "client", pair);
        if (wc[i].opcode != WcOpcode::kSend) die("client: unexpected %s", wc_string(wc[i]).c_str());
        completed = wc[i].wr_id;
      }
      if (n > 0) return;
      if (w.expired()) wait_failed(w, pair);
    }
  };
  // Posts `k` messages as one chain; every 16th message is signaled.
  auto post = [&](uint64_t k) {
    while (seq + k - completed > kMrWindow) reap("send completions (window full)");
    for (uint64_t j = 0; j < k; ++j) {
      uint64_t q = seq + 1 + j;
      size_t off = (q % kMrWindow) * kMrSize;
      std::memcpy(sbuf.p + off, &q, sizeof q);
      sges[j] = sbuf.sge(off, kMrSize);
      wrs[j] = SendWr{};
      wrs[j].wr_id = q;
      wrs[j].sg_list = &sges[j];
      wrs[j].num_sge = 1;
      wrs[j].opcode = WrOpcode::kSend;
      wrs[j].flags = q % kSignalEvery == 0 ? kWrSignaled : 0;
    }
    c.post_send(wrs, static_cast<int>(k));
    seq += k;
  };
  auto drain = [&] {
    while (seq % kSignalEvery != 0) post(1);  // the last message must be signaled
    while (completed != seq) reap("the last send completions");
  };

  for (int i = 0; i < 4096 / static_cast<int>(burst); ++i) post(burst);  // warm-up
  drain();
  uint64_t first = seq;
  for (auto _ : state) post(burst);
  uint64_t timed = seq - first;
  drain();
  server.stop();
  if (peer_failed()) die("the sink server failed");
  if (sink.received != seq)
    die("the server received %" PRIu64 " messages, the client sent %" PRIu64, sink.received, seq);
  if (sink.full_checks == 0) die("the server never checked a whole message");
  state.SetItemsProcessed(static_cast<int64_t>(timed));
  state.SetBytesProcessed(static_cast<int64_t>(timed * kMrSize));
}

// ================================================================ 4. RDMA WRITE bandwidth

constexpr uint64_t kWrWindow = 16;      // writes in flight
constexpr uint64_t kWrSignalEvery = 4;

// The target: polls so that the driver executes the initiator's writes.
void target_server(Side& s, const std::atomic<bool>& stop) {
  Wc wc[8];
  while (!stop.load(std::memory_order_relaxed)) {
    if (int n = s.cq->poll(wc, 8); n > 0) return peer_fail("write target: unexpected completion %s",
                                                         wc_string(wc[0]).c_str());
  }
}

// fresh:0 -- the source buffers never change, so after the first pass the
//   target core may hold them in its own caches (when 16 x size fits): the
//   driver's best case, close to a local memcpy.
// fresh:1 -- before each write the client stores into every cache line of the
//   source slot (a new sequence number), as an application producing the data
//   would: each line must then travel from the client's core to the target's.
void BM_RdmaWriteBandwidth(benchmark::State& state) {
  CallScope scope;
  const size_t size = static_cast<size_t>(state.range(0));
  const bool fresh = state.range(1) != 0;
  const size_t arena = kWrWindow * size + (1u << 20);
  Pair pair(arena, arena);
  Side& c = pair.client;
  Side& s = pair.server;
  Buf dst = s.alloc(kWrWindow * size, kAccessLocalWrite | kAccessRemoteWrite);
  Buf src = c.alloc(kWrWindow * size, kAccessLocalWrite);
  auto fill_src = [&](uint32_t salt) {
    for (uint64_t k = 0; k < kWrWindow; ++k) fill_pattern(src.p + k * size, size, salt + static_cast<uint32_t>(k));
  };
  auto check_dst = [&](uint32_t salt, const char* when) {
    for (uint64_t k = 0; k < kWrWindow; ++k)
      if (long long bad = find_pattern_mismatch(dst.p + k * size, size, salt + static_cast<uint32_t>(k)); bad >= 0)
        die("RDMA WRITE %s: target slot %" PRIu64 " differs at byte %lld of %zu", when, k, bad, size);
  };
  // The target must hold exactly the source (patterns and stamps).
  auto check_dst_equals_src = [&](const char* when) {
    for (uint64_t k = 0; k < kWrWindow; ++k)
      for (size_t i = 0; i < size; ++i)
        if (dst.p[k * size + i] != src.p[k * size + i])
          die("RDMA WRITE %s: target slot %" PRIu64 " differs from the source at byte %zu of %zu", when, k, i,
              size);
  };
  pair.connect();

  PeerThread server;
  server.start(kServerCpu, [&](const std::atomic<bool>& stop) { target_server(s, stop); });

  uint64_t posted = 0, completed = 0;
  auto reap = [&](const char* what) {
    Waiter w(what);
    for (;;) {
      Wc wc[16];
      int n = c.cq->poll(wc, 16);
      for (int i = 0; i < n; ++i) {
        check_wc(wc[i], "client", pair);
        if (wc[i].opcode != WcOpcode::kRdmaWrite) die("client: unexpected %s", wc_string(wc[i]).c_str());
        completed = wc[i].wr_id;
      }
      if (n > 0) return;
      if (w.expired()) wait_failed(w, pair);
    }
  };
  auto post = [&] {
    while (posted - completed >= kWrWindow) reap("write completions (window full)");
    uint64_t k = posted % kWrWindow;
    if (fresh) {
      // The slot's previous write has completed (window check above): rewrite it.
      uint64_t stamp = posted + 1;
      for (size_t off = 0; off < size; off += 64) std::memcpy(src.p + k * size + off, &stamp, sizeof stamp);
    }
    Sge sg = src.sge(k * size, size);
    SendWr w;
    w.wr_id = ++posted;
    w.sg_list = &sg;
    w.num_sge = 1;
    w.opcode = WrOpcode::kRdmaWrite;
    w.flags = posted % kWrSignalEvery == 0 ? kWrSignaled : 0;
    w.remote_addr = dst.addr(k * size);
    w.rkey = dst.mr->rkey();
    c.post_send(&w, 1);
  };
  auto drain = [&] {
    while (posted % kWrSignalEvery != 0) post();
    while (completed != posted) reap("the last write completions");
  };

  // Warm-up (faults in the target's mapping of the client's memory), checked;
  // then a second pattern, which only the timed writes can deliver.
  fill_src(1000);
  for (uint64_t i = 0; i < 4 * kWrWindow; ++i) post();
  drain();
  check_dst_equals_src("warm-up");
  if (!fresh) check_dst(1000, "warm-up");
  fill_src(2000);
  uint64_t first = posted;
  for (auto _ : state) post();
  uint64_t timed = posted - first;
  drain();
  server.stop();
  if (peer_failed()) die("the write target failed");
  if (timed >= kWrWindow) {
    if (!fresh) check_dst(2000, "timed loop");
    check_dst_equals_src("timed loop");
  }
  uint64_t bytes_in = s.stat("bytes_in");
  if (bytes_in != posted * size)
    die("the target executed %" PRIu64 " bytes of writes, the client posted %" PRIu64, bytes_in, posted * size);
  state.SetBytesProcessed(static_cast<int64_t>(timed * size));
  state.SetItemsProcessed(static_cast<int64_t>(timed));
}

// ================================================================ 5. REG_MR + LOCAL_INV

constexpr uint32_t kRegDepth = 16;  // pages per registration (64 KiB)
constexpr size_t kRegLen = kRegDepth * 4096;

void BM_RegMrLocalInv(benchmark::State& state) {
  CallScope scope;
  const int batch = static_cast<int>(state.range(0));  // pairs per post_send
  Pair pair(4u << 20, 4u << 20);
  Side& c = pair.client;
  Side& s = pair.server;
  Buf backing = c.alloc(16 * kRegLen, kAccessAll);
  Buf probe = s.alloc(4096, kAccessLocalWrite);
  std::vector<FastMr*> fmr;
  for (int k = 0; k < batch; ++k) fmr.push_back(c.alloc_fast_mr(kRegDepth));
  pair.connect();

  // Both sides are driven from this thread: the server stays idle (a local
  // operation needs no peer), except for the one check below.
  auto wait_client = [&](uint64_t wr_id, WcOpcode op, const char* what) {
    Waiter w(what);
    for (;;) {
      Wc wc[4];
      int n = c.cq->poll(wc, 4);
      if (n > 1) die("client: %d completions, expected one", n);
      if (n == 1) {
        check_wc(wc[0], "client", pair);
        if (wc[0].wr_id != wr_id || wc[0].opcode != op)
          die("client: got %s, expected wr_id %" PRIu64 " %s", wc_string(wc[0]).c_str(), wr_id, wc_opcode_name(op));
        return;
      }
      if (w.expired()) wait_failed(w, pair);
    }
  };
  auto reg_wr = [&](FastMr* m, size_t off, uint32_t rkey, uint64_t id, bool signaled) {
    SendWr w;
    w.wr_id = id;
    w.opcode = WrOpcode::kRegMr;
    w.flags = signaled ? kWrSignaled : 0;
    w.reg.mr = m;
    w.reg.addr = backing.addr(off);
    w.reg.length = kRegLen;
    w.reg.lkey = backing.mr->lkey();
    w.reg.access = kAccessAll;
    w.reg.rkey = rkey;
    return w;
  };
  auto inv_wr = [&](uint32_t rkey, uint64_t id, bool signaled) {
    SendWr w;
    w.wr_id = id;
    w.opcode = WrOpcode::kLocalInv;
    w.flags = signaled ? kWrSignaled : 0;
    w.invalidate_rkey = rkey;
    return w;
  };

  // Check once that a registration really maps memory: register, let the
  // server RDMA WRITE through the new rkey, check the bytes, invalidate.
  {
    uint32_t rk = fmr[0]->bump_rkey();
    SendWr r = reg_wr(fmr[0], 3 * 4096, rk, 1, true);
    c.post_send(&r, 1);
    wait_client(1, WcOpcode::kRegMr, "the check's REG_MR");
    fill_pattern(probe.p, 4096, 77);
    Sge sg = probe.sge(0, 4096);
    SendWr w;
    w.wr_id = 2;
    w.sg_list = &sg;
    w.num_sge = 1;
    w.opcode = WrOpcode::kRdmaWrite;
    w.flags = kWrSignaled;
    w.remote_addr = backing.addr(3 * 4096 + 100);
    w.rkey = rk;
    s.post_send(&w, 1);
    Waiter wt("the server's RDMA WRITE through the fast MR");
    for (bool done = false; !done;) {
      Wc wc[4];
      if (c.cq->poll(wc, 4) != 0) die("client: unexpected completion during the check");
      int n = s.cq->poll(wc, 4);
      if (n > 0) {
        check_wc(wc[0], "server", pair);
        done = true;
      } else if (wt.expired()) {
        wait_failed(wt, pair);
      }
    }
    if (long long bad = find_pattern_mismatch(backing.p + 3 * 4096 + 100, 4096, 77); bad >= 0)
      die("an RDMA WRITE through a fast MR left byte %lld wrong", bad);
    SendWr inv = inv_wr(rk, 3, true);
    c.post_send(&inv, 1);
    wait_client(3, WcOpcode::kLocalInv, "the check's LOCAL_INV");
  }

  // The chain is built once; each post only stamps fresh rkeys and the wr_id,
  // as an engine filling WRs in place would.
  std::vector<SendWr> wrs(2 * static_cast<size_t>(batch));
  for (int k = 0; k < batch; ++k) {
    wrs[2 * k] = reg_wr(fmr[k], static_cast<size_t>(k) * kRegLen, 0, 0, false);
    wrs[2 * k + 1] = inv_wr(0, 0, k == batch - 1);
  }
  uint64_t id = 100, pairs = 0;
  uint64_t reg0 = c.stat("reg_mr"), inv0 = c.stat("local_inv");
  auto one_post = [&] {
    for (int k = 0; k < batch; ++k) {
      uint32_t rk = fmr[k]->bump_rkey();
      wrs[2 * k].reg.rkey = rk;
      wrs[2 * k + 1].invalidate_rkey = rk;
    }
    wrs[2 * batch - 1].wr_id = id;
    c.post_send(wrs.data(), 2 * batch);
    wait_client(id, WcOpcode::kLocalInv, "the LOCAL_INV completion");
    ++id;
    pairs += static_cast<uint64_t>(batch);
  };
  for (int i = 0; i < 1000; ++i) one_post();  // warm-up
  uint64_t first = pairs;
  uint64_t t0 = now_ns();
  for (auto _ : state) one_post();
  uint64_t t1 = now_ns();
  uint64_t timed = pairs - first;
  if (c.stat("reg_mr") - reg0 != pairs || c.stat("local_inv") - inv0 != pairs)
    die("the driver counted %" PRIu64 " REG_MR and %" PRIu64 " LOCAL_INV, %" PRIu64 " pairs were posted",
        c.stat("reg_mr") - reg0, c.stat("local_inv") - inv0, pairs);
  state.counters["ns_per_pair"] = static_cast<double>(t1 - t0) / static_cast<double>(timed);
  state.SetItemsProcessed(static_cast<int64_t>(timed));
}

}  // namespace

BENCHMARK(BM_CacheLineRoundTrip)->UseRealTime();
BENCHMARK(BM_SendPingPong)->ArgName("size")->Arg(8)->Arg(64)->Arg(512)->Arg(4096)->UseRealTime();
BENCHMARK(BM_SendMessageRate)->ArgName("burst")->Arg(1)->Arg(16)->UseRealTime();
BENCHMARK(BM_RdmaWriteBandwidth)
    ->ArgNames({"size", "fresh"})
    ->ArgsProduct({{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20}, {0, 1}})
    ->UseRealTime();
BENCHMARK(BM_RegMrLocalInv)->ArgName("batch")->Arg(1)->Arg(16)->UseRealTime();

}  // namespace tern::bench

int main(int argc, char** argv) {
  using namespace tern::bench;
  detail::g_prog = "tern-bench-shm";
  // Our default min time first: a --benchmark_min_time given by the user comes
  // later and wins.
  std::vector<char*> args(argv, argv + argc);
  args.insert(args.begin() + 1, const_cast<char*>(kDefaultMinTime));
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  if (std::thread::hardware_concurrency() < 2)
    std::fprintf(stderr, "tern-bench-shm: warning: fewer than 2 CPUs; numbers will be meaningless\n");
  pin_self(kClientCpu);
  arm_watchdog();
  g_cl_rtt_ns = measure_line_rtt_ns(kServerCpu, 7, std::chrono::milliseconds(30));
  disarm_watchdog();
  char b[64];
  std::snprintf(b, sizeof b, "%.1f", g_cl_rtt_ns);
  benchmark::AddCustomContext("cacheline_rtt_ns_at_start", b);
  std::snprintf(b, sizeof b, "%llu", static_cast<unsigned long long>(tern::mem::free_hugepages_2m()));
  benchmark::AddCustomContext("free_hugepages_2m", b);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
