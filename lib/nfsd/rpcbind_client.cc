#include "nfsd/rpcbind_client.h"

#include <netinet/in.h>

#include "base/log.h"
#include "nfs/rpcbind.h"

namespace tern::nfsd {

namespace rb = tern::nfs::rpcbind;

RpcbindRegistration::RpcbindRegistration(RpcbindOptions opt) : opt_(std::move(opt)) {
  if (opt_.endpoints.empty()) {
    if (auto u = rpc_peer_unix(rb::kLocalSocket)) opt_.endpoints.push_back(*u);
    if (auto t = rpc_peer_ip("127.0.0.1", rb::kPort, RpcTransport::kStream)) opt_.endpoints.push_back(*t);
  }
}

RpcbindRegistration::~RpcbindRegistration() { remove_all(); }

size_t RpcbindRegistration::registered() const {
  std::lock_guard<std::mutex> g(mu_);
  return done_.size();
}

Result<bool> RpcbindRegistration::set_or_unset(bool set, uint32_t prog, uint32_t vers, const std::string& netid,
                                               const std::string& uaddr) {
  uint8_t buf[512];
  xdr::XdrWriter w(buf);
  rb::encode(w, rb::Rpcb{prog, vers, netid, uaddr, "tern-nfsd"});
  if (!w.ok()) return make_error(Errc::kInvalidArgument, "rpcbind: netid or address too long");
  // The endpoint that answered before first; the others only when it is
  // gone (a restarted rpcbind may have lost its socket file, say).
  Status last = make_error(Errc::kDisconnected, "no rpcbind endpoint configured");
  for (size_t k = 0; k < opt_.endpoints.size(); ++k) {
    const size_t i = endpoint_ < 0 ? k : (static_cast<size_t>(endpoint_) + k) % opt_.endpoints.size();
    RpcCallOptions co;
    co.timeout_ms = opt_.timeout_ms;
    auto r = rpc_call(opt_.endpoints[i], rb::kProgram, rb::kVersion4,
                      static_cast<uint32_t>(set ? rb::Proc::kSet : rb::Proc::kUnset), w.written(), co);
    if (!r) {
      last = r.status();
      if (r.status().code() == Errc::kDisconnected || r.status().code() == Errc::kTimedOut) continue;
      return last;  // it answered, but not SUCCESS: another endpoint would say the same
    }
    endpoint_ = static_cast<int>(i);
    bool ok = false;
    if (!rb::decode_bool(*r, &ok))
      return make_error(Errc::kRemoteError, "rpcbind at %s answered SET/UNSET with garbage",
                        rpc_peer_name(opt_.endpoints[i]).c_str());
    return ok;
  }
  return make_error(Errc::kDisconnected, "rpcbind is not running (%s)", last.message().c_str());
}

Status RpcbindRegistration::add(uint32_t prog, uint32_t vers, const std::string& netid, const sockaddr_storage& addr) {
  const std::string uaddr = rb::to_uaddr(addr);
  if (uaddr.empty()) return make_error(Errc::kInvalidArgument, "rpcbind: not an IP address to register");
  std::lock_guard<std::mutex> g(mu_);
  // What a dead tern-nfsd (or another server of the program) left: a SET
  // over an existing (prog, vers, netid) is refused.
  auto u = set_or_unset(false, prog, vers, netid, "");
  if (!u) return u.status();
  auto s = set_or_unset(true, prog, vers, netid, uaddr);
  if (!s) return s.status();
  if (!*s)
    return make_error(Errc::kRemoteError, "rpcbind refused to register program %u version %u on %s at %s", prog,
                      vers, netid.c_str(), uaddr.c_str());
  done_.push_back({prog, vers, netid});
  return Status::ok();
}

void RpcbindRegistration::remove_all() {
  std::lock_guard<std::mutex> g(mu_);
  for (const Entry& e : done_) {
    auto r = set_or_unset(false, e.prog, e.vers, e.netid, "");
    if (!r || !*r)
      TERN_LOG(kWarn, "nfsd", "rpcbind: could not unregister program %u version %u on %s: %s", e.prog, e.vers,
               e.netid.c_str(), r ? "refused" : r.status().to_string().c_str());
  }
  done_.clear();
}

Result<uint16_t> rpcbind_getport(const sockaddr_storage& host, uint32_t prog, uint32_t vers, bool tcp,
                                 uint16_t rpcbind_port, int timeout_ms) {
  uint8_t buf[16];
  xdr::XdrWriter w(buf);
  rb::encode(w, rb::Mapping{prog, vers, tcp ? rb::kIpprotoTcp : rb::kIpprotoUdp, 0});
  RpcCallOptions co;
  co.timeout_ms = timeout_ms;
  const RpcPeer peer = rpc_peer_of(host, rpcbind_port, RpcTransport::kStream);
  auto r = rpc_call(peer, rb::kProgram, rb::kVersion2, static_cast<uint32_t>(rb::PmapProc::kGetport), w.written(), co);
  if (!r) return r.status();
  uint16_t port = 0;
  if (!rb::decode_port(*r, &port))
    return make_error(Errc::kRemoteError, "rpcbind at %s answered GETPORT with garbage", rpc_peer_name(peer).c_str());
  if (port == 0)
    return make_error(Errc::kNotFound, "program %u version %u is not registered over %s at %s", prog, vers,
                      tcp ? "tcp" : "udp", rpc_peer_name(peer).c_str());
  return port;
}

std::string netid_for(const sockaddr_storage& ss, bool tcp) {
  const char* base = tcp ? "tcp" : "udp";
  return ss.ss_family == AF_INET6 ? std::string(base) + "6" : std::string(base);
}

}  // namespace tern::nfsd
