// Two engines in one process, each on its own thread and CPU, talking through
// the driver: the arrangement a two-lcore Tern process has, and the one the
// TSan build checks. The client streams SENDs, some preceded in the same chain
// by an unsignaled RDMA WRITE whose data the server checks when the SEND
// arrives (WRITE-then-SEND visibility across threads); the server acknowledges
// each message, which paces the client. At the end the client disconnects and
// the server sees the disconnect and its posted receives flushed.
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "../conformance/conformance_fixture.h"

namespace tern::conformance {
namespace {

constexpr uint64_t kMessages = 20000;
constexpr uint64_t kWriteEvery = 50;  // every 50th message carries a checked WRITE
constexpr uint32_t kWindow = 16;      // messages in flight
constexpr uint32_t kMsg = 64;
constexpr uint32_t kWriteLen = 4096;
constexpr auto kLimit = std::chrono::seconds(60);

void pin(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % std::max(1u, std::thread::hardware_concurrency()), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct Shared {
  uint64_t wbuf_addr = 0;
  uint32_t wbuf_rkey = 0;
  std::atomic<bool> listening{false};
  std::atomic<bool> abort{false};
};

struct Outcome {
  std::string error;  // empty: fine
  uint64_t received = 0, writes_checked = 0, acks = 0, flushed = 0;
};

bool expired(SteadyClock::time_point t0) { return SteadyClock::now() - t0 > kLimit; }

void server_main(Side& s, Shared& sh, Buf rx, Buf tx, Buf wbuf, Outcome* out) {
  pin(1);
  auto t0 = SteadyClock::now();
  auto fail = [&](std::string m) {
    out->error = "server: " + m + "\n" + s.describe();
    sh.abort = true;
  };
  const uint32_t rq = s.qp->init().rq_depth;
  for (uint32_t i = 0; i < rq; ++i) {
    Sge g = rx.sge(i * kMsg, kMsg);
    RecvWr r = wr_recv(i, &g, 1);
    if (!s.post_recv({r})) return fail("post_recv");
  }
  if (!s.dev->listen()) return fail("listen");
  sh.listening = true;
  bool established = false;
  uint64_t expect = 0, sends = 0, send_done = 0;
  bool disconnected = false;
  while (!sh.abort && !expired(t0)) {
    s.poll_once();
    while (!s.cm_events.empty()) {
      CmEvent ev = std::move(s.cm_events.front());
      s.cm_events.pop_front();
      if (ev.type == CmEventType::kConnectRequest) {
        if (!s.dev->accept(ev.request, s.qp.get(), {})) return fail("accept");
      } else if (ev.type == CmEventType::kEstablished) {
        established = true;
      } else if (ev.type == CmEventType::kDisconnected) {
        disconnected = true;
      } else {
        return fail(std::string("unexpected CM event ") + cm_event_name(ev.type));
      }
    }
    while (!s.send_wcs.empty()) {
      if (s.send_wcs.front().status != WcStatus::kSuccess) return fail("ack failed: " + to_string(s.send_wcs.front()));
      s.send_wcs.pop_front();
      ++send_done;
    }
    while (!s.recv_wcs.empty()) {
      Wc wc = s.recv_wcs.front();
      s.recv_wcs.pop_front();
      if (wc.status == WcStatus::kWrFlushErr && expect == kMessages) {
        ++out->flushed;
        continue;
      }
      if (wc.status != WcStatus::kSuccess || wc.byte_len != kMsg) return fail("bad receive " + to_string(wc));
      const uint8_t* m = rx.p + wc.wr_id * kMsg;
      uint64_t seq;
      std::memcpy(&seq, m, 8);
      if (seq != expect) return fail("message " + std::to_string(seq) + " arrived, expected " + std::to_string(expect));
      if (seq % kWriteEvery == 0) {
        // The WRITE went ahead of this SEND on the client's send queue.
        auto r = check_pattern(wbuf.p, kWriteLen, static_cast<uint32_t>(seq), "RDMA WRITE data");
        if (!r) return fail(r.message());
        ++out->writes_checked;
      }
      ++expect;
      ++out->received;
      Sge g = rx.sge(wc.wr_id * kMsg, kMsg);
      RecvWr r = wr_recv(wc.wr_id, &g, 1);
      if (!s.post_recv({r})) return fail("repost");
      // Acknowledge from a slot whose previous SEND is known complete.
      while (sends - send_done >= 32 && !expired(t0)) {
        s.poll_once();
        while (!s.send_wcs.empty()) {
          if (s.send_wcs.front().status != WcStatus::kSuccess) return fail("ack failed");
          s.send_wcs.pop_front();
          ++send_done;
        }
      }
      uint8_t* a = tx.p + (sends % 64) * 8;
      std::memcpy(a, &seq, 8);
      Sge ag = tx.sge((sends % 64) * 8, 8);
      if (!s.post_send({wr_send(seq, &ag, 1, true)})) return fail("ack post");
      ++sends;
    }
    if (established && disconnected && expect == kMessages && out->flushed == rq) return;
  }
  if (!sh.abort) fail("timed out: received " + std::to_string(expect) + ", flushed " + std::to_string(out->flushed));
}

void client_main(Side& c, Shared& sh, Buf msgs, Buf wsrc, Buf acks, Outcome* out) {
  pin(0);
  auto t0 = SteadyClock::now();
  auto fail = [&](std::string m) {
    out->error = "client: " + m + "\n" + c.describe();
    sh.abort = true;
  };
  const uint32_t rq = c.qp->init().rq_depth;
  for (uint32_t i = 0; i < rq; ++i) {
    Sge g = acks.sge(i * 8, 8);
    RecvWr r = wr_recv(i, &g, 1);
    if (!c.post_recv({r})) return fail("post_recv");
  }
  while (!sh.listening && !sh.abort) std::this_thread::yield();
  if (!c.dev->connect(c.qp.get(), {})) return fail("connect");
  bool established = false;
  uint64_t next = 0, sends = 0, send_done = 0;
  while (!sh.abort && !expired(t0)) {
    c.poll_once();
    while (!c.cm_events.empty()) {
      CmEvent ev = std::move(c.cm_events.front());
      c.cm_events.pop_front();
      if (ev.type == CmEventType::kEstablished) established = true;
      else if (!(ev.type == CmEventType::kDisconnected && out->acks == kMessages))
        return fail(std::string("unexpected CM event ") + cm_event_name(ev.type) + ": " + to_string(ev.status));
    }
    while (!c.send_wcs.empty()) {
      if (c.send_wcs.front().status != WcStatus::kSuccess) return fail("send failed: " + to_string(c.send_wcs.front()));
      c.send_wcs.pop_front();
      ++send_done;
    }
    while (!c.recv_wcs.empty()) {
      Wc wc = c.recv_wcs.front();
      c.recv_wcs.pop_front();
      if (wc.status != WcStatus::kSuccess) return fail("ack receive " + to_string(wc));
      uint64_t seq;
      std::memcpy(&seq, acks.p + wc.wr_id * 8, 8);
      if (seq != out->acks) return fail("ack " + std::to_string(seq) + " out of order");
      ++out->acks;
      Sge g = acks.sge(wc.wr_id * 8, 8);
      RecvWr r = wr_recv(wc.wr_id, &g, 1);
      if (!c.post_recv({r})) return fail("repost");
    }
    if (!established) continue;
    if (out->acks == kMessages) {
      if (!c.dev->disconnect(c.qp.get())) return fail("disconnect");
      return;
    }
    // Keep kWindow messages in flight; a slot is rewritten only after its
    // previous SEND completed (64 slots, at most 32 sends outstanding).
    while (next < kMessages && next - out->acks < kWindow && sends - send_done < 32) {
      uint8_t* m = msgs.p + (next % 64) * kMsg;
      std::memcpy(m, &next, 8);
      Sge g = msgs.sge((next % 64) * kMsg, kMsg);
      std::vector<SendWr> chain;
      Sge wg = wsrc.sge(0, kWriteLen);
      if (next % kWriteEvery == 0) {
        // The server checks the previous pattern before acknowledging, and we
        // only get here after that ack, so rewriting the source is safe.
        fill_pattern(wsrc.p, kWriteLen, static_cast<uint32_t>(next));
        chain.push_back(wr_write(1000000 + next, &wg, 1, sh.wbuf_addr, sh.wbuf_rkey, false));
      }
      chain.push_back(wr_send(next, &g, 1, true));
      // Only the SEND is signaled; its completion covers the WRITE before it.
      if (!c.post_send(chain)) return fail("post_send");
      ++sends;
      ++next;
    }
  }
  if (!sh.abort) fail("timed out after " + std::to_string(out->acks) + " acks");
}

TEST(TwoEngines, StreamAcrossThreadsWithWritesAndDisconnect) {
  auto devs = conformance_devices();
  ASSERT_FALSE(devs.empty()) << "no driver linked";
  std::string path;
  std::string spec = unique_spec(devs.front(), &path);
  Side server("server"), client("client");
  ASSERT_TRUE(server.open(spec));
  ASSERT_TRUE(client.open(spec));
  Buf srx, stx, wbuf, cmsgs, cwsrc, cacks;
  ASSERT_TRUE(server.alloc(kMsg * 256, kAccessLocalWrite, &srx));
  ASSERT_TRUE(server.alloc(8 * 64, kAccessLocalWrite, &stx));
  ASSERT_TRUE(server.alloc(kWriteLen, kAccessLocalWrite | kAccessRemoteWrite, &wbuf));
  ASSERT_TRUE(client.alloc(kMsg * 64, 0, &cmsgs));
  ASSERT_TRUE(client.alloc(kWriteLen, 0, &cwsrc));
  ASSERT_TRUE(client.alloc(8 * 256, kAccessLocalWrite, &cacks));
  Shared sh;
  sh.wbuf_addr = wbuf.addr();
  sh.wbuf_rkey = wbuf.rkey();
  Outcome so, co;
  {
    std::thread st(server_main, std::ref(server), std::ref(sh), srx, stx, wbuf, &so);
    std::thread ct(client_main, std::ref(client), std::ref(sh), cmsgs, cwsrc, cacks, &co);
    ct.join();
    st.join();
  }
  EXPECT_EQ(so.error, "");
  EXPECT_EQ(co.error, "");
  EXPECT_EQ(so.received, kMessages);
  EXPECT_EQ(so.writes_checked, kMessages / kWriteEvery);
  EXPECT_EQ(co.acks, kMessages);
  EXPECT_EQ(so.flushed, server.qp->init().rq_depth) << "every posted receive flushes at disconnect";
  EXPECT_EQ(server.qp->state(), QpState::kError);
  if (!path.empty()) unlink(path.c_str());
}

}  // namespace
}  // namespace tern::conformance
