// RFC 8797 RDMA-CM private data as a peer sends it with its connect request or
// accept, and the inline thresholds and remote-invalidation use the engine
// derives from it (wire::negotiate). The first input byte picks this end's
// offer; the rest is the peer's private data.
//
// What must hold whatever the peer says (RFC 8797 §4.2, RFC 8166 §3.3.3):
// - no limit is below 1024 bytes (every end takes that much) or above what
//   this end offered (as the one-byte encoding rounds it);
// - without recognisable private data: 1024 each way, no remote invalidation;
// - both ends reach mirrored numbers: the peer, negotiating with our private
//   data, may send exactly what we may receive and the other way round.
#include <algorithm>
#include <cstdint>
#include <span>

#include "engine/wire.h"
#include "fuzz_check.h"
#include "rpcrdma/cm_private.h"

namespace {

namespace rr = tern::rpcrdma;
namespace wire = tern::rpc::wire;

// Offers this end might make: the engine's defaults and the edges of the
// encoding (sizes that are not whole KiB are rounded down when advertised).
constexpr uint32_t kOffers[] = {1024, 1025, 4096, 4097, 8192, 65536, 262144, 262145, 1u << 20, 0xffffffffu};

void decode_only(std::span<const uint8_t> peer) {
  rr::CmPrivateData d;
  rr::CmPrivateStatus st = rr::decode_cm_private(peer, &d);
  FUZZ_CHECK(st != rr::CmPrivateStatus::kOk || peer.size() >= rr::kCmPrivateSize, "kOk from %zu bytes",
             peer.size());
  if (st != rr::CmPrivateStatus::kOk) return;
  FUZZ_CHECK(d.inline_send_size >= rr::kCmMinInlineSize && d.inline_send_size <= rr::kCmMaxInlineSize &&
                 d.inline_recv_size >= rr::kCmMinInlineSize && d.inline_recv_size <= rr::kCmMaxInlineSize,
             "decoded sizes %u/%u", d.inline_send_size, d.inline_recv_size);
  // Re-encoding gives back the first 8 bytes, less the reserved flag bits
  // (ignored on receipt, sent as zero).
  uint8_t b[rr::kCmPrivateSize];
  FUZZ_CHECK(rr::encode_cm_private(d, b) == rr::kCmPrivateSize, "re-encoding failed");
  for (size_t i = 0; i < rr::kCmPrivateSize; ++i) {
    uint8_t want = i == 5 ? (peer[i] & rr::kCmFlagRemoteInvalidation) : peer[i];
    FUZZ_CHECK(b[i] == want, "byte %zu re-encoded as %#x, received %#x", i, b[i], peer[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  uint8_t sel = data[0];
  std::span<const uint8_t> peer(data + 1, size - 1);
  decode_only(peer);

  constexpr size_t kNumOffers = sizeof kOffers / sizeof kOffers[0];
  uint32_t my_send = kOffers[(sel & 0x7) % kNumOffers];
  uint32_t my_recv = kOffers[((sel >> 3) & 0x7) % kNumOffers];
  bool my_inv = (sel & 0x40) != 0;
  bool server = (sel & 0x80) != 0;

  uint32_t send = 0, recv = 0;
  bool inv = false;
  wire::negotiate(peer, my_send, my_recv, my_inv, server, &send, &recv, &inv);

  rr::CmPrivateData pd;
  bool peer_ok = rr::decode_cm_private(peer, &pd) == rr::CmPrivateStatus::kOk;
  FUZZ_CHECK(send >= rr::kCmMinInlineSize && recv >= rr::kCmMinInlineSize, "limits %u/%u below 1024", send, recv);
  FUZZ_CHECK(send <= rr::advertised_inline_size(my_send), "may send %u, offered %u", send, my_send);
  FUZZ_CHECK(recv <= rr::advertised_inline_size(my_recv), "may receive %u, offered %u", recv, my_recv);
  if (!peer_ok) {
    FUZZ_CHECK(send == rr::kDefaultInlineThreshold && recv == rr::kDefaultInlineThreshold && !inv,
               "no usable private data, yet %u/%u inv=%d", send, recv, inv);
    return 0;
  }
  FUZZ_CHECK(send <= pd.inline_recv_size, "may send %u, the peer receives %u", send, pd.inline_recv_size);
  FUZZ_CHECK(recv <= pd.inline_send_size, "may receive %u, the peer sends up to %u", recv, pd.inline_send_size);
  FUZZ_CHECK(send == std::min(rr::advertised_inline_size(my_send), pd.inline_recv_size) &&
                 recv == std::min(rr::advertised_inline_size(my_recv), pd.inline_send_size),
             "limits %u/%u are not the smaller of the two offers", send, recv);
  // The I flag says what its sender can receive: a server may use Send With
  // Invalidate only when the client set it; a client expects it only when it
  // set it itself.
  FUZZ_CHECK(inv == (server ? pd.remote_invalidation : my_inv), "inv=%d server=%d", inv, server);

  // The peer's view, from our private data: mirrored.
  uint8_t mine[rr::kCmPrivateSize];
  FUZZ_CHECK(wire::encode_pdata(mine, sizeof mine, my_send, my_recv, my_inv) == rr::kCmPrivateSize,
             "encode_pdata failed");
  rr::InlineLimits theirs = rr::negotiate_inline(pd, mine);
  FUZZ_CHECK(theirs.peer_status == rr::CmPrivateStatus::kOk, "our own private data does not decode");
  FUZZ_CHECK(theirs.max_send == recv && theirs.max_recv == send, "we %u/%u, the peer %u/%u", send, recv,
             theirs.max_send, theirs.max_recv);
  return 0;
}
