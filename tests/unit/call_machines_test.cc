// The request machine (request_machine.h) and the server-call machine
// (server_call_machine.h) driven through a real ClientConn and ServerConn
// over the stub core, QP and device (conn_stubs.h): each scenario makes the
// connection code itself take its transitions -- a call sent, answered,
// fenced and freed; one expired in the backlog, one abandoned and retired by
// its late reply, one orphaned and sent again, one orphaned and failed, one
// lost while its LOCAL_INV chain was in flight; a server call handled, one
// answered with RDMA_ERROR, one waiting for memory, one pulled, one whose
// reply waited for send-queue room, one dropped, one orphaned under its
// handler -- and the last test of each machine checks that together they
// take exactly its table: none allowed and never taken, none taken and not
// allowed. A transition the table refuses, raised through the connection,
// is caught (death tests).
//
// The transitions are seen through the machines' test watch (state_table.h),
// compiled in only where the library was built with TERN_DEBUG; elsewhere
// the coverage tests skip, saying why.
#include <endian.h>

#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "base/check.h"
#include "conn_stubs.h"
#include "engine/registrar.h"
#include "engine/state_table.h"

namespace tern::rpc {
namespace {

using namespace conn_stubs;
using Seen = std::set<std::pair<int, int>>;

Seen* g_seen_req = nullptr;
Seen* g_seen_srv = nullptr;

void record(MachineKind m, int from, int to) {
  Seen* s = m == MachineKind::kRequest ? g_seen_req : g_seen_srv;
  if (s != nullptr) s->insert({from, to});
}

// Records every request and server-call transition while it lives.
struct Watch {
  Seen req, srv;
  Watch() {
    g_seen_req = &req, g_seen_srv = &srv;
    watch_transitions(record);
  }
  ~Watch() {
    watch_transitions(nullptr);
    g_seen_req = g_seen_srv = nullptr;
  }
};

bool watch_compiled() { return ::tern::detail::debug_checks_compiled(); }

#define NEED_WATCH()                                                                                   \
  do {                                                                                                 \
    if (!watch_compiled())                                                                             \
      GTEST_SKIP() << "the library was built without TERN_DEBUG: its machines have no transition watch"; \
  } while (0)

Status lost() { return make_error(Errc::kDisconnected, "the peer went away"); }

template <typename Conn>
void finish_drain(Harness<Conn>& h) {
  h.conn->sq_drained = h.conn->rq_drained = true;
  bool more = false;
  (void)h.conn->step_drain(&more);
}

// The completion of the i-th WR the stub QP took (its chain's last one:
// every chain is signaled in the harness), as the engine's dispatch hands it.
template <typename Conn>
void complete(Harness<Conn>& h, size_t i, rdma::WcOpcode op = rdma::WcOpcode::kSend) {
  Wc wc{};
  wc.wr_id = h.qp->sends[i].wr_id;
  wc.qp_num = h.qp->qp_num();
  wc.status = WcStatus::kSuccess;
  wc.opcode = op;
  h.conn->on_send_completion(wc);
}

// ---------------------------------------------------------------- a stub registrar

// Fast registration without a device: map() hands out an rkey per chunk and
// posts nothing; invalidate() appends one LOCAL_INV per live registration,
// so that a call whose reply came waits, invalidating, for that chain.
class StubRegistrar final : public Registrar {
 public:
  bool invalidates() const override { return true; }
  uint32_t segments_for(uint64_t, uint64_t) const override { return 1; }
  uint64_t max_segment_bytes() const override { return 1u << 20; }
  int map(uint64_t addr, uint64_t len, uint32_t, uint32_t, WrChain&, RdmaSegment* segs, int max_segs,
          EngineMr** list) override {
    if (max_segs < 1) return kNoResources;
    auto m = std::make_unique<EngineMr>();
    m->rkey = next_rkey_++;
    m->iova = addr;
    m->length = static_cast<uint32_t>(len);
    m->registered = true;
    m->next = *list;
    *list = m.get();
    mrs_.push_back(std::move(m));
    segs[0] = RdmaSegment{mrs_.back()->rkey, static_cast<uint32_t>(len), addr};
    return 1;
  }
  int invalidate(EngineMr* list, WrChain& chain) override {
    int n = 0;
    for (EngineMr* m = list; m != nullptr; m = m->next) {
      if (!m->registered || m->invalidating) continue;
      rdma::SendWr& w = chain.add();
      w.opcode = rdma::WrOpcode::kLocalInv;
      w.invalidate_rkey = m->rkey;
      m->invalidating = true;
      ++n;
    }
    return n;
  }
  void remote_invalidated(EngineMr* m) override { m->registered = false; }
  void release(EngineMr** list) override { drop(list); }
  void destroy(EngineMr** list) override { drop(list); }
  uint32_t mrs_live() const override { return static_cast<uint32_t>(mrs_.size()); }

 private:
  void drop(EngineMr** list) {
    for (EngineMr* m = *list; m != nullptr;) {
      EngineMr* next = m->next;
      for (auto it = mrs_.begin(); it != mrs_.end(); ++it)
        if (it->get() == m) {
          mrs_.erase(it);
          break;
        }
      m = next;
    }
    *list = nullptr;
  }
  std::vector<std::unique_ptr<EngineMr>> mrs_;
  uint32_t next_rkey_ = 0x100;
};

// ---------------------------------------------------------------- the request machine, through a ClientConn

// A call answered: free -> backlog -> sent (posted at once, call() raises
// kAccepted then kPosting) -> invalidating (its reply; nothing registered,
// so fenced at once) -> completed -> free (its Send's completion).
void req_answered() {
  Harness<ClientConn> h;
  Done d;
  uint32_t xid = 0;
  ASSERT_EQ(h.conn->call(null_call(&d), &xid), 0);
  Request* r = request_of(h, xid);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->state(), ReqState::kSent);
  h.deliver_reply(xid, 4, {});
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, CallStatus::kOk);
  EXPECT_EQ(r->state(), ReqState::kCompleted) << "its Send is not known complete yet";
  complete(h, 0);
  EXPECT_EQ(r->state(), ReqState::kFree);
  EXPECT_EQ(h.core.requests.out(), 0u);
}

// A call waiting in the backlog (no credit before the first reply) whose
// deadline passes: backlog -> completed -> free, never sent.
void req_expired_in_backlog() {
  Harness<ClientConn> h;
  Done first, second;
  uint32_t x1 = 0, x2 = 0;
  ASSERT_EQ(h.conn->call(null_call(&first), &x1), 0);
  Call c = null_call(&second);
  c.timeout_ns = 1'000'000;
  ASSERT_EQ(h.conn->call(c, &x2), 0);
  Request* r2 = request_of(h, x2);
  ASSERT_NE(r2, nullptr);
  EXPECT_EQ(r2->state(), ReqState::kBacklog);
  h.conn->tick(r2->deadline + 1);
  EXPECT_EQ(second.calls, 1);
  EXPECT_EQ(second.status, CallStatus::kTimedOut);
  EXPECT_EQ(r2->state(), ReqState::kFree) << "nothing of it was posted";
  EXPECT_EQ(h.qp->sends.size(), 1u);
  h.deliver_reply(x1, 4, {});
  complete(h, 0);
  EXPECT_EQ(h.core.requests.out(), 0u);
}

// A call sent with nothing registered that times out: sent -> abandoned
// (its caller told now); its late reply: abandoned -> completed.
void req_abandoned() {
  Harness<ClientConn> h;
  Done d;
  uint32_t xid;
  Request* r = abandoned_call(h, &d, &xid);
  ASSERT_NE(r, nullptr);
  h.deliver_reply(xid, 4, {});
  EXPECT_EQ(r->state(), ReqState::kCompleted);
  EXPECT_EQ(d.calls, 1) << "completed once";
  complete(h, 0);
  EXPECT_EQ(h.core.requests.out(), 0u);
}

// A call in flight when the connection is lost, reconnecting on: sent ->
// orphaned; drained: orphaned -> backlog (sent again with its xid once the
// new QP is up); answered there.
void req_orphaned_and_sent_again() {
  Harness<ClientConn> h(/*reconnect=*/true);
  Done d;
  uint32_t xid = 0;
  ASSERT_EQ(h.conn->call(null_call(&d), &xid), 0);
  Request* r = request_of(h, xid);
  ASSERT_NE(r, nullptr);
  h.conn->on_disconnected(lost());
  EXPECT_EQ(r->state(), ReqState::kOrphaned);
  finish_drain(h);
  EXPECT_EQ(r->state(), ReqState::kBacklog) << "kept for the next connection";
  EXPECT_EQ(d.calls, 0);
  h.conn->tick(h.conn->next_attempt);
  h.conn->on_established({});
  bool more = false;
  h.conn->service(&more);
  EXPECT_EQ(r->state(), ReqState::kSent);
  EXPECT_EQ(r->xid, xid);
  h.conn->close();
  finish_drain(h);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, CallStatus::kDisconnected);
}

// The same with reconnecting off: orphaned -> completed at the drain.
void req_orphaned_and_failed() {
  Harness<ClientConn> h(/*reconnect=*/false);
  Done d;
  ASSERT_EQ(h.conn->call(null_call(&d), nullptr), 0);
  h.conn->on_disconnected(lost());
  finish_drain(h);
  EXPECT_EQ(d.calls, 1);
  EXPECT_EQ(d.status, CallStatus::kDisconnected);
}

// A call with a write chunk (registered through the stub registrar): its
// reply leaves it invalidating, waiting for its LOCAL_INV chain; the
// connection is lost before that chain completes: invalidating -> orphaned;
// drained, it completes with its reply's results (orphaned -> completed).
// A second such call is fenced by its chain's completion instead.
void req_lost_while_invalidating() {
  Harness<ClientConn> h(/*reconnect=*/false);
  h.dc.shared->reg = std::make_unique<StubRegistrar>();
  h.dc.chunk_reg = ChunkReg::kFastReg;
  uint8_t* mem = h.core.bulk->get(4096);
  ASSERT_NE(mem, nullptr);
  std::span<uint8_t> chunk(mem, 4096);
  const std::span<uint8_t> chunks[] = {chunk};
  Done fenced, lost_one;
  Call c = null_call(&fenced);
  c.write_chunks = chunks;
  uint32_t x1 = 0;
  ASSERT_EQ(h.conn->call(c, &x1), 0);
  Request* r1 = request_of(h, x1);
  ASSERT_NE(r1, nullptr);
  ASSERT_EQ(r1->state(), ReqState::kSent);
  h.deliver_reply(x1, 4, {});
  EXPECT_EQ(r1->state(), ReqState::kInvalidating);
  ASSERT_EQ(h.qp->sends.size(), 2u) << "the call's Send, then its LOCAL_INV chain";
  EXPECT_EQ(h.qp->sends[1].opcode, rdma::WrOpcode::kLocalInv);
  complete(h, 1, rdma::WcOpcode::kLocalInv);
  EXPECT_EQ(fenced.calls, 1);
  EXPECT_EQ(fenced.status, CallStatus::kOk);

  c.ctx = &lost_one;
  uint32_t x2 = 0;
  ASSERT_EQ(h.conn->call(c, &x2), 0);
  Request* r2 = request_of(h, x2);
  ASSERT_NE(r2, nullptr);
  h.deliver_reply(x2, 4, {});
  EXPECT_EQ(r2->state(), ReqState::kInvalidating);
  h.conn->on_disconnected(lost());
  EXPECT_EQ(r2->state(), ReqState::kOrphaned);
  EXPECT_EQ(lost_one.calls, 0) << "nothing is released before the drain";
  finish_drain(h);
  EXPECT_EQ(lost_one.calls, 1);
  EXPECT_EQ(lost_one.status, CallStatus::kOk) << "its reply came before the loss: its results stand";
  EXPECT_EQ(h.core.requests.out(), 0u);
  h.core.bulk->put(mem);
}

void all_requests() {
  req_answered();
  req_expired_in_backlog();
  req_abandoned();
  req_orphaned_and_sent_again();
  req_orphaned_and_failed();
  req_lost_while_invalidating();
}

// A call sent at once marshals its arguments from the caller's buffer and
// keeps reading them from its send buffer's message; when its Send is done
// before its reply, that buffer goes back to the pool and the arguments
// are kept in the request (ClientConn::keep_args): up to
// Request::kHeldArgs bytes moved in fixed-size blocks, more copied to the
// heap. Sent again after a reconnect, the message must be the first one,
// byte for byte, though the caller's buffer and the send buffer were both
// overwritten meanwhile.
void args_kept_past_the_send(size_t n) {
  Harness<ClientConn> h(/*reconnect=*/true);
  std::vector<uint8_t> args(n);
  for (size_t i = 0; i < n; ++i) args[i] = static_cast<uint8_t>(i * 7 + 1);
  Done d;
  Call c = null_call(&d);
  c.args = args;
  uint32_t xid = 0;
  ASSERT_EQ(h.conn->call(c, &xid), 0);
  Request* r = request_of(h, xid);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->args_in_sendbuf) << "sent at once, its arguments read from its send buffer";
  ASSERT_EQ(h.qp->sends.size(), 1u);
  const std::vector<uint8_t> first = h.qp->sends[0].bytes;
  complete(h, 0);  // its Send is done: the buffer goes back, the call still waits
  EXPECT_FALSE(r->args_in_sendbuf);
  EXPECT_EQ(r->call.args.data() == r->args_held, n <= Request::kHeldArgs) << n << " bytes";
  std::fill(args.begin(), args.end(), uint8_t{0xee});
  MsgBuf* b = h.core.send_bufs->get();  // the buffer it gave back (the pool is a stack)
  ASSERT_NE(b, nullptr);
  std::memset(b->data, 0x5a, b->cap);
  h.core.send_bufs->put(b);
  h.conn->on_disconnected(lost());
  finish_drain(h);
  ASSERT_EQ(r->state(), ReqState::kBacklog);
  h.conn->tick(h.conn->next_attempt);
  h.conn->on_established({});
  bool more = false;
  h.conn->service(&more);
  ASSERT_EQ(r->state(), ReqState::kSent);
  StubQp* q = h.dev->last != nullptr ? h.dev->last : h.qp;
  ASSERT_FALSE(q->sends.empty());
  EXPECT_EQ(q->sends.back().bytes, first) << n << " bytes of arguments, sent again";
  h.conn->close();
  finish_drain(h);
}

TEST(RequestThroughClientConn, SmallArgumentsKeptInTheRequestAreSentAgain) {
  for (size_t n : {size_t{4}, size_t{32}, size_t{64}, size_t{68}, Request::kHeldArgs}) args_kept_past_the_send(n);
}
TEST(RequestThroughClientConn, LargerArgumentsKeptOnTheHeapAreSentAgain) {
  for (size_t n : {Request::kHeldArgs + 4, size_t{600}}) args_kept_past_the_send(n);
}

TEST(RequestThroughClientConn, AnsweredCallIsFencedCompletedAndFreed) { req_answered(); }
TEST(RequestThroughClientConn, CallExpiringInTheBacklogCompletesUnsent) { req_expired_in_backlog(); }
TEST(RequestThroughClientConn, TimedOutCallIsAbandonedThenRetiredByItsLateReply) { req_abandoned(); }
TEST(RequestThroughClientConn, OrphanIsSentAgainAfterTheDrain) { req_orphaned_and_sent_again(); }
TEST(RequestThroughClientConn, OrphanFailsAtTheDrainWithoutReconnecting) { req_orphaned_and_failed(); }
TEST(RequestThroughClientConn, CallLostWhileInvalidatingKeepsItsReply) { req_lost_while_invalidating(); }

template <int N>
void expect_exactly(const bool (&table)[N][N], const Seen& seen, const char* (*name)(int)) {
  for (int f = 0; f < N; ++f)
    for (int t = 0; t < N; ++t) {
      const bool allowed = table[f][t];
      const bool taken = seen.count({f, t}) > 0;
      EXPECT_EQ(allowed, taken) << name(f) << " -> " << name(t)
                                << (allowed ? ": allowed, never taken" : ": taken, not allowed");
    }
}

TEST(RequestThroughClientConn, ScenariosTakeExactlyTheTable) {
  NEED_WATCH();
  Watch w;
  all_requests();
  expect_exactly(kReqTransitions, w.req, [](int s) { return req_state_name(static_cast<ReqState>(s)); });
}

// A completed request raised kAccepted again (a completion delivered twice,
// say): completed -> backlog, refused where it happens.
TEST(RequestThroughClientConnDeathTest, ACompletedRequestIsNotAcceptedAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Harness<ClientConn> h;
        Done d;
        uint32_t xid = 0;
        (void)h.conn->call(null_call(&d), &xid);
        Request* r = request_of(h, xid);
        h.deliver_reply(xid, 4, {});
        h.conn->process(r, ReqEvent::kAccepted);
      },
      "request: completed -> backlog is not a transition");
}

// ---------------------------------------------------------------- the server-call machine, through a ServerConn

constexpr uint32_t kHoldProc = 9;

// A handler that keeps its calls (answered or dropped later by the test).
void hold_handler(void* ctx, ServerCall* call) { static_cast<std::vector<ServerCall*>*>(ctx)->push_back(call); }

struct Server : Harness<ServerConn> {
  std::vector<ServerCall*> held;
  explicit Server(uint32_t sq_depth = 64) {
    core.handlers.set(HandlerEntry{kProg, kVers, kHoldProc, hold_handler, &held, nullptr,
                                   core.proc_counters(kProg, kVers, kHoldProc, true)});
    conn->sq_ = std::make_unique<SendQueue>(sq_depth, 64, 1);
  }
  // A call of `proc`, with read chunks when `ch` has them.
  void call(uint32_t xid, uint32_t proc, const ChunkLists& ch = ChunkLists{}) {
    Call c;
    c.prog = kProg, c.vers = kVers, c.proc = proc;
    const uint8_t args[] = {1, 2, 3, 4};
    receive([&](uint8_t* p, size_t cap) { return wire::encode_call(p, cap, xid, 8, ch, c, args); });
  }
  SrvCall* call_at(size_t i) { return static_cast<SrvCall*>(held.at(i)); }
};

// A plain call: free -> wait-memory -> in-handler (its memory at hand) ->
// sent (the handler replied, posted at once) -> free (its Send completed).
void srv_handled() {
  Server s;
  s.call(1, kProc);
  EXPECT_EQ(s.handled, 1);
  ASSERT_EQ(s.qp->sends.size(), 1u);
  complete(s, 0);
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
}

// A message whose transport header has the wrong version: answered with
// RDMA_ERROR before it becomes a call (free -> sent), then freed.
void srv_error_answer() {
  Server s;
  s.receive([](uint8_t* p, size_t) {
    const uint32_t words[] = {htobe32(5), htobe32(2), htobe32(8), htobe32(0), 0, 0, 0};
    std::memcpy(p, words, sizeof(words));
    return sizeof(words);
  });
  ASSERT_EQ(s.qp->sends.size(), 1u) << "ERR_VERS";
  EXPECT_EQ(s.handled, 0);
  complete(s, 0);
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
}

// A call that finds no send buffer waits for memory; its connection is
// lost meanwhile: wait-memory -> free, nothing posted.
void srv_lost_waiting_for_memory() {
  Server s;
  std::vector<MsgBuf*> taken;
  while (MsgBuf* b = s.core.send_bufs->get()) taken.push_back(b);
  s.call(1, kProc);
  EXPECT_EQ(s.handled, 0) << "waiting for a send buffer";
  EXPECT_EQ(s.core.srv_calls.out(), 1u);
  s.conn->on_disconnected(lost());
  EXPECT_EQ(s.core.srv_calls.out(), 0u) << "nothing posted: freed at the loss";
  for (MsgBuf* b : taken) s.core.send_bufs->put(b);
  finish_drain(s);
}

// A call with a read chunk: wait-memory -> pulling (its RDMA READ posted);
// pulled: pulling -> in-handler; replied and freed. A second one's
// connection is lost before its READ completes: pulling -> free at the drain.
ChunkLists one_read_chunk() {
  Call c;
  c.prog = kProg, c.vers = kVers, c.proc = kProc;
  ChunkLists ch;
  ch.clear();
  ch.nreads = 1;
  ch.reads[0].position = static_cast<uint32_t>(wire::call_rpc_header_len(c)) + 4;  // after the 4 bytes of arguments
  ch.reads[0].nsegs = 1;
  ch.reads[0].segs[0] = RdmaSegment{0x1234, 512, 0x10000};
  return ch;
}

void srv_pulled() {
  Server s;
  s.call(1, kProc, one_read_chunk());
  ASSERT_EQ(s.qp->sends.size(), 1u);
  EXPECT_EQ(s.qp->sends[0].opcode, rdma::WrOpcode::kRdmaRead);
  EXPECT_EQ(s.handled, 0);
  complete(s, 0, rdma::WcOpcode::kRdmaRead);
  EXPECT_EQ(s.handled, 1);
  ASSERT_EQ(s.qp->sends.size(), 2u);
  complete(s, 1);
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
}

void srv_lost_while_pulling() {
  Server s;
  s.call(1, kProc, one_read_chunk());
  ASSERT_EQ(s.qp->sends.size(), 1u);
  s.conn->on_disconnected(lost());
  EXPECT_EQ(s.core.srv_calls.out(), 1u) << "its READ may still land: kept until the drain";
  finish_drain(s);
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
  EXPECT_EQ(s.handled, 0);
}

// A send queue with room for one chain: the first call's reply is posted,
// the second's waits (in-handler -> reply-queued); the first's completion
// makes room and the service step posts it (reply-queued -> sent).
void srv_reply_waits_for_room() {
  Server s(/*sq_depth=*/1);
  s.call(1, kProc);
  s.call(2, kProc);
  EXPECT_EQ(s.handled, 2);
  ASSERT_EQ(s.qp->sends.size(), 1u) << "the second reply waits for room";
  complete(s, 0);
  bool more = false;
  s.conn->service(&more);
  ASSERT_EQ(s.qp->sends.size(), 2u);
  complete(s, 1);
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
}

// The same, but the connection is lost while the reply waits:
// reply-queued -> free (nothing of it was posted).
void srv_lost_with_reply_queued() {
  Server s(1);
  s.call(1, kProc);
  s.call(2, kProc);
  ASSERT_EQ(s.qp->sends.size(), 1u);
  s.conn->on_disconnected(lost());
  EXPECT_EQ(s.core.srv_calls.out(), 1u) << "the queued reply's call is freed; the posted one waits for the drain";
  finish_drain(s);
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
}

// Handlers that let go: drop() (in-handler -> free), and a call whose
// connection was lost under its handler (in-handler -> orphaned), whose
// reply is refused and frees it (orphaned -> free).
void srv_dropped_and_orphaned() {
  Server s;
  s.call(1, kHoldProc);
  ASSERT_EQ(s.held.size(), 1u);
  EXPECT_EQ(s.call_at(0)->state(), SrvState::kInHandler);
  s.held[0]->drop();
  EXPECT_EQ(s.core.srv_calls.out(), 0u);
  // (A dropped call's credit stays taken: the next call is another client's.)
  Server t;
  t.call(2, kHoldProc);
  ASSERT_EQ(t.held.size(), 1u);
  t.conn->on_disconnected(lost());
  EXPECT_EQ(t.call_at(0)->state(), SrvState::kOrphaned);
  finish_drain(t);
  EXPECT_EQ(t.core.srv_calls.out(), 1u) << "the handler still holds it";
  EXPECT_FALSE(t.held[0]->reply({}).is_ok()) << "no connection to answer on";
  EXPECT_EQ(t.core.srv_calls.out(), 0u);
  EXPECT_TRUE(t.conn->reclaimable());
}

void all_server_calls() {
  srv_handled();
  srv_error_answer();
  srv_lost_waiting_for_memory();
  srv_pulled();
  srv_lost_while_pulling();
  srv_reply_waits_for_room();
  srv_lost_with_reply_queued();
  srv_dropped_and_orphaned();
}

TEST(ServerCallThroughServerConn, HandledCallIsRepliedAndFreed) { srv_handled(); }
TEST(ServerCallThroughServerConn, BadVersionIsAnsweredWithRdmaError) { srv_error_answer(); }
TEST(ServerCallThroughServerConn, CallWaitingForMemoryIsFreedAtTheLoss) { srv_lost_waiting_for_memory(); }
TEST(ServerCallThroughServerConn, ReadChunkIsPulledThenHandled) { srv_pulled(); }
TEST(ServerCallThroughServerConn, PullingCallIsFreedOnlyAtTheDrain) { srv_lost_while_pulling(); }
TEST(ServerCallThroughServerConn, ReplyWaitsForSendQueueRoom) { srv_reply_waits_for_room(); }
TEST(ServerCallThroughServerConn, QueuedReplyIsFreedAtTheLoss) { srv_lost_with_reply_queued(); }
TEST(ServerCallThroughServerConn, DroppedAndOrphanedCallsAreFreedByTheirHandler) { srv_dropped_and_orphaned(); }

TEST(ServerCallThroughServerConn, ScenariosTakeExactlyTheTable) {
  NEED_WATCH();
  Watch w;
  all_server_calls();
  expect_exactly(kSrvTransitions, w.srv, [](int s) { return srv_state_name(static_cast<SrvState>(s)); });
}

// A call its handler holds raised kReceived again (a receive delivered
// twice, say): in-handler -> wait-memory, refused where it happens.
TEST(ServerCallThroughServerConnDeathTest, AHeldCallIsNotReceivedAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Server s;
        s.call(1, kHoldProc);
        s.conn->process(s.call_at(0), SrvEvent::kReceived);
      },
      "server call [0-9]+ \\(xid 1\\): in-handler -> wait-memory is not a transition");
}

}  // namespace
}  // namespace tern::rpc
