// tern-rpc-cost: RPCs through a client and a server Engine over pmd/shm, both
// driven from one thread, so that a run under `valgrind --tool=callgrind`
// counts the same instructions every time (no peer thread spinning, no
// timing in the loop). scripts/measure-cost.sh runs it twice with different
// call counts and reports instructions per RPC, both sides and pmd/shm
// included: a figure that does not move with the machine's load, for
// comparing revisions where wall-clock ratios are too noisy.
//   tern-rpc-cost CALLS [BULK [DIR [QD]]]  BULK bytes through a write (DIR w,
//                                        default) or read (r) chunk; 0: inline;
//                                        QD calls kept in flight (default 1)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"

using namespace tern::rpc;

namespace {

constexpr uint32_t kProg = 0x20000042, kVers = 1, kEcho = 1;

// Echoes the arguments; fills a write chunk with zeros (the memory is not the
// point; the copy is what a WRITE costs).
void echo(void*, ServerCall* c) {
  std::span<uint8_t> out;
  if (uint32_t cap = c->bulk_capacity(); cap != 0) out = c->bulk_buffer(cap);
  (void)c->reply(c->args(), out);
}

struct Done {
  bool done = false;
  CallStatus status = CallStatus::kOk;
};
void on_done(void* p, const CallReply& r) {
  auto* d = static_cast<Done*>(p);
  d->done = true;
  d->status = r.status;
}

int fail(const char* what) {
  std::fprintf(stderr, "tern-rpc-cost: %s\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tern-rpc-cost CALLS [BULK [r|w [QD]]]\n");
    return 2;
  }
  long calls = std::strtol(argv[1], nullptr, 10);
  long bulk = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 0;
  bool read_dir = argc > 3 && argv[3][0] == 'r';
  long qd = argc > 4 ? std::strtol(argv[4], nullptr, 10) : 1;
  if (calls <= 0 || bulk < 0 || bulk > (1 << 20) || qd < 1 || qd > 32) {
    std::fprintf(stderr, "tern-rpc-cost: CALLS must be > 0, BULK in [0, 1 MiB], QD in [1, 32]\n");
    return 2;
  }
  std::string spec = "shm:path=/tmp/tern-rpc-cost-" + std::to_string(getpid()) + ".sock";
  EngineOptions so;
  so.arena_bytes = 128u << 20;
  auto srv = Engine::create(so);
  if (!srv) return fail(srv.status().to_string().c_str());
  (*srv)->handle(kProg, kVers, kEcho, echo, nullptr);
  if (!(*srv)->listen(spec).is_ok()) return fail("listen");
  EngineOptions co;
  co.arena_bytes = 32u << 20;
  auto cli = Engine::create(co);
  if (!cli) return fail(cli.status().to_string().c_str());
  auto conn = (*cli)->connect(spec);
  if (!conn) return fail(conn.status().to_string().c_str());
  Connection* c = *conn;
  while (!c->ready()) {
    (*srv)->poll();
    (*cli)->poll();
    if (c->failed()) return fail("connection failed");
  }
  uint8_t args[32] = {1, 2, 3};
  // One bulk buffer per call in flight.
  std::vector<uint8_t*> bufs(static_cast<size_t>(qd), nullptr);
  if (bulk > 0)
    for (auto& b : bufs) b = static_cast<uint8_t*>((*cli)->alloc(static_cast<size_t>(bulk)));
  std::vector<Done> slots(static_cast<size_t>(qd));
  std::vector<bool> busy(static_cast<size_t>(qd), false);
  // A fixed warm-up first, so that two runs differ only by their extra calls.
  const long total = 1000 + calls;
  long issued = 0, finished = 0;
  while (finished < total) {
    for (long k = 0; k < qd && issued < total; ++k) {
      if (busy[k]) continue;
      slots[k] = Done{};
      Call call{kProg, kVers, kEcho};
      call.args = args;
      if (bulk > 0 && read_dir) call.bulk_send = std::span<const uint8_t>(bufs[k], static_cast<size_t>(bulk));
      if (bulk > 0 && !read_dir) call.bulk_recv = std::span<uint8_t>(bufs[k], static_cast<size_t>(bulk));
      call.done = on_done;
      call.ctx = &slots[k];
      if (c->call(call) != 0) return fail("call refused");
      busy[k] = true;
      ++issued;
    }
    (*cli)->poll();
    (*srv)->poll();
    for (long k = 0; k < qd; ++k) {
      if (!busy[k] || !slots[k].done) continue;
      if (slots[k].status != CallStatus::kOk) return fail(call_status_name(slots[k].status));
      busy[k] = false;
      ++finished;
    }
  }
  unlink(spec.c_str() + std::strlen("shm:path="));
  return 0;
}
