// pmd/mlx5 without hardware: the kRegMr -> UMR plan (pure), and the calls a
// chain makes on an mlx5 QP. The second part runs pmd/verbs' real chain
// posting (post_send_wr_api) with the real UmrBuilder against a fake QP:
// ibv_wr_* and mlx5dv_wr_* are inline forwards to function pointers in
// ibv_qp_ex / mlx5dv_qp_ex, which the fake fills with recorders.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

#include "mlx5/mlx5_internal.h"
#include "mlx5/mlx5_umr_plan.h"
#include "rdmadev/rdmadev.h"
#include "verbs/verbs_internal.h"

namespace tern::mlx5 {
namespace {

using rdma::kAccessLocalWrite;
using rdma::kAccessRemoteRead;
using rdma::kAccessRemoteWrite;
using rdma::make_rkey;

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint32_t kPage = 4096;

// ---------------------------------------------------------------- the plan

struct PlanTest : ::testing::Test {
  UmrTarget target{make_rkey(0x4242, 0x10), 4, 16, kPage};
  UmrSource src{0x100000, 1 << 20, 0x55};  // a 1 MiB MR at 1 MiB
  UmrPlan plan;

  UmrRefusal run(uint64_t addr, uint64_t len, uint32_t access = kAccessRemoteWrite | kAccessRemoteRead,
                 uint8_t key = 0x11) {
    return plan_umr(target, &src, UmrRequest{addr, len, access, make_rkey(0x4242, key)}, &plan);
  }
};

TEST_F(PlanTest, OneRangeIsOneEntryOverItsMr) {
  ASSERT_EQ(run(0x100000 + 8192, 3 * kPage), UmrRefusal::kNone);
  ASSERT_EQ(plan.num_sge, 1);
  EXPECT_EQ(plan.sge[0].addr, 0x100000u + 8192);
  EXPECT_EQ(plan.sge[0].length, 3 * kPage);
  EXPECT_EQ(plan.sge[0].lkey, 0x55u) << "the entry borrows the long-lived MR's translation";
  EXPECT_EQ(plan.access_flags,
            unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ});
}

TEST_F(PlanTest, NewKeyIsTheMkeysIndexWithTheRequestsKeyByte) {
  ASSERT_EQ(run(0x100000, kPage, kAccessRemoteRead, 0x11), UmrRefusal::kNone);
  EXPECT_EQ(plan.new_key, make_rkey(0x4242, 0x11));
  // The key byte wraps as FastMr::bump_rkey wraps it.
  target.key = make_rkey(0x4242, 0xff);
  ASSERT_EQ(run(0x100000, kPage, kAccessRemoteRead, 0x00), UmrRefusal::kNone);
  EXPECT_EQ(plan.new_key, make_rkey(0x4242, 0x00));
}

TEST_F(PlanTest, RkeyOfAnotherMkeyIsRefused) {
  UmrRequest r{0x100000, kPage, kAccessRemoteRead, make_rkey(0x4243, 0x11)};
  EXPECT_EQ(plan_umr(target, &src, r, &plan), UmrRefusal::kWrongMkey);
}

TEST_F(PlanTest, AccessFlagsMapToIbvAccess) {
  EXPECT_EQ(umr_access_flags(0), 0u);
  EXPECT_EQ(umr_access_flags(kAccessLocalWrite), unsigned{IBV_ACCESS_LOCAL_WRITE});
  EXPECT_EQ(umr_access_flags(kAccessRemoteRead), unsigned{IBV_ACCESS_REMOTE_READ});
  EXPECT_EQ(umr_access_flags(kAccessRemoteWrite), unsigned{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE})
      << "remote write needs local write (IB spec)";
  EXPECT_EQ(umr_access_flags(kAccessLocalWrite | kAccessRemoteRead),
            unsigned{IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ});
  ASSERT_EQ(run(0x100000, kPage, kAccessRemoteRead), UmrRefusal::kNone);
  EXPECT_EQ(plan.access_flags, unsigned{IBV_ACCESS_REMOTE_READ}) << "a read-only registration stays read-only";
}

TEST_F(PlanTest, UnalignedRangesAreMappedAndCountedByPagesTouched) {
  // 4 KiB starting 100 bytes into a page touches two pages.
  EXPECT_EQ(pages_spanned(0x100000 + 100, kPage, kPage), 2u);
  target.max_depth = 1;
  EXPECT_EQ(run(0x100000 + 100, kPage), UmrRefusal::kTooDeep);
  target.max_depth = 2;
  ASSERT_EQ(run(0x100000 + 100, kPage), UmrRefusal::kNone);
  EXPECT_EQ(plan.sge[0].addr, 0x100000u + 100) << "byte-granular: no rounding to pages";
  EXPECT_EQ(plan.sge[0].length, kPage);
  // An odd length in the middle of a page is fine too.
  ASSERT_EQ(run(0x100000 + 7, 13), UmrRefusal::kNone);
  EXPECT_EQ(plan.sge[0].length, 13u);
}

TEST_F(PlanTest, DepthIsAPageLimit) {
  ASSERT_EQ(run(0x100000, 16 * kPage), UmrRefusal::kNone) << "exactly max_depth aligned pages";
  EXPECT_EQ(run(0x100000, 16 * kPage + 1), UmrRefusal::kTooDeep);
  EXPECT_EQ(run(0x100000 + kPage - 1, 15 * kPage + 2), UmrRefusal::kTooDeep) << "touches 17 pages";
}

TEST_F(PlanTest, RangeMustLieInsideItsMr) {
  EXPECT_EQ(run(0x100000 - 1, 16), UmrRefusal::kOutsideSource) << "starts before the MR";
  EXPECT_EQ(run(0x100000 + (1 << 20) - 8, 16), UmrRefusal::kOutsideSource) << "ends after the MR";
  EXPECT_EQ(run(0x100000 + (1 << 20), 1), UmrRefusal::kOutsideSource) << "starts at its end";
  ASSERT_EQ(run(0x100000 + (1 << 20) - 16, 16), UmrRefusal::kNone) << "its last bytes";
  // No overflow: a huge length or an address near the top must not wrap into range.
  target.max_depth = UINT32_MAX;
  EXPECT_EQ(run(0x100000 + 8, UINT64_MAX - 4), UmrRefusal::kOutsideSource);
  EXPECT_EQ(run(UINT64_MAX - 8, 16), UmrRefusal::kOutsideSource);
}

TEST_F(PlanTest, EmptyOrUnknownIsRefused) {
  EXPECT_EQ(run(0x100000, 0), UmrRefusal::kEmpty);
  UmrRequest r{0x100000, kPage, kAccessRemoteRead, make_rkey(0x4242, 1)};
  EXPECT_EQ(plan_umr(target, nullptr, r, &plan), UmrRefusal::kNoSource) << "reg.lkey names no MR of the PD";
}

TEST_F(PlanTest, LongRangesTakeOneEntryPer2GiB) {
  EXPECT_EQ(umr_entries_for(2 * kGiB), 1u);
  EXPECT_EQ(umr_entries_for(2 * kGiB + 1), 2u);
  src = UmrSource{0x40000000, 16 * kGiB, 0x99};
  target.max_depth = UINT32_MAX;
  ASSERT_EQ(run(0x40000000 + 4096, 5 * kGiB), UmrRefusal::kNone);
  ASSERT_EQ(plan.num_sge, 3);
  uint64_t pos = 0x40000000 + 4096;
  const uint32_t want[3] = {uint32_t(2 * kGiB), uint32_t(2 * kGiB), uint32_t(kGiB)};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.sge[i].addr, pos) << "entry " << i << " continues where the last ended";
    EXPECT_EQ(plan.sge[i].length, want[i]) << "entry " << i;
    EXPECT_EQ(plan.sge[i].lkey, 0x99u);
    pos += plan.sge[i].length;
  }
  target.max_entries = 2;
  EXPECT_EQ(run(0x40000000, 5 * kGiB), UmrRefusal::kTooManyEntries) << "more than the mkey was created with";
  target.max_entries = 16;
  EXPECT_EQ(run(0x40000000, 9 * kGiB), UmrRefusal::kTooManyEntries) << "more than one default WQE carries";
}

TEST(UmrRefusalName, EveryRefusalHasAName) {
  for (int r = 0; r <= static_cast<int>(UmrRefusal::kTooManyEntries); ++r)
    EXPECT_STRNE(umr_refusal_name(static_cast<UmrRefusal>(r)), "?") << r;
}

#ifdef HAVE_MLX5DV_UMR

// ---------------------------------------------------------------- the calls

struct Call {
  std::string op;
  uint64_t wr_id = 0;
  unsigned wr_flags = 0;
  uint32_t key = 0;           // the rkey argument, or the mkey's lkey at the call
  uint32_t mkey_rkey = 0;     // the mkey's rkey at the call
  const mlx5dv_mkey* mkey = nullptr;
  uint32_t access = 0;
  unsigned setters = 0;
  std::vector<ibv_sge> sge;
};

struct FakeQp {
  ibv_qp_ex qpx{};
  mlx5dv_qp_ex mqp{};
  std::vector<Call> calls;
  int complete_rc = 0;
};
FakeQp* g_fake = nullptr;  // where the recorders below write

Call& record(const char* op) {
  Call c;
  c.op = op;
  c.wr_id = g_fake->qpx.wr_id;
  c.wr_flags = g_fake->qpx.wr_flags;
  g_fake->calls.push_back(c);
  return g_fake->calls.back();
}
void on_start(ibv_qp_ex*) { g_fake->calls.push_back(Call{"start"}); }
int on_complete(ibv_qp_ex*) {
  g_fake->calls.push_back(Call{"complete"});
  return g_fake->complete_rc;
}
void on_abort(ibv_qp_ex*) { g_fake->calls.push_back(Call{"abort"}); }
void on_send(ibv_qp_ex*) { record("send"); }
void on_send_inv(ibv_qp_ex*, uint32_t rkey) { record("send_inv").key = rkey; }
void on_local_inv(ibv_qp_ex*, uint32_t rkey) { record("local_inv").key = rkey; }
void on_write(ibv_qp_ex*, uint32_t rkey, uint64_t) { record("write").key = rkey; }
void on_read(ibv_qp_ex*, uint32_t rkey, uint64_t) { record("read").key = rkey; }
void on_sge_list(ibv_qp_ex*, size_t n, const ibv_sge* sg) {
  Call c{"sge_list"};
  c.sge.assign(sg, sg + n);
  g_fake->calls.push_back(c);
}
void on_mr_list(mlx5dv_qp_ex*, mlx5dv_mkey* mkey, uint32_t access, uint16_t n, ibv_sge* sg) {
  Call& c = record("mr_list");
  c.mkey = mkey;
  c.key = mkey->lkey;
  c.mkey_rkey = mkey->rkey;
  c.access = access;
  c.sge.assign(sg, sg + n);
}
void on_mkey_configure(mlx5dv_qp_ex*, mlx5dv_mkey* mkey, uint8_t setters, mlx5dv_mkey_conf_attr* attr) {
  Call& c = record("mkey_configure");
  c.mkey = mkey;
  c.key = mkey->lkey;
  c.mkey_rkey = mkey->rkey;
  c.setters = setters;
  EXPECT_EQ(attr->conf_flags, 0u);
  EXPECT_EQ(attr->comp_mask, 0u) << "mlx5dv_wr_mkey_configure(3): comp_mask must be 0";
}
void on_set_access(mlx5dv_qp_ex*, uint32_t access) { Call c{"set_access"}; c.access = access; g_fake->calls.push_back(c); }
void on_set_layout(mlx5dv_qp_ex*, uint16_t n, const ibv_sge* sg) {
  Call c{"set_layout"};
  c.sge.assign(sg, sg + n);
  g_fake->calls.push_back(c);
}

int no_destroy(mlx5dv_mkey*) { return 0; }

std::vector<std::string> ops(const std::vector<Call>& calls) {
  std::vector<std::string> v;
  for (const Call& c : calls) v.push_back(c.op);
  return v;
}

class UmrChainTest : public ::testing::TestWithParam<UmrMode> {
 protected:
  static constexpr uint32_t kQpIndex = 3;
  static constexpr uint16_t kGen = 7;
  static constexpr uint64_t kMrAddr = 0x7f0000000000;

  void SetUp() override {
    g_fake = &fake;
    fake.qpx.wr_start = on_start;
    fake.qpx.wr_complete = on_complete;
    fake.qpx.wr_abort = on_abort;
    fake.qpx.wr_send = on_send;
    fake.qpx.wr_send_inv = on_send_inv;
    fake.qpx.wr_local_inv = on_local_inv;
    fake.qpx.wr_rdma_write = on_write;
    fake.qpx.wr_rdma_read = on_read;
    fake.qpx.wr_set_sge_list = on_sge_list;
    fake.mqp.wr_mr_list = on_mr_list;
    fake.mqp.wr_mkey_configure = on_mkey_configure;
    fake.mqp.wr_set_mkey_access_flags = on_set_access;
    fake.mqp.wr_set_mkey_layout_list = on_set_layout;

    mr.addr = reinterpret_cast<void*>(kMrAddr);
    mr.length = 1 << 20;
    mr.lkey = 0x5500;
    mrs.add(&mr);
    mkey.lkey = mkey.rkey = make_rkey(0x4242, 0x00);  // as mlx5dv_create_mkey leaves it
    fmr = std::make_unique<Mlx5FastMr>(&pd, &mkey, 16, 1, no_destroy);
    builder = std::make_unique<UmrBuilder>(&fake.mqp, &pd, &mrs, GetParam(), kPage);
    sq.init(8);
    q.qpx = &fake.qpx;
    q.sq = &sq;
    q.st = &st;
    q.reg = builder.get();
    q.max_sge = 4;
    q.qp_index = kQpIndex;
    q.gen = kGen;
    q.local_inv = true;
    q.send_inv = true;
  }
  void TearDown() override { g_fake = nullptr; }

  static uint64_t verbs_id(uint32_t seq) { return verbs::encode_wr_id(kGen, kQpIndex, false, seq); }

  SendWr reg_wr(uint64_t id, uint64_t off, uint64_t len, uint32_t access, uint32_t rkey) {
    SendWr w;
    w.wr_id = id;
    w.opcode = rdma::WrOpcode::kRegMr;
    w.reg.mr = fmr.get();
    w.reg.addr = kMrAddr + off;
    w.reg.length = len;
    w.reg.lkey = mr.lkey;
    w.reg.access = access;
    w.reg.rkey = rkey;
    return w;
  }
  SendWr send_wr(uint64_t id, bool signaled = true) {
    SendWr w;
    w.wr_id = id;
    w.opcode = rdma::WrOpcode::kSend;
    w.sg_list = &msg;
    w.num_sge = 1;
    w.flags = signaled ? rdma::kWrSignaled : 0;
    return w;
  }
  SendWr inv_wr(uint64_t id, rdma::WrOpcode op, uint32_t rkey, bool signaled) {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.invalidate_rkey = rkey;
    w.flags = signaled ? rdma::kWrSignaled : 0;
    if (op == rdma::WrOpcode::kSendWithInv) {
      w.sg_list = &msg;
      w.num_sge = 1;
    }
    return w;
  }
  int post(std::vector<SendWr> wrs, int* err) {
    fake.calls.clear();
    return verbs::post_send_wr_api(q, wrs.data(), static_cast<int>(wrs.size()), err);
  }
  // The registration call(s) of one UMR, checked against what the kRegMr asked.
  void expect_umr(const std::vector<Call>& c, size_t at, uint64_t wr_id, unsigned flags, uint32_t rkey,
                  uint32_t access, const ibv_sge& want) {
    ASSERT_LT(at, c.size());
    const Call& u = c[at];
    EXPECT_EQ(u.wr_id, wr_id);
    EXPECT_EQ(u.wr_flags, flags | IBV_SEND_INLINE) << "UMR entries travel inline: IBV_SEND_INLINE is required";
    EXPECT_EQ(u.mkey, &mkey);
    EXPECT_EQ(u.key, rkey) << "the mkey's lkey carries the new key byte into the UMR";
    EXPECT_EQ(u.mkey_rkey, rkey);
    const std::vector<ibv_sge>* sge = &u.sge;
    uint32_t got_access = u.access;
    if (GetParam() == UmrMode::kMkeyConfigure) {
      ASSERT_LT(at + 2, c.size());
      EXPECT_EQ(u.setters, 2u) << "two setters follow mlx5dv_wr_mkey_configure";
      EXPECT_EQ(c[at + 1].op, "set_access");
      EXPECT_EQ(c[at + 2].op, "set_layout");
      got_access = c[at + 1].access;
      sge = &c[at + 2].sge;
    }
    EXPECT_EQ(got_access, access);
    ASSERT_EQ(sge->size(), 1u);
    EXPECT_EQ((*sge)[0].addr, want.addr);
    EXPECT_EQ((*sge)[0].length, want.length);
    EXPECT_EQ((*sge)[0].lkey, want.lkey);
  }
  std::vector<std::string> umr_ops() const {
    if (GetParam() == UmrMode::kMrList) return {"mr_list"};
    return {"mkey_configure", "set_access", "set_layout"};
  }
  std::vector<std::string> seq(std::initializer_list<std::vector<std::string>> parts) const {
    std::vector<std::string> v;
    for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
    return v;
  }

  FakeQp fake;
  ibv_pd pd{};
  ibv_mr mr{};
  verbs::MrTable mrs;
  mlx5dv_mkey mkey{};
  std::unique_ptr<Mlx5FastMr> fmr;
  std::unique_ptr<UmrBuilder> builder;
  verbs::ShadowRing sq;
  verbs::VerbsQpStats st;
  verbs::WrApiQueue q;
  rdma::Sge msg{0x1000, 64, 0x6600};
};
INSTANTIATE_TEST_SUITE_P(Mlx5, UmrChainTest, ::testing::Values(UmrMode::kMrList, UmrMode::kMkeyConfigure),
                         [](const auto& p) { return std::string(p.param == UmrMode::kMrList ? "MrList" : "MkeyConfigure"); });

TEST_P(UmrChainTest, RegMrThenSendIsOneSequence) {
  const uint32_t rkey = fmr->bump_rkey();
  int err = -1;
  ASSERT_EQ(post({reg_wr(11, 100, 2 * kPage, kAccessRemoteWrite | kAccessRemoteRead, rkey), send_wr(12)}, &err), 2);
  EXPECT_EQ(err, 0);
  const auto& c = fake.calls;
  ASSERT_EQ(ops(c), seq({{"start"}, umr_ops(), {"send", "sge_list", "complete"}}));
  expect_umr(c, 1, verbs_id(0), 0, rkey, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
             ibv_sge{kMrAddr + 100, 2 * kPage, mr.lkey});
  const Call& s = c[1 + umr_ops().size()];
  EXPECT_EQ(s.wr_id, verbs_id(1));
  EXPECT_EQ(s.wr_flags, unsigned{IBV_SEND_SIGNALED}) << "the SEND is signaled and not inline";
  ASSERT_EQ(c[2 + umr_ops().size()].sge.size(), 1u);
  EXPECT_EQ(c[2 + umr_ops().size()].sge[0].addr, msg.addr);
  // The mkey now answers to the advertised rkey; the shadow ring maps the
  // completions back to the caller's ids.
  EXPECT_EQ(mkey.lkey, rkey);
  EXPECT_EQ(mkey.rkey, rkey);
  EXPECT_EQ(fmr->rkey(), rkey);
  EXPECT_EQ(sq.tail, 2u);
  EXPECT_EQ(sq.at(0).wr_id, 11u);
  EXPECT_EQ(sq.at(0).opcode, rdma::WcOpcode::kRegMr);
  EXPECT_FALSE(sq.at(0).signaled);
  EXPECT_EQ(sq.at(1).wr_id, 12u);
  EXPECT_TRUE(sq.at(1).signaled);
  EXPECT_EQ(st.reg_mr.get(), 1u);
  EXPECT_EQ(st.doorbells.get(), 1u);
}

TEST_P(UmrChainTest, SignaledRegMrKeepsItsFlag) {
  const uint32_t rkey = fmr->bump_rkey();
  SendWr w = reg_wr(5, 0, kPage, kAccessRemoteRead, rkey);
  w.flags = rdma::kWrSignaled;
  int err = -1;
  ASSERT_EQ(post({w}, &err), 1);
  expect_umr(fake.calls, 1, verbs_id(0), IBV_SEND_SIGNALED, rkey, IBV_ACCESS_REMOTE_READ,
             ibv_sge{kMrAddr, kPage, mr.lkey});
}

TEST_P(UmrChainTest, LocalInvTargetsTheMkeysCurrentRkey) {
  const uint32_t rkey = fmr->bump_rkey();
  int err = -1;
  ASSERT_EQ(post({reg_wr(1, 0, kPage, kAccessRemoteWrite, rkey), send_wr(2)}, &err), 2);
  ASSERT_EQ(post({inv_wr(3, rdma::WrOpcode::kLocalInv, fmr->rkey(), true)}, &err), 1);
  ASSERT_EQ(ops(fake.calls), (std::vector<std::string>{"start", "local_inv", "complete"}));
  EXPECT_EQ(fake.calls[1].key, rkey);
  EXPECT_EQ(fake.calls[1].key, mkey.rkey) << "LOCAL_INV names the mkey by the rkey its last UMR gave it";
  EXPECT_EQ(fake.calls[1].wr_id, verbs_id(2));
  EXPECT_EQ(fake.calls[1].wr_flags, unsigned{IBV_SEND_SIGNALED});
  EXPECT_EQ(sq.at(2).opcode, rdma::WcOpcode::kLocalInv);
}

TEST_P(UmrChainTest, InvalidateAndReRegisterInOneChain) {
  const uint32_t old_key = fmr->bump_rkey();
  int err = -1;
  ASSERT_EQ(post({reg_wr(1, 0, kPage, kAccessRemoteWrite, old_key)}, &err), 1);
  const uint32_t new_key = fmr->bump_rkey();
  ASSERT_NE(new_key, old_key);
  ASSERT_EQ(post({inv_wr(2, rdma::WrOpcode::kLocalInv, old_key, false),
                  reg_wr(3, kPage, kPage, kAccessRemoteRead, new_key), send_wr(4)},
                 &err),
            3);
  const auto& c = fake.calls;
  ASSERT_EQ(ops(c), seq({{"start", "local_inv"}, umr_ops(), {"send", "sge_list", "complete"}}));
  EXPECT_EQ(c[1].key, old_key) << "the old registration is invalidated by its own rkey";
  expect_umr(c, 2, verbs_id(2), 0, new_key, IBV_ACCESS_REMOTE_READ, ibv_sge{kMrAddr + kPage, kPage, mr.lkey});
  EXPECT_EQ(mkey.rkey, new_key);
}

TEST_P(UmrChainTest, SendWithInvCarriesTheRkey) {
  const uint32_t peer_rkey = make_rkey(0x777, 0x42);
  int err = -1;
  ASSERT_EQ(post({inv_wr(9, rdma::WrOpcode::kSendWithInv, peer_rkey, true)}, &err), 1);
  ASSERT_EQ(ops(fake.calls), (std::vector<std::string>{"start", "send_inv", "sge_list", "complete"}));
  EXPECT_EQ(fake.calls[1].key, peer_rkey);
  EXPECT_EQ(fake.calls[1].wr_flags, unsigned{IBV_SEND_SIGNALED});
  EXPECT_EQ(sq.at(0).opcode, rdma::WcOpcode::kSend) << "SEND_WITH_INV completes as a SEND";
  EXPECT_EQ(st.send_inv.get(), 1u);
}

TEST_P(UmrChainTest, RefusedRegMrPostsNothingAndChangesNoKey) {
  const uint32_t before = mkey.lkey;
  const uint32_t rkey = fmr->bump_rkey();
  int err = 0;
  // One page past the end of the MR.
  EXPECT_EQ(post({reg_wr(1, (1 << 20) - kPage, 2 * kPage, kAccessRemoteWrite, rkey), send_wr(2)}, &err), 0);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(builder->last_refusal(), UmrRefusal::kOutsideSource);
  EXPECT_EQ(ops(fake.calls), (std::vector<std::string>{"start", "abort"}));
  EXPECT_EQ(mkey.lkey, before);
  EXPECT_EQ(sq.tail, 0u);
  EXPECT_EQ(st.doorbells.get(), 0u);
}

TEST_P(UmrChainTest, ChainIsAcceptedFromTheFront) {
  const uint32_t k1 = fmr->bump_rkey();
  int err = 0;
  SendWr bad = reg_wr(3, 0, 17 * kPage, kAccessRemoteWrite, k1);  // deeper than the FastMr's 16 pages
  EXPECT_EQ(post({reg_wr(1, 0, kPage, kAccessRemoteWrite, k1), send_wr(2), bad}, &err), 2);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(builder->last_refusal(), UmrRefusal::kTooDeep);
  EXPECT_EQ(ops(fake.calls), seq({{"start"}, umr_ops(), {"send", "sge_list", "complete"}}))
      << "what came before the malformed WR is posted, as one doorbell";
  EXPECT_EQ(mkey.lkey, k1);
}

TEST_P(UmrChainTest, FailedCompleteRestoresKeysAndSlots) {
  const uint32_t k0 = mkey.lkey;
  const uint32_t k1 = fmr->bump_rkey();
  const uint32_t k2 = fmr->bump_rkey();
  fake.complete_rc = ENOMEM;  // the provider found the send queue full
  int err = 0;
  EXPECT_EQ(post({reg_wr(1, 0, kPage, kAccessRemoteWrite, k1), inv_wr(2, rdma::WrOpcode::kLocalInv, k1, false),
                  reg_wr(3, 0, kPage, kAccessRemoteWrite, k2), send_wr(4)},
                 &err),
            0);
  EXPECT_EQ(err, EAGAIN);
  EXPECT_EQ(mkey.lkey, k0) << "nothing was posted: the mkey keeps the key the device knows";
  EXPECT_EQ(mkey.rkey, k0);
  EXPECT_EQ(sq.tail, 0u);
  // The same chain goes through once the queue has room.
  fake.complete_rc = 0;
  EXPECT_EQ(post({reg_wr(1, 0, kPage, kAccessRemoteWrite, k2), send_wr(4)}, &err), 2);
  EXPECT_EQ(mkey.lkey, k2);
}

TEST_P(UmrChainTest, FullSendQueueAcceptsWhatFits) {
  sq.init(2);
  const uint32_t rkey = fmr->bump_rkey();
  int err = 0;
  EXPECT_EQ(post({reg_wr(1, 0, kPage, kAccessRemoteWrite, rkey), send_wr(2), send_wr(3)}, &err), 2);
  EXPECT_EQ(err, EAGAIN);
  EXPECT_EQ(st.sq_full.get(), 1u);
}

TEST_P(UmrChainTest, FastMrOfAnotherPdIsRefused) {
  ibv_pd other{};
  mlx5dv_mkey other_key{make_rkey(0x99, 0), make_rkey(0x99, 0)};
  Mlx5FastMr foreign(&other, &other_key, 16, 1, no_destroy);
  SendWr w = reg_wr(1, 0, kPage, kAccessRemoteWrite, foreign.bump_rkey());
  w.reg.mr = &foreign;
  int err = 0;
  EXPECT_EQ(post({w}, &err), 0);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(builder->last_refusal(), UmrRefusal::kWrongMkey);
  EXPECT_EQ(other_key.lkey, make_rkey(0x99, 0));
}

TEST_P(UmrChainTest, UnknownLkeyIsRefused) {
  SendWr w = reg_wr(1, 0, kPage, kAccessRemoteWrite, fmr->bump_rkey());
  w.reg.lkey = 0xdead00;
  int err = 0;
  EXPECT_EQ(post({w}, &err), 0);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(builder->last_refusal(), UmrRefusal::kNoSource);
}

#endif  // HAVE_MLX5DV_UMR

}  // namespace
}  // namespace tern::mlx5
