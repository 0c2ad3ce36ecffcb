#include "nfsd/client_spec.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>


namespace tern::nfsd {

namespace {

void map_v4(const in_addr& v4, uint8_t* out) {
  std::memset(out, 0, 10);
  out[10] = out[11] = 0xff;
  std::memcpy(out + 12, &v4, 4);
}

bool is_mapped_v4(const uint8_t* b) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(b, prefix, 12) == 0;
}

// An address in either family, into IPv6 form; *v4 says which it was.
bool parse_addr(const std::string& s, uint8_t* out, bool* v4) {
  in_addr a4;
  in6_addr a6;
  if (inet_pton(AF_INET, s.c_str(), &a4) == 1) {
    map_v4(a4, out);
    *v4 = true;
    return true;
  }
  if (inet_pton(AF_INET6, s.c_str(), &a6) == 1) {
    std::memcpy(out, &a6, 16);
    *v4 = false;
    return true;
  }
  return false;
}


}  // namespace

bool parse_uint(std::string_view s, uint32_t max, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

ClientAddr ClientAddr::from_peer_id(std::string_view peer) {
  ClientAddr a;
  if (peer.starts_with("pid ")) {  // pmd/shm: a process of this host
    in_addr lo{htonl(INADDR_LOOPBACK)};
    map_v4(lo, a.b);
    a.known = true;
    return a;
  }
  bool v4 = false;
  if (peer.size() < INET6_ADDRSTRLEN && parse_addr(std::string(peer), a.b, &v4)) a.known = true;
  return a;
}

ClientAddr ClientAddr::from_sockaddr(const sockaddr* sa) {
  ClientAddr a;
  if (sa == nullptr) return a;
  if (sa->sa_family == AF_INET) {
    map_v4(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, a.b);
    a.known = true;
  } else if (sa->sa_family == AF_INET6) {
    std::memcpy(a.b, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, 16);
    a.known = true;
  }
  return a;
}

std::string ClientAddr::to_string() const {
  if (!known) return "?";
  char buf[INET6_ADDRSTRLEN];
  if (is_mapped_v4(b)) inet_ntop(AF_INET, b + 12, buf, sizeof buf);
  else inet_ntop(AF_INET6, b, buf, sizeof buf);
  return buf;
}

Result<ClientSpec> ClientSpec::parse(std::string_view text) {
  ClientSpec c;
  c.text_ = std::string(text);
  if (text.empty()) return make_error(Errc::kInvalidArgument, "an empty client");
  if (text == "*") {
    c.kind_ = Kind::kAnyone;
    return c;
  }
  if (text == "localhost") {
    in_addr lo{htonl(INADDR_LOOPBACK)};
    map_v4(lo, c.net_);
    c.net2_[15] = 1;  // ::1
    c.two_ = true;
    c.prefix_ = 128;
    c.kind_ = Kind::kHost;
    return c;
  }
  if (text.front() == '@')
    return make_error(Errc::kInvalidArgument, "client %s: netgroups are not supported (list addresses or prefixes)",
                      c.text_.c_str());
  const size_t slash = text.find('/');
  const std::string addr(text.substr(0, slash));
  bool v4 = false;
  if (!parse_addr(addr, c.net_, &v4)) {
    return make_error(Errc::kInvalidArgument,
                      "client %s: not an address, address/prefix, '*' or 'localhost' (host names and wildcards "
                      "are not supported: tern-nfsd matches addresses only)",
                      c.text_.c_str());
  }
  if (slash == std::string_view::npos) {
    c.kind_ = Kind::kHost;
    c.prefix_ = 128;
    return c;
  }
  const std::string_view len = text.substr(slash + 1);
  uint32_t bits = 0;
  if (v4 && len.find('.') != std::string_view::npos) {
    // A dotted mask (exports(5) allows 10.0.0.0/255.255.255.0): contiguous only.
    in_addr m;
    if (inet_pton(AF_INET, std::string(len).c_str(), &m) != 1)
      return make_error(Errc::kInvalidArgument, "client %s: bad netmask", c.text_.c_str());
    const uint32_t mask = ntohl(m.s_addr);
    while (bits < 32 && (mask & (0x80000000u >> bits)) != 0) ++bits;
    if (bits < 32 && (mask << bits) != 0)
      return make_error(Errc::kInvalidArgument, "client %s: the netmask is not contiguous", c.text_.c_str());
  } else if (!parse_uint(len, v4 ? 32 : 128, &bits)) {
    return make_error(Errc::kInvalidArgument, "client %s: the prefix length is not a number from 0 to %u",
                      c.text_.c_str(), v4 ? 32u : 128u);
  }
  c.prefix_ = v4 ? 96 + bits : bits;
  // Host bits set past the prefix are likely a typo that widens the list
  // (10.1.0.0/8 probably meant /16): refused rather than masked.
  for (uint32_t i = c.prefix_; i < 128; ++i)
    if ((c.net_[i / 8] & (0x80u >> (i % 8))) != 0)
      return make_error(Errc::kInvalidArgument, "client %s: address bits are set beyond the /%u prefix",
                        c.text_.c_str(), bits);
  c.kind_ = c.prefix_ == 128 ? Kind::kHost : Kind::kNetwork;
  return c;
}

bool ClientSpec::match_prefix(const uint8_t* net, const ClientAddr& a) const {
  const uint32_t whole = prefix_ / 8, rest = prefix_ % 8;
  if (std::memcmp(net, a.b, whole) != 0) return false;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff00u >> rest);
  return (net[whole] & mask) == (a.b[whole] & mask);
}

bool ClientSpec::matches(const ClientAddr& a) const {
  if (kind_ == Kind::kAnyone) return true;
  if (!a.known) return false;
  return match_prefix(net_, a) || (two_ && match_prefix(net2_, a));
}

}  // namespace tern::nfsd
