// tern-nfsd's side of rpcbind (RFC 1833): registering its services with the
// host's rpcbind, so that `rpcinfo -p`, `showmount -e` and clients that do
// not give port=/mountport= find them, and taking them out again on exit;
// and asking a peer's rpcbind where one of its services listens.
//
// Spoken with Tern's own XDR and ONC RPC codecs (lib/nfs/rpcbind.h,
// rpc_caller.h) rather than libtirpc's rpcb_set(): it is four small calls,
// and tern-nfsd keeps no optional build dependency for them.
//
// Registration uses version 4 SET (netid and universal address), after an
// UNSET of the same program, version and netid — the convention every
// RPC daemon follows, so that a restarted server replaces what a dead one
// left behind. A local rpcbind is reached through its AF_UNIX socket
// (which tags the registration with our uid), else TCP 127.0.0.1:111.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/result.h"
#include "nfsd/rpc_caller.h"

namespace tern::nfsd {

struct RpcbindOptions {
  // Where the local rpcbind is, in the order tried; empty: the defaults
  // (/run/rpcbind.sock, then tcp 127.0.0.1:111). Tests give their own.
  std::vector<RpcPeer> endpoints;
  int timeout_ms = 2000;
};

class RpcbindRegistration {
 public:
  explicit RpcbindRegistration(RpcbindOptions opt = {});
  // Takes out everything add() registered.
  ~RpcbindRegistration();
  RpcbindRegistration(const RpcbindRegistration&) = delete;
  RpcbindRegistration& operator=(const RpcbindRegistration&) = delete;

  // Registers (prog, vers) on netid ("tcp", "udp", "tcp6", "udp6", "rdma",
  // ...) at addr (its port included). kDisconnected when no rpcbind
  // answers (nothing else is tried after that: the caller logs one line and
  // goes on), kRemoteError when rpcbind refused the SET.
  Status add(uint32_t prog, uint32_t vers, const std::string& netid, const sockaddr_storage& addr);
  // UNSETs every registration add() made; done by the destructor too.
  void remove_all();
  // How many registrations are in place.
  size_t registered() const;

 private:
  Result<bool> set_or_unset(bool set, uint32_t prog, uint32_t vers, const std::string& netid,
                            const std::string& uaddr);

  RpcbindOptions opt_;
  mutable std::mutex mu_;
  struct Entry {
    uint32_t prog, vers;
    std::string netid;
  };
  std::vector<Entry> done_;
  int endpoint_ = -1;  // the endpoint that answered last (-1: none yet)
};

// Where (prog, vers) listens on the host at `host` over TCP or UDP, by its
// rpcbind (port `rpcbind_port`, version 2 GETPORT over TCP): kNotFound
// when it is not registered there.
Result<uint16_t> rpcbind_getport(const sockaddr_storage& host, uint32_t prog, uint32_t vers, bool tcp,
                                 uint16_t rpcbind_port = 111, int timeout_ms = 3000);

// The netid for a socket's family and transport: tcp, udp, tcp6, udp6.
std::string netid_for(const sockaddr_storage& ss, bool tcp);

}  // namespace tern::nfsd
