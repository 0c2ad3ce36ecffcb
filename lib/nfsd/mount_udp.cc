#include "nfsd/mount_udp.h"

#include "nfs/mount3.h"
#include "nfsd/client_spec.h"
#include "nfsd/mountd.h"
#include "nfsd/published_exports.h"
#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

namespace oc = tern::oncrpc;
namespace m3 = tern::nfs::mount3;

bool mount_answer_v1_v3(const ExportTable& exports, const ClientAddr& from, std::span<const uint8_t> call,
                        std::vector<uint8_t>* reply) {
  bool mounted = false;
  oc::CallHeader h;
  oc::CallDecodeResult d = oc::decode_call(call, &h);
  if (d.status != oc::CallDecodeStatus::kOk || h.prog != m3::kProgram || h.vers != kMountVersion1)
    return mountd_answer(exports, from, call, reply, &mounted);
  if (h.proc == static_cast<uint32_t>(m3::Proc::kMnt)) {
    oc::ReplyHeader rh;
    rh.xid = h.xid;
    rh.accept = oc::AcceptStat::kProcUnavail;
    reply->resize(oc::reply_size(rh));
    reply->resize(oc::encode_reply(rh, *reply));
    return true;
  }
  // The same call as version 3: the version word is the fifth of the
  // header (xid, msg_type, rpcvers, prog, vers), which decode_call has
  // just read; replies carry no version.
  std::vector<uint8_t> v3(call.begin(), call.end());
  v3[16] = 0, v3[17] = 0, v3[18] = 0, v3[19] = static_cast<uint8_t>(m3::kVersion);
  return mountd_answer(exports, from, v3, reply, &mounted);
}

Result<std::unique_ptr<RpcService>> start_mount_udp(const PublishedExports& pub, const std::string& addr,
                                                    uint16_t port) {
  RpcServiceOptions o;
  o.name = "MOUNT";
  o.addr = addr;
  o.port = port;
  o.tcp = false;
  return RpcService::start(o, [&pub](const RpcRequest& r, std::vector<uint8_t>* out) {
    return mount_answer_v1_v3(*pub.current(), ClientAddr::from_sockaddr(reinterpret_cast<const sockaddr*>(&r.peer)),
                              r.msg, out);
  });
}

}  // namespace tern::nfsd
