// Test helper for decoders: a heap buffer of exactly n bytes, so that ASan
// flags any read past its end (a std::vector may have spare capacity behind
// its size, which would hide an overread).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace tern::testing {

class ExactBuf {
 public:
  explicit ExactBuf(std::span<const uint8_t> src) : n_(src.size()), p_(new uint8_t[src.size()]) {
    if (n_ != 0) std::memcpy(p_.get(), src.data(), n_);
  }
  std::span<const uint8_t> span() const { return {p_.get(), n_}; }

 private:
  size_t n_;
  std::unique_ptr<uint8_t[]> p_;
};

}  // namespace tern::testing
