// One ONC RPC call, blocking, with a deadline: what tern-nfsd's control
// path sends to other services — rpcbind (to register, and to find a peer's
// service), the local rpc.statd (NSM), and a client's NLM service (the
// GRANTED callback of a lock that was blocked). Over a stream (TCP, or the
// AF_UNIX socket of the local rpcbind, with RFC 5531 §11 record marking) or
// a datagram (UDP, resent on silence).
//
// Never call it from an engine thread: it blocks for up to the deadline.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"

namespace tern::nfsd {

enum class RpcTransport : uint8_t { kStream, kDatagram };

struct RpcPeer {
  sockaddr_storage addr{};
  socklen_t len = 0;
  RpcTransport transport = RpcTransport::kStream;
};

// An IPv4/IPv6 address (text) and port; kInvalidArgument when it is neither.
Result<RpcPeer> rpc_peer_ip(const std::string& ip, uint16_t port, RpcTransport t);
// The same from a socket address (its family's port is replaced).
RpcPeer rpc_peer_of(const sockaddr_storage& ss, uint16_t port, RpcTransport t);
// A stream socket at a file-system path (rpcbind's /run/rpcbind.sock).
Result<RpcPeer> rpc_peer_unix(const std::string& path);
// "1.2.3.4:111", "[::1]:111", "unix:/run/rpcbind.sock": for log lines.
std::string rpc_peer_name(const RpcPeer& p);

struct RpcCallOptions {
  // The whole call, connection included.
  int timeout_ms = 3000;
  // Datagrams: sent again after timeout_ms / attempts of silence.
  int attempts = 3;
  // Bind the local end here first (port 0: any) — a GRANTED callback must
  // come from the address the client sent its lock to, which it compares.
  const sockaddr_storage* source = nullptr;
  // Bind a port below 1024 when running as root: some services (a
  // client's lockd, rpcbind on other hosts) trust only those.
  bool reserved_port = false;
};

// The call's results: the bytes after an accepted, SUCCESS reply header.
// kDisconnected when nothing listens (ECONNREFUSED, ENOENT), kTimedOut when
// no reply came in time, kRemoteError for any reply that is not SUCCESS
// (its status in the message).
Result<std::vector<uint8_t>> rpc_call(const RpcPeer& peer, uint32_t prog, uint32_t vers, uint32_t proc,
                                      std::span<const uint8_t> args, const RpcCallOptions& opt = {});

}  // namespace tern::nfsd
