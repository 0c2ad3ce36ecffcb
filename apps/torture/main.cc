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
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
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

int run(const Options& o, const Config& cfg) {
  std::vector<Case> all = catalogue();
  std::vector<const Case*> cases;
  for (const Case& c : all)
    if (matches(c.id, o.globs)) cases.push_back(&c);
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
  auto session = Session::open(cfg.spec);
  if (!session) {
    std::fprintf(stderr, "rpcrdma-torture: %s: %s\n", cfg.spec.c_str(), session.status().to_string().c_str());
    return 1;
  }
  for (const Case* c : cases) {
    auto t0 = std::chrono::steady_clock::now();
    auto rq = std::make_unique<Requester>(session.value().get());
    std::vector<uint8_t> pd = c->connect.pdata ? *c->connect.pdata : Ctx::ours();
    Verdict v;
    const uint32_t max_pd = session.value()->device()->caps().max_private_data;
    Status st;
    if (pd.size() > max_pd) {
      // The transport cannot carry it (RDMA-CM over RoCE: 52 bytes after its own header).
      v = Verdict::skip("the device carries at most " + std::to_string(max_pd) + " bytes of private data");
    } else {
      st = rq->connect(pd, cfg.timeout_ms);
    }
    if (v.result == Outcome::kSkip) {
    } else if (!st.is_ok() && !c->connect.may_refuse) {
      v = Verdict::fail("could not connect: " + st.to_string());
    } else {
      Ctx ctx(session.value().get(), &rq, &cfg, pd, st.is_ok(), st.is_ok() ? "" : st.to_string());
      v = c->run(ctx);
    }
    rq.reset();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ReportRow row{c->id, c->section, c->level, c->requirement, c->expect, std::move(v), ms};
    print_row(row, o.quiet);
    rows.push_back(std::move(row));
  }
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
  if (!o.list && o.server.empty() && o.device.find("path=") == std::string::npos &&
      o.device.find("addr=") == std::string::npos)
    return p.usage_error("say where the responder is: --server ADDR");
  return run(o, cfg);
}
