// What tern-nfsd offers the host's ONC RPC world besides NFS over RDMA and
// MOUNT over TCP (mountd.h): MOUNT over UDP (mount_udp.h), the NLM lock
// manager and its NSM callback (nlm_server.h), and the registration of all
// of them — and of NFS itself, netid "rdma" — with the local rpcbind
// (rpcbind_client.h). apps/tern_nfsd.cc starts one and destroys it on exit,
// which unregisters everything before the services stop.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "nfsd/nlm_server.h"
#include "nfsd/rpc_service.h"
#include "nfsd/rpcbind_client.h"

namespace tern::nfsd {

class PublishedExports;

struct HostServicesOptions {
  bool rpcbind = true;
  RpcbindOptions rpcbind_opt;
  // MOUNT: the address and port its TCP listener has (port 0: no MOUNT);
  // mount_udp serves it over UDP on the same port too.
  std::string mount_addr = "0.0.0.0";
  uint16_t mount_port = 0;
  bool mount_udp = true;
  // NFS over RDMA, registered as netid "rdma" ("rdma6"); empty: not registered.
  std::string nfs_addr;
  uint16_t nfs_port = 0;
  // NLM and NSM.
  bool nlm = true;
  NlmOptions nlm_opt;
};

class HostServices {
 public:
  // The exports `pub` holds at each call decide MOUNT's and NLM's answers
  // (it outlives the HostServices).
  static Result<std::unique_ptr<HostServices>> start(const PublishedExports& pub, const HostServicesOptions& opt);
  // Unregisters, then stops the services.
  ~HostServices();
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  // For tern-nfsd's start line: "MOUNT udp :20048; NLM tcp+udp :4045 (grace 90 s); rpcbind: 7 registered".
  std::string describe() const;
  // The lock manager's counters for tern-nfsd's exit line ("nlm: off" without it).
  std::string stats() const;
  const NlmServer* nlm() const { return nlm_.get(); }

 private:
  HostServices() = default;
  void register_all(const HostServicesOptions& opt);

  std::unique_ptr<RpcService> mount_udp_;
  std::unique_ptr<NlmServer> nlm_;
  std::unique_ptr<RpcbindRegistration> reg_;
  std::string rpcbind_note_;
  int grace_ = 0;
};

}  // namespace tern::nfsd
