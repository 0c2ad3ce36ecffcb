#include "rpcrdma/cm_private.h"

#include <algorithm>

#include "base/check.h"
#include "xdr/xdr.h"

namespace tern::rpcrdma {

uint8_t encode_inline_size(uint32_t bytes) {
  TERN_REQUIRE(bytes >= kCmMinInlineSize, "inline size %u below the 1024 bytes every peer must take", bytes);
  uint32_t units = std::min(bytes, kCmMaxInlineSize) / kCmInlineUnit;
  return static_cast<uint8_t>(units - 1);
}

size_t encode_cm_private(const CmPrivateData& d, std::span<uint8_t> out) {
  if (out.size() < kCmPrivateSize) return 0;
  // The format identifier is a 32-bit big-endian word; the rest are single
  // bytes, so the XDR writer's word would be the wrong tool for them.
  xdr::detail::store_be32(out.data(), kCmPrivateFormatId);
  out[4] = kCmPrivateVersion;
  out[5] = d.remote_invalidation ? kCmFlagRemoteInvalidation : 0;
  out[6] = encode_inline_size(d.inline_send_size);
  out[7] = encode_inline_size(d.inline_recv_size);
  return kCmPrivateSize;
}

const char* cm_private_status_name(CmPrivateStatus s) {
  switch (s) {
    case CmPrivateStatus::kOk: return "ok";
    case CmPrivateStatus::kAbsent: return "absent";
    case CmPrivateStatus::kUnrecognized: return "unrecognized";
    case CmPrivateStatus::kUnsupportedVersion: return "unsupported-version";
  }
  return "?";
}

CmPrivateStatus decode_cm_private(std::span<const uint8_t> data, CmPrivateData* out) {
  if (data.size() < kCmPrivateSize) return CmPrivateStatus::kAbsent;
  if (xdr::detail::load_be32(data.data()) != kCmPrivateFormatId) return CmPrivateStatus::kUnrecognized;
  if (data[4] != kCmPrivateVersion) return CmPrivateStatus::kUnsupportedVersion;
  // Reserved flag bits are ignored on receipt, so a later revision can use them.
  out->remote_invalidation = (data[5] & kCmFlagRemoteInvalidation) != 0;
  out->inline_send_size = decode_inline_size(data[6]);
  out->inline_recv_size = decode_inline_size(data[7]);
  return CmPrivateStatus::kOk;
}

InlineLimits negotiate_inline(const CmPrivateData& local, std::span<const uint8_t> peer_private_data) {
  TERN_REQUIRE(local.inline_send_size >= kCmMinInlineSize && local.inline_recv_size >= kCmMinInlineSize,
               "inline sizes %u/%u below the 1024 bytes every peer must take", local.inline_send_size,
               local.inline_recv_size);
  InlineLimits lim;
  CmPrivateData peer;
  lim.peer_status = decode_cm_private(peer_private_data, &peer);
  if (lim.peer_status != CmPrivateStatus::kOk) {
    // RFC 8166 §3.3.3: without another way to learn the peer's threshold,
    // senders and receivers assume 1024 bytes. Every end takes that much, so
    // there is nothing of ours to lower it by.
    lim.max_send = kDefaultInlineThreshold;
    lim.max_recv = kDefaultInlineThreshold;
    lim.send_with_invalidate = false;
    lim.receive_invalidate = false;
    return lim;
  }
  lim.max_send = std::min(advertised_inline_size(local.inline_send_size), peer.inline_recv_size);
  lim.max_recv = std::min(advertised_inline_size(local.inline_recv_size), peer.inline_send_size);
  lim.send_with_invalidate = peer.remote_invalidation;
  lim.receive_invalidate = local.remote_invalidation;
  return lim;
}

}  // namespace tern::rpcrdma
