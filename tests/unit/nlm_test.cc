// The NLM pieces without a network: the NLM v4, NSM and rpcbind codecs
// (round trips, golden bytes, every truncation), the lock table (overlaps,
// splits, upgrades, merges, the blocking queue, a host's release) and the
// grace period as NlmServer::handle() answers it.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <cstring>
#include <vector>

#include "nfs/nlm4.h"
#include "nfs/nsm.h"
#include "nfs/rpcbind.h"
#include "nfsd/lock_table.h"
#include "nfsd/nlm_server.h"
#include "oncrpc/oncrpc.h"

namespace tern {
namespace {

using Bytes = std::vector<uint8_t>;
namespace nlm = nfs::nlm4;
using nfsd::ByteRange;
using nfsd::LockOutcome;
using nfsd::LockOwner;
using nfsd::LockTable;
using nfsd::Waiter;

template <typename T>
Bytes encoded(const T& v) {
  Bytes b(8192);
  xdr::XdrWriter w(b);
  nlm::encode(w, v);
  EXPECT_TRUE(w.ok());
  b.resize(w.bytes_written());
  return b;
}

const uint8_t kFh[] = {1, 2, 3, 4, 5, 6, 7, 8};
const uint8_t kOh[] = {'o', 'w', 'n'};
const uint8_t kCookie[] = {9, 9};

nlm::Lock a_lock() { return {"client-a", kFh, kOh, 4242, 100, 50}; }

TEST(Nlm4Codec, LockArgsGoldenBytesAndRoundTrip) {
  nlm::LockArgs a{kCookie, true, true, a_lock(), false, 7};
  Bytes b = encoded(a);
  // cookie<2>, block, exclusive, caller_name "client-a", fh<8>, oh<3>, svid, offset, len, reclaim, state
  const Bytes want = {0, 0, 0, 2, 9, 9, 0, 0,   0, 0, 0, 1,   0, 0, 0, 1,   0, 0, 0, 8, 'c', 'l', 'i', 'e',
                      'n', 't', '-', 'a', 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 3, 'o', 'w', 'n', 0,
                      0, 0, 0x10, 0x92, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 50, 0, 0, 0, 0, 0, 0, 0, 7};
  EXPECT_EQ(b, want);
  nlm::LockArgs d;
  ASSERT_TRUE(nlm::decode(b, &d));
  EXPECT_TRUE(d.block && d.exclusive && !d.reclaim);
  EXPECT_EQ(d.state, 7);
  EXPECT_EQ(d.lock.caller_name, "client-a");
  EXPECT_EQ(Bytes(d.lock.fh.begin(), d.lock.fh.end()), Bytes(std::begin(kFh), std::end(kFh)));
  EXPECT_EQ(d.lock.svid, 4242);
  EXPECT_EQ(d.lock.offset, 100u);
  EXPECT_EQ(d.lock.len, 50u);
  // Every truncation is garbage.
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_FALSE(nlm::decode(std::span<const uint8_t>(b.data(), n), &d)) << n;
}

TEST(Nlm4Codec, EveryArgumentTypeRoundTripsAndTruncationsFail) {
  // Every truncation fails; then the whole decodes (into *out, checked after).
  auto check = [](const Bytes& b, auto* out) {
    for (size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(nlm::decode(std::span<const uint8_t>(b.data(), n), out));
    ASSERT_TRUE(nlm::decode(b, out));
  };
  nlm::TestArgs t;
  const Bytes tb = encoded(nlm::TestArgs{kCookie, true, a_lock()});  // decoded views point into it
  check(tb, &t);
  EXPECT_TRUE(t.exclusive);
  nlm::CancArgs c;
  const Bytes cb = encoded(nlm::CancArgs{kCookie, true, false, a_lock()});
  check(cb, &c);
  EXPECT_TRUE(c.block && !c.exclusive);
  nlm::UnlockArgs u;
  const Bytes ub = encoded(nlm::UnlockArgs{kCookie, a_lock()});
  check(ub, &u);
  EXPECT_EQ(u.lock.caller_name, "client-a");
  nlm::Notify nt;
  const Bytes nb = encoded(nlm::Notify{"host", 3});
  check(nb, &nt);
  EXPECT_EQ(nt.name, "host");
  nlm::Res r;
  check(encoded(nlm::Res{kCookie, nlm::Stat::kBlocked}), &r);
  EXPECT_EQ(r.stat, nlm::Stat::kBlocked);
  nlm::TestRes tr;
  nlm::TestRes denied{kCookie, nlm::Stat::kDenied, {true, 9, kOh, 5, 0}};
  const Bytes db = encoded(denied);
  check(db, &tr);
  EXPECT_EQ(tr.holder.svid, 9);
  EXPECT_TRUE(tr.holder.exclusive);
  EXPECT_EQ(tr.holder.offset, 5u);
}

TEST(Nlm4Codec, BoundsAndBadValuesAreGarbage) {
  // A file handle over NFSv3's 64 bytes.
  uint8_t big[65] = {};
  nlm::UnlockArgs u{kCookie, {"c", big, kOh, 1, 0, 0}};
  nlm::UnlockArgs d;
  EXPECT_FALSE(nlm::decode(encoded(u), &d));
  // A bool that is 2.
  Bytes b = encoded(nlm::TestArgs{kCookie, true, a_lock()});
  b[11] = 2;
  nlm::TestArgs t;
  EXPECT_FALSE(nlm::decode(b, &t));
  // A status past NLM4_FAILED.
  Bytes r = encoded(nlm::Res{kCookie, nlm::Stat::kFailed});
  r.back() = 10;
  nlm::Res res;
  EXPECT_FALSE(nlm::decode(r, &res));
}

TEST(NsmCodec, MonAndStatus) {
  nfs::nsm::Mon m;
  m.mon_name = "10.0.0.2";
  m.my_id = {"127.0.0.1", 0x4e4c4d34, 1, 1};
  m.priv[0] = 0xaa;
  Bytes b(256);
  xdr::XdrWriter w(b);
  nfs::nsm::encode(w, m);
  ASSERT_TRUE(w.ok());
  // mon_name<8> + my_name<9 -> 12> + prog, vers, proc + priv[16]
  EXPECT_EQ(w.bytes_written(), 4u + 8 + 4 + 12 + 12 + 16);
  nfs::nsm::Status st{"10.0.0.2", 5, {}};
  st.priv[15] = 1;
  Bytes s(256);
  xdr::XdrWriter sw(s);
  nfs::nsm::encode(sw, st);
  s.resize(sw.bytes_written());
  nfs::nsm::Status d;
  ASSERT_TRUE(nfs::nsm::decode(s, &d));
  EXPECT_EQ(d.mon_name, "10.0.0.2");
  EXPECT_EQ(d.state, 5);
  EXPECT_EQ(d.priv[15], 1);
  for (size_t n = 0; n < s.size(); ++n) EXPECT_FALSE(nfs::nsm::decode(std::span<const uint8_t>(s.data(), n), &d));
}

TEST(RpcbindCodec, UniversalAddresses) {
  sockaddr_storage ss{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
  s4->sin_family = AF_INET;
  s4->sin_port = htons(20049);
  inet_pton(AF_INET, "10.1.2.3", &s4->sin_addr);
  EXPECT_EQ(nfs::rpcbind::to_uaddr(ss), "10.1.2.3.78.81");  // 20049 = 78 * 256 + 81
  auto back = nfs::rpcbind::from_uaddr("10.1.2.3.78.81", false);
  ASSERT_TRUE(back);
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(&*back)->sin_port), 20049);
  EXPECT_EQ(nfs::rpcbind::to_uaddr(*nfs::rpcbind::from_uaddr("::1.0.111", true)), "::1.0.111");
  for (const char* bad : {"", "1.2.3.4", "1.2.3.4.256.1", "1.2.3.4.1.x", "nohost.1.1", ".1.1"})
    EXPECT_FALSE(nfs::rpcbind::from_uaddr(bad, false)) << bad;
  // SET's argument, as rpcbind decodes it.
  Bytes b(256);
  xdr::XdrWriter w(b);
  nfs::rpcbind::encode(w, nfs::rpcbind::Rpcb{100021, 4, "tcp", "0.0.0.0.3.232", "tern"});
  b.resize(w.bytes_written());
  nfs::rpcbind::Rpcb r;
  ASSERT_TRUE(nfs::rpcbind::decode(b, &r));
  EXPECT_EQ(r.prog, 100021u);
  EXPECT_EQ(r.netid, "tcp");
  EXPECT_EQ(r.addr, "0.0.0.0.3.232");
}

// ------------------------------------------------------------- lock table

Waiter req(const std::string& host, int32_t svid, bool excl, uint64_t first, uint64_t last) {
  Waiter w;
  w.owner = {host, svid, "oh-" + host};
  w.exclusive = excl;
  w.range = {first, last};
  return w;
}

TEST(ByteRange, FromNlmAndOverflow) {
  EXPECT_EQ(*ByteRange::from_nlm(10, 0), (ByteRange{10, UINT64_MAX}));
  EXPECT_EQ(*ByteRange::from_nlm(10, 5), (ByteRange{10, 14}));
  EXPECT_EQ(*ByteRange::from_nlm(UINT64_MAX, 1), (ByteRange{UINT64_MAX, UINT64_MAX}));
  EXPECT_EQ(*ByteRange::from_nlm(1, UINT64_MAX), (ByteRange{1, UINT64_MAX}));  // the last byte is 2^64 - 1
  EXPECT_FALSE(ByteRange::from_nlm(2, UINT64_MAX));                         // past it: NLM4_FBIG
  EXPECT_FALSE(ByteRange::from_nlm(UINT64_MAX, 2));
  EXPECT_EQ((ByteRange{10, 14}).nlm_len(), 5u);
  EXPECT_EQ((ByteRange{10, UINT64_MAX}).nlm_len(), 0u);
}

TEST(LockTable, SharedOverlapExclusiveDoesNot) {
  LockTable t;
  EXPECT_EQ(t.lock("f", req("a", 1, false, 0, 99), false), LockOutcome::kGranted);
  EXPECT_EQ(t.lock("f", req("b", 1, false, 50, 149), false), LockOutcome::kGranted);
  EXPECT_EQ(t.lock("f", req("c", 1, true, 99, 99), false), LockOutcome::kDenied);
  EXPECT_EQ(t.lock("f", req("c", 1, true, 150, 200), false), LockOutcome::kGranted);
  // Another file is another name space.
  EXPECT_EQ(t.lock("g", req("c", 1, true, 0, UINT64_MAX), false), LockOutcome::kGranted);
  auto c = t.conflict("f", req("d", 1, false, 160, 160).owner, false, {160, 160});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->owner.host, "c");
  EXPECT_TRUE(c->exclusive);
  EXPECT_FALSE(t.conflict("f", req("d", 1, false, 0, 10).owner, false, {0, 10}));
  // The same host with another svid is another owner.
  EXPECT_TRUE(t.conflict("f", req("c", 2, true, 0, 0).owner, true, {150, 150}));
  EXPECT_EQ(t.lock_count(), 4u);
}

TEST(LockTable, UnlockSplitsAndOwnerRelocksUpgradeAndDowngrade) {
  LockTable t;
  ASSERT_EQ(t.lock("f", req("a", 1, true, 0, 99), false), LockOutcome::kGranted);
  t.unlock("f", req("a", 1, true, 0, 0).owner, {40, 59});
  auto h = t.held("f");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].range, (ByteRange{0, 39}));
  EXPECT_EQ(h[1].range, (ByteRange{60, 99}));
  EXPECT_EQ(t.lock("f", req("b", 1, true, 40, 59), false), LockOutcome::kGranted);  // the hole is free
  // Downgrade the middle of a's first piece to shared; b may then share it.
  ASSERT_EQ(t.lock("f", req("a", 1, false, 10, 19), false), LockOutcome::kGranted);
  h = t.held("f");
  ASSERT_EQ(h.size(), 5u);  // a ex 0-9, a sh 10-19, a ex 20-39, b 40-59, a ex 60-99
  EXPECT_FALSE(h[1].exclusive);
  EXPECT_EQ(t.lock("f", req("c", 1, false, 15, 15), false), LockOutcome::kGranted);
  // a cannot upgrade 10-19 back while c shares byte 15 ...
  EXPECT_EQ(t.lock("f", req("a", 1, true, 10, 19), false), LockOutcome::kDenied);
  t.unlock("f", req("c", 1, false, 0, 0).owner, {0, UINT64_MAX});
  // ... and can once c is gone: the three pieces merge back into one.
  EXPECT_EQ(t.lock("f", req("a", 1, true, 10, 19), false), LockOutcome::kGranted);
  h = t.held("f");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].range, (ByteRange{0, 39}));
  EXPECT_TRUE(h[0].exclusive);
  // Unlocking everything leaves nothing, not even an empty file entry.
  t.unlock("f", req("a", 1, true, 0, 0).owner, {0, UINT64_MAX});
  t.unlock("f", req("b", 1, true, 0, 0).owner, {0, UINT64_MAX});
  EXPECT_EQ(t.lock_count(), 0u);
  EXPECT_TRUE(t.held("f").empty());
}

TEST(LockTable, RangesToTheEndAndAtTheTop) {
  LockTable t;
  ASSERT_EQ(t.lock("f", req("a", 1, true, 100, UINT64_MAX), false), LockOutcome::kGranted);
  EXPECT_EQ(t.lock("f", req("b", 1, true, UINT64_MAX, UINT64_MAX), false), LockOutcome::kDenied);
  EXPECT_EQ(t.lock("f", req("b", 1, true, 0, 99), false), LockOutcome::kGranted);
  t.unlock("f", req("a", 1, true, 0, 0).owner, {UINT64_MAX, UINT64_MAX});
  auto h = t.held("f");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].range, (ByteRange{100, UINT64_MAX - 1}));
  // Adjacent at 0 and at the top merge without wrapping.
  ASSERT_EQ(t.lock("f", req("a", 1, true, UINT64_MAX, UINT64_MAX), false), LockOutcome::kGranted);
  h = t.held("f");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].range, (ByteRange{100, UINT64_MAX}));
}

TEST(LockTable, BlockedWaitersAreGrantedInOrderWhenFree) {
  LockTable t;
  ASSERT_EQ(t.lock("f", req("a", 1, true, 0, 99), false), LockOutcome::kGranted);
  EXPECT_EQ(t.lock("f", req("b", 1, true, 0, 9), true), LockOutcome::kBlocked);
  EXPECT_EQ(t.lock("f", req("c", 1, true, 5, 14), true), LockOutcome::kBlocked);
  EXPECT_EQ(t.lock("f", req("d", 1, false, 50, 50), true), LockOutcome::kBlocked);
  // The same request again is not queued twice.
  EXPECT_EQ(t.lock("f", req("b", 1, true, 0, 9), true), LockOutcome::kBlocked);
  EXPECT_EQ(t.waiter_count(), 3u);
  // Freeing 0-49 grants b (0-9) but not c (5-14 overlaps b's now) nor d (50 still held).
  auto g = t.unlock("f", req("a", 1, true, 0, 0).owner, {0, 49});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].owner.host, "b");
  EXPECT_EQ(t.waiter_count(), 2u);
  // Cancelling c takes it out of the queue; cancelling again finds nothing.
  EXPECT_TRUE(t.cancel("f", req("c", 1, true, 0, 0).owner, true, {5, 14}));
  EXPECT_FALSE(t.cancel("f", req("c", 1, true, 0, 0).owner, true, {5, 14}));
  // a goes away entirely (its host rebooted): d is granted.
  g = t.free_host("a");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].owner.host, "d");
  EXPECT_EQ(t.waiter_count(), 0u);
  EXPECT_EQ(t.lock_count(), 2u);  // b's and d's
}

TEST(LockTable, FreeHostDropsItsWaitersAndLocksOnEveryFile) {
  LockTable t;
  ASSERT_EQ(t.lock("f", req("a", 1, true, 0, 9), false), LockOutcome::kGranted);
  ASSERT_EQ(t.lock("g", req("a", 2, true, 0, 9), false), LockOutcome::kGranted);
  ASSERT_EQ(t.lock("h", req("b", 1, true, 0, 9), false), LockOutcome::kGranted);
  ASSERT_EQ(t.lock("h", req("a", 3, true, 0, 9), true), LockOutcome::kBlocked);
  EXPECT_TRUE(t.free_host("a").empty());
  EXPECT_EQ(t.lock_count(), 1u);
  EXPECT_EQ(t.waiter_count(), 0u);
  EXPECT_TRUE(t.unlock("h", req("b", 1, true, 0, 0).owner, {0, UINT64_MAX}).empty());
}

TEST(LockTable, BoundedWaiters) {
  LockTable t;
  ASSERT_EQ(t.lock("f", req("a", 1, true, 0, UINT64_MAX), false), LockOutcome::kGranted);
  for (size_t i = 0; i < LockTable::kMaxWaiters; ++i)
    ASSERT_EQ(t.lock("f", req("w", static_cast<int32_t>(i), true, 0, 0), true), LockOutcome::kBlocked);
  EXPECT_EQ(t.lock("f", req("w", -1, true, 0, 0), true), LockOutcome::kNoLocks);
}

// ------------------------------------------------------------- grace

Bytes nlm_call(uint32_t proc, const Bytes& args) {
  oncrpc::CallHeader h;
  h.xid = 5, h.prog = nlm::kProgram, h.vers = nlm::kVersion, h.proc = proc;
  Bytes msg(oncrpc::call_size(h) + args.size());
  size_t n = oncrpc::encode_call(h, msg);
  std::memcpy(msg.data() + n, args.data(), args.size());
  return msg;
}

nlm::Stat answer(nfsd::NlmServer& s, uint32_t proc, const Bytes& args) {
  nfsd::RpcRequest r;
  Bytes msg = nlm_call(proc, args);
  r.msg = msg;
  r.tcp = true;
  reinterpret_cast<sockaddr_in*>(&r.peer)->sin_family = AF_INET;
  Bytes reply;
  EXPECT_TRUE(s.handle(r, &reply));
  oncrpc::ReplyHeader h;
  auto d = oncrpc::decode_reply(reply, &h);
  EXPECT_EQ(d.status, oncrpc::ReplyDecodeStatus::kOk);
  EXPECT_EQ(h.accept, oncrpc::AcceptStat::kSuccess);
  nlm::TestRes tr;  // nlm4_res is a prefix of nlm4_testres
  std::span<const uint8_t> res(reply.data() + d.header_len, reply.size() - d.header_len);
  if (proc == static_cast<uint32_t>(nlm::Proc::kTest)) {
    EXPECT_TRUE(nlm::decode(res, &tr));
    return tr.stat;
  }
  nlm::Res rr;
  EXPECT_TRUE(nlm::decode(res, &rr));
  return rr.stat;
}

TEST(NlmGrace, OnlyReclaimsDuringGraceAndNoReclaimAfter) {
  nfsd::NlmOptions o;
  o.addr = "127.0.0.1";
  o.grace_seconds = 3600;
  o.use_statd = false;
  o.check_fh = [](std::span<const uint8_t>, bool, const sockaddr_storage&) { return nlm::Stat::kGranted; };
  auto s = nfsd::NlmServer::start(nullptr, o).value();
  ASSERT_TRUE(s->in_grace());
  const uint32_t lock = static_cast<uint32_t>(nlm::Proc::kLock);
  EXPECT_EQ(answer(*s, lock, encoded(nlm::LockArgs{kCookie, false, true, a_lock(), false, 1})),
            nlm::Stat::kDeniedGracePeriod);
  EXPECT_EQ(answer(*s, static_cast<uint32_t>(nlm::Proc::kTest), encoded(nlm::TestArgs{kCookie, true, a_lock()})),
            nlm::Stat::kDeniedGracePeriod);
  EXPECT_EQ(answer(*s, lock, encoded(nlm::LockArgs{kCookie, false, true, a_lock(), true, 1})), nlm::Stat::kGranted);
  EXPECT_EQ(s->locks_held(), 1u);
  // Releasing is never refused.
  EXPECT_EQ(answer(*s, static_cast<uint32_t>(nlm::Proc::kUnlock), encoded(nlm::UnlockArgs{kCookie, a_lock()})),
            nlm::Stat::kGranted);
  EXPECT_EQ(s->locks_held(), 0u);

  o.grace_seconds = 0;
  auto after = nfsd::NlmServer::start(nullptr, o).value();
  EXPECT_FALSE(after->in_grace());
  EXPECT_EQ(answer(*after, lock, encoded(nlm::LockArgs{kCookie, false, true, a_lock(), true, 1})),
            nlm::Stat::kDeniedGracePeriod);
  EXPECT_EQ(answer(*after, lock, encoded(nlm::LockArgs{kCookie, false, true, a_lock(), false, 1})),
            nlm::Stat::kGranted);
}

}  // namespace
}  // namespace tern
