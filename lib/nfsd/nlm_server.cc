#include "nfsd/nlm_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>

#include "base/log.h"
#include "nfs/nsm.h"
#include "nfsd/client_spec.h"
#include "nfsd/export.h"
#include "nfsd/export_table.h"
#include "nfsd/published_exports.h"
#include "nfsd/rpcbind_client.h"
#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

namespace oc = tern::oncrpc;
namespace nlm = tern::nfs::nlm4;
namespace nsm = tern::nfs::nsm;

namespace {

using Clock = std::chrono::steady_clock;


std::string ip_of(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
  else if (ss.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
  return host;
}

bool is_loopback(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr) >> 24) == 127;
  if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

// The address of ours a call came to, as text, as the client names it (an
// IPv4 address as such, not mapped into IPv6); "" for a wildcard (a UDP
// socket bound to any address does not say which one).
std::string server_name_of(const sockaddr_storage& local) {
  if (local.ss_family == AF_INET &&
      reinterpret_cast<const sockaddr_in*>(&local)->sin_addr.s_addr == htonl(INADDR_ANY))
    return "";
  if (local.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&local)->sin6_addr;
    if (IN6_IS_ADDR_UNSPECIFIED(&a)) return "";
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      char host[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &a.s6_addr[12], host, sizeof host);
      return host;
    }
  }
  return ip_of(local);
}

LockOwner owner_of(const nlm::Lock& l) {
  return {std::string(l.caller_name), l.svid, std::string(reinterpret_cast<const char*>(l.oh.data()), l.oh.size())};
}

std::string bytes(std::span<const uint8_t> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

std::span<const uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

NlmServer::NlmServer(const NlmOptions& opt) : opt_(opt) {}

Result<std::unique_ptr<NlmServer>> NlmServer::start(const PublishedExports* pub, const NlmOptions& opt) {
  if (pub == nullptr && !opt.check_fh) return make_error(Errc::kInvalidArgument, "NLM: no exports to check handles");
  std::unique_ptr<NlmServer> s(new NlmServer(opt));
  if (!s->opt_.check_fh) {
    // As an NFS call is checked (nfs3_server.cc): the export the handle's
    // id names in the table in force, the calling address on its list, the
    // object still there; and the rule's ro for an exclusive lock.
    s->opt_.check_fh = [pub](std::span<const uint8_t> fh, bool exclusive, const sockaddr_storage& peer) {
      nfs::Fh3 f;
      if (!f.assign(fh)) return nlm::Stat::kStaleFh;
      std::shared_ptr<const ExportTable> table = pub->current();
      const Export* e = table->by_handle(f);
      if (e == nullptr) return nlm::Stat::kStaleFh;
      const ClientRule* rule = e->rule_for(ClientAddr::from_sockaddr(reinterpret_cast<const sockaddr*>(&peer)));
      if (rule == nullptr) return nlm::Stat::kFailed;
      int fd = -1;
      if (e->open_handle(f, &fd) != nfs::Nfs3Stat::kOk) return nlm::Stat::kStaleFh;
      close(fd);
      if (exclusive && rule->opt.read_only) return nlm::Stat::kRofs;
      return nlm::Stat::kGranted;
    };
  }
  s->grace_end_ = Clock::now() + std::chrono::seconds(opt.grace_seconds);
  if (opt.use_statd) {
    s->nsm_ = std::make_unique<NsmClient>(opt.nsm);
  }
  if (!opt.notify.path.empty()) {
    SmNotifierOptions no = opt.notify;
    no.client_rpcbind_port = opt.client_rpcbind_port;
    no.window = std::max<std::chrono::milliseconds>(no.window, std::chrono::seconds(opt.grace_seconds));
    auto n = SmNotifier::start(no);
    if (!n) return n.status();
    s->notifier_ = std::move(*n);
  }
  s->callout_ = std::thread([p = s.get()] { p->callout_loop(); });
  RpcServiceOptions so;
  so.name = "NLM";
  so.addr = opt.addr;
  so.port = opt.port;
  so.loopback_udp = true;  // where statd calls back
  auto svc = RpcService::start(so, [p = s.get()](const RpcRequest& r, std::vector<uint8_t>* out) {
    return p->handle(r, out);
  });
  if (!svc) return svc.status();
  s->svc_ = std::move(*svc);
  return s;
}

NlmServer::~NlmServer() {
  svc_.reset();  // no more calls
  {
    std::lock_guard<std::mutex> g(jobs_mu_);
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  if (callout_.joinable()) callout_.join();
  notifier_.reset();
  if (nsm_) {
    Status s = nsm_->unmonitor_all();
    if (!s) TERN_LOG(kInfo, "nlm", "SM_UNMON_ALL: %s", s.to_string().c_str());
  }
}

bool NlmServer::in_grace() const { return Clock::now() < grace_end_; }

void NlmServer::notify_clients() {
  if (notifier_) notifier_->begin();
}

void NlmServer::settle_holder(const std::string& ip) {
  if (!notifier_) return;
  // Under mu_, as hold() is called: a lock granted on another thread
  // between the look and let_go() would otherwise be forgotten.
  std::lock_guard<std::mutex> g(mu_);
  auto it = monitored_.find(ip);
  if (it != monitored_.end())
    for (const std::string& caller : it->second)
      if (table_.holds_any(caller)) return;
  notifier_->let_go(ip);
}

size_t NlmServer::locks_held() const {
  std::lock_guard<std::mutex> g(mu_);
  return table_.lock_count();
}

void NlmServer::enqueue(Job j) {
  {
    std::lock_guard<std::mutex> g(jobs_mu_);
    if (stopping_) return;
    jobs_.push_back(std::move(j));
  }
  jobs_cv_.notify_one();
}

void NlmServer::grant_waiters(std::vector<Waiter> granted) {
  for (Waiter& w : granted) {
    stats_.granted.fetch_add(1, std::memory_order_relaxed);
    Job j{Job::Kind::kGranted, std::move(w), {}, {}, true, 0, {}};
    enqueue(std::move(j));
  }
}

void NlmServer::callout_loop() {
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> g(jobs_mu_);
      jobs_cv_.wait(g, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      j = std::move(jobs_.front());
      jobs_.pop_front();
    }
    switch (j.kind) {
      case Job::Kind::kMonitor: {
        if (!nsm_) break;
        Status s = nsm_->monitor(ip_of(j.peer));
        if (!s && !statd_warned_) {
          statd_warned_ = true;
          TERN_LOG(kWarn, "nlm",
                   "cannot monitor lock holders with rpc.statd (%s): a client that reboots keeps its locks until it "
                   "sends FREE_ALL or tern-nfsd restarts",
                   s.to_string().c_str());
        }
        break;
      }
      case Job::Kind::kGranted:
        send_granted(j.waiter);
        break;
      case Job::Kind::kMsgRes: {
        bool denied = false;
        send_to_client_nlm(j.peer, nullptr, j.tcp, j.proc, j.args, &denied);
        break;
      }
    }
  }
}

void NlmServer::send_to_client_nlm(const sockaddr_storage& peer, const sockaddr_storage* local, bool tcp,
                                   uint32_t proc, std::span<const uint8_t> args, bool* denied) {
  *denied = false;
  stats_.callbacks.fetch_add(1, std::memory_order_relaxed);
  auto port = rpcbind_getport(peer, nlm::kProgram, nlm::kVersion, tcp, opt_.client_rpcbind_port);
  if (!port) {
    stats_.callback_failures.fetch_add(1, std::memory_order_relaxed);
    TERN_LOG(kInfo, "nlm", "%s to %s: no NLM service found: %s", nlm::proc_name(proc), ip_of(peer).c_str(),
             port.status().to_string().c_str());
    return;
  }
  RpcCallOptions co;
  co.timeout_ms = 5000;
  co.reserved_port = true;
  sockaddr_storage src{};
  if (local != nullptr && local->ss_family == peer.ss_family) {
    src = *local;
    co.source = &src;
  }
  auto r = rpc_call(rpc_peer_of(peer, *port, tcp ? RpcTransport::kStream : RpcTransport::kDatagram), nlm::kProgram,
                    nlm::kVersion, proc, args, co);
  if (!r) {
    stats_.callback_failures.fetch_add(1, std::memory_order_relaxed);
    TERN_LOG(kInfo, "nlm", "%s to %s: %s", nlm::proc_name(proc), ip_of(peer).c_str(), r.status().to_string().c_str());
    return;
  }
  if (proc == static_cast<uint32_t>(nlm::Proc::kGranted)) {
    nlm::Res res;
    *denied = nlm::decode(*r, &res) && res.stat != nlm::Stat::kGranted;
  }
}

void NlmServer::send_granted(const Waiter& w) {
  const std::string me = local_host_name();
  nlm::TestArgs a;
  a.cookie = span_of(w.cookie);
  a.exclusive = w.exclusive;
  a.lock = {me, span_of(w.fh), span_of(w.owner.oh), w.owner.svid, w.offset, w.len};
  std::vector<uint8_t> buf(4096);
  xdr::XdrWriter x(buf);
  nlm::encode(x, a);
  if (!x.ok()) return;
  bool denied = false;
  send_to_client_nlm(w.peer, &w.local, w.tcp, static_cast<uint32_t>(nlm::Proc::kGranted), x.written(), &denied);
  if (!denied) return;
  // The client no longer waits for it (it gave up, or was interrupted):
  // the lock goes, and whoever waits behind it may get it.
  std::vector<Waiter> next;
  {
    std::lock_guard<std::mutex> g(mu_);
    next = table_.unlock(w.fh, w.owner, w.range);
  }
  grant_waiters(std::move(next));
  settle_holder(ip_of(w.peer));
}

void NlmServer::release_host(const std::string& host) {
  std::vector<Waiter> granted;
  size_t before, after;
  {
    std::lock_guard<std::mutex> g(mu_);
    before = table_.lock_count();
    granted = table_.free_host(host);
    after = table_.lock_count();
  }
  stats_.freed_hosts.fetch_add(1, std::memory_order_relaxed);
  TERN_LOG(kWarn, "nlm", "released the locks of %s (%zu locks)", host.c_str(),
           before + granted.size() >= after ? before + granted.size() - after : 0);
  grant_waiters(std::move(granted));
  std::vector<std::string> from;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [ip, callers] : monitored_)
      if (callers.count(host)) from.push_back(ip);
  }
  for (const std::string& ip : from) settle_holder(ip);
}

nlm::TestRes NlmServer::do_test(const nlm::TestArgs& a, const RpcRequest& req, std::string* holder_oh) {
  nlm::TestRes r;
  r.cookie = a.cookie;
  if (in_grace()) {
    r.stat = nlm::Stat::kDeniedGracePeriod;
    return r;
  }
  auto range = ByteRange::from_nlm(a.lock.offset, a.lock.len);
  if (!range) {
    r.stat = nlm::Stat::kFbig;
    return r;
  }
  // TEST takes no lock: ro does not matter.
  if (nlm::Stat s = opt_.check_fh(a.lock.fh, false, req.peer); s != nlm::Stat::kGranted) {
    r.stat = s;
    return r;
  }
  std::lock_guard<std::mutex> g(mu_);
  auto c = table_.conflict(bytes(a.lock.fh), owner_of(a.lock), a.exclusive, *range);
  if (!c) {
    r.stat = nlm::Stat::kGranted;
    return r;
  }
  r.stat = nlm::Stat::kDenied;
  // The holder's owner handle is copied out of the table, whose entry may
  // change once the lock is let go.
  *holder_oh = c->owner.oh;
  r.holder = {c->exclusive, c->owner.svid, span_of(*holder_oh), c->range.first, c->range.nlm_len()};
  return r;
}

nlm::Stat NlmServer::do_lock(const nlm::LockArgs& a, const RpcRequest& req, bool monitor) {
  const bool grace = in_grace();
  if (grace && !a.reclaim) return nlm::Stat::kDeniedGracePeriod;
  // A reclaim after the grace period could take a lock someone else was
  // given since: refused, as other lock managers refuse it.
  if (!grace && a.reclaim) return nlm::Stat::kDeniedGracePeriod;
  auto range = ByteRange::from_nlm(a.lock.offset, a.lock.len);
  if (!range) return nlm::Stat::kFbig;
  if (nlm::Stat s = opt_.check_fh(a.lock.fh, a.exclusive, req.peer); s != nlm::Stat::kGranted) return s;
  Waiter w;
  w.owner = owner_of(a.lock);
  w.exclusive = a.exclusive;
  w.range = *range;
  w.fh = bytes(a.lock.fh);
  w.cookie = bytes(a.cookie);
  w.offset = a.lock.offset, w.len = a.lock.len;
  w.peer = req.peer, w.local = req.local, w.tcp = req.tcp;
  LockOutcome o;
  bool new_host = false;
  {
    std::lock_guard<std::mutex> g(mu_);
    o = table_.lock(w.fh, w, a.block);
    if (monitor && (o == LockOutcome::kGranted || o == LockOutcome::kBlocked)) {
      new_host = monitored_[ip_of(req.peer)].insert(w.owner.host).second;
      // Recorded for the next start, which tells it to reclaim (as the
      // host's statd records those it monitors); an unmonitored lock is
      // not. Under mu_ (the notifier's lock is taken inside it, never the
      // other way), in step with settle_holder().
      if (notifier_) notifier_->hold(ip_of(req.peer), server_name_of(req.local));
    }
  }
  if (new_host) enqueue(Job{Job::Kind::kMonitor, {}, req.peer, w.owner.host, req.tcp, 0, {}});
  if (o == LockOutcome::kGranted && a.reclaim) stats_.reclaimed.fetch_add(1, std::memory_order_relaxed);
  switch (o) {
    case LockOutcome::kGranted: return nlm::Stat::kGranted;
    case LockOutcome::kDenied: return nlm::Stat::kDenied;
    case LockOutcome::kBlocked: return nlm::Stat::kBlocked;
    case LockOutcome::kNoLocks: return nlm::Stat::kDeniedNolocks;
  }
  return nlm::Stat::kFailed;
}

nlm::Stat NlmServer::do_cancel(const nlm::CancArgs& a, const RpcRequest& req) {
  auto range = ByteRange::from_nlm(a.lock.offset, a.lock.len);
  if (!range) return nlm::Stat::kFbig;
  bool cancelled;
  {
    std::lock_guard<std::mutex> g(mu_);
    cancelled = table_.cancel(bytes(a.lock.fh), owner_of(a.lock), a.exclusive, *range);
  }
  if (cancelled) settle_holder(ip_of(req.peer));
  return cancelled ? nlm::Stat::kGranted : nlm::Stat::kDenied;
}

nlm::Stat NlmServer::do_unlock(const nlm::UnlockArgs& a, const RpcRequest& req) {
  auto range = ByteRange::from_nlm(a.lock.offset, a.lock.len);
  if (!range) return nlm::Stat::kFbig;
  std::vector<Waiter> granted;
  {
    std::lock_guard<std::mutex> g(mu_);
    granted = table_.unlock(bytes(a.lock.fh), owner_of(a.lock), *range);
  }
  grant_waiters(std::move(granted));
  settle_holder(ip_of(req.peer));
  return nlm::Stat::kGranted;
}

bool NlmServer::handle_nlm(const RpcRequest& req, uint32_t xid, uint32_t proc, std::span<const uint8_t> args,
                           std::vector<uint8_t>* reply) {
  std::vector<uint8_t> buf(4096);
  xdr::XdrWriter w(buf);
  auto garbage = [&] {
    rpc_accepted(reply, xid, oc::AcceptStat::kGarbageArgs, {});
    return true;
  };
  // The _MSG forms answer with a call of their _RES procedure; the RPC
  // reply itself is void.
  uint32_t res_proc = 0;
  switch (static_cast<nlm::Proc>(proc)) {
    case nlm::Proc::kNull:
    case nlm::Proc::kTestRes:
    case nlm::Proc::kLockRes:
    case nlm::Proc::kCancelRes:
    case nlm::Proc::kUnlockRes:
    case nlm::Proc::kGrantedRes:
      break;
    case nlm::Proc::kTest:
    case nlm::Proc::kTestMsg: {
      nlm::TestArgs a;
      if (!nlm::decode(args, &a)) return garbage();
      std::string holder_oh;
      nlm::encode(w, do_test(a, req, &holder_oh));
      res_proc = proc == static_cast<uint32_t>(nlm::Proc::kTestMsg) ? static_cast<uint32_t>(nlm::Proc::kTestRes) : 0;
      break;
    }
    case nlm::Proc::kLock:
    case nlm::Proc::kLockMsg:
    case nlm::Proc::kNmLock: {
      nlm::LockArgs a;
      if (!nlm::decode(args, &a)) return garbage();
      const nlm::Stat s = do_lock(a, req, proc != static_cast<uint32_t>(nlm::Proc::kNmLock));
      (s == nlm::Stat::kGranted ? stats_.granted
       : s == nlm::Stat::kBlocked ? stats_.blocked
       : s == nlm::Stat::kDeniedGracePeriod ? stats_.grace_denied
                                             : stats_.denied)
          .fetch_add(1, std::memory_order_relaxed);
      nlm::encode(w, nlm::Res{a.cookie, s});
      res_proc = proc == static_cast<uint32_t>(nlm::Proc::kLockMsg) ? static_cast<uint32_t>(nlm::Proc::kLockRes) : 0;
      break;
    }
    case nlm::Proc::kCancel:
    case nlm::Proc::kCancelMsg: {
      nlm::CancArgs a;
      if (!nlm::decode(args, &a)) return garbage();
      nlm::encode(w, nlm::Res{a.cookie, do_cancel(a, req)});
      res_proc =
          proc == static_cast<uint32_t>(nlm::Proc::kCancelMsg) ? static_cast<uint32_t>(nlm::Proc::kCancelRes) : 0;
      break;
    }
    case nlm::Proc::kUnlock:
    case nlm::Proc::kUnlockMsg: {
      nlm::UnlockArgs a;
      if (!nlm::decode(args, &a)) return garbage();
      nlm::encode(w, nlm::Res{a.cookie, do_unlock(a, req)});
      res_proc =
          proc == static_cast<uint32_t>(nlm::Proc::kUnlockMsg) ? static_cast<uint32_t>(nlm::Proc::kUnlockRes) : 0;
      break;
    }
    case nlm::Proc::kGranted:
    case nlm::Proc::kGrantedMsg: {
      // Only a client waits for GRANTED; none lives in this server.
      nlm::TestArgs a;
      if (!nlm::decode(args, &a)) return garbage();
      if (proc == static_cast<uint32_t>(nlm::Proc::kGranted)) nlm::encode(w, nlm::Res{a.cookie, nlm::Stat::kDenied});
      break;
    }
    case nlm::Proc::kShare:
    case nlm::Proc::kUnshare: {
      nlm::ShareArgs a;
      if (!nlm::decode(args, &a)) return garbage();
      nlm::encode(w, nlm::ShareRes{a.cookie, nlm::Stat::kFailed, 0});
      break;
    }
    case nlm::Proc::kNsmNotify:
      return handle_nsm_notify(req, xid, args, reply);
    case nlm::Proc::kFreeAll: {
      nlm::Notify a;
      if (!nlm::decode(args, &a)) return garbage();
      release_host(std::string(a.name));
      break;
    }
    default:
      rpc_accepted(reply, xid, oc::AcceptStat::kProcUnavail, {});
      return true;
  }
  if (!w.ok()) {
    rpc_accepted(reply, xid, oc::AcceptStat::kSystemErr, {});
    return true;
  }
  if (res_proc != 0) {
    enqueue(Job{Job::Kind::kMsgRes, {}, req.peer, {}, req.tcp, res_proc,
                std::vector<uint8_t>(w.written().begin(), w.written().end())});
    rpc_accepted(reply, xid, oc::AcceptStat::kSuccess, {});
    return true;
  }
  rpc_accepted(reply, xid, oc::AcceptStat::kSuccess, w.written());
  return true;
}

bool NlmServer::handle_nsm_notify(const RpcRequest& req, uint32_t xid, std::span<const uint8_t> args,
                                  std::vector<uint8_t>* reply) {
  // Only the host's own statd may say a client rebooted: from anywhere
  // else this would let anyone drop anyone's locks.
  if (!is_loopback(req.peer)) {
    TERN_LOG(kWarn, "nlm", "NSM callback from %s refused (only loopback)", ip_of(req.peer).c_str());
    oc::ReplyHeader h;
    h.xid = xid;
    h.stat = oc::ReplyStat::kDenied;
    h.reject = oc::RejectStat::kAuthError;
    h.auth = oc::AuthStat::kTooWeak;
    reply->resize(oc::reply_size(h));
    reply->resize(oc::encode_reply(h, *reply));
    return true;
  }
  nsm::Status st;
  if (!nsm::decode(args, &st)) {
    rpc_accepted(reply, xid, oc::AcceptStat::kGarbageArgs, {});
    return true;
  }
  std::set<std::string> callers;
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = monitored_.find(std::string(st.mon_name));
    if (it != monitored_.end()) {
      callers = std::move(it->second);
      monitored_.erase(it);
    }
  }
  callers.insert(std::string(st.mon_name));
  for (const std::string& c : callers) release_host(c);
  // It rebooted: nothing of ours to reclaim, nothing to tell it.
  if (notifier_) notifier_->forget(std::string(st.mon_name));
  rpc_accepted(reply, xid, oc::AcceptStat::kSuccess, {});
  return true;
}

bool NlmServer::handle(const RpcRequest& req, std::vector<uint8_t>* reply) {
  oc::CallHeader h;
  size_t header_len = 0;
  if (RpcDecoded r = rpc_decode_call(req.msg, &h, &header_len, reply); r != RpcDecoded::kCall)
    return r == RpcDecoded::kAnswered;
  stats_.calls.fetch_add(1, std::memory_order_relaxed);
  const std::span<const uint8_t> args = req.msg.subspan(header_len);
  if (h.prog == nlm::kProgram) {
    if (h.vers != nlm::kVersion) {
      rpc_accepted(reply, h.xid, oc::AcceptStat::kProgMismatch, {}, nlm::kVersion, nlm::kVersion);
      return true;
    }
    return handle_nlm(req, h.xid, h.proc, args, reply);
  }
  rpc_accepted(reply, h.xid, oc::AcceptStat::kProgUnavail, {});
  return true;
}

}  // namespace tern::nfsd
