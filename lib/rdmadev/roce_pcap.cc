#include "rdmadev/roce_pcap.h"

#include <time.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace tern::rdma {

namespace {

// RC opcodes (IBA 9.2, table 38) the capture uses.
enum : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendOnly = 0x04,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteOnly = 0x0a,
  kReadRequest = 0x0c,
  kReadRespFirst = 0x0d,
  kReadRespMiddle = 0x0e,
  kReadRespLast = 0x0f,
  kReadRespOnly = 0x10,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
  kUdSendOnly = 0x64,
};

// Communication Management (IBA chapter 12): MADs of class 0x07 between the
// two ends' QP 1, carried as UD SENDs with a DETH.
constexpr uint32_t kGsiQpn = 1;
constexpr uint32_t kGsiQkey = 0x80010000u;
constexpr size_t kDeth = 8, kMad = 256, kMadHdr = 24;
constexpr uint8_t kMgmtClassCm = 0x07, kCmClassVersion = 2, kMadSend = 0x03;
constexpr uint16_t kCmReq = 0x0010, kCmRep = 0x0013, kCmRtu = 0x0014;
// The RDMA IP CM service ID (IBA annex A11): prefix 0x0000000001, protocol
// TCP (6), port 20049 (RPC-over-RDMA's, RFC 8267) as rdma_cm would write it.
constexpr uint64_t kIpCmServiceId = 0x0000000001060000ull | 20049;

constexpr size_t kEth = 14, kIp = 20, kUdp = 8, kBth = 12, kIcrc = 4;

void put16(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void put24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, v >> 16);
  put16(p + 2, v);
}
void put64(uint8_t* p, uint64_t v) {
  put32(p, static_cast<uint32_t>(v >> 32));
  put32(p + 4, static_cast<uint32_t>(v));
}

uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) {
  static const auto table = [] {
    std::vector<uint32_t> t(256);
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

uint16_t ip_checksum(const uint8_t* h) {
  uint32_t s = 0;
  for (size_t i = 0; i < kIp; i += 2) s += static_cast<uint32_t>(h[i] << 8 | h[i + 1]);
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}

size_t total_len(std::span<const RocePcap::Piece> payload) {
  size_t n = 0;
  for (const auto& p : payload) n += p.len;
  return n;
}

// The made-up IPv4 address of one end: 10.1.x.y for the connecting side and
// 10.2.x.y for the accepting side, x.y the low 16 bits of the *other* end's
// QP number. Why not one address per side: Wireshark keys an RC connection
// by (address, QP number) of each end, and QP numbers repeat across
// processes (pmd/shm numbers each device's QPs from 1): a server's capture
// of two client processes would show both clients as the same QP at the same
// address, and replies to one would be matched against the other's calls.
// A server's QP numbers are unique within its capture, and a client's
// within its own, so naming each end by its peer's QP makes every endpoint
// unique in either capture, and both ends' captures still agree.
void endpoint_ip(const RocePcap::Flow& f, bool client, uint8_t* ip) {
  uint32_t client_qpn = f.local_is_client ? f.local_qpn : f.remote_qpn;
  uint32_t server_qpn = f.local_is_client ? f.remote_qpn : f.local_qpn;
  uint32_t other = client ? server_qpn : client_qpn;
  ip[0] = 10, ip[1] = client ? 1 : 2;
  ip[2] = static_cast<uint8_t>(other >> 8), ip[3] = static_cast<uint8_t>(other);
}

}  // namespace

Result<std::unique_ptr<RocePcap>> RocePcap::open(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wbe");
  if (f == nullptr) return make_sys_error(Errc::kInvalidArgument, errno, "pcap: cannot create %s", path.c_str());
  // Global header (host byte order, as pcap readers expect from the magic):
  // nanosecond timestamps, version 2.4, snaplen above any frame we write,
  // link type Ethernet.
  uint32_t hdr[6] = {0xa1b23c4d, 0, 0, 0, 65535, 1};
  const uint16_t version[2] = {2, 4};
  std::memcpy(&hdr[1], version, sizeof version);
  if (std::fwrite(hdr, sizeof hdr, 1, f) != 1) {
    int e = errno;
    std::fclose(f);
    return make_sys_error(Errc::kNoResources, e, "pcap: cannot write %s", path.c_str());
  }
  return std::unique_ptr<RocePcap>(new RocePcap(f));
}

RocePcap::~RocePcap() { std::fclose(f_); }

void RocePcap::frame(const Flow& f, bool from_local, const uint8_t* ib_hdr, size_t ib_len,
                     std::span<const Piece> payload, size_t off, size_t len) {
  size_t pad = (4 - len % 4) % 4;
  size_t ip_len = kIp + kUdp + ib_len + len + pad + kIcrc;
  uint8_t h[kEth + kIp + kUdp + 64];
  bool src_client = from_local == f.local_is_client;
  uint8_t src[4], dst[4];
  endpoint_ip(f, src_client, src);
  endpoint_ip(f, !src_client, dst);
  // Ethernet: locally administered MACs, 02:00 then the IPv4 address.
  uint8_t* e = h;
  e[0] = 0x02, e[1] = 0, std::memcpy(e + 2, dst, 4);
  e[6] = 0x02, e[7] = 0, std::memcpy(e + 8, src, 4);
  put16(e + 12, 0x0800);
  // IPv4: 10.0.0.1 (connecting side) and 10.0.0.2 (accepting side).
  uint8_t* ip = h + kEth;
  std::memset(ip, 0, kIp);
  ip[0] = 0x45;
  put16(ip + 2, static_cast<uint32_t>(ip_len));
  put16(ip + 4, ip_id_++);
  put16(ip + 6, 0x4000);  // don't fragment
  ip[8] = 64;
  ip[9] = 17;  // UDP
  std::memcpy(ip + 12, src, 4);
  std::memcpy(ip + 16, dst, 4);
  put16(ip + 10, ip_checksum(ip));
  // UDP: 4791 both ways (RoCEv2 allows any source port; NICs put flow
  // entropy there). One port pair per host pair makes both directions one
  // conversation for Wireshark, which the RPC-over-RDMA dissector needs to
  // tie a call's chunks to the RDMA READs and WRITEs that move them and a
  // reply to its call. Checksum 0, as RoCEv2 senders leave it.
  uint8_t* udp = ip + kIp;
  put16(udp, kRoceV2Port);
  put16(udp + 2, kRoceV2Port);
  put16(udp + 4, static_cast<uint32_t>(ip_len - kIp));
  put16(udp + 6, 0);
  std::memcpy(udp + kUdp, ib_hdr, ib_len);
  uint8_t* bth = udp + kUdp;
  bth[1] = static_cast<uint8_t>((bth[1] & 0xcf) | (pad << 4));
  size_t hlen = kEth + kIp + kUdp + ib_len;

  // ICRC (IBA annex A17): CRC-32 over 8 bytes of ones standing for the LRH,
  // the IP header with TOS, TTL and checksum as ones, the UDP header with its
  // checksum as ones, the BTH with its resv8a byte as ones, then payload and
  // pad; stored little-endian.
  uint8_t masked[kIp + kUdp + kBth];
  std::memcpy(masked, ip, sizeof masked);
  masked[1] = 0xff;
  masked[8] = 0xff;
  masked[10] = masked[11] = 0xff;
  masked[kIp + 6] = masked[kIp + 7] = 0xff;
  masked[kIp + kUdp + 4] = 0xff;
  const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  uint32_t crc = crc32_update(0xffffffffu, ones, sizeof ones);
  crc = crc32_update(crc, masked, sizeof masked);
  crc = crc32_update(crc, bth + kBth, ib_len - kBth);

  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint32_t caplen = static_cast<uint32_t>(hlen + len + pad + kIcrc);
  uint32_t rec[4] = {static_cast<uint32_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec), caplen, caplen};
  bool ok = std::fwrite(rec, sizeof rec, 1, f_) == 1 && std::fwrite(h, hlen, 1, f_) == 1;
  // The payload bytes [off, off+len) of the gather list.
  size_t skip = off, left = len;
  for (const auto& p : payload) {
    if (left == 0) break;
    if (skip >= p.len) {
      skip -= p.len;
      continue;
    }
    size_t n = std::min(p.len - skip, left);
    const uint8_t* b = static_cast<const uint8_t*>(p.data) + skip;
    crc = crc32_update(crc, b, n);
    ok = ok && std::fwrite(b, n, 1, f_) == 1;
    skip = 0;
    left -= n;
  }
  const uint8_t zeros[4] = {};
  crc = crc32_update(crc, zeros, pad);
  crc = ~crc;
  uint8_t icrc[4] = {static_cast<uint8_t>(crc), static_cast<uint8_t>(crc >> 8), static_cast<uint8_t>(crc >> 16),
                     static_cast<uint8_t>(crc >> 24)};
  if (pad != 0) ok = ok && std::fwrite(zeros, pad, 1, f_) == 1;
  ok = ok && std::fwrite(icrc, sizeof icrc, 1, f_) == 1;
  ++frames_;
  if (!ok) ++write_errors_;
}

// Why a capture starts each connection with a CM exchange: an RC packet
// names only its destination QP, so Wireshark's InfiniBand dissector learns
// the source QP of every later packet from the REQ (the connecting side's QP
// and address) and REP (the accepting side's QP) MADs, and sets it as the
// packet's source port. Without it every packet's source port is unknown,
// a call (client, server, ?, server QP) and its reply (server, client, ?,
// client QP) fall in different conversations, and the ONC RPC dissector,
// which pairs a reply with its call by xid within one conversation, matches
// none (replies show program 0, no rpc.time, no `-z rpc,srt`).
void RocePcap::connect(Flow& f) {
  f.cm_written = true;
  uint32_t client_qpn = f.local_is_client ? f.local_qpn : f.remote_qpn;
  uint32_t server_qpn = f.local_is_client ? f.remote_qpn : f.local_qpn;
  // Communication IDs: any value per connection; the QPNs are unique here.
  uint32_t client_cid = 0x10000u | client_qpn, server_cid = 0x20000u | server_qpn;
  uint8_t client_ip[4], server_ip[4];
  endpoint_ip(f, true, client_ip);
  endpoint_ip(f, false, server_ip);
  auto gid = [](uint8_t* p, const uint8_t* ip) {  // IPv4-mapped GID
    p[10] = p[11] = 0xff;
    std::memcpy(p + 12, ip, 4);
  };
  uint8_t req[kMad - kMadHdr] = {};
  put32(req + 0, client_cid);
  put64(req + 8, kIpCmServiceId);
  put64(req + 16, 0x0200000000000001ull);  // local CA GUID
  put24(req + 32, client_qpn);
  req[35] = 16;  // responder resources
  req[39] = 16;  // initiator depth
  req[43] = 0x80 | 0x00;  // remote CM response timeout 16, transport service type RC (0)
  put24(req + 44, 0);     // starting PSN: the flow's PSNs start at 0
  req[47] = 0x87;         // local CM response timeout 16, retry count 7
  put16(req + 48, 0xffff);
  req[50] = 0x57;  // path MTU 4096 (5), RNR retry count 7
  req[51] = 0xf0;  // max CM retries 15
  put16(req + 52, 0xffff), put16(req + 54, 0xffff);  // LIDs: permissive (RoCE has none)
  gid(req + 56, client_ip);
  gid(req + 72, server_ip);
  req[93] = 64;  // hop limit
  req[95] = 0x80;  // local ACK timeout
  // IP CM private data: version 0, IPv4, source port, source and destination IP.
  uint8_t* pd = req + 140;
  pd[1] = 0x40;
  put16(pd + 2, kRoceV2Port);
  std::memcpy(pd + 16, client_ip, 4);
  std::memcpy(pd + 32, server_ip, 4);
  cm_mad(f, true, kCmReq, req);

  uint8_t rep[kMad - kMadHdr] = {};
  put32(rep + 0, server_cid);
  put32(rep + 4, client_cid);
  put24(rep + 12, server_qpn);
  put24(rep + 20, 0);  // starting PSN
  rep[24] = 16, rep[25] = 16;
  rep[27] = 0xe0;  // RNR retry count 7
  put64(rep + 28, 0x0200000000000002ull);
  cm_mad(f, false, kCmRep, rep);

  uint8_t rtu[kMad - kMadHdr] = {};
  put32(rtu + 0, client_cid);
  put32(rtu + 4, server_cid);
  cm_mad(f, true, kCmRtu, rtu);
}

void RocePcap::cm_mad(const Flow& f, bool from_client, uint16_t attr, const uint8_t* data) {
  uint8_t ib[kBth + kDeth] = {};
  ib[0] = kUdSendOnly;
  put16(ib + 2, 0xffff);
  put24(ib + 5, kGsiQpn);
  put24(ib + 9, cm_psn_++);
  put32(ib + kBth, kGsiQkey);
  put24(ib + kBth + 5, kGsiQpn);
  uint8_t mad[kMad] = {};
  mad[0] = 1;  // base version
  mad[1] = kMgmtClassCm;
  mad[2] = kCmClassVersion;
  mad[3] = kMadSend;
  // One transaction per connection (the REP is matched to its REQ by it
  // and the client's address): both QP numbers.
  uint32_t client_qpn = f.local_is_client ? f.local_qpn : f.remote_qpn;
  uint32_t server_qpn = f.local_is_client ? f.remote_qpn : f.local_qpn;
  put64(mad + 8, static_cast<uint64_t>(client_qpn) << 32 | server_qpn);
  put16(mad + 16, attr);
  std::memcpy(mad + kMadHdr, data, kMad - kMadHdr);
  Piece p{mad, sizeof mad};
  frame(f, from_client == f.local_is_client, ib, sizeof ib, {&p, 1}, 0, sizeof mad);
}

void RocePcap::message(Flow& f, bool from_local, uint32_t* psn, uint8_t op_first, uint8_t op_middle,
                       uint8_t op_last, uint8_t op_only, const uint8_t* reth, const uint32_t* ieth,
                       std::span<const Piece> payload) {
  size_t total = total_len(payload);
  uint32_t dqpn = from_local ? f.remote_qpn : f.local_qpn;
  size_t off = 0;
  do {
    size_t n = std::min<size_t>(total - off, kMtu);
    bool first = off == 0, last = off + n == total;
    uint8_t op = first && last ? op_only : first ? op_first : last ? op_last : op_middle;
    uint8_t ib[kBth + 16 + 4];
    std::memset(ib, 0, sizeof ib);
    ib[0] = op;
    ib[1] = 0x40;  // M (migration state) set as RoCE NICs send it; PadCnt set per frame; TVer 0
    put16(ib + 2, 0xffff);       // default P_Key
    put24(ib + 5, dqpn);
    ib[8] = last ? 0x80 : 0x00;  // AckReq on the last packet
    put24(ib + 9, *psn & 0xffffff);
    size_t ib_len = kBth;
    if (first && reth != nullptr) {
      std::memcpy(ib + ib_len, reth, 16);
      ib_len += 16;
    }
    if (last && ieth != nullptr) {
      put32(ib + ib_len, *ieth);
      ib_len += 4;
    }
    frame(f, from_local, ib, ib_len, payload, off, n);
    *psn = (*psn + 1) & 0xffffff;
    off += n;
  } while (off < total);
}

void RocePcap::send(Flow& f, Dir d, std::span<const Piece> payload, const uint32_t* inv_rkey) {
  if (!f.cm_written) connect(f);
  bool out = d == Dir::kOut;
  uint32_t* psn = out ? &f.local_psn : &f.remote_psn;
  if (inv_rkey != nullptr)
    message(f, out, psn, kSendFirst, kSendMiddle, kSendLastInv, kSendOnlyInv, nullptr, inv_rkey, payload);
  else
    message(f, out, psn, kSendFirst, kSendMiddle, kSendLast, kSendOnly, nullptr, nullptr, payload);
}

void RocePcap::write(Flow& f, Dir d, uint64_t va, uint32_t rkey, std::span<const Piece> payload) {
  if (!f.cm_written) connect(f);
  bool out = d == Dir::kOut;
  uint8_t reth[16];
  put64(reth, va);
  put32(reth + 8, rkey);
  put32(reth + 12, static_cast<uint32_t>(total_len(payload)));
  message(f, out, out ? &f.local_psn : &f.remote_psn, kWriteFirst, kWriteMiddle, kWriteLast, kWriteOnly, reth,
          nullptr, payload);
}

uint32_t RocePcap::read_request(Flow& f, Dir d, uint64_t va, uint32_t rkey, uint32_t len) {
  if (!f.cm_written) connect(f);
  bool out = d == Dir::kOut;
  uint32_t* psn = out ? &f.local_psn : &f.remote_psn;
  uint32_t first = *psn;
  uint8_t ib[kBth + 16] = {};
  ib[0] = kReadRequest;
  ib[1] = 0x40;
  put16(ib + 2, 0xffff);
  put24(ib + 5, out ? f.remote_qpn : f.local_qpn);
  ib[8] = 0x80;
  put24(ib + 9, first);
  put64(ib + kBth, va);
  put32(ib + kBth + 8, rkey);
  put32(ib + kBth + 12, len);
  frame(f, out, ib, sizeof ib, {}, 0, 0);
  // The request takes one PSN per response packet.
  uint32_t packets = len == 0 ? 1 : (len + kMtu - 1) / kMtu;
  *psn = (*psn + packets) & 0xffffff;
  return first;
}

void RocePcap::read_response(Flow& f, Dir d, uint32_t first_psn, std::span<const Piece> payload) {
  if (!f.cm_written) connect(f);
  // The responder sends it: the peer when we asked (kOut), we when it did.
  bool from_local = d == Dir::kIn;
  uint32_t* msn = from_local ? &f.local_msn : &f.remote_msn;
  size_t total = total_len(payload);
  uint32_t dqpn = from_local ? f.remote_qpn : f.local_qpn;
  uint32_t psn = first_psn;
  size_t off = 0;
  do {
    size_t n = std::min<size_t>(total - off, kMtu);
    bool first = off == 0, last = off + n == total;
    uint8_t op = first && last ? kReadRespOnly : first ? kReadRespFirst : last ? kReadRespLast : kReadRespMiddle;
    uint8_t ib[kBth + 4] = {};
    ib[0] = op;
    ib[1] = 0x40;
    put16(ib + 2, 0xffff);
    put24(ib + 5, dqpn);
    put24(ib + 9, psn);
    size_t ib_len = kBth;
    if (first || last) {  // AETH: an ACK (syndrome 0) with the message sequence number
      if (last) *msn = (*msn + 1) & 0xffffff;
      put32(ib + kBth, *msn & 0xffffff);
      ib_len += 4;
    }
    frame(f, from_local, ib, ib_len, payload, off, n);
    psn = (psn + 1) & 0xffffff;
    off += n;
  } while (off < total);
}

}  // namespace tern::rdma
