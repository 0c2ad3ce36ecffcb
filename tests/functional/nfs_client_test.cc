// NfsClient against a Tern server engine over pmd/shm, for what needs no
// real NFS server: a call that times out must not hand its buffer back while
// the server can still write into it, and must end within its deadline;
// NFS4ERR_DELAY is waited out with backoff; a connection lost mid-read is
// resumed (the engine's reconnect and same-xid retransmission, or a new
// connection when the engine's gives up).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "engine/engine.h"
#include "engine/engine_testing.h"
#include "nfs/nfs_client.h"
#include "nfs/nfs_program.h"
#include "test_arena.h"

namespace tern::nfs {
namespace {

using rpc::Engine;
using rpc::EngineOptions;
using rpc::ServerCall;

// A server whose COMPOUND handler holds every call until told to answer it,
// then replies with a full write chunk of 0xEE: a server that answers late.
struct LateServer {
  std::unique_ptr<Engine> eng;
  std::string path = "/tmp/tern-nfs-late-" + std::to_string(getpid()) + ".sock";
  std::atomic<bool> stop{false}, answer{false};
  std::atomic<int> held{0}, answered{0}, refused{0};
  ServerCall* call = nullptr;  // server thread only
  std::thread th;

  static void on_compound(void* ctx, ServerCall* c) {
    auto* s = static_cast<LateServer*>(ctx);
    s->call = c;
    s->held.fetch_add(1);
  }

  void start() {
    eng = Engine::create({.arena_bytes = rpc::kTestArenaBytes}).value();
    eng->handle(kNfsProgram, kNfsV4, kProcCompound, &on_compound, this);
    ASSERT_TRUE(eng->listen("shm:path=" + path).is_ok());
    th = std::thread([this] {
      while (!stop.load()) {
        eng->poll();
        if (call != nullptr && answer.load()) {
          uint32_t cap = call->bulk_capacity();
          auto b = call->bulk_buffer(cap);
          std::memset(b.data(), 0xEE, b.size());
          // Results no NFS client would accept; what matters is the WRITE.
          Status st = call->reply({}, b);
          (st.is_ok() ? answered : refused).fetch_add(1);
          call = nullptr;
        }
      }
    });
  }
  ~LateServer() {
    stop.store(true);
    if (th.joinable()) th.join();
    eng.reset();
    unlink(path.c_str());
  }
};

TEST(NfsClient, TimedOutReadReturnsOnlyOnceTheServerCannotWriteItsBuffer) {
  LateServer srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  // Long enough for the second call to reconnect and reach the server on a
  // loaded 2-core machine under ASan (200 ms was not, once in a full run).
  o.timeout_ms = 1000;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  constexpr size_t kLen = 64 * 1024;
  uint8_t* buf = (*cli)->alloc(kLen);
  ASSERT_NE(buf, nullptr);
  FileHandle fh;
  uint8_t h[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_TRUE(fh.assign(h));

  auto r = (*cli)->read(fh, 0, {buf, kLen});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kTimedOut) << r.status().to_string();
  EXPECT_EQ(srv.held.load(), 1);
  // The caller owns its buffer again and reuses it.
  std::memset(buf, 0x11, kLen);
  EXPECT_EQ((*cli)->engine().stats().rkeys_live.get(), 0u) << "no registration of the call is left";

  // Now the server answers: it pushes 64 KiB of 0xEE at the call's write chunk.
  srv.answer.store(true);
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < end) (*cli)->poll();
  EXPECT_EQ(srv.answered.load() + srv.refused.load(), 1);
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(buf[i], 0x11) << "the late reply wrote byte " << i;

  // The next call reconnects and times out the same way (the server holds it).
  srv.answer.store(false);
  auto again = (*cli)->read(fh, 0, {buf, kLen});
  EXPECT_EQ(again.status().code(), Errc::kTimedOut) << again.status().to_string();
  EXPECT_EQ(srv.held.load(), 2) << "a new connection carried the second call";
}


// ---------------------------------------------------------------- a fake NFSv4 server

uint32_t be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }
void put32(std::vector<uint8_t>* v, uint32_t x) {
  for (int i = 3; i >= 0; --i) v->push_back(static_cast<uint8_t>(x >> (8 * i)));
}
uint8_t file_byte(uint64_t off) { return static_cast<uint8_t>(off * 7 + (off >> 9) + 3); }

// Serves PUTFH + READ of a file whose byte at offset o is file_byte(o), as
// Linux's svcrdma does (the data through the client's write chunk, a reduced
// READ result inline). On its own thread, like a real server. It can answer
// NFS4ERR_DELAY to the first `delays` READs, or hold READs unanswered while
// `hold` is set (answering them, once released, into their -- maybe dead --
// connection).
struct FakeNfs {
  static constexpr uint64_t kFileSize = 1u << 20;
  std::unique_ptr<Engine> eng;
  std::string path = "/tmp/tern-nfs-fake-" + std::to_string(getpid()) + "-" + std::to_string(counter()++) + ".sock";
  std::atomic<bool> stop{false}, hold{false};
  std::atomic<int> delays{0};
  std::atomic<int> reads{0}, delayed{0}, served{0}, held_now{0};
  std::vector<ServerCall*> held;  // server thread only
  std::thread th;

  static int& counter() {
    static int n = 0;
    return n;
  }

  // Offset and count of a READ in COMPOUND {PUTFH, READ}; false if it is not one.
  static bool parse(std::span<const uint8_t> a, uint64_t* off, uint32_t* count) {
    size_t p = 0;
    auto u32 = [&](uint32_t* v) {
      if (p + 4 > a.size()) return false;
      *v = be32(a.data() + p);
      p += 4;
      return true;
    };
    uint32_t tag, minor, n, op, fhlen, seq, hi, lo;
    if (!u32(&tag)) return false;
    p += (tag + 3) & ~3u;
    if (!u32(&minor) || !u32(&n) || n != 2 || !u32(&op) || op != 22 || !u32(&fhlen)) return false;
    p += (fhlen + 3) & ~3u;
    if (!u32(&op) || op != 25 || !u32(&seq)) return false;
    p += 12;
    if (!u32(&hi) || !u32(&lo) || !u32(count)) return false;
    *off = uint64_t{hi} << 32 | lo;
    return true;
  }

  void serve(ServerCall* c) {
    uint64_t off;
    uint32_t count;
    std::vector<uint8_t> res;
    if (!parse(c->args(), &off, &count)) {
      (void)c->reply_error(rpc::AcceptStat::kGarbageArgs);
      return;
    }
    if (delays.load() > 0) {
      delays.fetch_sub(1);
      delayed.fetch_add(1);
      put32(&res, static_cast<uint32_t>(Nfs4Stat::kDelay));
      put32(&res, 0);  // tag
      put32(&res, 2);
      put32(&res, 22), put32(&res, 0);  // PUTFH ok
      put32(&res, 25), put32(&res, static_cast<uint32_t>(Nfs4Stat::kDelay));
      (void)c->reply(res);
      return;
    }
    uint32_t n = off >= kFileSize ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, kFileSize - off));
    n = std::min(n, c->bulk_capacity());
    auto b = c->bulk_buffer(n);
    for (uint32_t i = 0; i < n; ++i) b[i] = file_byte(off + i);
    put32(&res, 0);
    put32(&res, 0);
    put32(&res, 2);
    put32(&res, 22), put32(&res, 0);
    put32(&res, 25), put32(&res, 0);
    put32(&res, off + n >= kFileSize ? 1 : 0);  // eof
    put32(&res, n);                              // data, reduced: its length only
    if (c->reply(res, b).is_ok()) served.fetch_add(1);
  }

  static void on_compound(void* ctx, ServerCall* c) {
    auto* s = static_cast<FakeNfs*>(ctx);
    s->reads.fetch_add(1);
    if (s->hold.load()) {
      s->held.push_back(c);
      s->held_now.store(static_cast<int>(s->held.size()));
      return;
    }
    s->serve(c);
  }

  void start() {
    eng = Engine::create({.arena_bytes = rpc::kTestArenaBytes}).value();
    eng->handle(kNfsProgram, kNfsV4, kProcCompound, &on_compound, this);
    ASSERT_TRUE(eng->listen("shm:path=" + path).is_ok());
    th = std::thread([this] {
      while (!stop.load()) {
        eng->poll();
        if (!hold.load() && !held.empty()) {
          for (ServerCall* c : held) serve(c);  // into a dead connection: reply() frees it
          held.clear();
          held_now.store(0);
        }
      }
      for (ServerCall* c : held) c->drop();
      held.clear();
    });
  }
  ~FakeNfs() {
    stop.store(true);
    if (th.joinable()) th.join();
    eng.reset();
    unlink(path.c_str());
  }
};

uint64_t engine_stat(Engine& e, std::string_view name) {
  for (const StatEntry& s : e.stats_view())
    if (name == s.name) return s.counter->get();
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

FileHandle some_fh() {
  FileHandle fh;
  uint8_t h[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(fh.assign(h));
  return fh;
}

// READs in flight through read_async, with their outcomes.
struct Reads {
  struct One {
    int completions = 0;
    ReadDone d;
  };
  std::vector<One> all;
  static void cb(void* ctx, const ReadDone& d) {
    auto* o = static_cast<One*>(ctx);
    ++o->completions;
    o->d = d;
  }
  bool done() const {
    for (auto& o : all)
      if (o.completions == 0) return false;
    return true;
  }
};

void expect_file_bytes(const uint8_t* buf, uint64_t off, size_t len) {
  for (size_t i = 0; i < len; ++i) ASSERT_EQ(buf[i], file_byte(off + i)) << "byte " << off + i;
}

// The fake server answers a plain READ (a check of the fixture itself).
TEST(NfsClient, ReadsFromTheFakeServer) {
  FakeNfs srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  constexpr size_t kLen = 64 * 1024;
  uint8_t* buf = (*cli)->alloc(kLen);
  auto r = (*cli)->read(some_fh(), 4096, {buf, kLen});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->count, kLen);
  EXPECT_FALSE(r->eof);
  expect_file_bytes(buf, 4096, kLen);
}

// An asynchronous READ (what tern-nfs-read issues) to a server that holds
// it: the callback says kTimedOut within the deadline (plus the fencing),
// and the late answer never lands in the buffer the caller got back.
TEST(NfsClient, AsyncReadToAStalledServerTimesOutWithinItsDeadline) {
  FakeNfs srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  o.timeout_ms = 300;
  o.engine.reconnect_min_ms = 5;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  constexpr size_t kLen = 64 * 1024;
  uint8_t* buf = (*cli)->alloc(kLen);
  srv.hold.store(true);
  Reads rs;
  rs.all.resize(1);
  uint64_t t0 = monotonic_ns();
  ASSERT_EQ((*cli)->read_async(some_fh(), 0, {buf, kLen}, &Reads::cb, &rs.all[0]), 0);
  while (!rs.done() && monotonic_ns() - t0 < 10'000'000'000ull) (*cli)->poll();
  uint64_t took_ms = (monotonic_ns() - t0) / 1'000'000;
  ASSERT_TRUE(rs.done());
  EXPECT_EQ(rs.all[0].d.status.code(), Errc::kTimedOut) << rs.all[0].d.status.to_string();
  EXPECT_GE(took_ms, 290u);
  EXPECT_LT(took_ms, 1500u) << "the deadline was 300 ms";
  EXPECT_EQ(srv.reads.load(), 1);
  EXPECT_EQ((*cli)->stats().timeouts, 1u);
  EXPECT_EQ((*cli)->engine().stats().rkeys_live.get(), 0u) << "no registration of the call is left";
  std::memset(buf, 0x11, kLen);
  srv.hold.store(false);  // the server answers now, into the call's old connection
  auto end = monotonic_ns() + 300'000'000;
  while (monotonic_ns() < end) (*cli)->poll();
  EXPECT_EQ(srv.held_now.load(), 0);
  for (size_t i = 0; i < kLen; ++i) ASSERT_EQ(buf[i], 0x11) << "the late reply wrote byte " << i;
  EXPECT_EQ(rs.all[0].completions, 1);
  // The connection came back: the next READ goes through.
  auto r = (*cli)->read(some_fh(), 0, {buf, kLen});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  expect_file_bytes(buf, 0, kLen);
}

// NFS4ERR_DELAY three times, then the data: the READ completes with the
// right bytes after waiting 100 + 200 + 400 ms, and the retries are counted.
TEST(NfsClient, DelayIsRetriedWithBackoff) {
  FakeNfs srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  o.timeout_ms = 5000;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  constexpr size_t kLen = 32 * 1024;
  uint8_t* buf = (*cli)->alloc(kLen);
  srv.delays.store(3);
  uint64_t t0 = monotonic_ns();
  auto r = (*cli)->read(some_fh(), 8192, {buf, kLen});
  uint64_t took_ms = (monotonic_ns() - t0) / 1'000'000;
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->count, kLen);
  expect_file_bytes(buf, 8192, kLen);
  EXPECT_EQ(srv.delayed.load(), 3);
  EXPECT_EQ(srv.reads.load(), 4);
  EXPECT_EQ((*cli)->stats().delay_retries, 3u);
  EXPECT_GE(took_ms, 680u) << "backoff 100, 200, 400 ms";
  EXPECT_LT(took_ms, 3000u);

  // Asynchronously too, and the READ says how many it waited out.
  srv.delays.store(2);
  Reads rs;
  rs.all.resize(1);
  ASSERT_EQ((*cli)->read_async(some_fh(), 0, {buf, kLen}, &Reads::cb, &rs.all[0]), 0);
  auto end = monotonic_ns() + 5'000'000'000ull;
  while (!rs.done() && monotonic_ns() < end) (*cli)->poll();
  ASSERT_TRUE(rs.done());
  ASSERT_TRUE(rs.all[0].d.status.is_ok()) << rs.all[0].d.status.to_string();
  EXPECT_EQ(rs.all[0].d.delay_retries, 2u);
  EXPECT_EQ(rs.all[0].d.count, kLen);
  expect_file_bytes(buf, 0, kLen);
}

// A server that answers NFS4ERR_DELAY for ever: the READ ends at its
// deadline (not before, not much after), as kTimedOut naming the DELAYs.
TEST(NfsClient, DelayForEverEndsAtTheDeadline) {
  FakeNfs srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  o.timeout_ms = 700;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  uint8_t* buf = (*cli)->alloc(4096);
  srv.delays.store(1000000);
  uint64_t t0 = monotonic_ns();
  auto r = (*cli)->read(some_fh(), 0, {buf, 4096});
  uint64_t took_ms = (monotonic_ns() - t0) / 1'000'000;
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Errc::kTimedOut) << r.status().to_string();
  EXPECT_NE(r.status().message().find("NFS4ERR_DELAY"), std::string::npos) << r.status().to_string();
  EXPECT_LT(took_ms, 900u);
  EXPECT_GE((*cli)->stats().delay_retries, 2u);
}

// READs in flight when the client's QP is dropped (a dead peer, no
// goodbye): the engine reconnects and sends them again with their xids;
// every READ completes once with the right data, and the retransmissions
// are counted.
TEST(NfsClient, ReadsInFlightWhenTheConnectionDropsComplete) {
  FakeNfs srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  o.timeout_ms = 5000;
  o.engine.reconnect_min_ms = 5;
  o.engine.reconnect_max_ms = 50;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  NfsClient& c = **cli;
  constexpr size_t kLen = 64 * 1024;
  constexpr int kReads = 4;
  uint8_t* buf = c.alloc(kLen * kReads);
  std::memset(buf, 0, kLen * kReads);
  ASSERT_TRUE(c.read(some_fh(), 0, {buf, kLen}).is_ok());  // a reply: credits for the rest
  srv.hold.store(true);
  Reads rs;
  rs.all.resize(kReads);
  for (int i = 0; i < kReads; ++i)
    ASSERT_EQ(c.read_async(some_fh(), uint64_t(i) * kLen, {buf + i * kLen, kLen}, &Reads::cb, &rs.all[i]), 0);
  auto end = monotonic_ns() + 5'000'000'000ull;
  while (srv.held_now.load() < kReads && monotonic_ns() < end) c.poll();
  ASSERT_EQ(srv.held_now.load(), kReads) << "the server never saw every READ";
  Status st = rpc::testing::inject_fault(&c.connection(), rdma::Fault{rdma::Fault::Kind::kDropConnection});
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  srv.hold.store(false);  // the first copies are answered into the dead connection; the second ones served
  end = monotonic_ns() + 5'000'000'000ull;
  while (!rs.done() && monotonic_ns() < end) c.poll();
  ASSERT_TRUE(rs.done());
  uint32_t retransmits = 0;
  for (int i = 0; i < kReads; ++i) {
    EXPECT_EQ(rs.all[i].completions, 1);
    ASSERT_TRUE(rs.all[i].d.status.is_ok()) << i << ": " << rs.all[i].d.status.to_string();
    EXPECT_EQ(rs.all[i].d.count, kLen);
    retransmits += rs.all[i].d.retransmits;
    expect_file_bytes(buf + i * kLen, uint64_t(i) * kLen, kLen);
  }
  EXPECT_EQ(retransmits, static_cast<uint32_t>(kReads));
  EXPECT_EQ(c.stats().retransmits, static_cast<uint64_t>(kReads));
  EXPECT_GE(engine_stat(c.engine(), "reconnects"), 1u);
  EXPECT_EQ(c.connection().state(), rpc::ConnState::kReady);
}

// With the engine's reconnect off, a lost connection fails its calls
// (kDisconnected): the client makes a new connection and issues the READs
// again within their deadline.
TEST(NfsClient, WithoutEngineReconnectReadsGoOutOnANewConnection) {
  FakeNfs srv;
  ASSERT_NO_FATAL_FAILURE(srv.start());
  NfsClientOptions o;
  o.engine.arena_bytes = rpc::kTestArenaBytes;
  o.spec = "shm:path=" + srv.path;
  o.timeout_ms = 5000;
  o.delay_min_ms = 10;
  o.engine.reconnect = false;
  auto cli = NfsClient::connect(o);
  ASSERT_TRUE(cli.is_ok()) << cli.status().to_string();
  NfsClient& c = **cli;
  constexpr size_t kLen = 16 * 1024;
  constexpr int kReads = 3;
  uint8_t* buf = c.alloc(kLen * kReads);
  ASSERT_TRUE(c.read(some_fh(), 0, {buf, kLen}).is_ok());
  srv.hold.store(true);
  Reads rs;
  rs.all.resize(kReads);
  for (int i = 0; i < kReads; ++i)
    ASSERT_EQ(c.read_async(some_fh(), uint64_t(i) * kLen, {buf + i * kLen, kLen}, &Reads::cb, &rs.all[i]), 0);
  auto end = monotonic_ns() + 5'000'000'000ull;
  while (srv.held_now.load() < kReads && monotonic_ns() < end) c.poll();
  ASSERT_EQ(srv.held_now.load(), kReads);
  rpc::Connection* first = &c.connection();
  Status st = rpc::testing::inject_fault(first, rdma::Fault{rdma::Fault::Kind::kDropConnection});
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  srv.hold.store(false);
  end = monotonic_ns() + 5'000'000'000ull;
  while (!rs.done() && monotonic_ns() < end) c.poll();
  ASSERT_TRUE(rs.done());
  for (int i = 0; i < kReads; ++i) {
    EXPECT_EQ(rs.all[i].completions, 1);
    ASSERT_TRUE(rs.all[i].d.status.is_ok()) << i << ": " << rs.all[i].d.status.to_string();
    EXPECT_EQ(rs.all[i].d.reissues, 1u);
    expect_file_bytes(buf + i * kLen, uint64_t(i) * kLen, kLen);
  }
  EXPECT_EQ(c.stats().reissues, static_cast<uint64_t>(kReads));
  EXPECT_EQ(c.stats().new_connections, 1u);
  EXPECT_NE(&c.connection(), first);
}

}  // namespace
}  // namespace tern::nfs
