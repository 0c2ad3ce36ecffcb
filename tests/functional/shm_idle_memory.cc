// What an accepted, idle pmd/shm connection costs its server: heap and the
// connection area's pages. A gateway holding ~1,024 shm connections has a
// budget of 64 KiB per idle one (docs/shm-driver.md, "Memory per
// connection"), so this is measured, not guessed.
//
//   tern-shm-idle-memory [--conns N] [--sq DEPTH] [--rq DEPTH | --srq DEPTH]
//                        [--burst B] [--ring SLOTS] [--idle-ms MS] [--budget BYTES] [--fresh]
//
// The server is this process; its clients are one child process (this
// program run again with --client), so that every connection-area mapping
// in our /proc/self/smaps is the server's. Each connection is first made
// busy, as an RPC server's is: the client sends more SENDs than its ring has
// slots (every inbound slot page touched), the server answers with bursts of
// `burst` RDMA WRITEs (its send queue that deep at once, every outbound slot
// page touched), receives are reposted as they are consumed. Then everything
// idles for --idle-ms while both sides keep polling, as an idle engine does,
// and the server's memory is read (--fresh: no busy phase, connections that
// never carried anything):
//   heap      glibc's bytes in use (mallinfo2: arenas + mmapped chunks),
//             now minus before the first connection, per connection: what
//             the connections hold;
//   anon RSS  anonymous resident memory, the same difference, for
//             information: it also counts freed memory the allocator keeps
//             for the process's next allocations (more of it when
//             MALLOC_PERTURB_ is set, as meson test does), which no
//             connection holds;
//   area      resident pages of the server's mappings of the connection
//             areas (Rss of memfd:tern-shm-conn in /proc/self/smaps).
// The total is heap + area. With --budget, exits 1 when it is over; the
// idle phase then ends as soon as the total is within the budget, --idle-ms
// being the most it idles (a test waits for the trim, not a fixed time).
// Under a sanitizer the heap is the sanitizer's and is not measured.
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "option_parser.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TERN_MEM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TERN_MEM_SANITIZED 1
#endif
#endif

namespace {

using namespace tern;
using namespace tern::rdma;
using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* fmt, const std::string& what) {
  std::fprintf(stderr, "tern-shm-idle-memory: ");
  std::fprintf(stderr, fmt, what.c_str());
  std::fputc('\n', stderr);
  std::exit(2);
}

template <typename T>
T take(Result<T> r, const char* what) {
  if (!r) die("%s", std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

uint64_t heap_in_use() {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// kB fields of /proc/self/smaps_rollup, or of the smaps entries whose
// mapping line contains `name`, summed.
uint64_t smaps_kb(const char* file, const char* field, const char* name) {
  std::ifstream f(file);
  std::string line;
  uint64_t kb = 0;
  bool in = name == nullptr;
  const size_t flen = std::strlen(field);
  while (std::getline(f, line)) {
    // Mapping lines start with an address range; field lines with a name.
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < 16 &&
        line.find(':') > line.find(' ')) {
      if (name != nullptr) in = line.find(name) != std::string::npos;
      continue;
    }
    if (in && line.compare(0, flen, field) == 0) kb += std::strtoull(line.c_str() + flen, nullptr, 10);
  }
  return kb;
}
uint64_t anon_rss() { return smaps_kb("/proc/self/smaps_rollup", "Anonymous:", nullptr) * 1024; }
uint64_t area_rss() { return smaps_kb("/proc/self/smaps", "Rss:", "tern-shm-conn") * 1024; }

struct Opts {
  uint32_t conns = 64;
  uint32_t sq = 832;      // the engine's: 32 credits x 26 WRs per call
  uint32_t rq = 34;       // the engine's: credits + 2
  uint32_t srq = 0;       // > 0: the server's QPs share an SRQ this deep instead
  uint32_t burst = 256;   // WRITEs the server has outstanding at once
  uint32_t ring = 512;    // the client's ring= (it sizes the area)
  uint32_t idle_ms = 2500;
  uint64_t budget = 0;
  uint32_t client_msgs = 0;  // SENDs per connection; 0: ring + ring/4
  bool fresh = false;
};

struct Target {
  uint64_t addr;
  uint32_t rkey;
};

// A device, its memory and CQs: one side.
struct Side {
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Mr> mr;
  std::unique_ptr<Cq> scq, rcq;
  std::unique_ptr<Srq> srq;
  std::vector<std::unique_ptr<Qp>> qps;
  ~Side() {
    qps.clear();
    srq.reset();
    scq.reset();
    rcq.reset();
    mr.reset();
    pd.reset();
    dev.reset();
  }
  void open(const std::string& spec, size_t bytes, uint32_t access, const char* name) {
    arena = take(mem::Arena::create({.size = bytes, .huge = mem::HugePages::kNever, .name = name}), "arena");
    dev = take(open_device(spec), "open_device");
    pd = take(dev->alloc_pd(), "alloc_pd");
    mr = take(pd->reg_mr(arena->base(), arena->size(), access), "reg_mr");
    scq = take(dev->create_cq(65536), "create_cq");
    rcq = take(dev->create_cq(65536), "create_cq");
  }
  uint8_t* base() const { return static_cast<uint8_t*>(arena->base()); }
};

// ---------------------------------------------------------------- the clients

int run_client(const std::string& path, uint32_t conns, uint32_t ring, uint32_t msgs) {
  Side c;
  c.open("shm:path=" + path + ",ring=" + std::to_string(ring), 1u << 20,
         kAccessLocalWrite | kAccessRemoteWrite, "tern-idle-client");
  for (uint32_t i = 0; i < conns; ++i) {
    QpInit in;
    in.pd = c.pd.get(), in.send_cq = c.scq.get(), in.recv_cq = c.rcq.get();
    in.sq_depth = 64, in.rq_depth = 16, in.max_send_sge = 1, in.max_recv_sge = 1;
    c.qps.push_back(take(c.dev->create_qp(in), "client create_qp"));
    Target t{reinterpret_cast<uint64_t>(c.base()) + 4096 * (i % 64), c.mr->rkey()};
    std::vector<uint8_t> pdata(sizeof t);
    std::memcpy(pdata.data(), &t, sizeof t);
    if (Status s = c.dev->connect(c.qps.back().get(), pdata); !s.is_ok()) die("%s", s.to_string());
  }
  uint32_t up = 0, down = 0;
  std::map<Qp*, uint32_t> sent, done;
  Sge sg{reinterpret_cast<uint64_t>(c.base() + (512u << 10)), 64, c.mr->lkey()};
  auto deadline = Clock::now() + std::chrono::seconds(120);
  Wc wc[64];
  while (down < conns && Clock::now() < deadline) {
    CmEvent ev;
    while (c.dev->poll_cm(&ev)) {
      if (ev.type == CmEventType::kEstablished) ++up;
      else if (ev.type == CmEventType::kDisconnected) ++down;
      else die("client: %s", cm_event_name(ev.type));
    }
    int n = c.scq->poll(wc, 64);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) continue;  // flushed at the end
      for (auto& q : c.qps)
        if (q->qp_num() == wc[i].qp_num) done[q.get()] += 32;
    }
    (void)c.rcq->poll(wc, 64);
    if (up < conns) continue;
    // Bursts of 32 SENDs, the last signaled, one burst outstanding per QP.
    for (auto& q : c.qps) {
      Qp* qp = q.get();
      if (qp->state() != QpState::kRts || sent[qp] >= msgs || sent[qp] != done[qp]) continue;
      SendWr w[32];
      for (int k = 0; k < 32; ++k) {
        w[k] = SendWr{};
        w[k].wr_id = sent[qp] + k;
        w[k].sg_list = &sg;
        w[k].num_sge = 1;
        w[k].opcode = WrOpcode::kSend;
        w[k].flags = k == 31 ? kWrSignaled : 0;
      }
      int err = 0;
      if (qp->post_send(w, 32, &err) != 32) die("client post_send: %s", std::strerror(err));
      sent[qp] += 32;
    }
  }
  return down == conns ? 0 : 3;
}

// ---------------------------------------------------------------- the server

int run_server(const Opts& o, const char* self) {
  set_log_level(LogLevel::kWarn);
  const std::string path = "/tmp/tern-idle-mem-" + std::to_string(getpid()) + ".sock";
  Side s;
  s.open("shm:path=" + path, 16u << 20, kAccessLocalWrite, "tern-idle-server");
  if (Status st = s.dev->listen(); !st.is_ok()) die("%s", st.to_string());
  constexpr uint32_t kRecvLen = 128;
  const uint32_t nrecv = o.srq > 0 ? o.srq : o.conns * o.rq;
  if (static_cast<uint64_t>(nrecv) * kRecvLen > (8u << 20)) die("%s", std::string("too many receives"));
  auto recv_sge = [&](uint32_t i) { return Sge{reinterpret_cast<uint64_t>(s.base() + i * kRecvLen), kRecvLen,
                                               s.mr->lkey()}; };
  std::vector<Sge> sges(nrecv);
  for (uint32_t i = 0; i < nrecv; ++i) sges[i] = recv_sge(i);
  if (o.srq > 0) {
    s.srq = take(s.dev->create_srq(s.pd.get(), o.srq, 1), "create_srq");
    for (uint32_t i = 0; i < o.srq; ++i) {
      RecvWr r{i, &sges[i], 1};
      int err = 0;
      if (s.srq->post_recv(&r, 1, &err) != 1) die("srq post: %s", std::strerror(err));
    }
  }
  s.qps.reserve(o.conns);
  std::vector<Target> targets;
  targets.reserve(o.conns);

  // Everything of this program's own is allocated before the baseline, so
  // that the differences are the driver's.
  std::vector<size_t> by_num(65536, 0);  // qp_num -> index, for reposting
  std::vector<uint32_t> written(o.conns, 0), acked(o.conns, 0);
  std::vector<SendWr> w(o.burst);

  const uint64_t heap0 = heap_in_use(), anon0 = anon_rss(), area0 = area_rss();

  pid_t child = fork();
  if (child == 0) {
    std::string n = std::to_string(o.conns), r = std::to_string(o.ring), m = std::to_string(o.client_msgs);
    execl("/proc/self/exe", self, "--client", path.c_str(), n.c_str(), r.c_str(), m.c_str(), nullptr);
    _exit(127);
  }
  const uint32_t writes = o.fresh ? 0 : (o.ring / o.burst + 1) * o.burst;  // past the ring: every slot used
  uint64_t received = 0;
  const uint64_t want = uint64_t{o.conns} * o.client_msgs;
  Sge wsg{reinterpret_cast<uint64_t>(s.base() + (12u << 20)), 64, s.mr->lkey()};
  Wc wc[64];
  auto deadline = Clock::now() + std::chrono::seconds(120);
  auto busy = [&] {
    CmEvent ev;
    while (s.dev->poll_cm(&ev)) {
      if (ev.type == CmEventType::kConnectRequest) {
        QpInit in;
        in.pd = s.pd.get(), in.send_cq = s.scq.get(), in.recv_cq = s.rcq.get();
        in.sq_depth = o.sq, in.rq_depth = o.rq, in.max_send_sge = 2, in.max_recv_sge = 1;
        in.srq = s.srq.get();
        s.qps.push_back(take(s.dev->create_qp(in), "server create_qp"));
        Qp* qp = s.qps.back().get();
        size_t idx = s.qps.size() - 1;
        if (qp->qp_num() >= by_num.size()) die("%s", std::string("QP number out of range"));
        by_num[qp->qp_num()] = idx;
        Target t{};
        if (ev.request->private_data().size() == sizeof t) std::memcpy(&t, ev.request->private_data().data(), sizeof t);
        targets.push_back(t);
        if (o.srq == 0) {
          for (uint32_t k = 0; k < o.rq; ++k) {
            uint32_t i = static_cast<uint32_t>(idx) * o.rq + k;
            RecvWr r{i, &sges[i], 1};
            int err = 0;
            if (qp->post_recv(&r, 1, &err) != 1) die("post_recv: %s", std::strerror(err));
          }
        }
        if (Status st = s.dev->accept(ev.request, qp, {}); !st.is_ok()) die("%s", st.to_string());
      } else if (ev.type != CmEventType::kEstablished && ev.type != CmEventType::kDisconnected) {
        die("server: %s", cm_event_name(ev.type));
      }
    }
    int n = s.rcq->poll(wc, 64);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != WcStatus::kSuccess) continue;
      ++received;
      uint32_t b = static_cast<uint32_t>(wc[i].wr_id);
      RecvWr r{b, &sges[b], 1};
      int err = 0;
      int ok = o.srq > 0 ? s.srq->post_recv(&r, 1, &err) : s.qps[by_num[wc[i].qp_num]]->post_recv(&r, 1, &err);
      if (ok != 1) die("repost: %s", std::strerror(err));
    }
    n = s.scq->poll(wc, 64);
    for (int i = 0; i < n; ++i)
      if (wc[i].status == WcStatus::kSuccess) acked[by_num[wc[i].qp_num]] += o.burst;
  };
  // Busy: the clients' SENDs come in while we write bursts back.
  for (;;) {
    busy();
    bool all = s.qps.size() == o.conns && received >= want;
    for (size_t q = 0; q < s.qps.size(); ++q) {
      if (written[q] >= writes) continue;
      all = false;
      if (written[q] != acked[q] || s.qps[q]->state() != QpState::kRts) continue;
      for (uint32_t k = 0; k < o.burst; ++k) {
        w[k] = SendWr{};
        w[k].wr_id = k;
        w[k].sg_list = &wsg;
        w[k].num_sge = 1;
        w[k].opcode = WrOpcode::kRdmaWrite;
        w[k].remote_addr = targets[q].addr;
        w[k].rkey = targets[q].rkey;
        w[k].flags = k + 1 == o.burst ? kWrSignaled : 0;
      }
      int err = 0;
      if (s.qps[q]->post_send(w.data(), static_cast<int>(o.burst), &err) != static_cast<int>(o.burst))
        die("server post_send: %s", std::strerror(err));
      written[q] += o.burst;
    }
    if (all) break;
    if (Clock::now() > deadline) die("%s", std::string("the busy phase did not finish in 120 s"));
  }
  // Idle, still polling, as an idle engine does. With a budget, idling ends
  // as soon as the cost is within it (looked at every 100 ms; the memory an
  // idle connection holds only shrinks as it idles), --idle-ms being then
  // the most it waits: the test pays for the trim, not for a fixed idle.
  const double n = o.conns;
  uint64_t heap = 0, anon = 0, area = 0;
  double total = 0;
  auto measure = [&] {
    heap = heap_in_use() - heap0, anon = anon_rss() - anon0, area = area_rss() - area0;
    // (anon may have shrunk: unsigned wrap, printed as signed.)
#ifdef TERN_MEM_SANITIZED
    total = static_cast<double>(area) / n;  // the heap is the sanitizer's
#else
    total = static_cast<double>(heap) / n + static_cast<double>(area) / n;
#endif
  };
  const auto idle_start = Clock::now();
  auto idle_end = idle_start + std::chrono::milliseconds(o.idle_ms);
  auto next_look = idle_start;
  while (Clock::now() < idle_end) {
    busy();
    usleep(200);
    if (o.budget > 0 && Clock::now() >= next_look) {
      next_look = Clock::now() + std::chrono::milliseconds(100);
      measure();
      if (total <= static_cast<double>(o.budget)) break;
    }
  }
  measure();
  const auto idled_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - idle_start).count();
  std::printf("connections %u (server QPs: sq_depth %u, %s), client ring %u slots (area %zu bytes)\n", o.conns,
              o.sq, o.srq > 0 ? ("one SRQ of " + std::to_string(o.srq)).c_str()
                              : ("rq_depth " + std::to_string(o.rq)).c_str(),
              o.ring, static_cast<size_t>(640 + 2 * static_cast<size_t>(o.ring) * 256));
  if (o.fresh)
    std::printf("fresh: connected, nothing sent either way; idle %lld ms\n", static_cast<long long>(idled_ms));
  else
    std::printf("busy: %u SENDs in and %u RDMA WRITEs out per connection, bursts of %u; then idle %lld ms\n",
                o.client_msgs, writes, o.burst, static_cast<long long>(idled_ms));
#ifdef TERN_MEM_SANITIZED
  std::printf("heap per idle connection: not measured (sanitizer build)\n");
  (void)heap;
  (void)anon;
  const double heap_per = 0;
#else
  const double heap_per = static_cast<double>(heap) / n;
  std::printf("heap per idle connection:     %9.0f bytes in use (anonymous RSS grew %.0f per connection)\n", heap_per,
              static_cast<double>(static_cast<int64_t>(anon)) / n);
#endif
  std::printf("area per idle connection:     %9.0f bytes resident (%.1f pages)\n", static_cast<double>(area) / n,
              static_cast<double>(area) / n / 4096);
  std::printf("total per idle connection:    %9.0f bytes (%.1f KiB), heap + area\n", total, total / 1024);

  for (auto& q : s.qps) (void)s.dev->disconnect(q.get());
  int st = 0;
  auto end = Clock::now() + std::chrono::seconds(30);
  while (waitpid(child, &st, WNOHANG) != child) {
    busy();
    if (Clock::now() > end) {
      kill(child, SIGKILL);
      waitpid(child, &st, 0);
      die("%s", std::string("the client did not exit"));
    }
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("%s", "the client failed (exit " + std::to_string(st) + ")");
  if (o.budget > 0 && total > static_cast<double>(o.budget)) {
    std::printf("OVER BUDGET: %.0f bytes per idle connection, budget %" PRIu64 "\n", total, o.budget);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "--client") == 0)
    return run_client(argv[2], static_cast<uint32_t>(std::atoi(argv[3])), static_cast<uint32_t>(std::atoi(argv[4])),
                      static_cast<uint32_t>(std::atoi(argv[5])));
  Opts o;
  tern::apps::OptionParser cli(argv[0], "[options]   (the top of tests/functional/shm_idle_memory.cc says more)");
  cli.integer("conns", "N", "connections (default 64)", 1, 1024, &o.conns);
  cli.integer("sq", "DEPTH", "send queue depth (default 832, the engine's)", 1, 1 << 20, &o.sq);
  cli.integer("rq", "DEPTH", "receive queue depth (default 34, the engine's)", 0, 1 << 20, &o.rq);
  cli.integer("srq", "DEPTH", "the server's QPs share an SRQ this deep instead (default 0: none)", 0, 1 << 20, &o.srq);
  cli.integer("burst", "B", "WRITEs the server has outstanding at once (default 256)", 1, 1 << 20, &o.burst);
  cli.integer("ring", "SLOTS", "the client's ring= (default 512)", 16, 1 << 20, &o.ring);
  cli.integer("idle-ms", "MS", "how long the connections idle (default 2500; with --budget, the most)", 0, 86400000, &o.idle_ms);
  cli.count("budget", "BYTES", "exit 1 when an idle connection costs more (default 0: no check)", 0, 1ull << 40,
            &o.budget);
  cli.flag("fresh", "no busy phase: connections that never carried a message", &o.fresh);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  if (o.conns == 0 || o.sq == 0 || o.burst == 0 || o.burst > o.sq || o.ring < 16 || o.conns > 1024)
    die("%s", std::string("bad arguments"));
  o.client_msgs = o.fresh ? 0 : (o.ring + o.ring / 4 + 31) / 32 * 32;
  return run_server(o, argv[0]);
}
