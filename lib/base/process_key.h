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
