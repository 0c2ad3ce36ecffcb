// Fast registration (REG_MR / LOCAL_INV) and remote invalidation
// (SEND_WITH_INV). The server owns the fast MR over its long-lived "backing"
// buffer and announces it to the client with a SEND chained behind the REG_MR,
// as an RPC-over-RDMA requester does; the client reads and writes through it.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

constexpr uint8_t kUntouched = 0x5A;

class FastRegTest : public ConnectedTest {
 protected:
  void SetUp() override {
    ConnectedTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    TERN_SKIP_UNLESS_CAP(fast_reg);
    pg = caps().fast_reg_page_size;
    // Local write only: any remote access must come through a fast MR.
    ASSERT_TRUE(server.alloc(kBackingPages * pg, kAccessLocalWrite, &backing, pg));
    std::memset(backing.p, kUntouched, backing.len);
    ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &msg));
    ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &srecv));
    ASSERT_TRUE(client.alloc(kBackingPages * pg, kAccessLocalWrite, &src));
    ASSERT_TRUE(client.alloc(kBackingPages * pg, kAccessLocalWrite, &sink));
    ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &crecv));
    ASSERT_TRUE(server.alloc_fast_mr(std::min<uint32_t>(4, caps().max_fast_reg_depth), &fmr));
    // Two pages where the device allows, so that registrations span a page boundary.
    span = std::min<uint32_t>(2, fmr->max_depth()) * pg;
  }

  // The server posts prefix + [REG_MR of backing[off, off+len) under a fresh
  // rkey (unsignaled), SEND (signaled) carrying it]; the client receives it.
  // The SEND's completion is the only one the server may see.
  AssertionResult announce(size_t off, size_t len, uint32_t access, RemoteBuf* out,
                           std::vector<SendWr> prefix = {}) {
    Sge rs = crecv.sge(0, sizeof(RemoteBuf));
    if (auto r = client.post_recv({wr_recv(700 + seq, &rs, 1)}); !r) return r;
    uint32_t rkey = fmr->bump_rkey();
    // The address the peer uses: the memory's own, or 0 on a device whose
    // registrations are zero-based (DeviceCaps::fast_reg_zero_based).
    RemoteBuf rb{caps().fast_reg_zero_based ? 0 : backing.addr(off), rkey, static_cast<uint32_t>(len)};
    local_of[rkey] = backing.p + off;
    std::memcpy(msg.p, &rb, sizeof rb);
    announce_sge = msg.sge(0, sizeof rb);
    prefix.push_back(wr_reg(600 + seq, fmr, backing, off, len, access, rkey));
    prefix.push_back(wr_send(800 + seq, &announce_sge, 1));
    if (auto r = server.post_send(prefix); !r) return r;
    Wc s, c;
    if (auto r = poller.wait_send1(server, &s); !r) return r;
    if (auto r = wc_is(s, 800 + seq, WcStatus::kSuccess, WcOpcode::kSend); !r)
      return r << " (the announcing SEND; any earlier completion would be an unsignaled WR's)";
    if (auto r = poller.wait_recv1(client, &c); !r) return r;
    if (auto r = wc_is(c, 700 + seq, WcStatus::kSuccess, WcOpcode::kRecv); !r) return r;
    std::memcpy(out, crecv.p, sizeof *out);
    ++seq;
    return AssertionSuccess();
  }

  // The client WRITEs (or READs) `len` bytes at rb.addr + off through rb.rkey.
  AssertionResult client_access(bool is_write, const RemoteBuf& rb, int64_t off, uint32_t len, uint32_t seed,
                                Wc* wc) {
    if (is_write) fill_pattern(src.p, len, seed);
    io_sge = is_write ? src.sge(0, len) : sink.sge(0, len);
    uint64_t raddr = rb.addr + off;
    SendWr w = is_write ? wr_write(900 + seq, &io_sge, 1, raddr, rb.rkey) : wr_read(900 + seq, &io_sge, 1, raddr, rb.rkey);
    ++seq;
    if (auto r = client.post_send({w}); !r) return r;
    return poller.wait_send1(client, wc);
  }

  // The client SENDs `len` bytes WITH_INV naming `rkey` into a receive (id
  // 30) the server posts first; *r and *s get the two completions.
  AssertionResult send_with_invalidate(uint32_t rkey, uint32_t len, Wc* r, Wc* s) {
    inv_rsge = srecv.sge(0, 256);
    if (auto a = server.post_recv({wr_recv(30, &inv_rsge, 1)}); !a) return a;
    inv_ssge = src.sge(0, len);
    SendWr inv = wr_send(31, &inv_ssge, 1);
    inv.opcode = WrOpcode::kSendWithInv;
    inv.invalidate_rkey = rkey;
    if (auto a = client.post_send({inv}); !a) return a;
    if (auto a = poller.wait_recv1(server, r); !a) return a;
    return poller.wait_send1(client, s);
  }

  // Access through rb must work (and the data must land / be read back).
  void expect_access_ok(bool is_write, const RemoteBuf& rb, uint32_t len, uint32_t seed) {
    Wc wc;
    ASSERT_TRUE(client_access(is_write, rb, 0, len, seed, &wc));
    ASSERT_EQ(wc.status, WcStatus::kSuccess) << to_string(wc);
    const uint8_t* at = local_of.at(rb.rkey);
    if (is_write)
      EXPECT_TRUE(check_pattern(at, len, seed, "data written through the fast MR"));
    else
      EXPECT_EQ(std::memcmp(sink.p, at, len), 0) << "data read through the fast MR";
  }

  // Access through rb must be refused, with nothing written on the server.
  void expect_access_refused(bool is_write, const RemoteBuf& rb, int64_t off, uint32_t len) {
    std::vector<uint8_t> before(backing.p, backing.p + backing.len);
    Wc wc;
    ASSERT_TRUE(client_access(is_write, rb, off, len, 4242, &wc));
    EXPECT_EQ(wc.status, WcStatus::kRemAccessErr) << to_string(wc);
    EXPECT_EQ(client.qp->state(), QpState::kError);
    EXPECT_TRUE(poller.wait_disconnected(client)) << "a QP that went to error is reported once";
    EXPECT_EQ(std::memcmp(before.data(), backing.p, backing.len), 0) << "a refused access changed server memory";
  }

  Sge inv_rsge, inv_ssge;  // live until the WRs complete
  static constexpr uint32_t kBackingPages = 8;
  uint32_t pg = 4096;
  uint32_t span = 4096;  // bytes one registration covers in most tests
  uint32_t seq = 0;
  Buf backing, msg, srecv, src, sink, crecv;
  Sge announce_sge, io_sge;
  FastMr* fmr = nullptr;
  std::map<uint32_t, const uint8_t*> local_of;  // announced rkey -> the server memory it maps
};
TERN_CONFORMANCE_SUITE(FastRegTest);

constexpr uint32_t kRemoteRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;

TEST_P(FastRegTest, RegisteredMrIsUsableByThePeer) {
  RemoteBuf rb;
  ASSERT_TRUE(announce(pg, span, kRemoteRw, &rb));
  EXPECT_EQ(rb.rkey, fmr->rkey());
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, rb, span, 1));
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(false, rb, span, 0));
  EXPECT_TRUE(check_filled(backing.p, pg, kUntouched, "page before the registration"));
  EXPECT_TRUE(check_filled(backing.p + pg + span, backing.len - pg - span, kUntouched, "pages after it"));
  poller.settle();
  EXPECT_TRUE(server.send_wcs.empty()) << "the unsignaled REG_MR completed: " << server.describe();
}

TEST_P(FastRegTest, LocalInvalidateRevokesAccess) {
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &rb));
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, rb, pg, 2));
  ASSERT_TRUE(server.post_send({wr_local_inv(5, rb.rkey)}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(server, &wc));
  ASSERT_TRUE(wc_is(wc, 5, WcStatus::kSuccess, WcOpcode::kLocalInv));
  ASSERT_NO_FATAL_FAILURE(expect_access_refused(true, rb, 0, 64));
}

TEST_P(FastRegTest, ReRegistrationRejectsTheOldKey) {
  RemoteBuf old_rb, new_rb;
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &old_rb));
  ASSERT_TRUE(server.post_send({wr_local_inv(5, old_rb.rkey)}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(server, &wc));
  ASSERT_TRUE(wc_is(wc, 5, WcStatus::kSuccess, WcOpcode::kLocalInv));
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &new_rb));  // same memory, bumped key
  ASSERT_EQ(rkey_index(new_rb.rkey), rkey_index(old_rb.rkey));
  ASSERT_NE(rkey_key(new_rb.rkey), rkey_key(old_rb.rkey));
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, new_rb, pg, 3));
  ASSERT_NO_FATAL_FAILURE(expect_access_refused(true, old_rb, 0, 64));
}

TEST_P(FastRegTest, InvalidateAndRegisterInOneChain) {
  // [LOCAL_INV, REG_MR, SEND] posted together, unsignaled but the SEND: SQ
  // order makes each registration valid by the time its SEND arrives.
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, span, kRemoteRw, &rb));
  for (uint32_t round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    RemoteBuf next;
    ASSERT_TRUE(announce((round % 4) * pg, span, kRemoteRw, &next, {wr_local_inv(5, rb.rkey, false)}));
    ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, next, span, 10 + round));
    ASSERT_NO_FATAL_FAILURE(expect_access_ok(false, next, span, 0));
    rb = next;
  }
  poller.settle();
  EXPECT_TRUE(server.send_wcs.empty()) << "unsignaled LOCAL_INV/REG_MR completed: " << server.describe();
}

TEST_P(FastRegTest, AccessRightsOfTheRegistrationAreEnforced) {
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, pg, kAccessLocalWrite | kAccessRemoteRead, &rb));
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(false, rb, pg, 0));
  ASSERT_NO_FATAL_FAILURE(expect_access_refused(true, rb, 0, 64));
}

TEST_P(FastRegTest, RangeOfTheRegistrationIsEnforced) {
  TERN_SKIP_UNLESS_CAP(fast_reg_bounds_enforced);
  RemoteBuf rb;
  ASSERT_TRUE(announce(pg, pg, kRemoteRw, &rb));  // backing is registered all round it
  ASSERT_NO_FATAL_FAILURE(expect_access_refused(true, rb, pg - 8, 16));
}

TEST_P(FastRegTest, RangeBeforeTheRegistrationIsEnforced) {
  TERN_SKIP_UNLESS_CAP(fast_reg_bounds_enforced);
  RemoteBuf rb;
  ASSERT_TRUE(announce(pg, pg, kRemoteRw, &rb));
  ASSERT_NO_FATAL_FAILURE(expect_access_refused(true, rb, -8, 16));
}

// A REG_MR that fails must produce a completion even though it is unsignaled
// (or be refused by post_send as malformed); the SEND behind it flushes.
void expect_reg_failure(Side& server, Poller& poller, std::vector<SendWr> chain, uint64_t reg_id,
                        uint64_t send_id) {
  int err = 0;
  int n = server.qp->post_send(chain.data(), static_cast<int>(chain.size()), &err);
  if (n == 0) {
    EXPECT_EQ(err, EINVAL) << "a refused REG_MR must be refused as malformed: " << std::strerror(err);
    return;
  }
  ASSERT_EQ(n, static_cast<int>(chain.size())) << "err " << err;
  std::vector<Wc> s;
  ASSERT_TRUE(poller.wait_send(server, 2, &s));
  EXPECT_TRUE(is_real_error(s[0], reg_id)) << "the failing REG_MR (unsignaled) must complete with an error";
  EXPECT_TRUE(s[0].status == WcStatus::kMwBindErr || s[0].status == WcStatus::kLocProtErr ||
              s[0].status == WcStatus::kLocLenErr)
      << "unexpected status for a bad registration: " << to_string(s[0]);
  EXPECT_TRUE(all_flushed({s[1]}, {send_id}));
  EXPECT_TRUE(poller.wait_disconnected(server)) << "a QP that went to error is reported once";
}

TEST_P(FastRegTest, RegistrationBeyondMaxDepthFails) {
  FastMr* small = nullptr;
  ASSERT_TRUE(server.alloc_fast_mr(1, &small));
  const uint32_t pages = small->max_depth() + 1;
  if (pages > kBackingPages) GTEST_SKIP() << "alloc_fast_mr(1) gave depth " << small->max_depth();
  Sge s = msg.sge(0, 8);
  ASSERT_NO_FATAL_FAILURE(expect_reg_failure(
      server, poller,
      {wr_reg(1, small, backing, 0, size_t(pages) * pg, kRemoteRw, small->bump_rkey()), wr_send(2, &s, 1)}, 1, 2));
}

TEST_P(FastRegTest, RegistrationOfAValidMrFails) {
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &rb));
  Sge s = msg.sge(0, 8);
  ASSERT_NO_FATAL_FAILURE(expect_reg_failure(
      server, poller, {wr_reg(1, fmr, backing, pg, pg, kRemoteRw, fmr->bump_rkey()), wr_send(2, &s, 1)}, 1,
      2));
}

TEST_P(FastRegTest, RegistrationOutsideTheBackingMrFails) {
  Sge s = msg.sge(0, 8);
  // Starts inside `backing`, ends one page past it.
  ASSERT_NO_FATAL_FAILURE(expect_reg_failure(
      server, poller,
      {wr_reg(1, fmr, backing, backing.len - pg, 2 * pg, kRemoteRw, fmr->bump_rkey()), wr_send(2, &s, 1)}, 1, 2));
}

TEST_P(FastRegTest, LocalInvalidateWithAStaleKeyFails) {
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &rb));
  uint32_t stale = make_rkey(rkey_index(rb.rkey), static_cast<uint8_t>(rkey_key(rb.rkey) - 1));
  ASSERT_TRUE(server.post_send({wr_local_inv(5, stale, false)}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(server, &wc));
  EXPECT_TRUE(failed_with(caps(), wc, 5, WcStatus::kMwBindErr)) << "LOCAL_INV of a stale rkey must fail, unsignaled or not";
  EXPECT_TRUE(poller.wait_disconnected(server)) << "a QP that went to error is reported once";
}

// ---- remote invalidation

TEST_P(FastRegTest, SendWithInvalidateInvalidatesAtTheReceiver) {
  TERN_SKIP_UNLESS_CAP(remote_invalidation);
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, span, kRemoteRw, &rb));
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, rb, span, 20));
  Wc r, s;
  ASSERT_TRUE(send_with_invalidate(rb.rkey, 32, &r, &s));
  EXPECT_TRUE(wc_is(r, 30, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_EQ(r.byte_len, 32u);
  EXPECT_TRUE(r.flags & kWcWithInv) << "a SEND_WITH_INV receive must say so: " << to_string(r);
  EXPECT_EQ(r.invalidated_rkey, rb.rkey);
  EXPECT_TRUE(wc_is(s, 31, WcStatus::kSuccess, WcOpcode::kSend));
  // Invalidated before the receive completed: the rkey is dead now.
  ASSERT_NO_FATAL_FAILURE(expect_access_refused(true, rb, 0, 64));
}

TEST_P(FastRegTest, RemotelyInvalidatedMrCanBeRegisteredAgain) {
  TERN_SKIP_UNLESS_CAP(remote_invalidation);
  RemoteBuf rb, again;
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &rb));
  Wc r, s;
  ASSERT_TRUE(send_with_invalidate(rb.rkey, 8, &r, &s));
  ASSERT_TRUE(wc_is(r, 30, WcStatus::kSuccess, WcOpcode::kRecv));
  // No LOCAL_INV needed: the MR is free, so a REG_MR (bumped key) succeeds
  // once it is retired, as every MR whose registration ended must be before
  // reuse (FastMr::retire: rxe re-keys the window; sim refuses it unretired).
  ASSERT_TRUE(fmr->retire());
  ASSERT_TRUE(announce(0, pg, kRemoteRw, &again));
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, again, pg, 21));
}

// A peer that names an rkey it was given, after the registration was
// invalidated (by its own earlier Send With Invalidate here): the receiver's
// device must refuse it (the receive fails), not invalidate anything again.
TEST_P(FastRegTest, SendWithInvalidateOfAnInvalidatedRkeyFails) {
  TERN_SKIP_UNLESS_CAP(remote_invalidation);
  if (std::getenv("TERN_CONFORMANCE_RXE_DOUBLE_INV") == nullptr && caps().name.find("rxe") != std::string::npos)
    GTEST_SKIP() << "rxe in Linux 6.1 may dereference a NULL QP on a second invalidation of a window "
                    "(docs/security.md); TERN_CONFORMANCE_RXE_DOUBLE_INV=1 runs it anyway";
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, span, kRemoteRw, &rb));
  Wc r, s;
  ASSERT_TRUE(send_with_invalidate(rb.rkey, 8, &r, &s));
  ASSERT_TRUE(wc_is(r, 30, WcStatus::kSuccess, WcOpcode::kRecv));
  ASSERT_TRUE(send_with_invalidate(rb.rkey, 8, &r, &s));
  EXPECT_NE(r.status, WcStatus::kSuccess) << "a second invalidation of the same rkey was accepted: " << to_string(r);
  EXPECT_NE(s.status, WcStatus::kSuccess) << to_string(s);
}

// ---- QP binding: a fast registration answers only on its own connection

// A second client of the same server device: its own QP on the server side,
// in the same PD as the first.
class FastRegTwoClientsTest : public FastRegTest {
 protected:
  void SetUp() override {
    FastRegTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_TRUE(other.open(spec));
    poller.add(&other);
    ASSERT_TRUE(server.create_qp(server.default_qp_init(), &server_qp2));
    ConnectOptions o;
    o.listen = false;  // the server listens already
    o.server_qp = server_qp2.get();
    ASSERT_TRUE(establish(poller, server, other, o));
    ASSERT_TRUE(other.alloc(kBackingPages * pg, kAccessLocalWrite, &other_buf));
  }
  void TearDown() override {
    server_qp2.reset();
    FastRegTest::TearDown();
  }
  // The other client READs or WRITEs through rb.
  AssertionResult other_access(bool is_write, const RemoteBuf& rb, uint32_t len, Wc* wc) {
    if (is_write) fill_pattern(other_buf.p, len, 99);
    other_sge = other_buf.sge(0, len);
    SendWr w = is_write ? wr_write(950, &other_sge, 1, rb.addr, rb.rkey) : wr_read(950, &other_sge, 1, rb.addr, rb.rkey);
    if (auto r = other.post_send({w}); !r) return r;
    return poller.wait_send1(other, wc);
  }
  Side other{"other client"};
  std::unique_ptr<Qp> server_qp2;
  Buf other_buf;
  Sge other_sge, osend_sge, orecv_sge;
};
TERN_CONFORMANCE_SUITE(FastRegTwoClientsTest);

TEST_P(FastRegTwoClientsTest, RegistrationIsUselessOnAnotherQp) {
  TERN_SKIP_UNLESS_CAP(fast_reg_qp_bound);
  for (bool is_write : {false, true}) {
    if (is_write) {
      // The refused READ cost the other client its connection: a new one.
      EXPECT_TRUE(poller.wait_disconnected(other));
      poller.settle();
      server.cm_events.clear();
      other.cm_events.clear();
      server_qp2.reset();
      other.qp.reset();
      ASSERT_TRUE(other.create_qp(other.default_qp_init(), &other.qp));
      ASSERT_TRUE(server.create_qp(server.default_qp_init(), &server_qp2));
      ConnectOptions o;
      o.listen = false;
      o.server_qp = server_qp2.get();
      ASSERT_TRUE(establish(poller, server, other, o));
    }
    RemoteBuf rb;
    ASSERT_TRUE(announce(pg, span, kRemoteRw, &rb));
    std::vector<uint8_t> before(backing.p, backing.p + backing.len);
    Wc wc;
    ASSERT_TRUE(other_access(is_write, rb, span, &wc));
    EXPECT_EQ(wc.status, WcStatus::kRemAccessErr)
        << (is_write ? "WRITE" : "READ") << " through a registration made on another QP: " << to_string(wc);
    EXPECT_EQ(std::memcmp(before.data(), backing.p, backing.len), 0) << "the other client changed server memory";
    // The client whose connection made it still can.
    ASSERT_NO_FATAL_FAILURE(expect_access_ok(true, rb, span, 30 + is_write));
    Wc inv;
    ASSERT_TRUE(server.post_send({wr_local_inv(70 + is_write, rb.rkey)}));
    ASSERT_TRUE(poller.wait_send1(server, &inv));
    ASSERT_EQ(inv.status, WcStatus::kSuccess) << to_string(inv);
  }
}

TEST_P(FastRegTwoClientsTest, SendWithInvalidateFromAnotherQpIsRefused) {
  TERN_SKIP_UNLESS_CAP(remote_inv_qp_bound);
  RemoteBuf rb;
  ASSERT_TRUE(announce(0, span, kRemoteRw, &rb));
  // The server posts a receive on the other connection; the other client
  // sends WITH_INV naming the first connection's rkey.
  orecv_sge = srecv.sge(0, 256);
  RecvWr rw = wr_recv(40, &orecv_sge, 1);
  int err = 0;
  ASSERT_EQ(server_qp2->post_recv(&rw, 1, &err), 1);
  osend_sge = other_buf.sge(0, 16);
  SendWr inv = wr_send(41, &osend_sge, 1);
  inv.opcode = WrOpcode::kSendWithInv;
  inv.invalidate_rkey = rb.rkey;
  ASSERT_TRUE(other.post_send({inv}));
  Wc r;
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  EXPECT_EQ(r.wr_id, 40u);
  EXPECT_NE(r.status, WcStatus::kSuccess) << "the receive of a foreign invalidation must fail: " << to_string(r);
  // The registration is still valid for its own connection.
  ASSERT_NO_FATAL_FAILURE(expect_access_ok(false, rb, span, 0));
}


}  // namespace
}  // namespace tern::conformance
