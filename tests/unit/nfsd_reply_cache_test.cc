// tern-nfsd's file-backed reply cache (nfsd/reply_cache.h) shared by many
// clients: one client's flood cannot push out another's records, a client
// alone may use every slot, the shares survive a reopen, the argument
// digest is keyed (and the key kept with the file), the index's chains stay
// short.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "nfsd/reply_cache.h"

namespace tern::nfsd {
namespace {

using Bytes = std::vector<uint8_t>;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/tern-nfsd-drc.XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { (void)!system(("rm -rf " + path).c_str()); }
};

ReplyKey key(const std::string& peer, uint32_t xid, uint64_t digest = 0xabc) {
  return ReplyKey{peer, xid, 100003, 3, 9, digest};
}

// True when the call was new (and is now recorded with `res`).
bool serve(ReplyCache& rc, const ReplyKey& k, uint8_t res, Bytes* got = nullptr) {
  Bytes tmp;
  switch (rc.begin(k, got != nullptr ? got : &tmp)) {
    case ReplyCache::Found::kDone:
      return false;
    case ReplyCache::Found::kInProgress:
      return false;
    case ReplyCache::Found::kNew:
      break;
  }
  rc.done(k, Bytes{res});
  return true;
}

// The attack from the issue, against the file-backed cache: a victim's
// REMOVE is recorded; another client sends more calls than there are
// slots; the victim's retransmission must still find its reply. A ring
// reused oldest-first lost it.
TEST(NfsdReplyCache, AnotherClientsFloodDoesNotEvictAVictimsRecord) {
  TempDir d;
  auto rc = ReplyCache::open(d.path + "/drc", 256).value();
  ASSERT_TRUE(serve(*rc, key("10.0.0.2", 42), 0xa1));
  for (uint32_t x = 0; x < 1000; ++x) ASSERT_TRUE(serve(*rc, key("10.0.0.66", x), 1));
  Bytes got;
  EXPECT_FALSE(serve(*rc, key("10.0.0.2", 42), 0xb2, &got)) << "the victim's call ran twice";
  EXPECT_EQ(got, Bytes{0xa1});
  EXPECT_EQ(rc->peer_slots("10.0.0.66"), 255u) << "the attacker borrows every idle slot";
}

// A client alone uses every slot; a second one takes slots from it up to
// its share, then reuses its own; and the shares are rebuilt from the file
// on a reopen (a restarted server keeps protecting the victim).
TEST(NfsdReplyCache, SharesAreFairWorkConservingAndSurviveAReopen) {
  TempDir d;
  const std::string path = d.path + "/drc";
  {
    auto rc = ReplyCache::open(path, 16).value();
    for (uint32_t x = 0; x < 16; ++x) ASSERT_TRUE(serve(*rc, key("a", x), 1));
    EXPECT_EQ(rc->peer_slots("a"), 16u);
    for (uint32_t x = 0; x < 12; ++x) ASSERT_TRUE(serve(*rc, key("b", x), 2));
    EXPECT_EQ(rc->peer_slots("a"), 8u);
    EXPECT_EQ(rc->peer_slots("b"), 8u);
    // a's newest records stayed; b's newest too.
    EXPECT_FALSE(serve(*rc, key("a", 15), 9));
    EXPECT_FALSE(serve(*rc, key("b", 11), 9));
  }
  auto rc = ReplyCache::open(path, 16).value();
  EXPECT_EQ(rc->loaded(), 16u);
  EXPECT_EQ(rc->peers(), 2u);
  EXPECT_EQ(rc->peer_slots("a"), 8u);
  // b floods after the restart: it reuses its own oldest, a keeps all 8.
  for (uint32_t x = 100; x < 200; ++x) ASSERT_TRUE(serve(*rc, key("b", x), 2));
  EXPECT_EQ(rc->peer_slots("a"), 8u);
  for (uint32_t x = 8; x < 16; ++x) EXPECT_FALSE(serve(*rc, key("a", x), 9)) << x;
  // A third client arrives: it takes from the one holding the most until it
  // holds its share (16 / 3 = 5).
  for (uint32_t x = 0; x < 10; ++x) ASSERT_TRUE(serve(*rc, key("c", x), 3));
  EXPECT_EQ(rc->peer_slots("c"), 5u);
  EXPECT_EQ(rc->peer_slots("a") + rc->peer_slots("b"), 11u);
}

// The digest is keyed, and its key is the file's: the next process
// computes the same digest for a retransmission (so it finds the record),
// another file (another server) another.
TEST(NfsdReplyCache, TheArgumentDigestIsKeyedWithTheFilesKey) {
  TempDir d;
  const Bytes args = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  uint64_t first;
  {
    auto rc = ReplyCache::open(d.path + "/drc", 16).value();
    first = rc->args_digest(args);
    EXPECT_NE(first, rc->args_digest(Bytes{1, 2, 3, 4, 5, 6, 7, 8, 9, 11}));
  }
  auto again = ReplyCache::open(d.path + "/drc", 16).value();
  EXPECT_EQ(again->args_digest(args), first);
  auto other = ReplyCache::open(d.path + "/other", 16).value();
  EXPECT_NE(other->args_digest(args), first);
  // The unkeyed FNV-1a digest the cache used before.
  uint64_t fnv = 0xcbf29ce484222325ull;
  for (uint8_t b : args) fnv = (fnv ^ b) * 0x100000001b3ull;
  fnv ^= args.size();
  EXPECT_NE(first, fnv);
}

// Chains: keys whose unkeyed hash collided (the old hash xor-ed the xid
// times a constant with the digest) spread over the buckets.
TEST(NfsdReplyCache, KeysChosenToCollideDoNotShareAChain) {
  TempDir d;
  auto rc = ReplyCache::open(d.path + "/drc", 4096).value();
  for (uint32_t x = 0; x < 4096; ++x)
    ASSERT_TRUE(serve(*rc, key("10.0.0.66", x, 0x1234 ^ (uint64_t{x} * 0x9E3779B97F4A7C15ull)), 1));
  EXPECT_LE(rc->longest_chain(), 16u);
}

}  // namespace
}  // namespace tern::nfsd
