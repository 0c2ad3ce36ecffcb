// The datapath on a healthy connection: SEND/RECV, RDMA_WRITE/READ, signaling,
// ordering, and queue limits. The client initiates; the server is the target.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "conformance_fixture.h"

namespace tern::conformance {
namespace {

class DatapathTest : public ConnectedTest {};
TERN_CONFORMANCE_SUITE(DatapathTest);

constexpr uint8_t kSentinel = 0xEE;

TEST_P(DatapathTest, SendGathersAndRecvScatters) {
  const uint32_t ns = std::min<uint32_t>(3, client.qp->init().max_send_sge);
  const uint32_t nr = std::min<uint32_t>(3, server.qp->init().max_recv_sge);
  // Odd sizes and offsets so that no boundary lines up.
  const size_t send_len[3] = {7, 100, 1000}, send_off[3] = {1, 2000, 3333};
  const size_t recv_len[3] = {50, 500, 2000}, recv_off[3] = {0, 1024, 4096 + 5};
  Buf src, dst;
  ASSERT_TRUE(client.alloc(8192, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(8192, kAccessLocalWrite, &dst));
  std::memset(dst.p, kSentinel, dst.len);
  fill_pattern(src.p, src.len, 21);

  Sge rs[3];
  size_t recv_room = 0;
  for (uint32_t i = 0; i < nr; ++i) {
    size_t len = nr == 1 ? 4000 : recv_len[i];
    rs[i] = dst.sge(recv_off[i], len);
    recv_room += len;
  }
  Sge ss[3];
  std::vector<uint8_t> expect;
  for (uint32_t i = 0; i < ns; ++i) {
    ss[i] = src.sge(send_off[i], send_len[i]);
    expect.insert(expect.end(), src.p + send_off[i], src.p + send_off[i] + send_len[i]);
  }
  ASSERT_LE(expect.size(), recv_room);

  ASSERT_TRUE(server.post_recv({wr_recv(0xabc, rs, nr)}));
  ASSERT_TRUE(client.post_send({wr_send(0x123, ss, ns)}));

  Wc r, s;
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  ASSERT_TRUE(poller.wait_send1(client, &s));
  EXPECT_TRUE(wc_is(r, 0xabc, WcStatus::kSuccess, WcOpcode::kRecv));
  EXPECT_EQ(r.byte_len, expect.size());
  EXPECT_EQ(r.qp_num, server.qp->qp_num());
  EXPECT_EQ(r.flags & kWcWithInv, 0);
  EXPECT_TRUE(wc_is(s, 0x123, WcStatus::kSuccess, WcOpcode::kSend));
  EXPECT_EQ(s.qp_num, client.qp->qp_num());

  // Scattered in SGE order; everything past the message untouched.
  size_t pos = 0;
  for (uint32_t i = 0; i < nr; ++i) {
    uint8_t* p = dst.p + recv_off[i];
    size_t take = std::min<size_t>(rs[i].length, expect.size() - pos);
    EXPECT_EQ(std::memcmp(p, expect.data() + pos, take), 0) << "recv SGE " << i << " holds the wrong bytes";
    EXPECT_TRUE(check_filled(p + take, rs[i].length - take, kSentinel, "recv SGE tail"));
    pos += take;
  }
  EXPECT_TRUE(check_filled(dst.p + recv_off[0] + rs[0].length, recv_off[1] - recv_off[0] - rs[0].length,
                           kSentinel, "gap between recv SGEs"));
}

TEST_P(DatapathTest, SendsArriveInOrder) {
  const int kN = static_cast<int>(std::min({16u, client.qp->init().sq_depth, server.qp->init().rq_depth}));
  Buf src, dst;
  ASSERT_TRUE(client.alloc(kN * 256, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(kN * 256, kAccessLocalWrite, &dst));
  std::vector<Sge> rs(kN), ss(kN);
  std::vector<RecvWr> rw;
  std::vector<SendWr> sw;
  for (int i = 0; i < kN; ++i) {
    rs[i] = dst.sge(i * 256, 256);
    rw.push_back(wr_recv(100 + i, &rs[i], 1));
    size_t len = 1 + i * 13;
    fill_pattern(src.p + i * 256, len, 300 + i);
    ss[i] = src.sge(i * 256, len);
    sw.push_back(wr_send(200 + i, &ss[i], 1, i % 2 == 1));
  }
  ASSERT_TRUE(server.post_recv(rw));
  ASSERT_TRUE(client.post_send(sw));
  std::vector<Wc> r, s;
  ASSERT_TRUE(poller.wait_recv(server, kN, &r));
  ASSERT_TRUE(poller.wait_send(client, kN / 2, &s));
  for (int i = 0; i < kN; ++i) {
    EXPECT_TRUE(wc_is(r[i], 100 + i, WcStatus::kSuccess, WcOpcode::kRecv));
    EXPECT_EQ(r[i].byte_len, 1u + i * 13) << "message " << i;
    EXPECT_TRUE(check_pattern(dst.p + i * 256, 1 + i * 13, 300 + i, "message"));
  }
  for (int i = 0; i < kN / 2; ++i) EXPECT_TRUE(wc_is(s[i], 200 + 2 * i + 1, WcStatus::kSuccess, WcOpcode::kSend));
  poller.settle();
  EXPECT_TRUE(client.send_wcs.empty()) << "unsignaled SENDs completed: " << client.describe();
}

TEST_P(DatapathTest, ReceiveTooSmallFailsBothSides) {
  Buf src, dst, cdst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &cdst));
  ASSERT_TRUE(server.alloc(8192, kAccessLocalWrite, &dst));
  Sge small = dst.sge(0, 64), big = dst.sge(4096, 4096), crs = cdst.sge();
  ASSERT_TRUE(server.post_recv({wr_recv(1, &small, 1), wr_recv(2, &big, 1)}));
  ASSERT_TRUE(client.post_recv({wr_recv(3, &crs, 1)}));
  Sge s1 = src.sge(0, 128), s2 = src.sge(0, 16);
  ASSERT_TRUE(client.post_send({wr_send(10, &s1, 1), wr_send(11, &s2, 1, false)}));

  std::vector<Wc> r, s, cr;
  ASSERT_TRUE(poller.wait_recv(server, 2, &r));
  EXPECT_TRUE(failed_with(caps(), r[0], 1, WcStatus::kLocLenErr)) << "receiver: message longer than the receive";
  EXPECT_TRUE(all_flushed({r[1]}, {2}));
  ASSERT_TRUE(poller.wait_send(client, 2, &s));
  EXPECT_TRUE(failed_with(caps(), s[0], 10, WcStatus::kRemInvReqErr)) << "sender: the peer found the request invalid";
  EXPECT_TRUE(all_flushed({s[1]}, {11})) << "the unsignaled SEND after the failure must flush";
  ASSERT_TRUE(poller.wait_recv(client, 1, &cr));
  EXPECT_TRUE(all_flushed(cr, {3}));
  EXPECT_TRUE(poller.wait_disconnected(server));
  EXPECT_TRUE(poller.wait_disconnected(client));
}

TEST_P(DatapathTest, SignaledCompletionCoversEarlierUnsignaledWrites) {
  constexpr int kN = 8;
  constexpr size_t kLen = 4096;
  Buf src, dst;
  ASSERT_TRUE(client.alloc(kN * kLen, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(kN * kLen, kAccessAll, &dst));
  Sge sg[kN];
  std::vector<SendWr> w;
  for (int i = 0; i < kN; ++i) {
    fill_pattern(src.p + i * kLen, kLen, 40 + i);
    sg[i] = src.sge(i * kLen, kLen);
    w.push_back(wr_write(1 + i, &sg[i], 1, dst.addr(i * kLen), dst.rkey(), i == kN - 1));
  }
  ASSERT_TRUE(client.post_send(w));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(client, &wc));
  EXPECT_TRUE(wc_is(wc, kN, WcStatus::kSuccess, WcOpcode::kRdmaWrite))
      << "only the signaled (last) WRITE may complete";
  // Its completion means every earlier WRITE is done: the data is at the target now.
  for (int i = 0; i < kN; ++i)
    EXPECT_TRUE(check_pattern(dst.p + i * kLen, kLen, 40 + i, "earlier WRITE at the target")) << "WRITE " << i;
  poller.settle();
  EXPECT_TRUE(client.send_wcs.empty()) << "unsignaled WRITEs completed: " << client.describe();
  EXPECT_TRUE(server.recv_wcs.empty()) << "RDMA_WRITE consumed a receive: " << server.describe();
}

TEST_P(DatapathTest, UnsignaledSendsStillCompleteAtTheReceiver) {
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(5 * 128, kAccessLocalWrite, &dst));
  Sge rs[5], ss = src.sge(0, 32);
  std::vector<RecvWr> rw;
  std::vector<SendWr> sw;
  for (int i = 0; i < 5; ++i) {
    rs[i] = dst.sge(i * 128, 128);
    rw.push_back(wr_recv(i, &rs[i], 1));
    sw.push_back(wr_send(10 + i, &ss, 1, i == 4));
  }
  ASSERT_TRUE(server.post_recv(rw));
  ASSERT_TRUE(client.post_send(sw));
  std::vector<Wc> r;
  Wc s;
  ASSERT_TRUE(poller.wait_recv(server, 5, &r));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(wc_is(r[i], i, WcStatus::kSuccess, WcOpcode::kRecv));
  ASSERT_TRUE(poller.wait_send1(client, &s));
  EXPECT_TRUE(wc_is(s, 14, WcStatus::kSuccess, WcOpcode::kSend));
  poller.settle();
  EXPECT_TRUE(client.send_wcs.empty()) << client.describe();
}

TEST_P(DatapathTest, RdmaWriteOfVariousSizes) {
  for (size_t size : {size_t(1), size_t(4096), size_t(1) << 20}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const size_t off = 4096 + (size == 1 ? 3 : 0);  // a guard page, and unaligned for 1 byte
    Buf src, dst;
    ASSERT_TRUE(client.alloc(size, kAccessLocalWrite, &src));
    ASSERT_TRUE(server.alloc(size + 2 * 4096, kAccessAll, &dst));
    fill_pattern(src.p, size, static_cast<uint32_t>(size));
    std::memset(dst.p, kSentinel, dst.len);
    Sge sg = src.sge();
    ASSERT_TRUE(client.post_send({wr_write(size, &sg, 1, dst.addr(off), dst.rkey())}));
    Wc wc;
    ASSERT_TRUE(poller.wait_send1(client, &wc));
    ASSERT_TRUE(wc_is(wc, size, WcStatus::kSuccess, WcOpcode::kRdmaWrite));
    EXPECT_TRUE(check_pattern(dst.p + off, size, static_cast<uint32_t>(size), "written data"));
    EXPECT_TRUE(check_filled(dst.p, off, kSentinel, "bytes before the write"));
    EXPECT_TRUE(check_filled(dst.p + off + size, dst.len - off - size, kSentinel, "bytes after the write"));
  }
}

TEST_P(DatapathTest, RdmaReadOfVariousSizes) {
  for (size_t size : {size_t(1), size_t(4096), size_t(1) << 20}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const size_t off = 4096 + (size == 1 ? 5 : 0);
    Buf src, sink;
    ASSERT_TRUE(server.alloc(size + 4096, kAccessAll, &src));
    ASSERT_TRUE(client.alloc(size + 2 * 4096, kAccessLocalWrite, &sink));
    fill_pattern(src.p + 4096, size, static_cast<uint32_t>(size) + 1);
    std::memset(sink.p, kSentinel, sink.len);
    Sge sg = sink.sge(off, size);
    ASSERT_TRUE(client.post_send({wr_read(size, &sg, 1, src.addr(4096), src.rkey())}));
    Wc wc;
    ASSERT_TRUE(poller.wait_send1(client, &wc));
    ASSERT_TRUE(wc_is(wc, size, WcStatus::kSuccess, WcOpcode::kRdmaRead));
    EXPECT_TRUE(check_pattern(sink.p + off, size, static_cast<uint32_t>(size) + 1, "read data"));
    EXPECT_TRUE(check_filled(sink.p, off, kSentinel, "sink bytes before"));
    EXPECT_TRUE(check_filled(sink.p + off + size, sink.len - off - size, kSentinel, "sink bytes after"));
  }
}

TEST_P(DatapathTest, RdmaWriteGathersAndReadScatters) {
  const uint32_t n = std::min<uint32_t>(3, client.qp->init().max_send_sge);
  const size_t len[3] = {300, 1, 5000}, off[3] = {0, 9000, 12000};
  Buf local, remote, back;
  ASSERT_TRUE(client.alloc(20000, kAccessLocalWrite, &local));
  ASSERT_TRUE(client.alloc(20000, kAccessLocalWrite, &back));
  ASSERT_TRUE(server.alloc(8192, kAccessAll, &remote));
  fill_pattern(local.p, local.len, 50);
  Sge g[3], s[3];
  size_t total = 0;
  std::vector<uint8_t> expect;
  for (uint32_t i = 0; i < n; ++i) {
    g[i] = local.sge(off[i], len[i]);
    s[i] = back.sge(off[i], len[i]);
    expect.insert(expect.end(), local.p + off[i], local.p + off[i] + len[i]);
    total += len[i];
  }
  ASSERT_TRUE(client.post_send({wr_write(1, g, n, remote.addr(0), remote.rkey(), false),
                                wr_read(2, s, n, remote.addr(0), remote.rkey())}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(client, &wc));
  ASSERT_TRUE(wc_is(wc, 2, WcStatus::kSuccess, WcOpcode::kRdmaRead));
  EXPECT_EQ(std::memcmp(remote.p, expect.data(), total), 0) << "WRITE did not gather its SGEs in order";
  for (uint32_t i = 0; i < n; ++i)
    EXPECT_EQ(std::memcmp(back.p + off[i], local.p + off[i], len[i]), 0)
        << "READ did not scatter into SGE " << i << " (or did not see the WRITE before it)";
}

TEST_P(DatapathTest, ReadAfterWriteSeesTheWrite) {
  Buf src, sink, remote;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &sink));
  ASSERT_TRUE(server.alloc(4096, kAccessAll, &remote));
  for (uint32_t round = 0; round < 20; ++round) {
    fill_pattern(src.p, 4096, 60 + round);
    Sge a = src.sge(), b = sink.sge();
    ASSERT_TRUE(client.post_send({wr_write(1, &a, 1, remote.addr(), remote.rkey(), false),
                                  wr_read(2, &b, 1, remote.addr(), remote.rkey())}));
    Wc wc;
    ASSERT_TRUE(poller.wait_send1(client, &wc));
    ASSERT_TRUE(wc_is(wc, 2, WcStatus::kSuccess, WcOpcode::kRdmaRead));
    ASSERT_TRUE(check_pattern(sink.p, 4096, 60 + round, "READ after WRITE")) << "round " << round;
  }
}

TEST_P(DatapathTest, WriteThenSendIsVisibleWhenTheReceiveCompletes) {
  // The RPC-over-RDMA reply pattern: bulk data by WRITE, then a SEND; the
  // receiver may read the bulk data as soon as its receive completes.
  Buf bulk, msg, remote, rbuf;
  ASSERT_TRUE(client.alloc(64 << 10, kAccessLocalWrite, &bulk));
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &msg));
  ASSERT_TRUE(server.alloc(64 << 10, kAccessAll, &remote));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &rbuf));
  Sge rs = rbuf.sge();
  for (uint32_t round = 0; round < 10; ++round) {
    ASSERT_TRUE(server.post_recv({wr_recv(round, &rs, 1)}));
    fill_pattern(bulk.p, bulk.len, 70 + round);
    Sge a = bulk.sge(), b = msg.sge(0, 16);
    ASSERT_TRUE(client.post_send({wr_write(1, &a, 1, remote.addr(), remote.rkey(), false), wr_send(2, &b, 1)}));
    Wc r;
    ASSERT_TRUE(poller.wait_recv1(server, &r));
    ASSERT_TRUE(wc_is(r, round, WcStatus::kSuccess, WcOpcode::kRecv));
    ASSERT_TRUE(check_pattern(remote.p, remote.len, 70 + round, "bulk data when the SEND arrived"));
    Wc s;
    ASSERT_TRUE(poller.wait_send1(client, &s));
    ASSERT_TRUE(wc_is(s, 2, WcStatus::kSuccess, WcOpcode::kSend));
  }
}

TEST_P(DatapathTest, ManyMessagesWithRepostedReceives) {
  // Enough traffic to wrap every ring a driver may have, many times.
  const int kBatch = static_cast<int>(std::min({32u, client.qp->init().sq_depth, server.qp->init().rq_depth}));
  const int kRounds = 3200 / kBatch;
  constexpr size_t kSlot = 4096;
  Buf src, dst;
  ASSERT_TRUE(client.alloc(kBatch * kSlot, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(kBatch * kSlot, kAccessLocalWrite, &dst));
  std::vector<Sge> rs(kBatch), ss(kBatch);
  for (int round = 0; round < kRounds; ++round) {
    std::vector<RecvWr> rw;
    std::vector<SendWr> sw;
    for (int i = 0; i < kBatch; ++i) {
      uint32_t n = round * kBatch + i;
      size_t len = (n * 7919u) % kSlot + 1;
      rs[i] = dst.sge(i * kSlot, kSlot);
      rw.push_back(wr_recv(n, &rs[i], 1));
      fill_pattern(src.p + i * kSlot, len, n);
      ss[i] = src.sge(i * kSlot, len);
      sw.push_back(wr_send(n, &ss[i], 1, i == kBatch - 1));
    }
    ASSERT_TRUE(server.post_recv(rw));
    ASSERT_TRUE(client.post_send(sw));
    std::vector<Wc> r;
    Wc s;
    ASSERT_TRUE(poller.wait_recv(server, kBatch, &r)) << "round " << round;
    ASSERT_TRUE(poller.wait_send1(client, &s)) << "round " << round;
    ASSERT_TRUE(wc_is(s, round * kBatch + kBatch - 1, WcStatus::kSuccess, WcOpcode::kSend));
    for (int i = 0; i < kBatch; ++i) {
      uint32_t n = round * kBatch + i;
      size_t len = (n * 7919u) % kSlot + 1;
      ASSERT_TRUE(wc_is(r[i], n, WcStatus::kSuccess, WcOpcode::kRecv));
      ASSERT_EQ(r[i].byte_len, len) << "message " << n;
      ASSERT_TRUE(check_pattern(dst.p + i * kSlot, len, n, "message")) << "message " << n;
    }
  }
}

TEST_P(DatapathTest, PollReturnsAtMostMax) {
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessAll, &dst));
  Sge sg = src.sge(0, 8);
  std::vector<SendWr> w;
  for (int i = 0; i < 6; ++i) w.push_back(wr_write(i, &sg, 1, dst.addr(), dst.rkey()));
  ASSERT_TRUE(client.post_send(w));
  // Poll the client's send CQ by hand with max = 1, still driving the server
  // side (the target may need polling for the WRITEs to make progress).
  std::vector<Wc> got;
  auto end = SteadyClock::now() + kWait;
  while (got.size() < 6 && SteadyClock::now() < end) {
    Wc wc[2];
    int n = client.send_cq->poll(wc, 1);
    ASSERT_GE(n, 0);
    ASSERT_LE(n, 1) << "Cq::poll(wc, 1) returned " << n;
    if (n == 1) got.push_back(wc[0]);
    server.poll_once();
  }
  ASSERT_EQ(got.size(), 6u) << "timed out: " << to_string(got);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(wc_is(got[i], i, WcStatus::kSuccess, WcOpcode::kRdmaWrite));
}

TEST_P(DatapathTest, SendQueueFullIsEagain) {
  const uint32_t depth = client.qp->init().sq_depth;
  ASSERT_GE(depth, 2u);
  ASSERT_LE(depth, 4096u) << "test assumes a moderate default depth";
  Buf src, dst;
  ASSERT_TRUE(client.alloc(depth * 64, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(depth * 64, kAccessAll, &dst));
  std::vector<Sge> sg(depth + 1);
  auto chain = [&](uint32_t seed) {
    std::vector<SendWr> w;
    for (uint32_t i = 0; i <= depth; ++i) {
      uint32_t slot = i % depth;
      fill_pattern(src.p + slot * 64, 64, seed + slot);
      sg[i] = src.sge(slot * 64, 64);
      // Signaled: the last that fits, and the one too many.
      w.push_back(wr_write(i + 1, &sg[i], 1, dst.addr(slot * 64), dst.rkey(), i >= depth - 1));
    }
    return w;
  };
  for (uint32_t round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto w = chain(1000 * (round + 1));
    int err = 0;
    int n = client.qp->post_send(w.data(), static_cast<int>(w.size()), &err);
    ASSERT_EQ(n, static_cast<int>(depth)) << "a " << depth << "-deep send queue, nothing polled, took " << n
                                          << " of " << w.size() << " WRs (err " << err << ")";
    EXPECT_EQ(err, EAGAIN) << std::strerror(err);
    Wc wc;
    ASSERT_TRUE(poller.wait_send1(client, &wc));
    ASSERT_TRUE(wc_is(wc, depth, WcStatus::kSuccess, WcOpcode::kRdmaWrite));
    for (uint32_t i = 0; i < depth; ++i)
      ASSERT_TRUE(check_pattern(dst.p + i * 64, 64, 1000 * (round + 1) + i, "WRITE data")) << "slot " << i;
    poller.settle();
    ASSERT_TRUE(client.send_wcs.empty()) << client.describe();
  }
}

TEST_P(DatapathTest, ReceiveQueueFullIsEagain) {
  const uint32_t depth = server.qp->init().rq_depth;
  ASSERT_LE(depth, 4096u);
  Buf b;
  ASSERT_TRUE(server.alloc(64, kAccessLocalWrite, &b));
  Sge sg = b.sge();
  std::vector<RecvWr> w;
  for (uint32_t i = 0; i <= depth; ++i) w.push_back(wr_recv(i, &sg, 1));
  int err = 0;
  int n = server.qp->post_recv(w.data(), static_cast<int>(w.size()), &err);
  EXPECT_EQ(n, static_cast<int>(depth)) << "a " << depth << "-deep receive queue took " << n;
  EXPECT_EQ(err, EAGAIN) << std::strerror(err);
}

TEST_P(DatapathTest, TooManySgesIsInvalid) {
  const uint32_t ms = client.qp->init().max_send_sge, mr = server.qp->init().max_recv_sge;
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  std::vector<Sge> sg(ms + 1, src.sge(0, 8)), rg(mr + 1, dst.sge(0, 8));
  Sge one = src.sge(0, 8);

  int err = 0;
  std::vector<SendWr> w = {wr_send(1, &one, 1, false), wr_send(2, sg.data(), ms + 1), wr_send(3, &one, 1)};
  EXPECT_EQ(client.qp->post_send(w.data(), 3, &err), 1) << "the WR with too many SGEs ends the chain";
  EXPECT_EQ(err, EINVAL) << std::strerror(err);
  RecvWr r = wr_recv(4, rg.data(), mr + 1);
  err = 0;
  EXPECT_EQ(server.qp->post_recv(&r, 1, &err), 0);
  EXPECT_EQ(err, EINVAL) << std::strerror(err);
  // Nothing after the refused WR was posted, and the QPs are still usable.
  poller.settle();
  EXPECT_TRUE(client.send_wcs.empty()) << client.describe();
  EXPECT_EQ(client.qp->state(), QpState::kRts);
  EXPECT_EQ(server.qp->state(), QpState::kRts);
}

TEST_P(DatapathTest, QpStatsAreReported) {
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessAll, &dst));
  Sge sg = src.sge();
  ASSERT_TRUE(client.post_send({wr_write(1, &sg, 1, dst.addr(), dst.rkey())}));
  Wc wc;
  ASSERT_TRUE(poller.wait_send1(client, &wc));
  StatsView v = client.qp->stats();
  ASSERT_FALSE(v.empty()) << "Qp::stats() has no counters";
  uint64_t sum = 0;
  for (const auto& e : v) {
    ASSERT_NE(e.name, nullptr);
    ASSERT_NE(e.counter, nullptr) << e.name;
    sum += e.counter->get();
  }
  EXPECT_GT(sum, 0u) << "no counter moved after a WRITE: " << format_stats(v, true);
}

// The engine's use-after-recycle detector relies on this (docs/engine.md,
// "Accounting"): in test builds a recycled send buffer is poisoned, and a
// device that reads a Send's payload only when the Send executes -- after
// post_send returned, no earlier than the peer takes it -- then delivers the
// poison, so a buffer the engine recycled before its Send completed shows up
// as corrupted data instead of going unnoticed. Verbs leave a buffer changed
// between post and completion undefined; pmd/shm promises the late read.
TEST_P(DatapathTest, ASendBufferChangedBeforeItsSendExecutesDeliversTheChange) {
  if (caps().driver != "shm" && caps().driver != "sim")
    GTEST_SKIP() << "verbs leave it undefined; pmd/shm and pmd/sim read at execution";
  Buf src, dst;
  ASSERT_TRUE(client.alloc(4096, kAccessLocalWrite, &src));
  ASSERT_TRUE(server.alloc(4096, kAccessLocalWrite, &dst));
  fill_pattern(src.p, 512, 11);
  Sge rs = dst.sge(0, 4096), ss = src.sge(0, 512);
  ASSERT_TRUE(server.post_recv({wr_recv(1, &rs, 1)}));
  ASSERT_TRUE(client.post_send({wr_send(2, &ss, 1)}));
  // Recycled early (poisoned) before the server's poll executes the SEND.
  std::memset(src.p, 0xa7, 512);
  Wc r;
  ASSERT_TRUE(poller.wait_recv1(server, &r));
  EXPECT_TRUE(check_filled(dst.p, 512, 0xa7, "received")) << "the payload was read at post time";
}

}  // namespace
}  // namespace tern::conformance
