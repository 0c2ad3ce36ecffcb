// Driver conformance suite: shared fixture and helpers.
//
// Every test is written against rdmadev.h only and runs once per device spec
// (TERN_CONFORMANCE_DEVICES, default: the shm driver when it is linked). A test
// drives both ends of a connection -- a "server" and a "client" Side, each with
// its own Device, Arena, PD, CQs and QP -- from the test thread, so every wait
// loop polls both sides' CQs and CM (Poller::progress). Every wait is bounded in
// wall-clock time: a driver that never delivers fails the test, it never hangs it.
//
// Helpers return ::testing::AssertionResult rather than asserting, so that a
// forked child process (which must not run gtest) can use them too.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mem/arena.h"
#include "rdmadev/rdmadev.h"

namespace tern::conformance {

using namespace tern::rdma;
using testing::AssertionFailure;
using testing::AssertionResult;
using testing::AssertionSuccess;
using Duration = std::chrono::nanoseconds;
using SteadyClock = std::chrono::steady_clock;

// How long anything that must happen may take before the test fails.
inline constexpr Duration kWait = std::chrono::seconds(5);
// How long to keep polling when checking that something does NOT happen.
inline constexpr Duration kQuiet = std::chrono::milliseconds(30);

inline constexpr uint32_t kAccessAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
inline constexpr size_t kArenaBytes = 8u << 20;

// ---------------------------------------------------------------- device list

struct DeviceParam {
  std::string spec;    // base spec, e.g. "shm" or "verbs:dev=rxe0"
  std::string driver;  // the part before ':'
};
void PrintTo(const DeviceParam& p, std::ostream* os);

// Specs from TERN_CONFORMANCE_DEVICES, or every linked driver among {shm}
// (verbs and mlx5 need real hardware and run only when the variable names them).
std::vector<DeviceParam> conformance_devices();
std::string device_param_name(const testing::TestParamInfo<DeviceParam>& info);
// A spec for one test: for shm, the base spec plus a fresh socket path
// (<tmpdir>/tern-conf-<pid>-<n>.sock); other drivers' specs are used as given.
// *socket_path gets the path (empty if none), to be unlinked afterwards.
std::string unique_spec(const DeviceParam& p, std::string* socket_path);

// ---------------------------------------------------------------- formatting

std::string to_string(const Wc& wc);
std::string to_string(const std::vector<Wc>& wcs);
std::string to_string(const Status& s);

// wc has this wr_id and status (and opcode, when given).
AssertionResult wc_is(const Wc& wc, uint64_t wr_id, WcStatus status);
AssertionResult wc_is(const Wc& wc, uint64_t wr_id, WcStatus status, WcOpcode opcode);
// wcs are exactly `wr_ids`, in that order, every one kWrFlushErr.
AssertionResult all_flushed(const std::vector<Wc>& wcs, const std::vector<uint64_t>& wr_ids);
// Any error but a flush: what the WR that failed must report.
AssertionResult is_real_error(const Wc& wc, uint64_t wr_id);
// The WR failed with `status`; on a device whose caps say
// !precise_error_status, with any error but a flush (the rest of a test still
// checks flushes, QP state and untouched memory).
AssertionResult failed_with(const DeviceCaps& caps, const Wc& wc, uint64_t wr_id, WcStatus status);

// Deterministic byte patterns, so that a mismatch names its offset.
void fill_pattern(void* p, size_t len, uint32_t seed);
AssertionResult check_pattern(const void* p, size_t len, uint32_t seed, const char* what);
AssertionResult check_filled(const void* p, size_t len, uint8_t byte, const char* what);

// ---------------------------------------------------------------- one endpoint

// A registered buffer carved from a Side's arena.
struct Buf {
  uint8_t* p = nullptr;
  size_t len = 0;
  Mr* mr = nullptr;
  uint64_t addr(size_t off = 0) const { return reinterpret_cast<uint64_t>(p) + off; }
  uint32_t lkey() const { return mr->lkey(); }
  uint32_t rkey() const { return mr->rkey(); }
  Sge sge(size_t off, size_t n) const { return Sge{addr(off), static_cast<uint32_t>(n), lkey()}; }
  Sge sge() const { return sge(0, len); }
};

// One end of a connection. Members are declared in creation order, so that
// they are destroyed QP first, Arena last, as rdmadev.h requires.
struct Side {
  explicit Side(std::string n) : name(std::move(n)) {}
  ~Side();
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  std::string name;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Pd> pd;
  std::vector<std::unique_ptr<Mr>> mrs;
  std::vector<std::unique_ptr<FastMr>> fast_mrs;
  std::unique_ptr<Cq> send_cq, recv_cq;
  std::unique_ptr<Srq> srq;                    // made by tests; destroyed after the QPs
  std::unique_ptr<Qp> qp;
  std::vector<std::unique_ptr<Qp>> extra_qps;  // made by tests; destroyed before qp

  // Completions and CM events seen by Poller::progress, oldest first.
  std::deque<Wc> send_wcs, recv_wcs;
  std::deque<CmEvent> cm_events;

  // Opens the device, an arena, a PD and two CQs; then a QP with default_qp_init().
  AssertionResult open(const std::string& spec, size_t arena_bytes = kArenaBytes);
  const DeviceCaps& caps() const { return dev->caps(); }
  // 128-deep queues and up to 4 SGEs, within the device's limits.
  QpInit default_qp_init() const;
  AssertionResult create_qp(const QpInit& init, std::unique_ptr<Qp>* out);

  // Carves raw arena memory; nullptr when the arena is full.
  uint8_t* carve(size_t len, size_t align = 4096);
  // Registers [p, p+len) with `access`; the Mr lives as long as the Side.
  AssertionResult reg(void* p, size_t len, uint32_t access, Mr** out);
  // carve + reg; the buffer is zero-filled.
  AssertionResult alloc(size_t len, uint32_t access, Buf* out, size_t align = 4096);
  AssertionResult alloc_fast_mr(uint32_t depth, FastMr** out);

  // Posts the whole chain; fails if the driver accepted fewer.
  AssertionResult post_send(const std::vector<SendWr>& wrs);
  AssertionResult post_recv(const std::vector<RecvWr>& wrs);
  // Polls this side's CQs and CM once, stashing what it finds. Returns how many.
  int poll_once();
  // QP state, stashed completions and events, for failure messages.
  std::string describe() const;
};

// ---------------------------------------------------------------- waiting

// Drives a set of Sides living in this process. Every wait polls all of them.
class Poller {
 public:
  Poller(std::initializer_list<Side*> sides) : sides_(sides) {}
  void add(Side* s) { sides_.push_back(s); }

  void progress();
  // Keep polling for `d` (to let things that must not happen show up).
  void settle(Duration d = kQuiet);

  // Waits until `n` completions are stashed on s's send (recv) CQ, then
  // removes and returns exactly those n, oldest first.
  AssertionResult wait_send(Side& s, size_t n, std::vector<Wc>* out, Duration limit = kWait);
  AssertionResult wait_recv(Side& s, size_t n, std::vector<Wc>* out, Duration limit = kWait);
  // One completion, by value, for the common case.
  AssertionResult wait_send1(Side& s, Wc* out, Duration limit = kWait);
  AssertionResult wait_recv1(Side& s, Wc* out, Duration limit = kWait);
  // Waits for s's next CM event and checks its type (an event of another type
  // fails the wait and is reported).
  AssertionResult wait_cm(Side& s, CmEventType type, CmEvent* out = nullptr, Duration limit = kWait);
  AssertionResult wait_state(Side& s, QpState state, Duration limit = kWait);
  // Waits for kDisconnected naming `qp` (default s.qp), then checks that no
  // second one follows: it is reported once per QP that goes to error.
  AssertionResult wait_disconnected(Side& s, Qp* qp = nullptr, CmEvent* out = nullptr);
  // Generic: polls until pred() or the limit.
  AssertionResult wait_until(const std::function<bool()>& pred, const std::string& what,
                             Duration limit = kWait);

  std::string describe() const;

 private:
  AssertionResult wait_wcs(Side& s, bool send, size_t n, std::vector<Wc>* out, Duration limit);
  std::vector<Side*> sides_;
};

// Client connects `qp` (default: client.qp) to server, which accepts with
// server_qp (default: server.qp); both must reach kEstablished within kWait.
// Checks that each side receives the other's private data and that the events
// name the right QPs.
struct ConnectOptions {
  std::vector<uint8_t> client_private = {'t', 'e', 'r', 'n', '-', 'c', 'l', 'i'};
  std::vector<uint8_t> server_private = {'t', 'e', 'r', 'n', '-', 's', 'r', 'v'};
  Qp* client_qp = nullptr;
  Qp* server_qp = nullptr;
  bool listen = true;  // call server.dev->listen() first
};
AssertionResult establish(Poller& poller, Side& server, Side& client, const ConnectOptions& opt = {});

// ---------------------------------------------------------------- work requests

SendWr wr_send(uint64_t id, const Sge* sg, uint32_t n, bool signaled = true);
SendWr wr_write(uint64_t id, const Sge* sg, uint32_t n, uint64_t raddr, uint32_t rkey, bool signaled = true);
SendWr wr_read(uint64_t id, const Sge* sg, uint32_t n, uint64_t raddr, uint32_t rkey, bool signaled = true);
SendWr wr_reg(uint64_t id, FastMr* mr, const Buf& backing, size_t off, size_t len, uint32_t access,
              uint32_t rkey, bool signaled = false);
SendWr wr_local_inv(uint64_t id, uint32_t rkey, bool signaled = true);
RecvWr wr_recv(uint64_t id, const Sge* sg, uint32_t n);

// What a SEND carries to tell the peer about memory it may access.
struct RemoteBuf {
  uint64_t addr;
  uint32_t rkey;
  uint32_t len;
};

// ---------------------------------------------------------------- forking

// A forked child running `body` (returns its exit code) in a fresh address
// space copy; it must not use gtest. The destructor SIGKILLs and reaps it if
// it is still running, so that a failing test never leaves it behind.
// A peer process: this test binary run again (fork + exec) with the name of a
// registered child body and the device spec. Not a bare fork(): RDMA
// libraries do not survive one (librdmacm keeps the parent's device contexts,
// and the kernel refuses their commands from another process with EACCES),
// and a peer that is a separate program is what the tests mean anyway.
using ChildBody = int (*)(const std::string& spec);
bool register_child_body(const char* name, ChildBody body);
// For main(): when argv names a child body, runs it and returns its exit code.
std::optional<int> run_child_body_if_asked(int argc, char** argv);

#define TERN_CONFORMANCE_CHILD(name)                                                      \
  int name(const std::string& spec);                                                    \
  [[maybe_unused]] const bool name##_registered = ::tern::conformance::register_child_body(#name, name); \
  int name(const std::string& spec)

class Child {
 public:
  Child(const char* body_name, const std::string& spec);
  ~Child();
  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // Polls `poller` while waiting for the child to exit; *code gets its exit
  // code, or 128+signal.
  AssertionResult wait_exit(Poller& poller, int* code, Duration limit = kWait);
  void kill_now();

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// In a child: run a helper, and on failure print why and exit with `code`.
#define TERN_CHILD_CHECK(code, expr)                                                  \
  do {                                                                                \
    ::testing::AssertionResult tern_child_r_ = (expr);                                \
    if (!tern_child_r_) {                                                             \
      std::fprintf(stderr, "child: %s failed (exit %d): %s\n", #expr, (code),          \
                   tern_child_r_.message());                                          \
      return (code);                                                                  \
    }                                                                                 \
  } while (0)

// ---------------------------------------------------------------- fixtures

// Both Sides opened on one unique spec, each with its QP; not connected.
class ConformanceTest : public testing::TestWithParam<DeviceParam> {
 protected:
  void SetUp() override;
  void TearDown() override;

  AssertionResult connect_pair(const ConnectOptions& opt = {}) {
    return establish(poller, server, client, opt);
  }
  // A fresh client QP connected to the server, which already listens: what
  // a client does after a refused or dropped request. The QP is kept in
  // client.extra_qps (destroyed in TearDown).
  AssertionResult connect_fresh_client_qp() {
    std::unique_ptr<Qp> again;
    if (AssertionResult r = client.create_qp(client.default_qp_init(), &again); !r) return r;
    ConnectOptions opt;
    opt.listen = false;
    opt.client_qp = again.get();
    AssertionResult r = connect_pair(opt);
    client.extra_qps.push_back(std::move(again));
    return r;
  }
  const DeviceCaps& caps() const { return server.caps(); }

  std::string spec;         // this test's spec, path included
  std::string socket_path;  // unlinked in TearDown
  Side server{"server"};
  Side client{"client"};
  Poller poller{&server, &client};
};

// ConformanceTest, connected in SetUp.
class ConnectedTest : public ConformanceTest {
 protected:
  void SetUp() override;
};

#define TERN_SKIP_UNLESS_CAP(cap)                                                   \
  do {                                                                              \
    if (!caps().cap) GTEST_SKIP() << "device '" << caps().name << "' (driver "      \
                                  << caps().driver << ") lacks caps()." #cap;       \
  } while (0)

// Skips the test when the driver has no fault injection for `qp`.
#define TERN_INJECT_OR_SKIP(qp, fault)                                              \
  do {                                                                              \
    ::tern::Status tern_inj_s_ = (qp)->inject_fault(fault);                         \
    if (tern_inj_s_.code() == ::tern::Errc::kUnsupported)                           \
      GTEST_SKIP() << "driver " << caps().driver << " has no fault injection: "     \
                   << tern_inj_s_.message();                                        \
    ASSERT_TRUE(tern_inj_s_.is_ok()) << "inject_fault: " << to_string(tern_inj_s_); \
  } while (0)

// Instantiates a test suite (a fixture class derived from ConformanceTest) over
// every conformance device.
// With no device at all the suites are empty; Devices.AtLeastOneDevice fails then.
#define TERN_CONFORMANCE_SUITE(suite)                                                     \
  GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(suite);                                   \
  INSTANTIATE_TEST_SUITE_P(Devices, suite,                                                \
                           ::testing::ValuesIn(::tern::conformance::conformance_devices()), \
                           ::tern::conformance::device_param_name)

}  // namespace tern::conformance
