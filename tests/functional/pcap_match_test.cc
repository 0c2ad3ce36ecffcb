// pcap= on pmd/shm, read by tshark the way a latency user reads it: every
// ONC RPC reply matched to its call (rpc.time, "This is a reply to a request
// in frame N"), response-time tables (-z rpc,programs; -z rpc,srt for a
// program Wireshark knows, here NFSv3's NULL) also with two client processes
// whose QPs share a number on one server, and no malformed frame or
// expert error for any message shape: inline call and reply, read chunk
// (RDMA READ request and response), write chunk and reply chunk (RDMA WRITE,
// odd lengths included), RDMA_NOMSG (a long call, long replies), RDMA_ERROR. Skipped when tshark is not
// installed (scripts/setup.sh installs it). docs/observability.md.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "pcap_workload.h"
#include "raw_peer.h"

namespace tern::rpc {
namespace {

using tern::test::put32;
using tern::test::RawPeer;

constexpr uint32_t kProg = 0x20000099, kVers = 1;
constexpr uint32_t kEcho = 1;  // results = args (inline both ways)
constexpr uint32_t kFill = 2;  // args: u32 n -> n bytes of bulk results (write chunk)
constexpr uint32_t kBig = 3;   // args: u32 n -> n bytes of inline results (reply chunk, RDMA_NOMSG)
constexpr uint32_t kSum = 5;   // read chunk -> u32 sum, u32 length
// NFSv3 NULL: no arguments, no results, a program tshark's -z rpc,srt knows.
constexpr uint32_t kNfsProg = 100003, kNfsVers = 3, kNfsNull = 0;

// How many calls of each procedure the workload makes (the SRT counts).
constexpr int kEchoCalls = 4, kFillCalls = 2, kBigCalls = 2, kSumCalls = 2, kNullCalls = 4;
constexpr int kCalls = kEchoCalls + kFillCalls + kBigCalls + kSumCalls + kNullCalls;
// A second client process (engine of its own, no capture) interleaves these
// NULL calls: its QP has the same number as the first client's.
constexpr int kOtherCalls = 2;

using tern::test::pcap::run;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> f;
  size_t p = 0, q;
  while ((q = s.find(sep, p)) != std::string::npos) f.push_back(s.substr(p, q - p)), p = q + 1;
  f.push_back(s.substr(p));
  return f;
}

class PcapMatch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v tshark >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "tshark is not installed (scripts/setup.sh installs it)";
    char tmpl[] = "/tmp/tern-pcapmatch-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    cli_pcap_ = dir_ + "/client.pcap";
    srv_pcap_ = dir_ + "/server.pcap";
    ASSERT_NO_FATAL_FAILURE(workload());
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) std::system(("rm -rf " + dir_).c_str());
  }

  static void null(void*, ServerCall* c) { (void)c->reply({}); }

  void workload() {
    std::string sock = dir_ + "/s.sock";
    {
      auto srv = Engine::create({}).value();
      auto cli = Engine::create({}).value();
      srv->handle(kProg, kVers, kEcho, &tern::test::pcap::echo, nullptr);
      srv->handle(kProg, kVers, kFill, &tern::test::pcap::fill, nullptr);
      srv->handle(kProg, kVers, kBig, &tern::test::pcap::big, nullptr);
      srv->handle(kProg, kVers, kSum, &tern::test::pcap::sum, nullptr);
      srv->handle(kNfsProg, kNfsVers, kNfsNull, &null, nullptr);
      ASSERT_TRUE(srv->listen("shm:path=" + sock + ",pcap=" + srv_pcap_).is_ok());
      auto c = cli->connect("shm:path=" + sock + ",pcap=" + cli_pcap_);
      ASSERT_TRUE(c.is_ok()) << c.status().to_string();
      Connection* conn = c.value();
      auto cli2 = Engine::create({}).value();
      Connection* conn2 = cli2->connect("shm:path=" + sock).value();
      auto pump = [&] { srv->poll(), cli->poll(), cli2->poll(); };
      ASSERT_TRUE(tern::test::poll_until(pump, [&] { return conn->ready() || conn->failed(); }, 10000));
      ASSERT_TRUE(conn->ready()) << conn->error().to_string();
      ASSERT_TRUE(tern::test::poll_until(pump, [&] { return conn2->ready() || conn2->failed(); }, 10000));
      ASSERT_TRUE(conn2->ready()) << conn2->error().to_string();

      auto call = [&](Call k, Connection* on = nullptr) {
        bool done = false;
        CallReply r{};
        struct Ctx {
          bool* done;
          CallReply* r;
        } ctx{&done, &r};
        if (k.prog == 0) k.prog = kProg, k.vers = kVers;
        k.done = [](void* p, const CallReply& rep) {
          auto* x = static_cast<Ctx*>(p);
          *x->done = true, *x->r = rep;
        };
        k.ctx = &ctx;
        ASSERT_EQ((on != nullptr ? on : conn)->call(k), 0);
        ASSERT_TRUE(tern::test::poll_until(pump, [&] { return done; }, 10000));
        EXPECT_EQ(r.status, CallStatus::kOk) << call_status_name(r.status);
      };
      uint8_t args[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
      // Odd lengths: the chunks' last packets carry pad bytes.
      const uint32_t read_len[kSumCalls] = {10000, 70003};
      const uint32_t write_len[kFillCalls] = {9001, 70001};
      const uint32_t reply_len[kBigCalls] = {6000, 9000};
      auto* rd = static_cast<uint8_t*>(cli->alloc(131072));
      auto* wr = static_cast<uint8_t*>(cli->alloc(131072));
      for (uint32_t i = 0; i < 131072; ++i) rd[i] = static_cast<uint8_t>(i * 3);
      for (int i = 0; i < kNullCalls; ++i) {
        Call k;
        k.prog = kNfsProg, k.vers = kNfsVers, k.proc = kNfsNull;
        ASSERT_NO_FATAL_FAILURE(call(k));
        if (i == 0) {  // the other client's calls, between ours
          for (int j = 0; j < kOtherCalls; ++j) ASSERT_NO_FATAL_FAILURE(call(k, conn2));
        }
      }
      for (int i = 0; i < kEchoCalls - 1; ++i) {
        Call k;
        k.proc = kEcho;
        k.args = std::span<const uint8_t>(args, 4 + 4 * i);
        ASSERT_NO_FATAL_FAILURE(call(k));
      }
      {  // A long call: RDMA_NOMSG with the call in a position-zero read
         // chunk, and its long reply through a reply chunk (RDMA_NOMSG too).
        std::vector<uint8_t> long_args(6000, 0x33);
        Call k;
        k.proc = kEcho;
        k.args = long_args;
        k.max_results = 8192;
        ASSERT_NO_FATAL_FAILURE(call(k));
      }
      for (uint32_t n : read_len) {
        Call k;
        k.proc = kSum;
        k.bulk_send = std::span<const uint8_t>(rd, n);
        ASSERT_NO_FATAL_FAILURE(call(k));
      }
      for (uint32_t n : write_len) {
        Call k;
        k.proc = kFill;
        uint32_t v = n;
        k.args = std::span(reinterpret_cast<const uint8_t*>(&v), 4);
        k.bulk_recv = std::span<uint8_t>(wr, n);
        ASSERT_NO_FATAL_FAILURE(call(k));
      }
      for (uint32_t n : reply_len) {
        Call k;
        k.proc = kBig;
        uint32_t v = n;
        k.args = std::span(reinterpret_cast<const uint8_t*>(&v), 4);
        k.max_results = 16384;
        ASSERT_NO_FATAL_FAILURE(call(k));
      }

      // RDMA_ERROR: a hand-made peer on a second connection to the server
      // sends an RDMA_MSGP (deprecated) header; the server answers ERR_CHUNK.
      std::vector<uint8_t> error_reply;
      ASSERT_NO_FATAL_FAILURE(tern::test::pcap::provoke_rdma_error(pump, sock, 0x77, &error_reply));
      ASSERT_GE(error_reply.size(), 16u);
      EXPECT_EQ(error_reply[15], 4) << "RDMA_ERROR";

      conn->close();
      conn2->close();
      EXPECT_TRUE(tern::test::poll_until(
          pump, [&] { return cli->stats().connections.get() == 0 && cli2->stats().connections.get() == 0; },
          10000));
    }  // the engines go: the captures are closed
  }

  // tshark's expert summary (notes left out: RPC-over-RDMA notes every
  // reassembled chunk).
  static std::string expert(const std::string& file) {
    return run("tshark -r " + file + " -o rpc.dissect_unknown_programs:TRUE -q -z expert,warn 2>/dev/null");
  }

  void check(const std::string& file, bool server_side);

  std::string dir_, cli_pcap_, srv_pcap_;
};

void PcapMatch::check(const std::string& file, bool server_side) {
  // The server's capture also holds the second client's NULL calls.
  const int other = server_side ? kOtherCalls : 0;
  // No malformed frame, no warning or error from any dissector.
  std::string ex = expert(file);
  EXPECT_EQ(ex.find("Malformed"), std::string::npos) << ex;
  EXPECT_EQ(ex.find("Errors"), std::string::npos) << ex;
  EXPECT_EQ(ex.find("Warns"), std::string::npos) << ex;

  // Every ONC RPC message: calls and replies, matched. A frame may carry the
  // same message twice (tshark 4.0 dissects a reply with a write list once
  // more); count messages by frame, from the first occurrence.
  std::string out = run("tshark -r " + file +
                        " -2 -o rpc.dissect_unknown_programs:TRUE -Y rpc -T fields -E occurrence=f"
                        " -e frame.number -e rpc.xid -e rpc.msgtyp -e rpc.program -e rpc.procedure -e rpc.time"
                        " -e rpc.reqframe -e rpc.repframe 2>/dev/null");
  std::map<uint32_t, std::string> call_proc;  // xid -> procedure
  int calls = 0, replies = 0, timed = 0;
  std::map<std::string, int> procs;
  for (const auto& line : split(out, '\n')) {
    if (line.empty()) continue;
    auto f = split(line, '\t');
    ASSERT_EQ(f.size(), 8u) << line;
    if (f[2] == "0") {
      ++calls;
      procs[f[3] + "/" + f[4]]++;
      // tshark 4.0 names the call's link to its reply rpc.reqframe or
      // rpc.repframe by version; either will do.
      EXPECT_FALSE(f[6].empty() && f[7].empty()) << "call without its reply frame: " << line << "\n" << out;
    } else {
      ++replies;
      EXPECT_NE(f[3], "0") << "a reply matched to no call shows program 0: " << line;
      if (!f[5].empty()) ++timed;
    }
  }
  EXPECT_EQ(calls, kCalls + other) << out;
  EXPECT_EQ(replies, kCalls + other) << out;
  EXPECT_EQ(timed, replies) << "replies with rpc.time (matched to their call)\n" << out;
  EXPECT_EQ(procs[std::to_string(kNfsProg) + "/0"], kNullCalls + other) << out;
  EXPECT_EQ(procs[std::to_string(kProg) + "/1"], kEchoCalls) << out;
  EXPECT_EQ(procs[std::to_string(kProg) + "/2"], kFillCalls) << out;
  EXPECT_EQ(procs[std::to_string(kProg) + "/3"], kBigCalls) << out;
  EXPECT_EQ(procs[std::to_string(kProg) + "/5"], kSumCalls) << out;

  // The per-procedure response-time table for NFSv3: NULL, kNullCalls calls.
  std::string srt = run("tshark -r " + file + " -q -z rpc,srt,100003,3 2>/dev/null");
  bool null_row = false;
  for (const auto& line : split(srt, '\n')) {
    std::istringstream in(line);
    std::string index, name;
    int n = -1;
    in >> index >> name >> n;
    if (name == "NULL") null_row = n == kNullCalls + other;
  }
  EXPECT_TRUE(null_row) << "NULL with " << kNullCalls + other << " calls in\n" << srt;

  // RPC-over-RDMA message types: RDMA_NOMSG (reply chunk replies), and the
  // RDMA_ERROR to the raw peer (in the server's capture).
  std::string types = run("tshark -r " + file + " -Y rpcordma -T fields -e rpcordma.msg_type 2>/dev/null");
  std::map<std::string, int> t;
  for (const auto& line : split(types, '\n'))
    if (!line.empty()) t[line]++;
  EXPECT_EQ(t["1"], kBigCalls + 2) << "RDMA_NOMSG: the long replies, the long call and its reply\n" << types;
  if (server_side) {
    EXPECT_EQ(t["4"], 1) << "one RDMA_ERROR\n" << types;
  }
}

TEST_F(PcapMatch, ClientCaptureMatchesEveryReply) { check(cli_pcap_, false); }
TEST_F(PcapMatch, ServerCaptureMatchesEveryReply) { check(srv_pcap_, true); }

}  // namespace
}  // namespace tern::rpc
