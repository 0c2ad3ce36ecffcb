// XDR (RFC 4506) encoding and decoding over caller-provided byte spans.
//
// Every item is a multiple of four bytes, big-endian (RFC 4506 §3). The writer
// and reader never allocate and never touch a byte outside their span: each
// put/get checks the remaining space first. A failed put or get sets a sticky
// flag and turns every later call into a no-op (gets return zero or an empty
// view), so a codec can run a straight line of calls and check ok() once, and a
// count read from a failed stream is zero, which ends any loop it drives.
//
// Everything is inline: the wire codecs call these per field on the hot path.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace tern::xdr {

// RFC 4506 §3: the basic block size.
inline constexpr size_t kUnit = 4;

// Bytes an opaque or string of n bytes takes on the wire, pad included.
constexpr size_t padded_size(size_t n) { return (n + (kUnit - 1)) & ~(kUnit - 1); }
// Bytes a variable-length opaque or string of n bytes takes: length word + data + pad.
constexpr size_t opaque_var_size(size_t n) { return kUnit + padded_size(n); }

namespace detail {
inline uint32_t load_be32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  return v;
}
inline void store_be32(uint8_t* p, uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, sizeof v);
}
}  // namespace detail

class XdrWriter {
 public:
  explicit XdrWriter(std::span<uint8_t> buf) : begin_(buf.data()), pos_(buf.data()), end_(buf.data() + buf.size()) {}

  // unsigned int (§4.2), int (§4.1) and enum (§4.3) are all one word.
  void put_u32(uint32_t v) {
    if (!reserve(kUnit)) return;
    detail::store_be32(pos_, v);
    pos_ += kUnit;
  }
  void put_i32(int32_t v) { put_u32(static_cast<uint32_t>(v)); }
  // unsigned hyper (§4.5): most significant word first.
  void put_u64(uint64_t v) {
    if (!reserve(2 * kUnit)) return;
    detail::store_be32(pos_, static_cast<uint32_t>(v >> 32));
    detail::store_be32(pos_ + kUnit, static_cast<uint32_t>(v));
    pos_ += 2 * kUnit;
  }
  // bool (§4.4) is the enum { FALSE = 0, TRUE = 1 }.
  void put_bool(bool v) { put_u32(v ? 1u : 0u); }
  // Fixed-length opaque (§4.9): the bytes, then zero bytes up to a multiple of four.
  void put_opaque_fixed(std::span<const uint8_t> data) { put_bytes_padded(data.data(), data.size()); }
  // Variable-length opaque (§4.10): the length word, then as fixed opaque.
  void put_opaque_var(std::span<const uint8_t> data) {
    if (data.size() > UINT32_MAX) {
      overflow_ = true;
      return;
    }
    if (!reserve(opaque_var_size(data.size()))) return;
    put_u32(static_cast<uint32_t>(data.size()));
    put_bytes_padded(data.data(), data.size());
  }
  // string (§4.11): encoded exactly like a variable-length opaque.
  void put_string(std::string_view s) {
    put_opaque_var(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }

  // False once any put did not fit; nothing past the end was written.
  bool ok() const { return !overflow_; }
  size_t bytes_written() const { return static_cast<size_t>(pos_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - pos_); }
  std::span<const uint8_t> written() const { return {begin_, bytes_written()}; }

 private:
  // Whether n more bytes fit; sets the sticky flag when they do not.
  bool reserve(size_t n) {
    if (overflow_ || n > remaining()) {
      overflow_ = true;
      return false;
    }
    return true;
  }
  void put_bytes_padded(const uint8_t* data, size_t n) {
    // n is checked alone first so that padded_size(n) cannot wrap.
    if (!reserve(n)) return;
    size_t total = padded_size(n);
    // Nothing to write; also keeps a null data or buffer away from memcpy.
    if (total == 0 || !reserve(total)) return;
    std::memcpy(pos_, data, n);
    std::memset(pos_ + n, 0, total - n);
    pos_ += total;
  }

  uint8_t* begin_;
  uint8_t* pos_;
  uint8_t* end_;
  bool overflow_ = false;
};

class XdrReader {
 public:
  explicit XdrReader(std::span<const uint8_t> buf)
      : begin_(buf.data()), pos_(buf.data()), end_(buf.data() + buf.size()) {}

  uint32_t get_u32() {
    if (!take(kUnit)) return 0;
    uint32_t v = detail::load_be32(pos_);
    pos_ += kUnit;
    return v;
  }
  int32_t get_i32() { return static_cast<int32_t>(get_u32()); }
  uint64_t get_u64() {
    if (!take(2 * kUnit)) return 0;
    uint64_t hi = detail::load_be32(pos_);
    uint64_t lo = detail::load_be32(pos_ + kUnit);
    pos_ += 2 * kUnit;
    return (hi << 32) | lo;
  }
  // A word other than 0 or 1 is not a bool (§4.4): it fails the stream.
  bool get_bool() {
    uint32_t v = get_u32();
    if (v > 1) fail();
    return v == 1;
  }
  // n bytes and their pad, as a view into the buffer.
  std::span<const uint8_t> get_opaque_fixed(size_t n) {
    // n is checked alone first so that padded_size(n) cannot wrap.
    if (n > remaining()) fail();
    if (!take(padded_size(n))) return {};
    std::span<const uint8_t> v(pos_, n);
    pos_ += padded_size(n);
    return v;
  }
  // A length word, then that many bytes and their pad, as a view into the
  // buffer. A length over max_len (the XDR type's bound) fails the stream.
  //
  // Pad bytes are not checked for zero: RFC 4506 says what a sender writes,
  // and common implementations accept any pad, so rejecting here would only
  // break interoperability.
  std::span<const uint8_t> get_opaque_var(size_t max_len) {
    uint32_t n = get_u32();
    if (!ok()) return {};
    if (n > max_len) {
      fail();
      return {};
    }
    return get_opaque_fixed(n);
  }
  // A string of at most max_len bytes, as a view into the buffer. XDR strings
  // are byte sequences (§4.11); no character set is checked.
  std::string_view get_string(size_t max_len) {
    std::span<const uint8_t> v = get_opaque_var(max_len);
    return {reinterpret_cast<const char*>(v.data()), v.size()};
  }
  // Skips n bytes (already a multiple of four when the caller means XDR items).
  void skip(size_t n) {
    if (take(n)) pos_ += n;
  }

  // Marks the stream bad; for callers that find a value they cannot accept.
  void fail() { error_ = true; }
  // False once any get ran past the end or found an invalid value.
  bool ok() const { return !error_; }
  size_t position() const { return static_cast<size_t>(pos_ - begin_); }
  size_t remaining() const { return static_cast<size_t>(end_ - pos_); }
  // The bytes not read yet (empty once the stream failed).
  std::span<const uint8_t> rest() const { return error_ ? std::span<const uint8_t>() : std::span(pos_, remaining()); }

 private:
  // Whether n more bytes can be read; sets the sticky flag when they cannot.
  bool take(size_t n) {
    if (error_ || n > remaining()) {
      error_ = true;
      return false;
    }
    return true;
  }

  const uint8_t* begin_;
  const uint8_t* pos_;
  const uint8_t* end_;
  bool error_ = false;
};

}  // namespace tern::xdr
