// pmd/verbs inline sends: which SENDs and RDMA WRITEs go inline
// (inline_fits), and that post_send_wr_api() builds them with
// ibv_wr_set_inline_data_list and everything else with SGEs, against a fake
// ibv_qp_ex whose ibv_wr_* entry points record what they are given. Inline,
// a device never looks at the lkey: a SEND from memory outside the PD's
// registrations must stay an SGE send so that the device refuses it.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>
#include <vector>

#include "verbs/verbs_internal.h"

namespace tern::verbs {
namespace {

constexpr uint64_t kMrAddr = 0x7f0000000000;
constexpr uint32_t kMrLen = 1 << 20;
constexpr uint32_t kLkey = 0x5500;

struct Call {
  std::string op;
  std::vector<std::pair<uint64_t, uint32_t>> bufs;  // addr, length (inline) or SGEs
};
std::vector<Call>* g_calls = nullptr;

void on_start(ibv_qp_ex*) { g_calls->push_back({"start", {}}); }
int on_complete(ibv_qp_ex*) {
  g_calls->push_back({"complete", {}});
  return 0;
}
void on_abort(ibv_qp_ex*) { g_calls->push_back({"abort", {}}); }
void on_send(ibv_qp_ex*) { g_calls->push_back({"send", {}}); }
void on_write(ibv_qp_ex*, uint32_t, uint64_t) { g_calls->push_back({"write", {}}); }
void on_read(ibv_qp_ex*, uint32_t, uint64_t) { g_calls->push_back({"read", {}}); }
void on_sge_list(ibv_qp_ex*, size_t n, const ibv_sge* sg) {
  Call c{"sge_list", {}};
  for (size_t k = 0; k < n; ++k) c.bufs.emplace_back(sg[k].addr, sg[k].length);
  g_calls->push_back(c);
}
void on_inline_list(ibv_qp_ex*, size_t n, const ibv_data_buf* b) {
  Call c{"inline_list", {}};
  for (size_t k = 0; k < n; ++k) c.bufs.emplace_back(reinterpret_cast<uint64_t>(b[k].addr), b[k].length);
  g_calls->push_back(c);
}

class InlineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_calls = &calls;
    qpx.wr_start = on_start;
    qpx.wr_complete = on_complete;
    qpx.wr_abort = on_abort;
    qpx.wr_send = on_send;
    qpx.wr_rdma_write = on_write;
    qpx.wr_rdma_read = on_read;
    qpx.wr_set_sge_list = on_sge_list;
    qpx.wr_set_inline_data_list = on_inline_list;
    mr.addr = reinterpret_cast<void*>(kMrAddr);
    mr.length = kMrLen;
    mr.lkey = kLkey;
    mrs.add(&mr);
    sq.init(16);
    q.qpx = &qpx;
    q.sq = &sq;
    q.st = &st;
    q.mrs = &mrs;
    q.max_inline = 256;
    q.max_sge = 4;
  }
  void TearDown() override { g_calls = nullptr; }

  // Posts one WR; returns the call that set its data ("inline_list" or "sge_list").
  Call post(rdma::WrOpcode op, std::vector<rdma::Sge> sg) {
    calls.clear();
    rdma::SendWr w;
    w.wr_id = 1;
    w.opcode = op;
    w.sg_list = sg.data();
    w.num_sge = static_cast<uint32_t>(sg.size());
    w.flags = rdma::kWrSignaled;
    int err = -1;
    EXPECT_EQ(post_send_wr_api(q, &w, 1, &err), 1);
    EXPECT_EQ(err, 0);
    for (const Call& c : calls)
      if (c.op == "inline_list" || c.op == "sge_list") return c;
    ADD_FAILURE() << "no data setter was called";
    return {};
  }

  ibv_qp_ex qpx{};
  ibv_mr mr{};
  MrTable mrs;
  ShadowRing sq;
  VerbsQpStats st;
  WrApiQueue q;
  std::vector<Call> calls;
};

TEST_F(InlineTest, SmallSendInsideItsRegistrationGoesInline) {
  Call c = post(rdma::WrOpcode::kSend, {{kMrAddr + 64, 100, kLkey}});
  EXPECT_EQ(c.op, "inline_list");
  ASSERT_EQ(c.bufs.size(), 1u);
  EXPECT_EQ(c.bufs[0].first, kMrAddr + 64);
  EXPECT_EQ(c.bufs[0].second, 100u);
  EXPECT_EQ(st.inline_sends.get(), 1u);
  EXPECT_EQ(st.doorbells.get(), 1u);
}

TEST_F(InlineTest, SeveralSgesUpToTheLimitGoInlineTogether) {
  Call c = post(rdma::WrOpcode::kRdmaWrite, {{kMrAddr, 128, kLkey}, {kMrAddr + 4096, 128, kLkey}});
  EXPECT_EQ(c.op, "inline_list");
  ASSERT_EQ(c.bufs.size(), 2u);
  EXPECT_EQ(c.bufs[1].first, kMrAddr + 4096);
}

TEST_F(InlineTest, LongerThanTheLimitIsSentFromItsBuffer) {
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr, 257, kLkey}}).op, "sge_list");
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr, 200, kLkey}, {kMrAddr + 512, 57, kLkey}}).op, "sge_list");
  EXPECT_EQ(st.inline_sends.get(), 0u);
}

TEST_F(InlineTest, UnknownLkeyOrOutsideTheRegistrationIsLeftToTheDevice) {
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr, 32, 0x6600}}).op, "sge_list") << "an lkey of no registration";
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr - 8, 32, kLkey}}).op, "sge_list") << "starts before the MR";
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr + kMrLen - 16, 32, kLkey}}).op, "sge_list") << "runs past it";
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr + kMrLen + 64, 32, kLkey}}).op, "sge_list") << "lies past it";
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr, 32, kLkey}, {kMrAddr, 32, 0x6600}}).op, "sge_list")
      << "one foreign SGE keeps the whole WR off the inline path";
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr + kMrLen - 32, 32, kLkey}}).op, "inline_list")
      << "the last bytes of the MR are inside it";
}

TEST_F(InlineTest, ReadsAndEmptySendsAreNeverInline) {
  EXPECT_EQ(post(rdma::WrOpcode::kRdmaRead, {{kMrAddr, 32, kLkey}}).op, "sge_list");
  calls.clear();
  rdma::SendWr w;
  w.opcode = rdma::WrOpcode::kSend;
  int err = -1;
  EXPECT_EQ(post_send_wr_api(q, &w, 1, &err), 1);
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls[2].op, "sge_list");
  EXPECT_EQ(st.inline_sends.get(), 0u);
}

TEST_F(InlineTest, ZeroLimitTurnsInlineOff) {
  q.max_inline = 0;
  EXPECT_EQ(post(rdma::WrOpcode::kSend, {{kMrAddr, 8, kLkey}}).op, "sge_list");
}

TEST(InlineFits, CountsEveryByteAndEverySge) {
  ibv_mr mr{};
  mr.addr = reinterpret_cast<void*>(kMrAddr);
  mr.length = 4096;
  mr.lkey = kLkey;
  MrTable mrs;
  mrs.add(&mr);
  rdma::Sge a{kMrAddr, 100, kLkey}, two[2] = {{kMrAddr, 100, kLkey}, {kMrAddr + 100, 100, kLkey}};
  EXPECT_TRUE(inline_fits(mrs, 100, &a, 1));
  EXPECT_FALSE(inline_fits(mrs, 99, &a, 1));
  EXPECT_TRUE(inline_fits(mrs, 200, two, 2));
  EXPECT_FALSE(inline_fits(mrs, 199, two, 2));
  EXPECT_FALSE(inline_fits(mrs, 256, nullptr, 0));
  rdma::Sge huge{kMrAddr + 16, 0xfffffff0u, kLkey};  // address + length wraps past 2^32 bytes
  EXPECT_FALSE(inline_fits(mrs, 0xffffffffu, &huge, 1));
}

}  // namespace
}  // namespace tern::verbs
