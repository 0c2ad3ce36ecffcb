// A program outside Tern's tree, built by tests/install/check-install.sh
// against an installed Tern with nothing but `pkg-config --cflags --libs tern`
// (and --static): a server and a client engine over pmd/shm in one process,
// one inline RPC and one with a write chunk, replies checked byte for byte.
// Exit status 0 only if all of that worked, so a library whose drivers did not
// register, or whose headers do not stand alone, fails here.
#include <tern/base/version.h>
#include <tern/engine/engine.h>
#include <tern/rdmadev/rdmadev.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

using namespace tern::rpc;

namespace {

constexpr uint32_t kProg = 0x20000077, kVers = 1, kReverse = 1;
constexpr uint32_t kBulk = 8192;

// Replies with the arguments reversed (so an echo of the call would fail), and
// fills a write chunk, when offered, with bytes derived from the arguments.
void reverse(void*, ServerCall* c) {
  uint8_t out[64];
  auto in = c->args();
  size_t n = std::min(in.size(), sizeof out);
  std::reverse_copy(in.begin(), in.begin() + static_cast<long>(n), out);
  std::span<uint8_t> bulk;
  if (uint32_t cap = c->bulk_capacity(); cap != 0) {
    bulk = c->bulk_buffer(cap);
    for (size_t i = 0; i < bulk.size(); ++i) bulk[i] = static_cast<uint8_t>(i * 7 + in[0]);
  }
  (void)c->reply(std::span<const uint8_t>(out, n), bulk);
}

struct Outcome {
  bool done = false;
  CallStatus status = CallStatus::kOk;
  uint8_t results[64] = {};
  size_t results_len = 0;
  uint32_t bulk_len = 0;
};
void on_done(void* p, const CallReply& r) {
  auto* o = static_cast<Outcome*>(p);
  o->done = true;
  o->status = r.status;
  o->results_len = std::min(r.results.size(), sizeof o->results);
  std::memcpy(o->results, r.results.data(), o->results_len);
  o->bulk_len = r.bulk_recv_len;
}

uint64_t now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec);
}

int fail(const std::string& what) {
  std::fprintf(stderr, "external_rpc: FAILED: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main() {
  if (std::strcmp(tern::version(), TERN_VERSION_STRING) != 0)
    return fail(std::string("library version ") + tern::version() + " but headers " + TERN_VERSION_STRING);
  std::string drivers;
  for (const auto& n : tern::rdma::driver_names()) drivers += n + " ";
  if (drivers.find("shm ") == std::string::npos) return fail("no shm driver registered (drivers: " + drivers + ")");

  std::string path = "/tmp/tern-external-rpc-" + std::to_string(getpid()) + ".sock";
  std::string spec = "shm:path=" + path;
  EngineOptions opt;  // the defaults, as a first program would use them
  auto srv = Engine::create(opt);
  if (!srv) return fail(srv.status().to_string());
  (*srv)->handle(kProg, kVers, kReverse, reverse, nullptr);
  if (auto st = (*srv)->listen(spec); !st) return fail(st.to_string());
  auto cli = Engine::create(opt);
  if (!cli) return fail(cli.status().to_string());
  auto conn = (*cli)->connect(spec);
  if (!conn) return fail(conn.status().to_string());
  Connection* c = *conn;
  // Bounded, so that a broken build fails instead of hanging CI.
  uint64_t deadline = now_s() + 30;
  auto poll_both = [&] {
    (*srv)->poll();
    (*cli)->poll();
    return now_s() < deadline;
  };
  while (!c->ready()) {
    if (c->failed()) return fail("connection failed");
    if (!poll_both()) return fail("not connected after 30 s");
  }

  auto* bulk = static_cast<uint8_t*>((*cli)->alloc(kBulk));
  if (bulk == nullptr) return fail("alloc");
  const uint8_t args[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (bool with_bulk : {false, true}) {
    Outcome o;
    Call call;
    call.prog = kProg;
    call.vers = kVers;
    call.proc = kReverse;
    call.args = args;
    if (with_bulk) call.bulk_recv = std::span<uint8_t>(bulk, kBulk);
    call.done = on_done;
    call.ctx = &o;
    if (c->call(call) != 0) return fail("call refused");
    while (!o.done)
      if (!poll_both()) return fail("no reply after 30 s");
    if (o.status != CallStatus::kOk) return fail(std::string("call failed: ") + call_status_name(o.status));
    if (o.results_len != sizeof args) return fail("reply of " + std::to_string(o.results_len) + " bytes");
    for (size_t i = 0; i < sizeof args; ++i)
      if (o.results[i] != args[sizeof args - 1 - i]) return fail("reply bytes differ at " + std::to_string(i));
    if (with_bulk) {
      if (o.bulk_len != kBulk) return fail("write chunk of " + std::to_string(o.bulk_len) + " bytes");
      for (uint32_t i = 0; i < kBulk; ++i)
        if (bulk[i] != static_cast<uint8_t>(i * 7 + args[0])) return fail("write chunk differs at " + std::to_string(i));
    }
  }
  unlink(path.c_str());
  std::printf("external_rpc: tern %s, drivers %s: 2 RPCs OK\n", tern::version(), drivers.c_str());
  return 0;
}
