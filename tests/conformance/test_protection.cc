// Memory protection: the owner of memory validates every remote access against
// its MR table; a bad rkey, range or access right is a remote access error for
// the initiator, nothing is written, the initiator's QP goes to error and every
// outstanding WR after it flushes in order. Local SGEs are checked too.
#include <cstring>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

constexpr uint8_t kUntouched = 0x5A;
constexpr size_t kPage = 4096;

class ProtectionTest : public ConnectedTest {
 protected:
  void SetUp() override {
    ConnectedTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    // Server memory: four pages. The middle two are the target MR; the outer
    // ones are registered separately (with every right), so an access that
    // strays out of the target MR lands in memory another MR would allow.
    region = server.carve(4 * kPage);
    ASSERT_NE(region, nullptr);
    std::memset(region, kUntouched, 4 * kPage);
    Mr* lo = nullptr;
    Mr* hi = nullptr;
    ASSERT_TRUE(server.reg(region, kPage, kAccessAll, &lo));
    ASSERT_TRUE(server.reg(region + kPage, 2 * kPage, kAccessAll, &target));
    ASSERT_TRUE(server.reg(region + 3 * kPage, kPage, kAccessAll, &hi));
    ASSERT_TRUE(client.alloc(4 * kPage, kAccessLocalWrite, &src));
    fill_pattern(src.p, src.len, 77);
    ASSERT_TRUE(client.alloc(4 * kPage, kAccessLocalWrite, &sink));
    ASSERT_TRUE(client.alloc(2 * 256, kAccessLocalWrite, &rbuf));
    rs[0] = rbuf.sge(0, 256);
    rs[1] = rbuf.sge(256, 256);
    // Outstanding receives on the initiator: they must flush with the QP.
    ASSERT_TRUE(client.post_recv({wr_recv(50, &rs[0], 1), wr_recv(51, &rs[1], 1)}));
  }

  uint64_t target_addr(size_t off = 0) const { return target->addr() + off; }

  // Posts [bad (wr_id 1, signaled), a valid WRITE into the target (2,
  // unsignaled), a SEND (3, signaled)] and checks that `bad` fails with
  // `status`, that 2 and 3 flush in order and never execute, that the
  // initiator's receives flush, and that no server memory changed.
  void expect_failure(SendWr bad, WcStatus status) {
    bad.wr_id = 1;
    bad.flags = kWrSignaled;
    later[0] = src.sge(0, 64);
    later[1] = src.sge(64, 16);
    ASSERT_TRUE(client.post_send({bad, wr_write(2, &later[0], 1, target_addr(0), target->rkey(), false),
                                  wr_send(3, &later[1], 1)}));
    std::vector<Wc> s, r;
    ASSERT_TRUE(poller.wait_send(client, 3, &s));
    EXPECT_TRUE(failed_with(caps(), s[0], 1, status)) << "the bad WR";
    EXPECT_TRUE(all_flushed({s[1], s[2]}, {2, 3})) << "WRs after the failed one (the unsignaled included)";
    ASSERT_TRUE(poller.wait_recv(client, 2, &r));
    EXPECT_TRUE(all_flushed(r, {50, 51})) << "the initiator's outstanding receives";
    EXPECT_EQ(client.qp->state(), QpState::kError);
    EXPECT_TRUE(poller.wait_disconnected(client)) << "a QP that went to error is reported once";
    EXPECT_TRUE(check_filled(region, 4 * kPage, kUntouched, "server memory after the refused access"));
    EXPECT_TRUE(server.recv_wcs.empty()) << server.describe();
  }

  void expect_remote_access_error(const SendWr& bad) { expect_failure(bad, WcStatus::kRemAccessErr); }

  // A WRITE or READ of `len` bytes at `raddr` under `rkey`.
  SendWr write(uint64_t raddr, uint32_t len, uint32_t rkey) {
    write_sge = src.sge(0, len);
    return wr_write(1, &write_sge, 1, raddr, rkey);
  }
  SendWr read(uint64_t raddr, uint32_t len, uint32_t rkey) {
    read_sge = sink.sge(0, len);
    return wr_read(1, &read_sge, 1, raddr, rkey);
  }

  // An rkey no MR on the server has: an index far from any in use.
  uint32_t unknown_rkey() const {
    uint32_t idx = rkey_index(target->rkey()) ^ 0xABCDEu;
    return make_rkey(idx, rkey_key(target->rkey()));
  }
  uint32_t stale_rkey() const {
    return make_rkey(rkey_index(target->rkey()), static_cast<uint8_t>(rkey_key(target->rkey()) + 1));
  }

  uint8_t* region = nullptr;
  Mr* target = nullptr;
  Buf src, sink, rbuf;
  Sge rs[2], later[2], write_sge, read_sge, bad_sge;
};
TERN_CONFORMANCE_SUITE(ProtectionTest);

TEST_P(ProtectionTest, ExactBoundsAreAllowed) {
  // The positive control for the range checks below: first byte, last byte,
  // and the whole MR, by WRITE and READ.
  for (auto [off, len] : {std::pair<size_t, uint32_t>{0, 1}, {2 * kPage - 1, 1}, {0, 2 * kPage}}) {
    SCOPED_TRACE("offset " + std::to_string(off) + " length " + std::to_string(len));
    SendWr w = write(target_addr(off), len, target->rkey());
    SendWr r = read(target_addr(off), len, target->rkey());
    r.wr_id = 2;
    ASSERT_TRUE(client.post_send({w, r}));
    std::vector<Wc> s;
    ASSERT_TRUE(poller.wait_send(client, 2, &s));
    ASSERT_TRUE(wc_is(s[0], 1, WcStatus::kSuccess, WcOpcode::kRdmaWrite));
    ASSERT_TRUE(wc_is(s[1], 2, WcStatus::kSuccess, WcOpcode::kRdmaRead));
    EXPECT_EQ(std::memcmp(region + kPage + off, src.p, len), 0);
    EXPECT_EQ(std::memcmp(sink.p, src.p, len), 0);
  }
  EXPECT_TRUE(check_filled(region, kPage, kUntouched, "page before the MR"));
  EXPECT_TRUE(check_filled(region + 3 * kPage, kPage, kUntouched, "page after the MR"));
}

TEST_P(ProtectionTest, WriteWithUnknownRkey) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(target_addr(0), 64, unknown_rkey())));
}

TEST_P(ProtectionTest, ReadWithUnknownRkey) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(read(target_addr(0), 64, unknown_rkey())));
}

TEST_P(ProtectionTest, WriteWithStaleKeyByte) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(target_addr(0), 64, stale_rkey())));
}

TEST_P(ProtectionTest, ReadWithStaleKeyByte) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(read(target_addr(0), 64, stale_rkey())));
}

TEST_P(ProtectionTest, WritePastTheEndOfTheMr) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(target_addr(2 * kPage - 8), 16, target->rkey())));
}

TEST_P(ProtectionTest, WriteStartingBeforeTheMr) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(target_addr(0) - 8, 16, target->rkey())));
}

TEST_P(ProtectionTest, WriteEntirelyOutsideTheMr) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(target_addr(3 * kPage), 16, target->rkey())));
}

TEST_P(ProtectionTest, ReadPastTheEndOfTheMr) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(read(target_addr(2 * kPage - 8), 16, target->rkey())));
}

TEST_P(ProtectionTest, ReadStartingBeforeTheMr) {
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(read(target_addr(0) - 1, 2, target->rkey())));
}

TEST_P(ProtectionTest, WriteAtAnAddressThatWrapsAround) {
  // addr + len overflows 64 bits: a range check written as `addr + len <= end`
  // would let this through.
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(UINT64_MAX - 7, 16, target->rkey())));
}

TEST_P(ProtectionTest, WriteWithoutRemoteWriteRight) {
  Mr* ro = nullptr;
  ASSERT_TRUE(server.reg(region + kPage, kPage, kAccessLocalWrite | kAccessRemoteRead, &ro));
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(ro->addr(), 64, ro->rkey())));
}

TEST_P(ProtectionTest, ReadWithoutRemoteReadRight) {
  Mr* wo = nullptr;
  ASSERT_TRUE(server.reg(region + kPage, kPage, kAccessLocalWrite | kAccessRemoteWrite, &wo));
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(read(wo->addr(), 64, wo->rkey())));
}

TEST_P(ProtectionTest, AccessAfterDeregistration) {
  Mr* gone = nullptr;
  ASSERT_TRUE(server.reg(region + kPage, kPage, kAccessAll, &gone));
  const uint32_t rkey = gone->rkey();
  const uint64_t addr = gone->addr();
  // It works while registered...
  SendWr ok = write(addr, 64, rkey);
  ASSERT_TRUE(client.post_send({ok}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(client, &wc));
  ASSERT_TRUE(wc_is(wc, 1, WcStatus::kSuccess));
  std::memset(region + kPage, kUntouched, 64);
  // ...and not once the owner has dropped the MR.
  ASSERT_EQ(server.mrs.back().get(), gone);
  server.mrs.pop_back();
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(addr, 64, rkey)));
}

TEST_P(ProtectionTest, RkeyOfAnotherProtectionDomain) {
  auto pd2 = server.dev->alloc_pd();
  ASSERT_TRUE(pd2.is_ok()) << to_string(pd2.status());
  auto other = (*pd2)->reg_mr(region + kPage, kPage, kAccessAll);
  ASSERT_TRUE(other.is_ok()) << to_string(other.status());
  SendWr bad = write((*other)->addr(), 64, (*other)->rkey());
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(bad));
}

// ---- long-lived registrations without remote rights

TEST_P(ProtectionTest, LocalOnlyMrIsUnreachableWhateverKeyIsNamed) {
  Mr* local = nullptr;
  ASSERT_TRUE(server.reg(region + kPage, kPage, kAccessLocalWrite, &local));
  EXPECT_EQ(local->rkey(), 0u) << "a registration without remote rights advertises no rkey";
  // Its lkey is the one value a peer might hope is also an rkey.
  ASSERT_NO_FATAL_FAILURE(expect_remote_access_error(write(local->addr(), 64, local->lkey())));
}

// ---- local protection: the initiator's own SGEs

TEST_P(ProtectionTest, SendWithUnknownLkey) {
  bad_sge = src.sge(0, 64);
  bad_sge.lkey = src.lkey() ^ 0x00ABCD00u;
  ASSERT_NO_FATAL_FAILURE(expect_failure(wr_send(1, &bad_sge, 1), WcStatus::kLocProtErr));
}

TEST_P(ProtectionTest, WriteFromOutsideTheLocalMr) {
  bad_sge = src.sge(src.len - 32, 64);  // runs 32 bytes past the local MR
  SendWr w = wr_write(1, &bad_sge, 1, target_addr(0), target->rkey());
  ASSERT_NO_FATAL_FAILURE(expect_failure(w, WcStatus::kLocProtErr));
}

TEST_P(ProtectionTest, ReadIntoMrWithoutLocalWrite) {
  Buf ro;
  ASSERT_TRUE(client.alloc(kPage, 0, &ro));  // local read only
  bad_sge = ro.sge(0, 64);
  SendWr r = wr_read(1, &bad_sge, 1, target_addr(0), target->rkey());
  ASSERT_NO_FATAL_FAILURE(expect_failure(r, WcStatus::kLocProtErr));
  EXPECT_TRUE(check_filled(ro.p, 64, 0, "read sink without local write"));
}

TEST_P(ProtectionTest, ReceiveWithUnknownLkey) {
  Buf dst;
  ASSERT_TRUE(server.alloc(kPage, kAccessLocalWrite, &dst));
  Sge r = dst.sge();
  r.lkey ^= 0x00ABCD00u;
  ASSERT_TRUE(server.post_recv({wr_recv(9, &r, 1)}));
  Sge s = src.sge(0, 64);
  ASSERT_TRUE(client.post_send({wr_send(1, &s, 1)}));
  Wc rw, sw;
  ASSERT_TRUE(poller.wait_recv1(server, &rw));
  EXPECT_TRUE(failed_with(caps(), rw, 9, WcStatus::kLocProtErr)) << "receiver";
  ASSERT_TRUE(poller.wait_send1(client, &sw));
  EXPECT_TRUE(is_real_error(sw, 1)) << "the sender must learn that its SEND failed";
  EXPECT_TRUE(check_filled(dst.p, dst.len, 0, "receive buffer"));
  EXPECT_TRUE(poller.wait_disconnected(server));
  EXPECT_TRUE(poller.wait_disconnected(client));
}

}  // namespace
}  // namespace tern::conformance
