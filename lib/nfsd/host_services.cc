#include "nfsd/host_services.h"

#include "base/log.h"
#include "nfs/mount3.h"
#include "nfs/nfs_program.h"
#include "nfsd/mount_udp.h"

namespace tern::nfsd {

namespace m3 = tern::nfs::mount3;
namespace nlm = tern::nfs::nlm4;

Result<std::unique_ptr<HostServices>> HostServices::start(const PublishedExports& pub,
                                                          const HostServicesOptions& opt) {
  std::unique_ptr<HostServices> h(new HostServices());
  if (opt.mount_port != 0 && opt.mount_udp) {
    auto u = start_mount_udp(pub, opt.mount_addr, opt.mount_port);
    if (!u) return u.status();
    h->mount_udp_ = std::move(*u);
  }
  if (opt.nlm) {
    auto n = NlmServer::start(&pub, opt.nlm_opt);
    if (!n) return n.status();
    h->nlm_ = std::move(*n);
    h->grace_ = opt.nlm_opt.grace_seconds;
  }
  if (opt.rpcbind) h->register_all(opt);
  // Only now can a client told to reclaim find the new NLM service.
  if (h->nlm_) h->nlm_->notify_clients();
  return h;
}

HostServices::~HostServices() {
  reg_.reset();  // first: no client is sent to a service that is stopping
  nlm_.reset();
  mount_udp_.reset();
}

void HostServices::register_all(const HostServicesOptions& opt) {
  reg_ = std::make_unique<RpcbindRegistration>(opt.rpcbind_opt);
  struct One {
    uint32_t prog, vers;
    std::string netid;
    sockaddr_storage addr;
    bool optional;  // refused: said, and nothing else is affected
  };
  std::vector<One> all;
  socklen_t sl = 0;
  if (opt.mount_port != 0) {
    if (auto a = parse_ip(opt.mount_addr, opt.mount_port, &sl)) {
      all.push_back({m3::kProgram, m3::kVersion, netid_for(*a, true), *a, false});
      if (mount_udp_) {
        all.push_back({m3::kProgram, m3::kVersion, netid_for(*a, false), *a, false});
        all.push_back({m3::kProgram, kMountVersion1, netid_for(*a, false), *a, false});
      }
    }
  }
  if (!opt.nfs_addr.empty()) {
    // The kernel's nfsd names NFS over RDMA "rdma" / "rdma6"; rpcbind
    // keeps any netid it is given for versions 3 and 4 (rpcinfo lists it;
    // `rpcinfo -p`, version 2, shows only tcp and udp).
    if (auto a = parse_ip(opt.nfs_addr, opt.nfs_port, &sl))
      all.push_back({nfs::kNfsProgram, 3, a->ss_family == AF_INET6 ? "rdma6" : "rdma", *a, true});
  }
  if (nlm_) {
    const sockaddr_storage& a = nlm_->address();
    for (bool tcp : {true, false}) {
      all.push_back({nlm::kProgram, nlm::kVersion, netid_for(a, tcp), a, false});
    }
  }
  for (const One& o : all) {
    Status s = reg_->add(o.prog, o.vers, o.netid, o.addr);
    if (s) continue;
    if (s.code() == Errc::kDisconnected || s.code() == Errc::kTimedOut) {
      rpcbind_note_ = "rpcbind not running: nothing registered (clients need port=, mountport=)";
      TERN_LOG(kWarn, "nfsd", "%s: %s", rpcbind_note_.c_str(), s.message().c_str());
      return;
    }
    if (o.optional) TERN_LOG(kInfo, "nfsd", "%s (optional)", s.message().c_str());
    else TERN_LOG(kWarn, "nfsd", "%s", s.message().c_str());
  }
  rpcbind_note_ = "rpcbind: " + std::to_string(reg_->registered()) + " of " + std::to_string(all.size()) +
                  " registered";
}

std::string HostServices::stats() const {
  if (!nlm_) return "nlm: off";
  const NlmStats& s = nlm_->stats();
  auto n = [](const std::atomic<uint64_t>& v) { return std::to_string(v.load(std::memory_order_relaxed)); };
  return "nlm: calls=" + n(s.calls) + " granted=" + n(s.granted) + " denied=" + n(s.denied) + " blocked=" +
         n(s.blocked) + " grace_denied=" + n(s.grace_denied) + " callbacks=" + n(s.callbacks) +
         " callback_failures=" + n(s.callback_failures) + " freed_hosts=" + n(s.freed_hosts) +
         " reclaimed=" + n(s.reclaimed) + " locks_held=" + std::to_string(nlm_->locks_held()) +
         (nlm_->notifier() ? " notified=" + n(nlm_->notifier()->stats().notified) +
                                 " notify_failed=" + n(nlm_->notifier()->stats().failed)
                           : "");
}

std::string HostServices::describe() const {
  std::string d;
  if (mount_udp_) d += "MOUNT udp :" + std::to_string(mount_udp_->port()) + "; ";
  if (nlm_) {
    d += "NLM tcp+udp :" + std::to_string(nlm_->port()) + " (grace " + std::to_string(grace_) + " s";
    if (const SmNotifier* n = nlm_->notifier())
      d += ", NSM state " + std::to_string(n->state()) + ", " + std::to_string(n->recorded_at_start()) +
           " client(s) to tell to reclaim";
    d += "); ";
  }
  d += rpcbind_note_.empty() ? "rpcbind: off" : rpcbind_note_;
  return d;
}

}  // namespace tern::nfsd
