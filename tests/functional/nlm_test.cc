// tern-nfsd's lock manager and rpcbind client over loopback sockets, with
// the peers played by small services in the test: a client's rpcbind and
// NLM service (which receives GRANTED), the host's rpc.statd (which
// receives SM_MON), and the host's rpcbind (which receives SET / UNSET).
// NLM calls go over TCP and UDP as the Linux client's lockd sends them.
//
// Waits for something the server does in the background (a GRANTED
// callback, an SM_MON) poll with a generous bound: they assert that it
// happens, not how fast.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "nfs/mount3.h"
#include "nfs/nlm4.h"
#include "nfs/nsm.h"
#include "nfs/rpcbind.h"
#include "nfsd/export.h"
#include "nfsd/export_table.h"
#include "nfsd/published_exports.h"
#include "nfsd/mount_udp.h"
#include "nfsd/nlm_server.h"
#include "nfsd/rpc_caller.h"
#include "nfsd/rpc_service.h"
#include "nfsd/rpcbind_client.h"
#include "oncrpc/oncrpc.h"

namespace tern {
namespace {

using Bytes = std::vector<uint8_t>;
namespace nlm = nfs::nlm4;
namespace rb = nfs::rpcbind;
namespace oc = oncrpc;
using nfsd::RpcTransport;

// Until cond() or 30 s.
template <typename F>
bool eventually(F cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A successful reply with `results` to the call in msg.
bool reply_with(std::span<const uint8_t> msg, std::span<const uint8_t> results, Bytes* out, oc::CallHeader* h) {
  if (oc::decode_call(msg, h).status != oc::CallDecodeStatus::kOk) return false;
  oc::ReplyHeader rh;
  rh.xid = h->xid;
  out->resize(oc::reply_size(rh) + results.size());
  size_t n = oc::encode_reply(rh, *out);
  if (!results.empty()) std::memcpy(out->data() + n, results.data(), results.size());
  return true;
}

std::span<const uint8_t> args_of(std::span<const uint8_t> msg) {
  oc::CallHeader h;
  auto d = oc::decode_call(msg, &h);
  return msg.subspan(d.header_len);
}

// The peers: one service per role, each recording what it was asked.
struct Peers {
  std::mutex mu;
  std::vector<std::string> monitored;  // SM_MON's "mon_name my_name prog/vers/proc"
  int unmon_all = 0;
  struct Granted {
    int32_t svid;
    Bytes cookie;
    bool exclusive;
    uint64_t offset, len;
  };
  std::vector<Granted> granted;
  bool refuse_granted = false;  // the client says it no longer waits
  std::vector<std::string> rpcbind_calls;  // "SET 100021 4 tcp 127.0.0.1.x.y", "UNSET ..."
  std::unique_ptr<nfsd::RpcService> statd, lockd, rpcbind;

  Peers() {
    nfsd::RpcServiceOptions o;
    o.addr = "127.0.0.1";
    statd = nfsd::RpcService::start(o, [this](const nfsd::RpcRequest& r, Bytes* out) {
      oc::CallHeader h;
      oc::decode_call(r.msg, &h);
      Bytes res(8);
      xdr::XdrWriter w(res);
      if (h.proc == static_cast<uint32_t>(nfs::nsm::Proc::kMon)) {
        // mon_name, then where to call back: my_name, my_prog, my_vers, my_proc.
        xdr::XdrReader x(args_of(r.msg));
        std::string m(x.get_string(1024));
        std::string me(x.get_string(1024));
        const uint32_t prog = x.get_u32(), vers = x.get_u32(), proc = x.get_u32();
        std::lock_guard<std::mutex> g(mu);
        monitored.push_back(m + " " + me + " " + std::to_string(prog) + "/" + std::to_string(vers) + "/" +
                            std::to_string(proc));
        w.put_u32(0), w.put_i32(1);  // STAT_SUCC, state 1
      } else if (h.proc == static_cast<uint32_t>(nfs::nsm::Proc::kUnmonAll)) {
        std::lock_guard<std::mutex> g(mu);
        ++unmon_all;
        w.put_i32(1);
      }
      return reply_with(r.msg, w.written(), out, &h);
    }).value();
    lockd = nfsd::RpcService::start(o, [this](const nfsd::RpcRequest& r, Bytes* out) {
      oc::CallHeader h;
      oc::decode_call(r.msg, &h);
      nlm::TestArgs a;
      if (h.proc != static_cast<uint32_t>(nlm::Proc::kGranted) || !nlm::decode(args_of(r.msg), &a)) return false;
      std::lock_guard<std::mutex> g(mu);
      granted.push_back({a.lock.svid, Bytes(a.cookie.begin(), a.cookie.end()), a.exclusive, a.lock.offset, a.lock.len});
      Bytes res(64);
      xdr::XdrWriter w(res);
      nlm::encode(w, nlm::Res{a.cookie, refuse_granted ? nlm::Stat::kDenied : nlm::Stat::kGranted});
      return reply_with(r.msg, w.written(), out, &h);
    }).value();
    rpcbind = nfsd::RpcService::start(o, [this](const nfsd::RpcRequest& r, Bytes* out) {
      oc::CallHeader h;
      oc::decode_call(r.msg, &h);
      Bytes res(8);
      xdr::XdrWriter w(res);
      if (h.vers == rb::kVersion2 && h.proc == static_cast<uint32_t>(rb::PmapProc::kGetport)) {
        xdr::XdrReader x(args_of(r.msg));
        const uint32_t prog = x.get_u32(), vers = x.get_u32(), prot = x.get_u32();
        w.put_u32(prog == nlm::kProgram && vers == nlm::kVersion && (prot == rb::kIpprotoTcp || prot == rb::kIpprotoUdp)
                      ? lockd->port()
                      : 0);
      } else if (h.vers == rb::kVersion4 &&
                 (h.proc == static_cast<uint32_t>(rb::Proc::kSet) || h.proc == static_cast<uint32_t>(rb::Proc::kUnset))) {
        rb::Rpcb a;
        if (!rb::decode(args_of(r.msg), &a)) return false;
        std::lock_guard<std::mutex> g(mu);
        rpcbind_calls.push_back(std::string(h.proc == 1 ? "SET " : "UNSET ") + std::to_string(a.prog) + " " +
                                std::to_string(a.vers) + " " + std::string(a.netid) +
                                (h.proc == 1 ? " " + std::string(a.addr) : ""));
        w.put_bool(true);
      }
      return reply_with(r.msg, w.written(), out, &h);
    }).value();
  }
  size_t n_granted() {
    std::lock_guard<std::mutex> g(mu);
    return granted.size();
  }
};

const uint8_t kFh[] = {1, 0, 0, 0, 0, 0, 0, 7};      // the check below accepts handles starting with 1
const uint8_t kStaleFh[] = {2, 0, 0, 0, 0, 0, 0, 7};

struct NlmFixture : ::testing::Test {
  Peers peers;
  std::unique_ptr<nfsd::NlmServer> srv;

  void SetUp() override {
    nfsd::NlmOptions o;
    o.addr = "127.0.0.1";
    o.grace_seconds = 0;
    o.nsm.statd = nfsd::rpc_peer_ip("127.0.0.1", peers.statd->port(), RpcTransport::kDatagram).value();
    o.client_rpcbind_port = peers.rpcbind->port();
    o.check_fh = [](std::span<const uint8_t> fh, bool, const sockaddr_storage&) {
      return !fh.empty() && fh[0] == 1 ? nlm::Stat::kGranted : nlm::Stat::kStaleFh;
    };
    srv = nfsd::NlmServer::start(nullptr, o).value();
  }

  // One NLM call; the decoded nlm4_res (or nlm4_testres) status.
  template <typename Args, typename Res>
  Res call(nlm::Proc proc, const Args& a, RpcTransport t = RpcTransport::kStream) {
    Bytes b(4096);
    xdr::XdrWriter w(b);
    nlm::encode(w, a);
    auto peer = nfsd::rpc_peer_ip("127.0.0.1", srv->port(), t).value();
    auto r = nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(proc), w.written());
    Res res{};
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r) return res;
    results_ = *r;
    EXPECT_TRUE(nlm::decode(results_, &res));
    return res;
  }
  nlm::Stat lock(const std::string& who, int32_t svid, bool excl, uint64_t off, uint64_t len, bool block,
                 RpcTransport t = RpcTransport::kStream, std::span<const uint8_t> fh = kFh) {
    const uint8_t cookie[] = {static_cast<uint8_t>(svid)};
    nlm::LockArgs a{cookie, block, excl, {who, fh, oh(who), svid, off, len}, false, 1};
    return call<nlm::LockArgs, nlm::Res>(nlm::Proc::kLock, a, t).stat;
  }
  nlm::Stat unlock(const std::string& who, int32_t svid, uint64_t off, uint64_t len) {
    nlm::UnlockArgs a{{}, {who, kFh, oh(who), svid, off, len}};
    return call<nlm::UnlockArgs, nlm::Res>(nlm::Proc::kUnlock, a).stat;
  }
  std::span<const uint8_t> oh(const std::string& who) {
    owners_.push_back(who);
    return {reinterpret_cast<const uint8_t*>(owners_.back().data()), owners_.back().size()};
  }

  Bytes results_;
  std::deque<std::string> owners_;
};

TEST_F(NlmFixture, LocksExcludeBlockAndAreGrantedByCallback) {
  // a holds bytes 0-99 exclusively (over TCP), which b sees with TEST (over UDP).
  EXPECT_EQ(lock("client-a", 11, true, 0, 100, false), nlm::Stat::kGranted);
  nlm::TestArgs t{{}, false, {"client-b", kFh, oh("client-b"), 22, 50, 1}};
  auto tr = call<nlm::TestArgs, nlm::TestRes>(nlm::Proc::kTest, t, RpcTransport::kDatagram);
  EXPECT_EQ(tr.stat, nlm::Stat::kDenied);
  EXPECT_EQ(tr.holder.svid, 11);
  EXPECT_TRUE(tr.holder.exclusive);
  EXPECT_EQ(tr.holder.offset, 0u);
  EXPECT_EQ(tr.holder.len, 100u);
  // a's host was given to statd to watch, with the callback on NLM v4's
  // private procedure at loopback: nfs-utils' statd refuses any other
  // program than 100021 (found in the VM: STAT_FAIL for a private one).
  EXPECT_TRUE(eventually([&] {
    std::lock_guard<std::mutex> g(peers.mu);
    return peers.monitored.size() == 1 && peers.monitored[0] == "127.0.0.1 127.0.0.1 100021/4/16";
  }));
  // b without waiting: denied; b waiting: blocked, then granted when a unlocks.
  EXPECT_EQ(lock("client-b", 22, true, 50, 10, false, RpcTransport::kDatagram), nlm::Stat::kDenied);
  EXPECT_EQ(lock("client-b", 22, true, 50, 10, true), nlm::Stat::kBlocked);
  EXPECT_EQ(peers.n_granted(), 0u);
  EXPECT_EQ(unlock("client-a", 11, 0, 0), nlm::Stat::kGranted);
  ASSERT_TRUE(eventually([&] { return peers.n_granted() == 1; }));
  {
    std::lock_guard<std::mutex> g(peers.mu);
    EXPECT_EQ(peers.granted[0].svid, 22);
    EXPECT_EQ(peers.granted[0].cookie, Bytes{22});
    EXPECT_TRUE(peers.granted[0].exclusive);
    EXPECT_EQ(peers.granted[0].offset, 50u);
    EXPECT_EQ(peers.granted[0].len, 10u);
  }
  // b holds it now: a is denied where b holds, granted elsewhere.
  EXPECT_EQ(lock("client-a", 11, false, 55, 1, false), nlm::Stat::kDenied);
  EXPECT_EQ(lock("client-a", 11, false, 60, 1, false), nlm::Stat::kGranted);
  // b re-sending its LOCK (as a client does after a lost GRANTED) is granted at once.
  EXPECT_EQ(lock("client-b", 22, true, 50, 10, true), nlm::Stat::kGranted);
  EXPECT_EQ(srv->locks_held(), 2u);
}

TEST_F(NlmFixture, CancelledOrRefusedGrantsReleaseTheLock) {
  EXPECT_EQ(lock("client-a", 1, true, 0, 0, false), nlm::Stat::kGranted);
  EXPECT_EQ(lock("client-b", 2, true, 0, 0, true), nlm::Stat::kBlocked);
  // b gives up waiting: CANCEL takes it out of the queue.
  const uint8_t cookie[] = {2};
  nlm::CancArgs c{cookie, true, true, {"client-b", kFh, oh("client-b"), 2, 0, 0}};
  EXPECT_EQ((call<nlm::CancArgs, nlm::Res>(nlm::Proc::kCancel, c).stat), nlm::Stat::kGranted);
  EXPECT_EQ((call<nlm::CancArgs, nlm::Res>(nlm::Proc::kCancel, c).stat), nlm::Stat::kDenied);
  EXPECT_EQ(unlock("client-a", 1, 0, 0), nlm::Stat::kGranted);
  EXPECT_EQ(srv->locks_held(), 0u);
  EXPECT_EQ(peers.n_granted(), 0u);
  // A client that answers GRANTED with DENIED (it stopped waiting) does not
  // keep the lock: the server releases it, and c, waiting behind, gets it.
  EXPECT_EQ(lock("client-a", 1, true, 0, 0, false), nlm::Stat::kGranted);
  EXPECT_EQ(lock("client-b", 2, true, 0, 0, true), nlm::Stat::kBlocked);
  EXPECT_EQ(lock("client-c", 3, true, 0, 0, true), nlm::Stat::kBlocked);
  {
    std::lock_guard<std::mutex> g(peers.mu);
    peers.refuse_granted = true;
  }
  EXPECT_EQ(unlock("client-a", 1, 0, 0), nlm::Stat::kGranted);
  ASSERT_TRUE(eventually([&] { return peers.n_granted() == 2; }));
  {
    std::lock_guard<std::mutex> g(peers.mu);
    EXPECT_EQ(peers.granted[0].svid, 2);
    EXPECT_EQ(peers.granted[1].svid, 3);
    peers.refuse_granted = false;
  }
  // c refused too: nothing is held.
  EXPECT_TRUE(eventually([&] { return srv->locks_held() == 0; }));
}

TEST_F(NlmFixture, RebootNotificationAndFreeAllReleaseAHostsLocks) {
  EXPECT_EQ(lock("client-a", 1, true, 0, 10, false), nlm::Stat::kGranted);
  EXPECT_EQ(lock("client-b", 2, true, 20, 10, false), nlm::Stat::kGranted);
  EXPECT_EQ(lock("client-c", 3, true, 0, 10, true), nlm::Stat::kBlocked);
  // FREE_ALL for a: c, who waited behind it, is granted.
  Bytes b(64);
  xdr::XdrWriter w(b);
  nlm::encode(w, nlm::Notify{"client-a", 2});
  auto peer = nfsd::rpc_peer_ip("127.0.0.1", srv->port(), RpcTransport::kDatagram).value();
  ASSERT_TRUE(nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kFreeAll),
                             w.written()).is_ok());
  ASSERT_TRUE(eventually([&] { return peers.n_granted() == 1; }));
  EXPECT_EQ(srv->locks_held(), 2u);  // b's and c's
  // A status callback from somewhere other than loopback is refused, and
  // changes nothing.
  Bytes st(64);
  xdr::XdrWriter sw(st);
  nfs::nsm::encode(sw, nfs::nsm::Status{"127.0.0.1", 3, {}});
  oc::CallHeader h;
  h.xid = 9, h.prog = nlm::kProgram, h.vers = nlm::kVersion, h.proc = static_cast<uint32_t>(nlm::Proc::kNsmNotify);
  Bytes msg(oc::call_size(h) + sw.bytes_written());
  size_t n = oc::encode_call(h, msg);
  std::memcpy(msg.data() + n, st.data(), sw.bytes_written());
  nfsd::RpcRequest far;
  far.msg = msg;
  auto* s4 = reinterpret_cast<sockaddr_in*>(&far.peer);
  s4->sin_family = AF_INET;
  inet_pton(AF_INET, "10.9.9.9", &s4->sin_addr);
  Bytes reply;
  ASSERT_TRUE(srv->handle(far, &reply));
  oc::ReplyHeader rh;
  oc::decode_reply(reply, &rh);
  EXPECT_EQ(rh.stat, oc::ReplyStat::kDenied);
  EXPECT_EQ(srv->locks_held(), 2u);
  // statd (on loopback) says the host at 127.0.0.1 rebooted: every caller
  // that locked from there loses its locks.
  auto statd_side = nfsd::rpc_peer_ip("127.0.0.1", srv->port(), RpcTransport::kDatagram).value();
  ASSERT_TRUE(nfsd::rpc_call(statd_side, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kNsmNotify),
                             sw.written()).is_ok());
  EXPECT_EQ(srv->locks_held(), 0u);
  EXPECT_EQ(lock("client-d", 4, true, 0, 0, false), nlm::Stat::kGranted);
}

TEST_F(NlmFixture, BadHandlesRangesVersionsAndGarbage) {
  EXPECT_EQ(lock("client-a", 1, true, 0, 1, false, RpcTransport::kStream, kStaleFh), nlm::Stat::kStaleFh);
  EXPECT_EQ(lock("client-a", 1, true, 2, UINT64_MAX, false), nlm::Stat::kFbig);
  EXPECT_EQ(srv->locks_held(), 0u);
  auto peer = nfsd::rpc_peer_ip("127.0.0.1", srv->port(), RpcTransport::kStream).value();
  // Version 3 (32-bit offsets) is not served; the answer names 4.
  auto v3 = nfsd::rpc_call(peer, nlm::kProgram, 3, 0, {});
  EXPECT_EQ(v3.status().code(), Errc::kRemoteError);
  EXPECT_NE(v3.status().message().find("accept_stat 2"), std::string::npos) << v3.status().message();
  // Truncated arguments.
  const uint8_t junk[] = {0, 0, 0, 4, 1};
  auto g = nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kLock), junk);
  EXPECT_NE(g.status().message().find("accept_stat 4"), std::string::npos) << g.status().message();
  // SHARE is answered NLM4_FAILED (not implemented), not dropped.
  Bytes b(256);
  xdr::XdrWriter w(b);
  w.put_opaque_var({}), w.put_string("client-a"), w.put_opaque_var(kFh), w.put_opaque_var({});
  w.put_u32(0), w.put_u32(1), w.put_bool(false);
  auto sh = nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kShare), w.written());
  ASSERT_TRUE(sh.is_ok());
  xdr::XdrReader r(*sh);
  r.get_opaque_var(1024);
  EXPECT_EQ(r.get_u32(), static_cast<uint32_t>(nlm::Stat::kFailed));
}

TEST(RpcbindRegistration, SetsOnAddAndUnsetsOnDestruction) {
  Peers peers;
  sockaddr_storage at{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&at);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(4045);
  inet_pton(AF_INET, "127.0.0.1", &s4->sin_addr);
  {
    nfsd::RpcbindOptions o;
    o.endpoints = {nfsd::rpc_peer_unix("/nonexistent/rpcbind.sock").value(),
                   nfsd::rpc_peer_ip("127.0.0.1", peers.rpcbind->port(), RpcTransport::kStream).value()};
    nfsd::RpcbindRegistration reg(o);
    ASSERT_TRUE(reg.add(nlm::kProgram, nlm::kVersion, "tcp", at).is_ok());
    ASSERT_TRUE(reg.add(100003, 3, "rdma", at).is_ok());
    EXPECT_EQ(reg.registered(), 2u);
    std::lock_guard<std::mutex> g(peers.mu);
    EXPECT_EQ(peers.rpcbind_calls, (std::vector<std::string>{"UNSET 100021 4 tcp", "SET 100021 4 tcp 127.0.0.1.15.205",
                                                             "UNSET 100003 3 rdma", "SET 100003 3 rdma 127.0.0.1.15.205"}));
    peers.rpcbind_calls.clear();
  }
  std::lock_guard<std::mutex> g(peers.mu);
  EXPECT_EQ(peers.rpcbind_calls, (std::vector<std::string>{"UNSET 100021 4 tcp", "UNSET 100003 3 rdma"}));
}

TEST(RpcbindRegistration, NoRpcbindIsDisconnected) {
  nfsd::RpcbindOptions o;
  o.endpoints = {nfsd::rpc_peer_unix("/nonexistent/rpcbind.sock").value()};
  o.timeout_ms = 500;
  nfsd::RpcbindRegistration reg(o);
  sockaddr_storage at{};
  at.ss_family = AF_INET;
  Status s = reg.add(nlm::kProgram, nlm::kVersion, "tcp", at);
  EXPECT_EQ(s.code(), Errc::kDisconnected) << s.to_string();
  EXPECT_EQ(reg.registered(), 0u);
}

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/tern-nlm-test.XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { (void)!system(("rm -rf " + path).c_str()); }
};

// NLM and MOUNT over UDP on one real export (optionally listing only one
// client): a lock and a MNT, as a client at 127.0.0.1 asks them.
struct ExportedNlm {
  TempDir d;
  std::unique_ptr<nfsd::Export> exp;
  std::unique_ptr<nfsd::PublishedExports> pub;
  std::unique_ptr<nfsd::NlmServer> srv;  // these two last: stopped before the table they read
  std::unique_ptr<nfsd::RpcService> mu;

  explicit ExportedNlm(const char* only_client = nullptr) {
    EXPECT_EQ(mkdir((d.path + "/x").c_str(), 0755), 0);
    nfsd::ExportOptions eo;
    eo.dir = d.path + "/x";
    eo.name = "/x";
    eo.state_dir = d.path + "/state";
    if (only_client != nullptr) {
      eo.clients.push_back({nfsd::ClientSpec::parse(only_client).value(), {}});
      eo.clients.back().opt.read_only = false;
    }
    exp = nfsd::Export::open(eo).value();
    pub = std::make_unique<nfsd::PublishedExports>(nfsd::ExportTable::of_one(*exp));
    nfsd::NlmOptions o;
    o.addr = "127.0.0.1";
    o.grace_seconds = 0;
    o.use_statd = false;
    srv = nfsd::NlmServer::start(pub.get(), o).value();
    mu = nfsd::start_mount_udp(*pub, "127.0.0.1", 0).value();
  }
  Bytes root_fh() const { return Bytes(exp->root_fh().bytes().begin(), exp->root_fh().bytes().end()); }
  // An exclusive LOCK over TCP on `fh`: its status.
  nlm::Stat lock(std::span<const uint8_t> fh) {
    auto peer = nfsd::rpc_peer_ip("127.0.0.1", srv->port(), RpcTransport::kStream).value();
    Bytes b(512);
    xdr::XdrWriter w(b);
    const uint8_t oh[] = {1};
    nlm::encode(w, nlm::LockArgs{{}, false, true, {"c", fh, oh, 1, 0, 0}, false, 1});
    auto r = nfsd::rpc_call(peer, nlm::kProgram, nlm::kVersion, static_cast<uint32_t>(nlm::Proc::kLock), w.written());
    nlm::Res res;
    EXPECT_TRUE(r.is_ok() && nlm::decode(*r, &res));
    return res.stat;
  }
  // A MOUNT call of version `vers` over UDP with `args`.
  Result<Bytes> mount_call(uint32_t vers, nfs::mount3::Proc proc, std::span<const uint8_t> args) {
    auto mp = nfsd::rpc_peer_ip("127.0.0.1", mu->port(), RpcTransport::kDatagram).value();
    return nfsd::rpc_call(mp, nfs::mount3::kProgram, vers, static_cast<uint32_t>(proc), args);
  }
  static Bytes dirpath(const char* p) {
    Bytes path(64);
    xdr::XdrWriter w(path);
    w.put_string(p);
    path.resize(w.bytes_written());
    return path;
  }
};

// With a real export: handles are checked as NFS checks them, and MOUNT
// answers over UDP in versions 1 (showmount) and 3 (mount.nfs).
TEST(NlmOnExport, RealHandlesAndMountOverUdp) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  ExportedNlm e;
  Bytes fh = e.root_fh();
  EXPECT_EQ(e.lock(fh), nlm::Stat::kGranted);
  fh.back() ^= 1;  // the signature no longer matches
  EXPECT_EQ(e.lock(fh), nlm::Stat::kStaleFh);

  auto ex = e.mount_call(1, nfs::mount3::Proc::kExport, {});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  xdr::XdrReader r(*ex);
  EXPECT_TRUE(r.get_bool());  // an entry follows
  EXPECT_EQ(r.get_string(1024), "/x");
  const Bytes path = ExportedNlm::dirpath("/x");
  auto mnt3 = e.mount_call(3, nfs::mount3::Proc::kMnt, path);
  ASSERT_TRUE(mnt3.is_ok());
  nfs::mount3::MntRes mr;
  ASSERT_TRUE(nfs::mount3::decode(*mnt3, &mr));
  EXPECT_EQ(mr.status, nfs::mount3::Stat::kOk);
  EXPECT_TRUE(mr.fh == e.exp->root_fh());
  auto mnt1 = e.mount_call(1, nfs::mount3::Proc::kMnt, path);
  EXPECT_NE(mnt1.status().message().find("accept_stat 3"), std::string::npos);
}

// An export that lists only another address: a client at 127.0.0.1 gets
// no root handle over UDP MOUNT (MNT3ERR_ACCES) and no lock over NLM
// (NLM4_FAILED), with a handle it learned elsewhere; the client lists are
// the same over every transport, not only over MOUNT's TCP and NFS.
TEST(NlmOnExport, AClientTheExportDoesNotListGetsNoHandleAndNoLock) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (open_by_handle_at)";
  ExportedNlm e("10.9.9.9");
  EXPECT_EQ(e.lock(e.root_fh()), nlm::Stat::kFailed);
  EXPECT_EQ(e.srv->locks_held(), 0u);
  auto mnt3 = e.mount_call(3, nfs::mount3::Proc::kMnt, ExportedNlm::dirpath("/x"));
  ASSERT_TRUE(mnt3.is_ok());
  nfs::mount3::MntRes mr;
  ASSERT_TRUE(nfs::mount3::decode(*mnt3, &mr));
  EXPECT_EQ(mr.status, nfs::mount3::Stat::kAccess);
  EXPECT_FALSE(mr.fh == e.exp->root_fh());
}

}  // namespace
}  // namespace tern
