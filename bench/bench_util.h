// Helpers for the pmd/shm microbenchmarks: two engines in one process, each
// with its own shm Device/Arena/PD/CQ/QP, connected over a private socket and
// then driven from two threads pinned to different CPUs.
//
// Nothing here may hang: every wait is bounded (Waiter), and a process-wide
// watchdog (arm_watchdog) aborts a benchmark call that takes too long even if
// the driver itself never returns. Every failure aborts with a message naming
// what was awaited and both QPs' state and counters: a broken driver must not
// produce numbers.
#pragma once

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "base/stats.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern::bench {

using namespace tern::rdma;
using SteadyClock = std::chrono::steady_clock;

inline constexpr uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
// How long any single wait (a completion, a connection event) may take.
inline constexpr auto kWaitLimit = std::chrono::seconds(5);
// How long one call of a benchmark function (setup + timed loop + teardown) may take.
inline constexpr unsigned kWatchdogSeconds = 60;

// ---------------------------------------------------------------- failing loudly

namespace detail {
inline const char* g_prog = "tern-bench";        // set by each program's main()
inline std::mutex g_paths_mu;
inline std::vector<std::string> g_socket_paths;  // unlinked on die()
inline char g_peer_error[512];                   // set by a peer thread before it stops
inline std::atomic<bool> g_peer_failed{false};
}  // namespace detail

inline void unlink_socket_paths() {
  std::lock_guard<std::mutex> g(detail::g_paths_mu);
  for (auto& p : detail::g_socket_paths) ::unlink(p.c_str());
}

[[noreturn]] inline void die(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void die(const char* fmt, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "\n%s: FATAL: ", detail::g_prog);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  if (detail::g_peer_failed.load(std::memory_order_acquire))
    std::fprintf(stderr, "%s: the peer thread had failed first: %s\n", detail::g_prog, detail::g_peer_error);
  unlink_socket_paths();
  std::fflush(stderr);
  std::abort();
}

// A peer thread reports a failure here and stops its loop; the driving thread
// notices (its own wait times out, or it checks peer_failed()) and dies with it.
inline void peer_fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void peer_fail(const char* fmt, ...) {
  if (detail::g_peer_failed.load(std::memory_order_relaxed)) return;
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(detail::g_peer_error, sizeof detail::g_peer_error, fmt, ap);
  va_end(ap);
  detail::g_peer_failed.store(true, std::memory_order_release);
}
inline bool peer_failed() { return detail::g_peer_failed.load(std::memory_order_acquire); }

// SIGALRM watchdog: arm at the start of each benchmark call, disarm at its end.
inline void watchdog_handler(int) {
  // write() and strlen() only: async-signal-safe.
  static const char msg[] = ": FATAL: watchdog: a benchmark call ran for over 60 s (hung driver or engine?)\n";
  ssize_t r = ::write(2, "\n", 1);
  r = ::write(2, detail::g_prog, std::strlen(detail::g_prog));
  r = ::write(2, msg, sizeof msg - 1);
  (void)r;
  std::abort();
}
inline void arm_watchdog() {
  static bool installed = [] {
    struct sigaction sa = {};
    sa.sa_handler = watchdog_handler;
    sigaction(SIGALRM, &sa, nullptr);
    return true;
  }();
  (void)installed;
  alarm(kWatchdogSeconds);
}
inline void disarm_watchdog() { alarm(0); }

// ---------------------------------------------------------------- threads and time

// Pins the calling thread; returns false (after one warning per process) if
// the machine does not have that CPU.
inline bool pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (rc != 0) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::fprintf(stderr, "%s: warning: cannot pin to CPU %d (%s); running unpinned\n", detail::g_prog, cpu,
                   std::strerror(rc));
    return false;
  }
  return true;
}

inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count());
}

// Bounded busy-wait: call expired() once per spin. It reads the clock only
// every 1024 spins (and starts the clock at the first such read), so building
// one per round trip costs nothing measurable. It also gives up at once when
// a peer thread has reported a failure.
class Waiter {
 public:
  explicit Waiter(const char* what, std::chrono::nanoseconds limit = kWaitLimit) : what_(what), limit_(limit) {}
  bool expired() {
    if ((++spins_ & 1023) != 0) return false;
    if (peer_failed()) return true;
    auto now = SteadyClock::now();
    if (!started_) {
      started_ = true;
      end_ = now + limit_;
      return false;
    }
    return now > end_;
  }
  const char* what() const { return what_; }

 private:
  const char* what_;
  std::chrono::nanoseconds limit_;
  SteadyClock::time_point end_{};
  uint64_t spins_ = 0;
  bool started_ = false;
};

// One peer thread, pinned, running body(stop) until stop is set.
class PeerThread {
 public:
  PeerThread() = default;
  ~PeerThread() { stop(); }
  PeerThread(const PeerThread&) = delete;
  PeerThread& operator=(const PeerThread&) = delete;

  template <typename F>
  void start(int cpu, F body) {
    stop_.store(false, std::memory_order_relaxed);
    running_.store(false, std::memory_order_relaxed);
    t_ = std::thread([this, cpu, body]() mutable {
      pin_self(cpu);
      running_.store(true, std::memory_order_release);
      body(stop_);
    });
    Waiter w("the peer thread to start", std::chrono::seconds(5));
    while (!running_.load(std::memory_order_acquire)) {
      if (w.expired()) die("timed out waiting for %s", w.what());
      std::this_thread::yield();
    }
  }
  // Sets the stop flag and joins. Peer loops check the flag on every spin.
  void stop() {
    if (!t_.joinable()) return;
    stop_.store(true, std::memory_order_release);
    t_.join();
  }

 private:
  std::thread t_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
};

// ---------------------------------------------------------------- patterns

inline uint8_t pattern_byte(size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + seed * 40503u + 0x9e37u;
  return static_cast<uint8_t>(x ^ (x >> 13) ^ (x >> 24));
}
inline void fill_pattern(void* p, size_t len, uint32_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < len; ++i) b[i] = pattern_byte(i, seed);
}
// Index of the first byte that differs from the pattern, or -1.
inline long long find_pattern_mismatch(const void* p, size_t len, uint32_t seed, size_t from = 0) {
  auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = from; i < len; ++i)
    if (b[i] != pattern_byte(i, seed)) return static_cast<long long>(i);
  return -1;
}

inline std::string wc_string(const Wc& wc) {
  char b[200];
  std::snprintf(b, sizeof b, "{wr_id=%llu status=%s opcode=%s byte_len=%u qp_num=%u}",
                static_cast<unsigned long long>(wc.wr_id), wc_status_name(wc.status), wc_opcode_name(wc.opcode),
                wc.byte_len, wc.qp_num);
  return b;
}

// ---------------------------------------------------------------- one engine

// A registered buffer carved from a Side's arena.
struct Buf {
  uint8_t* p = nullptr;
  size_t len = 0;
  Mr* mr = nullptr;
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p) + off; }
  Sge sge(size_t off, size_t n) const { return Sge{addr(off), static_cast<uint32_t>(n), mr->lkey()}; }
};

struct QpSizes {
  uint32_t sq_depth = 256;
  uint32_t rq_depth = 256;
  uint32_t cq_depth = 2048;
};

// One end: device, arena, PD, one CQ for both queues (one poll = one progress
// pass), and a QP. Members are destroyed QP first, arena last.
struct Side {
  explicit Side(const char* n) : name(n) {}
  ~Side() {
    qp.reset();
    cq.reset();
    fast_mrs.clear();
    mrs.clear();
    pd.reset();
    dev.reset();
    arena.reset();
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  const char* name;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::vector<std::unique_ptr<Mr>> mrs;
  std::vector<std::unique_ptr<FastMr>> fast_mrs;
  std::unique_ptr<Cq> cq;
  std::unique_ptr<Qp> qp;

  void open(const std::string& spec, size_t arena_bytes, const QpSizes& sz) {
    mem::ArenaOptions ao;
    ao.size = arena_bytes;
    ao.huge = mem::HugePages::kAuto;
    ao.name = std::string("tern-bench-") + name;
    auto a = mem::Arena::create(ao);
    if (!a) die("%s: Arena::create(%zu bytes): %s", name, arena_bytes, a.status().to_string().c_str());
    arena = std::move(a).value();
    auto d = open_device(spec);
    if (!d) die("%s: open_device(\"%s\"): %s", name, spec.c_str(), d.status().to_string().c_str());
    dev = std::move(d).value();
    auto p = dev->alloc_pd();
    if (!p) die("%s: alloc_pd: %s", name, p.status().to_string().c_str());
    pd = std::move(p).value();
    auto c = dev->create_cq(sz.cq_depth);
    if (!c) die("%s: create_cq(%u): %s", name, sz.cq_depth, c.status().to_string().c_str());
    cq = std::move(c).value();
    QpInit in;
    in.pd = pd.get();
    in.send_cq = cq.get();
    in.recv_cq = cq.get();
    in.sq_depth = sz.sq_depth;
    in.rq_depth = sz.rq_depth;
    in.max_send_sge = 1;
    in.max_recv_sge = 1;
    auto q = dev->create_qp(in);
    if (!q) die("%s: create_qp: %s", name, q.status().to_string().c_str());
    qp = std::move(q).value();
  }

  // Carves and registers `len` bytes (page-aligned), filled with `fill`.
  Buf alloc(size_t len, uint32_t access, uint8_t fill = 0) {
    auto* p = static_cast<uint8_t*>(arena->carve(len, 4096));
    if (p == nullptr) die("%s: arena full (%zu of %zu used, asked %zu)", name, arena->used(), arena->size(), len);
    std::memset(p, fill, len);  // the arena is populated already; this warms the lines too
    auto m = pd->reg_mr(p, len, access);
    if (!m) die("%s: reg_mr(%zu bytes): %s", name, len, m.status().to_string().c_str());
    mrs.push_back(std::move(m).value());
    return Buf{p, len, mrs.back().get()};
  }

  FastMr* alloc_fast_mr(uint32_t depth) {
    auto m = pd->alloc_fast_mr(depth);
    if (!m) die("%s: alloc_fast_mr(%u): %s", name, depth, m.status().to_string().c_str());
    fast_mrs.push_back(std::move(m).value());
    return fast_mrs.back().get();
  }

  // Whole chain or die.
  void post_send(const SendWr* wrs, int n) {
    int err = 0;
    int got = qp->post_send(wrs, n, &err);
    if (got != n)
      die("%s: post_send accepted %d of %d WRs, err %d (%s); %s", name, got, n, err, std::strerror(err),
          describe().c_str());
  }
  void post_recv(const RecvWr* wrs, int n) {
    int err = 0;
    int got = qp->post_recv(wrs, n, &err);
    if (got != n)
      die("%s: post_recv accepted %d of %d WRs, err %d (%s); %s", name, got, n, err, std::strerror(err),
          describe().c_str());
  }

  uint64_t stat(const char* counter) const {
    for (const auto& e : qp->stats())
      if (std::strcmp(e.name, counter) == 0) return e.counter->get();
    die("%s: the QP has no counter '%s'", name, counter);
  }

  std::string describe() const {
    std::string s = std::string(name) + ": QP " + (qp ? qp_state_name(qp->state()) : "none");
    if (qp) s += " [" + format_stats(qp->stats()) + "]";
    return s;
  }
};

// ---------------------------------------------------------------- a connected pair

// A server and a client Side on a fresh socket path, connected by connect()
// from the calling thread (which polls both). Afterwards each Side may be
// handed to its own thread; thread start and join order the hand-over.
struct Pair {
  std::string path;
  Side server{"server"};
  Side client{"client"};

  Pair(size_t server_arena, size_t client_arena, const QpSizes& sz = {}) {
    static std::atomic<int> counter{0};
    const char* tmp = std::getenv("TMPDIR");
    std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
    path = dir + "/tern-bench-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".sock";
    ::unlink(path.c_str());
    {
      std::lock_guard<std::mutex> g(detail::g_paths_mu);
      detail::g_socket_paths.push_back(path);
    }
    std::string spec = "shm:path=" + path;
    server.open(spec, server_arena, sz);
    client.open(spec, client_arena, sz);
  }
  ~Pair() { ::unlink(path.c_str()); }

  std::string describe() const { return server.describe() + "; " + client.describe(); }

  // Polls both sides' CM (and CQs, where nothing may complete yet) until `s`
  // has a CM event; it must be of type `want`. Bounded.
  CmEvent wait_cm(Side& s, CmEventType want) {
    Waiter w("a connection event");
    for (;;) {
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->side != &s) continue;
        CmEvent ev = std::move(it->ev);
        pending_.erase(it);
        if (ev.type != want)
          die("%s: expected CM event %s, got %s (%s)", s.name, cm_event_name(want), cm_event_name(ev.type),
              ev.status.to_string().c_str());
        return ev;
      }
      bool any = false;
      for (Side* side : {&server, &client}) {
        Wc wc[4];
        if (int n = side->cq->poll(wc, 4); n > 0)
          die("%s: unexpected completion while connecting: %s", side->name, wc_string(wc[0]).c_str());
        CmEvent ev;
        if (side->dev->poll_cm(&ev)) {
          pending_.push_back({side, std::move(ev)});
          any = true;
        }
      }
      if (w.expired())
        die("timed out after 5 s waiting for %s (%s) on %s; %s", w.what(), cm_event_name(want), s.name,
            describe().c_str());
      if (!any) std::this_thread::yield();
    }
  }

  void connect() {
    if (Status st = server.dev->listen(); !st) die("server listen(): %s", st.to_string().c_str());
    static const uint8_t hello[] = {'b', 'e', 'n', 'c', 'h'};
    if (Status st = client.dev->connect(client.qp.get(), hello); !st)
      die("client connect(): %s", st.to_string().c_str());
    CmEvent req = wait_cm(server, CmEventType::kConnectRequest);
    if (req.request == nullptr) die("kConnectRequest without a request");
    if (Status st = server.dev->accept(req.request, server.qp.get(), {}); !st)
      die("server accept(): %s", st.to_string().c_str());
    wait_cm(client, CmEventType::kEstablished);
    wait_cm(server, CmEventType::kEstablished);
    if (client.qp->state() != QpState::kRts || server.qp->state() != QpState::kRts)
      die("after kEstablished the QPs are not RTS; %s", describe().c_str());
  }

 private:
  struct Pending {
    Side* side;
    CmEvent ev;
  };
  std::vector<Pending> pending_;
};

// ---------------------------------------------------------------- raw cache-line round trip

// Two counters on separate cache lines. The initiator stores `ping`, the
// responder (another CPU) sees it and stores `pong`; one round trip is one
// line transfer each way -- the floor for any cross-core request/response.
struct alignas(64) PingPongLines {
  alignas(64) std::atomic<uint64_t> ping{0};
  alignas(64) std::atomic<uint64_t> pong{0};
};
inline constexpr uint64_t kLineStop = ~uint64_t{0};

// The responder loop, for a PeerThread body. Returns when it sees kLineStop.
inline void line_responder(PingPongLines* l) {
  uint64_t expect = 1;
  for (;;) {
    uint64_t v;
    while ((v = l->ping.load(std::memory_order_acquire)) < expect) {
    }
    if (v == kLineStop) return;
    l->pong.store(v, std::memory_order_release);
    expect = v + 1;
  }
}

// One round trip from the initiator; `seq` counts from 1.
inline void line_round_trip(PingPongLines* l, uint64_t seq) {
  l->ping.store(seq, std::memory_order_release);
  uint64_t spins = 0;
  while (l->pong.load(std::memory_order_acquire) != seq) {
    if ((++spins & 0xfffffff) == 0) die("cache-line ping-pong: no answer after %llu spins", (unsigned long long)spins);
  }
}

// Measures the raw round trip from the calling thread (which should be pinned
// to CPU 0) to a responder on `peer_cpu`: median ns of `samples` runs of
// `per_sample` round trips each.
inline double measure_line_rtt_ns(int peer_cpu, int samples, std::chrono::nanoseconds per_sample) {
  auto lines = std::make_unique<PingPongLines>();
  std::thread t([&] {
    pin_self(peer_cpu);
    line_responder(lines.get());
  });
  uint64_t seq = 0;
  for (int i = 0; i < 10000; ++i) line_round_trip(lines.get(), ++seq);  // warm-up
  std::vector<double> r;
  for (int s = 0; s < samples; ++s) {
    uint64_t t0 = now_ns(), n = 0;
    uint64_t end = t0 + static_cast<uint64_t>(per_sample.count());
    uint64_t t1;
    do {
      for (int k = 0; k < 256; ++k) line_round_trip(lines.get(), ++seq);
      n += 256;
    } while ((t1 = now_ns()) < end);
    r.push_back(static_cast<double>(t1 - t0) / static_cast<double>(n));
  }
  lines->ping.store(kLineStop, std::memory_order_release);
  t.join();
  std::sort(r.begin(), r.end());
  return r[r.size() / 2];
}


// ---------------------------------------------------------------- SEND ping-pong

// Dies with `what`, both sides' state and the peer thread's error, if any.
[[noreturn]] inline void wait_failed(const Waiter& w, const Pair& pair) {
  die("timed out (or the peer failed) waiting for %s; %s", w.what(), pair.describe().c_str());
}

inline void check_wc(const Wc& wc, const char* side, const Pair& pair) {
  if (wc.status != WcStatus::kSuccess)
    die("%s: completion with an error: %s; %s", side, wc_string(wc).c_str(), pair.describe().c_str());
}

inline constexpr uint64_t kSignalEvery = 16;  // selective signaling on every send queue
inline constexpr uint32_t kPpRecvBufs = 64;   // receives posted per side
inline constexpr uint32_t kPpRepostBatch = 8;
inline constexpr uint64_t kPpSendBufs = 32;   // client send buffers, reused once known complete

// Echo server: every received message is sent back from the buffer it landed
// in; the buffer is reposted (in batches) right after the echo is posted. In
// ping-pong that is safe: the client's next message proves the echo executed.
inline void echo_server(Side& s, const Buf& rbuf, size_t slot, const std::atomic<bool>& stop) {
  Wc wc[32];
  RecvWr reposts[kPpRecvBufs];
  Sge repost_sge[kPpRecvBufs];
  uint32_t npend = 0;
  uint64_t sent = 0, completed = 0;
  const uint32_t sq_depth = s.qp->init().sq_depth;
  while (!stop.load(std::memory_order_relaxed)) {
    int n = s.cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) return peer_fail("echo server: %s", wc_string(wc[i]).c_str());
      if (wc[i].opcode == WcOpcode::kSend) {
        completed = wc[i].wr_id;
        continue;
      }
      if (wc[i].opcode != WcOpcode::kRecv || wc[i].wr_id >= kPpRecvBufs)
        return peer_fail("echo server: unexpected completion %s", wc_string(wc[i]).c_str());
      if (sent - completed >= sq_depth)
        return peer_fail("echo server: send queue full (%" PRIu64 " sent, %" PRIu64 " completed)", sent, completed);
      uint64_t idx = wc[i].wr_id;
      Sge sg = rbuf.sge(idx * slot, wc[i].byte_len);
      SendWr w;
      w.wr_id = ++sent;
      w.sg_list = &sg;
      w.num_sge = 1;
      w.opcode = WrOpcode::kSend;
      w.flags = sent % kSignalEvery == 0 ? kWrSignaled : 0;
      int err = 0;
      if (s.qp->post_send(&w, 1, &err) != 1) return peer_fail("echo server: post_send failed, err %d", err);
      repost_sge[npend] = rbuf.sge(idx * slot, slot);
      reposts[npend] = RecvWr{idx, &repost_sge[npend], 1};
      if (++npend == kPpRepostBatch) {
        if (s.qp->post_recv(reposts, static_cast<int>(npend), &err) != static_cast<int>(npend))
          return peer_fail("echo server: post_recv failed, err %d", err);
        npend = 0;
      }
    }
  }
}

// The client's half of a ping-pong: posts reposts in batches, tracks send completion.
struct PingClient {
  Pair& pair;
  Side& c;
  Buf sbuf, rbuf;
  size_t slot, size;
  uint64_t seq = 0, completed = 0;
  RecvWr reposts[kPpRecvBufs];
  Sge repost_sge[kPpRecvBufs];
  uint32_t npend = 0;

  // One round trip; returns the buffer index the echo landed in.
  uint64_t round_trip(bool full_check) {
    // Send buffer seq % kPpSendBufs was last used by seq - kPpSendBufs: wait until that is known complete.
    if (seq + 1 - completed > kPpSendBufs) {
      Waiter w("a send completion (send buffer reuse)");
      while (seq + 1 - completed > kPpSendBufs) {
        Wc wc[16];
        int n = c.cq->poll(wc, 16);
        for (int i = 0; i < n; ++i) {
          check_wc(wc[i], "client", pair);
          if (wc[i].opcode != WcOpcode::kSend) die("client: unexpected %s", wc_string(wc[i]).c_str());
          completed = wc[i].wr_id;
        }
        if (n == 0 && w.expired()) wait_failed(w, pair);
      }
    }
    ++seq;
    size_t boff = (seq % kPpSendBufs) * slot;
    std::memcpy(sbuf.p + boff, &seq, sizeof seq);
    Sge sg = sbuf.sge(boff, size);
    SendWr sw;
    sw.wr_id = seq;
    sw.sg_list = &sg;
    sw.num_sge = 1;
    sw.opcode = WrOpcode::kSend;
    sw.flags = seq % kSignalEvery == 0 ? kWrSignaled : 0;
    c.post_send(&sw, 1);

    Waiter w("the echo");
    for (;;) {
      Wc wc[16];
      int n = c.cq->poll(wc, 16);
      uint64_t got = ~uint64_t{0};
      for (int i = 0; i < n; ++i) {
        check_wc(wc[i], "client", pair);
        if (wc[i].opcode == WcOpcode::kSend) {
          completed = wc[i].wr_id;
          continue;
        }
        if (wc[i].opcode != WcOpcode::kRecv || wc[i].wr_id >= kPpRecvBufs || got != ~uint64_t{0})
          die("client: unexpected %s", wc_string(wc[i]).c_str());
        got = wc[i].wr_id;
        const uint8_t* echo = rbuf.p + got * slot;
        uint64_t echoed_seq;
        std::memcpy(&echoed_seq, echo, sizeof echoed_seq);
        if (wc[i].byte_len != size || echoed_seq != seq)
          die("client: echo of message %" PRIu64 " has byte_len %u (want %zu) and sequence %" PRIu64, seq,
              wc[i].byte_len, size, echoed_seq);
        if (full_check && std::memcmp(echo, sbuf.p + boff, size) != 0)
          die("client: echo of message %" PRIu64 " (%zu bytes) differs from what was sent", seq, size);
        std::memset(const_cast<uint8_t*>(echo), 0, sizeof echoed_seq);  // a stale echo cannot pass next time
        repost_sge[npend] = rbuf.sge(got * slot, slot);
        reposts[npend] = RecvWr{got, &repost_sge[npend], 1};
        if (++npend == kPpRepostBatch) {
          c.post_recv(reposts, static_cast<int>(npend));
          npend = 0;
        }
      }
      if (got != ~uint64_t{0}) return got;
      if (n == 0 && w.expired()) wait_failed(w, pair);
    }
  }
};

// A connected pair ready for a ping-pong of `size`-byte messages: receives
// posted on both sides, the client's send buffers filled with patterns.
// start() runs the echo server on a pinned peer thread and 2000 checked round
// trips of warm-up; finish() checks one more round trip and stops the server.
struct PingPongRig {
  size_t size, slot;
  Pair pair;
  Buf srbuf, crbuf, csbuf;
  PeerThread server;
  std::unique_ptr<PingClient> pc;

  explicit PingPongRig(size_t sz) : size(sz), slot(std::max<size_t>(sz, 64)), pair(4u << 20, 4u << 20) {
    Side& c = pair.client;
    Side& s = pair.server;
    srbuf = s.alloc(kPpRecvBufs * slot, kAccessLocalWrite);
    crbuf = c.alloc(kPpRecvBufs * slot, kAccessLocalWrite);
    csbuf = c.alloc(kPpSendBufs * slot, kAccessLocalWrite);
    for (uint64_t b = 0; b < kPpSendBufs; ++b) fill_pattern(csbuf.p + b * slot, slot, static_cast<uint32_t>(b + 1));
    for (Side* side : {&s, &c}) {
      const Buf& rb = side == &s ? srbuf : crbuf;
      std::vector<Sge> sg(kPpRecvBufs);
      std::vector<RecvWr> rw(kPpRecvBufs);
      for (uint32_t i = 0; i < kPpRecvBufs; ++i) {
        sg[i] = rb.sge(i * slot, slot);
        rw[i] = RecvWr{i, &sg[i], 1};
      }
      side->post_recv(rw.data(), static_cast<int>(kPpRecvBufs));
    }
    pair.connect();
  }
  ~PingPongRig() { server.stop(); }

  void start(int server_cpu) {
    server.start(server_cpu, [this](const std::atomic<bool>& stop) { echo_server(pair.server, srbuf, slot, stop); });
    pc = std::make_unique<PingClient>(PingClient{pair, pair.client, csbuf, crbuf, slot, size});
    for (int i = 0; i < 2000; ++i) pc->round_trip(/*full_check=*/true);  // warm-up and data check
  }
  void finish() {
    pc->round_trip(true);  // the pair still moves correct data after the timed loop
    server.stop();
    if (peer_failed()) die("the echo server failed");
  }
};

// ================================================================ shared by every benchmark program

// The benchmark thread runs on kClientCpu, the peer (server engine, echo
// server, cache-line responder) on kServerCpu.
inline constexpr int kClientCpu = 0;
inline constexpr int kServerCpu = 1;

// The raw cache-line round trip measured when the process starts (main()),
// the scale every other figure is compared with.
inline double g_cl_rtt_ns = 0;

// Per benchmark call: pin the benchmark thread, arm the hang watchdog.
struct CallScope {
  CallScope() {
    arm_watchdog();
    pin_self(kClientCpu);
  }
  ~CallScope() { disarm_watchdog(); }
};

// The raw cache-line round trip between the two CPUs, timed in the same run
// as the benchmarks it scales.
inline void BM_CacheLineRoundTrip(benchmark::State& state) {
  CallScope scope;
  auto lines = std::make_unique<PingPongLines>();
  std::thread peer([&] {
    pin_self(kServerCpu);
    line_responder(lines.get());
  });
  uint64_t seq = 0;
  for (int i = 0; i < 10000; ++i) line_round_trip(lines.get(), ++seq);
  uint64_t t0 = now_ns();
  for (auto _ : state) line_round_trip(lines.get(), ++seq);
  uint64_t t1 = now_ns();
  lines->ping.store(kLineStop, std::memory_order_release);
  peer.join();
  state.counters["rtt_ns"] = static_cast<double>(t1 - t0) / static_cast<double>(state.iterations());
  state.counters["cl_at_start_ns"] = g_cl_rtt_ns;
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

}  // namespace tern::bench
