// Many connections to one server engine (docs/performance.md, "Connections
// at scale"): a client
// process opens thousands of pmd/shm connections to this process's server
// engine, every one makes a call whose reply it checks, and then, with all
// of them idle, what they cost the server is read from its allocator's own
// accounting (glibc's bytes in use, mallinfo2) and the resident pages of its
// connection-area mappings -- never from how fast anything ran.
//
// The bound is 16 KiB of server memory per idle connection, the goal that
// lets one engine hold 10,000 (docs/performance.md, "Connections at scale";
// docs/engine.md, "Memory per connection"). Each connection is idle in the
// way a gateway's are: it carried a call, then nothing.
//
// The client is a child process forked before the server exists (it holds
// none of the server's descriptors): it opens its connections in batches,
// calls on each, checks every reply, reports through a pipe, and polls on
// (so that its driver gives its idle ring pages back, as a live client's
// does) until the test closes its control pipe.
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "rpc_fixture.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TERN_MEM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TERN_MEM_SANITIZED 1
#endif
#endif

namespace tern::rpc {
namespace {

constexpr uint32_t kConns = 2000;
constexpr double kBoundKib = 16.0;

bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

// Each connection is a socket on both sides.
void raise_nofile() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &r);
  }
}

uint64_t heap_in_use() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Resident bytes of this process's pmd/shm connection-area mappings.
uint64_t area_resident() {
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  char line[512];
  bool in = false;
  uint64_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long a, b;
    if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2) {
      in = std::strstr(line, "tern-shm-conn") != nullptr;
      continue;
    }
    uint64_t v = 0;
    if (in && std::sscanf(line, "Rss: %" SCNu64, &v) == 1) kib += v;
  }
  std::fclose(f);
  return kib << 10;
}

struct Report {
  uint32_t ready = 0, ok = 0, bad = 0;
  char first_error[200] = {};
};

struct Slot {
  Pending p;
  uint8_t args[16];
};

// The client process: n connections to `path`, one checked echo on each.
[[noreturn]] void client(const std::string& path, uint32_t n, int report_fd, int control_fd) {
  raise_nofile();
  Report rep;
  const std::string file = path.substr(9);
  struct stat sb;
  for (int i = 0; i < 5000 && stat(file.c_str(), &sb) != 0; ++i) usleep(1000);
  EngineOptions co;
  co.arena_bytes = 64u << 20;
  co.max_connections = n + 8;
  co.recv_buffers = n + 64;  // every call's reply reserves one
  co.reconnect = false;
  auto eng = Engine::create(co);
  if (!eng) _exit(3);
  Engine* e = eng->get();
  std::vector<Connection*> conns;
  conns.reserve(n);
  auto note = [&](const std::string& s) {
    if (rep.first_error[0] == 0) std::snprintf(rep.first_error, sizeof rep.first_error, "%s", s.c_str());
  };
  // A batch at a time, each up before the next: a server reads hellos from
  // its poll loop and holds only so many sockets waiting for theirs
  // (pmd/shm's max_pending, 64).
  constexpr uint32_t kBatch = 32;
  for (uint32_t i = 0; i < n; i += kBatch) {
    const uint32_t end = std::min(n, i + kBatch);
    for (uint32_t k = i; k < end; ++k) {
      auto c = e->connect(path);
      if (!c) {
        note("connect: " + c.status().to_string());
        break;
      }
      conns.push_back(*c);
    }
    poll_until({e}, [&] {
      for (size_t k = i; k < conns.size(); ++k)
        if (!conns[k]->ready() && !conns[k]->failed()) return false;
      return true;
    }, 15000);
  }
  std::vector<Slot> slots(conns.size());
  for (size_t k = 0; k < conns.size(); ++k) {
    if (!conns[k]->ready()) {
      note("connection " + std::to_string(k) + ": " + conns[k]->error().to_string());
      continue;
    }
    ++rep.ready;
    Slot& s = slots[k];
    for (uint32_t j = 0; j < sizeof s.args; ++j) s.args[j] = pat(static_cast<uint32_t>(k), j);
    Call c{kProg, kVers, kEcho};
    c.args = s.args;
    c.done = on_done, c.ctx = &s.p;
    if (int rc = conns[k]->call(c); rc != 0) {
      note("call: errno " + std::to_string(rc));
      s.p.done = true, s.p.reply.status = CallStatus::kDisconnected;
    }
  }
  poll_until({e}, [&] {
    for (Slot& s : slots)
      if (!s.p.done && &s - slots.data() < static_cast<ptrdiff_t>(rep.ready)) return false;
    return true;
  }, 20000);
  for (size_t k = 0; k < conns.size(); ++k) {
    if (!conns[k]->ready() && !slots[k].p.done) continue;
    const Pending& p = slots[k].p;
    if (p.done && p.reply.status == CallStatus::kOk &&
        p.results == std::vector<uint8_t>(slots[k].args, slots[k].args + sizeof slots[k].args))
      ++rep.ok;
    else if (conns[k]->ready()) {
      ++rep.bad;
      note("connection " + std::to_string(k) + ": reply " + (p.done ? call_status_name(p.reply.status) : "never came") +
           " or did not check");
    }
  }
  if (write(report_fd, &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) _exit(5);
  // Polls on (idle) until the test closes the control pipe, or two minutes.
  const auto stop = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < stop) {
    for (int i = 0; i < 100; ++i) e->poll();
    pollfd p{control_fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) break;
  }
  for (Connection* c : conns) c->close();
  for (int i = 0; i < 1000; ++i) e->poll();
  _exit(0);
}

TEST(ConnScale, ThousandsOfConnectionsCallAndIdleCheaply) {
  if (!on_shm()) GTEST_SKIP() << "thousands of connections are pmd/shm's (one process holds them all)";
  raise_nofile();
  const std::string path = next_spec();
  int rp[2], cp[2];
  ASSERT_EQ(pipe2(rp, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(cp, O_CLOEXEC), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(rp[0]);
    close(cp[1]);
    client(path, kConns, rp[1], cp[0]);
  }
  close(rp[1]);
  close(cp[0]);
  ASSERT_EQ(fcntl(rp[0], F_SETFL, O_NONBLOCK), 0);

  EngineOptions so;  // the defaults, but for the table's size
  so.max_connections = kConns + 16;
  auto srv = Engine::create(so).value();
  srv->handle(kProg, kVers, kEcho, &Fixture::echo, nullptr);
  ASSERT_OK(srv->listen(path));
  // The engine's pools are carved as first used: settle before reading the
  // memory of "no connections".
  for (int i = 0; i < 1000; ++i) srv->poll();
  const uint64_t heap0 = heap_in_use(), area0 = area_resident();

  Report rep;
  size_t got = 0;
  const bool reported = poll_until({srv.get()}, [&] {
    ssize_t r = read(rp[0], reinterpret_cast<char*>(&rep) + got, sizeof rep - got);
    if (r > 0) got += static_cast<size_t>(r);
    return got == sizeof rep || r == 0;
  }, 120000);
  EXPECT_TRUE(reported && got == sizeof rep) << "the client never reported";
  EXPECT_EQ(rep.ready, kConns) << rep.first_error;
  EXPECT_EQ(rep.ok, kConns) << rep.first_error;
  EXPECT_EQ(rep.bad, 0u) << rep.first_error;

  // Idle: pmd/shm gives an idle QP's send queue and ring pages back after a
  // second without activity (both sides). Read every 250 ms, polling, until
  // the figure is within the bound, failing with the last figure after 15 s
  // (a loaded machine may trim late; the bound is on memory, and what an
  // idle connection holds only shrinks, so no fixed wait comes first).
  double heap_kib = 0, area_kib = 0;
  bool within = false;
  if (got == sizeof rep && rep.ready > 0) {
    poll_until({srv.get()}, [&] {
      static auto next = std::chrono::steady_clock::now();
      if (std::chrono::steady_clock::now() < next) return false;
      next = std::chrono::steady_clock::now() + std::chrono::milliseconds(250);
      const uint64_t heap = heap_in_use(), area = area_resident();
      heap_kib = static_cast<double>(heap > heap0 ? heap - heap0 : 0) / 1024.0 / rep.ready;
      area_kib = static_cast<double>(area > area0 ? area - area0 : 0) / 1024.0 / rep.ready;
#ifdef TERN_MEM_SANITIZED
      heap_kib = 0;  // the heap is the sanitizer's
#endif
      within = heap_kib + area_kib <= kBoundKib;
      return within;
    }, 15000);
  }
  std::printf("%u idle connections: %.2f KiB of server memory each (heap %.2f + area %.2f)\n", rep.ready,
              heap_kib + area_kib, heap_kib, area_kib);
  EXPECT_TRUE(within) << "an idle connection costs the server " << heap_kib + area_kib << " KiB (heap " << heap_kib
                      << " + area " << area_kib << "), over the " << kBoundKib << " KiB bound";

  close(cp[1]);
  close(rp[0]);
  int status = 0;
  if (!poll_until({srv.get()}, [&] { return waitpid(child, &status, WNOHANG) == child; }, 20000)) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  srv.reset();
  remove_spec(path);
}

}  // namespace
}  // namespace tern::rpc
