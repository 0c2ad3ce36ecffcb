#include "nfsd/nsm_client.h"

#include "nfs/nsm.h"
#include "nfsd/rpcbind_client.h"

namespace tern::nfsd {

namespace nsm = tern::nfs::nsm;

namespace {
// statd calls its monitors back at my_name; it accepts only a loopback one.
constexpr const char* kMyName = "127.0.0.1";
}  // namespace

Result<std::vector<uint8_t>> NsmClient::call(uint32_t proc, std::span<const uint8_t> args) {
  RpcPeer peer;
  if (opt_.statd) {
    peer = *opt_.statd;
  } else {
    auto lo = rpc_peer_ip("127.0.0.1", 111, RpcTransport::kDatagram);
    if (!lo) return lo.status();
    auto port = rpcbind_getport(lo->addr, nsm::kProgram, nsm::kVersion, false, 111, opt_.timeout_ms);
    if (!port) return make_error(port.status().code(), "rpc.statd not found: %s", port.status().message().c_str());
    peer = rpc_peer_of(lo->addr, *port, RpcTransport::kDatagram);
  }
  RpcCallOptions co;
  co.timeout_ms = opt_.timeout_ms;
  co.reserved_port = true;  // statd trusts local callers from privileged ports
  return rpc_call(peer, nsm::kProgram, nsm::kVersion, proc, args, co);
}

Status NsmClient::monitor(const std::string& mon_name) {
  if (monitored_.count(mon_name)) return Status::ok();
  nsm::Mon m;
  m.mon_name = mon_name;
  m.my_id = {kMyName, opt_.callback_prog, opt_.callback_vers, opt_.callback_proc};
  uint8_t buf[nsm::kMaxName + 128];
  xdr::XdrWriter w(buf);
  nsm::encode(w, m);
  if (!w.ok()) return make_error(Errc::kInvalidArgument, "NSM: host name too long to monitor");
  auto r = call(static_cast<uint32_t>(nsm::Proc::kMon), w.written());
  if (!r) return r.status();
  nsm::StatRes res;
  if (!nsm::decode(*r, &res)) return make_error(Errc::kRemoteError, "rpc.statd answered SM_MON with garbage");
  if (res.res_stat != 0) return make_error(Errc::kRemoteError, "rpc.statd refused to monitor %s", mon_name.c_str());
  monitored_.insert(mon_name);
  return Status::ok();
}

Status NsmClient::unmonitor_all() {
  if (monitored_.empty()) return Status::ok();
  uint8_t buf[128];
  xdr::XdrWriter w(buf);
  nsm::encode(w, nsm::MyId{kMyName, opt_.callback_prog, opt_.callback_vers, opt_.callback_proc});
  auto r = call(static_cast<uint32_t>(nsm::Proc::kUnmonAll), w.written());
  monitored_.clear();
  return r ? Status::ok() : r.status();
}

}  // namespace tern::nfsd
