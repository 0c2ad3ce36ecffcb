// A random key made once per process, for keyed hashing (siphash.h) of what
// peers choose: the duplicate request caches' argument digests and hash
// tables. Nothing outside the process ever sees it, so a peer can neither
// predict a digest nor aim its entries at one hash chain; and a new process
// has a new key, so what a peer learned from one (by timing, say) is worth
// nothing against the next.
#pragma once

#include "base/siphash.h"

namespace tern {

// The key, made on first use from getrandom() (the kernel's pool; waits
// only in early boot, before the pool is seeded). Thread-safe.
const SipKey& process_key();

// A fresh random key (getrandom()), for a keyed structure that wants its own.
SipKey random_sip_key();

}  // namespace tern
