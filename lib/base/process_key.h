// A random key made once per process, for keyed hashing (siphash.h) of what
// peers choose: the duplicate request caches' argument digests and hash
// tables. Nothing outside the process ever sees it, so a peer can neither
// predict a digest nor aim its entries at one hash chain; and a new process
// has a new key, so what a peer learned from one (by timing, say) is worth
// nothing against the next.
#pragma once

#include <cstddef>
#include <string_view>

#include "base/siphash.h"

namespace tern {

// The key, made on first use from getrandom() (the kernel's pool; waits
// only in early boot, before the pool is seeded). Thread-safe.
const SipKey& process_key();

// A fresh random key (getrandom()), for a keyed structure that wants its own.
SipKey random_sip_key();

// Replaces the process's key. For a deterministic simulation only (pmd/sim's
// World::install_clock): a schedule must replay the same in any process,
// and what the key decides (the first xid of a client's connection, the
// order of keyed hash tables) would otherwise differ from one process to
// the next. Call it before any keyed table exists and from one thread:
// entries hashed under the old key are not found under the new one.
void set_process_key_for_simulation(const SipKey& key);

// Hash and equality for tables keyed by a peer's identity string, under
// process_key(); transparent, so a lookup by string_view makes no string.
struct KeyedStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return static_cast<size_t>(siphash24(process_key(), {reinterpret_cast<const uint8_t*>(s.data()), s.size()}));
  }
};
struct StringViewEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

}  // namespace tern
