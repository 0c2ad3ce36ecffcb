// rpcrdma-torture: a requester that runs a catalogue of RFC 8166 / RFC 8797
// cases against any RPC-over-RDMA Version 1 responder (Tern's server over
// shm or verbs, the kernel's svcrdma) and reports, per case, the RFC section
// and level it exercises, what the RFC lets the responder do, and what it
// did. One fresh connection per case; a per-case deadline. With
// --responder it plays the responder instead, to Tern's client engine in
// this process (responder.h).
//
//   rpcrdma-torture --device shm --server /tmp/srv.sock
//   rpcrdma-torture --device verbs:dev=rxe0 --server 169.254.77.1:20049 --case 'read/*' --json out.json
//   rpcrdma-torture --responder --case 'swi/*'
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "../option_parser.h"
#include "base/json.h"
#include "base/log.h"
#include "catalogue.h"
#include "responder.h"

namespace tern::torture {
namespace {

struct Options {
  std::string device = "shm";
  std::string server;
  std::vector<std::string> globs;
  std::vector<std::string> excludes;
  int jobs = 1;
  std::string call = "100003:3:0";
  std::string echo;
  std::string json;
  bool list = false;
  bool quiet = false;
  bool responder = false;
  double timeout_s = 2.0;
  double quiet_s = 0.3;
};

bool parse_proc(std::string_view v, Procedure* p) {
  unsigned long long a = 0, b = 0, c = 0;
  std::string s(v);
  char tail = 0;
  if (std::sscanf(s.c_str(), "%lli:%lli:%lli%c", reinterpret_cast<long long*>(&a), reinterpret_cast<long long*>(&b),
                  reinterpret_cast<long long*>(&c), &tail) != 3)
    return false;
  if (a > 0xffffffffull || b > 0xffffffffull || c > 0xffffffffull) return false;
  *p = {static_cast<uint32_t>(a), static_cast<uint32_t>(b), static_cast<uint32_t>(c)};
  return true;
}

// The device spec for the responder at `server`: shm takes a socket path,
// verbs an address (host or host:port).
std::string make_spec(const Options& o) {
  if (o.server.empty()) return o.device;
  std::string dev = o.device;
  if (dev == "shm" || dev.starts_with("shm:")) {
    std::string base = dev == "shm" ? "shm:" : dev + ",";
    if (base == "shm:,") base = "shm:";
    return base + "path=" + o.server;
  }
  std::string base = dev.find(':') == std::string::npos ? dev + ":" : dev + ",";
  std::string host = o.server, port;
  if (auto c = o.server.rfind(':'); c != std::string::npos && o.server.find(':') == c) {
    host = o.server.substr(0, c);
    port = o.server.substr(c + 1);
  }
  return base + "addr=" + host + (port.empty() ? "" : ",port=" + port);
}

// One case on a fresh connection of `session`, timed.
ReportRow run_case(Session* session, const Case& c, const Config& cfg) {
  auto t0 = std::chrono::steady_clock::now();
  auto rq = std::make_unique<Requester>(session);
  std::vector<uint8_t> pd = c.connect.pdata ? *c.connect.pdata : Ctx::ours();
  Verdict v;
  const uint32_t max_pd = session->device()->caps().max_private_data;
  Status st;
  if (pd.size() > max_pd) {
    // The transport cannot carry it (RDMA-CM over RoCE: 52 bytes after its own header).
    v = Verdict::skip("the device carries at most " + std::to_string(max_pd) + " bytes of private data");
  } else {
    st = rq->connect(pd, cfg.timeout_ms);
  }
  if (v.result == Outcome::kSkip) {
  } else if (!st.is_ok() && !c.connect.may_refuse) {
    v = Verdict::fail("could not connect: " + st.to_string());
  } else {
    Ctx ctx(session, &rq, &cfg, pd, st.is_ok(), st.is_ok() ? "" : st.to_string());
    v = c.run(ctx);
  }
  rq.reset();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ReportRow{c.id, c.section, c.level, c.requirement, c.expect, std::move(v), ms};
}

// --jobs: what a worker process sends the parent per case, then the
// verdict's text.
struct WireRow {
  uint32_t index;
  uint32_t result;
  double ms;
  uint32_t seen_len;
};

bool write_all(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w, n -= static_cast<size_t>(w);
  }
  return true;
}

// A worker: its own device, protection domain and connections (fork()ed
// before the parent opens anything: a verbs context does not survive a
// fork), taking the next case from the shared counter until none is left.
[[noreturn]] void worker(const std::vector<const Case*>& cases, const std::vector<size_t>& pool,
                         std::atomic<uint32_t>* next, const Config& cfg, int fd) {
  auto session = Session::open(cfg.spec, cfg.idle_us);
  if (!session) {
    std::fprintf(stderr, "rpcrdma-torture: worker %d: %s: %s\n", static_cast<int>(getpid()), cfg.spec.c_str(),
                 session.status().to_string().c_str());
    ::_exit(3);
  }
  for (uint32_t k; (k = next->fetch_add(1)) < pool.size();) {
    ReportRow r = run_case(session.value().get(), *cases[pool[k]], cfg);
    WireRow w{static_cast<uint32_t>(pool[k]), static_cast<uint32_t>(r.verdict.result), r.ms,
              static_cast<uint32_t>(r.verdict.seen.size())};
    if (!write_all(fd, &w, sizeof w) || !write_all(fd, r.verdict.seen.data(), r.verdict.seen.size())) ::_exit(4);
  }
  session.value().reset();
  ::_exit(0);
}

// Runs `cases` and returns their rows in the order given, printing each as
// soon as every row before it is printed. With jobs > 1 the cases not
// marked `alone` run in `jobs` worker processes at once, each case still on
// its own connection and judged alone; the `alone` ones then run here, one
// at a time, with nothing beside them.
int run_cases(const Options& o, const Config& cfg, const std::vector<const Case*>& cases,
              std::vector<ReportRow>* rows) {
  std::vector<std::optional<ReportRow>> got(cases.size());
  size_t printed = 0;
  auto emit = [&] {
    for (; printed < got.size() && got[printed]; ++printed) print_row(*got[printed], o.quiet);
  };
  auto row_of = [&](size_t i, Verdict v, double ms) {
    const Case& c = *cases[i];
    got[i] = ReportRow{c.id, c.section, c.level, c.requirement, c.expect, std::move(v), ms};
  };
  std::vector<size_t> pool, alone;
  for (size_t i = 0; i < cases.size(); ++i) (o.jobs > 1 && cases[i]->alone ? alone : pool).push_back(i);
  if (o.jobs > 1 && !pool.empty()) {
    void* shared = ::mmap(nullptr, sizeof(std::atomic<uint32_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
      std::fprintf(stderr, "rpcrdma-torture: mmap: %s\n", std::strerror(errno));
      return 1;
    }
    auto* next = new (shared) std::atomic<uint32_t>(0);
    std::fflush(stdout);
    std::fflush(stderr);
    struct Worker {
      pid_t pid;
      int fd;
      std::string buf;
    };
    std::vector<Worker> workers;
    for (int j = 0; j < o.jobs; ++j) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) break;
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        for (const Worker& w : workers) ::close(w.fd);
        worker(cases, pool, next, cfg, fds[1]);
      }
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        break;
      }
      workers.push_back({pid, fds[0], {}});
    }
    size_t open_fds = workers.size();
    while (open_fds > 0) {
      std::vector<pollfd> pfds;
      for (const Worker& w : workers)
        if (w.fd >= 0) pfds.push_back({w.fd, POLLIN, 0});
      if (::poll(pfds.data(), pfds.size(), -1) < 0 && errno != EINTR) break;
      for (Worker& w : workers) {
        if (w.fd < 0) continue;
        bool readable = false;
        for (const pollfd& p : pfds) readable = readable || (p.fd == w.fd && p.revents != 0);
        if (!readable) continue;
        char b[65536];
        ssize_t n = ::read(w.fd, b, sizeof b);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          ::close(w.fd);
          w.fd = -1;
          --open_fds;
          continue;
        }
        w.buf.append(b, static_cast<size_t>(n));
        WireRow r;
        while (w.buf.size() >= sizeof r) {
          std::memcpy(&r, w.buf.data(), sizeof r);
          if (w.buf.size() < sizeof r + r.seen_len) break;
          if (r.index < got.size() && r.result <= static_cast<uint32_t>(Outcome::kSkip))
            row_of(r.index, Verdict{static_cast<Outcome>(r.result), w.buf.substr(sizeof r, r.seen_len)}, r.ms);
          w.buf.erase(0, sizeof r + r.seen_len);
        }
        emit();
      }
    }
    std::string died;
    for (const Worker& w : workers) {
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        died += " " + std::to_string(w.pid) + (WIFSIGNALED(status) ? " (signal " + std::to_string(WTERMSIG(status)) + ")"
                                                                    : " (exit " + std::to_string(WEXITSTATUS(status)) + ")");
    }
    ::munmap(shared, sizeof(std::atomic<uint32_t>));
    // A case whose worker died before reporting it is judged, not lost.
    for (size_t i : pool)
      if (!got[i]) row_of(i, Verdict::fail("not judged: its worker process ended first:" + (died.empty() ? " ?" : died)), 0);
    emit();
  }
  if (o.jobs > 1 ? !alone.empty() : !pool.empty()) {
    auto session = Session::open(cfg.spec, cfg.idle_us);
    if (!session) {
      std::fprintf(stderr, "rpcrdma-torture: %s: %s\n", cfg.spec.c_str(), session.status().to_string().c_str());
      return 1;
    }
    for (size_t i : o.jobs > 1 ? alone : pool) {
      got[i] = run_case(session.value().get(), *cases[i], cfg);
      emit();
    }
  }
  for (auto& r : got) rows->push_back(std::move(*r));
  return 0;
}

int run(const Options& o, const Config& cfg) {
  std::vector<Case> all = catalogue();
  std::vector<const Case*> cases;
  for (const Case& c : all)
    if (matches(c.id, o.globs) && (o.excludes.empty() || !matches(c.id, o.excludes))) cases.push_back(&c);
  if (cases.empty()) {
    std::fprintf(stderr, "rpcrdma-torture: no case matches\n");
    return 2;
  }
  std::vector<ReportRow> rows;
  if (o.list) {
    for (const Case* c : cases) rows.push_back({c->id, c->section, c->level, c->requirement, c->expect, {}, 0});
    print_list(rows);
    return 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  if (int rc = run_cases(o, cfg, cases, &rows); rc != 0) return rc;
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n%zu cases in %.1f s (%d job%s)\n", rows.size(), s, o.jobs, o.jobs == 1 ? "" : "s");
  return report(rows, cfg.spec, o.json);
}

}  // namespace
}  // namespace tern::torture

int main(int argc, char** argv) {
  using namespace tern::torture;
  Options o;
  tern::apps::OptionParser p("rpcrdma-torture", "--device SPEC --server ADDR [--case GLOB]... [--list] [--json FILE]\n"
                             "       rpcrdma-torture --responder [--device SPEC] [--case GLOB]... [--list] [--json FILE]");
  p.epilogue(
      "Runs RFC 8166 / RFC 8797 conformance cases as a requester against an RPC-over-RDMA Version 1\n"
      "responder, one fresh connection per case, and prints per case: pass/FAIL/skip, the case, the RFC\n"
      "section, the level (MUST/SHOULD/MAY) and what the responder did (on failure also what the RFC\n"
      "requires and what would have passed). docs/conformance.md.\n\n"
      "Exit status: 0 no MUST case failed, 1 a MUST case failed (or no connection), 2 usage.");
  p.text("device", "SPEC", "driver, or a whole device spec (default shm): shm, verbs:dev=rxe0, ...", &o.device);
  p.text("server", "ADDR", "the responder: a socket path (shm) or HOST[:PORT] (verbs)", &o.server);
  p.custom("case", "GLOB", "run only cases whose id matches (fnmatch; repeatable), e.g. 'vers/*'", "a glob",
           [&o](std::string_view v, std::string*) {
             o.globs.emplace_back(v);
             return true;
           });
  p.custom("exclude", "GLOB", "leave out cases whose id matches (fnmatch; repeatable)", "a glob",
           [&o](std::string_view v, std::string*) {
             o.excludes.emplace_back(v);
             return true;
           });
  p.integer("jobs", "N",
            "run N cases at once, each on its own connection from its own process (the cases that need the "
            "responder to themselves, two/*, then run one at a time); output in catalogue order (default 1)",
            1, 64, &o.jobs);
  p.flag("list", "list the selected cases and exit", &o.list);
  p.flag("responder",
         "play the responder instead: answer Tern's own client engine (in this process, over --device) with every "
         "legal and illegal reply shape, and check what the client does (the responder catalogue)",
         &o.responder);
  p.text("json", "FILE", "also write every result as JSON to FILE (- for stdout)", &o.json);
  p.text("call", "PROG:VERS:PROC", "a call every responder answers (default 100003:3:0, NFSv3 NULL)", &o.call);
  p.text("echo", "PROG:VERS:PROC",
         "a procedure that returns its arguments, for large replies (reply chunks); e.g. tern-perf --rpc's "
         "0x2054504d:1:1. Without it those cases skip",
         &o.echo);
  p.real("timeout", "S", "longest wait for one answer (default 2)", 0.01, 600, &o.timeout_s);
  p.real("quiet-time", "S", "how long silence is watched where silence is the right answer (default 0.3)", 0.01, 60,
         &o.quiet_s);
  p.flag("quiet", "print only failures and the summary", &o.quiet);
  if (int rc = p.run(argc, argv); rc >= 0) return rc;
  Config cfg;
  if (!parse_proc(o.call, &cfg.call)) return p.usage_error("--call wants PROG:VERS:PROC, not '" + o.call + "'");
  if (!o.echo.empty()) {
    Procedure e;
    if (!parse_proc(o.echo, &e)) return p.usage_error("--echo wants PROG:VERS:PROC, not '" + o.echo + "'");
    cfg.echo = e;
  }
  if (o.responder) {
    RespondConfig rc;
    rc.device = o.device;
    rc.timeout_ms = static_cast<int>(o.timeout_s * 1000);
    rc.quiet_ms = static_cast<int>(o.quiet_s * 1000);
    return run_responder(rc, o.globs, o.list, o.quiet, o.json);
  }
  cfg.spec = make_spec(o);
  cfg.timeout_ms = static_cast<int>(o.timeout_s * 1000);
  cfg.quiet_ms = static_cast<int>(o.quiet_s * 1000);
  // Several requesters that spin would starve the responder of the CPU it
  // shares with them in a VM: waits sleep 100 us between empty polls
  // instead (under a millisecond-scale round trip, noise).
  if (o.jobs > 1) cfg.idle_us = 100;
  if (!o.list && o.server.empty() && o.device.find("path=") == std::string::npos &&
      o.device.find("addr=") == std::string::npos)
    return p.usage_error("say where the responder is: --server ADDR");
  return run(o, cfg);
}
