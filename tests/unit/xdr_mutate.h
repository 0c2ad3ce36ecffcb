// Test helper for the codecs' randomized tests: turns a valid encoding into a
// hostile one — random bytes, XDR words set to values that hurt the decoder
// at hand (`nasty`: zero, its capacities and limits, all ones), truncation,
// trailing junk.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "xdr/xdr.h"

namespace tern::testing {

inline std::vector<uint8_t> mutate_xdr(std::vector<uint8_t> b, std::mt19937_64& rng,
                                       std::span<const uint32_t> nasty) {
  int n = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < n; ++i) {
    switch (rng() % 4) {
      case 0:
        if (!b.empty()) b[rng() % b.size()] = static_cast<uint8_t>(rng());
        break;
      case 1:
        if (b.size() >= 4) {
          size_t word = (rng() % (b.size() / 4)) * 4;
          xdr::detail::store_be32(b.data() + word, nasty[rng() % nasty.size()]);
        }
        break;
      case 2: b.resize(rng() % (b.size() + 1)); break;
      case 3:
        for (size_t k = rng() % 16; k > 0; --k) b.push_back(static_cast<uint8_t>(rng()));
        break;
    }
  }
  return b;
}

}  // namespace tern::testing
