// HandlerTable: the server's handlers by (program, version, procedure),
// found in O(1) per call, and what to answer when none serves a call
// (RFC 5531: PROG_UNAVAIL, PROG_MISMATCH with the versions served, or
// PROC_UNAVAIL).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/conn_stats.h"
#include "engine/engine.h"

namespace tern::rpc {

struct HandlerEntry {
  uint32_t prog, vers, proc;
  Handler h;
  void* ctx;
  Placer place;      // null: the engine places read chunks (its bulk pool)
  ProcCounters* proc_counters;  // this procedure's server-side counters
};

class HandlerTable {
 public:
  // Adds or replaces the handler of (prog, vers, proc).
  void set(const HandlerEntry& e);
  // The handler, or nullptr with *stat saying what to answer and, for
  // PROG_MISMATCH, the versions served in [*low, *high].
  const HandlerEntry* find(uint32_t prog, uint32_t vers, uint32_t proc, AcceptStat* stat, uint32_t* low,
                           uint32_t* high) const {
    // The entry found last, inline: a server mostly sees runs of one procedure.
    if (const HandlerEntry* l = last_; l != nullptr && l->proc == proc && l->prog == prog && l->vers == vers) return l;
    return find_slow(prog, vers, proc, stat, low, high);
  }
  bool empty() const { return by_key_.empty(); }

 private:
  struct Key {
    uint32_t prog, vers, proc;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = (uint64_t{k.prog} * 0x9E3779B97F4A7C15ull) ^ (uint64_t{k.vers} << 32 | k.proc);
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  struct Versions {
    uint32_t low, high;
  };
  const HandlerEntry* find_slow(uint32_t prog, uint32_t vers, uint32_t proc, AcceptStat* stat, uint32_t* low,
                                uint32_t* high) const;
  std::unordered_map<Key, std::unique_ptr<HandlerEntry>, KeyHash> by_key_;
  // The entry found last: a server mostly sees runs of one procedure.
  // Entries are never removed and keep their address, so it stays valid.
  mutable const HandlerEntry* last_ = nullptr;
  std::unordered_map<uint64_t, bool> prog_vers_;      // (prog << 32 | vers) served
  std::unordered_map<uint32_t, Versions> versions_;  // per program
};

}  // namespace tern::rpc
