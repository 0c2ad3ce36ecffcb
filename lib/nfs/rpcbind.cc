#include "nfs/rpcbind.h"

#include <arpa/inet.h>

#include <cstring>

namespace tern::nfs::rpcbind {

using xdr::XdrReader;
using xdr::XdrWriter;

void encode(XdrWriter& w, const Rpcb& r) {
  w.put_u32(r.prog);
  w.put_u32(r.vers);
  w.put_string(r.netid);
  w.put_string(r.addr);
  w.put_string(r.owner);
}

bool decode(std::span<const uint8_t> in, Rpcb* r) {
  XdrReader x(in);
  r->prog = x.get_u32();
  r->vers = x.get_u32();
  r->netid = x.get_string(kMaxNetid);
  r->addr = x.get_string(kMaxUaddr);
  r->owner = x.get_string(kMaxOwner);
  return x.ok();
}

void encode(XdrWriter& w, const Mapping& m) {
  w.put_u32(m.prog);
  w.put_u32(m.vers);
  w.put_u32(m.prot);
  w.put_u32(m.port);
}

bool decode_bool(std::span<const uint8_t> in, bool* v) {
  XdrReader x(in);
  *v = x.get_bool();
  return x.ok();
}

bool decode_port(std::span<const uint8_t> in, uint16_t* port) {
  XdrReader x(in);
  uint32_t p = x.get_u32();
  if (!x.ok() || p > 65535) return false;
  *port = static_cast<uint16_t>(p);
  return true;
}

bool decode_uaddr(std::span<const uint8_t> in, std::string_view* uaddr) {
  XdrReader x(in);
  *uaddr = x.get_string(kMaxUaddr);
  return x.ok();
}

std::string to_uaddr(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    port = ntohs(s4->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
    port = ntohs(s6->sin6_port);
  } else {
    return "";
  }
  return std::string(host) + "." + std::to_string(port >> 8) + "." + std::to_string(port & 0xff);
}

std::optional<sockaddr_storage> from_uaddr(std::string_view uaddr, bool ipv6) {
  // The last two dot-separated fields are the port's bytes.
  size_t p2 = uaddr.rfind('.');
  if (p2 == std::string_view::npos || p2 == 0) return std::nullopt;
  size_t p1 = uaddr.rfind('.', p2 - 1);
  if (p1 == std::string_view::npos) return std::nullopt;
  auto byte = [](std::string_view s, uint32_t* out) {
    if (s.empty() || s.size() > 3) return false;
    uint32_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    *out = v;
    return v <= 255;
  };
  uint32_t hi = 0, lo = 0;
  if (!byte(uaddr.substr(p1 + 1, p2 - p1 - 1), &hi) || !byte(uaddr.substr(p2 + 1), &lo)) return std::nullopt;
  const std::string host(uaddr.substr(0, p1));
  const uint16_t port = static_cast<uint16_t>(hi << 8 | lo);
  sockaddr_storage ss{};
  if (!ipv6) {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    if (inet_pton(AF_INET, host.c_str(), &s4->sin_addr) != 1) return std::nullopt;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
  } else {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (inet_pton(AF_INET6, host.c_str(), &s6->sin6_addr) != 1) return std::nullopt;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
  }
  return ss;
}

}  // namespace tern::nfs::rpcbind
