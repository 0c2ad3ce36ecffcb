// The whole of RFC 8166's chunk model, client and server engines over
// pmd/shm (or TERN_RPC_DEVICE): several read chunks at their own positions,
// several write chunks each filled with its own data, long calls, the
// inline reply limit set by the client's receive size, and handler-directed
// placement that lands read chunks in the handler's own memory and sends
// bulk results from it, with no copy and no bulk-pool memory.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "engine/engine.h"
#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

constexpr uint32_t kChunks = 20;     // args: anything -> results: for each read chunk {position, length, sum}
constexpr uint32_t kFillEach = 21;   // args: u8 seed -> fills every write chunk to capacity with pattern(seed + i)
constexpr uint32_t kPlaced = 22;     // placer-handled: checks the data landed in the handler's buffer

uint64_t stat_of(const Engine& e, const char* name) {
  for (const StatEntry& s : e.stats_view())
    if (std::strcmp(s.name, name) == 0) return s.counter->get();
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

void chunks_h(void*, ServerCall* c) {
  std::vector<uint32_t> out;
  for (const ReadChunkData& d : c->read_chunks()) {
    out.push_back(d.position);
    out.push_back(static_cast<uint32_t>(d.data.size()));
    out.push_back(std::accumulate(d.data.begin(), d.data.end(), 0u));
  }
  ASSERT_TRUE(c->reply({reinterpret_cast<const uint8_t*>(out.data()), out.size() * 4}).is_ok());
}

void fill_each_h(void*, ServerCall* c) {
  ASSERT_EQ(c->args().size(), 4u);
  const uint8_t seed = c->args()[0];
  std::vector<std::span<const uint8_t>> bulk;
  for (uint32_t i = 0; i < c->write_chunk_count(); ++i) {
    auto b = c->write_chunk_buffer(i, c->write_chunk_capacity(i));
    ASSERT_EQ(b.size(), c->write_chunk_capacity(i));
    for (size_t k = 0; k < b.size(); ++k) b[k] = pat(seed + i, k);
    bulk.push_back(b);
  }
  ASSERT_TRUE(c->reply_chunks({}, bulk).is_ok());
}

TEST(Chunks, SeveralReadChunksArriveAtTheirPositions) {
  Fixture f;
  f.srv->handle(kProg, kVers, kChunks, &chunks_h, nullptr);
  auto* a = static_cast<uint8_t*>(f.cli->alloc(8192));
  auto* b = static_cast<uint8_t*>(f.cli->alloc(300));
  auto* z = static_cast<uint8_t*>(f.cli->alloc(65536));
  uint32_t sa = 0, sb = 0, sz = 0;
  for (int i = 0; i < 8192; ++i) sa += a[i] = pat(1, i);
  for (int i = 0; i < 300; ++i) sb += b[i] = pat(2, i);
  for (int i = 0; i < 65536; ++i) sz += z[i] = pat(3, i);
  uint8_t args[16] = {};
  // Out of order on purpose: the engine sorts them by position.
  ReadChunk more[2] = {{std::span<const uint8_t>(b, 300), 12}, {std::span<const uint8_t>(a, 8192), 4}};
  Call c;
  c.proc = kChunks;
  c.args = args;
  c.read_chunks = more;
  c.bulk_send = std::span<const uint8_t>(z, 65536);  // at the end of the arguments
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  std::vector<uint32_t> got(p.results.size() / 4);
  std::memcpy(got.data(), p.results.data(), p.results.size());
  EXPECT_EQ(got, (std::vector<uint32_t>{4, 8192, sa, 12, 300, sb, 16, 65536, sz}));
  EXPECT_EQ(f.cli->stats().rkeys_live.get(), 0u);
  EXPECT_EQ(f.srv->stats().read_chunks.get(), 1u) << "one call with read chunks";
}

TEST(Chunks, SeveralWriteChunksAreEachFilledWithTheirOwnData) {
  Fixture f;
  f.srv->handle(kProg, kVers, kFillEach, &fill_each_h, nullptr);
  auto* w0 = static_cast<uint8_t*>(f.cli->alloc(40000));
  auto* w1 = static_cast<uint8_t*>(f.cli->alloc(4096));
  auto* w2 = static_cast<uint8_t*>(f.cli->alloc(100000));
  std::span<uint8_t> more[2] = {{w1, 4096}, {w2, 100000}};
  uint32_t seed = 40;
  Call c;
  c.proc = kFillEach;
  c.args = {reinterpret_cast<const uint8_t*>(&seed), 4};
  c.bulk_recv = {w0, 40000};
  c.write_chunks = more;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  ASSERT_EQ(p.reply.nwrites, 3u);
  EXPECT_EQ(p.reply.write_lens[0], 40000u);
  EXPECT_EQ(p.reply.write_lens[1], 4096u);
  EXPECT_EQ(p.reply.write_lens[2], 100000u);
  EXPECT_EQ(p.reply.bulk_recv_len, 40000u);
  uint8_t* bufs[3] = {w0, w1, w2};
  uint32_t lens[3] = {40000, 4096, 100000};
  for (int i = 0; i < 3; ++i)
    for (uint32_t k = 0; k < lens[i]; ++k) ASSERT_EQ(bufs[i][k], pat(40 + i, k)) << "chunk " << i << " byte " << k;
  EXPECT_EQ(f.cli->stats().rkeys_live.get(), 0u);
}

TEST(Chunks, TheServersInlineLimitIsTheClientsReceiveSize) {
  // The client sends 1 KiB inline but receives 4 KiB: a 2 KiB reply goes
  // inline (it used to be refused as if the client received only 1 KiB).
  EngineOptions so, co;
  co.inline_send = 1024;
  co.inline_recv = 4096;
  Fixture f(so, co);
  EXPECT_EQ(f.conn->info().inline_send, 1024u);
  EXPECT_EQ(f.conn->info().inline_recv, 4096u);
  uint32_t n = 2048;
  Call c;
  c.proc = kBig;
  c.args = {reinterpret_cast<const uint8_t*>(&n), 4};
  c.max_results = 2048;
  Pending p = f.call(c);
  ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
  ASSERT_EQ(p.results.size(), 2048u);
  for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(p.results[i], pat(7, i));
  EXPECT_EQ(f.srv->stats().reply_chunks.get(), 0u) << "it went inline";
}

TEST(Chunks, ResultsThatFitNowhereGetErrChunk) {
  Fixture f;
  uint32_t n = 8000;  // over the inline threshold, and no reply chunk offered
  Call c;
  c.proc = kBig;
  c.args = {reinterpret_cast<const uint8_t*>(&n), 4};
  Pending p = f.call(c);
  EXPECT_EQ(p.reply.status, CallStatus::kRdmaError) << call_status_name(p.reply.status);
  EXPECT_EQ(f.srv->stats().rdma_errors_sent.get(), 1u);
  EXPECT_FALSE(f.conn->failed());
  n = 16;
  p = f.call(c);
  EXPECT_EQ(p.reply.status, CallStatus::kOk) << "the connection goes on";
}

// A target that moves data straight between the wire and its own buffers.
struct Target {
  Engine* eng = nullptr;
  uint8_t* in = nullptr;   // where read chunks land
  uint8_t* out = nullptr;  // where bulk results come from
  uint32_t placed = 0;
  bool landed_in_place = false;
  static std::span<uint8_t> place(void* ctx, ServerCall*, uint32_t chunk, uint32_t len) {
    auto* t = static_cast<Target*>(ctx);
    ++t->placed;
    return {t->in + chunk * (256u << 10), len};
  }
  static void handle(void* ctx, ServerCall* c) {
    auto* t = static_cast<Target*>(ctx);
    t->landed_in_place = !c->bulk().empty() && c->bulk().data() == t->in;
    // The results go out from the target's own memory.
    uint32_t n = static_cast<uint32_t>(c->bulk().size());
    for (uint32_t i = 0; i < n; ++i) t->out[i] = static_cast<uint8_t>(c->bulk()[i] ^ 0x5a);
    ASSERT_TRUE(c->reply({}, {t->out, std::min(n, c->bulk_capacity())}).is_ok());
  }
};

TEST(Chunks, APlacerLandsDataInTheHandlersMemoryWithNoCopyAndNoPool) {
  Fixture f;
  Target t;
  t.eng = f.srv.get();
  t.in = static_cast<uint8_t*>(f.srv->alloc(1u << 20));
  t.out = static_cast<uint8_t*>(f.srv->alloc(256u << 10));
  f.srv->handle(kProg, kVers, kPlaced, &Target::handle, &t, &Target::place);
  auto* src = static_cast<uint8_t*>(f.cli->alloc(200000));
  auto* dst = static_cast<uint8_t*>(f.cli->alloc(200000));
  for (int i = 0; i < 200000; ++i) src[i] = pat(5, i);
  const uint64_t pool_gets = stat_of(*f.srv, "bulk_pool_high_water");
  for (int round = 0; round < 3; ++round) {
    std::memset(dst, 0, 200000);
    Call c;
    c.proc = kPlaced;
    c.bulk_send = {src, 200000};
    c.bulk_recv = {dst, 200000};
    Pending p = f.call(c);
    ASSERT_EQ(p.reply.status, CallStatus::kOk) << call_status_name(p.reply.status);
    EXPECT_TRUE(t.landed_in_place) << "the READ's destination was the handler's buffer";
    EXPECT_EQ(p.reply.bulk_recv_len, 200000u);
    for (int i = 0; i < 200000; ++i) ASSERT_EQ(dst[i], static_cast<uint8_t>(pat(5, i) ^ 0x5a)) << i;
  }
  EXPECT_EQ(t.placed, 3u);
  EXPECT_EQ(stat_of(*f.srv, "bulk_pool_high_water"), pool_gets)
      << "neither the read chunk nor the bulk results touched the engine's pool";
  EXPECT_EQ(stat_of(*f.srv, "bulk_pool_in_use"), 0u);
}

}  // namespace
}  // namespace tern::rpc
