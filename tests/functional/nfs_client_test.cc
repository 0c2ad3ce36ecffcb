// NfsClient against a Tern server engine over pmd/shm, for what needs no
// real NFS server: a synchronous call that times out must not hand its
// buffer back while the server can still write into it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/clock.h"
#include "engine/engine.h"
#include "nfs/nfs_client.h"
#include "nfs/nfs_program.h"

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
    eng = Engine::create({}).value();
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
  o.spec = "shm:path=" + srv.path;
  o.timeout_ms = 200;
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

}  // namespace
}  // namespace tern::nfs
