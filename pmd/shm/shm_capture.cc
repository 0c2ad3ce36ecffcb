// pmd/shm packet capture (pcap=, rdmadev/roce_pcap.h): what a QP publishes
// and what it executes for its peer, written as the RoCEv2 frames an RC
// connection would have carried, so that Wireshark can show an shm
// connection as it would a NIC's. Nothing here runs unless the device was
// opened with pcap=; the datapath (shm_requester.cc, shm_responder.cc,
// shm_completer.cc) calls in behind one unlikely branch each.
#include <span>

#include "shm/shm_internal.h"

namespace tern::shm {

namespace {

constexpr uint32_t kCaptureQpnBase = 0x100;

}  // namespace

RocePcap::Flow& ShmQp::cap_flow() {
  // The peer's QP number arrives with the handshake, after the QP exists.
  // shm numbers QPs from 1, and QPs 0 and 1 are InfiniBand's management QPs
  // (Wireshark decodes their payload as MADs): the capture shows 0x100 + n.
  cap_.local_qpn = kCaptureQpnBase + qpn_;
  cap_.remote_qpn = kCaptureQpnBase + peer_qpn_;
  cap_.local_is_client = is_client_;
  return cap_;
}

void ShmQp::capture_issued(SqEntry& e) {
  const ShmDesc& d = e.desc;
  RocePcap::Piece pieces[kMaxSge];
  uint32_t n = d.num_sge;
  if (e.inline_msg) {
    n = e.num_local;
    for (uint32_t k = 0; k < n; ++k) pieces[k] = {local_sge(e, k).p, local_sge(e, k).len};
  } else {
    for (uint32_t k = 0; k < n; ++k) {
      const mem::Segment& seg = pd_->segment(d.sge[k].seg);
      pieces[k] = {static_cast<const uint8_t*>(seg.base) + d.sge[k].offset, d.sge[k].length};
    }
  }
  std::span<const RocePcap::Piece> payload(pieces, n);
  switch (d.op) {
    case kOpSend: pcap_->send(cap_flow(), RocePcap::Dir::kOut, payload); break;
    case kOpSendInv: pcap_->send(cap_flow(), RocePcap::Dir::kOut, payload, &d.key); break;
    case kOpWrite: pcap_->write(cap_flow(), RocePcap::Dir::kOut, d.raddr, d.key, payload); break;
    case kOpRead: e.cap_psn = pcap_->read_request(cap_flow(), RocePcap::Dir::kOut, d.raddr, d.key, d.length); break;
  }
}

void ShmQp::capture_executed(const ShmDesc& d, const uint8_t* const* src, const uint32_t* len, uint32_t n,
                             const MrEntry* read_mr) {
  RocePcap::Piece pieces[kMaxSge];
  for (uint32_t k = 0; k < n; ++k) pieces[k] = {src[k], len[k]};
  std::span<const RocePcap::Piece> payload(pieces, n);
  switch (d.op) {
    case kOpSend: pcap_->send(cap_flow(), RocePcap::Dir::kIn, payload); break;
    case kOpSendInv: pcap_->send(cap_flow(), RocePcap::Dir::kIn, payload, &d.key); break;
    case kOpWrite: pcap_->write(cap_flow(), RocePcap::Dir::kIn, d.raddr, d.key, payload); break;
    case kOpRead: {
      uint32_t psn = pcap_->read_request(cap_flow(), RocePcap::Dir::kIn, d.raddr, d.key, d.length);
      RocePcap::Piece data{read_mr->host + (d.raddr - read_mr->iova), d.length};
      pcap_->read_response(cap_flow(), RocePcap::Dir::kIn, psn, {&data, 1});
      break;
    }
  }
}

void ShmQp::capture_read_response(const SqEntry& e) {
  RocePcap::Piece pieces[kMaxSge];
  for (uint32_t k = 0; k < e.num_local; ++k) pieces[k] = {local_sge(e, k).p, local_sge(e, k).len};
  pcap_->read_response(cap_flow(), RocePcap::Dir::kOut, e.cap_psn, {pieces, e.num_local});
}

}  // namespace tern::shm
