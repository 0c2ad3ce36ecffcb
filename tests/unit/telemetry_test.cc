// The telemetry registry, its JSON, and the Unix socket exporter read by
// scripts/tern-stats and by DPDK's dpdk-telemetry.py (no EAL here).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/histogram.h"
#include "base/stats.h"
#include "telemetry/registry.h"
#include "telemetry/socket_server.h"

namespace tern::telemetry {
namespace {

// What an engine would publish: counters, a gauge-like string, a histogram.
struct FakeEngine {
  Counter calls, bytes_out, errors;
  Histogram rtt;
  std::string name = "client \"a\"";
  static void provide(void* ctx, Reply* out) {
    auto* e = static_cast<FakeEngine*>(ctx);
    out->add_string("name", e->name);
    out->add_stats({{"calls", &e->calls}, {"bytes_out", &e->bytes_out}, {"errors", &e->errors}});
    out->add_histogram("rtt", e->rtt);
  }
};

struct FakeConn {
  uint64_t id;
  static void provide(void* ctx, Reply* out) { out->add_u64("conn", static_cast<FakeConn*>(ctx)->id); }
};

bool json_valid(const std::string& json) {
  char path[] = "/tmp/tern-telemetry-json-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return false;
  bool wrote = write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size());
  close(fd);
  std::string cmd = std::string("python3 -m json.tool ") + path + " >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  unlink(path);
  return wrote && rc == 0;
}

TEST(TelemetryReply, JsonShapes) {
  Reply none;
  EXPECT_EQ(none.json(), "null");
  Reply list;
  list.start_list();
  EXPECT_EQ(list.json(), "[]");
  list.append("0.1");
  list.append("a\"b\\c\n");
  EXPECT_EQ(list.json(), R"(["0.1", "a\"b\\c\n"])");
  EXPECT_TRUE(json_valid(list.json()));
  Reply d;
  d.add_u64("calls", 18446744073709551615ull);
  d.add_i64("skew", -5);
  d.add_string("peer", std::string("ctl\x01", 4));
  uint64_t a[] = {1, 2};
  d.add_u64_array("sizes", a);
  d.add_string_array("ids", {"x", "y"});
  EXPECT_EQ(d.json(),
            R"({"calls": 18446744073709551615, "skew": -5, "peer": "ctl\u0001", "sizes": [1, 2], "ids": ["x", "y"]})");
  EXPECT_TRUE(json_valid(d.json()));
}

TEST(TelemetryReply, HistogramIsFlattened) {
  Histogram h;
  for (uint64_t x = 1; x <= 100; ++x) h.record(x * 1000);
  Reply r;
  r.add_histogram("rtt", h);
  std::vector<std::string> names;
  for (const auto& [n, v] : r.dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"rtt_count", "rtt_min_ns", "rtt_max_ns", "rtt_mean_ns", "rtt_stdev_ns",
                                             "rtt_p50_ns", "rtt_p90_ns", "rtt_p99_ns", "rtt_p999_ns"}));
  EXPECT_EQ(r.dict()[0].second.u, 100u);
  EXPECT_EQ(r.dict()[1].second.u, 1000u);
  EXPECT_EQ(r.dict()[2].second.u, 100000u);
  EXPECT_EQ(r.dict()[3].second.u, 50500u);
  EXPECT_NEAR(static_cast<double>(r.dict()[5].second.u), 50000, 50000 * Histogram::kRelativeError);
}

TEST(TelemetryRegistry, ListsGetsAndForgets) {
  FakeEngine e0, e1;
  e0.calls.add(42);
  e0.rtt.record(5000);
  auto s0 = register_source("engine", "", FakeEngine::provide, &e0);
  auto s1 = register_source("engine", "", FakeEngine::provide, &e1);
  ASSERT_TRUE(s0.is_ok() && s1.is_ok());
  EXPECT_EQ(s0->id(), "0");
  EXPECT_EQ(s1->id(), "1");
  FakeConn c1{1}, c2{2}, c3{3};
  auto k1 = register_source("conn", "0.1", FakeConn::provide, &c1);
  auto k2 = register_source("conn", "0.2", FakeConn::provide, &c2);
  auto k3 = register_source("conn", "1.1", FakeConn::provide, &c3);
  ASSERT_TRUE(k1.is_ok() && k2.is_ok() && k3.is_ok());

  EXPECT_EQ(handle_request("/tern/engines"), R"({"/tern/engines": ["0", "1"]})");
  EXPECT_EQ(handle_request("/tern/conns,0"), R"({"/tern/conns": ["0.1", "0.2"]})");
  EXPECT_EQ(handle_request("/tern/conns,1"), R"({"/tern/conns": ["1.1"]})");
  EXPECT_EQ(handle_request("/tern/conns,9"), R"({"/tern/conns": []})");
  EXPECT_EQ(handle_request("/tern/conn,0.2"), R"({"/tern/conn": {"conn": 2}})");
  std::string e = handle_request("/tern/engine,0");
  EXPECT_NE(e.find(R"("calls": 42, "bytes_out": 0, "errors": 0, "rtt_count": 1, "rtt_min_ns": 5000)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(R"("name": "client \"a\"")"), std::string::npos) << e;
  EXPECT_TRUE(json_valid(e)) << e;
  EXPECT_EQ(handle_request("/tern/engine,7"), R"({"/tern/engine": null})");
  EXPECT_EQ(handle_request("/tern/nothing"), R"({"/tern/nothing": null})");
  EXPECT_EQ(handle_request("bogus"), R"({"bogus": null})");
  EXPECT_EQ(handle_request("/help,/tern/conns"),
            R"({"/help": {"/tern/conns": "ids of every source of this kind; with ,PREFIX those named PREFIX.*"}})");

  std::string all = handle_request("/");
  for (const char* c : {"\"/tern/engines\"", "\"/tern/engine\"", "\"/tern/conns\"", "\"/tern/conn\"", "\"/info\""})
    EXPECT_NE(all.find(c), std::string::npos) << c << " in " << all;
  std::string info = handle_request("/info");
  EXPECT_NE(info.find("\"pid\": " + std::to_string(getpid())), std::string::npos) << info;
  EXPECT_NE(info.find("\"max_output_len\": 16384"), std::string::npos) << info;

  // Taken ids and bad names are refused.
  EXPECT_EQ(register_source("conn", "0.1", FakeConn::provide, &c1).status().code(), Errc::kBadState);
  EXPECT_EQ(register_source("Conn", "", FakeConn::provide, &c1).status().code(), Errc::kInvalidArgument);
  EXPECT_EQ(register_source("conn", "a,b", FakeConn::provide, &c1).status().code(), Errc::kInvalidArgument);

  // A destroyed source is gone at once; its id is free again.
  s0->reset();
  EXPECT_EQ(handle_request("/tern/engine,0"), R"({"/tern/engine": null})");
  EXPECT_EQ(handle_request("/tern/engines"), R"({"/tern/engines": ["1"]})");
  auto again = register_source("engine", "", FakeEngine::provide, &e0);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->id(), "0");
}

// ------------------------------------------------------------ the socket

struct Ran {
  int status = -1;
  std::string out;
};

// Runs argv (with extra environment and stdin text) while this thread keeps
// polling the server, as a host's poll loop would: no thread answers for us.
Ran run_polling(SocketServer* srv, std::vector<std::string> argv, std::vector<std::string> env,
                const std::string& input) {
  int in[2], out[2];
  EXPECT_EQ(pipe(in), 0);
  EXPECT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    for (auto& e : env) putenv(e.data());
    std::vector<char*> av;
    for (auto& a : argv) av.push_back(a.data());
    av.push_back(nullptr);
    execvp(av[0], av.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  EXPECT_EQ(write(in[1], input.data(), input.size()), static_cast<ssize_t>(input.size()));
  close(in[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  Ran r;
  for (;;) {
    srv->poll();
    char buf[4096];
    ssize_t n;
    while ((n = read(out[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<size_t>(n));
    if (n == 0) break;  // the child closed stdout: it is done
    pollfd p[2] = {{srv->fd(), POLLIN, 0}, {out[0], POLLIN, 0}};
    ::poll(p, 2, 5);  // clients' sockets are not in the set: wake now and then for them
  }
  waitpid(pid, &r.status, 0);
  close(out[0]);
  return r;
}

class TelemetrySocket : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tern-telemetry-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    e_.calls.add(7);
    e_.bytes_out.add(4096);
    for (uint64_t x = 1; x <= 1000; ++x) e_.rtt.record(x * 100);
    auto s = register_source("engine", "", FakeEngine::provide, &e_);
    ASSERT_TRUE(s.is_ok());
    src_ = std::move(s.value());
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
  FakeEngine e_;
  Source src_;
};

TEST_F(TelemetrySocket, TernStatsReadsCommandsAndDumps) {
  std::string path = dir_ + "/tern.sock";
  auto srv = SocketServer::open(path);
  ASSERT_TRUE(srv.is_ok()) << srv.status().to_string();
  std::string tool = TERN_SOURCE_ROOT "/scripts/tern-stats";
  std::string id = src_.id();

  Ran r = run_polling(srv->get(), {"python3", tool, "-s", path, "/tern/engines", "/tern/engine," + id, "/nope"},
                      {}, "");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<std::string> lines;
  for (size_t p = 0, q; (q = r.out.find('\n', p)) != std::string::npos; p = q + 1) lines.push_back(r.out.substr(p, q - p));
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_NE(lines[0].find("\"" + id + "\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"calls\": 7, \"bytes_out\": 4096"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"rtt_count\": 1000"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"rtt_max_ns\": 100000"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2], "{\"/nope\": null}");
  EXPECT_TRUE(json_valid(lines[1]));

  // Without commands: everything, as one JSON document json.tool accepts.
  Ran dump = run_polling(srv->get(), {"sh", "-c", "python3 " + tool + " -s " + path + " | python3 -m json.tool"},
                         {}, "");
  ASSERT_EQ(dump.status, 0) << dump.out;
  EXPECT_NE(dump.out.find("\"calls\": 7"), std::string::npos) << dump.out;
  EXPECT_EQ(srv.value()->clients(), 0u) << "a client that left is still held";
}

TEST_F(TelemetrySocket, DpdkTelemetryScriptReadsItToo) {
  if (access("/usr/bin/dpdk-telemetry.py", X_OK) != 0) GTEST_SKIP() << "dpdk-telemetry.py (Debian's dpdk-dev) is not installed";
  // dpdk-telemetry.py -f PREFIX connects to $RUNTIME_DIRECTORY/dpdk/PREFIX/dpdk_telemetry.v2.
  ASSERT_EQ(mkdir((dir_ + "/dpdk").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((dir_ + "/dpdk/tern").c_str(), 0700), 0);
  auto srv = SocketServer::open(dir_ + "/dpdk/tern/dpdk_telemetry.v2");
  ASSERT_TRUE(srv.is_ok()) << srv.status().to_string();
  Ran r = run_polling(srv->get(), {"python3", "/usr/bin/dpdk-telemetry.py", "-f", "tern"},
                      {"RUNTIME_DIRECTORY=" + dir_}, "/tern/engine," + src_.id() + "\n/tern/engines\n");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"calls\": 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("{\"/tern/engines\": ["), std::string::npos) << r.out;
}

TEST_F(TelemetrySocket, LiveSocketIsNotStolenAndStaleOneIsReplaced) {
  std::string path = dir_ + "/t.sock";
  {
    auto a = SocketServer::open(path);
    ASSERT_TRUE(a.is_ok());
    auto b = SocketServer::open(path);
    EXPECT_EQ(b.status().code(), Errc::kBadState);
  }
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the server left its socket file";
  // A dead process's socket file (bound, then closed without unlink).
  int dead = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strcpy(sa.sun_path, path.c_str());
  ASSERT_EQ(bind(dead, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  close(dead);
  ASSERT_EQ(access(path.c_str(), F_OK), 0);
  EXPECT_TRUE(SocketServer::open(path).is_ok());
  std::ofstream(path) << "not a socket";
  EXPECT_EQ(SocketServer::open(path).status().code(), Errc::kInvalidArgument);
}

TEST(TelemetryEnv, OpenFromEnvIsOptIn) {
  unsetenv("TERN_TELEMETRY_SOCK");
  auto none = SocketServer::open_from_env();
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->get(), nullptr);
}

}  // namespace
}  // namespace tern::telemetry
