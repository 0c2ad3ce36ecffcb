// The rpcbind protocol (RFC 1833): how a server tells the host's rpcbind
// which (program, version, transport) it serves at which address, and how a
// client asks. Program 100000: version 2 is the old portmapper (a port per
// program, version and IP protocol), versions 3 and 4 carry a netid ("tcp",
// "udp", "rdma", ...) and a universal address ("h1.h2.h3.h4.p1.p2").
//
// Only what tern-nfsd uses: SET and UNSET (v3/v4) to register its services,
// GETADDR (v3/v4) and GETPORT (v2) to find a peer's NLM service or the local
// statd. Servers of this protocol are not Tern's business.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "../xdr/xdr.h"

namespace tern::nfs::rpcbind {

inline constexpr uint32_t kProgram = 100000;
inline constexpr uint32_t kVersion2 = 2;  // PMAP
inline constexpr uint32_t kVersion3 = 3;
inline constexpr uint32_t kVersion4 = 4;
inline constexpr uint16_t kPort = 111;
// Where Linux's rpcbind listens for local callers: a SET through it is
// tagged with the caller's uid (SO_PEERCRED), so only that uid (or root)
// can UNSET it.
inline constexpr const char* kLocalSocket = "/run/rpcbind.sock";

// Procedures of versions 3 and 4 (the first six are the same in both).
enum class Proc : uint32_t { kNull = 0, kSet = 1, kUnset = 2, kGetaddr = 3, kDump = 4 };
// Version 2's (PMAPPROC_*).
enum class PmapProc : uint32_t { kNull = 0, kSet = 1, kUnset = 2, kGetport = 3, kDump = 4 };

// IP protocol numbers in version 2's mapping.
inline constexpr uint32_t kIpprotoTcp = 6;
inline constexpr uint32_t kIpprotoUdp = 17;

// r_netid and r_addr are strings without a bound in RFC 1833; these are
// generous for every netid and universal address that exists, and bound what
// a peer can make us hold.
inline constexpr size_t kMaxNetid = 64;
inline constexpr size_t kMaxUaddr = 128;
inline constexpr size_t kMaxOwner = 256;

// struct rpcb: the argument of SET, UNSET and GETADDR.
struct Rpcb {
  uint32_t prog = 0;
  uint32_t vers = 0;
  std::string_view netid;
  std::string_view addr;   // universal address; "" for UNSET and GETADDR
  std::string_view owner;  // rpcbind replaces it with the caller's uid on its local socket
};
void encode(xdr::XdrWriter& w, const Rpcb& r);
bool decode(std::span<const uint8_t> in, Rpcb* r);

// struct mapping (version 2): the argument of GETPORT.
struct Mapping {
  uint32_t prog = 0;
  uint32_t vers = 0;
  uint32_t prot = 0;  // kIpprotoTcp or kIpprotoUdp
  uint32_t port = 0;
};
void encode(xdr::XdrWriter& w, const Mapping& m);

// SET and UNSET answer a bool; GETPORT an unsigned int; GETADDR a string.
bool decode_bool(std::span<const uint8_t> in, bool* v);
bool decode_port(std::span<const uint8_t> in, uint16_t* port);
bool decode_uaddr(std::span<const uint8_t> in, std::string_view* uaddr);

// A socket address as a universal address (RFC 5665 §5.2.3.3 and §5.2.3.4):
// "h1.h2.h3.h4.p1.p2" for IPv4, the RFC 4291 text form then ".p1.p2" for
// IPv6. "" for any other family.
std::string to_uaddr(const sockaddr_storage& ss);
// The reverse; nullopt when the text is not one.
std::optional<sockaddr_storage> from_uaddr(std::string_view uaddr, bool ipv6);

}  // namespace tern::nfs::rpcbind
