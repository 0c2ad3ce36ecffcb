// One requester connection of rpcrdma-torture: the RPC-over-RDMA Version 1
// client side done by hand (lib/rawpeer's RawPeer: a QP driven through the
// driver interface), so that a case can put any bytes on the wire --
// including headers no real client would send -- and see exactly what the
// responder does with them: a message, a disconnect, or nothing within a
// deadline.
//
// Nothing here waits without a deadline: a responder that never answers
// costs a case its deadline, never the tool its progress.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "rawpeer/raw_peer.h"
#include "rdmadev/rdmadev.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace tern::torture {

// What one wait for the responder ended with.
struct Seen {
  enum class Kind : uint8_t {
    kMessage,       // a message arrived (decoded below)
    kSilence,       // nothing within the wait
    kDisconnected,  // the connection ended (the responder closed it, or its QP failed)
    kSendFailed,    // our own SEND did not complete successfully (the responder's QP is gone)
  };
  Kind kind = Kind::kSilence;
  std::vector<uint8_t> bytes;
  bool with_inv = false;  // arrived by Send With Invalidate
  uint32_t inv_rkey = 0;
  rpcrdma::DecodeStatus status = rpcrdma::DecodeStatus::kTooShort;
  rpcrdma::Header hdr;
  size_t header_len = 0;
  // The write list was longer than rpcrdma::Header holds: hdr keeps the
  // first chunks and segments (decode_long_lists).
  bool long_lists = false;

  bool message() const { return kind == Kind::kMessage; }
  bool gone() const { return kind == Kind::kDisconnected || kind == Kind::kSendFailed; }
  // RDMA_ERROR with this code and xid.
  bool error(rpcrdma::ErrCode code, uint32_t xid) const;
  // One line for reports: "RDMA_ERROR ERR_CHUNK xid 0x10 credit 32", "disconnect", ...
  std::string describe() const;
};

// A version-1 RDMA_MSG/RDMA_NOMSG whose lists exceed rpcrdma::Header's
// capacities (a responder may return any write list the call offered):
// decodes it without limits into m (status kOk) when it parses.
void decode_long_lists(Seen* m);

// What every connection of a run shares: the device (its CM events), one
// protection domain and one registered arena, from which each connection
// takes its receive and send buffers and the chunk memory its cases offer
// (given back for the next connection when it ends).
class Session {
 public:
  // idle_us > 0: every wait sleeps that long between polls that found
  // nothing, instead of spinning (Config::idle_us).
  static Result<std::unique_ptr<Session>> open(const std::string& spec, int idle_us = 0);
  rdma::Device* device() { return home_->device(); }
  rdma::Pd* pd() { return home_->pd(); }
  // A new QP on the session's device (rawpeer::RawPeer::sibling).
  Result<std::unique_ptr<rawpeer::RawPeer>> new_peer();
  // Chunk memory for one connection (Requester::kChunkBytes), and back.
  uint8_t* take_chunks();
  void give_chunks(uint8_t* p) { spare_chunks_.push_back(p); }

 private:
  // The device's first QP, never connected: it holds the device, PD and
  // arena that the requesters' QPs (its siblings) share.
  std::unique_ptr<rawpeer::RawPeer> home_;
  std::vector<uint8_t*> spare_chunks_;
};

class Requester {
 public:
  // Receive buffers far larger than any inline threshold: a responder that
  // sends more than the threshold it agreed to is seen (and judged), not
  // just lost to a receive error.
  static constexpr uint32_t kRecvBuf = 64 * 1024;
  static constexpr uint32_t kRecvs = 32;
  static constexpr uint32_t kSendSlot = 64 * 1024;
  static constexpr uint32_t kSendSlots = 64;
  // Memory a case may offer as chunks (bump-allocated, per connection).
  static constexpr size_t kChunkBytes = 8u << 20;

  explicit Requester(Session* s) : s_(s) {}
  ~Requester();
  Requester(const Requester&) = delete;
  Requester& operator=(const Requester&) = delete;

  // Creates the QP and connects with `pdata` as connection private data
  // (empty: none), waiting up to ms for the responder's answer.
  Status connect(std::span<const uint8_t> pdata, int ms);
  // The private data the responder accepted with.
  const std::vector<uint8_t>& accept_private() const;
  bool connected() const { return peer_ && peer_->established() && !peer_->lost(); }

  // Posts one SEND (SEND_WITH_INV of inv_rkey when non-zero); false when
  // the QP refused it (the connection is gone) or it is over kSendSlot.
  bool post(std::span<const uint8_t> bytes, uint32_t inv_rkey = 0);
  // The next message, the end of the connection, or silence after ms.
  Seen next(int ms);
  // Waits ms for anything; true if the connection ended in that time.
  bool wait_disconnect(int ms);
  // Ends the connection from our side (a goodbye the responder sees).
  void disconnect();
  // Goes away without a goodbye: the QP is destroyed as a crashed host's
  // would be, and the responder learns of it only from its own operations.
  void vanish();

  // Chunk memory of this connection (zeroed), and registrations of it for
  // the responder to reach (REG_MR on our QP, like a real requester's
  // per-call registration): the rkey, 0 if the device refused.
  uint8_t* chunk_mem(size_t len, size_t align = 64);
  uint32_t offer(uint8_t* p, uint32_t len, uint32_t access);
  // Invalidates an offered rkey ourselves (LOCAL_INV): the responder's
  // later access to it fails.
  bool revoke(uint32_t rkey, int ms);
  // Whether a registration was invalidated by the responder's Send With
  // Invalidate (a receive carried it).
  const std::vector<uint32_t>& invalidated() const { return invalidated_; }

  const rdma::DeviceCaps& caps() { return s_->device()->caps(); }

 private:
  // Moves what the peer received into inbox_, decoded.
  void take_received();

  Session* s_;
  std::unique_ptr<rawpeer::RawPeer> peer_;
  uint8_t* chunks_ = nullptr;
  size_t chunk_used_ = 0;
  std::vector<Seen> inbox_;
  std::vector<uint32_t> invalidated_;
};

}  // namespace tern::torture
