// Where the fields a call without chunks touches sit in its request
// (client) and its server call: in the first few cache lines, ahead of the
// chunk lists and the per-chunk arrays that only a chunked call reaches.
// Each RPC at depth 1 reads and writes these fields from several functions
// (call, send, reply, finish and free), so a field added or moved below the
// arrays costs every RPC a cache line of its own (docs/performance.md,
// "Cache lines per RPC"). Offsets are taken from a live object: the
// structures have virtual functions or bases, so offsetof is not portable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/chunks.h"
#include "engine/engine_impl.h"
#include "engine/request.h"
#include "engine/server_call.h"

namespace tern::rpc {
namespace {

constexpr size_t kLine = 64;

template <class T, class F>
size_t end_of(const T& obj, const F& field) {
  return static_cast<size_t>(reinterpret_cast<const char*>(&field) - reinterpret_cast<const char*>(&obj)) +
         sizeof(field);
}

TEST(HotFields, ChunkListsCountsShareTheirFirstLine) {
  // clear() and every "has it any chunk" test read these four.
  ChunkLists ch;
  EXPECT_LE(end_of(ch, ch.nreads), kLine);
  EXPECT_LE(end_of(ch, ch.nwrites), kLine);
  EXPECT_LE(end_of(ch, ch.has_reply), kLine);
  EXPECT_LE(end_of(ch, ch.reply.nsegs), kLine);
}

TEST(HotFields, ServerCallPlainFieldsLeadIt) {
  auto* sc = new SrvCall;
  const size_t hot_end = 6 * kLine;  // ~5 lines of scalars, then the chunk lists' first
  size_t last = 0;
  for (size_t e : {end_of(*sc, sc->handler_owner), end_of(*sc, sc->send_owner), end_of(*sc, sc->answer),
                   end_of(*sc, sc->index), end_of(*sc, sc->conn), end_of(*sc, sc->xid_), end_of(*sc, sc->wanted),
                   end_of(*sc, sc->args_), end_of(*sc, sc->hdr_), end_of(*sc, sc->rep), end_of(*sc, sc->sendbuf),
                   end_of(*sc, sc->inv_rkey), end_of(*sc, sc->ndata_), end_of(*sc, sc->pool_memory),
                   end_of(*sc, sc->handler), end_of(*sc, sc->msg_len), end_of(*sc, sc->long_len),
                   end_of(*sc, sc->nbulk), end_of(*sc, sc->t_recv), end_of(*sc, sc->proc_counters),
                   end_of(*sc, sc->waiting), end_of(*sc, sc->rw_link), end_of(*sc, sc->rw_what),
                   end_of(*sc, sc->chunks.nreads), end_of(*sc, sc->chunks.nwrites),
                   end_of(*sc, sc->chunks.reply.nsegs)})
    last = std::max(last, e);
  EXPECT_LE(last, hot_end) << "a field every call touches lies past the first " << hot_end / kLine
                           << " cache lines of the server call (" << sizeof(SrvCall) << " bytes)";
  delete sc;
}

TEST(HotFields, RequestPlainFieldsLeadIt) {
  auto* r = new Request;
  const size_t hot_end = 7 * kLine;
  size_t last = 0;
  for (size_t e : {end_of(*r, r->send_owner), end_of(*r, r->rpc_owner), end_of(*r, r->xid), end_of(*r, r->conn),
                   end_of(*r, r->call), end_of(*r, r->sendbuf), end_of(*r, r->reply), end_of(*r, r->holds_recv),
                   end_of(*r, r->rpc_hdr), end_of(*r, r->in_flight_link), end_of(*r, r->deadline_link),
                   end_of(*r, r->result), end_of(*r, r->t_call), end_of(*r, r->proc_counters),
                   end_of(*r, r->args_in_sendbuf), end_of(*r, r->nreads), end_of(*r, r->nwrites)})
    last = std::max(last, e);
  EXPECT_LE(last, hot_end) << "a field every call touches lies past the first " << hot_end / kLine
                           << " cache lines of the request (" << sizeof(Request) << " bytes)";
  delete r;
}

// The fields of the engine every poll() pass reads or writes at depth 1
// (the CQ loop, the receive's dispatch, the send completion's slot lookup,
// the rare parts' tests, the receive posts' test, the clock's pass count)
// lie on a few adjacent cache lines: ConnCore's hot part, its last lines,
// and EngineImpl's own pass fields right after it. On the old layout they
// were on 12 lines spread over 16 KiB (the send scratch between them).
TEST(HotFields, EnginePassFieldsAreAdjacent) {
  static_assert(alignof(EngineImpl) == kLine, "the engine starts on a line, so its hot lines are the ones counted");
  auto* e = new EngineImpl(EngineOptions{});
  ASSERT_EQ(reinterpret_cast<uintptr_t>(e) % kLine, 0u);
  size_t lo = SIZE_MAX, hi = 0;
  auto at = [&](const auto& field) {
    const size_t end = end_of(*e, field);
    lo = std::min(lo, end - sizeof(field));
    hi = std::max(hi, end);
  };
  // ConnCore's.
  at(e->send_bufs), at(e->recv_bufs), at(e->shares), at(e->service_list), at(e->service), at(e->queues);
  at(e->to_post), at(e->posts_due), at(e->rx_batch), at(e->rx_pos), at(e->now_tick), at(e->tick_fresh);
  at(e->cm_due), at(e->shutting_down), at(e->memory_waiters);
  // EngineImpl's.
  at(e->waiting.armed), at(e->waiting.rechecking), at(e->waiting.pollers_drained), at(e->waiting.pollers_worked);
  at(e->pollers), at(e->served_alone), at(e->alone_since), at(e->snapshot_wanted), at(e->clock_skip);
  at(e->polls), at(e->devices), at(e->conns);
  const size_t lines = (hi - 1) / kLine - lo / kLine + 1;
  EXPECT_LE(lines, 8u) << "the poll pass's fields span bytes " << lo << ".." << hi << " of the engine ("
                       << sizeof(EngineImpl) << " bytes): a field moved out of the hot part, or a cold one into it";
  delete e;
}

}  // namespace
}  // namespace tern::rpc
