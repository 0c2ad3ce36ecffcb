// tern-fairness: one server engine (default options, its own process,
// pinned to one core) and 64 client processes (each a peer of its own, on
// the other core), one of them "noisy": it keeps 10x the calls in flight
// the quiet ones keep (on one connection, or spread over --noisy-conns);
// with --rate, each quiet client offers R calls/s (open loop, within its
// window) and the noisy one 10R.
// Every call is an inline echo whose reply is checked. The run alternates
// two phases, --rounds times: "solo" (the noisy client connected but
// silent) and "noisy" (it calls too), so that the quiet clients' figures
// with and without the noisy one are measured side by side in one run
// (docs/performance.md, "Many peers: fairness and isolation").
//
// Per phase it reports the quiet clients' total rate, Jain's fairness index
// over their individual rates ((sum x)^2 / (n sum x^2): 1 when all get the
// same), their p50/p99 (all quiet calls of the phase together), and the
// noisy client's rate; per round the ratio of the noisy phase's quiet p99
// to the solo phase's. Clients sleep in wait mode when they have nothing to
// do (64 spinning processes would only measure the kernel's scheduler).
// TERN_FAIRNESS_DEBUG=1 prints each client's figures per phase (calls,
// refusals, sleeps and their time, p50/p99).
//
//   tern-fairness [--clients 64] [--window 1] [--noisy-factor 10]
//                 [--noisy-conns 1] [--rate R] [--seconds 2] [--rounds 3]
//                 [--server-cpu 1] [--client-cpu 0] [--json FILE]
//
// scripts/measure-fairness.sh runs it. Exit status: 0 when every call
// completed ok with its reply checked, 1 otherwise, 2 for bad arguments.
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/histogram.h"
#include "engine/engine.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::rpc;

namespace {

constexpr uint32_t kProg = 0x2000fa17, kVers = 1, kEcho = 1;
constexpr int kMaxPhases = 64;

struct Opts {
  uint32_t clients = 64;
  uint32_t window = 1;
  uint32_t noisy_factor = 10;
  uint32_t noisy_conns = 1;
  double rate = 0;  // calls/s each quiet client offers (the noisy one: factor x); 0: as fast as replies come
  double seconds = 2;
  uint32_t rounds = 3;
  int server_cpu = 1, client_cpu = 0;
  std::string json;
};

void pin(int cpu) {
  if (cpu < 0) return;  // let the kernel place it
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof set, &set);
}

void raise_nofile() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
  }
}

// What the processes share (one anonymous shared mapping made before the
// forks): the phase the parent announces, and each client's figures per
// phase, written only by that client.
struct ClientPhase {
  uint64_t ok = 0, failed = 0, corrupt = 0;
  uint64_t refused = 0, waits = 0, wait_ns = 0;  // call() said no; sleeps in wait mode, and their time
  Histogram lat;
};
struct Shared {
  std::atomic<int> phase{-1};  // -1: connect and wait; 0..: record into that phase; kStop: finish
  std::atomic<uint32_t> ready{0}, done{0};
  std::atomic<uint32_t> broken{0};
  char first_error[200] = {};
  // [client][phase]
  ClientPhase* at(uint32_t client, int phase) { return &slots()[client * kMaxPhases + phase]; }
  ClientPhase* slots() { return reinterpret_cast<ClientPhase*>(this + 1); }
  static size_t bytes(uint32_t clients) { return sizeof(Shared) + sizeof(ClientPhase) * clients * kMaxPhases; }
};
constexpr int kStop = 1000;

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 9)); }

// ---------------------------------------------------------------- the server

void echo(void*, ServerCall* c) { (void)c->reply(c->args()); }

[[noreturn]] void serve(const std::string& spec, int ready_fd, int cpu) {
  pin(cpu);
  raise_nofile();
  EngineOptions o;  // the defaults: the gateway as it ships
  auto eng = Engine::create(o);
  if (!eng) {
    std::fprintf(stderr, "tern-fairness server: %s\n", eng.status().to_string().c_str());
    std::_Exit(1);
  }
  auto& e = *eng;
  e->handle(kProg, kVers, kEcho, &echo, nullptr);
  if (Status s = e->listen(spec); !s) {
    std::fprintf(stderr, "tern-fairness server: %s\n", s.to_string().c_str());
    std::_Exit(1);
  }
  for (int i = 0; i < 1000; ++i) e->poll();
  const char ok = 1;
  (void)!write(ready_fd, &ok, 1);
  close(ready_fd);
  for (;;) e->poll();  // busy, as a gateway's poll thread is; until killed
}

// ---------------------------------------------------------------- a client

struct Slot {
  Connection* conn = nullptr;
  bool busy = false;
  uint32_t seed = 0, n = 0;
  uint64_t t0 = 0;
  ClientPhase* rec = nullptr;  // the phase the call in flight counts in
  Shared* sh = nullptr;
};

void on_done(void* ctx, const CallReply& rep) {
  auto* s = static_cast<Slot*>(ctx);
  s->busy = false;
  ClientPhase* r = s->rec;
  if (r == nullptr) return;  // a call of the warm-up
  r->lat.record(monotonic_ns() - s->t0);
  bool good = rep.status == CallStatus::kOk && rep.results.size() == 32;
  for (size_t i = 0; good && i < 32; ++i) good = rep.results[i] == pat(s->seed, i);
  if (good) {
    ++r->ok;
    return;
  }
  if (rep.status != CallStatus::kOk) ++r->failed;
  else ++r->corrupt;
  if (s->sh->broken.fetch_add(1) == 0)
    std::snprintf(s->sh->first_error, sizeof s->sh->first_error, "call %u: status %d, %zu bytes of results", s->n,
                  static_cast<int>(rep.status), rep.results.size());
}

bool issue(Slot& s) {
  uint8_t args[32];
  s.seed = s.n * 2654435761u + static_cast<uint32_t>(reinterpret_cast<uintptr_t>(&s));
  for (uint32_t i = 0; i < 32; ++i) args[i] = pat(s.seed, i);
  Call c{kProg, kVers, kEcho};
  c.args = args;
  c.done = on_done;
  c.ctx = &s;
  s.t0 = monotonic_ns();
  if (s.conn->call(c) != 0) return false;
  s.busy = true;
  ++s.n;
  return true;
}

// A client process: `conns` connections, `window` calls in flight in all
// (spread over them); calls only in the phases `active` says.
[[noreturn]] void client(const std::string& spec, Shared* sh, uint32_t me, uint32_t conns, uint32_t window,
                         double rate, bool noisy, int cpu) {
  pin(cpu);
  EngineOptions co;
  // A small client: 65 of them share the machine.
  co.arena_bytes = 8u << 20;
  co.max_connections = conns + 1;
  auto eng = Engine::create(co);
  if (!eng) {
    std::fprintf(stderr, "tern-fairness client %u: %s\n", me, eng.status().to_string().c_str());
    std::_Exit(1);
  }
  Engine& e = **eng;
  std::vector<Connection*> cs;
  for (uint32_t i = 0; i < conns; ++i) {
    auto c = e.connect(spec);
    if (!c) {
      std::fprintf(stderr, "tern-fairness client %u: connect: %s\n", me, c.status().to_string().c_str());
      std::_Exit(1);
    }
    cs.push_back(*c);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    size_t up = 0;
    for (Connection* c : cs) {
      if (c->failed()) {
        std::fprintf(stderr, "tern-fairness client %u: %s\n", me, c->error().to_string().c_str());
        std::_Exit(1);
      }
      up += c->ready();
    }
    if (up == cs.size()) break;
    if (std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "tern-fairness client %u: connections not up\n", me);
      std::_Exit(1);
    }
    if (e.poll() == 0) (void)e.wait(1);
  }
  std::vector<Slot> slots(window);
  for (uint32_t i = 0; i < window; ++i) slots[i].conn = cs[i % cs.size()], slots[i].sh = sh;
  // One call on each slot's connection before the clock starts: the grants
  // grow with use.
  for (Slot& s : slots) (void)issue(s);
  while (std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; }))
    if (e.poll() == 0) (void)e.wait(1);
  sh->ready.fetch_add(1);
  // Open loop (rate > 0): a call is due every `period` ns; a call due while
  // the window is full goes when a slot frees (its latency counts from
  // then), and the schedule does not run ahead of the clock by more than the
  // window.
  const uint64_t period = rate > 0 ? static_cast<uint64_t>(1e9 / rate) : 0;
  uint64_t due = monotonic_ns();
  for (;;) {
    const int ph = sh->phase.load(std::memory_order_acquire);
    if (ph == kStop) break;
    // The noisy client calls only in odd phases; quiet ones in every phase.
    const bool calling = ph >= 0 && (!noisy || (ph & 1) == 1);
    if (period != 0) {
      const uint64_t now = monotonic_ns();
      if (!calling || due + period * window < now) due = std::max(due, now - period * window);
    }
    if (calling)
      for (Slot& s : slots)
        if (!s.busy) {
          if (period != 0) {
            if (due > monotonic_ns()) break;
            due += period;
          }
          s.rec = sh->at(me, ph);
          if (!issue(s)) {
            ++s.rec->refused;
            break;
          }
        }
    if (e.poll() == 0) {
      const uint64_t t = monotonic_ns();
      (void)e.wait(calling ? 1 : 5);
      if (ph >= 0 && ph < kMaxPhases) {
        ++sh->at(me, ph)->waits;
        sh->at(me, ph)->wait_ns += monotonic_ns() - t;
      }
    }
  }
  // Drain what is in flight (its figures count in the phase it began in).
  const auto drain = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::any_of(slots.begin(), slots.end(), [](const Slot& s) { return s.busy; }) &&
         std::chrono::steady_clock::now() < drain)
    if (e.poll() == 0) (void)e.wait(1);
  uint32_t lost = 0;
  for (Slot& s : slots) lost += s.busy;
  if (lost != 0 && sh->broken.fetch_add(lost) == 0)
    std::snprintf(sh->first_error, sizeof sh->first_error, "client %u: %u calls never completed", me, lost);
  sh->done.fetch_add(1);
  for (Connection* c : cs) c->close();
  for (int i = 0; i < 100; ++i) e.poll();
  std::_Exit(0);
}

double jain(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) s += v, s2 += v * v;
  return s2 == 0 ? 1.0 : s * s / (static_cast<double>(x.size()) * s2);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  apps::OptionParser cli("tern-fairness", "[options]");
  cli.integer("clients", "N", "client processes, one of them noisy (default 64)", 2, 1000, &o.clients);
  cli.integer("window", "W", "calls in flight per quiet client (default 1)", 1, 1u << 16, &o.window);
  cli.integer("noisy-factor", "F", "the noisy client keeps F times a quiet one's calls in flight\n(and, with --rate, F times its rate) (default 10)", 1, 1u << 16,
              &o.noisy_factor);
  cli.integer("noisy-conns", "C", "connections the noisy client spreads that over (default 1)", 1, 1u << 10,
              &o.noisy_conns);
  cli.real("rate", "R", "calls/s each quiet client offers (0: as fast as replies come; default)", 0, 1e9, &o.rate);
  cli.duration("seconds", "S", "length of each phase (default 2)", 1e6, &o.seconds);
  cli.integer("rounds", "R", "rounds of two phases: the noisy client silent, then calling\n(default 3)", 1, kMaxPhases / 2, &o.rounds);
  cli.integer("server-cpu", "C", "the server's CPU (default 1; -1: unpinned)", -1, 4095, &o.server_cpu);
  cli.integer("client-cpu", "C", "the clients' CPU (default 0; -1: unpinned)", -1, 4095, &o.client_cpu);
  cli.text("json", "FILE", "also write the results as JSON", &o.json);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  raise_nofile();
  const std::string spec = "shm:path=/tmp/tern-fairness-" + std::to_string(getpid()) + ".sock";
  const size_t bytes = Shared::bytes(o.clients);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  auto* sh = new (mem) Shared;
  for (uint32_t c = 0; c < o.clients; ++c)
    for (int p = 0; p < kMaxPhases; ++p) new (sh->at(c, p)) ClientPhase;

  int pfd[2];
  if (pipe(pfd) != 0) return 1;
  pid_t srv = fork();
  if (srv == 0) {
    close(pfd[0]);
    serve(spec, pfd[1], o.server_cpu);
  }
  close(pfd[1]);
  char okc = 0;
  if (read(pfd[0], &okc, 1) != 1) {
    std::fprintf(stderr, "tern-fairness: the server did not start\n");
    return 1;
  }
  // Client 0 is the noisy one.
  const uint32_t noisy = 0;
  std::vector<pid_t> kids;
  for (uint32_t c = 0; c < o.clients; ++c) {
    pid_t p = fork();
    if (p == 0) {
      const bool n = c == noisy;
      client(spec, sh, c, n ? o.noisy_conns : 1, n ? o.window * o.noisy_factor : o.window,
             n ? o.rate * o.noisy_factor : o.rate, n, o.client_cpu);
    }
    kids.push_back(p);
    // A few at a time: the server takes only so many hellos at once.
    if (c % 16 == 15) usleep(50000);
  }
  auto kill_all = [&] {
    for (pid_t p : kids) kill(p, SIGKILL);
    for (pid_t p : kids) waitpid(p, nullptr, 0);
    kill(srv, SIGKILL);
    waitpid(srv, nullptr, 0);
    unlink(spec.c_str() + 9);
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (sh->ready.load() < o.clients) {
    int st = 0;
    if (waitpid(-1, &st, WNOHANG) > 0 || std::chrono::steady_clock::now() > until) {
      std::fprintf(stderr, "tern-fairness: only %u of %u clients came up\n", sh->ready.load(), o.clients);
      kill_all();
      return 1;
    }
    usleep(10000);
  }
  const int phases = static_cast<int>(o.rounds) * 2;
  for (int ph = 0; ph < phases; ++ph) {
    sh->phase.store(ph, std::memory_order_release);
    usleep(static_cast<useconds_t>(o.seconds * 1e6));
  }
  sh->phase.store(kStop, std::memory_order_release);
  const auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (sh->done.load() < o.clients && std::chrono::steady_clock::now() < dl) usleep(10000);
  const bool all_done = sh->done.load() == o.clients;
  kill_all();

  std::printf("%u clients (1 noisy: %u calls in flight over %u connection%s; %u quiet: %u each; offered %s %.0f "
              "calls/s each), %u rounds of %.1f s solo + %.1f s noisy\n",
              o.clients, o.window * o.noisy_factor, o.noisy_conns, o.noisy_conns == 1 ? "" : "s", o.clients - 1,
              o.window, o.rate > 0 ? "" : "(closed loop)", o.rate, o.rounds, o.seconds, o.seconds);
  std::printf("%-5s %-6s %12s %8s %10s %10s %12s %8s\n", "round", "phase", "quiet calls/s", "jain", "quiet p50",
              "quiet p99", "noisy calls/s", "p99 x");
  std::vector<double> jain_solo, jain_noisy, p99_ratio, p99_solo, p99_noisy, rate_solo, rate_noisy, noisy_rate;
  std::string js = "{\"clients\":" + std::to_string(o.clients) + ",\"window\":" + std::to_string(o.window) +
                   ",\"noisy_factor\":" + std::to_string(o.noisy_factor) +
                   ",\"noisy_conns\":" + std::to_string(o.noisy_conns) +
                   ",\"rate\":" + std::to_string(o.rate) + ",\"seconds\":" + std::to_string(o.seconds) +
                   ",\"rounds\":[";
  uint64_t failed = 0;
  for (uint32_t r = 0; r < o.rounds; ++r) {
    double p99[2] = {0, 0};
    if (r > 0) js += ",";
    js += "{";
    for (int k = 0; k < 2; ++k) {
      const int ph = static_cast<int>(r) * 2 + k;
      Histogram all;
      std::vector<double> rates;
      for (uint32_t c = 0; c < o.clients; ++c) {
        ClientPhase* cp = sh->at(c, ph);
        failed += cp->failed + cp->corrupt;
        if (c == noisy) continue;
        all.merge(cp->lat);
        rates.push_back(static_cast<double>(cp->ok) / o.seconds);
      }
      double total = 0;
      for (double v : rates) total += v;
      if (std::getenv("TERN_FAIRNESS_DEBUG") != nullptr)
        for (uint32_t c = 0; c < o.clients; ++c) {
          ClientPhase* cp = sh->at(c, ph);
          std::printf("  client %2u: ok %6" PRIu64 " refused %" PRIu64 " waits %6" PRIu64
                      " (%.0f ms) p50 %.1fus p99 %.1fus\n",
                      c, cp->ok, cp->refused, cp->waits, static_cast<double>(cp->wait_ns) / 1e6,
                      static_cast<double>(cp->lat.percentile(50)) / 1e3,
                      static_cast<double>(cp->lat.percentile(99)) / 1e3);
        }
      const double j = jain(rates);
      const double nr = static_cast<double>(sh->at(noisy, ph)->ok) / o.seconds;
      p99[k] = static_cast<double>(all.percentile(99));
      (k == 0 ? jain_solo : jain_noisy).push_back(j);
      (k == 0 ? p99_solo : p99_noisy).push_back(p99[k]);
      (k == 0 ? rate_solo : rate_noisy).push_back(total);
      if (k == 1) noisy_rate.push_back(nr);
      char line[300];
      std::snprintf(line, sizeof line, "%-5u %-6s %12.0f %8.4f %8.1fus %8.1fus %12.0f", r, k == 0 ? "solo" : "noisy",
                    total, j, static_cast<double>(all.percentile(50)) / 1e3, p99[k] / 1e3, nr);
      std::printf("%s", line);
      if (k == 1) {
        p99_ratio.push_back(p99[1] / std::max(p99[0], 1.0));
        std::printf(" %7.2fx", p99_ratio.back());
      }
      std::printf("\n");
      char buf[400];
      std::snprintf(buf, sizeof buf,
                    "%s\"%s\":{\"quiet_rate\":%.0f,\"jain\":%.4f,\"quiet_p50_ns\":%" PRIu64 ",\"quiet_p99_ns\":%" PRIu64
                    ",\"noisy_rate\":%.0f,\"quiet_min_rate\":%.0f,\"quiet_max_rate\":%.0f}",
                    k == 0 ? "" : ",", k == 0 ? "solo" : "noisy", total, j, all.percentile(50), all.percentile(99), nr,
                    *std::min_element(rates.begin(), rates.end()), *std::max_element(rates.begin(), rates.end()));
      js += buf;
    }
    js += "}";
  }
  const double mj = median(jain_noisy), mr = median(p99_ratio);
  std::printf("median of %u rounds: Jain (noisy phase) %.4f [goal >= 0.95], quiet p99 noisy/solo %.2fx [goal <= 2x]; "
              "quiet rate %.0f -> %.0f calls/s, noisy client %.0f calls/s (%.1fx a quiet one's)\n",
              o.rounds, mj, mr, median(rate_solo), median(rate_noisy), median(noisy_rate),
              median(noisy_rate) / std::max(median(rate_noisy) / (o.clients - 1), 1.0));
  if (sh->broken.load() != 0 || failed != 0 || !all_done)
    std::printf("FAILED: %u broken calls, %" PRIu64 " failed, %s; first: %s\n", sh->broken.load(), failed,
                all_done ? "all clients finished" : "not all clients finished", sh->first_error);
  char tail[300];
  std::snprintf(tail, sizeof tail,
                "],\"median_jain_noisy\":%.4f,\"median_jain_solo\":%.4f,\"median_p99_ratio\":%.3f,"
                "\"median_quiet_p99_solo_ns\":%.0f,\"median_quiet_p99_noisy_ns\":%.0f,\"failed\":%" PRIu64 "}\n",
                mj, median(jain_solo), mr, median(p99_solo), median(p99_noisy), failed + sh->broken.load());
  js += tail;
  if (!o.json.empty()) {
    if (FILE* f = std::fopen(o.json.c_str(), "w")) {
      std::fputs(js.c_str(), f);
      std::fclose(f);
    }
  }
  return sh->broken.load() == 0 && failed == 0 && all_done ? 0 : 1;
}
