// tern-bulk-isolation-measure: a well-behaved client's 64 KiB GET and PUT
// latency, solo and then with an attacker holding the server's bulk pool,
// in one run (docs/performance.md, "One peer holding the bulk pool").
//
// One server engine (default options unless told: a 64 MiB bulk pool,
// 1 MiB max_bulk, server_rw_timeout_ms 5000) and the good client's engine
// are polled by this thread. The attacker is a child process (another peer
// to the server) with --conns connections; each sends one call with a
// --chunk read chunk (or write chunk with --writes) and never polls again,
// so on pmd/shm the server's READs or WRITEs of those chunks never run and
// the calls hold their pool blocks until the deadline drops them.
//
// Each phase runs --seconds of calls one at a time, alternating a GET (64
// KiB filled into a write chunk) and a PUT (64 KiB pulled from a read chunk,
// summed, the sum checked): solo; with the attacker's connections up and
// idle (what their number costs: pmd/shm's poll visits every QP); and
// attacked, from when every attacker call holds pool memory or waits for
// it -- which should end before the deadline (the attacker does not come
// back once dropped).
//
//   tern-bulk-isolation-measure [--seconds 3] [--conns 150] [--chunk 1048576] [--writes]
//                               [--rw-timeout-ms 5000]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "chunk_handlers.h"
#include "raw_peer.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::rpc;
using namespace tern::rdma;
using namespace tern::test;
namespace rr = tern::rpcrdma;

namespace {

constexpr uint32_t kProg = 0x20000067, kVers = 1;
constexpr uint32_t kPut = 1;  // read chunk in -> u32 sum of its bytes
constexpr uint32_t kGet = 2;  // args u32 n -> n bytes of 0xA5 into the write chunk
constexpr uint32_t kSize = 64u << 10;


[[noreturn]] void attack(const std::string& spec, int conns, uint32_t chunk, bool writes, int go_fd, int ready_fd) {
  char c;
  if (read(go_fd, &c, 1) != 1) _exit(2);
  std::vector<std::unique_ptr<RawPeer>> peers;
  std::vector<std::vector<uint8_t>> msgs;
  // Every connection and its chunk's registration first (these wait, and
  // so poll the QPs).
  // Connections in families of 14 sharing one device and 64 MiB of memory
  // (each QP's send slots take 4 MiB of it), all offering the same chunk.
  constexpr int kFamily = 14;
  uint8_t* mem = nullptr;
  for (int i = 0; i < conns; ++i) {
    std::unique_ptr<RawPeer> p;
    if (i % kFamily == 0) {
      p = std::make_unique<RawPeer>([] {});
      if (!p->open(spec, 2).is_ok()) _exit(3);
      if ((mem = p->buf(chunk)) == nullptr) _exit(7);
    } else {
      auto s = peers[static_cast<size_t>(i - i % kFamily)]->sibling(2);
      if (!s) _exit(3);
      p = std::move(s).value();
    }
    if (!p->connect(rr::CmPrivateData{true, 4096, 4096}).is_ok()) _exit(3);
    const uint32_t rkey = p->offer(mem, chunk, writes ? kAccessRemoteWrite : kAccessRemoteRead);
    if (rkey == 0) _exit(4);
    const uint32_t xid = 1000 + static_cast<uint32_t>(i);
    rr::Header h = plain_header(xid, 1);
    h.chunks.clear();
    std::vector<uint8_t> args;
    if (writes) {
      h.chunks.nwrites = 1;
      h.chunks.writes[0].nsegments = 1;
      h.chunks.writes[0].segments[0] = rr::Segment{rkey, chunk, reinterpret_cast<uint64_t>(mem)};
      args.assign(reinterpret_cast<const uint8_t*>(&chunk), reinterpret_cast<const uint8_t*>(&chunk) + 4);
    } else {
      const auto pos = static_cast<uint32_t>(rpc_call(xid, kProg, kVers, kPut).size());
      h.chunks.nreads = 1;
      h.chunks.reads[0] = rr::ReadSegment{pos, rr::Segment{rkey, chunk, reinterpret_cast<uint64_t>(mem)}};
    }
    msgs.push_back(rdma_msg(h, rpc_call(xid, kProg, kVers, writes ? kGet : kPut, args)));
    peers.push_back(std::move(p));
  }
  // Connected: the parent measures with the connections idle first.
  if (write(ready_fd, "C", 1) != 1) _exit(6);
  if (read(go_fd, &c, 1) != 1) _exit(2);
  // Then every call, posted without waiting for its completion: waiting
  // would poll the QP, and the server's READ or WRITE of the chunk (posted
  // as soon as the call lands) would run in that poll.
  for (size_t i = 0; i < peers.size(); ++i)
    if (!peers[i]->post_send(msgs[i])) _exit(5);
  if (write(ready_fd, "R", 1) != 1) _exit(6);
  (void)read(go_fd, &c, 1);  // stops progressing here
  _exit(0);
}

struct Lat {
  std::vector<uint64_t> get, put;
  uint64_t failed = 0;
};

uint64_t pct(std::vector<uint64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void report(const char* phase, const Lat& l) {
  auto us = [](uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  std::printf("%-8s GET n=%zu p50=%.1fus p99=%.1fus max=%.1fus | "
              "PUT n=%zu p50=%.1fus p99=%.1fus max=%.1fus | failed %llu\n",
              phase, l.get.size(), us(pct(l.get, 0.5)), us(pct(l.get, 0.99)), us(pct(l.get, 1.0)), l.put.size(),
              us(pct(l.put, 0.5)), us(pct(l.put, 0.99)), us(pct(l.put, 1.0)),
              static_cast<unsigned long long>(l.failed));
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  int conns = 150;
  uint32_t chunk = 1u << 20;
  bool writes = false;
  uint32_t rw_ms = 5000;
  tern::apps::OptionParser cli("tern-bulk-isolation-measure", "[options]");
  cli.duration("seconds", "S", "each phase's length (default 3)", 1e6, &seconds);
  cli.integer("conns", "N", "the attacker's connections (default 150)", 1, 1 << 16, &conns);
  cli.count("chunk", "BYTES", "each attacking call's chunk (default 1M)", 1, 1u << 30, &chunk);
  cli.flag("writes", "attack with write chunks instead of read chunks", &writes);
  cli.integer("rw-timeout-ms", "MS", "the server's server_rw_timeout_ms (default 5000)", 0, 86400000, &rw_ms);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  const std::string spec = fresh_spec("bulk-measure");
  int go[2], ready[2];
  if (pipe(go) != 0 || pipe2(ready, O_NONBLOCK) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(go[1]);
    close(ready[0]);
    attack(spec, conns, chunk, writes, go[0], ready[1]);
  }
  close(go[0]);
  close(ready[1]);

  EngineOptions so;
  so.max_bulk = std::max<uint32_t>(so.max_bulk, chunk);
  so.server_rw_timeout_ms = rw_ms;
  so.max_connections = std::max<uint32_t>(so.max_connections, static_cast<uint32_t>(conns) + 16);
  auto srv = Engine::create(so).value();
  srv->handle(kProg, kVers, kPut, sum_handler, nullptr);
  srv->handle(kProg, kVers, kGet, fill_handler, nullptr);
  if (!srv->listen(spec).is_ok()) return 1;
  auto good = Engine::create({}).value();
  Connection* conn = good->connect(spec).value();
  auto pump = [&] {
    srv->poll();
    good->poll();
  };
  if (!poll_until(pump, [&] { return conn->ready() || conn->failed(); }, 5000) || !conn->ready()) return 1;
  auto* in = static_cast<uint8_t*>(good->alloc(kSize));
  auto* out = static_cast<uint8_t*>(good->alloc(kSize));
  for (uint32_t i = 0; i < kSize; ++i) in[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  uint32_t want = 0;
  for (uint32_t i = 0; i < kSize; ++i) want += in[i];

  // One call at a time, GET and PUT alternately, for `secs`.
  auto phase = [&](double secs) {
    Lat l;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
    for (int k = 0; std::chrono::steady_clock::now() < end; ++k) {
      struct D {
        bool done = false;
        CallReply r{};
        uint32_t sum = 0;
      } d;
      CallDone cb = [](void* ctx, const CallReply& r) {
        auto* x = static_cast<D*>(ctx);
        x->done = true;
        x->r = r;
        if (r.results.size() >= 4) std::memcpy(&x->sum, r.results.data(), 4);
      };
      const bool is_get = (k & 1) == 0;
      uint32_t n = kSize;
      Call c{kProg, kVers, is_get ? kGet : kPut};
      if (is_get) {
        c.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
        c.bulk_recv = std::span<uint8_t>(out, kSize);
      } else {
        c.bulk_send = std::span<const uint8_t>(in, kSize);
      }
      c.done = cb, c.ctx = &d;
      const auto t0 = std::chrono::steady_clock::now();
      if (conn->call(c) != 0) return l;
      while (!d.done) pump();
      const auto ns = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
      const bool ok = d.r.status == CallStatus::kOk &&
                      (is_get ? d.r.bulk_recv_len == kSize && out[kSize - 1] == 0xA5 : d.sum == want);
      if (!ok) ++l.failed;
      (is_get ? l.get : l.put).push_back(ns);
      if (is_get) out[kSize - 1] = 0;
    }
    return l;
  };

  std::printf("bulk pool %zu MiB, attacker: %d connections x %u KiB %s chunks, server_rw_timeout_ms %u\n",
              (so.bulk_pool_bytes != 0 ? so.bulk_pool_bytes : so.arena_bytes / 2) >> 20, conns, chunk >> 10,
              writes ? "write" : "read", rw_ms);
  (void)phase(0.3);  // warm-up
  Lat solo = phase(seconds);
  report("solo", solo);

  // The attacker's connections, idle: what they cost by their number alone
  // (pmd/shm's poll visits every QP).
  if (write(go[1], "G", 1) != 1) return 1;
  char ch = 0;
  if (!poll_until(pump, [&] { return read(ready[0], &ch, 1) == 1; }, 60000)) return 1;
  Lat idle_conns = phase(seconds);
  report("idle", idle_conns);

  // The attack: every connection's call holds pool memory or waits for it.
  if (write(go[1], "G", 1) != 1) return 1;
  if (!poll_until(pump, [&] { return read(ready[0], &ch, 1) == 1; }, 60000)) {
    int status = 0;
    const bool gone = waitpid(child, &status, WNOHANG) == child;
    std::fprintf(stderr, "the attacker did not get its calls in (%s %d)\n", gone ? "it exited with" : "still running",
                 gone ? WEXITSTATUS(status) : 0);
    return 1;
  }
  const auto t_attack = std::chrono::steady_clock::now();
  if (!poll_until(
          pump,
          [&] {
            return testing::accounting(*srv).bulk_blocks_out + srv->stats().waiting_for_memory.get() ==
                   static_cast<uint64_t>(conns);
          },
          10000)) {
    std::fprintf(stderr, "the attacker's calls are not all in: %s, waiting %llu\n",
                 testing::accounting(*srv).to_string().c_str(),
                 static_cast<unsigned long long>(srv->stats().waiting_for_memory.get()));
  }
  const uint64_t waiting = srv->stats().waiting_for_memory.get();
  Lat att = phase(seconds);
  report("attacked", att);
  std::printf("during the attacked phase: attacker calls waiting for memory at its start %llu, connections dropped "
              "by the deadline at its end %llu\n",
              static_cast<unsigned long long>(waiting),
              static_cast<unsigned long long>(srv->stats().rw_timeouts.get()));
  auto ratio = [](const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
    return static_cast<double>(pct(a, 0.99)) / static_cast<double>(std::max<uint64_t>(pct(b, 0.99), 1));
  };
  std::printf("p99 attacked / solo: GET %.2fx, PUT %.2fx; attacked / idle connections: GET %.2fx, PUT %.2fx\n",
              ratio(att.get, solo.get), ratio(att.put, solo.put), ratio(att.get, idle_conns.get),
              ratio(att.put, idle_conns.put));
  // The attacker is dropped by the deadline (every connection, in rounds)
  // and the pool comes back while it still does not poll.
  const bool idle = poll_until(
      pump,
      [&] {
        return srv->stats().rw_timeouts.get() == static_cast<uint64_t>(conns) && testing::accounting(*srv).idle() &&
               srv->stats().connections.get() == 1;
      },
      static_cast<int>(rw_ms) * 4 + 60000);
  std::printf("attacker connections dropped: %llu of %d, %.1f s after the attack began; server accounting %s\n",
              static_cast<unsigned long long>(srv->stats().rw_timeouts.get()), conns,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_attack).count(),
              idle ? "idle" : testing::accounting(*srv).to_string().c_str());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  good.reset();
  srv.reset();
  remove_spec(spec);
  return solo.failed + att.failed == 0 && idle ? 0 : 1;
}
