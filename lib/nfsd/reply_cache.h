// The duplicate request cache, kept in a file so that it outlives the
// process (the file-backed counterpart of engine/duplicate_cache.h).
//
// A client whose connection was lost sends its calls again, with the same
// xids, once it has a connection -- to a restarted server too, when
// tern-nfsd was killed and started again. A call that is not idempotent
// (CREATE, REMOVE, RENAME, ...) must then be answered with the reply it got
// the first time, not run twice: a second REMOVE would say NOENT for a file
// the first one removed, a second exclusive CREATE EXIST. nfsd's cache
// lives in memory and dies with the server; this one is a ring of slots in
// a file mapped shared, so a reply recorded before the process died (even
// by SIGKILL: the page cache keeps what was stored) is found by the next
// process. Machine crashes are another matter (it is never fsync'ed).
//
// A slot is (peer, xid, program, version, procedure, digest of the inline
// arguments) and the results, written with its check word zeroed first and
// set last: a slot torn by a death in the middle fails its check and is
// ignored. Every hit compares the slot's whole key, as the file holds it,
// with the call's: the in-memory index only says where to look.
//
// The slots are shared fairly among peers (the client's identity, which
// survives its reconnects): a free slot is used first; when there is none, a
// peer that holds its fair share (slots / peers holding slots, counting
// itself) or more reuses its own oldest slot, and any other peer reuses the
// oldest slot of the peer holding the most (base/fair_share.h). So one
// client's flood of CREATEs cannot push out another client's records while
// that client stays within its share; a client alone may use every slot.
//
// Peers choose xids and arguments: the argument digest is SipHash-2-4 under
// a random key kept in the file's header (so that the next process computes
// the same digests for the retransmissions it finds), and the index hashes
// every field of the key under a random per-process key, so that no client
// can aim its calls at another's records or pile them into one hash chain.
//
// One process per file: the state directory's lock (state_dir.h) keeps a
// second tern-nfsd off it. Two processes mapping one file would each
// overwrite slots the other's index points at; the key check turns that
// into misses instead of another client's reply.
//
// Shared by every engine thread (one mutex). A call seen while another
// copy of it is still being served (by another engine: handlers here are
// synchronous) is reported kInProgress and the caller drops it: the client
// sends it again. What is not covered: a server killed after it carried a
// call out but before it recorded the reply; the retransmission then runs
// again (as after a reboot of nfsd).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/fair_share.h"
#include "base/result.h"
#include "base/process_key.h"
#include "base/siphash.h"

namespace tern::nfsd {

struct ReplyKey {
  std::string peer;
  uint32_t xid = 0, prog = 0, vers = 0, proc = 0;
  uint64_t digest = 0;
  bool operator==(const ReplyKey&) const = default;
};

class ReplyCache {
 public:
  // The largest results a slot keeps (NFSv3's non-idempotent replies are
  // under 300 bytes); larger ones are not cached.
  static constexpr uint32_t kMaxResults = 400;
  static constexpr uint32_t kMaxPeer = 64;

  // Opens (or creates) the cache file with `slots` slots. A file made with
  // another geometry, or not a cache at all, is started afresh.
  static Result<std::unique_ptr<ReplyCache>> open(const std::string& path, uint32_t slots);
  ~ReplyCache();
  ReplyCache(const ReplyCache&) = delete;
  ReplyCache& operator=(const ReplyCache&) = delete;

  enum class Found : uint8_t {
    kNew,         // not seen: entered as in progress; call done() or forget()
    kInProgress,  // another copy is being served now: drop this one
    kDone,        // answered before: *results holds the reply's results
  };
  Found begin(const ReplyKey& k, std::vector<uint8_t>* results);
  // Records the reply (in the file) before it is sent.
  void done(const ReplyKey& k, std::span<const uint8_t> results);
  void forget(const ReplyKey& k);

  // A digest of a call's inline arguments: with the xid, what tells a
  // retransmission from another call that reuses an xid. Bulk data in read
  // chunks is left out (as nfsd sums only the first bytes). 64 bits are
  // enough because a hit compares the whole key: the digest only tells
  // apart calls of one peer with one xid and procedure, and a peer without
  // the key cannot choose arguments that collide.
  uint64_t args_digest(std::span<const uint8_t> args) const;

  // Slots held now by one peer, and how many peers hold any.
  size_t peer_slots(std::string_view peer) const;
  size_t peers() const;
  // The index's longest hash chain (walks every bucket: tests, diagnostics).
  size_t longest_chain() const;

  // Counters: replies found (from this process's records or a previous
  // one's), of those found in the file at open, copies dropped because
  // another was in progress, new calls, slots loaded at open.
  uint64_t hits() const;
  uint64_t hits_from_file() const;
  uint64_t in_progress_drops() const;
  uint64_t misses() const;
  uint64_t loaded() const { return loaded_; }

 private:
  struct KeyHash {
    size_t operator()(const ReplyKey& k) const;
  };
  struct Entry {
    int64_t slot = -1;  // -1: in progress (not in the file yet)
    bool from_file = false;
  };
  struct Peer {
    const std::string* id = nullptr;  // its key in peers_
    std::deque<uint32_t> slots;       // the slots it holds, oldest first
    HoldingRank<Peer>::Handle rank;
  };
  ReplyCache() = default;
  void write_slot(uint32_t i, const ReplyKey& k, std::span<const uint8_t> results);
  Peer* peer_for(const std::string& id);
  uint32_t take_slot(const std::string& inserting);
  void release_slot(Peer* p);  // its oldest

  mutable std::mutex mu_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
  uint32_t slots_ = 0;
  uint64_t seq_ = 0;      // the newest slot's sequence number
  SipKey digest_key_;     // from the file's header
  std::unordered_map<ReplyKey, Entry, KeyHash> index_;
  std::vector<ReplyKey> slot_keys_;  // what each slot holds (for eviction)
  std::vector<bool> slot_used_;
  std::vector<uint32_t> free_;       // unused slots, the lowest last
  std::unordered_map<std::string, Peer, KeyedStringHash, StringViewEq> peers_;  // peers holding slots
  HoldingRank<Peer> rank_;
  uint64_t hits_ = 0, file_hits_ = 0, in_progress_ = 0, misses_ = 0, loaded_ = 0;
};

}  // namespace tern::nfsd
