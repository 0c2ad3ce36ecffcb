// Locks reclaimed after tern-nfsd's lock manager restarts alone (not the
// host): the record of lock holders in the state directory outlives the
// process, and the next start tells each recorded client's statd
// (SM_NOTIFY: our address as the client's lock manager knows us, a larger
// NSM state), after which the client's reclaims are granted within the
// grace period and nobody else's locks are. The client's rpcbind and statd
// are small services of the test, on loopback, as in nlm_test.cc.
//
// Waits for what the server does in the background poll with a generous
// bound: they assert that it happens, not how fast.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "nfs/nlm4.h"
#include "nfs/nsm.h"
#include "nfs/rpcbind.h"
#include "nfsd/lock_holders_file.h"
#include "nfsd/nlm_server.h"
#include "nfsd/rpc_caller.h"
#include "nfsd/rpc_service.h"
#include "oncrpc/oncrpc.h"

namespace tern {
namespace {

using Bytes = std::vector<uint8_t>;
namespace nlm = nfs::nlm4;
namespace nsm = nfs::nsm;
namespace rb = nfs::rpcbind;
namespace oc = oncrpc;
using nfsd::RpcTransport;

template <typename F>
bool eventually(F cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool reply_with(std::span<const uint8_t> msg, std::span<const uint8_t> results, Bytes* out) {
  oc::CallHeader h;
  if (oc::decode_call(msg, &h).status != oc::CallDecodeStatus::kOk) return false;
  oc::ReplyHeader rh;
  rh.xid = h.xid;
  out->resize(oc::reply_size(rh) + results.size());
  size_t n = oc::encode_reply(rh, *out);
  if (!results.empty()) std::memcpy(out->data() + n, results.data(), results.size());
  return true;
}

// The client host: its rpcbind (which knows its statd only once
// statd_registered) and its statd (which records each SM_NOTIFY).
struct ClientHost {
  struct Notice {
    std::string mon_name;
    int32_t state;
    std::string from;  // the sender's address
  };
  std::mutex mu;
  std::vector<Notice> notices;
  int statd_lookups = 0;
  bool statd_registered = true;
  std::unique_ptr<nfsd::RpcService> statd, rpcbind;

  ClientHost() {
    nfsd::RpcServiceOptions o;
    o.addr = "127.0.0.1";
    statd = nfsd::RpcService::start(o, [this](const nfsd::RpcRequest& r, Bytes* out) {
      oc::CallHeader h;
      auto d = oc::decode_call(r.msg, &h);
      nsm::StatChge c;
      if (h.prog != nsm::kProgram || h.proc != static_cast<uint32_t>(nsm::Proc::kNotify) ||
          !nsm::decode(r.msg.subspan(d.header_len), &c))
        return false;
      char ip[64] = {};
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&r.peer)->sin_addr, ip, sizeof ip);
      std::lock_guard<std::mutex> g(mu);
      notices.push_back({std::string(c.mon_name), c.state, ip});
      return reply_with(r.msg, {}, out);
    }).value();
    rpcbind = nfsd::RpcService::start(o, [this](const nfsd::RpcRequest& r, Bytes* out) {
      oc::CallHeader h;
      auto d = oc::decode_call(r.msg, &h);
      if (h.vers != rb::kVersion2 || h.proc != static_cast<uint32_t>(rb::PmapProc::kGetport)) return false;
      xdr::XdrReader x(r.msg.subspan(d.header_len));
      const uint32_t prog = x.get_u32(), vers = x.get_u32(), prot = x.get_u32();
      Bytes res(4);
      xdr::XdrWriter w(res);
      std::lock_guard<std::mutex> g(mu);
      const bool statd_asked = prog == nsm::kProgram && vers == nsm::kVersion && prot == rb::kIpprotoUdp;
      if (statd_asked) ++statd_lookups;
      w.put_u32(statd_asked && statd_registered ? statd->port() : 0);
      return reply_with(r.msg, w.written(), out);
    }).value();
  }
  size_t n_notices() {
    std::lock_guard<std::mutex> g(mu);
    return notices.size();
  }
  Notice notice(size_t i) {
    std::lock_guard<std::mutex> g(mu);
    return notices.at(i);
  }
};

const uint8_t kFh[] = {1, 0, 0, 0, 0, 0, 0, 7};

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/tern-nlm-reclaim.XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { (void)!system(("rm -rf " + path).c_str()); }
};

struct Reclaim : ::testing::Test {
  TempDir dir;
  ClientHost client;
  std::string record = dir.path + "/nlm-holders";
  std::deque<std::string> owners_;

  // A lock manager over the record, as tern-nfsd starts one: it tells the
  // recorded clients once it is ready.
  std::unique_ptr<nfsd::NlmServer> start(int grace_seconds,
                                         std::chrono::milliseconds window = std::chrono::seconds(30)) {
    nfsd::NlmOptions o;
    o.addr = "127.0.0.1";
    o.grace_seconds = grace_seconds;
    o.use_statd = false;
    o.client_rpcbind_port = client.rpcbind->port();
    o.check_fh = [](std::span<const uint8_t> fh, bool, const sockaddr_storage&) {
      return !fh.empty() && fh[0] == 1 ? nlm::Stat::kGranted : nlm::Stat::kStaleFh;
    };
    o.notify.path = record;
    o.notify.window = window;
    o.notify.first_backoff = std::chrono::milliseconds(50);
    o.notify.max_backoff = std::chrono::milliseconds(200);
    o.notify.call_timeout_ms = 1000;
    auto s = nfsd::NlmServer::start(nullptr, o);
    EXPECT_TRUE(s.is_ok()) << s.status().to_string();
    if (!s) return nullptr;
    (*s)->notify_clients();
    return std::move(*s);
  }

  nlm::Stat lock(nfsd::NlmServer& srv, const std::string& who, int32_t svid, bool reclaim) {
    owners_.push_back(who);
    std::span<const uint8_t> oh(reinterpret_cast<const uint8_t*>(owners_.back().data()), owners_.back().size());
    nlm::LockArgs a{{}, false, true, {who, kFh, oh, svid, 0, 100}, reclaim, 1};
    Bytes b(1024);
    xdr::XdrWriter w(b);
    nlm::encode(w, a);
    auto peer = nfsd::rpc_peer_ip("127.0.0.1", srv.port(), RpcTransport::kStream).value();
    auto r = nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kLock), w.written());
    nlm::Res res{};
    EXPECT_TRUE(r.is_ok() && nlm::decode(*r, &res)) << r.status().to_string();
    return res.stat;
  }
  nlm::Stat unlock(nfsd::NlmServer& srv, const std::string& who, int32_t svid) {
    owners_.push_back(who);
    std::span<const uint8_t> oh(reinterpret_cast<const uint8_t*>(owners_.back().data()), owners_.back().size());
    nlm::UnlockArgs a{{}, {who, kFh, oh, svid, 0, 100}};
    Bytes b(1024);
    xdr::XdrWriter w(b);
    nlm::encode(w, a);
    auto peer = nfsd::rpc_peer_ip("127.0.0.1", srv.port(), RpcTransport::kStream).value();
    auto r = nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kUnlock),
                            w.written());
    nlm::Res res{};
    EXPECT_TRUE(r.is_ok() && nlm::decode(*r, &res)) << r.status().to_string();
    return res.stat;
  }
  nfsd::LockHolders stored() {
    auto h = nfsd::load_lock_holders(record);
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    return h ? *h : nfsd::LockHolders{};
  }
};

TEST_F(Reclaim, ARestartTellsLockHoldersWhoReclaimWithinGrace) {
  // The first run: client-a (at 127.0.0.1) locks bytes 0-99.
  auto srv = start(0);
  ASSERT_TRUE(srv);
  const int32_t state1 = srv->notifier()->state();
  EXPECT_EQ(state1 % 2, 1) << "odd while running";
  EXPECT_EQ(lock(*srv, "client-a", 1, false), nlm::Stat::kGranted);
  srv.reset();  // the locks die with it
  nfsd::LockHolders h = stored();
  EXPECT_EQ(h.state, state1 + 1) << "even once stopped";
  ASSERT_EQ(h.holders, (std::vector<nfsd::LockHolder>{{"127.0.0.1", "127.0.0.1"}}));
  EXPECT_EQ(client.n_notices(), 0u);

  // The restart: the client's statd hears that 127.0.0.1 (the address the
  // lock came to, which the client's lock manager watches) restarted with
  // a larger state, from that address.
  srv = start(30);
  ASSERT_TRUE(srv);
  ASSERT_TRUE(eventually([&] { return client.n_notices() == 1; }));
  ClientHost::Notice n = client.notice(0);
  EXPECT_EQ(n.mon_name, "127.0.0.1");
  EXPECT_GT(n.state, state1);
  EXPECT_EQ(n.state % 2, 1);
  EXPECT_EQ(n.state, srv->notifier()->state());
  EXPECT_EQ(n.from, "127.0.0.1");
  // Within grace: nobody else gets the bytes, client-a's reclaim does.
  EXPECT_EQ(lock(*srv, "client-b", 2, false), nlm::Stat::kDeniedGracePeriod);
  EXPECT_EQ(lock(*srv, "client-a", 1, true), nlm::Stat::kGranted);
  EXPECT_EQ(srv->locks_held(), 1u);
  EXPECT_EQ(srv->stats().reclaimed.load(), 1u);
  EXPECT_TRUE(eventually([&] { return srv->notifier()->stats().notified.load() == 1; }));
  EXPECT_EQ(srv->notifier()->pending(), 0u);

  // It holds the lock again: kept for the next restart, told again.
  const int32_t state2 = srv->notifier()->state();
  srv.reset();
  EXPECT_EQ(stored().holders.size(), 1u);
  srv = start(30);
  ASSERT_TRUE(srv);
  ASSERT_TRUE(eventually([&] { return client.n_notices() == 2; }));
  EXPECT_GT(client.notice(1).state, state2);
  EXPECT_TRUE(eventually([&] { return srv->notifier()->stats().notified.load() == 1; }));
  // Reclaimed and then unlocked: nothing to tell it next time.
  EXPECT_EQ(lock(*srv, "client-a", 1, true), nlm::Stat::kGranted);
  EXPECT_EQ(unlock(*srv, "client-a", 1), nlm::Stat::kGranted);
  srv.reset();
  EXPECT_TRUE(stored().holders.empty());
  srv = start(30);
  ASSERT_TRUE(srv);
  EXPECT_EQ(srv->notifier()->pending(), 0u);
}

TEST_F(Reclaim, ASilentClientIsTriedAgainThenDroppedWhenTheWindowEnds) {
  nfsd::LockHolders h;
  h.state = 7;
  h.holders = {{"127.0.0.1", "127.0.0.1"}};
  ASSERT_TRUE(nfsd::save_lock_holders(record, h).is_ok());
  {
    std::lock_guard<std::mutex> g(client.mu);
    client.statd_registered = false;
  }
  // Its statd is not there at first: asked again, told once it is.
  auto srv = start(30);
  ASSERT_TRUE(srv);
  EXPECT_EQ(srv->notifier()->state(), 9);
  ASSERT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(client.mu);
    return client.statd_lookups >= 2;
  }));
  {
    std::lock_guard<std::mutex> g(client.mu);
    client.statd_registered = true;
  }
  ASSERT_TRUE(eventually([&] { return client.n_notices() == 1; }));
  EXPECT_EQ(client.notice(0).state, 9);
  srv.reset();
  // Never told it reclaimed nothing; told, it is done with.
  EXPECT_TRUE(stored().holders.empty());

  // A client never reached within the window is given up on (one failure)
  // and not kept.
  ASSERT_TRUE(nfsd::save_lock_holders(record, h).is_ok());
  {
    std::lock_guard<std::mutex> g(client.mu);
    client.statd_registered = false;
  }
  srv = start(0, std::chrono::milliseconds(500));
  ASSERT_TRUE(srv);
  ASSERT_TRUE(eventually([&] { return srv->notifier()->stats().failed.load() == 1; }));
  EXPECT_EQ(srv->notifier()->pending(), 0u);
  EXPECT_EQ(srv->notifier()->stats().notified.load(), 0u);
  srv.reset();
  EXPECT_TRUE(stored().holders.empty());
  EXPECT_EQ(client.n_notices(), 1u);
}

// A client leaves the record only once it holds nothing AND has been told:
// one that locks and unlocks before its statd can be reached is still told.
TEST_F(Reclaim, AClientIsKeptUntilToldEvenWhenItHoldsNothing) {
  nfsd::LockHolders h;
  h.state = 3;
  h.holders = {{"127.0.0.1", "127.0.0.1"}};
  ASSERT_TRUE(nfsd::save_lock_holders(record, h).is_ok());
  {
    std::lock_guard<std::mutex> g(client.mu);
    client.statd_registered = false;
  }
  auto srv = start(0);
  ASSERT_TRUE(srv);
  EXPECT_EQ(lock(*srv, "client-a", 1, false), nlm::Stat::kGranted);
  EXPECT_EQ(unlock(*srv, "client-a", 1), nlm::Stat::kGranted);
  EXPECT_EQ(srv->notifier()->pending(), 1u);
  {
    std::lock_guard<std::mutex> g(client.mu);
    client.statd_registered = true;
  }
  ASSERT_TRUE(eventually([&] { return client.n_notices() == 1; }));
  ASSERT_TRUE(eventually([&] { return srv->notifier()->pending() == 0; }));
  srv.reset();
  EXPECT_TRUE(stored().holders.empty());
}

TEST(LockHoldersFile, RoundTripsAndRefusesWhatItDoesNotWrite) {
  TempDir d;
  const std::string p = d.path + "/nlm-holders";
  auto none = nfsd::load_lock_holders(p);
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->state, 0);
  EXPECT_TRUE(none->holders.empty());
  nfsd::LockHolders h;
  h.state = 41;
  h.holders = {{"10.0.0.7", "10.0.0.1"}, {"fd00::7", ""}};
  ASSERT_TRUE(nfsd::save_lock_holders(p, h).is_ok());
  auto back = nfsd::load_lock_holders(p);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->state, 41);
  EXPECT_EQ(back->holders, h.holders);
  struct stat st;
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  for (const char* bad : {"state -1\n", "state 3 4\n", "holder example.com\n", "holder 10.0.0.1 10.0.0.2 x\n",
                          "hold 10.0.0.1\n", "state 1\nstate 3\n"}) {
    std::ofstream(p) << bad;
    auto r = nfsd::load_lock_holders(p);
    EXPECT_EQ(r.status().code(), Errc::kInvalidArgument) << bad;
  }
  EXPECT_EQ(nfsd::next_running_state(0), 1);
  EXPECT_EQ(nfsd::next_running_state(1), 3);  // a crash: never went even
  EXPECT_EQ(nfsd::next_running_state(4), 5);
  EXPECT_EQ(nfsd::next_running_state(INT32_MAX), 1);
}

}  // namespace
}  // namespace tern
