// pmd/shm control path: device, queue creation, and connection management over
// an AF_UNIX SOCK_SEQPACKET socket (memif-style). The client creates the
// connection area memfd and passes it in its hello; the server maps it on
// accept. Every message and the area header are peer input and are checked.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "mem/memfd.h"
#include "rdmadev/rdmadev_driver.h"
#include "shm/shm_internal.h"

namespace tern::shm {

namespace {

bool fill_addr(const std::string& path, sockaddr_un* sa) {
  std::memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa->sun_path) return false;
  std::memcpy(sa->sun_path, path.data(), path.size());
  return true;
}

// A name beside `path` in its directory for the socket to be bound and set
// up under before it is renamed onto `path`; empty when none fits in
// sun_path. Unique per listen() of this process (engines of one process may
// listen in one directory at once, from their own threads).
std::string listen_temp_name(const std::string& path) {
  static std::atomic<uint32_t> serial{0};
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  char name[48];
  std::snprintf(name, sizeof name, ".tern-listen-%d-%u", static_cast<int>(getpid()),
                serial.fetch_add(1, std::memory_order_relaxed));
  std::string tmp = dir + name;
  sockaddr_un probe;
  if (tmp == path || !fill_addr(tmp, &probe)) return std::string();
  return tmp;
}

std::vector<uint8_t> pdata_of(const ShmMsg& m) { return {m.pdata, m.pdata + m.pdata_len}; }

// "pid 1234 uid 1000": who connected, for log lines about a misbehaving peer,
// and the request's peer_host() (the same words ShmQp::peer_host() says).
std::string socket_peer(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return "an unknown process";
  return "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
}

// "socket mode 0660 owner 0:100", or why the socket could not be looked at:
// what a permission error needs to be acted on.
std::string socket_access(const std::string& path) {
  struct stat sb;
  if (stat(path.c_str(), &sb) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  char b[96];
  std::snprintf(b, sizeof b, "socket mode %04o owner %u:%u; this process is uid %u gid %u", sb.st_mode & 07777,
                sb.st_uid, sb.st_gid, geteuid(), getegid());
  return b;
}

// Why a connect to the socket at `path` failed, in words a person can act on.
Status connect_error(const std::string& path, int e) {
  if (e == EACCES || e == EPERM)
    return make_sys_error(Errc::kInvalidArgument, e, "shm: cannot connect to %s (%s)", path.c_str(),
                          socket_access(path).c_str());
  if (e == ECONNREFUSED)
    return make_sys_error(Errc::kDisconnected, e,
                          "shm: nobody listens on %s (the socket file is there but no server accepts on it: a "
                          "server that died, or one still starting)",
                          path.c_str());
  return make_sys_error(Errc::kDisconnected, e, "shm: nobody listens on %s", path.c_str());
}

void set_pdata(ShmMsg* m, std::span<const uint8_t> p) {
  m->pdata_len = static_cast<uint32_t>(p.size());
  if (!p.empty()) std::memcpy(m->pdata, p.data(), p.size());
}

}  // namespace

ShmConnRequest::~ShmConnRequest() {
  if (sock >= 0) close(sock);
  if (area_fd >= 0) close(area_fd);
}

ShmDevice::ShmDevice(const ShmDeviceConfig& cfg) : cfg_(cfg) {
  // Distinct for every device of this process: a server gives each its own
  // link, which only that device's polls read (shm_link.cc).
  static std::atomic<uint64_t> next_token{1};
  token_ = next_token.fetch_add(1, std::memory_order_relaxed);
  caps_.driver = "shm";
  caps_.name = "shm:" + cfg.path;
  caps_.max_qp_wr = cfg.max_qp_wr;
  caps_.max_send_sge = kMaxSge;
  caps_.max_recv_sge = kMaxSge;
  caps_.max_cqe = cfg.max_cqe;
  caps_.max_fast_reg_depth = cfg.fast_reg_depth;
  caps_.fast_reg_page_size = 4096;
  caps_.max_mr_size = 1ull << 40;
  caps_.max_private_data = kMaxPrivateData;
  caps_.fast_reg = cfg.fast_reg;
  caps_.remote_invalidation = cfg.fast_reg;
  caps_.memory_windows = false;
  caps_.fast_reg_qp_bound = cfg.qp_bound;
  caps_.remote_inv_qp_bound = cfg.qp_bound && cfg.fast_reg && cfg.inv_qp_check;
  if (!cfg.fast_reg) caps_.max_fast_reg_depth = 0;
  caps_.max_srq_wr = kMaxSrqWr;
  caps_.max_srq_sge = kMaxSge;
}

ShmDevice::~ShmDevice() {
  TERN_ASSERT(qps_.empty(), "device destroyed with %zu QPs alive", qps_.size());
  TERN_ASSERT(srqs_ == 0, "device destroyed with %u SRQs alive", srqs_);
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    unlink(cfg_.path.c_str());
  }
  for (const Pending& p : handshaking_) close(p.fd);
  while (ShmCmEvent* e = events_.pop_front()) delete e;
  for (int fd : {epfd_, wake_fd_, timer_fd_})
    if (fd >= 0) close(fd);
}

Result<std::unique_ptr<Pd>> ShmDevice::alloc_pd() { return std::unique_ptr<Pd>(new ShmPd(this)); }

Result<std::unique_ptr<Cq>> ShmDevice::create_cq(uint32_t capacity) {
  if (capacity == 0 || capacity > caps_.max_cqe)
    return make_error(Errc::kInvalidArgument, "create_cq: capacity %u not in [1, %u]", capacity, caps_.max_cqe);
  return std::unique_ptr<Cq>(new ShmCq(this, capacity));
}

Result<std::unique_ptr<Qp>> ShmDevice::create_qp(const QpInit& init) {
  auto* pd = dynamic_cast<ShmPd*>(init.pd);
  auto* scq = dynamic_cast<ShmCq*>(init.send_cq);
  auto* rcq = dynamic_cast<ShmCq*>(init.recv_cq);
  if (pd == nullptr || scq == nullptr || rcq == nullptr)
    return make_error(Errc::kInvalidArgument, "create_qp: pd, send_cq and recv_cq must come from an shm device");
  // With an SRQ the QP has no receive queue: rq_depth and max_recv_sge are
  // not looked at (rdmadev.h), but the SRQ must be this device's, on this PD.
  auto* srq = init.srq != nullptr ? dynamic_cast<ShmSrq*>(init.srq) : nullptr;
  if (init.srq != nullptr && (srq == nullptr || srq->device() != this || srq->pd() != pd))
    return make_error(Errc::kInvalidArgument, "create_qp: the SRQ must come from this shm device and the QP's PD");
  const bool own_rq = srq == nullptr;
  if (init.sq_depth == 0 || init.sq_depth > caps_.max_qp_wr ||
      (own_rq && (init.rq_depth == 0 || init.rq_depth > caps_.max_qp_wr)))
    return make_error(Errc::kInvalidArgument, "create_qp: queue depths %u/%u not in [1, %u]", init.sq_depth,
                      init.rq_depth, caps_.max_qp_wr);
  if (init.max_send_sge > kMaxSge || (own_rq && init.max_recv_sge > kMaxSge))
    return make_error(Errc::kInvalidArgument, "create_qp: at most %u SGEs per WR", kMaxSge);
  auto* qp = new ShmQp(this, pd, init, next_qpn_++);
  qp->dev_at() = static_cast<uint32_t>(qps_.size());
  qps_.push_back(qp);
  return std::unique_ptr<Qp>(qp);
}

void ShmDevice::queue_event(CmEvent ev) {
  auto* e = new ShmCmEvent{std::move(ev)};
  e->qp = static_cast<ShmQp*>(e->ev.qp);  // only ever one of ours
  events_.push_back(e);
  if (e->qp != nullptr) e->qp->cm_events_.push_back(e);
  if (armed_) self_wake();
}

void ShmDevice::forget_qp(ShmQp* qp) {
  // The last QP takes its place: what walks qps_ (wait mode, idle
  // trimming) looks at every QP, in no order it depends on.
  const uint32_t i = qp->dev_at();
  TERN_CHECK(i < qps_.size() && qps_[i] == qp, "QP not this device's");
  qps_[i] = qps_.back();
  qps_[i]->dev_at() = i;
  qps_.pop_back();
  if (qp->connecting_link_.linked) connecting_.remove(qp);
  // Events already queued for it must not hand out a dangling pointer:
  // its own, found through it, whatever else is queued.
  while (ShmCmEvent* e = qp->cm_events_.pop_front()) {
    ++cm_looked_;
    events_.remove(e);
    delete e;
  }
}

ShmQp* ShmDevice::own_qp(Qp* qp) {
  // The QP's own word, not a search of ours: connect and accept cost the
  // same beside 10 QPs or 10,000.
  auto* q = dynamic_cast<ShmQp*>(qp);
  return q != nullptr && q->device() == this ? q : nullptr;
}

Status ShmDevice::listen() {
  if (listen_fd_ >= 0) return make_error(Errc::kBadState, "shm: already listening on %s", cfg_.path.c_str());
  sockaddr_un sa;
  if (!fill_addr(cfg_.path, &sa))
    return make_error(Errc::kInvalidArgument, "shm: socket path '%s' is empty or too long", cfg_.path.c_str());
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_sys_error(Errc::kNoResources, errno, "shm: socket");
  struct stat sb;
  if (lstat(cfg_.path.c_str(), &sb) == 0) {
    if (!S_ISSOCK(sb.st_mode)) {
      close(fd);
      return make_error(Errc::kInvalidArgument, "shm: %s exists and is not a socket", cfg_.path.c_str());
    }
    // A socket file left by a dead server is removed; a live server keeps
    // it. The probe connects and closes without a word, which the live
    // server takes for what it is (read_hellos), not for a bad hello.
    int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int probe_errno = 0;
    bool alive = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (!alive) probe_errno = errno;
    if (probe >= 0) close(probe);
    if (alive) {
      close(fd);
      return make_error(Errc::kBadState, "shm: another server is listening on %s", cfg_.path.c_str());
    }
    if (probe_errno == EACCES || probe_errno == EPERM) {
      // We cannot tell whether it is live: it is not ours to remove.
      close(fd);
      return make_sys_error(Errc::kInvalidArgument, probe_errno,
                            "shm: cannot probe %s (%s): another user's server? pick another path",
                            cfg_.path.c_str(), socket_access(cfg_.path).c_str());
    }
    unlink(cfg_.path.c_str());
  }
  // The socket is made under a private name and renamed onto the path only
  // once it listens, with its mode and group set: a client that waits for
  // the path to appear (a script, a test, a supervisor's readiness check)
  // never meets a file nobody listens on yet (ECONNREFUSED), nor one it may
  // not open. rename() keeps the socket's inode, which is what connect()
  // finds. A path too long to have a sibling name is bound directly.
  const std::string tmp = listen_temp_name(cfg_.path);
  const std::string& at = tmp.empty() ? cfg_.path : tmp;
  sockaddr_un ta;
  (void)fill_addr(at, &ta);  // fits: listen_temp_name checked
  // mode=: the socket file is born with at most the requested bits (bind
  // applies the umask to the socket's own mode), then gets exactly them.
  if (cfg_.socket_mode >= 0 && fchmod(fd, static_cast<mode_t>(cfg_.socket_mode)) != 0) {
    int e = errno;
    close(fd);
    return make_sys_error(Errc::kInvalidArgument, e, "shm: mode=%04o on the socket", cfg_.socket_mode);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&ta), sizeof ta) != 0) {
    int e = errno;
    close(fd);
    if (e == EACCES || e == EPERM)
      return make_sys_error(Errc::kInvalidArgument, e, "shm: cannot create %s (its directory is not writable by "
                            "uid %u)", cfg_.path.c_str(), geteuid());
    return make_sys_error(Errc::kInvalidArgument, e, "shm: cannot listen on %s", cfg_.path.c_str());
  }
  Status access = Status::ok();
  if (cfg_.socket_mode >= 0 && chmod(at.c_str(), static_cast<mode_t>(cfg_.socket_mode)) != 0)
    access = make_sys_error(Errc::kInvalidArgument, errno, "shm: mode=%04o on %s", cfg_.socket_mode,
                            cfg_.path.c_str());
  if (access && cfg_.socket_gid >= 0 && lchown(at.c_str(), static_cast<uid_t>(-1),
                                               static_cast<gid_t>(cfg_.socket_gid)) != 0) {
    int e = errno;
    access = make_sys_error(Errc::kInvalidArgument, e, "shm: group=%s on %s%s", cfg_.group.c_str(),
                            cfg_.path.c_str(),
                            e == EPERM ? ": a process can only give its files to a group it is in" : "");
  }
  if (access && ::listen(fd, 128) != 0)
    access = make_sys_error(Errc::kInvalidArgument, errno, "shm: cannot listen on %s", cfg_.path.c_str());
  if (access && !tmp.empty() && rename(tmp.c_str(), cfg_.path.c_str()) != 0)
    access = make_sys_error(Errc::kInvalidArgument, errno, "shm: cannot put the socket at %s", cfg_.path.c_str());
  if (!access) {
    close(fd);
    unlink(at.c_str());
    return access;
  }
  listen_fd_ = fd;
  watch_fd(fd);
  TERN_LOG(kInfo, "shm", "listening on %s", cfg_.path.c_str());
  return Status::ok();
}

Status ShmDevice::connect(Qp* qpi, std::span<const uint8_t> pdata) {
  ShmQp* qp = own_qp(qpi);
  if (qp == nullptr) return make_error(Errc::kInvalidArgument, "shm connect: QP is not from this device");
  if (qp->state() != QpState::kInit)
    return make_error(Errc::kBadState, "shm connect: QP %u is %s, not init", qp->qp_num(), qp_state_name(qp->state()));
  if (pdata.size() > kMaxPrivateData)
    return make_error(Errc::kInvalidArgument, "shm connect: %zu bytes of private data, at most %u", pdata.size(),
                      kMaxPrivateData);
  sockaddr_un sa;
  if (!fill_addr(cfg_.path, &sa))
    return make_error(Errc::kInvalidArgument, "shm: socket path '%s' is empty or too long", cfg_.path.c_str());

  size_t len = area_size(cfg_.ring_slots);
  // Sealed: the server maps it too, and refuses an area we could shrink.
  auto sealed = mem::create_sealed_memfd("tern-shm-conn", len, false);
  if (!sealed) return make_error(sealed.status().code(), "shm connect: %s", sealed.status().to_string().c_str());
  int afd = *sealed;
  Status st = qp->attach_area(afd, true, cfg_.ring_slots, len);
  if (!st) {
    close(afd);
    return st;
  }
  qp->set_state(QpState::kConnecting);
  connecting_.push_back(qp);  // until read_connecting takes its answer (or finds it gone)
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    close(afd);
    return make_sys_error(Errc::kNoResources, errno, "shm connect: socket");
  }
  // AF_UNIX connect completes at once (or fails at once): no listener, or a
  // socket we may not connect to, is the rdma_cm "unreachable" case and is
  // reported as that event, with which of the two it was.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    close(fd);
    close(afd);
    qp->set_state(QpState::kError);
    CmEvent ev{CmEventType::kUnreachable};
    ev.qp = qp;
    ev.status = connect_error(cfg_.path, e);
    queue_event(std::move(ev));
    return Status::ok();
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  ShmMsg m = make_msg(kMsgHello);
  m.qp_num = qp->qp_num();
  m.ring_slots = cfg_.ring_slots;
  m.area_size = len;
  m.seg_length = token_;  // the server's links are per (our pid, this token)
  set_pdata(&m, pdata);
  int e = send_msg(fd, m, afd);
  close(afd);  // mapped already; the server got its own copy with the message
  if (e != 0) {
    close(fd);
    qp->set_state(QpState::kError);
    CmEvent ev{CmEventType::kUnreachable};
    ev.qp = qp;
    ev.status = make_sys_error(Errc::kDisconnected, e, "shm: hello to %s failed", cfg_.path.c_str());
    queue_event(std::move(ev));
    return Status::ok();
  }
  qp->set_socket(fd);
  return Status::ok();
}

Status ShmDevice::accept(ConnRequest* reqi, Qp* qpi, std::span<const uint8_t> pdata) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == reqi; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "shm accept: unknown connection request");
  ShmQp* qp = own_qp(qpi);
  if (qp == nullptr) return make_error(Errc::kInvalidArgument, "shm accept: QP is not from this device");
  if (qp->state() != QpState::kInit)
    return make_error(Errc::kBadState, "shm accept: QP %u is %s, not init", qp->qp_num(), qp_state_name(qp->state()));
  if (pdata.size() > kMaxPrivateData)
    return make_error(Errc::kInvalidArgument, "shm accept: %zu bytes of private data, at most %u", pdata.size(),
                      kMaxPrivateData);
  std::unique_ptr<ShmConnRequest> req = std::move(*it);
  requests_.erase(it);
  Status st = qp->attach_area(req->area_fd, false, req->ring_slots, req->area_size);
  if (!st) return st;  // req's destructor closes the socket: the client sees unreachable
  // The connection's slot in its client's link (shm_link.cc); the QP holds
  // it until it is destroyed.
  uint32_t slot = 0;
  ShmPeerLink* link = link_for_accept(req->sock, req->peer_token, &slot);
  if (link == nullptr) return make_error(Errc::kNoResources, "shm accept: cannot make a link memfd");
  qp->attach_link(link, slot);
  ShmMsg m = make_msg(kMsgAccept);
  m.qp_num = qp->qp_num();
  m.seg_index = slot;
  set_pdata(&m, pdata);
  if (int e = send_msg(req->sock, m, link->fd); e != 0)
    return make_sys_error(Errc::kDisconnected, e, "shm accept: the client went away");
  qp->set_socket(req->sock);
  qp->set_peer_qpn(req->peer_qpn);
  req->sock = -1;
  qp->set_state(QpState::kRts);
  CmEvent ev{CmEventType::kEstablished};
  ev.qp = qp;
  ev.private_data = req->private_data();
  queue_event(std::move(ev));
  return Status::ok();
}

Status ShmDevice::reject(ConnRequest* reqi, std::span<const uint8_t> pdata) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == reqi; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "shm reject: unknown connection request");
  if (pdata.size() > kMaxPrivateData)
    return make_error(Errc::kInvalidArgument, "shm reject: %zu bytes of private data, at most %u", pdata.size(),
                      kMaxPrivateData);
  ShmMsg m = make_msg(kMsgReject);
  set_pdata(&m, pdata);
  send_msg((*it)->sock, m);  // best effort: a client already gone needs no answer
  requests_.erase(it);
  return Status::ok();
}

// A request is its socket and the client's connection area (both fds) and
// what the hello said: nothing of the device that received it, so another
// device of this process can accept it as it is.
Result<std::unique_ptr<ConnRequest>> ShmDevice::detach(ConnRequest* reqi) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == reqi; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "shm detach: unknown connection request");
  std::unique_ptr<ConnRequest> req = std::move(*it);
  requests_.erase(it);
  return req;
}

Result<ConnRequest*> ShmDevice::adopt(std::unique_ptr<ConnRequest> reqi) {
  auto* req = dynamic_cast<ShmConnRequest*>(reqi.get());
  if (req == nullptr) return make_error(Errc::kInvalidArgument, "shm adopt: not a connection request of pmd/shm");
  reqi.release();
  requests_.push_back(std::unique_ptr<ShmConnRequest>(req));
  return static_cast<ConnRequest*>(req);
}

Status ShmDevice::disconnect(Qp* qpi) {
  ShmQp* qp = own_qp(qpi);
  if (qp == nullptr) return make_error(Errc::kInvalidArgument, "shm disconnect: QP is not from this device");
  if (qp->state() == QpState::kRts) {
    qp->disconnect_gracefully();
  } else if (qp->state() == QpState::kConnecting) {
    qp->enter_error(make_error(Errc::kDisconnected, "connect abandoned"));
  }
  return Status::ok();
}

void ShmDevice::accept_new() {
  if (listen_fd_ < 0 || !listen_ready_) return;
  listen_ready_ = epfd_ < 0;  // without the set: every time
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (handshaking_.size() >= cfg_.max_pending) {
      // Connected but silent sockets would otherwise pile up without bound.
      if (refused_pending_++ == 0)
        TERN_LOG(kWarn, "shm", "%s: refusing connections (first: %s): %u sockets already wait for their hello; "
                 "said once until one is taken again",
                 cfg_.path.c_str(), socket_peer(fd).c_str(), cfg_.max_pending);
      close(fd);
      continue;
    }
    if (refused_pending_ != 0) {
      TERN_LOG(kInfo, "shm", "%s: taking connections again; %llu refused while %u sockets waited for their hello",
               cfg_.path.c_str(), static_cast<unsigned long long>(refused_pending_), cfg_.max_pending);
      refused_pending_ = 0;
    }
    handshaking_.push_back(Pending{fd, monotonic_ns() + uint64_t{cfg_.hello_timeout_ms} * 1000000u});
    watch_fd(fd);
  }
}

void ShmDevice::read_hellos() {
  uint64_t now = handshaking_.empty() ? 0 : monotonic_ns();
  for (size_t i = 0; i < handshaking_.size();) {
    int fd = handshaking_[i].fd;
    ShmMsg m;
    int afd = -1;
    int r = recv_msg(fd, &m, &afd);
    if (r == 0 && now < handshaking_[i].deadline_ns) {
      ++i;
      continue;
    }
    handshaking_.erase(handshaking_.begin() + static_cast<std::ptrdiff_t>(i));
    unwatch_fd(fd);  // closed below, or quiet until accept() hands it to a QP
    std::string why;
    if (r == 0) {
      why = "no hello within " + std::to_string(cfg_.hello_timeout_ms) + " ms";
    } else if (r == -ECONNRESET) {
      // Closed before saying anything: what a second server's "is anyone
      // listening?" probe does. Not an attack; not worth a warning.
      TERN_LOG(kDebug, "shm", "%s: a socket closed before its hello", cfg_.path.c_str());
      close(fd);
      continue;
    } else if (r < 0 || m.type != kMsgHello) {
      why = r < 0 ? "malformed message" : "expected a hello, got message type " + std::to_string(m.type);
    } else if (afd < 0) {
      why = "the hello carried no connection area";
    } else if (m.ring_slots < 16 || m.ring_slots > 65536 || (m.ring_slots & (m.ring_slots - 1)) != 0 ||
               m.area_size != area_size(m.ring_slots)) {
      why = "bad ring geometry in the hello";
    } else if (Status st = mem::check_peer_memfd(afd, m.area_size); !st.is_ok()) {
      why = "connection area: " + st.message();
    }
    if (!why.empty()) {
      TERN_LOG(kWarn, "shm", "%s: dropping a connection from %s: %s", cfg_.path.c_str(), socket_peer(fd).c_str(),
               why.c_str());
      if (afd >= 0) close(afd);
      close(fd);
      continue;
    }
    requests_.push_back(std::make_unique<ShmConnRequest>(fd, afd, m.ring_slots, m.area_size, m.qp_num, pdata_of(m),
                                                         socket_peer(fd), m.seg_length));
    CmEvent ev{CmEventType::kConnectRequest};
    ev.request = requests_.back().get();
    ev.private_data = requests_.back()->private_data();
    queue_event(std::move(ev));
  }
}

void ShmDevice::read_connecting() {
  // Only the QPs whose connect() went out: a poll_cm with nothing pending
  // costs the handshakes in flight, not every QP of the device.
  for (ShmQp *qp = connecting_.front(), *next; qp != nullptr; qp = next) {
    next = connecting_.next(qp);
    ++cm_looked_;
    if (qp->state() != QpState::kConnecting) {  // failed at once, or disconnect() gave up on it
      connecting_.remove(qp);
      continue;
    }
    ShmMsg m;
    int fd = -1;
    int r = recv_msg(qp->socket_fd(), &m, &fd);
    // An ACCEPT brings the link (shm_link.cc): mapped, or known already.
    Result<ShmPeerLink*> link = make_error(Errc::kRemoteError, "shm: the server's ACCEPT carried no link");
    if (r == 1 && m.type == kMsgAccept && fd >= 0 && m.seg_index < kLinkSlots) link = link_for_connect(fd);
    if (fd >= 0) close(fd);
    if (r == 0) continue;
    connecting_.remove(qp);  // every answer below takes it out of kConnecting
    CmEvent ev{CmEventType::kUnreachable};
    ev.qp = qp;
    if (r == 1 && m.type == kMsgAccept && !link) {
      qp->set_state(QpState::kError);
      ev.status = link.status();
    } else if (r == 1 && m.type == kMsgAccept) {
      qp->attach_link(*link, m.seg_index);
      qp->set_peer_qpn(m.qp_num);
      qp->set_state(QpState::kRts);
      ev.type = CmEventType::kEstablished;
      ev.private_data = pdata_of(m);
    } else if (r == 1 && m.type == kMsgReject) {
      qp->set_state(QpState::kError);
      ev.type = CmEventType::kRejected;
      ev.private_data = pdata_of(m);
      ev.status = make_error(Errc::kRemoteError, "shm: the server rejected the connection");
    } else {
      qp->set_state(QpState::kError);
      ev.status = make_error(Errc::kDisconnected, "shm: the server closed the connection during the handshake");
    }
    if (qp->state() == QpState::kError) unwatch_fd(qp->socket_fd());
    queue_event(std::move(ev));
  }
}

void ShmDevice::watch_established() {
  // Control messages (segments, bye) and hang-ups, which is how a dead peer
  // is noticed. Through the epoll set wait mode uses, which holds every
  // connection's socket: a system call that costs by what is ready, where a
  // poll() over every socket cost by how many there are (at 1,024
  // connections, once a millisecond, a tenth of a core). What else the set
  // reports (the listener, handshakes, our eventfd) is for others to read.
  if (epfd_ >= 0 || enable_wait().is_ok()) {
    epoll_event evs[64];
    const int n = epoll_wait(epfd_, evs, 64, 0);
    // A full answer may have left the listener out: look then too.
    listen_ready_ |= n == 64;
    for (int i = 0; i < n; ++i) {
      listen_ready_ |= evs[i].data.fd == listen_fd_;
      ShmQp* qp = qp_of_fd(evs[i].data.fd);
      if (qp != nullptr && qp->state() == QpState::kError) unwatch_fd(evs[i].data.fd);  // nothing more to read
      if (qp == nullptr || qp->state() != QpState::kRts) continue;
      if (!qp->drain_ctl())
        qp->peer_vanished(make_error(Errc::kDisconnected, "shm: the peer closed the connection or died"));
    }
    return;
  }
  std::vector<pollfd> pfds;
  std::vector<ShmQp*> owners;
  for (ShmQp* qp : qps_) {
    if (qp->state() == QpState::kRts && qp->socket_fd() >= 0) {
      pfds.push_back(pollfd{qp->socket_fd(), POLLIN, 0});
      owners.push_back(qp);
    }
  }
  if (pfds.empty() || ::poll(pfds.data(), pfds.size(), 0) <= 0) return;
  for (size_t i = 0; i < pfds.size(); ++i) {
    if (pfds[i].revents == 0) continue;
    if (!owners[i]->drain_ctl())
      owners[i]->peer_vanished(make_error(Errc::kDisconnected, "shm: the peer closed the connection or died"));
  }
}

bool ShmDevice::poll_cm(CmEvent* ev) {
  sweep_idle();
  if (events_.empty()) {
    // The epoll set first: it says whether the listener has a connection
    // waiting, so that accept_new() makes no system call when none does.
    watch_established();
    accept_new();
    read_hellos();
    read_connecting();
  }
  ShmCmEvent* e = events_.pop_front();
  if (e == nullptr) return false;
  if (e->qp != nullptr) e->qp->cm_events_.remove(e);
  *ev = std::move(e->ev);
  delete e;
  return true;
}

// ---------------------------------------------------------------- driver

// group=: a group name, or a numeric gid.
Result<int64_t> resolve_group(const std::string& g) {
  if (g.empty()) return make_error(Errc::kInvalidArgument, "shm: group= needs a group name or gid");
  if (g.find_first_not_of("0123456789") == std::string::npos) {
    if (g.size() > 9) return make_error(Errc::kInvalidArgument, "shm: group=%s: gid too large", g.c_str());
    return static_cast<int64_t>(std::strtoul(g.c_str(), nullptr, 10));
  }
  group grp{}, *found = nullptr;
  std::vector<char> buf(16384);
  int e = getgrnam_r(g.c_str(), &grp, buf.data(), buf.size(), &found);
  if (e != 0 || found == nullptr)
    return make_error(Errc::kInvalidArgument, "shm: group=%s: no such group", g.c_str());
  return static_cast<int64_t>(found->gr_gid);
}

class ShmDriver final : public Driver {
 public:
  const char* name() const override { return "shm"; }
  const char* usage() const override {
    return "shm:path=<unix socket>[,ring=<slots, power of 2>][,depth=<fast-reg pages>][,max_wr=<n>]"
           "[,hello_timeout_ms=<ms>][,max_pending=<sockets>][,mode=<octal, e.g. 0660>][,group=<name or gid>]"
           "[,qp_bound=0|1][,fast_reg=0|1][,inv_qp_check=0|1][,pcap=<file>]";
  }
  Result<std::unique_ptr<Device>> open(const DevArgs& a) override {
    TERN_TRY(a.check_keys({"path", "ring", "depth", "max_wr", "qp_bound", "fast_reg", "inv_qp_check",
                              "hello_timeout_ms", "max_pending", "mode", "group", "pcap"}));
    ShmDeviceConfig cfg;
    cfg.path = a.get("path");
    sockaddr_un sa;
    if (!fill_addr(cfg.path, &sa))
      return make_error(Errc::kInvalidArgument, "shm: give a socket path (path=/run/tern.sock), under %zu bytes",
                        sizeof sa.sun_path);
    auto ring = a.get_u64("ring", cfg.ring_slots);
    auto depth = a.get_u64("depth", cfg.fast_reg_depth);
    auto max_wr = a.get_u64("max_wr", cfg.max_qp_wr);
    TERN_TRY(ring);
    TERN_TRY(depth);
    TERN_TRY(max_wr);
    if (*ring < 16 || *ring > 65536 || (*ring & (*ring - 1)) != 0)
      return make_error(Errc::kInvalidArgument, "shm: ring=%llu must be a power of two in [16, 65536]",
                        static_cast<unsigned long long>(*ring));
    if (*depth < 1 || *depth > 4096)
      return make_error(Errc::kInvalidArgument, "shm: depth=%llu must be in [1, 4096]",
                        static_cast<unsigned long long>(*depth));
    if (*max_wr < 1 || *max_wr > 65536)
      return make_error(Errc::kInvalidArgument, "shm: max_wr=%llu must be in [1, 65536]",
                        static_cast<unsigned long long>(*max_wr));
    cfg.ring_slots = static_cast<uint32_t>(*ring);
    cfg.fast_reg_depth = static_cast<uint32_t>(*depth);
    cfg.max_qp_wr = static_cast<uint32_t>(*max_wr);
    auto qp_bound = a.get_u64("qp_bound", 1);
    auto hello_ms = a.get_u64("hello_timeout_ms", cfg.hello_timeout_ms);
    auto pending = a.get_u64("max_pending", cfg.max_pending);
    TERN_TRY(qp_bound);
    TERN_TRY(hello_ms);
    TERN_TRY(pending);
    if (*qp_bound > 1) return make_error(Errc::kInvalidArgument, "shm: qp_bound must be 0 or 1");
    auto fast_reg = a.get_u64("fast_reg", 1);
    TERN_TRY(fast_reg);
    if (*fast_reg > 1) return make_error(Errc::kInvalidArgument, "shm: fast_reg must be 0 or 1");
    cfg.fast_reg = *fast_reg == 1;
    auto inv_check = a.get_u64("inv_qp_check", 1);
    TERN_TRY(inv_check);
    if (*inv_check > 1) return make_error(Errc::kInvalidArgument, "shm: inv_qp_check must be 0 or 1");
    cfg.inv_qp_check = *inv_check == 1;
    if (*hello_ms < 1 || *hello_ms > 600000)
      return make_error(Errc::kInvalidArgument, "shm: hello_timeout_ms=%llu must be in [1, 600000]",
                        static_cast<unsigned long long>(*hello_ms));
    if (*pending < 1 || *pending > 65536)
      return make_error(Errc::kInvalidArgument, "shm: max_pending=%llu must be in [1, 65536]",
                        static_cast<unsigned long long>(*pending));
    cfg.qp_bound = *qp_bound == 1;
    cfg.hello_timeout_ms = static_cast<uint32_t>(*hello_ms);
    cfg.max_pending = static_cast<uint32_t>(*pending);
    if (a.has("mode")) {
      // Octal, as chmod takes it: permission bits only (no setuid, sticky).
      std::string m = a.get("mode");
      char* end = nullptr;
      unsigned long v = m.empty() || m.size() > 4 ? 01000 : std::strtoul(m.c_str(), &end, 8);
      if (m.empty() || m.size() > 4 || *end != '\0' || m.find_first_not_of("01234567") != std::string::npos ||
          v > 0777)
        return make_error(Errc::kInvalidArgument, "shm: mode=%s must be octal permission bits, 0000 to 0777 (0660)",
                          m.c_str());
      cfg.socket_mode = static_cast<int>(v);
    }
    if (a.has("group")) {
      cfg.group = a.get("group");
      auto gid = resolve_group(cfg.group);
      TERN_TRY(gid);
      cfg.socket_gid = *gid;
    }
    cfg.pcap = a.get("pcap");
    std::unique_ptr<RocePcap> pcap;
    if (a.has("pcap")) {
      auto p = RocePcap::open(cfg.pcap);
      TERN_TRY(p);
      pcap = std::move(p.value());
    }
    auto dev = std::unique_ptr<ShmDevice>(new ShmDevice(cfg));
    dev->set_pcap(std::move(pcap));
    return std::unique_ptr<Device>(std::move(dev));
  }
};

}  // namespace tern::shm

TERN_BUILTIN_DRIVER(shm, ::tern::shm::ShmDriver)
