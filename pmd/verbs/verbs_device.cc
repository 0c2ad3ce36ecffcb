// pmd/verbs device: opening (by device name and/or by address), the
// capability query the engine sizes itself from, and object creation.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "rdmadev/rdmadev_driver.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

namespace {

// rxe: vendor 0xFFFFFF, part 0 (RXE_VENDOR_ID); also known by its usual name.
bool is_rxe(ibv_context* ctx, const ibv_device_attr& a) {
  return (a.vendor_id == 0xFFFFFF && a.vendor_part_id == 0) ||
         std::strncmp(ibv_get_device_name(ctx->device), "rxe", 3) == 0;
}

}  // namespace

Status VerbsDevice::resolve_remote(ibv_context** owner, uint8_t* port) {
  constexpr int kTimeoutMs = 2000;
  sockaddr_storage dst;
  TERN_TRY(make_sockaddr(cfg_.port, &dst));
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0)
    return make_sys_error(Errc::kNotFound, errno, "verbs: rdma_create_id");
  Status st = make_error(Errc::kNotFound, "verbs: no route to addr=%s from any RDMA device (timed out)",
                         cfg_.addr.c_str());
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), kTimeoutMs) != 0) {
    st = make_sys_error(Errc::kNotFound, errno, "verbs: addr=%s is neither this machine's nor reachable over RDMA",
                        cfg_.addr.c_str());
  } else {
    // The channel is new and non-blocking: the only event coming is this one.
    pollfd pfd{channel_->fd, POLLIN, 0};
    while (::poll(&pfd, 1, kTimeoutMs + 500) > 0) {
      rdma_cm_event* ev = nullptr;
      if (rdma_get_cm_event(channel_, &ev) != 0) continue;
      bool mine = ev->id == id;
      rdma_cm_event_type type = ev->event;
      int status = ev->status;
      rdma_ack_cm_event(ev);
      if (!mine) continue;
      if (type == RDMA_CM_EVENT_ADDR_RESOLVED && id->verbs != nullptr) {
        *owner = id->verbs;
        *port = id->port_num;
        st = Status::ok();
      } else {
        st = make_error(Errc::kNotFound, "verbs: addr=%s is not reachable over RDMA (%s, status %d)",
                        cfg_.addr.c_str(), rdma_event_str(type), status);
      }
      break;
    }
  }
  rdma_destroy_id(id);
  return st;
}

Status VerbsDevice::make_sockaddr(uint16_t port, sockaddr_storage* out) const {
  std::memset(out, 0, sizeof *out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET, cfg_.addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return Status::ok();
  }
  if (inet_pton(AF_INET6, cfg_.addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return Status::ok();
  }
  return make_error(Errc::kInvalidArgument, "verbs: addr=%s is not an IPv4 or IPv6 address", cfg_.addr.c_str());
}

Result<std::unique_ptr<Device>> VerbsDevice::open(const VerbsConfig& cfg, std::unique_ptr<FastRegProvider> fr) {
  std::unique_ptr<VerbsDevice> d(new VerbsDevice(cfg, std::move(fr)));
  TERN_TRY(d->init());
  return std::unique_ptr<Device>(std::move(d));
}

Status VerbsDevice::init() {
  // Without any RDMA device libibverbs returns NULL (errno ENOSYS), not an
  // empty list: say so plainly, before librdmacm adds its own confusion.
  int ndev = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&ndev);
  if (list == nullptr || ndev == 0) {
    int e = list == nullptr ? errno : ENODEV;
    if (list != nullptr) ibv_free_device_list(list);
    return make_sys_error(Errc::kNotFound, e,
                          "verbs: no RDMA devices on this machine (ibv_get_device_list found none; is a provider "
                          "such as rdma_rxe or mlx5_ib loaded and /dev/infiniband/uverbs* present?)");
  }
  ibv_free_device_list(list);

  channel_ = rdma_create_event_channel();
  if (channel_ == nullptr)
    return make_sys_error(Errc::kNotFound, errno,
                          "verbs: rdma_cm is unavailable (rdma_create_event_channel failed; is rdma_ucm loaded and "
                          "/dev/infiniband/rdma_cm present?)");
  // poll_cm() must never block.
  int fl = fcntl(channel_->fd, F_GETFL);
  if (fl < 0 || fcntl(channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0)
    return make_sys_error(Errc::kInternal, errno, "verbs: cannot make the rdma_cm channel non-blocking");

  // The contexts librdmacm opened: ids it resolves point at these, so PDs,
  // CQs and QPs must be made on the same ones.
  int n = 0;
  ibv_context** ctxs = rdma_get_devices(&n);
  if (ctxs == nullptr || n == 0) {
    if (ctxs != nullptr) rdma_free_devices(ctxs);
    return make_error(Errc::kNotFound, "verbs: rdma_cm sees no RDMA devices");
  }
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* nm = ibv_get_device_name(ctxs[i]->device);
    names += (names.empty() ? "" : ", ") + std::string(nm);
    if (!cfg_.dev.empty() && cfg_.dev == nm) ctx_ = ctxs[i];
  }
  rdma_free_devices(ctxs);  // frees the array; the contexts stay open in librdmacm
  if (!cfg_.dev.empty() && ctx_ == nullptr)
    return make_error(Errc::kNotFound, "verbs: no RDMA device '%s' (devices: %s)", cfg_.dev.c_str(), names.c_str());

  if (!cfg_.addr.empty()) {
    // By address: bind a throw-away id to learn which device and port own it.
    sockaddr_storage sa;
    TERN_TRY(make_sockaddr(0, &sa));
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(channel_, &id, nullptr, RDMA_PS_TCP) != 0)
      return make_sys_error(Errc::kNotFound, errno, "verbs: rdma_create_id");
    int rc = rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&sa));
    int e = errno;
    ibv_context* owner = rc == 0 ? id->verbs : nullptr;
    uint8_t port = rc == 0 ? id->port_num : 0;
    rdma_destroy_id(id);
    if (rc != 0 && e == EADDRNOTAVAIL) {
      // Not ours: a server to connect to. The device is the one rdma_cm
      // routes to it through, as connect() will.
      addr_is_local_ = false;
      TERN_TRY(resolve_remote(&owner, &port));
      rc = 0;
    }
    if (rc != 0)
      return make_sys_error(Errc::kNotFound, e, "verbs: cannot bind to addr=%s (no RDMA device has it)",
                            cfg_.addr.c_str());
    if (owner == nullptr)
      return make_error(Errc::kNotFound, "verbs: addr=%s is not on an RDMA device (devices: %s)", cfg_.addr.c_str(),
                        names.c_str());
    if (ctx_ != nullptr && ctx_ != owner)
      return make_error(Errc::kInvalidArgument, "verbs: addr=%s belongs to %s, not dev=%s", cfg_.addr.c_str(),
                        ibv_get_device_name(owner->device), cfg_.dev.c_str());
    ctx_ = owner;
    if (port != 0) port_num_ = port;
  }
  if (ctx_ == nullptr)
    return make_error(Errc::kInvalidArgument, "verbs: give dev=<name> or addr=<ip> (devices: %s)", names.c_str());

  ibv_device_attr_ex ax;
  std::memset(&ax, 0, sizeof ax);
  if (int rc = ibv_query_device_ex(ctx_, nullptr, &ax); rc != 0)
    return make_sys_error(Errc::kInternal, rc, "verbs: ibv_query_device_ex(%s)", ibv_get_device_name(ctx_->device));
  const ibv_device_attr& a = ax.orig_attr;
  ibv_port_attr pa;
  if (int rc = ibv_query_port(ctx_, port_num_, &pa); rc != 0)
    return make_sys_error(Errc::kInternal, rc, "verbs: ibv_query_port(%s, %u)", ibv_get_device_name(ctx_->device),
                          port_num_);
  // Down at open: connect/listen refuse until IBV_EVENT_PORT_ACTIVE says otherwise.
  port_up_ = pa.state == IBV_PORT_ACTIVE;
  if (!port_up_)
    TERN_LOG(kWarn, "verbs", "%s port %u is not active (%s): connections wait for it to come up",
             ibv_get_device_name(ctx_->device), port_num_, ibv_port_state_str(pa.state));

  caps_.driver = "verbs";
  caps_.name = ibv_get_device_name(ctx_->device);
  caps_.max_qp_wr = static_cast<uint32_t>(a.max_qp_wr);
  caps_.max_send_sge = static_cast<uint32_t>(a.max_sge);
  caps_.max_recv_sge = static_cast<uint32_t>(a.max_sge);
  caps_.max_cqe = static_cast<uint32_t>(a.max_cqe);
  caps_.max_mr_size = a.max_mr_size;
  caps_.max_private_data = kMaxPrivateData;
  // Shared receive queues, as deep as the device allows and the wr_id's slot
  // field can name (verbs_internal.h).
  if (a.max_srq > 0 && a.max_srq_wr > 0 && a.max_srq_sge > 0) {
    caps_.max_srq_wr = std::min<uint32_t>(static_cast<uint32_t>(a.max_srq_wr), kMaxSrqWr);
    caps_.max_srq_sge = static_cast<uint32_t>(a.max_srq_sge);
  }
  max_rd_atom_ = static_cast<uint8_t>(std::min(a.max_qp_rd_atom, 255));
  max_init_rd_atom_ = static_cast<uint8_t>(std::min(a.max_qp_init_rd_atom, 255));

  // Fast registration without kernel FRWR: type-2 windows (2A or 2B) bound
  // by a send-queue WR, which also gives LOCAL_INV and SEND_WITH_INV.
  const uint64_t f = a.device_cap_flags;
  bool mw2 = (f & IBV_DEVICE_MEM_WINDOW) && (f & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  bool mgt = (f & IBV_DEVICE_MEM_MGT_EXTENSIONS) != 0;
  caps_.memory_windows = mw2 && cfg_.use_mw;
  caps_.fast_reg = caps_.memory_windows;
  // A type-2 window (2A or 2B) is bound to the QP whose bind made it: its
  // rkey is refused on any other QP, as is its remote invalidation.
  caps_.fast_reg_qp_bound = caps_.memory_windows;
  caps_.remote_invalidation = caps_.memory_windows && mgt;
  caps_.max_fast_reg_depth = caps_.fast_reg ? cfg_.fast_reg_depth : 0;
  caps_.fast_reg_page_size = 4096;
  if (!caps_.fast_reg) {
    // The requester picks a FastMr's next rkey itself (FastMr::bump_rkey);
    // ibv_reg_mr cannot honour a chosen key, so REG_MR cannot be emulated
    // with registrations. The engine can fall back to its registration
    // cache (lib/engine/reg_cache.h: one ibv_reg_mr per chunk, kept for
    // reuse), but only for hosts that declare their peers trusted.
    TERN_LOG(kWarn, "verbs",
             "%s: %s; no fast registration: RPC calls with chunks need the engine's registration cache "
             "(EngineOptions::trusted_peers)",
             caps_.name.c_str(), mw2 ? "memory windows disabled by mw=off" : "no type-2 memory windows");
  }

  bool rxe = is_rxe(ctx_, a);
  inv_flag_quirk_ = rxe;
  renew_windows_ = rxe && caps_.memory_windows;
  // rxe (Linux 6.1) honours a Send With Invalidate of a window bound to
  // another QP of the PD (measured in the VM: conformance
  // FastRegTwoClientsTest); type-2 windows are QP-bound for it elsewhere.
  caps_.remote_inv_qp_bound = caps_.remote_invalidation && caps_.fast_reg_qp_bound && !rxe;
  // rxe's completions say LOC_QP_OP_ERR / REM_OP_ERR for errors other devices name.
  caps_.precise_error_status = !rxe;
  next_poll_ends_ = rxe;
  // rdma-core 44's rxe wr_set_sge_list miscounts multi-SGE lengths; see verbs_qp.cc.
  legacy_post_ = rxe || std::getenv("TERN_VERBS_LEGACY_POST") != nullptr;
  // rxe checks window accesses against the underlying MR, not the window.
  caps_.fast_reg_bounds_enforced = !(rxe && caps_.memory_windows);
  cm_ctx_ = ctx_;
  if (fr_ != nullptr) attach_fast_reg();
  TERN_TRY(init_wait());  // on ctx_, where the CQs are made; before async_subscribe
  // From now on port, device and QP events reach poll_cm (verbs_events.cc).
  async_subscribe(cm_ctx_, this);
  if (ctx_ != cm_ctx_) async_subscribe(ctx_, this);
  TERN_LOG(kInfo, "verbs", "opened %s port %u%s%s: max_qp_wr %u sge %u cqe %u windows %s%s%s", caps_.name.c_str(),
           port_num_, cfg_.addr.empty() ? "" : " addr ", cfg_.addr.c_str(), caps_.max_qp_wr, caps_.max_send_sge,
           caps_.max_cqe, caps_.memory_windows ? "type 2" : "none", fr_ != nullptr ? ", fast registration by " : "",
           fr_ != nullptr ? fr_->name() : "");
  return Status::ok();
}

void VerbsDevice::attach_fast_reg() {
  // The provider fills a copy, so that a failure leaves plain verbs intact.
  DeviceCaps c = caps_;
  Status s = fr_->attach(ctx_, port_num_, &c);
  if (!s.is_ok()) {
    TERN_LOG(kWarn, fr_->name(), "%s: %s; using the verbs driver (%s)", caps_.name.c_str(), s.to_string().c_str(),
             caps_.memory_windows ? "type-2 memory windows" : "no fast registration");
    fr_.reset();
    return;
  }
  caps_ = c;
  ctx_ = fr_->object_context();
  // The provider's REG_MR needs the wr_* builder; ibv_post_send has no such WR.
  if (legacy_post_)
    TERN_LOG(kWarn, fr_->name(), "TERN_VERBS_LEGACY_POST ignored: fast registration by %s needs ibv_wr_*",
             fr_->name());
  legacy_post_ = false;
}

VerbsDevice::~VerbsDevice() {
  TERN_ASSERT(std::all_of(qps_.begin(), qps_.end(), [](VerbsQp* q) { return q == nullptr; }),
              "verbs device destroyed with QPs alive");
  TERN_ASSERT(std::all_of(srqs_.begin(), srqs_.end(), [](VerbsSrq* q) { return q == nullptr; }),
              "verbs device destroyed with SRQs alive");
  if (cm_ctx_ != nullptr) async_unsubscribe(cm_ctx_, this);
  if (ctx_ != nullptr && ctx_ != cm_ctx_) async_unsubscribe(ctx_, this);
  // Ids handed to the reaper are destroyed before the channel they were
  // made on; from here on the ids left go synchronously (CmReaper::reap).
  reaper_.stop();
  for (rdma_cm_id* id : parked_ids_) rdma_destroy_id(id);
  parked_ids_.clear();
  requests_.clear();  // rejects and destroys their ids
  events_.clear();
  if (listen_id_ != nullptr) rdma_destroy_id(listen_id_);
  if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  // After the CQs (destroyed before the device) and the unsubscription.
  if (comp_ != nullptr) ibv_destroy_comp_channel(comp_);
  for (int fd : {epfd_, timer_fd_, wake_fd_})
    if (fd >= 0) close(fd);
}

Result<std::unique_ptr<Pd>> VerbsDevice::alloc_pd() {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  if (pd == nullptr) return make_sys_error(Errc::kNoResources, errno, "verbs: ibv_alloc_pd(%s)", caps_.name.c_str());
  return std::unique_ptr<Pd>(new VerbsPd(this, pd));
}

Result<std::unique_ptr<Cq>> VerbsDevice::create_cq(uint32_t capacity) {
  if (capacity == 0 || capacity > caps_.max_cqe)
    return make_error(Errc::kInvalidArgument, "create_cq: capacity %u not in [1, %u]", capacity, caps_.max_cqe);
  ibv_cq_init_attr_ex ca;
  std::memset(&ca, 0, sizeof ca);
  ca.cqe = capacity;
  // IMM carries the invalidated rkey of a SEND_WITH_INV receive.
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM;
  // Wait mode: Cq::arm asks for an event on this channel. Unarmed, it costs nothing.
  ca.channel = comp_;
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &ca);
  if (cq == nullptr)
    return make_sys_error(errno == EOPNOTSUPP ? Errc::kUnsupported : Errc::kNoResources, errno,
                          "verbs: ibv_create_cq_ex(%u) on %s", capacity, caps_.name.c_str());
  auto* vcq = new VerbsCq(this, cq, capacity);
  ibv_cq_ex_to_cq(cq)->cq_context = vcq;  // what ibv_get_cq_event hands back (verbs_wait.cc)
  return std::unique_ptr<Cq>(vcq);
}

Result<std::unique_ptr<Qp>> VerbsDevice::create_qp(const QpInit& in) {
  auto* pd = dynamic_cast<VerbsPd*>(in.pd);
  auto* scq = dynamic_cast<VerbsCq*>(in.send_cq);
  auto* rcq = dynamic_cast<VerbsCq*>(in.recv_cq);
  if (pd == nullptr || scq == nullptr || rcq == nullptr || pd->device() != this)
    return make_error(Errc::kInvalidArgument, "create_qp: pd, send_cq and recv_cq must come from this verbs device");
  // With an SRQ there is no receive queue: rq_depth and max_recv_sge are not
  // looked at (rdmadev.h). The SRQ must be this device's and on the QP's PD.
  auto* srq = in.srq != nullptr ? dynamic_cast<VerbsSrq*>(in.srq) : nullptr;
  if (in.srq != nullptr && (srq == nullptr || srq_at(srq->index(), srq->gen()) != srq || srq->pd() != pd))
    return make_error(Errc::kInvalidArgument, "create_qp: the SRQ must come from this verbs device and the QP's PD");
  const bool own_rq = srq == nullptr;
  if (in.sq_depth == 0 || in.sq_depth > caps_.max_qp_wr ||
      (own_rq && (in.rq_depth == 0 || in.rq_depth > caps_.max_qp_wr)))
    return make_error(Errc::kInvalidArgument, "create_qp: queue depths %u/%u not in [1, %u]", in.sq_depth,
                      in.rq_depth, caps_.max_qp_wr);
  if (in.max_send_sge == 0 || in.max_send_sge > caps_.max_send_sge ||
      (own_rq && (in.max_recv_sge == 0 || in.max_recv_sge > caps_.max_recv_sge)))
    return make_error(Errc::kInvalidArgument, "create_qp: SGEs %u/%u not in [1, %u/%u]", in.max_send_sge,
                      in.max_recv_sge, caps_.max_send_sge, caps_.max_recv_sge);
  if (removed_) return make_error(Errc::kDisconnected, "verbs: %s was removed", caps_.name.c_str());

  uint32_t index = 0;
  while (index < qps_.size() && qps_[index] != nullptr) ++index;
  if (index >= kMaxQpsPerDevice)
    return make_error(Errc::kNoResources, "verbs: more than %u QPs on one Device", kMaxQpsPerDevice);

  ibv_qp_init_attr_ex qa;
  std::memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = scq->ibv();
  qa.recv_cq = rcq->ibv();
  qa.cap.max_send_wr = in.sq_depth;
  qa.cap.max_recv_wr = own_rq ? in.rq_depth : 0;
  qa.cap.max_send_sge = in.max_send_sge;
  qa.cap.max_recv_sge = own_rq ? in.max_recv_sge : 0;
  qa.srq = own_rq ? nullptr : srq->ibv();
  qa.sq_sig_all = 0;
  qa.pd = pd->pd();
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
  if (caps_.fast_reg) qa.send_ops_flags |= IBV_QP_EX_WITH_LOCAL_INV;
  if (caps_.memory_windows) qa.send_ops_flags |= IBV_QP_EX_WITH_BIND_MW;
  if (caps_.remote_invalidation) qa.send_ops_flags |= IBV_QP_EX_WITH_SEND_WITH_INV;
  // Inline sends (inline_fits): asked for, and without them if the device
  // refuses the size (a device with less room per WQE).
  qa.cap.max_inline_data = cfg_.max_inline;
  ibv_qp* qp = fr_ != nullptr ? fr_->create_qp(&qa) : ibv_create_qp_ex(ctx_, &qa);
  if (qp == nullptr && cfg_.max_inline != 0) {
    TERN_LOG(kInfo, "verbs", "%s: no QP with %u bytes inline (%s); creating it without inline sends",
             caps_.name.c_str(), cfg_.max_inline, std::strerror(errno));
    qa.cap.max_inline_data = 0;
    qp = fr_ != nullptr ? fr_->create_qp(&qa) : ibv_create_qp_ex(ctx_, &qa);
  }
  if (qp == nullptr)
    return make_sys_error(Errc::kNoResources, errno, "verbs: ibv_create_qp_ex(sq %u, rq %u, sge %u/%u%s) on %s",
                          in.sq_depth, own_rq ? in.rq_depth : 0, in.max_send_sge, own_rq ? in.max_recv_sge : 0,
                          own_rq ? "" : ", srq", caps_.name.c_str());
  // INIT now, so that receives may be posted before connecting (rdmadev.h).
  // RoCE and IB both use pkey index 0 for rdma_cm's default pkey.
  ibv_qp_attr at;
  std::memset(&at, 0, sizeof at);
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = port_num_;
  at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    ibv_destroy_qp(qp);
    return make_sys_error(Errc::kInternal, rc, "verbs: QP to INIT on %s port %u", caps_.name.c_str(), port_num_);
  }
  if (index == qps_.size()) {
    qps_.push_back(nullptr);
    gens_.push_back(0);
  }
  uint16_t gen = ++gens_[index];
  // The provider reports what it granted (it may round up): never more
  // than was asked.
  const uint32_t max_inline = std::min(qa.cap.max_inline_data, cfg_.max_inline);
  // legacy_post's list holds a whole chain of any of the device's QPs.
  if (legacy_post_ && send_scratch_.size() < in.sq_depth) send_scratch_.resize(in.sq_depth);
  auto* q = new VerbsQp(this, pd, scq, rcq, in, qp, index, gen, max_inline);
  qps_[index] = q;
  by_num_[qp->qp_num] = q;
  return std::unique_ptr<Qp>(q);
}

void VerbsDevice::forget_qp(VerbsQp* qp) {
  if (qp->index() < qps_.size() && qps_[qp->index()] == qp) qps_[qp->index()] = nullptr;
  if (auto it = by_num_.find(qp->qp_num()); it != by_num_.end() && it->second == qp) by_num_.erase(it);
  errored_.erase(std::remove(errored_.begin(), errored_.end(), qp), errored_.end());
  // Events already queued for it must not hand out a dangling pointer.
  for (auto it = events_.begin(); it != events_.end();) {
    if (it->qp == qp) it = events_.erase(it);
    else ++it;
  }
}

VerbsQp* VerbsDevice::own_qp(Qp* qp) {
  for (VerbsQp* q : qps_)
    if (q != nullptr && q == qp) return q;
  return nullptr;
}

// ---------------------------------------------------------------- driver

Result<VerbsConfig> parse_verbs_config(const DevArgs& a, const char* driver) {
  TERN_TRY(a.check_keys({"dev", "addr", "port", "depth", "mw", "ack_timeout", "inline"}));
  VerbsConfig cfg;
  cfg.dev = a.get("dev");
  cfg.addr = a.get("addr");
  auto port = a.get_u64("port", cfg.port);
  auto depth = a.get_u64("depth", cfg.fast_reg_depth);
  TERN_TRY(port);
  TERN_TRY(depth);
  if (*port == 0 || *port > 65535)
    return make_error(Errc::kInvalidArgument, "%s: port=%llu not in [1, 65535]", driver,
                      static_cast<unsigned long long>(*port));
  if (*depth < 1 || *depth > (1u << 20))
    return make_error(Errc::kInvalidArgument, "%s: depth=%llu not in [1, 1048576]", driver,
                      static_cast<unsigned long long>(*depth));
  std::string mw = a.get("mw", "on");
  if (mw != "on" && mw != "off")
    return make_error(Errc::kInvalidArgument, "%s: mw=%s (want on or off)", driver, mw.c_str());
  if (cfg.dev.empty() && cfg.addr.empty())
    return make_error(Errc::kInvalidArgument, "%s: give dev=<name> and/or addr=<ip>, e.g. %s:dev=rxe0,addr=169.254.77.1",
                      driver, driver);
  cfg.port = static_cast<uint16_t>(*port);
  cfg.fast_reg_depth = static_cast<uint32_t>(*depth);
  cfg.use_mw = mw == "on";
  if (a.has("ack_timeout")) {
    auto t = a.get_u64("ack_timeout", 0);
    TERN_TRY(t);
    // 5 bits in the QP context (IB spec 9.7.6.1.3); 0 would mean "wait for ever".
    if (*t < 1 || *t > 31)
      return make_error(Errc::kInvalidArgument, "%s: ack_timeout=%llu not in [1, 31] (4.096 us << n)", driver,
                        static_cast<unsigned long long>(*t));
    cfg.ack_timeout = static_cast<int>(*t);
  }
  auto inl = a.get_u64("inline", cfg.max_inline);
  TERN_TRY(inl);
  if (*inl > 1024)
    return make_error(Errc::kInvalidArgument, "%s: inline=%llu not in [0, 1024] (bytes sent inline; 0: never)", driver,
                      static_cast<unsigned long long>(*inl));
  cfg.max_inline = static_cast<uint32_t>(*inl);
  return cfg;
}

class VerbsDriver final : public Driver {
 public:
  const char* name() const override { return "verbs"; }
  const char* usage() const override {
    return "verbs:[dev=<rdma device>][,addr=<ip to listen on / connect to>][,port=<n, default 20049>]"
           "[,depth=<fast-reg pages>][,mw=on|off][,ack_timeout=<1..31: 4.096 us << n>][,inline=<bytes, default 256>]";
  }
  Result<std::unique_ptr<Device>> open(const DevArgs& a) override {
    auto cfg = parse_verbs_config(a, "verbs");
    TERN_TRY(cfg);
    return VerbsDevice::open(*cfg);
  }
};

}  // namespace tern::verbs

TERN_BUILTIN_DRIVER(verbs, ::tern::verbs::VerbsDriver)
