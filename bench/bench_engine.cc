// RPC engine microbenchmarks (Google Benchmark), over pmd/shm.
//
// Round trips, one process, two CPUs: the benchmark thread is pinned to CPU 0
// and drives the client side; a peer thread pinned to CPU 1 busy-polls the
// server side for the whole timed loop (pmd/shm moves data only when a side
// polls). Each benchmark call builds, connects, warms up and checks a fresh
// pair outside the timed region.
//
//   BM_CacheLineRoundTrip        raw cross-core cache-line ping-pong: the scale
//   BM_ShmSendPingPong/size:32   the shm driver's raw SEND -> SEND echo (the
//                                same code as tern-bench-shm's BM_SendPingPong):
//                                the floor the engine adds its work to
//   BM_RpcRoundTrip/bulk/dir     one ONC RPC at a time through two Engines:
//                                32 bytes of inline arguments; bulk:0 is an echo
//                                of them; otherwise `bulk` bytes move through a
//                                read chunk (dir:0, client -> server, the server
//                                RDMA READs them) or a write chunk (dir:1,
//                                server -> client, the server RDMA WRITEs them)
//
// The engine's bookkeeping, one thread unless said otherwise:
//   BM_SendCtxRing/batch         SendCtxRing acquire per Send, complete_through
//                                per signaled one (the Send owner's release)
//   BM_RequestPool/n             SlabTable get/put of n requests (calls in flight)
//   BM_BulkPool/size             BulkPool get+put of one block (buddy split and merge)
//   BM_MrFreeListLocal/n         MrFreeList get/put of n MRs (a call's chunks)
//   BM_MrFreeListRemote/n        put_remote of n MRs, then get (take_remote)
//   BM_MrFreeListCrossThread     the owner gets MRs and hands them to a thread
//                                on CPU 1, which put_remote()s them back
//
// Every RPC is checked: the echo byte for byte, bulk results by the call id
// stamped at both ends of the bulk buffer, and the first warm-up calls (up to
// 16 MiB of them) and one after the timed loop byte for byte in the whole bulk. A wrong byte, an
// error status, a wait over 5 s or a benchmark call over 60 s aborts the
// program: a broken engine must not produce numbers.
#include <benchmark/benchmark.h>

#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <set>

#include "bench_util.h"
#include "engine/engine.h"
#include "engine/bulk_pool.h"
#include "engine/mr_free_list.h"
#include "engine/request.h"
#include "engine/send_ctx_ring.h"
#include "engine/slab_table.h"

namespace tern::bench {
namespace {

using namespace tern::rpc;

constexpr const char* kDefaultMinTime = "--benchmark_min_time=0.3";

// The raw SEND ping-pong measured when the process starts (main()), for x_send.
double g_send_rtt_ns = 0;

// ================================================================ scale and baseline

void BM_ShmSendPingPong(benchmark::State& state) {
  CallScope scope;
  PingPongRig rig(static_cast<size_t>(state.range(0)));
  rig.start(kServerCpu);
  PingClient& pc = *rig.pc;
  uint64_t first = pc.seq;
  uint64_t t0 = now_ns();
  for (auto _ : state) pc.round_trip(false);
  uint64_t t1 = now_ns();
  rig.finish();
  if (pc.seq - first != static_cast<uint64_t>(state.iterations()) + 1) die("client: round-trip count is off");
  double rtt = static_cast<double>(t1 - t0) / static_cast<double>(state.iterations());
  state.counters["rtt_ns"] = rtt;
  state.counters["x_cl"] = rtt / g_cl_rtt_ns;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// Median of `samples` runs of SEND ping-pong of `size` bytes, each `per_sample` long.
double measure_send_rtt_ns(size_t size, int samples, std::chrono::nanoseconds per_sample) {
  PingPongRig rig(size);
  rig.start(kServerCpu);
  std::vector<double> r;
  for (int s = 0; s < samples; ++s) {
    uint64_t t0 = now_ns(), n = 0, t1;
    uint64_t end = t0 + static_cast<uint64_t>(per_sample.count());
    do {
      for (int k = 0; k < 64; ++k) rig.pc->round_trip(false);
      n += 64;
    } while ((t1 = now_ns()) < end);
    r.push_back(static_cast<double>(t1 - t0) / static_cast<double>(n));
  }
  rig.finish();
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}

// ================================================================ RPC round trips

constexpr uint32_t kProg = 0x2054504e, kVers = 1;
enum : uint32_t { kEcho = 1, kPut = 2, kGet = 3 };
constexpr size_t kArgsLen = 32;  // u64 id, u32 len, u32 full, 16 bytes of pattern
constexpr size_t kResLen = 12;   // u64 id, u32 status (0: the data checked out)
constexpr uint32_t kBulkSeed = 0x6000;

// Host byte order: both engines live in this process.
struct Args {
  uint64_t id;
  uint32_t len;
  uint32_t full;
};

// Stamps: the call id in the first 8 bytes of a bulk buffer and ~id in the
// last 8, checked on every call; the rest holds pattern_byte(i, kBulkSeed + id)
// when a call is fully checked.
void put_stamps(uint8_t* p, size_t len, uint64_t id) {
  uint64_t t = ~id;
  std::memcpy(p, &id, 8);
  std::memcpy(p + len - 8, &t, 8);
}
bool stamps_ok(const uint8_t* p, size_t len, uint64_t id) {
  uint64_t h, t;
  std::memcpy(&h, p, 8);
  std::memcpy(&t, p + len - 8, 8);
  return h == id && t == ~id;
}
void fill_full(uint8_t* p, size_t len, uint64_t id) {
  fill_pattern(p, len, kBulkSeed + static_cast<uint32_t>(id));
  put_stamps(p, len, id);
}
long long full_mismatch(const uint8_t* p, size_t len, uint64_t id) {
  if (!stamps_ok(p, len, id)) return 0;
  long long bad = find_pattern_mismatch(p, len - 8, kBulkSeed + static_cast<uint32_t>(id), 8);
  return bad;
}

// The server side: handlers and the peer thread's loop. Replies the engine
// cannot take at once (Errc::kNoResources) are a finding at one call in
// flight, so they fail the benchmark rather than being retried.
struct RpcServer {
  std::unique_ptr<Engine> eng;

  static void reply(ServerCall* c, std::span<const uint8_t> res, std::span<const uint8_t> bulk) {
    if (Status st = c->reply(res, bulk); !st) peer_fail("server: reply refused: %s", st.to_string().c_str());
  }
  static bool args(ServerCall* c, Args* a) {
    if (c->args().size() != kArgsLen) {
      peer_fail("server: %zu bytes of arguments, want %zu", c->args().size(), kArgsLen);
      (void)c->reply_error(AcceptStat::kGarbageArgs);
      return false;
    }
    std::memcpy(a, c->args().data(), sizeof *a);
    return true;
  }
  static void echo(void*, ServerCall* c) { reply(c, c->args(), {}); }
  static void put(void*, ServerCall* c) {
    Args a;
    if (!args(c, &a)) return;
    std::span<const uint8_t> b = c->bulk();
    uint32_t status = 0;
    if (b.size() != a.len) status = 1;
    else if (a.full ? full_mismatch(b.data(), b.size(), a.id) >= 0 : !stamps_ok(b.data(), b.size(), a.id)) status = 2;
    uint8_t res[kResLen];
    std::memcpy(res, &a.id, 8);
    std::memcpy(res + 8, &status, 4);
    reply(c, res, {});
  }
  static void get(void*, ServerCall* c) {
    Args a;
    if (!args(c, &a)) return;
    uint32_t status = a.len > c->bulk_capacity() ? 1 : 0;
    uint8_t res[kResLen];
    std::memcpy(res, &a.id, 8);
    std::memcpy(res + 8, &status, 4);
    if (status != 0) return reply(c, res, {});
    std::span<uint8_t> b = c->bulk_buffer(a.len);
    if (a.full) fill_full(b.data(), b.size(), a.id);
    else put_stamps(b.data(), b.size(), a.id);
    reply(c, res, b);
  }
};

struct RpcPending {
  bool done = false;
  CallStatus status = CallStatus::kOk;
  uint32_t bulk_recv_len = 0;
  size_t nresults = 0;
  uint8_t results[64];
};
void on_done(void* ctx, const CallReply& r) {
  auto* p = static_cast<RpcPending*>(ctx);
  p->done = true;
  p->status = r.status;
  p->bulk_recv_len = r.bulk_recv_len;
  p->nresults = std::min(r.results.size(), sizeof p->results);
  std::memcpy(p->results, r.results.data(), p->nresults);
  if (r.results.size() > sizeof p->results) p->nresults = r.results.size();  // the check below fails on it
}

void BM_RpcRoundTrip(benchmark::State& state) {
  CallScope scope;
  const uint32_t bulk = static_cast<uint32_t>(state.range(0));
  const bool write_dir = state.range(1) != 0;

  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tern-bench-engine-" +
                     std::to_string(getpid()) + "-" + std::to_string(counter++) + ".sock";
  ::unlink(path.c_str());
  {
    std::lock_guard<std::mutex> g(detail::g_paths_mu);
    detail::g_socket_paths.push_back(path);
  }
  const std::string spec = "shm:path=" + path;

  // The server engine: 32 credits of 1 MiB bulk buffers (+ slack) need ~60 MiB.
  RpcServer srv;
  EngineOptions so;
  so.arena_bytes = 128u << 20;
  auto se = Engine::create(so);
  if (!se) die("server Engine::create: %s", se.status().to_string().c_str());
  srv.eng = std::move(se).value();
  srv.eng->handle(kProg, kVers, kEcho, RpcServer::echo, nullptr);
  srv.eng->handle(kProg, kVers, kPut, RpcServer::put, nullptr);
  srv.eng->handle(kProg, kVers, kGet, RpcServer::get, nullptr);
  if (Status st = srv.eng->listen(spec); !st) die("server listen(%s): %s", spec.c_str(), st.to_string().c_str());

  EngineOptions co;
  co.arena_bytes = 32u << 20;
  co.credits = 4;  // one call at a time
  auto ce = Engine::create(co);
  if (!ce) die("client Engine::create: %s", ce.status().to_string().c_str());
  std::unique_ptr<Engine> cli = std::move(ce).value();

  // From here the server engine belongs to the peer thread (thread start
  // orders the hand-over), until stop() joins it.
  PeerThread server;
  server.start(kServerCpu, [&srv](const std::atomic<bool>& stop) {
    while (!stop.load(std::memory_order_relaxed) && !peer_failed()) srv.eng->poll();
  });

  auto c = cli->connect(spec);
  if (!c) die("client connect(%s): %s", spec.c_str(), c.status().to_string().c_str());
  Connection* conn = *c;
  {
    Waiter w("the RPC connection");
    while (!conn->ready() && !conn->failed())
      if (cli->poll() == 0 && w.expired()) die("timed out waiting for %s", w.what());
    if (conn->failed()) die("the RPC connection failed: %s", conn->error().to_string().c_str());
  }
  uint8_t* buf = nullptr;
  if (bulk != 0) {
    buf = static_cast<uint8_t*>(cli->alloc(bulk, 4096));
    if (buf == nullptr) die("client arena: no room for %u bulk bytes", bulk);
  }
  uint8_t pad[kArgsLen];
  fill_pattern(pad, sizeof pad, 77);

  uint64_t id = 0;
  auto one_call = [&](bool full) {
    ++id;
    uint8_t args[kArgsLen];
    std::memcpy(args, pad, sizeof args);
    Args a{id, bulk, full ? 1u : 0u};
    std::memcpy(args, &a, sizeof a);
    RpcPending p;
    Call call;
    call.prog = kProg, call.vers = kVers;
    call.args = args;
    call.done = on_done;
    call.ctx = &p;
    if (bulk == 0) {
      call.proc = kEcho;
      call.max_results = kArgsLen;
    } else if (!write_dir) {
      call.proc = kPut;
      if (full) fill_full(buf, bulk, id);
      else put_stamps(buf, bulk, id);
      call.bulk_send = std::span<const uint8_t>(buf, bulk);
      call.max_results = kResLen;
    } else {
      call.proc = kGet;
      put_stamps(buf, bulk, ~id);  // another call's stamps: only this call's data can pass
      call.bulk_recv = std::span<uint8_t>(buf, bulk);
      call.max_results = kResLen;
    }
    if (int rc = conn->call(call); rc != 0) die("call %" PRIu64 ": call() returned %s", id, std::strerror(rc));
    Waiter w("an RPC reply");
    while (!p.done)
      if (cli->poll() == 0 && w.expired())
        die("timed out waiting for %s (call %" PRIu64 "); client engine: %s", w.what(), id,
            format_stats(cli->stats_view()).c_str());
    if (p.status != CallStatus::kOk) die("call %" PRIu64 ": %s", id, call_status_name(p.status));
    if (bulk == 0) {
      if (p.nresults != kArgsLen || std::memcmp(p.results, args, kArgsLen) != 0)
        die("call %" PRIu64 ": the echo (%zu bytes) differs from the arguments", id, p.nresults);
      return;
    }
    uint64_t rid;
    uint32_t status;
    std::memcpy(&rid, p.results, 8);
    std::memcpy(&status, p.results + 8, 4);
    if (p.nresults != kResLen || rid != id || status != 0)
      die("call %" PRIu64 ": results of %zu bytes for call %" PRIu64 ", status %u (the server's check of the %s)",
          id, p.nresults, rid, status, write_dir ? "arguments" : "read chunk");
    if (write_dir) {
      if (p.bulk_recv_len != bulk) die("call %" PRIu64 ": %u bytes written, want %u", id, p.bulk_recv_len, bulk);
      if (full) {
        if (long long bad = full_mismatch(buf, bulk, id); bad >= 0)
          die("call %" PRIu64 ": byte %lld of the write chunk is wrong", id, bad);
      } else if (!stamps_ok(buf, bulk, id)) {
        die("call %" PRIu64 ": the write chunk does not hold this call's stamps", id);
      }
    }
  };

  // Warm-up: the first calls, and as many more as 16 MiB allows, checked byte
  // for byte (a pattern fill and check of 1 MiB costs more than its transfer).
  for (int i = 0; i < 200; ++i) one_call(i < 4 || static_cast<uint64_t>(i) * bulk < (16u << 20));
  uint64_t first = id;
  uint64_t t0 = now_ns();
  for (auto _ : state) one_call(false);
  uint64_t t1 = now_ns();
  one_call(true);  // still correct after the timed loop
  if (id - first != static_cast<uint64_t>(state.iterations()) + 1) die("RPC count is off");
  const EngineStats& cs = cli->stats();
  uint64_t calls = cs.calls.get(), replies = cs.replies.get();

  conn->close();
  {
    Waiter w("the connection to close", std::chrono::milliseconds(20));
    while (!w.expired()) cli->poll();  // let the teardown drain; nothing is outstanding
  }
  server.stop();
  if (peer_failed()) die("the server engine failed");
  cli.reset();
  srv.eng.reset();
  ::unlink(path.c_str());
  if (calls != id || replies != id)
    die("the client engine counted %" PRIu64 " calls and %" PRIu64 " replies; %" PRIu64 " were made", calls, replies,
        id);

  double rtt = static_cast<double>(t1 - t0) / static_cast<double>(state.iterations());
  state.counters["rtt_ns"] = rtt;
  state.counters["x_send"] = rtt / g_send_rtt_ns;
  state.counters["x_cl"] = rtt / g_cl_rtt_ns;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  if (bulk != 0) state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bulk);
}

// ================================================================ engine bookkeeping

// One Send context per iteration; every `batch`-th is signaled, and its
// completion releases the batch (what SendQueue::complete does).
void BM_SendCtxRing(benchmark::State& state) {
  const uint32_t batch = static_cast<uint32_t>(state.range(0));
  SendCtxRing ring(128, batch);
  uint64_t released = 0, acquired = 0;
  auto release = [&](const SendCtx& c, bool) {
    if (c.obj != 7) die("SendCtxRing released a foreign owner");
    ++released;
  };
  for (auto _ : state) {
    bool signal = false;
    uint32_t idx = ring.acquire(SendCtxKind::kCallSend, 7, acquired, &signal);
    ++acquired;
    if (signal) ring.complete_through(idx, release);
  }
  ring.release_all([&](const SendCtx& c) { release(c, false); });
  if (released != acquired) die("SendCtxRing: %" PRIu64 " acquired, %" PRIu64 " released", acquired, released);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

std::vector<EngineMr> make_mrs(size_t n) { return std::vector<EngineMr>(n); }

// The table an engine takes its requests from (and a server its calls).
void BM_RequestPool(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  SlabTable<Request> pool(1024);
  std::vector<Request*> got(n);
  for (auto _ : state) {
    for (size_t k = 0; k < n; ++k) got[k] = pool.get();
    benchmark::DoNotOptimize(got.data());
    for (size_t k = 0; k < n; ++k) pool.put(got[k]);
  }
  if (pool.out() != 0) die("SlabTable lost requests: %u out", pool.out());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

// The engine's bulk pool: one block of `size` bytes taken and given back
// while a quarter of the pool is held in mixed sizes (so splits and merges
// happen, as under a gateway's load).
void BM_BulkPool(benchmark::State& state) {
  const size_t size = static_cast<size_t>(state.range(0));
  const size_t bytes = 64u << 20;
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  BulkPool pool(mem, bytes, 4096, 1u << 20);
  std::vector<uint8_t*> held;
  for (size_t s = 4096; pool.in_use() < bytes / 4; s = s >= (1u << 20) ? 4096 : s * 4) held.push_back(pool.get(s));
  for (auto _ : state) {
    uint8_t* p = pool.get(size);
    if (p == nullptr) die("BulkPool ran dry");
    benchmark::DoNotOptimize(p);
    pool.put(p);
  }
  for (uint8_t* p : held) pool.put(p);
  if (pool.in_use() != 0) die("BulkPool lost %zu bytes", pool.in_use());
  std::free(mem);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_MrFreeListLocal(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  auto mrs = make_mrs(1024);
  MrFreeList fl;
  fl.reserve(mrs.size());
  for (auto& m : mrs) fl.put(&m);
  std::vector<EngineMr*> got(n);
  for (auto _ : state) {
    for (size_t k = 0; k < n; ++k) got[k] = fl.get();
    benchmark::DoNotOptimize(got.data());
    for (size_t k = 0; k < n; ++k) fl.put(got[k]);
  }
  if (fl.local_size() != mrs.size()) die("MrFreeList lost MRs: %zu of %zu", fl.local_size(), mrs.size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

// put_remote from the owner's own thread (uncontended CAS), then get(), whose
// first call on an empty local stack takes the whole remote stack.
void BM_MrFreeListRemote(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  auto mrs = make_mrs(n);
  MrFreeList fl;
  fl.reserve(n);
  for (auto& m : mrs) fl.put(&m);
  std::vector<EngineMr*> got(n);
  for (auto _ : state) {
    for (size_t k = 0; k < n; ++k)
      if ((got[k] = fl.get()) == nullptr) die("MrFreeList: get() found nothing at %zu of %zu", k, n);
    for (size_t k = 0; k < n; ++k) fl.put_remote(got[k]);
  }
  size_t back = 0;
  while (fl.get() != nullptr) ++back;
  if (back != n) die("MrFreeList: %zu of %zu MRs came back", back, n);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}

// The owner (CPU 0) takes MRs and passes them to a thread on CPU 1 through a
// single-producer single-consumer ring; that thread returns each with
// put_remote, and the owner's get() takes them back with one exchange when its
// own stack runs dry. One iteration = one MR out and (eventually) back.
void BM_MrFreeListCrossThread(benchmark::State& state) {
  CallScope scope;
  constexpr size_t kMrs = 64, kRing = 128;
  auto mrs = make_mrs(kMrs);
  MrFreeList fl;
  fl.reserve(kMrs);
  for (auto& m : mrs) fl.put(&m);
  struct alignas(64) Ring {
    std::atomic<EngineMr*> slot[kRing];
    alignas(64) std::atomic<uint64_t> head{0};  // producer
    alignas(64) std::atomic<uint64_t> tail{0};  // consumer
  };
  auto ring = std::make_unique<Ring>();
  PeerThread peer;
  peer.start(kServerCpu, [&](const std::atomic<bool>& stop) {
    uint64_t t = 0;
    for (;;) {
      uint64_t h = ring->head.load(std::memory_order_acquire);
      if (t == h) {
        if (stop.load(std::memory_order_relaxed)) return;
        continue;
      }
      for (; t != h; ++t) fl.put_remote(ring->slot[t % kRing].load(std::memory_order_relaxed));
      ring->tail.store(t, std::memory_order_release);
    }
  });
  uint64_t head = 0;
  for (auto _ : state) {
    EngineMr* m;
    Waiter w("an MR back from the other thread");
    while ((m = fl.get()) == nullptr)
      if (w.expired()) die("timed out waiting for %s", w.what());
    // kRing > kMrs: the ring never fills.
    ring->slot[head % kRing].store(m, std::memory_order_relaxed);
    ring->head.store(++head, std::memory_order_release);
  }
  {
    Waiter w("the other thread to return every MR");
    while (ring->tail.load(std::memory_order_acquire) != head)
      if (w.expired()) die("timed out waiting for %s", w.what());
  }
  peer.stop();
  std::set<EngineMr*> back;
  while (EngineMr* m = fl.get()) back.insert(m);
  if (back.size() != kMrs) die("MrFreeList: %zu distinct MRs of %zu came back", back.size(), kMrs);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

}  // namespace

BENCHMARK(BM_CacheLineRoundTrip)->UseRealTime();
BENCHMARK(BM_ShmSendPingPong)->ArgName("size")->Arg(32)->UseRealTime();
BENCHMARK(BM_RpcRoundTrip)
    ->ArgNames({"bulk", "dir"})
    ->Args({0, 0})
    ->ArgsProduct({{4 << 10, 64 << 10, 1 << 20}, {0, 1}})
    ->UseRealTime();
BENCHMARK(BM_SendCtxRing)->ArgName("batch")->Arg(1)->Arg(16);
BENCHMARK(BM_BulkPool)->ArgName("size")->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(BM_RequestPool)->ArgName("n")->Arg(1)->Arg(32);
BENCHMARK(BM_MrFreeListLocal)->ArgName("n")->Arg(1)->Arg(16);
BENCHMARK(BM_MrFreeListRemote)->ArgName("n")->Arg(1)->Arg(16);
BENCHMARK(BM_MrFreeListCrossThread)->UseRealTime();

}  // namespace tern::bench

int main(int argc, char** argv) {
  using namespace tern::bench;
  detail::g_prog = "tern-bench-engine";
  std::vector<char*> args(argv, argv + argc);
  args.insert(args.begin() + 1, const_cast<char*>(kDefaultMinTime));  // a later --benchmark_min_time wins
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 1;
  if (std::thread::hardware_concurrency() < 2)
    std::fprintf(stderr, "tern-bench-engine: warning: fewer than 2 CPUs; numbers will be meaningless\n");
  pin_self(kClientCpu);
  arm_watchdog();
  g_cl_rtt_ns = measure_line_rtt_ns(kServerCpu, 7, std::chrono::milliseconds(30));
  g_send_rtt_ns = measure_send_rtt_ns(32, 5, std::chrono::milliseconds(40));
  disarm_watchdog();
  char b[64];
  std::snprintf(b, sizeof b, "%.1f", g_cl_rtt_ns);
  benchmark::AddCustomContext("cacheline_rtt_ns_at_start", b);
  std::snprintf(b, sizeof b, "%.1f", g_send_rtt_ns);
  benchmark::AddCustomContext("shm_send_rtt_32b_ns_at_start", b);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
