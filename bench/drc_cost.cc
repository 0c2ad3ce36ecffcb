// What the duplicate request cache costs per call, before and after it was
// partitioned per peer and keyed, side by side in one run: inserts (a new
// call: begin + done, the cache full and evicting), hits (a retransmission
// answered from it), the argument digest, and the "all entries in one hash
// chain" attack (a peer choosing its digests as target ^ xid * constant,
// which the old unkeyed hash sent to one bucket). The old cache is kept
// here, as it was, for the comparison. Not a test: numbers for
// docs/performance.md.
//   tern-drc-cost [--entries N] [--rounds N]
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/process_key.h"
#include "engine/args_digest.h"
#include "engine/duplicate_cache.h"
#include "option_parser.h"

using namespace tern;
using namespace tern::rpc;

namespace {

struct FakeCall : ServerCall {
  std::string peer;
  uint32_t xid_ = 0;
  uint64_t digest = 0;
  uint32_t xid() const override { return xid_; }
  uint32_t prog() const override { return 400100; }
  uint32_t vers() const override { return 1; }
  uint32_t proc() const override { return 3; }
  std::span<const uint8_t> args() const override { return {}; }
  std::span<const uint8_t> rpc_header() const override { return {}; }
  std::span<const uint8_t> bulk() const override { return {}; }
  std::span<const ReadChunkData> read_chunks() const override { return {}; }
  uint32_t write_chunk_count() const override { return 0; }
  uint32_t write_chunk_capacity(uint32_t) const override { return 0; }
  std::span<uint8_t> write_chunk_buffer(uint32_t, uint32_t) override { return {}; }
  Status reply(std::span<const uint8_t>, std::span<const uint8_t>) override { return Status::ok(); }
  Status reply_chunks(std::span<const uint8_t>, std::span<const std::span<const uint8_t>>) override {
    return Status::ok();
  }
  Status reply_error(AcceptStat) override { return Status::ok(); }
  void drop() override {}
  std::string_view peer_id() const override { return peer; }
  uint64_t args_digest() const override { return digest; }
};

// The cache as it was: one LRU for all peers, an unkeyed hash.
class OldCache {
 public:
  explicit OldCache(size_t max) : max_(max) {}
  enum class Found { kNew, kInProgress, kDone };
  Found begin(ServerCall* c, std::vector<uint8_t>* results) {
    Key k = key_of(*c);
    auto it = map_.find(k);
    if (it == map_.end()) {
      Entry e;
      e.lru = lru_.end();
      map_.emplace(std::move(k), std::move(e));
      if (map_.size() > max_) evict();
      return Found::kNew;
    }
    if (!it->second.done) return Found::kInProgress;
    *results = it->second.results;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return Found::kDone;
  }
  void done(const ServerCall& c, std::span<const uint8_t> results) {
    Key k = key_of(c);
    auto it = map_.find(k);
    if (it == map_.end()) it = map_.emplace(k, Entry{}).first;
    Entry& e = it->second;
    e.results.assign(results.begin(), results.end());
    if (!e.done) {
      e.done = true;
      lru_.push_front(k);
      e.lru = lru_.begin();
    } else {
      lru_.splice(lru_.begin(), lru_, e.lru);
    }
    if (map_.size() > max_) evict();
  }

 private:
  struct Key {
    std::string peer;
    uint32_t xid, prog, vers, proc;
    uint64_t digest;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = std::hash<std::string>()(k.peer) ^ (uint64_t{k.xid} * 0x9E3779B97F4A7C15ull) ^ k.digest;
      return static_cast<size_t>(h ^ (uint64_t{k.prog} << 17) ^ (uint64_t{k.proc} << 7) ^ k.vers);
    }
  };
  struct Entry {
    bool done = false;
    std::vector<uint8_t> results;
    std::list<Key>::iterator lru;
  };
  static Key key_of(const ServerCall& c) {
    return Key{std::string(c.peer_id()), c.xid(), c.prog(), c.vers(), c.proc(), c.args_digest()};
  }
  void evict() {
    while (map_.size() > max_ && !lru_.empty()) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  size_t max_;
  std::unordered_map<Key, Entry, KeyHash> map_;
  std::list<Key> lru_;
};

uint64_t old_digest(std::span<const uint8_t> b) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    h = std::rotl((h ^ w) * 0xFF51AFD7ED558CCDull, 29);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, b.data() + i, b.size() - i);
  h = std::rotl((h ^ tail ^ (uint64_t{b.size()} << 56)) * 0xC4CEB9FE1A85EC53ull, 31);
  return h ^ (h >> 33);
}

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Digests: chosen to collide under the old hash (the attack), or plain.
uint64_t digest_for(uint32_t xid, bool attack) { return attack ? 0x1234 ^ (uint64_t{xid} * 0x9E3779B97F4A7C15ull) : xid * 7919ull; }

template <class Cache>
struct Run {
  double insert_ns, hit_ns, other_ns;
};

// Fill the cache with `entries` calls of one peer (digests per `attack`),
// then time: `rounds` more inserts from that peer (each evicting), hits of
// that peer's newest entries, and another peer's inserts+hits ("other
// calls": a well-behaved client sharing the cache).
template <class Cache>
Run<Cache> run(size_t entries, int rounds, bool attack) {
  Cache drc(entries);
  FakeCall c;
  c.peer = "pid 666 uid 1001";
  std::vector<uint8_t> got;
  const uint8_t res[64] = {};
  uint32_t xid = 0;
  for (; xid < entries; ++xid) {
    c.xid_ = xid, c.digest = digest_for(xid, attack);
    (void)drc.begin(&c, &got);
    drc.done(c, res);
  }
  Run<Cache> r{};
  double t0 = now_ns();
  for (int i = 0; i < rounds; ++i, ++xid) {
    c.xid_ = xid, c.digest = digest_for(xid, attack);
    (void)drc.begin(&c, &got);
    drc.done(c, res);
  }
  r.insert_ns = (now_ns() - t0) / rounds;
  t0 = now_ns();
  for (int i = 0; i < rounds; ++i) {
    const uint32_t x = xid - 1 - static_cast<uint32_t>(i % (entries / 4));
    c.xid_ = x, c.digest = digest_for(x, attack);
    (void)drc.begin(&c, &got);
  }
  r.hit_ns = (now_ns() - t0) / rounds;
  // Another peer: a new call and its retransmission, per round. Its own
  // digests are plain; what it pays is the attacker's chain (old) or not.
  FakeCall o;
  o.peer = "pid 100 uid 1000";
  t0 = now_ns();
  for (int i = 0; i < rounds; ++i) {
    o.xid_ = static_cast<uint32_t>(i), o.digest = digest_for(static_cast<uint32_t>(i), attack);
    (void)drc.begin(&o, &got);
    drc.done(o, res);
    (void)drc.begin(&o, &got);
  }
  r.other_ns = (now_ns() - t0) / rounds;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  size_t entries = 4096;
  int rounds = 20000;
  tern::apps::OptionParser cli("tern-drc-cost", "[options]");
  cli.count("entries", "N", "cache entries (default 4096)", 1, 1u << 24, &entries);
  cli.integer("rounds", "N", "operations per measurement (default 20000)", 1, 1 << 30, &rounds);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  std::printf("duplicate request cache, %zu entries, %d rounds (ns per operation; best of 3)\n", entries, rounds);
  std::printf("%-28s %10s %10s %14s\n", "", "insert", "hit", "other peer");
  for (bool attack : {false, true}) {
    Run<OldCache> o{1e18, 1e18, 1e18};
    Run<DuplicateCache> n{1e18, 1e18, 1e18};
    for (int rep = 0; rep < 3; ++rep) {
      auto a = run<OldCache>(entries, rounds, attack);
      auto b = run<DuplicateCache>(entries, rounds, attack);
      o = {std::min(o.insert_ns, a.insert_ns), std::min(o.hit_ns, a.hit_ns), std::min(o.other_ns, a.other_ns)};
      n = {std::min(n.insert_ns, b.insert_ns), std::min(n.hit_ns, b.hit_ns), std::min(n.other_ns, b.other_ns)};
    }
    const char* what = attack ? "one-chain attack" : "plain";
    std::printf("old (shared, unkeyed) %-6s %10.0f %10.0f %14.0f\n", attack ? "attack" : "plain", o.insert_ns, o.hit_ns,
                o.other_ns);
    std::printf("new (per peer, keyed) %-6s %10.0f %10.0f %14.0f\n", attack ? "attack" : "plain", n.insert_ns, n.hit_ns,
                n.other_ns);
    (void)what;
  }
  // The digest itself, over arguments of a few sizes.
  std::printf("\nargument digest (ns per call)\n%-10s %10s %10s\n", "bytes", "old", "SipHash");
  for (size_t len : {64ul, 512ul, 4096ul, 65536ul, 1048576ul}) {
    std::vector<uint8_t> b(len);
    for (size_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(i * 31);
    const int reps = static_cast<int>(std::max<size_t>(20, (1u << 24) / len));
    uint64_t sink = 0;
    double t0 = now_ns();
    for (int i = 0; i < reps; ++i) {
      b[0] = static_cast<uint8_t>(i);
      sink += old_digest(b);
    }
    const double old_ns = (now_ns() - t0) / reps;
    t0 = now_ns();
    for (int i = 0; i < reps; ++i) {
      b[0] = static_cast<uint8_t>(i);
      sink += args_digest(process_key(), b, {});
    }
    const double new_ns = (now_ns() - t0) / reps;
    std::printf("%-10zu %10.0f %10.0f%s\n", len, old_ns, new_ns, sink == 42 ? " " : "");
  }
  return 0;
}
