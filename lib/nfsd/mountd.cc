#include "nfsd/mountd.h"

#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "base/log.h"
#include "nfs/mount3.h"
#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

namespace oc = tern::oncrpc;
namespace m3 = tern::nfs::mount3;

namespace {

// The largest reply (EXPORT's list): what a record may hold.
constexpr size_t kMaxMountReply = 64u << 10;

std::string normalized(std::string_view p) {
  std::string s(p);
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}


}  // namespace

bool mountd_answer(const Export& exp, std::span<const uint8_t> call, std::vector<uint8_t>* reply, bool* mounted) {
  return mountd_answer(*ExportTable::of_one(exp), ClientAddr::from_peer_id("127.0.0.1"), call, reply, mounted);
}

bool mountd_answer(const ExportTable& exports, const ClientAddr& from, std::span<const uint8_t> call,
                   std::vector<uint8_t>* reply, bool* mounted) {
  *mounted = false;
  oc::CallHeader h;
  size_t header_len = 0;
  if (RpcDecoded r = rpc_decode_call(call, &h, &header_len, reply); r != RpcDecoded::kCall)
    return r == RpcDecoded::kAnswered;
  if (h.prog != m3::kProgram) {
    rpc_accepted(reply, h.xid, oc::AcceptStat::kProgUnavail, {});
    return true;
  }
  if (h.vers != m3::kVersion) {
    rpc_accepted(reply, h.xid, oc::AcceptStat::kProgMismatch, {}, m3::kVersion, m3::kVersion);
    return true;
  }
  std::span<const uint8_t> args = call.subspan(header_len);
  // EXPORT's list grows with the exports and their clients.
  std::vector<uint8_t> buf(kMaxMountReply);
  xdr::XdrWriter w(buf);
  switch (static_cast<m3::Proc>(h.proc)) {
    case m3::Proc::kNull:
    case m3::Proc::kUmntall:
      break;
    case m3::Proc::kMnt: {
      std::string_view path;
      if (!m3::decode_dirpath(args, &path)) {
        rpc_accepted(reply, h.xid, oc::AcceptStat::kGarbageArgs, {});
        return true;
      }
      m3::MntRes r;
      const Export* exp = exports.by_path(normalized(path));
      if (exp == nullptr) {
        r.status = m3::Stat::kNoent;
      } else if (exp->rule_for(from) == nullptr) {
        r.status = m3::Stat::kAccess;  // not on the export's list: no root handle
      } else {
        r.status = m3::Stat::kOk;
        r.fh = exp->root_fh();
        r.flavors = {static_cast<uint32_t>(oc::AuthFlavor::kSys)};
        *mounted = true;
      }
      m3::encode(w, r);
      break;
    }
    case m3::Proc::kUmnt: {
      std::string_view path;
      if (!m3::decode_dirpath(args, &path)) {
        rpc_accepted(reply, h.xid, oc::AcceptStat::kGarbageArgs, {});
        return true;
      }
      break;  // void: the server keeps no list of mounts
    }
    case m3::Proc::kDump:
      m3::encode(w, std::span<const m3::MountEntry>());
      break;
    case m3::Proc::kExport: {
      std::vector<m3::ExportEntry> list;
      for (const auto& e : exports.exports()) {
        m3::ExportEntry x{e->name(), {}};
        for (const ClientRule& r : e->rules()) x.groups.push_back(r.who.text());
        list.push_back(std::move(x));
      }
      m3::encode(w, std::span<const m3::ExportEntry>(list));
      break;
    }
    default:
      rpc_accepted(reply, h.xid, oc::AcceptStat::kProcUnavail, {});
      return true;
  }
  rpc_accepted(reply, h.xid, w.ok() ? oc::AcceptStat::kSuccess : oc::AcceptStat::kSystemErr,
           w.ok() ? w.written() : std::span<const uint8_t>());
  return true;
}

Result<std::unique_ptr<Mountd>> Mountd::start(const Export& exp, const MountdOptions& opt) {
  auto own = std::make_unique<PublishedExports>(ExportTable::of_one(exp));
  auto m = start(*own, opt);
  if (m) (*m)->own_ = std::move(own);
  return m;
}

Result<std::unique_ptr<Mountd>> Mountd::start(const PublishedExports& pub, const MountdOptions& opt) {
  std::unique_ptr<Mountd> m(new Mountd(pub));
  RpcServiceOptions o;
  o.name = "MOUNT";
  o.addr = opt.addr;
  o.port = opt.port;
  o.udp = false;  // MOUNT over UDP: mount_udp.h
  o.record_ms = opt.record_ms;
  o.idle_ms = opt.idle_ms;
  o.max_conns = opt.max_clients;
  o.max_per_address = opt.max_per_address;
  Mountd* self = m.get();
  auto svc = RpcService::start(o, [self](const RpcRequest& r, std::vector<uint8_t>* reply) {
    bool mounted = false;
    self->calls_.fetch_add(1, std::memory_order_relaxed);
    const bool answer = mountd_answer(*self->pub_.current(),
                                      ClientAddr::from_sockaddr(reinterpret_cast<const sockaddr*>(&r.peer)), r.msg,
                                      reply, &mounted);
    if (mounted) self->mounts_.fetch_add(1, std::memory_order_relaxed);
    return answer;
  });
  if (!svc)
    return svc.status();
  m->svc_ = std::move(*svc);
  return m;
}

}  // namespace tern::nfsd
