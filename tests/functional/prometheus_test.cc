// The Prometheus exposition (lib/telemetry/prometheus.h): a client and a
// server engine make calls of several shapes, then /metrics is scraped over
// HTTP (MetricsServer, polled from this thread) and the textfile is written,
// and both are parsed by the Prometheus client's own parser
// (prometheus_check.py) and checked value by value against stats_json() of
// the same engines at rest.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "rpc_fixture.h"
#include "telemetry/metrics_server.h"
#include "telemetry/prometheus.h"
#include "telemetry/registry.h"

namespace tern::rpc {
namespace {

std::string tmp_path(const char* what) {
  return std::string("/tmp/tern-prom-") + what + "-" + std::to_string(getpid());
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Debian's interpreter: python3-prometheus-client is installed for it, and a
// python3 found first on PATH (pyenv, a venv) may not see it.
std::string python() { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

bool have_parser() { return std::system((python() + " -c 'import prometheus_client.parser' 2>/dev/null").c_str()) == 0; }

int check(const std::string& exposition, const std::string& stats, const char* extra = "") {
  std::string e = tmp_path("exposition"), s = tmp_path("stats");
  write_file(e, exposition);
  write_file(s, stats);
  std::string cmd =
      python() + " " + TERN_SOURCE_ROOT "/tests/functional/prometheus_check.py " + e + " " + s + " " + extra;
  int rc = std::system(cmd.c_str());
  unlink(e.c_str());
  unlink(s.c_str());
  return rc;
}

// GET `target` from the server, polling it from this thread (it never
// blocks, so this thread must drive both ends). Returns the whole response.
std::string http_get(telemetry::MetricsServer& srv, const std::string& target) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(srv.port());
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  std::string req = "GET " + target + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  EXPECT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  fcntl(fd, F_SETFL, O_NONBLOCK);
  std::string resp;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);  // a guard, not a timing
  for (;;) {
    srv.poll();
    char buf[65536];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) resp.append(buf, static_cast<size_t>(n));
    if (n == 0 || std::chrono::steady_clock::now() > end) break;
  }
  close(fd);
  return resp;
}

struct PromFixture : Fixture {
  std::string srv_id, cli_id;
  PromFixture() {
    // The fixture made the server first: the smaller telemetry id.
    telemetry::Reply r;
    telemetry::run_command("/tern/engines", "", &r);
    EXPECT_EQ(r.list().size(), 2u);
    if (r.list().size() == 2) srv_id = r.list()[0].s, cli_id = r.list()[1].s;
  }
  void traffic() {
    for (int i = 0; i < 25; ++i) {
      std::vector<uint8_t> args(16 + i, static_cast<uint8_t>(i));
      Call c;
      c.proc = kEcho;
      c.args = args;
      ASSERT_EQ(call(c).reply.status, CallStatus::kOk);
    }
    auto* bulk = static_cast<uint8_t*>(cli->alloc(65536));
    for (int k = 0; k < 3; ++k) ASSERT_NO_FATAL_FAILURE(fill_and_check(bulk, 65536, static_cast<uint8_t>(k)));
    // At rest: everything the calls set off (send completions, credits)
    // is seen before the figures are read.
    poll_until({srv.get(), cli.get()}, [] { return false; }, 200);
  }
  std::string stats() const {
    return "{\"" + srv_id + "\": " + srv->stats_json() + ", \"" + cli_id + "\": " + cli->stats_json() + "}";
  }
};

TEST(Prometheus, ScrapeMatchesStatsJson) {
  if (!have_parser()) GTEST_SKIP() << "python3-prometheus-client is not installed (scripts/setup.sh installs it)";
  PromFixture f;
  ASSERT_NO_FATAL_FAILURE(f.traffic());
  auto srv = telemetry::MetricsServer::open(0);
  ASSERT_TRUE(srv.is_ok()) << srv.status().to_string();
  std::string resp = http_get(*srv.value(), "/metrics");
  size_t body = resp.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos) << resp;
  EXPECT_EQ(resp.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << resp.substr(0, 200);
  EXPECT_NE(resp.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  std::string text = resp.substr(body + 4);
  EXPECT_EQ(resp.find("Content-Length: " + std::to_string(text.size()) + "\r\n"), resp.find("Content-Length: "));
  EXPECT_NE(text.find("tern_conn_rtt_seconds_bucket{"), std::string::npos);
  EXPECT_EQ(check(text, f.stats()), 0) << text.substr(0, 2000);

  // The checker has teeth: one value off and it refuses.
  std::string off = text;
  size_t at = off.find("tern_proc_ops_total{");
  ASSERT_NE(at, std::string::npos);
  size_t eol = off.find('\n', at);
  off = std::string(off, 0, eol).append("7").append(off, eol);  // 25 -> 257, say
  EXPECT_NE(check(off, f.stats()), 0) << "the checker accepted a wrong value";

  EXPECT_NE(http_get(*srv.value(), "/other").find("404"), std::string::npos);
}

TEST(Prometheus, TextfileMatchesStatsJson) {
  if (!have_parser()) GTEST_SKIP() << "python3-prometheus-client is not installed";
  PromFixture f;
  ASSERT_NO_FATAL_FAILURE(f.traffic());
  std::string path = tmp_path("textfile") + ".prom";
  ASSERT_TRUE(telemetry::write_prometheus_file(path).is_ok());
  EXPECT_EQ(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), -1) << "the temporary was renamed";
  EXPECT_EQ(check(read_file(path), f.stats()), 0);
  unlink(path.c_str());
}

// Past the bounds, sources are summed into the "other" series, so a peer
// with many connections cannot grow the exposition.
TEST(Prometheus, CardinalityIsBoundedByFoldingIntoOther) {
  if (!have_parser()) GTEST_SKIP() << "python3-prometheus-client is not installed";
  PromFixture f;
  ASSERT_NO_FATAL_FAILURE(f.traffic());
  telemetry::PrometheusLimits lim;
  lim.max_conns = 0;
  lim.max_procs = 1;
  std::string text = telemetry::render_prometheus(lim);
  EXPECT_EQ(text.find("conn=\"1\""), std::string::npos) << "no connection has a series of its own";
  EXPECT_EQ(check(text, f.stats(), "--folded"), 0) << text.substr(0, 2000);
}

}  // namespace
}  // namespace tern::rpc
