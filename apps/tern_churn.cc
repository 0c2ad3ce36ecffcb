// tern-churn: connection churn against one server engine
// (scripts/measure-churn.sh runs it). Not a test: a measurement.
//
// A supervisor forks one server process (one engine over pmd/shm, default
// options unless told otherwise, an echo handler), one well-behaved client
// (one connection, a window of echo calls, every reply checked), and then,
// for --seconds, churn clients: each opens --per-client connections, makes
// one echo call on each, and is killed with SIGKILL after a lifetime drawn
// around --life-ms (so that some die while connecting, some with a call in
// flight, most idle), at --rate connections a second in all.
//
// At the end the churn stops, the well-behaved client closes, and the
// server, once it holds no connection, reports what its engine holds outside
// its pools (engine_testing.h's accounting: all 0 at idle) and its resident
// memory before the churn, after the first tenth of it, and at the end.
// Exit status 1 when the accounting is not idle, connections are left, or
// a well-behaved call failed.
//
//   tern-churn [--seconds S] [--rate CONNS_PER_S] [--per-client N]
//              [--life-ms MS] [--max-connections N] [--idle-reap-ms MS]
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "base/log.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::rpc;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kProg = 0x20000077, kVers = 1, kEcho = 1;

// What the processes tell the supervisor, in one shared mapping.
struct Shared {
  std::atomic<int> stop_server{0}, stop_good{0}, server_ready{0}, server_done{0}, good_done{0};
  std::atomic<uint64_t> server_conns{0}, rss_kb_now{0};
  // The server's final report.
  uint64_t rss_kb_start = 0, rss_kb_end = 0, conns_end = 0, reaped = 0, refused = 0, refused_peer = 0,
           accepted = 0;
  bool idle = false;
  char accounting[512] = {};
  // Churn clients (any of them, until killed) and the well-behaved one.
  std::atomic<uint64_t> churn_ready{0}, churn_failed{0}, churn_calls_ok{0};
  std::atomic<uint64_t> good_ok{0}, good_failed{0}, good_bad_payload{0};
  char good_error[256] = {};
};
Shared* sh = nullptr;

uint64_t rss_kb() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<uint64_t>(resident) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }

[[noreturn]] void run_server(const std::string& path, const EngineOptions& so) {
  auto eng = Engine::create(so);
  if (!eng) {
    std::fprintf(stderr, "tern-churn server: %s\n", eng.status().to_string().c_str());
    _exit(2);
  }
  Engine* e = eng->get();
  e->handle(kProg, kVers, kEcho, &echo, nullptr);
  if (Status s = e->listen(path); !s) {
    std::fprintf(stderr, "tern-churn server: %s\n", s.to_string().c_str());
    _exit(2);
  }
  sh->rss_kb_start = rss_kb();
  sh->server_ready = 1;
  auto next = Clock::now();
  while (!sh->stop_server.load()) {
    for (int i = 0; i < 64; ++i) e->poll();
    if (Clock::now() >= next) {
      next = Clock::now() + std::chrono::milliseconds(100);
      sh->server_conns = e->stats().connections.get();
      sh->rss_kb_now = rss_kb();
    }
  }
  // Idle: every connection gone (the clients are dead or closed), then what
  // the engine still holds.
  const auto end = Clock::now() + std::chrono::seconds(20);
  while (e->stats().connections.get() != 0 && Clock::now() < end) e->poll();
  for (int i = 0; i < 1000; ++i) e->poll();
  const EngineStats& st = e->stats();
  sh->conns_end = st.connections.get();
  sh->reaped = st.connections_reaped.get();
  sh->refused = st.connections_refused.get();
  sh->refused_peer = st.connections_refused_peer_limit.get();
  testing::Accounting a = testing::accounting(*e);
  sh->idle = a.idle();
  std::snprintf(sh->accounting, sizeof sh->accounting, "%s", a.to_string().c_str());
  sh->rss_kb_end = rss_kb();
  sh->server_done = 1;
  _exit(0);
}

struct GoodCall {
  uint8_t args[64];
  bool done = true;
  CallReply reply{};
  std::vector<uint8_t> results;
};

void good_done(void* ctx, const CallReply& r) {
  auto* g = static_cast<GoodCall*>(ctx);
  g->done = true;
  g->reply = r;
  g->results.assign(r.results.begin(), r.results.end());
}

[[noreturn]] void run_good(const std::string& path) {
  EngineOptions co;
  co.arena_bytes = 32u << 20;
  auto eng = Engine::create(co);
  if (!eng) _exit(2);
  Engine* e = eng->get();
  Connection* c = e->connect(path).value();
  while (!c->ready() && !c->failed()) e->poll();
  if (!c->ready()) {
    std::snprintf(sh->good_error, sizeof sh->good_error, "connect: %s", c->error().to_string().c_str());
    sh->good_failed++;
    sh->good_done = 1;
    _exit(1);
  }
  std::vector<GoodCall> win(4);
  uint32_t seq = 0;
  auto issue = [&](GoodCall& g) {
    for (size_t i = 0; i < sizeof g.args; ++i) g.args[i] = static_cast<uint8_t>(seq * 7 + i);
    ++seq;
    g.done = false;
    Call k{kProg, kVers, kEcho};
    k.args = g.args;
    k.done = good_done, k.ctx = &g;
    k.timeout_ns = 10'000'000'000ull;
    if (c->call(k) != 0) {
      g.done = true;
      g.reply.status = CallStatus::kDisconnected;
      sh->good_failed++;
    }
  };
  for (GoodCall& g : win) issue(g);
  while (!sh->stop_good.load()) {
    e->poll();
    for (GoodCall& g : win) {
      if (!g.done) continue;
      if (g.reply.status != CallStatus::kOk) {
        sh->good_failed++;
        std::snprintf(sh->good_error, sizeof sh->good_error, "call: %s (%s)", call_status_name(g.reply.status),
                      c->error().to_string().c_str());
      } else if (g.results != std::vector<uint8_t>(g.args, g.args + sizeof g.args)) {
        sh->good_bad_payload++;
      } else {
        sh->good_ok++;
      }
      issue(g);
    }
  }
  // Wait for what is in flight, then close.
  const auto end = Clock::now() + std::chrono::seconds(10);
  auto all_done = [&] {
    for (GoodCall& g : win)
      if (!g.done) return false;
    return true;
  };
  while (!all_done() && Clock::now() < end) e->poll();
  c->close();
  for (int i = 0; i < 1000; ++i) e->poll();
  sh->good_done = 1;
  _exit(0);
}

void churn_done(void*, const CallReply& r) {
  if (r.status == CallStatus::kOk) sh->churn_calls_ok++;
}

// A churn client: connects, calls once on each connection, and polls until
// it is killed.
[[noreturn]] void run_churn(const std::string& path, uint32_t n) {
  EngineOptions co;
  co.arena_bytes = 8u << 20;
  co.reconnect = false;
  auto eng = Engine::create(co);
  if (!eng) _exit(2);
  Engine* e = eng->get();
  std::vector<Connection*> conns;
  std::vector<bool> called(n, false), counted(n, false);
  for (uint32_t i = 0; i < n; ++i) {
    auto c = e->connect(path);
    if (c) conns.push_back(*c);
  }
  static uint8_t args[16] = {};
  for (;;) {
    e->poll();
    for (size_t i = 0; i < conns.size(); ++i) {
      if (counted[i]) continue;
      if (conns[i]->failed()) {
        counted[i] = true;
        sh->churn_failed++;
      } else if (conns[i]->ready() && !called[i]) {
        called[i] = counted[i] = true;
        sh->churn_ready++;
        Call k{kProg, kVers, kEcho};
        k.args = args;
        k.done = churn_done;
        (void)conns[i]->call(k);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60, rate = 100;
  uint32_t per_client = 10, life_ms = 300;
  EngineOptions so;  // the server as it ships, unless told otherwise
  apps::OptionParser cli("tern-churn", "[options]");
  cli.duration("seconds", "S", "how long clients are started and killed (default 60)", 1e6, &seconds);
  cli.real("rate", "CONNS_PER_S", "connections opened a second, in all (default 100)", 0.001, 1e6,
         &rate);
  cli.integer("per-client", "N", "connections per client process (default 10)", 1, 1u << 16, &per_client);
  cli.integer("life-ms", "MS", "a client's lifetime before SIGKILL, drawn around MS (default 300)", 0, 86400000, &life_ms);
  cli.integer("max-connections", "N", "the server engine's max_connections (default: the engine's)", 1, 1u << 20,
            &so.max_connections);
  cli.integer("idle-reap-ms", "MS", "the server engine's idle_reap_ms (default: the engine's)", 0, 86400000,
            &so.idle_reap_ms);
  cli.integer("max-per-peer", "N", "the server engine's max_connections_per_peer (default: the engine's)", 0,
            1u << 20, &so.max_connections_per_peer);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2;
  sh = new (m) Shared();
  const std::string path = "shm:path=/tmp/tern-churn-" + std::to_string(getpid()) + ".sock";

  // No engine in this process: every child makes its own after the fork.
  pid_t server = fork();
  if (server == 0) run_server(path, so);
  while (!sh->server_ready.load()) usleep(1000);
  pid_t good = fork();
  if (good == 0) run_good(path);

  struct Churner {
    pid_t pid;
    Clock::time_point kill_at;
  };
  std::deque<Churner> live;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<uint32_t> life(life_ms / 2, life_ms + life_ms / 2);
  const auto every = std::chrono::duration<double>(per_client / rate);
  const auto t0 = Clock::now();
  const auto t_end = t0 + std::chrono::duration<double>(seconds);
  const auto t_tenth = t0 + std::chrono::duration<double>(seconds / 10);
  auto next_spawn = t0;
  uint64_t spawned = 0, killed = 0, rss_tenth = 0, rss_peak = 0;
  auto last_line = t0;
  while (Clock::now() < t_end) {
    const auto now = Clock::now();
    if (now >= next_spawn) {
      next_spawn += std::chrono::duration_cast<Clock::duration>(every);
      pid_t p = fork();
      if (p == 0) run_churn(path, per_client);
      if (p > 0) {
        ++spawned;
        live.push_back({p, now + std::chrono::milliseconds(life(rng))});
      }
    }
    while (!live.empty() && live.front().kill_at <= now) {
      kill(live.front().pid, SIGKILL);
      waitpid(live.front().pid, nullptr, 0);
      ++killed;
      live.pop_front();
    }
    const uint64_t r = sh->rss_kb_now.load();
    rss_peak = std::max(rss_peak, r);
    if (rss_tenth == 0 && now >= t_tenth) rss_tenth = r;
    if (now - last_line >= std::chrono::seconds(10)) {
      last_line = now;
      std::printf("  %5.0f s: %" PRIu64 " clients killed, server holds %" PRIu64 " connections, RSS %" PRIu64
                  " KiB; good calls %" PRIu64 " ok %" PRIu64 " failed\n",
                  std::chrono::duration<double>(now - t0).count(), killed, sh->server_conns.load(), r,
                  sh->good_ok.load(), sh->good_failed.load());
      std::fflush(stdout);
    }
    usleep(500);
  }
  for (Churner& c : live) {
    kill(c.pid, SIGKILL);
    waitpid(c.pid, nullptr, 0);
    ++killed;
  }
  sh->stop_good = 1;
  waitpid(good, nullptr, 0);
  sh->stop_server = 1;
  int st = 0;
  waitpid(server, &st, 0);
  const std::string file = path.substr(9);
  unlink(file.c_str());

  const bool ok = sh->server_done && sh->idle && sh->conns_end == 0 && sh->good_failed == 0 &&
                  sh->good_bad_payload == 0 && sh->good_ok > 0;
  std::printf("tern-churn: %.0f s at %.0f connections/s (%u per client, killed after ~%u ms): %" PRIu64
              " clients killed, %" PRIu64 " connections up, %" PRIu64 " failed to connect, %" PRIu64
              " churn calls answered\n",
              seconds, rate, per_client, life_ms, killed, sh->churn_ready.load(), sh->churn_failed.load(),
              sh->churn_calls_ok.load());
  std::printf("server at idle: %" PRIu64 " connections; accounting %s (%s); reaped %" PRIu64 ", refused %" PRIu64
              " (%" PRIu64 " per-peer limit)\n",
              sh->conns_end, sh->idle ? "idle" : "NOT IDLE", sh->accounting, sh->reaped, sh->refused,
              sh->refused_peer);
  std::printf("server RSS: %" PRIu64 " KiB before, %" PRIu64 " KiB after the first tenth, %" PRIu64
              " KiB peak, %" PRIu64 " KiB at the end\n",
              sh->rss_kb_start, rss_tenth, rss_peak, sh->rss_kb_end);
  std::printf("well-behaved client: %" PRIu64 " calls ok, %" PRIu64 " failed, %" PRIu64 " bad payloads%s%s\n",
              sh->good_ok.load(), sh->good_failed.load(), sh->good_bad_payload.load(),
              sh->good_error[0] ? "; last error: " : "", sh->good_error);
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
