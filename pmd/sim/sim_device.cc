// pmd/sim's control path: the driver ("sim:world=NAME,seed=N,addr=A"), the
// device, its memory table, CQs and connection management. Connection
// events are CM actions the world schedules like any other event, so they
// may come late: after data, after the other side's disconnect.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/devargs.h"
#include "rdmadev/rdmadev_driver.h"
#include "sim/sim_internal.h"

namespace tern::sim {

// ---------------------------------------------------------------- memory

Result<std::unique_ptr<Mr>> SimPd::reg_mr(void* addr, uint64_t length, uint32_t access) {
  if (addr == nullptr || length == 0) return make_error(Errc::kInvalidArgument, "sim: reg_mr of nothing");
  if ((access & ~(kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead)) != 0 ||
      ((access & kAccessRemoteWrite) && !(access & kAccessLocalWrite)))
    return make_error(Errc::kInvalidArgument, "sim: reg_mr with invalid access 0x%x", access);
  MrEntry e;
  e.in_use = true;
  e.access = access;
  e.iova = reinterpret_cast<uint64_t>(addr);
  e.length = length;
  e.pd = this;
  uint32_t index = dev_->add_entry(e);
  bool remote = (access & (kAccessRemoteWrite | kAccessRemoteRead)) != 0;
  return std::unique_ptr<Mr>(new SimMr(dev_, index, e.iova, length, access, remote));
}

Result<std::unique_ptr<FastMr>> SimPd::alloc_fast_mr(uint32_t max_depth) {
  if (!dev_->caps().fast_reg) return make_error(Errc::kUnsupported, "sim: this device was opened with fast_reg=0");
  if (max_depth == 0 || max_depth > kMaxFastRegDepth)
    return make_error(Errc::kInvalidArgument, "sim: fast MR depth %u (1..%u)", max_depth, kMaxFastRegDepth);
  MrEntry e;
  e.in_use = true;
  e.fast = true;
  e.max_depth = max_depth;
  e.pd = this;
  uint32_t index = dev_->add_entry(e);
  return std::unique_ptr<FastMr>(new SimFastMr(dev_, index, max_depth));
}

SimMr::SimMr(SimDevice* dev, uint32_t index, uint64_t addr, uint64_t len, uint32_t access, bool remote)
    : dev_(dev), index_(index) {
  addr_ = addr, length_ = len, access_ = access;
  lkey_ = make_rkey(index, 0);
  rkey_ = remote ? lkey_ : 0;
}

SimMr::~SimMr() { dev_->free_entry(index_); }

SimFastMr::SimFastMr(SimDevice* dev, uint32_t index, uint32_t depth) : dev_(dev), index_(index) {
  max_depth_ = depth;
  rkey_ = make_rkey(index, 0);
}

SimFastMr::~SimFastMr() {
  MrEntry* e = dev_->entry(index_);
  if (e != nullptr && e->valid) {
    // Destroying a registered MR ends its registration: one of the three
    // ways a registration may end, each counted once.
    ++dev_->world().counters_mut().destroyed_valid;
    dev_->world().trace_event("mr-destroyed-valid", 0, "", index_);
  }
  dev_->free_entry(index_);
}

bool SimFastMr::retire() {
  if (MrEntry* e = dev_->entry(index_)) e->remote_ended = false;
  return true;
}

uint32_t SimDevice::add_entry(const MrEntry& e) {
  uint32_t index;
  if (!free_.empty()) {
    // Lowest free index first: the same schedule gives the same keys.
    auto it = std::min_element(free_.begin(), free_.end());
    index = *it;
    free_.erase(it);
  } else {
    index = static_cast<uint32_t>(table_.size());
    table_.emplace_back();
  }
  uint8_t key = table_[index].key;  // a reused row keeps advancing its key byte
  table_[index] = e;
  table_[index].key = e.fast ? key : 0;
  return index;
}

void SimDevice::free_entry(uint32_t index) {
  if (index >= table_.size() || !table_[index].in_use) return;
  uint8_t key = table_[index].key;
  table_[index] = MrEntry{};
  table_[index].key = static_cast<uint8_t>(key + 1);
  free_.push_back(index);
}

bool SimDevice::fast_reg_covers(uint64_t addr, uint64_t len) const {
  for (const MrEntry& e : table_)
    if (e.in_use && e.fast && e.valid && e.iova < addr + len && addr < e.iova + e.length) return true;
  return false;
}

bool SimDevice::sole_remote_mr_of_range(const MrEntry& e) const {
  int n = 0;
  for (const MrEntry& o : table_)
    n += o.in_use && !o.fast && (o.access & (kAccessRemoteRead | kAccessRemoteWrite)) != 0 && o.iova == e.iova &&
         o.length == e.length;
  return n == 1;
}

bool SimDevice::local_ok(const SimPd* pd, const Sge& s, uint32_t need) {
  if (s.length == 0) return true;
  MrEntry* e = entry(rkey_index(s.lkey));
  if (e == nullptr || e->fast || e->pd != pd || rkey_key(s.lkey) != e->key) return false;
  if ((e->access & need) != need) return false;
  return s.addr >= e->iova && s.length <= e->length && s.addr - e->iova <= e->length - s.length;
}

bool SimDevice::remote_ok(const SimPd* pd, uint32_t qpn, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need) {
  MrEntry* e = entry(rkey_index(rkey));
  if (e == nullptr || e->pd != pd || rkey_key(rkey) != e->key) return false;
  if (e->fast && qp_bound() && e->qpn != qpn) return false;
  if (e->fast ? !e->valid : (e->access & (kAccessRemoteRead | kAccessRemoteWrite)) == 0) return false;
  if ((e->access & need) != need) return false;
  if (len == 0) return true;
  return addr >= e->iova && len <= e->length && addr - e->iova <= e->length - len;
}

// ---------------------------------------------------------------- CQ

SimCq::SimCq(SimDevice* dev, uint32_t cap) : dev_(dev), cap_(cap) { dev_->add_cq(this); }

SimCq::~SimCq() {
  dev_->world().drop_late(this);
  dev_->remove_cq(this);
}

Status SimCq::arm() {
  armed_ = true;
  return Status::ok();
}

int SimCq::poll(Wc* wc, int max) {
  World& w = dev_->world();
  w.stale_suspect = 0;
  if (w.poll_ns() != 0) [[unlikely]]
    w.advance(w.poll_ns());
  w.auto_progress(1);
  int n = 0;
  while (n < max && !visible_.empty()) {
    const CqEntry& e = visible_.front();
    wc[n++] = e.wc;
    if (e.send)
      if (SimQp* q = dev_->world().qp_by_num(e.wc.qp_num)) q->retire_to(e.seq);
    if (e.stale) {
      // A completion of a destroyed QP: the host must take it as that QP's
      // (it knows it is gone), even when its number names a QP made since.
      World& w = dev_->world();
      ++w.counters_mut().stale_completions;
      if (const SimQp* now = w.qp_by_num(e.wc.qp_num)) {
        ++w.counters_mut().stale_on_recycled;
        if (now->state() == QpState::kRts || now->state() == QpState::kConnecting) w.stale_suspect = now->serial();
      }
      w.trace_event("cqe-of-destroyed-qp", e.wc.qp_num, w.qp_by_num(e.wc.qp_num) ? "recycled" : "free", 0);
    }
    visible_.pop_front();
  }
  return n;
}

void SimCq::publish(const CqEntry& e) {
  if (visible_.size() >= cap_) ++dev_->world().counters_mut().cq_overruns;
  visible_.push_back(e);
  if (armed_) {
    armed_ = false;  // one notification per arm
    dev_->notify();
  }
}

// ---------------------------------------------------------------- SRQ

int SimSrq::post_recv(const RecvWr* wrs, int n, int* err) {
  *err = 0;
  int i = 0;
  for (; i < n; ++i) {
    const RecvWr& wr = wrs[i];
    if (wr.num_sge > max_sge_ || (wr.num_sge != 0 && wr.sg_list == nullptr)) {
      *err = EINVAL;
      break;
    }
    if (rq_.size() >= cap_) {
      *err = EAGAIN;
      break;
    }
    PendingRecv r{wr.wr_id, {}, wr.num_sge};
    for (uint32_t k = 0; k < wr.num_sge; ++k) r.sg[k] = wr.sg_list[k];
    rq_.push_back(r);
    st_posted_.add();
  }
  // A SEND waiting for a receive may land now: an armed host must wake.
  if (i > 0) dev_->asleep();
  return i;
}

Result<std::unique_ptr<Srq>> SimDevice::create_srq(Pd* pd, uint32_t depth, uint32_t max_sge) {
  if (caps_.max_srq_wr == 0) return make_error(Errc::kUnsupported, "sim: this device was opened with srq=0");
  auto* spd = static_cast<SimPd*>(pd);
  if (spd == nullptr || spd->dev() != this) return make_error(Errc::kInvalidArgument, "sim: the PD is another device's");
  if (depth == 0 || depth > caps_.max_srq_wr || max_sge == 0 || max_sge > caps_.max_srq_sge)
    return make_error(Errc::kInvalidArgument, "sim: SRQ of %u receives of %u SGEs (1..%u, 1..%u)", depth, max_sge,
                      caps_.max_srq_wr, caps_.max_srq_sge);
  return std::unique_ptr<Srq>(new SimSrq(this, spd, depth, max_sge));
}

// ---------------------------------------------------------------- wait mode

int SimDevice::wait_fd() {
  if (wait_fd_ < 0) wait_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return wait_fd_;
}

void SimDevice::notify() {
  if (notified_ || wait_fd_ < 0) return;
  notified_ = true;
  world_->count_wakeup();
  uint64_t one = 1;
  ssize_t w = ::write(wait_fd_, &one, sizeof one);
  (void)w;  // an eventfd write of 1 cannot block or fail short of overflow
}

void SimDevice::report(CmEvent ev) {
  events_.push_back(std::move(ev));
  if (armed_) notify();
}

void SimDevice::asleep() {
  if (!armed_ || running_) return;
  running_ = true;
  while (!notified_ && world_->step()) {
  }
  running_ = false;
}

Status SimDevice::arm_wait() {
  if (wait_fd() < 0) return make_error(Errc::kNoResources, "sim: eventfd: %s", std::strerror(errno));
  armed_ = true;
  if (!events_.empty()) notify();
  asleep();
  return Status::ok();
}

bool SimDevice::ack_wait() {
  if (wait_fd_ >= 0 && notified_) {
    uint64_t v = 0;
    ssize_t r = ::read(wait_fd_, &v, sizeof v);
    (void)r;  // nonblocking: EAGAIN when nothing was written
  }
  notified_ = false;
  armed_ = false;
  for (SimCq* cq : cqs_) cq->disarm();
  return !events_.empty();
}

// ---------------------------------------------------------------- device

SimDevice::SimDevice(std::shared_ptr<World> world, std::string addr) : world_(std::move(world)), addr_(std::move(addr)) {
  uint32_t idx = world_->next_device_index();
  world_->add_device(this);
  caps_.driver = "sim";
  caps_.name = "sim" + std::to_string(idx);
  host_ = "sim host " + std::to_string(idx);
  caps_.max_qp_wr = kMaxQpWr;
  caps_.max_send_sge = kMaxSge;
  caps_.max_recv_sge = kMaxSge;
  caps_.max_cqe = kMaxCqe;
  caps_.max_fast_reg_depth = kMaxFastRegDepth;
  caps_.fast_reg_page_size = 4096;
  caps_.max_mr_size = uint64_t{1} << 40;
  caps_.max_private_data = 56;
  caps_.fast_reg = true;
  caps_.remote_invalidation = true;
  // MR-style fast registration (FRWR): any QP of the PD reaches it, and a
  // Send With Invalidate may name any registration of the receiver's PD.
  caps_.fast_reg_qp_bound = false;
  caps_.remote_inv_qp_bound = false;
  table_.emplace_back();  // index 0 is never used: rkey 0 means "none"
  table_[0].in_use = false;
}

void SimDevice::set_srq_depth(uint32_t depth) {
  caps_.max_srq_wr = std::min(depth, kMaxSrqWr);
  caps_.max_srq_sge = depth == 0 ? 0 : kMaxSge;
}

SimDevice::~SimDevice() {
  world_->remove_device(this);
  if (listening_) world_->unbind_listener(addr_, this);
  requests_.clear();  // before the device goes: unanswered ones refuse their clients
  if (wait_fd_ >= 0) ::close(wait_fd_);
}

Result<std::unique_ptr<Pd>> SimDevice::alloc_pd() { return std::unique_ptr<Pd>(new SimPd(this)); }

Result<std::unique_ptr<Cq>> SimDevice::create_cq(uint32_t capacity) {
  if (capacity == 0 || capacity > kMaxCqe) return make_error(Errc::kInvalidArgument, "sim: CQ of %u entries", capacity);
  return std::unique_ptr<Cq>(new SimCq(this, capacity));
}

Result<std::unique_ptr<Qp>> SimDevice::create_qp(const QpInit& init) {
  if (init.pd == nullptr || init.send_cq == nullptr || init.recv_cq == nullptr)
    return make_error(Errc::kInvalidArgument, "sim: QP without PD or CQs");
  if (init.srq != nullptr) {
    auto* srq = dynamic_cast<SimSrq*>(init.srq);
    if (srq == nullptr || srq->dev() != this || srq->pd() != init.pd)
      return make_error(Errc::kInvalidArgument, "sim: the SRQ is another device's or another PD's");
  }
  if (init.sq_depth == 0 || init.sq_depth > kMaxQpWr || init.max_send_sge > kMaxSge ||
      (init.srq == nullptr && (init.rq_depth > kMaxQpWr || init.max_recv_sge > kMaxSge)))
    return make_error(Errc::kInvalidArgument, "sim: QP depths or SGEs over the device's limits");
  if (static_cast<SimPd*>(init.pd)->dev() != this)
    return make_error(Errc::kInvalidArgument, "sim: the PD is another device's");
  return std::unique_ptr<Qp>(new SimQp(this, init));
}

bool SimDevice::link_is_down() const { return world_->now_ns() < down_until_; }

Status SimDevice::listen() {
  if (!port_up_) return make_error(Errc::kDisconnected, "sim: the port of %s is down", caps_.name.c_str());
  if (listening_) return Status::ok();
  if (!world_->bind_listener(addr_, this))
    return make_error(Errc::kInvalidArgument, "sim: address %s of world %s has a listener already", addr_.c_str(),
                      world_->name().c_str());
  listening_ = true;
  return Status::ok();
}

Status SimDevice::connect(Qp* q, std::span<const uint8_t> private_data) {
  auto* qp = static_cast<SimQp*>(q);
  if (qp->state() != QpState::kInit) return make_error(Errc::kInvalidArgument, "sim: connect on a used QP");
  if (!port_up_) return make_error(Errc::kDisconnected, "sim: the port of %s is down", caps_.name.c_str());
  if (private_data.size() > caps_.max_private_data)
    return make_error(Errc::kInvalidArgument, "sim: %zu bytes of private data", private_data.size());
  qp->set_state(QpState::kConnecting);
  CmAction a{CmAction::Kind::kRequest, CmEvent{CmEventType::kConnectRequest}, addr_};
  a.ev.private_data.assign(private_data.begin(), private_data.end());
  qp->queue_cm(std::move(a));
  return Status::ok();
}

// The QP a connection request came from, if it is still that QP: with
// recycled numbers (World::recycle_qp_numbers) another may have its number.
static SimQp* requester(World* w, const SimConnRequest& r) {
  SimQp* q = w->qp_by_num(r.client_qpn());
  return q != nullptr && q->serial() == r.client_serial ? q : nullptr;
}

void SimDevice::request_arrived(uint32_t client_qpn, std::vector<uint8_t> pdata, const std::string& host) {
  auto r = std::make_unique<SimConnRequest>(world_, client_qpn, pdata, host);
  if (SimQp* q = world_->qp_by_num(client_qpn)) r->client_serial = q->serial();
  CmEvent ev{CmEventType::kConnectRequest};
  ev.request = r.get();
  ev.private_data = std::move(pdata);
  requests_.push_back(std::move(r));
  report(std::move(ev));
}

Status SimDevice::accept(ConnRequest* req, Qp* q, std::span<const uint8_t> private_data) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == req; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "sim: accept of an unknown request");
  auto* sqp = static_cast<SimQp*>(q);
  if (sqp->state() != QpState::kInit) return make_error(Errc::kInvalidArgument, "sim: accept on a used QP");
  std::unique_ptr<SimConnRequest> r = std::move(*it);
  requests_.erase(it);
  r->answered();
  SimQp* cqp = requester(world_.get(), *r);
  if (cqp == nullptr || cqp->state() != QpState::kConnecting)
    return make_error(Errc::kDisconnected, "sim: the client gave up before the accept");
  sqp->link(cqp, sqp->pd());
  cqp->link(sqp, cqp->pd());
  sqp->set_state(QpState::kConnecting);
  // Both ends learn of it as scheduled events, in either order.
  CmAction c{CmAction::Kind::kDeliver, CmEvent{CmEventType::kEstablished}, {}};
  c.ev.qp = cqp;
  c.ev.private_data.assign(private_data.begin(), private_data.end());
  cqp->queue_cm(std::move(c));
  CmAction s{CmAction::Kind::kDeliver, CmEvent{CmEventType::kEstablished}, {}};
  s.ev.qp = sqp;
  s.ev.private_data = r->private_data();
  sqp->queue_cm(std::move(s));
  return Status::ok();
}

Status SimDevice::reject(ConnRequest* req, std::span<const uint8_t> private_data) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == req; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "sim: reject of an unknown request");
  std::unique_ptr<SimConnRequest> r = std::move(*it);
  requests_.erase(it);
  r->answered();
  if (SimQp* cqp = requester(world_.get(), *r); cqp != nullptr && cqp->state() == QpState::kConnecting) {
    CmAction c{CmAction::Kind::kDeliver, CmEvent{CmEventType::kRejected}, {}};
    c.ev.qp = cqp;
    c.ev.private_data.assign(private_data.begin(), private_data.end());
    c.ev.status = make_error(Errc::kRemoteError, "sim: the server rejected the connection");
    cqp->queue_cm(std::move(c));
  }
  return Status::ok();
}

Status SimDevice::disconnect(Qp* q) {
  auto* qp = static_cast<SimQp*>(q);
  if (qp->state() == QpState::kError) return Status::ok();
  if (world_->stale_suspect != 0 && world_->stale_suspect == qp->serial()) {
    ++world_->counters_mut().stale_acted_on;
    world_->trace_event("disconnect-on-stale-cqe", qp->qp_num(), "", 0);
  }
  qp->enter_error(make_error(Errc::kDisconnected, "disconnected locally"), false, true);
  return Status::ok();
}

SimConnRequest::~SimConnRequest() {
  if (answered_) return;
  std::shared_ptr<World> w = world_.lock();
  if (!w) return;
  SimQp* cqp = requester(w.get(), *this);
  if (cqp == nullptr || cqp->state() != QpState::kConnecting) return;
  w->trace_event("cm-request-unanswered", client_qpn_, "", 0);
  CmAction c{CmAction::Kind::kDeliver, CmEvent{CmEventType::kRejected}, {}};
  c.ev.qp = cqp;
  c.ev.status = make_error(Errc::kRemoteError, "sim: the connection request was dropped unanswered");
  cqp->queue_cm(std::move(c));
}

Result<std::unique_ptr<ConnRequest>> SimDevice::detach(ConnRequest* req) {
  auto it = std::find_if(requests_.begin(), requests_.end(), [&](const auto& r) { return r.get() == req; });
  if (it == requests_.end()) return make_error(Errc::kInvalidArgument, "sim: detach of an unknown request");
  std::unique_ptr<ConnRequest> r = std::move(*it);
  requests_.erase(it);
  return r;
}

Result<ConnRequest*> SimDevice::adopt(std::unique_ptr<ConnRequest> req) {
  auto* r = dynamic_cast<SimConnRequest*>(req.get());
  if (r == nullptr) return make_error(Errc::kInvalidArgument, "sim: adopt of another driver's request");
  // Another world's client cannot reach this one: refused (destroying it
  // tells that client, in its own world).
  if (r->world() != world_.get()) return make_error(Errc::kInvalidArgument, "sim: adopt of another world's request");
  req.release();
  requests_.emplace_back(r);
  return static_cast<ConnRequest*>(r);
}

void SimDevice::forget_qp(const Qp* qp) {
  events_.erase(std::remove_if(events_.begin(), events_.end(), [&](const CmEvent& e) { return e.qp == qp; }),
                events_.end());
}

bool SimDevice::poll_cm(CmEvent* ev) {
  world_->auto_progress(1);
  // The port's state changes where a host reads the device's own events.
  if (port_up_ == link_is_down()) {
    port_up_ = !port_up_;
    st_port_changes_.add();
    world_->trace_event(port_up_ ? "port-up" : "port-down", 0, caps_.name.c_str(), 0);
  }
  if (events_.empty()) return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

// ---------------------------------------------------------------- driver

namespace {

class SimDriver final : public Driver {
 public:
  const char* name() const override { return "sim"; }
  const char* usage() const override {
    return "sim:world=NAME,seed=N,addr=A,srq=D,qp_bound=0|1,fast_reg=0|1  a simulated device in a deterministic world "
           "(docs/sim.md): devices of one world reach each other at addr (or port, the same); seed is used when the world is made; srq: "
           "the depth of its shared receive queues (0: none; default 4096); qp_bound=1: fast registrations are "
           "reached and remotely invalidated only through the QP that made them (type-2 windows; default 0: FRWR); "
           "fast_reg=0: no fast registration and no remote invalidation (reg_mr only, as some devices)";
  }
  Result<std::unique_ptr<Device>> open(const DevArgs& args) override {
    // port: another name for addr, so that a host that adds ",port=N" to a
    // spec (the RPC functional tests' fixture, as for verbs) reaches sim too.
    TERN_TRY(args.check_keys({"world", "seed", "addr", "port", "srq", "qp_bound", "fast_reg"}));
    if (args.has("addr") && args.has("port"))
      return make_error(Errc::kInvalidArgument, "sim: addr and port name the same thing; give one");
    Result<uint64_t> qp_bound = args.get_u64("qp_bound", 0);
    if (!qp_bound) return qp_bound.status();
    if (*qp_bound > 1) return make_error(Errc::kInvalidArgument, "sim: qp_bound must be 0 or 1");
    Result<uint64_t> fast_reg = args.get_u64("fast_reg", 1);
    if (!fast_reg) return fast_reg.status();
    if (*fast_reg > 1) return make_error(Errc::kInvalidArgument, "sim: fast_reg must be 0 or 1");
    Result<uint64_t> seed = args.get_u64("seed", 1);
    if (!seed) return seed.status();
    Result<uint64_t> srq = args.get_u64("srq", kMaxSrqWr);
    if (!srq) return srq.status();
    if (*srq > kMaxSrqWr) return make_error(Errc::kInvalidArgument, "sim: srq=%llu (0..%u)",
                                            static_cast<unsigned long long>(*srq), kMaxSrqWr);
    auto world = World::open(args.get("world", "default"), *seed);
    auto dev = std::make_unique<SimDevice>(std::move(world), args.get("addr", args.get("port", "0")));
    dev->set_srq_depth(static_cast<uint32_t>(*srq));
    dev->set_qp_bound(*qp_bound == 1);
    if (*fast_reg == 0) dev->without_fast_reg();
    return std::unique_ptr<Device>(std::move(dev));
  }
};

}  // namespace

}  // namespace tern::sim

TERN_BUILTIN_DRIVER(sim, ::tern::sim::SimDriver)
