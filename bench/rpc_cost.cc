// tern-rpc-cost: RPCs through a client and a server Engine over pmd/shm, both
// driven from one thread, so that a run under `valgrind --tool=callgrind`
// counts the same instructions every time (no peer thread spinning, no
// timing in the loop). scripts/measure-cost.sh runs it twice with different
// call counts and reports instructions per RPC, both sides and pmd/shm
// included: a figure that does not move with the machine's load, for
// comparing revisions where wall-clock ratios are too noisy.
//   tern-rpc-cost CALLS [BULK [DIR [QD]]]  BULK bytes through a write (DIR w,
//                                        default) or read (r) chunk; 0: inline;
//                                        QD calls kept in flight (default 1)
// Observability switches, for measuring what they cost the datapath
// (docs/observability.md, Overhead): TERN_RPC_COST_BREAKDOWN=1 turns
// EngineOptions::breakdown on in both engines, TERN_RPC_COST_TRACE=N samples
// one call in N (trace_every), TERN_RPC_COST_METRICS=1 runs the Prometheus
// exporter on a port with a second thread scraping it without pause (under
// callgrind --separate-threads=yes the engines' thread is counted alone).
// TERN_RPC_COST_MAP=1 prints, once the connection is up, where the side
// functions are and the process's shared mappings (/proc/self/maps), for
// scripts/lines_touched.py to tell the sides and shared memory apart in a
// valgrind lackey trace; nothing is printed or done per call.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
// scripts/measure-cost.sh --against REV builds this file against an older
// library, which may predate the exporter and the call trace: without them
// the count is the same (both are off unless asked for by the environment).
#if __has_include("telemetry/metrics_exporter.h")
#include "telemetry/metrics_exporter.h"
#define TERN_RPC_COST_METRICS_EXPORTER 1
#endif

using namespace tern::rpc;

namespace {

template <class Options>
void set_trace_every(Options& o, uint32_t n) {
  if constexpr (requires { o.trace_every; }) o.trace_every = n;
  else if (n != 0) std::fprintf(stderr, "tern-rpc-cost: this library has no call trace; TERN_RPC_COST_TRACE ignored\n");
}

constexpr uint32_t kProg = 0x20000042, kVers = 1, kEcho = 1;

// Echoes the arguments; fills a write chunk with zeros (the memory is not the
// point; the copy is what a WRITE costs).
void echo(void*, ServerCall* c) {
  std::span<uint8_t> out;
  if (uint32_t cap = c->bulk_capacity(); cap != 0) out = c->bulk_buffer(cap);
  (void)c->reply(c->args(), out);
}

struct Done {
  bool done = false;
  CallStatus status = CallStatus::kOk;
};
void on_done(void* p, const CallReply& r) {
  auto* d = static_cast<Done*>(p);
  d->done = true;
  d->status = r.status;
}

// Scrapes http://127.0.0.1:port/metrics until told to stop; counts scrapes.
void scrape_loop(uint16_t port, std::atomic<bool>* stop, long* scrapes) {
  while (!stop->load()) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
      const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
      (void)!send(fd, req, sizeof req - 1, MSG_NOSIGNAL);
      char buf[65536];
      while (recv(fd, buf, sizeof buf, 0) > 0) {
      }
      ++*scrapes;
    }
    close(fd);
  }
}

bool env_on(const char* name) { return std::getenv(name) != nullptr && std::atoi(std::getenv(name)) != 0; }

// Each side's work behind a function of its own, never inlined nor merged
// with its twin (noipa: -fipa-icf would fold the two polls into one), so that
// callgrind collecting only inside one side's functions (--toggle-collect)
// counts that side's share per RPC (scripts/measure-cost.sh --sides): the client's call() and poll(), the
// server's poll(). Both engines run the same code, so a per-function count
// alone cannot tell the sides apart.
[[gnu::noipa]] int client_call(Connection* c, const Call& call) { return c->call(call); }
[[gnu::noipa]] int client_poll(Engine* e) { return e->poll(); }
[[gnu::noipa]] int server_poll(Engine* e) { return e->poll(); }

int fail(const char* what) {
  std::fprintf(stderr, "tern-rpc-cost: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tern-rpc-cost CALLS [BULK [r|w [QD]]]\n");
    return 2;
  }
  long calls = std::strtol(argv[1], nullptr, 10);
  long bulk = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 0;
  bool read_dir = argc > 3 && argv[3][0] == 'r';
  long qd = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 1;
  if (calls <= 0 || bulk < 0 || bulk > (1 << 20) || qd < 1 || qd > 32) {
    std::fprintf(stderr, "tern-rpc-cost: CALLS must be > 0, BULK in [0, 1 MiB], QD in [1, 32]\n");
    return 2;
  }
  std::string spec = "shm:path=/tmp/tern-rpc-cost-" + std::to_string(getpid()) + ".sock";
  EngineOptions so;
  so.arena_bytes = 128u << 20;
  so.breakdown = env_on("TERN_RPC_COST_BREAKDOWN");
  const uint32_t trace_every =
      std::getenv("TERN_RPC_COST_TRACE") ? static_cast<uint32_t>(std::atoi(std::getenv("TERN_RPC_COST_TRACE"))) : 0;
  set_trace_every(so, trace_every);
  auto srv = Engine::create(so);
  if (!srv) return fail(srv.status().to_string().c_str());
  (*srv)->handle(kProg, kVers, kEcho, echo, nullptr);
  if (!(*srv)->listen(spec).is_ok()) return fail("listen");
  EngineOptions co;
  co.arena_bytes = 32u << 20;
  co.breakdown = so.breakdown;
  set_trace_every(co, trace_every);
  auto cli = Engine::create(co);
  if (!cli) return fail(cli.status().to_string().c_str());
  auto conn = (*cli)->connect(spec);
  if (!conn) return fail(conn.status().to_string().c_str());
  Connection* c = *conn;
  while (!c->ready()) {
    (*srv)->poll();
    (*cli)->poll();
    if (c->failed()) return fail("connection failed");
  }
  if (env_on("TERN_RPC_COST_MAP")) {
    std::fprintf(stderr, "tern-rpc-cost-map fn client_call %p client_poll %p server_poll %p\n",
                 reinterpret_cast<void*>(&client_call), reinterpret_cast<void*>(&client_poll),
                 reinterpret_cast<void*>(&server_poll));
    if (FILE* m = std::fopen("/proc/self/maps", "r")) {
      char line[512];
      while (std::fgets(line, sizeof line, m) != nullptr)
        std::fprintf(stderr, "tern-rpc-cost-map maps %s", line);
      std::fclose(m);
    }
  }
  std::atomic<bool> stop{false};
  long scrapes = 0;
  std::thread scraper;
#ifdef TERN_RPC_COST_METRICS_EXPORTER
  std::unique_ptr<tern::telemetry::MetricsExporter> metrics;
  if (env_on("TERN_RPC_COST_METRICS")) {
    auto m = tern::telemetry::MetricsExporter::start({.port = 0});
    if (!m) return fail(m.status().to_string().c_str());
    metrics = std::move(*m);
    scraper = std::thread(scrape_loop, metrics->port(), &stop, &scrapes);
  }
#else
  if (env_on("TERN_RPC_COST_METRICS")) return fail("this library has no metrics exporter (TERN_RPC_COST_METRICS)");
#endif
  uint8_t args[32] = {1, 2, 3};
  // One bulk buffer per call in flight.
  std::vector<uint8_t*> bufs(static_cast<size_t>(qd), nullptr);
  if (bulk > 0)
    for (auto& b : bufs) b = static_cast<uint8_t*>((*cli)->alloc(static_cast<size_t>(bulk)));
  std::vector<Done> slots(static_cast<size_t>(qd));
  std::vector<bool> busy(static_cast<size_t>(qd), false);
  // A fixed warm-up first, so that two runs differ only by their extra calls.
  const long total = 1000 + calls;
  long issued = 0, finished = 0;
  while (finished < total) {
    for (long k = 0; k < qd && issued < total; ++k) {
      if (busy[k]) continue;
      slots[k] = Done{};
      Call call{kProg, kVers, kEcho};
      call.args = args;
      if (bulk > 0 && read_dir) call.bulk_send = std::span<const uint8_t>(bufs[k], static_cast<size_t>(bulk));
      if (bulk > 0 && !read_dir) call.bulk_recv = std::span<uint8_t>(bufs[k], static_cast<size_t>(bulk));
      call.done = on_done;
      call.ctx = &slots[k];
      if (client_call(c, call) != 0) return fail("call refused");
      busy[k] = true;
      ++issued;
    }
    client_poll((*cli).get());
    server_poll((*srv).get());
    for (long k = 0; k < qd; ++k) {
      if (!busy[k] || !slots[k].done) continue;
      if (slots[k].status != CallStatus::kOk) return fail(call_status_name(slots[k].status));
      busy[k] = false;
      ++finished;
    }
  }
  if (scraper.joinable()) {
    stop.store(true);
    scraper.join();
    std::fprintf(stderr, "tern-rpc-cost: %ld scrapes of /metrics during the run\n", scrapes);
  }
  unlink(spec.c_str() + std::strlen("shm:path="));
  return 0;
}
