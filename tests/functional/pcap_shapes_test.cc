// Issue 24: "some RDMA WRITE payloads of Tern captures show as [Malformed
// Packet]". A capture (pcap= on pmd/shm) of every message shape Tern sends,
// at the sizes a storage gateway moves, is read by tshark and no frame may be
// malformed (the `_ws.malformed` field, or "Malformed" anywhere in a
// frame's summary or the expert summary): inline call and reply, a long
// call (RDMA_NOMSG, position-zero read chunk), read, write and reply
// chunks of 64 KiB and 1 MiB (RDMA READ responses and RDMA WRITEs of 16
// and 256 packets: FIRST, MIDDLE..., LAST), RDMA_ERROR. RDMA WRITE with
// immediate is not among them: no Tern driver posts it (rdmadev has no such
// opcode), so no capture can hold one. The shapes are counted too, so the
// check cannot pass on a capture that lacks them. Skipped without tshark.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "pcap_workload.h"
#include "raw_peer.h"

namespace tern::rpc {
namespace {

using tern::test::put32;
using tern::test::RawPeer;
using tern::test::pcap::run;

constexpr uint32_t kProg = 0x2000009a, kVers = 1;
constexpr uint32_t kEcho = 1, kFill = 2, kBig = 3, kSum = 5;
constexpr uint32_t k64K = 64u << 10, k1M = 1u << 20;

int count_lines(const std::string& s) {
  int n = 0;
  size_t p = 0, q;
  while ((q = s.find('\n', p)) != std::string::npos) n += q > p, p = q + 1;
  return n + (p < s.size());
}

class PcapShapes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v tshark >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "tshark is not installed (scripts/setup.sh installs it)";
    char tmpl[] = "/tmp/tern-pcapshapes-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_NO_FATAL_FAILURE(workload());
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) std::system(("rm -rf " + dir_).c_str());
  }

  void workload() {
    const std::string sock = dir_ + "/s.sock";
    EngineOptions eo;
    eo.max_reply = k1M + 4096;  // a reply chunk of 1 MiB
    eo.arena_bytes = 64u << 20;
    auto srv = Engine::create(eo).value();
    auto cli = Engine::create(eo).value();
    srv->handle(kProg, kVers, kEcho, &tern::test::pcap::echo, nullptr);
    srv->handle(kProg, kVers, kFill, &tern::test::pcap::fill, nullptr);
    srv->handle(kProg, kVers, kBig, &tern::test::pcap::big, nullptr);
    srv->handle(kProg, kVers, kSum, &tern::test::pcap::sum, nullptr);
    ASSERT_TRUE(srv->listen("shm:path=" + sock + ",pcap=" + dir_ + "/server.pcap").is_ok());
    auto c = cli->connect("shm:path=" + sock + ",pcap=" + dir_ + "/client.pcap");
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    Connection* conn = c.value();
    auto pump = [&] { srv->poll(), cli->poll(); };
    ASSERT_TRUE(tern::test::poll_until(pump, [&] { return conn->ready() || conn->failed(); }, 10000));
    ASSERT_TRUE(conn->ready()) << conn->error().to_string();

    auto call = [&](Call k) {
      bool done = false;
      CallReply r{};
      struct Ctx {
        bool* done;
        CallReply* r;
      } ctx{&done, &r};
      k.prog = kProg, k.vers = kVers;
      k.done = [](void* p, const CallReply& rep) {
        auto* x = static_cast<Ctx*>(p);
        *x->done = true, *x->r = rep;
      };
      k.ctx = &ctx;
      ASSERT_EQ(conn->call(k), 0);
      ASSERT_TRUE(tern::test::poll_until(pump, [&] { return done; }, 20000));
      EXPECT_EQ(r.status, CallStatus::kOk) << call_status_name(r.status);
    };
    auto* rd = static_cast<uint8_t*>(cli->alloc(k1M));
    auto* wr = static_cast<uint8_t*>(cli->alloc(k1M));
    ASSERT_NE(rd, nullptr);
    ASSERT_NE(wr, nullptr);
    for (uint32_t i = 0; i < k1M; ++i) rd[i] = static_cast<uint8_t>(i * 7);

    uint8_t args[32] = {};
    {  // inline both ways
      Call k;
      k.proc = kEcho;
      k.args = std::span<const uint8_t>(args, sizeof args);
      ASSERT_NO_FATAL_FAILURE(call(k));
    }
    {  // a long call: RDMA_NOMSG, the call in a position-zero read chunk
      std::vector<uint8_t> long_args(6000, 0x33);
      Call k;
      k.proc = kEcho;
      k.args = long_args;
      k.max_results = 8192;
      ASSERT_NO_FATAL_FAILURE(call(k));
    }
    for (uint32_t n : {k64K, k1M}) {  // read chunks
      Call k;
      k.proc = kSum;
      k.bulk_send = std::span<const uint8_t>(rd, n);
      ASSERT_NO_FATAL_FAILURE(call(k));
    }
    for (uint32_t n : {k64K, k1M}) {  // write chunks
      Call k;
      k.proc = kFill;
      uint32_t v = n;
      k.args = std::span(reinterpret_cast<const uint8_t*>(&v), 4);
      k.bulk_recv = std::span<uint8_t>(wr, n);
      ASSERT_NO_FATAL_FAILURE(call(k));
    }
    for (uint32_t n : {k64K, k1M}) {  // reply chunks (RDMA_NOMSG replies)
      Call k;
      k.proc = kBig;
      uint32_t v = n;
      k.args = std::span(reinterpret_cast<const uint8_t*>(&v), 4);
      k.max_results = n + 1024;
      ASSERT_NO_FATAL_FAILURE(call(k));
    }
    // RDMA_ERROR: an RDMA_MSGP header from a hand-made peer gets ERR_CHUNK.
    std::vector<uint8_t> error_reply;
    ASSERT_NO_FATAL_FAILURE(tern::test::pcap::provoke_rdma_error(pump, sock, 0x78, &error_reply));
    conn->close();
    EXPECT_TRUE(tern::test::poll_until(pump, [&] { return cli->stats().connections.get() == 0; }, 10000));
  }  // the engines go: the captures are closed

  // tshark's fields of the frames `filter` selects, one line per frame.
  static std::string fields(const std::string& file, const std::string& filter, const std::string& field) {
    return run("tshark -r " + file + " -o rpc.dissect_unknown_programs:TRUE -Y '" + filter + "' -T fields -e " +
               field + " 2>/dev/null");
  }

  void check(const std::string& file, bool server_side) {
    // The shapes are there: RDMA WRITE packets of a 1 MiB chunk (FIRST,
    // 254 MIDDLE, LAST at a 4 KiB MTU) and of the 64 KiB one, the same
    // for READ responses (read chunks, the long call), RDMA_NOMSG.
    const std::string n = "frame.number";
    EXPECT_GE(count_lines(fields(file, "infiniband.bth.opcode == 7", n)), 254 + 14) << "RDMA WRITE MIDDLE";
    EXPECT_GE(count_lines(fields(file, "infiniband.bth.opcode == 6", n)), 4) << "RDMA WRITE FIRST";
    EXPECT_GE(count_lines(fields(file, "infiniband.bth.opcode == 8", n)), 4) << "RDMA WRITE LAST";
    EXPECT_GE(count_lines(fields(file, "infiniband.bth.opcode == 14", n)), 254 + 14) << "RDMA READ response MIDDLE";
    EXPECT_GE(count_lines(fields(file, "rpcordma.msg_type == 1", n)), 3) << "RDMA_NOMSG";
    if (server_side) {
      EXPECT_EQ(count_lines(fields(file, "rpcordma.msg_type == 4", n)), 1) << "RDMA_ERROR";
    }

    // None malformed: the field Wireshark sets on a frame a dissector could
    // not parse, and the words it shows for one.
    std::string bad = fields(file, "_ws.malformed", "frame.number");
    EXPECT_EQ(bad, "") << "malformed frames:\n" << bad;
    std::string info = run("tshark -r " + file + " -o rpc.dissect_unknown_programs:TRUE 2>/dev/null");
    EXPECT_EQ(info.find("Malformed"), std::string::npos) << info.substr(0, 4000);
    std::string ex = run("tshark -r " + file + " -o rpc.dissect_unknown_programs:TRUE -q -z expert,warn 2>/dev/null");
    EXPECT_EQ(ex.find("Malformed"), std::string::npos) << ex;
    EXPECT_EQ(ex.find("Errors"), std::string::npos) << ex;
  }

  std::string dir_;
};

TEST_F(PcapShapes, ClientCaptureHasNoMalformedFrame) { check(dir_ + "/client.pcap", false); }
TEST_F(PcapShapes, ServerCaptureHasNoMalformedFrame) { check(dir_ + "/server.pcap", true); }

}  // namespace
}  // namespace tern::rpc
