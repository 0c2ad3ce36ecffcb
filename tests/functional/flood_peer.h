// What the service-order tests share (service_order_test.cc,
// service_turn_test.cc): the server's handler that logs which pass ran each
// call and for which peer, and the flooding peer, a child process that
// talks to the test over two pipe ends.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_testing.h"
#include "rpc_fixture.h"

namespace tern::rpc::floodpeer {

constexpr uint32_t kMark = 11;  // args: u64 id; results: 4 bytes
constexpr uint64_t kFloodIds = 1'000'000;

inline bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

struct Handled {
  uint64_t id;
  std::string peer;
  int pass;  // the test's server poll pass it ran in (0: outside them)
};

struct Server {
  std::vector<Handled> log;
  int pass = 0;
  static void mark(void* ctx, ServerCall* c) {
    auto* s = static_cast<Server*>(ctx);
    uint64_t id = 0;
    std::memcpy(&id, c->args().data(), std::min<size_t>(8, c->args().size()));
    s->log.push_back({id, std::string(c->peer_id()), s->pass});
    const uint32_t ok = 1;
    (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(&ok), 4));
  }
};

inline bool read_byte(int fd, char* c, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return false;
  return read(fd, c, 1) == 1;
}

// The flooding peer: warms up (16 calls in flight, so that it is granted the
// credits for a burst), says 'w'; on 'g' sends a burst its credits allow,
// moves it out, says how many; on 'q' polls until all are answered. Exits 0
// when every call was answered OK.
[[noreturn]] inline void flooder(const std::string& path, int up, int down) {
  auto eng = Engine::create({.arena_bytes = kTestArenaBytes}).value();
  auto c = eng->connect(path);
  if (!c.is_ok()) _exit(2);
  Connection* conn = c.value();
  if (!poll_until({eng.get()}, [&] { return conn->ready() || conn->failed(); }, 10000) || !conn->ready()) _exit(3);
  std::vector<uint64_t> ids(4096);
  int sent = 0, done = 0, bad = 0;
  struct Ctx {
    int* done;
    int* bad;
  } ctx{&done, &bad};
  auto cb = [](void* x, const CallReply& r) {
    auto* k = static_cast<Ctx*>(x);
    ++*k->done;
    if (r.status != CallStatus::kOk) ++*k->bad;
  };
  auto send = [&] {
    ids[static_cast<size_t>(sent)] = kFloodIds + static_cast<uint64_t>(sent);
    Call k{kProg, kVers, kMark};
    k.args = std::span(reinterpret_cast<const uint8_t*>(&ids[static_cast<size_t>(sent)]), 8);
    k.done = cb, k.ctx = &ctx;
    if (conn->call(k) != 0) return false;
    ++sent;
    return true;
  };
  while (sent < 400) {
    while (sent < 400 && sent - done < 16 && send()) {
    }
    eng->poll();
  }
  if (!poll_until({eng.get()}, [&] { return done == sent; }, 20000)) _exit(4);
  if (write(up, "w", 1) != 1) _exit(5);
  char ch = 0;
  if (!read_byte(down, &ch, 30000) || ch != 'g') _exit(6);
  const int before = sent;
  while (sent - before < 16 && conn->outstanding() < conn->info().credits && send()) {
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (std::chrono::steady_clock::now() < end) eng->poll();
  const char n = static_cast<char>(conn->outstanding());
  if (write(up, &n, 1) != 1) _exit(7);
  (void)read_byte(down, &ch, 30000);
  poll_until({eng.get()}, [&] { return done == sent; }, 30000);
  _exit(done == sent && bad == 0 ? 0 : 8);
}

}  // namespace tern::rpc::floodpeer
