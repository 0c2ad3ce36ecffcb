// pcap= on pmd/shm: an RPC workload with read, write and reply chunks runs
// between two engines with a capture at each end, and Wireshark's tshark must
// decode both captures as RoCEv2 carrying RPC-over-RDMA: the RPC-over-RDMA
// header (xid, version 1, credits, message type), the chunk lists with their
// segments, and the ONC RPC call (program, version, procedure). Skipped when
// tshark is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "pcap_workload.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kProg = 0x20000099, kVers = 1;
constexpr uint32_t kEcho = 1;  // results = args
constexpr uint32_t kFill = 2;  // args: u32 n -> n bytes of bulk results (write chunk)
constexpr uint32_t kBig = 3;   // args: u32 n -> n bytes of inline results (reply chunk when large)
constexpr uint32_t kSum = 5;   // read chunk -> u32 sum, u32 length

constexpr uint32_t kReadLen = 10000;   // three READ response packets at the 4096-byte MTU
constexpr uint32_t kWriteLen = 9000;   // three WRITE packets
constexpr uint32_t kReplyLen = 6000;   // over the inline threshold: a reply chunk

using tern::test::pcap::run;

std::vector<std::vector<std::string>> rows(const std::string& out) {
  std::vector<std::vector<std::string>> r;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    size_t p = 0, q;
    while ((q = line.find('\t', p)) != std::string::npos) f.push_back(line.substr(p, q - p)), p = q + 1;
    f.push_back(line.substr(p));
    r.push_back(f);
  }
  return r;
}

struct Workload {
  std::string dir, sock, cli_pcap, srv_pcap;
  std::set<uint32_t> xids;  // of the calls made


  void run() {
    auto srv = Engine::create({}).value();
    auto cli = Engine::create({}).value();
    srv->handle(kProg, kVers, kEcho, &tern::test::pcap::echo, nullptr);
    srv->handle(kProg, kVers, kFill, &tern::test::pcap::fill, nullptr);
    srv->handle(kProg, kVers, kBig, &tern::test::pcap::big, nullptr);
    srv->handle(kProg, kVers, kSum, &tern::test::pcap::sum, nullptr);
    ASSERT_TRUE(srv->listen("shm:path=" + sock + ",pcap=" + srv_pcap).is_ok());
    auto c = cli->connect("shm:path=" + sock + ",pcap=" + cli_pcap);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    Connection* conn = c.value();
    auto wait = [&](const std::function<bool()>& pred) {
      auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!pred() && std::chrono::steady_clock::now() < end) srv->poll(), cli->poll();
      return pred();
    };
    ASSERT_TRUE(wait([&] { return conn->ready() || conn->failed(); }));
    ASSERT_TRUE(conn->ready()) << conn->error().to_string();

    struct Done {
      bool done = false;
      CallReply r{};
    };
    auto call = [&](Call k) {
      Done d;
      k.prog = kProg, k.vers = kVers;
      k.done = [](void* ctx, const CallReply& r) { *static_cast<Done*>(ctx) = {true, r}; };
      k.ctx = &d;
      EXPECT_EQ(conn->call(k), 0);
      EXPECT_TRUE(wait([&] { return d.done; }));
      EXPECT_EQ(d.r.status, CallStatus::kOk) << call_status_name(d.r.status);
      xids.insert(d.r.xid);
    };
    uint8_t args[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    Call echo_call;
    echo_call.proc = kEcho;
    echo_call.args = args;
    call(echo_call);

    auto* rd = static_cast<uint8_t*>(cli->alloc(kReadLen));
    for (uint32_t i = 0; i < kReadLen; ++i) rd[i] = static_cast<uint8_t>(i * 3);
    Call sum_call;
    sum_call.proc = kSum;
    sum_call.bulk_send = std::span<const uint8_t>(rd, kReadLen);
    call(sum_call);

    auto* wr = static_cast<uint8_t*>(cli->alloc(kWriteLen));
    uint32_t n = kWriteLen;
    Call fill_call;
    fill_call.proc = kFill;
    fill_call.args = std::span(reinterpret_cast<const uint8_t*>(&n), 4);
    fill_call.bulk_recv = std::span<uint8_t>(wr, kWriteLen);
    call(fill_call);

    uint32_t m = kReplyLen;
    Call big_call;
    big_call.proc = kBig;
    big_call.args = std::span(reinterpret_cast<const uint8_t*>(&m), 4);
    big_call.max_results = 8192;
    call(big_call);
    conn->close();
    // Polls until both ends have let the connection go; the engines go
    // first (end of scope), closing the captures.
    EXPECT_TRUE(wait([&] { return srv->stats().connections.get() == 0 && cli->stats().connections.get() == 0; }))
        << "connections left: server " << srv->stats().connections.get() << ", client "
        << cli->stats().connections.get();
  }
};

class Pcap : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v tshark >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "tshark is not installed (scripts/setup.sh installs it)";
    char tmpl[] = "/tmp/tern-pcap-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    w_.dir = tmpl;
    w_.sock = w_.dir + "/s.sock";
    w_.cli_pcap = w_.dir + "/client.pcap";
    w_.srv_pcap = w_.dir + "/server.pcap";
    w_.run();
  }
  void TearDown() override {
    if (!w_.dir.empty() && !HasFailure()) std::system(("rm -rf " + w_.dir).c_str());
  }
  // tshark's fields for every frame in one run (tshark takes seconds to
  // start, most of this test's time): the framing fields below, then those
  // of the RPC-over-RDMA message, empty in frames that carry none.
  static constexpr size_t kFramingFields = 8;
  std::vector<std::vector<std::string>> frame_rows(const std::string& file) {
    return rows(run("tshark -r " + file +
                    " -o ip.check_checksum:TRUE -o rpc.dissect_unknown_programs:TRUE"
                    " -T fields -E occurrence=a -E aggregator=, "
                    "-e frame.protocols -e frame.len -e ip.len -e udp.length -e ip.checksum.status "
                    "-e udp.dstport -e infiniband.bth.opcode -e infiniband.reth.dmalen "
                    "-e rpcordma.xid -e rpcordma.version -e rpcordma.flow_control -e rpcordma.msg_type "
                    "-e rpcordma.reads_count -e rpcordma.writes_count -e rpcordma.reply_count "
                    "-e rpcordma.rdma_length -e rpc.msgtyp -e rpc.program -e rpc.programversion -e rpc.procedure "
                    "2>/dev/null"));
  }
  void check(const std::string& file);
  Workload w_;
};

void Pcap::check(const std::string& file) {
  auto frames = frame_rows(file);
  std::string ops;  // opcode and DMA length of every frame, for the messages below
  std::vector<std::vector<std::string>> r;  // the RPC-over-RDMA messages' fields
  for (const auto& f : frames) {
    ASSERT_EQ(f.size(), kFramingFields + 12) << "fields of a frame";
    ops += f[6] + "\t" + f[7] + "\n";
    if (!f[kFramingFields].empty()) r.emplace_back(f.begin() + kFramingFields, f.end());
  }
  // Framing: every frame is RoCEv2 (Ethernet/IPv4/UDP 4791/BTH) with no
  // malformed or bad-checksum warnings from any dissector.
  EXPECT_GT(frames.size(), 10u) << ops;
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& f = frames[i];
    EXPECT_EQ(f[0].rfind("eth:ethertype:ip:udp:infiniband", 0), 0u) << "frame " << i + 1 << ": " << f[0];
    // Lengths agree layer by layer, and the IPv4 header checksum is right.
    EXPECT_EQ(std::stoul(f[1]), 14 + std::stoul(f[2])) << "frame " << i + 1 << ": frame vs IP length";
    EXPECT_EQ(std::stoul(f[3]), std::stoul(f[2]) - 20) << "frame " << i + 1 << ": UDP vs IP length";
    EXPECT_EQ(f[4], "1") << "IPv4 checksum good (1: good, 0: bad, 2: unverified)";
    EXPECT_EQ(f[5], "4791") << "RoCEv2 port";
  }
  std::string expert = run("tshark -r " + file + " -o rpc.dissect_unknown_programs:TRUE -q -z expert,warn 2>/dev/null");
  EXPECT_EQ(expert.find("Malformed"), std::string::npos) << expert;
  EXPECT_EQ(expert.find("Bad checksum"), std::string::npos) << expert;
  EXPECT_EQ(expert.find("Warnings"), std::string::npos) << expert;

  // The RDMA operations the chunks caused, with their sizes.
  std::map<std::string, int> count;
  for (const auto& f : frames) count[f[6]]++;
  // Opcodes (decimal): 4 SEND only, 23 SEND only with invalidate (the
  // replies), 12 READ request, 13/14/15 READ response first/middle/last,
  // 6/7/8 WRITE first/middle/last.
  EXPECT_EQ(count["4"], 5) << "four calls and the echo's reply\n" << ops;
  EXPECT_EQ(count["23"], 3) << "three replies invalidating their call's registration\n" << ops;
  EXPECT_EQ(count["12"], 1) << "one RDMA READ request\n" << ops;
  EXPECT_EQ(count["13"], 1) << ops;
  EXPECT_EQ(count["14"], 1) << ops;
  EXPECT_EQ(count["15"], 1) << "a 10000-byte READ response in three packets\n" << ops;
  EXPECT_EQ(count["6"], 2) << "two WRITEs: the write chunk (9000 bytes) and the reply chunk (6024)\n" << ops;
  EXPECT_EQ(count["7"], 1) << ops;
  EXPECT_EQ(count["8"], 2) << ops;
  EXPECT_NE(ops.find("\t" + std::to_string(kReadLen)), std::string::npos) << ops;
  EXPECT_NE(ops.find("\t" + std::to_string(kWriteLen)), std::string::npos) << ops;

  // Every RPC-over-RDMA message: its header, chunk lists and ONC RPC message.
  ASSERT_EQ(r.size(), 8u) << "four calls and four replies\n" << run("tshark -r " + file + " 2>/dev/null");
  std::set<uint32_t> calls_seen, replies_seen, rpc_calls;
  int reads = 0, writes = 0, replies = 0, nomsg = 0;
  for (auto f : r) {
    ASSERT_EQ(f.size(), 12u);
    // The RPC dissector repeats program, version and procedure in a summary
    // item, and Wireshark 4.0 dissects a reply with a write list twice: keep
    // the first occurrence.
    for (size_t k = 8; k < 12; ++k) f[k] = f[k].substr(0, f[k].find(','));
    uint32_t xid = static_cast<uint32_t>(std::stoul(f[0], nullptr, 16));
    EXPECT_EQ(f[1], "1") << "version";
    EXPECT_TRUE(!f[2].empty() && f[2] != "0") << "credits " << f[2];
    ASSERT_FALSE(f[4].empty() || f[5].empty() || f[6].empty()) << "chunk lists";
    bool has_write_list = f[5] != "0";
    bool from_client = f[6] != "0" || f[4] != "0" || (f[8] == "0");
    if (f[3] == "1") {  // RDMA_NOMSG: only the server sends it here (the reply chunk's reply)
      ++nomsg;
      replies_seen.insert(xid);
      continue;
    }
    ASSERT_EQ(f[3], "0") << "RDMA_MSG";
    if (f[4] == "1") {  // the kSum call: one read chunk, one segment of kReadLen
      ++reads;
      calls_seen.insert(xid);
      EXPECT_EQ(f[7], std::to_string(kReadLen)) << "read segment length";
      continue;  // its ONC RPC call is decoded in the READ response that brings it (tern-pcap-match)
    }
    if (f[8] == "0") {  // an ONC RPC call, decoded inside the RPC-over-RDMA message
      calls_seen.insert(xid);
      rpc_calls.insert(xid);
      EXPECT_EQ(f[9], std::to_string(kProg)) << "program";
      EXPECT_EQ(f[10], "1") << "program version";
      if (f[11] == "2") {
        ++writes;
        EXPECT_EQ(f[5], "1") << "the kFill call offers one write chunk";
        EXPECT_EQ(f[7], std::to_string(kWriteLen)) << "its segment's length";
      } else if (f[11] == "3") {
        ++replies;
        EXPECT_EQ(f[6], "1") << "the kBig call offers a reply chunk";
        EXPECT_GE(std::stoul(f[7]), 8192u) << "its segment's length (max_results and room for the header)";
      } else {
        EXPECT_EQ(f[11], "1") << "procedure";
        EXPECT_EQ(f[4] + f[5] + f[6], "000") << "the echo call has no chunks";
      }
    } else {
      EXPECT_EQ(f[8], "1") << "an ONC RPC reply";
      replies_seen.insert(xid);
      if (has_write_list) {
        EXPECT_EQ(f[5], "1") << "the kFill reply returns its write chunk";
        EXPECT_EQ(f[7], std::to_string(kWriteLen)) << "with the bytes written";
      }
    }
    (void)from_client;
  }
  EXPECT_EQ(calls_seen, w_.xids) << "every call's RPC-over-RDMA header, by xid";
  EXPECT_EQ(replies_seen, w_.xids) << "every reply's";
  EXPECT_EQ(rpc_calls.size(), 3u) << "ONC RPC calls decoded (program, version, procedure)";
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(writes, 1);
  EXPECT_EQ(replies, 1);
  EXPECT_EQ(nomsg, 1) << "the large reply is an RDMA_NOMSG (its body went through the reply chunk)";
}

TEST_F(Pcap, ClientCaptureDecodes) { check(w_.cli_pcap); }
TEST_F(Pcap, ServerCaptureDecodes) { check(w_.srv_pcap); }

}  // namespace
}  // namespace tern::rpc
