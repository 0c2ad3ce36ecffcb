// Who an export is for: the client specifications of an exports(5) line
// ("*", an address, an address/prefix, "localhost"), and the address of a
// caller they are matched against.
//
// Addresses are kept in IPv6 form, an IPv4 address as ::ffff:a.b.c.d (and
// an IPv4 prefix n as 96 + n), so one comparison serves both families and
// an IPv4 client that reaches an IPv6 listener as a mapped address matches
// its IPv4 specification.
//
// Where a caller's address comes from: a verbs connection's is the
// client's IP address (rdma_cm's peer address, which the engine's
// ServerCall::peer_id() gives); MOUNT's is its TCP peer's. A pmd/shm peer
// is a process of this host, which has no address: it is taken to be
// loopback, 127.0.0.1, so "*", "localhost", "127.0.0.1" and any prefix
// holding it match it, and nothing else does.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tern::nfsd {

// A decimal number of at most 10 digits and at most `max` (a prefix length,
// an exports(5) option's value): false for anything else.
bool parse_uint(std::string_view s, uint32_t max, uint32_t* out);

struct ClientAddr {
  uint8_t b[16] = {};  // IPv6, IPv4 mapped
  bool known = false;  // false: nothing matches it but "*"

  // From ServerCall::peer_id(): "10.0.0.2", "fe80::1" (verbs), "pid 12
  // uid 0" (shm: loopback). Anything else is unknown.
  static ClientAddr from_peer_id(std::string_view peer);
  // From a socket address (AF_INET, AF_INET6); unknown otherwise.
  static ClientAddr from_sockaddr(const sockaddr* sa);
  // "10.0.0.2", "fe80::1", "?".
  std::string to_string() const;
};

class ClientSpec {
 public:
  // The kinds, in the order a client matching several is decided by
  // (exports(5)'s: a single host before a network before anyone).
  enum class Kind : uint8_t {
    kHost,     // one address ("10.0.0.2", "::1", "localhost": 127.0.0.1 and ::1)
    kNetwork,  // address/prefix ("10.0.0.0/24", "fd00::/8"; "10.0.0.0/255.255.255.0")
    kAnyone,   // "*"
  };

  // kInvalidArgument saying what is wrong (host names other than
  // localhost, wildcards in names and @netgroups need name services
  // tern-nfsd does not consult: they are refused, not silently unmatched).
  static Result<ClientSpec> parse(std::string_view text);

  bool matches(const ClientAddr& a) const;
  Kind kind() const { return kind_; }
  // As written (what EXPORT lists for showmount -e).
  const std::string& text() const { return text_; }

 private:
  bool match_prefix(const uint8_t* net, const ClientAddr& a) const;

  Kind kind_ = Kind::kAnyone;
  std::string text_;
  uint8_t net_[16] = {};
  uint8_t net2_[16] = {};  // localhost's second address (::1)
  bool two_ = false;
  uint32_t prefix_ = 0;  // bits of net_ that must match (IPv6 form)
};

}  // namespace tern::nfsd
