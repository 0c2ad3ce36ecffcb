// Packet capture for drivers: RDMA operations written to a pcap file as the
// RoCEv2 frames a NIC would have sent (Ethernet / IPv4 / UDP 4791 / BTH
// [+RETH, +AETH, +IETH] / payload / ICRC), so that Wireshark's InfiniBand and
// RPC-over-RDMA dissectors decode a capture taken where no wire exists
// (pmd/shm) or where the kernel hides it (pmd/verbs). Devices take it as the
// device argument `pcap=FILE` (docs/observability.md).
//
// What the frames hold is made up where no wire exists, but consistent: the
// connecting side is 10.1.x.y and the accepting side 10.2.x.y, x.y the other
// end's QP number (MACs 02:00 + the address), so that captures taken at both
// ends agree and every connection's ends are distinct (roce_pcap.cc), the
// QP numbers are the driver's, PSNs run per direction from 0 as on a real
// RC connection (an RDMA READ request takes one PSN per response packet),
// and messages are cut into FIRST/MIDDLE/LAST packets at a 4096-byte MTU.
// Each connection's first frame is preceded by the CM REQ / REP / RTU MADs
// (UD SENDs between QP 1s) that would have set it up: they tell Wireshark
// which QP talks to which, so that it can tie replies to calls and chunks
// to their RDMA READs and WRITEs (roce_pcap.cc, connect()).
// The ICRC is computed (RoCEv2 masked CRC-32), the UDP checksum is 0 as
// RoCEv2 senders leave it, and no ACKs are written.
//
// One writer per file, on the thread that owns the device (not thread-safe).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

#include "../base/result.h"

namespace tern::rdma {

class RocePcap {
 public:
  static constexpr uint32_t kMtu = 4096;
  static constexpr uint16_t kRoceV2Port = 4791;

  // A piece of a message's payload (a gather list is several).
  struct Piece {
    const void* data;
    size_t len;
  };
  // One RC connection as the capture shows it. Owned by the driver's QP.
  struct Flow {
    uint32_t local_qpn = 0, remote_qpn = 0;
    bool local_is_client = true;  // which made-up address is ours
    bool cm_written = false;      // the connection's CM exchange is in the file
    uint32_t local_psn = 0;       // next PSN of our requests
    uint32_t remote_psn = 0;      // next PSN of the peer's requests
    uint32_t local_msn = 0, remote_msn = 0;  // message sequence numbers in AETHs
  };
  enum class Dir : uint8_t { kOut, kIn };  // kOut: we sent it (we are the requester)

  // Creates (truncates) `path` and writes the pcap header.
  static Result<std::unique_ptr<RocePcap>> open(const std::string& path);
  ~RocePcap();  // flushes and closes
  RocePcap(const RocePcap&) = delete;
  RocePcap& operator=(const RocePcap&) = delete;

  // A SEND (SEND_WITH_INV when inv_rkey is set: IETH) from the requester.
  void send(Flow& f, Dir d, std::span<const Piece> payload, const uint32_t* inv_rkey = nullptr);
  // An RDMA WRITE into [va, va+len) of rkey.
  void write(Flow& f, Dir d, uint64_t va, uint32_t rkey, std::span<const Piece> payload);
  // An RDMA READ request for len bytes at va of rkey. Returns its first PSN,
  // which read_response() needs.
  uint32_t read_request(Flow& f, Dir d, uint64_t va, uint32_t rkey, uint32_t len);
  // The READ's response, travelling from the responder back to the requester
  // `d` names (the same Dir as its request).
  void read_response(Flow& f, Dir d, uint32_t first_psn, std::span<const Piece> payload);

  uint64_t frames() const { return frames_; }
  uint64_t write_errors() const { return write_errors_; }

 private:
  explicit RocePcap(FILE* f) : f_(f) {}
  // One frame: headers (BTH onwards) then payload bytes [off, off+len) of the pieces.
  void frame(const Flow& f, bool from_local, const uint8_t* ib_hdr, size_t ib_len, std::span<const Piece> payload,
             size_t off, size_t len);
  // Before a flow's first frame: the CM REQ / REP / RTU exchange that would
  // have set the connection up (see roce_pcap.cc for why Wireshark needs it).
  void connect(Flow& f);
  // One CM MAD (to and from QP 1) from the connecting side or to it.
  void cm_mad(const Flow& f, bool from_client, uint16_t attr, const uint8_t* data);
  // Splits a message into packets with the opcodes given (first, middle,
  // last, only); RETH (16 bytes) goes on the first or only packet.
  void message(Flow& f, bool from_local, uint32_t* psn, uint8_t op_first, uint8_t op_middle, uint8_t op_last,
               uint8_t op_only, const uint8_t* reth, const uint32_t* ieth, std::span<const Piece> payload);

  FILE* f_;
  uint64_t frames_ = 0;
  uint64_t write_errors_ = 0;
  uint16_t ip_id_ = 0;
  uint32_t cm_psn_ = 0;  // PSNs of the CM MADs (QP 1 is shared by all flows)
};

}  // namespace tern::rdma
