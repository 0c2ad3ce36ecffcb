// RDMA-CM private data for RPC-over-RDMA Version 1 (RFC 8797), and the inline
// thresholds and remote-invalidation use both ends derive from it.
//
// Each end puts 8 bytes in its connect request or accept:
//   byte 0..3  format identifier 0xf6ab0e18 (big-endian)
//   byte 4     version (1)
//   byte 5     flags: bit 0 "I" = this end can receive Send With Invalidate;
//              the other seven bits are reserved (sent as zero, ignored)
//   byte 6     send size:    largest message this end will send,
//   byte 7     receive size: size of this end's receive buffers,
//              both in units of 1024 bytes, minus one (0 = 1 KiB,
//              255 = 256 KiB)
// A peer that sends none, or sends something this decoder does not recognise,
// gets RFC 8166's default inline threshold of 1024 bytes in both directions
// (RFC 8166 §3.3.3) and no remote invalidation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "rpcrdma_wire.h"

namespace tern::rpcrdma {

inline constexpr uint32_t kCmPrivateFormatId = 0xf6ab0e18;
inline constexpr uint8_t kCmPrivateVersion = 1;
inline constexpr uint8_t kCmFlagRemoteInvalidation = 0x01;
inline constexpr size_t kCmPrivateSize = 8;
// The sizes the one-byte encoding can express.
inline constexpr uint32_t kCmInlineUnit = 1024;
inline constexpr uint32_t kCmMinInlineSize = kCmInlineUnit;
inline constexpr uint32_t kCmMaxInlineSize = 256 * kCmInlineUnit;
static_assert(kCmMinInlineSize == kDefaultInlineThreshold,
              "RFC 8166 requires every receiver to take 1024-byte messages: the smallest size to offer");

// What one end says about itself.
struct CmPrivateData {
  bool remote_invalidation = false;                    // can receive Send With Invalidate
  uint32_t inline_send_size = kDefaultInlineThreshold;  // bytes: largest message it will send
  uint32_t inline_recv_size = kDefaultInlineThreshold;  // bytes: its receive buffer size
};

// The byte a size goes out as, and what a received byte means. Sizes are
// rounded down to whole KiB and clamped to 1..256 KiB (the encoding cannot say
// more); sizes below 1 KiB are the caller's mistake (RFC 8166 §3.3.3).
uint8_t encode_inline_size(uint32_t bytes);
constexpr uint32_t decode_inline_size(uint8_t v) { return (uint32_t{v} + 1) * kCmInlineUnit; }
// A size as the peer will understand it after encoding and decoding.
inline uint32_t advertised_inline_size(uint32_t bytes) { return decode_inline_size(encode_inline_size(bytes)); }

// Writes the 8 bytes at the start of out. Returns kCmPrivateSize, or 0 when out
// is too small. Requires sizes of at least kCmMinInlineSize.
size_t encode_cm_private(const CmPrivateData& d, std::span<uint8_t> out);

enum class CmPrivateStatus : uint8_t {
  kOk,
  kAbsent,              // fewer than 8 bytes: the peer sent none (or not ours)
  kUnrecognized,        // another format identifier: someone else's private data
  kUnsupportedVersion,  // our format, a version this decoder does not know
};
const char* cm_private_status_name(CmPrivateStatus s);

// Reads private data received with a connect request or accept. The transport
// may pad private data with zeros (over InfiniBand the CM delivers its whole
// fixed-size private data field), so bytes past the first 8 are ignored. *out is written only for kOk.
CmPrivateStatus decode_cm_private(std::span<const uint8_t> data, CmPrivateData* out);

// What a connection may use, both ends' words taken together.
struct InlineLimits {
  uint32_t max_send = kDefaultInlineThreshold;  // largest message this end may Send
  uint32_t max_recv = kDefaultInlineThreshold;  // largest message the peer will Send
  // The I flag says what its sender can *receive* (RFC 8797), so each
  // direction has its own answer; the other end's flag says nothing about
  // what it sends. (The Linux server advertises I = 0 — it never receives
  // Send With Invalidate — and still sends it to every client that set I.)
  //
  // The peer set I: as Responder this end may invalidate the peer's rkeys
  // with Send With Invalidate.
  bool send_with_invalidate = false;
  // This end set I and the peer speaks RFC 8797: as Requester this end may
  // find its rkeys invalidated by the peer's Send With Invalidate.
  bool receive_invalidate = false;
  CmPrivateStatus peer_status = CmPrivateStatus::kAbsent;
};

// Given what this end advertised (local, as sent with encode_cm_private) and
// the private data the peer sent (empty when none): each direction's limit is
// the smaller of the sender's send size and the receiver's receive size, using
// the sizes as advertised (rounded to KiB), so that both ends compute the same
// numbers. Without usable peer data: 1024 bytes each way, no remote
// invalidation.
InlineLimits negotiate_inline(const CmPrivateData& local, std::span<const uint8_t> peer_private_data);

}  // namespace tern::rpcrdma
