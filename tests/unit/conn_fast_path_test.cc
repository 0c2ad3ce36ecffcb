// The plain messages' shortcuts above the wire codec, against the general
// path. A connection takes a few shortcuts for the commonest message (an
// inline call or reply with no chunk lists, AUTH_NONE, SUCCESS): the
// client's call() checks and first send, its reply decoding, the server's
// call decoding, its start and its inline reply (docs/engine.md, "One
// path per message"). Each must do exactly what the general path does with
// that message, so each scenario here runs twice over stubs
// (conn_stubs.h) -- the fast paths on, then off
// (wire::testing::use_fast_paths) -- and compares everything observable:
// every byte posted, what the handler and the callback saw, every counter,
// the pools, the connection's phase. The messages are the plain shapes,
// every one-word mutation and truncation of them, and the general shapes
// next to them (AUTH_SYS, chunk lists, errors the engine answers itself).
#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "conn_stubs.h"
#include "xdr/xdr.h"

namespace tern::rpc {
namespace {

using namespace conn_stubs;
using rdma::Wc;
using rdma::WcStatus;

// In a library built without TERN_DEBUG (release), the connections'
// shortcuts cannot be turned off: both runs would take them.
#define SKIP_UNLESS_SWITCHABLE()                                                                  \
  if (!wire::testing::shortcuts_switchable())                                                     \
  GTEST_SKIP() << "the library was built without TERN_DEBUG: its connections' shortcuts cannot " \
                  "be turned off, so there is no general path to compare them with"

struct FastOff {
  FastOff() { wire::testing::use_fast_paths(false); }
  ~FastOff() { wire::testing::use_fast_paths(true); }
};

// Runs `scenario` with the fast paths on and off; the two accounts must
// agree. Returns the account (with the fast paths on).
std::string both_ways(const std::function<std::string()>& scenario) {
  const std::string fast = scenario();
  std::string general;
  {
    FastOff off;
    general = scenario();
  }
  EXPECT_EQ(fast, general);
  return fast;
}

// Aligned words equal to one of `xids` are written as their index: a
// client's xids are random, so two runs name the same call differently.
std::string hex(std::span<const uint8_t> b, const std::vector<uint32_t>& xids = {}) {
  std::ostringstream o;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i % 4 == 0 && i + 4 <= b.size()) {
      const uint32_t w = xdr::detail::load_be32(b.data() + i);
      bool named = false;
      for (size_t k = 0; k < xids.size(); ++k)
        if (w == xids[k]) {
          o << "<xid" << k << ">";
          named = true;
        }
      if (named) {
        i += 3;
        continue;
      }
    }
    static const char* d = "0123456789abcdef";
    o << d[b[i] >> 4] << d[b[i] & 15];
  }
  return o.str();
}

void counters(std::ostringstream& o, const StatsView& v) {
  for (const StatEntry& e : v)
    if (e.counter->get() != 0) o << e.name << '=' << e.counter->get() << ' ';
}

// Every counter of the engine, the connection and the procedures.
template <typename H>
void accounts(std::ostringstream& o, H& h) {
  static_assert(sizeof(EngineStats) % sizeof(Counter) == 0);
  const auto* c = reinterpret_cast<const Counter*>(&h.core.engine_stats);
  o << "\nengine:";
  for (size_t i = 0; i < sizeof(EngineStats) / sizeof(Counter); ++i)
    if (c[i].get() != 0) o << ' ' << i << '=' << c[i].get();
  o << "\nconn: ";
  counters(o, conn_counters_view(h.conn->counters));
  for (const ProcCounters* p : h.core.proc_order)
    o << "\nproc " << p->prog << '.' << p->vers << '.' << p->proc << (p->server ? 's' : 'c') << ": ops "
      << p->ops.get() << " errors " << p->errors.get() << " sent " << p->bytes_sent.get() << " received "
      << p->bytes_received.get() << " rtt " << p->rtt.count();
  o << "\npools: requests " << h.core.requests.out() << " calls " << h.core.srv_calls.out() << " sendbufs "
    << h.core.send_bufs->out() << " bulk " << h.core.bulk->in_use() << " recv pending+posted "
    << h.rq->pending() + h.rq->posted() << "/" << h.rq->owned() << "\nphase " << conn_phase_name(h.conn->phase());
}

// Completes every signaled WR posted since `from` (as the device would,
// successfully), until nothing new is posted; each WR listed once.
template <typename H>
void complete_all(std::ostringstream& o, H& h, size_t* from, const std::vector<uint32_t>& xids) {
  while (*from < h.qp->sends.size()) {
    const StubQp::Posted p = h.qp->sends[(*from)++];
    o << "\nposted op " << static_cast<int>(p.opcode) << " flags " << static_cast<int>(p.flags) << " "
      << hex(p.bytes, xids);
    if ((p.flags & rdma::kWrSignaled) == 0 || h.conn->phase() != ConnPhase::kReady) continue;
    Wc wc{};
    wc.wr_id = p.wr_id;
    wc.qp_num = h.qp->qp_num();
    wc.status = WcStatus::kSuccess;
    wc.opcode = p.opcode == rdma::WrOpcode::kRdmaRead ? rdma::WcOpcode::kRdmaRead
                : p.opcode == rdma::WrOpcode::kRdmaWrite ? rdma::WcOpcode::kRdmaWrite
                                                          : rdma::WcOpcode::kSend;
    h.conn->on_send_completion(wc);
  }
}

// The message arrives as it is (cut to the receive buffer's size).
template <typename H>
void receive_bytes(H& h, std::span<const uint8_t> msg) {
  h.receive([&](uint8_t* p, size_t cap) {
    const size_t n = std::min(cap, msg.size());
    std::memcpy(p, msg.data(), n);
    return n;
  });
}

// ---- the server: one message received, handled, answered

enum class Answer { kReverse, kEmpty, kError, kTooLarge, kDrop };

struct Seen {
  Answer answer = Answer::kReverse;
  std::ostringstream log;
};

void recording_handler(void* ctx, ServerCall* call) {
  auto* s = static_cast<Seen*>(ctx);
  s->log << "\nhandler " << call->prog() << '.' << call->vers() << '.' << call->proc() << " xid " << call->xid()
         << " args " << hex(call->args()) << " header " << hex(call->rpc_header()) << " bulk "
         << call->bulk().size() << " write chunks " << call->write_chunk_count();
  Status st;
  switch (s->answer) {
    case Answer::kReverse: {
      std::vector<uint8_t> out(call->args().rbegin(), call->args().rend());
      st = call->reply(out);
      break;
    }
    case Answer::kEmpty: st = call->reply({}); break;
    case Answer::kError: st = call->reply_error(AcceptStat::kGarbageArgs); break;
    case Answer::kTooLarge: st = call->reply(std::vector<uint8_t>(8192, 0x5A)); break;
    case Answer::kDrop: call->drop(); return;
  }
  s->log << " reply: " << (st.is_ok() ? "ok" : st.message());
}

std::string serve(std::span<const uint8_t> msg, Answer answer) {
  Harness<ServerConn> h;
  Seen seen;
  seen.answer = answer;
  h.core.handlers.set(HandlerEntry{kProg, kVers, kProc, recording_handler, &seen, nullptr,
                                   h.core.proc_counters(kProg, kVers, kProc, true)});
  receive_bytes(h, msg);
  std::ostringstream o;
  size_t from = 0;
  complete_all(o, h, &from, {});
  o << seen.log.str();
  accounts(o, h);
  return o.str();
}

std::vector<uint8_t> call_message(uint32_t xid, const Call& c, std::span<const uint8_t> args,
                                  const ChunkLists& ch = ChunkLists{}) {
  std::vector<uint8_t> m(1024);
  const size_t n = wire::encode_call(m.data(), m.size(), xid, 8, ch, c, args);
  EXPECT_GT(n, 0u);
  m.resize(n);
  return m;
}

// Every one-word mutation (values that matter to the decoders) and every
// truncation of msg, as engine_wire_test.cc mutates the codec's input.
std::vector<std::vector<uint8_t>> variants(const std::vector<uint8_t>& msg) {
  std::vector<std::vector<uint8_t>> out{msg};
  const uint32_t values[] = {0, 1, 2, 3, 4, 0x1234, 0xFFFFFFFF};
  for (size_t w = 0; w + 4 <= msg.size() && w < 18 * 4; w += 4)
    for (uint32_t v : values) {
      auto m = msg;
      xdr::detail::store_be32(m.data() + w, v);
      out.push_back(m);
    }
  for (size_t n = 4; n < msg.size(); n += 4) out.emplace_back(msg.begin(), msg.begin() + static_cast<long>(n));
  return out;
}

const Call kPlain{kProg, kVers, kProc};

TEST(ConnFastPath, ServerTakesEveryCallNearThePlainShapeAsTheGeneralPathDoes) {
  SKIP_UNLESS_SWITCHABLE();
  const uint8_t args[] = {1, 2, 3, 4, 5, 6, 7, 8};
  int handled = 0;
  for (const auto& m : variants(call_message(0x1234, kPlain, args))) {
    const std::string account = both_ways([&] { return serve(m, Answer::kReverse); });
    handled += account.find("\nhandler ") != std::string::npos;
  }
  // Not vacuous: the plain call itself and its mutations of the grant and
  // of the arguments reach the handler (by the shortcuts, with them on).
  EXPECT_GT(handled, 10);
}

TEST(ConnFastPath, ServerAnswersEveryWayAsTheGeneralPathDoes) {
  SKIP_UNLESS_SWITCHABLE();
  const uint8_t args[] = {9, 8, 7, 6};
  const auto m = call_message(0x4321, kPlain, args);
  for (Answer a : {Answer::kReverse, Answer::kEmpty, Answer::kError, Answer::kTooLarge, Answer::kDrop}) {
    const std::string account = both_ways([&] { return serve(m, a); });
    EXPECT_NE(account.find("\nhandler "), std::string::npos) << static_cast<int>(a);
  }
}

TEST(ConnFastPath, ServerTakesTheGeneralShapesAsTheGeneralPathDoes) {
  SKIP_UNLESS_SWITCHABLE();
  const uint8_t args[] = {1, 2, 3, 4, 5, 6, 7, 8};
  AuthSys sys;
  sys.machine = "client-3";
  sys.uid = 1000, sys.gid = 100, sys.ngids = 1, sys.gids[0] = 27;
  Call with_sys = kPlain;
  with_sys.auth = &sys;
  Call other_proc = kPlain;
  other_proc.proc = kProc + 1;  // no handler: PROC_UNAVAIL, the engine's own answer
  std::vector<std::vector<uint8_t>> shapes = {call_message(0x77, with_sys, args),
                                              call_message(0x78, other_proc, args)};
  constexpr uint64_t base = 0x100000;
  ChunkLists wr;
  wr.clear();
  wr.nwrites = 1;
  wr.writes[0].nsegs = 1;
  wr.writes[0].segs[0] = RdmaSegment{0x99, 4096, base};
  shapes.push_back(call_message(0x79, kPlain, args, wr));  // a write chunk the reply leaves empty
  ChunkLists rc;
  rc.clear();
  rc.has_reply = true;
  rc.reply.nsegs = 1;
  rc.reply.segs[0] = RdmaSegment{0x9a, 16384, base};
  shapes.push_back(call_message(0x7a, kPlain, args, rc));  // a reply chunk for a reply too large inline
  ChunkLists rd;
  rd.clear();
  rd.nreads = 1;
  rd.reads[0].position = 8;
  rd.reads[0].nsegs = 1;
  rd.reads[0].segs[0] = RdmaSegment{0x9b, 512, base};
  shapes.push_back(call_message(0x7b, kPlain, args, rd));  // a read chunk, pulled
  for (const auto& m : shapes)
    for (Answer a : {Answer::kReverse, Answer::kTooLarge}) both_ways([&] { return serve(m, a); });
}

// A server call is reused as soon as it is freed, and free_call() does
// not reset everything a call wrote: handle_call() counts on it having
// reset what the plain call's path does not write again (the engine's own
// answer, the handler, the procedure counters, the read-chunk data). So
// after every other shape -- one the engine answers itself, one with
// AUTH_SYS, with chunk lists, with read chunks pulled -- the plain call on
// the same server call must be served exactly as on a fresh connection.
struct Reuse {
  std::vector<uint32_t> slots;  // the server call each handler ran on
  std::ostringstream log;
};
void reuse_handler(void* ctx, ServerCall* call) {
  auto* r = static_cast<Reuse*>(ctx);
  r->slots.push_back(static_cast<SrvCall*>(call)->index);
  r->log << "\nhandler " << call->prog() << '.' << call->vers() << '.' << call->proc() << " xid " << call->xid()
         << " args " << hex(call->args()) << " header " << hex(call->rpc_header()) << " bulk "
         << call->bulk().size() << " read chunks " << call->read_chunks().size() << " write chunks "
         << call->write_chunk_count();
  std::vector<uint8_t> out(call->args().rbegin(), call->args().rend());
  const Status st = call->reply(out);
  r->log << " reply: " << (st.is_ok() ? "ok" : st.message());
}

// What the plain call `plain` gets -- its handler's view and its reply but
// for the grant (the transport header's third word, which moves with the
// calls before it) -- after `before` on the same connection.
std::string plain_after(const std::vector<uint8_t>* before, const std::vector<uint8_t>& plain,
                        std::vector<uint32_t>* slots) {
  Harness<ServerConn> h;
  Reuse r;
  h.core.handlers.set(HandlerEntry{kProg, kVers, kProc, reuse_handler, &r, nullptr,
                                   h.core.proc_counters(kProg, kVers, kProc, true)});
  std::ostringstream ignored;
  size_t from = 0;
  if (before != nullptr) {
    receive_bytes(h, *before);
    complete_all(ignored, h, &from, {});
    h.rq->post(&h.core.engine_stats.recvs_posted, &h.core.engine_stats.recv_batches);
    EXPECT_EQ(h.core.srv_calls.out(), 0u) << "the call before is not freed";
  }
  r.log.str("");
  const size_t posted = h.qp->sends.size();
  receive_bytes(h, plain);
  complete_all(ignored, h, &from, {});
  std::ostringstream o;
  o << r.log.str();
  for (size_t i = posted; i < h.qp->sends.size(); ++i) {
    const auto& b = h.qp->sends[i].bytes;
    o << "\nposted op " << static_cast<int>(h.qp->sends[i].opcode) << " " << hex(std::span(b).first(8)) << " "
      << hex(std::span(b).subspan(std::min<size_t>(b.size(), 12)));
  }
  *slots = r.slots;
  return o.str();
}

TEST(ConnFastPath, ServerServesThePlainCallAfreshOnAServerCallAnotherShapeUsed) {
  const uint8_t args[] = {1, 2, 3, 4, 5, 6, 7, 8};
  const uint8_t other_args[] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
  AuthSys sys;
  sys.machine = "client-3";
  sys.uid = 1000, sys.gid = 100, sys.ngids = 1, sys.gids[0] = 27;
  Call with_sys = kPlain;
  with_sys.auth = &sys;
  Call other_proc = kPlain;
  other_proc.proc = kProc + 1;  // no handler: PROC_UNAVAIL, the engine's own answer
  Call other_vers = kPlain;
  other_vers.vers = kVers + 7;  // PROG_MISMATCH, with its version range
  std::vector<std::vector<uint8_t>> before = {call_message(0x77, with_sys, other_args),
                                              call_message(0x78, other_proc, other_args),
                                              call_message(0x76, other_vers, other_args)};
  constexpr uint64_t base = 0x100000;
  ChunkLists wr;
  wr.clear();
  wr.nwrites = 1;
  wr.writes[0].nsegs = 1;
  wr.writes[0].segs[0] = RdmaSegment{0x99, 4096, base};
  before.push_back(call_message(0x79, kPlain, other_args, wr));
  ChunkLists rd;
  rd.clear();
  rd.nreads = 1;
  rd.reads[0].position = 48;  // after the RPC header: data the handler sees
  rd.reads[0].nsegs = 1;
  rd.reads[0].segs[0] = RdmaSegment{0x9b, 512, base};
  before.push_back(call_message(0x7b, kPlain, other_args, rd));
  const auto plain = call_message(0x1234, kPlain, args);
  std::vector<uint32_t> fresh_slots;
  const std::string fresh = plain_after(nullptr, plain, &fresh_slots);
  ASSERT_NE(fresh.find("\nhandler "), std::string::npos) << fresh;
  for (size_t i = 0; i < before.size(); ++i) {
    for (bool fast : {true, false}) {
      if (!fast && !wire::testing::shortcuts_switchable()) continue;
      std::optional<FastOff> off;
      if (!fast) off.emplace();
      std::vector<uint32_t> slots;
      EXPECT_EQ(plain_after(&before[i], plain, &slots), fresh) << "after shape " << i << (fast ? "" : ", general path");
      // Not vacuous: the plain call ran on the server call the shape before
      // it used (the pool hands back the last one freed).
      ASSERT_FALSE(slots.empty());
      EXPECT_EQ(slots.back(), fresh_slots.back()) << "after shape " << i;
    }
  }
}

// ---- the client: calls made, one reply received

// Everything a callback is given.
struct Completion {
  int calls = 0;
  std::string reply;
};
void on_completion(void* ctx, const CallReply& r) {
  auto* d = static_cast<Completion*>(ctx);
  ++d->calls;
  std::ostringstream o;
  o << "status " << static_cast<int>(r.status) << " results " << hex(r.results) << " nwrites " << r.nwrites
    << " lens " << r.write_lens[0] << '/' << r.write_lens[1] << " bulk " << r.bulk_recv_len << " retransmits "
    << r.retransmits;
  d->reply += o.str();
}

struct ClientRun {
  Harness<ClientConn> h;
  std::ostringstream o;
  std::vector<uint32_t> xids;
  std::vector<std::unique_ptr<Completion>> done;
  size_t from = 0;

  int call(const Call& shape) {
    auto d = std::make_unique<Completion>();
    Call c = shape;
    c.done = on_completion;
    c.ctx = d.get();
    uint32_t xid = 0;
    const int rc = h.conn->call(c, &xid);
    o << "\ncall -> " << rc;
    if (rc == 0) xids.push_back(xid);
    done.push_back(std::move(d));
    settle();
    return rc;
  }
  void deliver(std::span<const uint8_t> msg) {
    receive_bytes(h, msg);
    settle();
  }
  void settle() {
    bool more = true;
    for (int i = 0; i < 4 && more; ++i) h.conn->service(&more);
    complete_all(o, h, &from, xids);
    // The buffers back to the QP, as the engine's poll() posts them.
    h.rq->post(&h.core.engine_stats.recvs_posted, &h.core.engine_stats.recv_batches);
  }
  std::string account() {
    for (size_t i = 0; i < done.size(); ++i) o << "\ndone " << i << ": " << done[i]->calls << " " << done[i]->reply;
    accounts(o, h);
    return o.str();
  }
};

// A SUCCESS reply to xid with `results`, granting `credits`.
std::vector<uint8_t> reply_message(uint32_t xid, uint32_t credits, std::span<const uint8_t> results) {
  std::vector<uint8_t> m(512);
  const size_t hl = wire::encode_reply_header(m.data(), m.size(), xid, credits, ChunkLists{}, false);
  const size_t n = wire::encode_rpc_reply(m.data() + hl, m.size() - hl, xid, 0, 0, 0, results);
  m.resize(hl + n);
  return m;
}

TEST(ConnFastPath, ClientTakesEveryReplyNearThePlainShapeAsTheGeneralPathDoes) {
  SKIP_UNLESS_SWITCHABLE();
  const uint8_t args[] = {4, 3, 2, 1};
  const uint8_t results[] = {1, 1, 2, 3, 5, 8, 13, 21};
  // The reply's words, mutated, around the call's own xid (known only once
  // the call is made): word 0 and word 7 are the two xids.
  const size_t n = variants(reply_message(0, 4, results)).size();
  int completed_ok = 0;
  for (size_t k = 0; k < n; ++k) {
    const std::string account = both_ways([&] {
      ClientRun run;
      Call c = kPlain;
      c.args = args;
      EXPECT_EQ(run.call(c), 0);
      // A mutation of an xid word keeps its value; the others keep the call's.
      run.deliver(variants(reply_message(run.xids[0], 4, results))[k]);
      return run.account();
    });
    completed_ok += account.find("\ndone 0: 1 status 0 ") != std::string::npos;
  }
  EXPECT_GT(completed_ok, 10);
}

TEST(ConnFastPath, ClientMakesEveryCallAsTheGeneralPathDoes) {
  SKIP_UNLESS_SWITCHABLE();
  const uint8_t args[] = {4, 3, 2, 1};
  std::vector<uint8_t> big(4096, 0x33);
  AuthSys sys;
  sys.machine = "client-3";
  sys.uid = 1000, sys.gid = 100;
  std::vector<std::function<void(Call&)>> shapes = {
      [](Call&) {},
      [&](Call& c) { c.auth = &sys; },
      [&](Call& c) { c.args = big; },                 // too large inline, no registrar: refused
      [](Call& c) { c.max_results = 8192; },          // needs a reply chunk: refused without a registrar
      [](Call& c) { c.max_results = 64u << 20; },     // over max_reply
      [&](Call& c) { c.bulk_recv = std::span<uint8_t>(big); },  // a write chunk: refused without a registrar
  };
  for (const auto& shape : shapes)
    both_ways([&] {
      ClientRun run;
      Call c = kPlain;
      c.args = args;
      shape(c);
      run.call(c);
      return run.account();
    });
  // Calls beyond the one credit the server first grants wait in the
  // backlog, and go out in order as replies grant more.
  const uint8_t results[] = {7};
  both_ways([&] {
    ClientRun run;
    Call c = kPlain;
    c.args = args;
    for (int i = 0; i < 3; ++i) run.call(c);
    for (size_t i = 0; i < 3 && i < run.xids.size(); ++i) run.deliver(reply_message(run.xids[i], 2, results));
    return run.account();
  });
}

}  // namespace
}  // namespace tern::rpc
