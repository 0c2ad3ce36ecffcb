// Engine control path: creating an engine and its shared pools, devices and
// protection domains, registered memory, handlers, connect and listen, and
// the connection events that make and break connections.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_impl.h"
#include "engine/frwr_registrar.h"
#include "engine/reg_cache_registrar.h"
#include "engine/wire.h"

namespace tern::rpc {

using namespace tern::rdma;

const char* call_status_name(CallStatus s) {
  switch (s) {
    case CallStatus::kOk: return "ok";
    case CallStatus::kDisconnected: return "disconnected";
    case CallStatus::kProgUnavail: return "program unavailable";
    case CallStatus::kProgMismatch: return "program version mismatch";
    case CallStatus::kProcUnavail: return "procedure unavailable";
    case CallStatus::kGarbageArgs: return "garbage arguments";
    case CallStatus::kSystemErr: return "system error";
    case CallStatus::kDenied: return "denied";
    case CallStatus::kRdmaError: return "RDMA_ERROR";
    case CallStatus::kBadReply: return "bad reply";
    case CallStatus::kTooLarge: return "too large";
    case CallStatus::kNoRegistration: return "memory could not be registered";
    case CallStatus::kTimedOut: return "timed out";
    case CallStatus::kCancelled: return "cancelled";
  }
  return "?";
}

namespace {

size_t pow2_at_least(size_t v) {
  size_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// The option values a 0 asks the engine to choose, and the checks that
// they fit the arena.
Status settle_options(EngineOptions* o) {
  if (o->credits == 0 || o->credits > 1024)
    return make_error(Errc::kInvalidArgument, "engine: credits %u not in [1, 1024]", o->credits);
  if (o->inline_send < 1024 || o->inline_recv < 1024 || o->inline_send > (256u << 10) || o->inline_recv > (256u << 10))
    return make_error(Errc::kInvalidArgument, "engine: inline thresholds must be in [1 KiB, 256 KiB]");
  if (o->send_batch == 0 || o->max_bulk == 0 || o->max_mrs == 0 || o->frwr_depth == 0)
    return make_error(Errc::kInvalidArgument, "engine: send_batch, max_bulk, max_mrs and frwr_depth must be > 0");
  if (o->max_connections == 0 || o->max_connections > (1u << 20))
    return make_error(Errc::kInvalidArgument, "engine: max_connections %u not in [1, 2^20]", o->max_connections);
  if (o->max_long_call < 1024 || o->max_long_call > (16u << 20))
    return make_error(Errc::kInvalidArgument, "engine: max_long_call %u not in [1 KiB, 16 MiB]", o->max_long_call);
  if (o->max_bulk > (256u << 20) || o->max_reply > (16u << 20))
    return make_error(Errc::kInvalidArgument, "engine: max_bulk is at most 256 MiB, max_reply at most 16 MiB");
  if (o->max_calls == 0) return make_error(Errc::kInvalidArgument, "engine: max_calls must be > 0");
  if (o->registration == EngineOptions::Registration::kRegCache && !o->trusted_peers)
    return make_error(Errc::kInvalidArgument,
                      "engine: the registration cache leaves chunk memory reachable by the peer after its calls; "
                      "it needs EngineOptions::trusted_peers");
  const size_t arena = o->arena_bytes;
  if (o->recv_buffers == 0)
    o->recv_buffers = static_cast<uint32_t>(std::clamp<size_t>(arena / 8 / o->inline_recv, 16, 4096));
  if (o->send_buffers == 0)
    o->send_buffers =
        static_cast<uint32_t>(std::clamp<size_t>(arena / 4 / o->inline_send, 16, size_t{o->recv_buffers} + 1024));
  const size_t block = pow2_at_least(std::max<size_t>({o->max_bulk, size_t{o->max_reply} + 256, o->max_long_call}));
  if (o->bulk_pool_bytes == 0) o->bulk_pool_bytes = std::max(arena / 2, block);
  const size_t need = size_t{o->recv_buffers} * o->inline_recv + size_t{o->send_buffers} * o->inline_send +
                      o->bulk_pool_bytes / block * block;
  if (o->server_rw_timeout_ms > 3'600'000)
    return make_error(Errc::kInvalidArgument, "engine: server_rw_timeout_ms %u is over an hour",
                      o->server_rw_timeout_ms);
  if (o->bulk_pool_bytes < block)
    return make_error(Errc::kInvalidArgument,
                      "engine: bulk_pool_bytes %zu cannot hold one block of %zu bytes (max_bulk, max_reply, "
                      "max_long_call)",
                      o->bulk_pool_bytes, block);
  if (need > arena)
    return make_error(Errc::kInvalidArgument,
                      "engine: arena_bytes %zu is too small for %u receive and %u send buffers and a %zu-byte bulk "
                      "pool (%zu bytes)",
                      arena, o->recv_buffers, o->send_buffers, o->bulk_pool_bytes, need);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& given) {
  EngineOptions o = given;
  TERN_TRY(settle_options(&o));
  // An unknown TERN_LOG_LEVEL is the host's mistake to hear about.
  TERN_TRY(log_init());
  auto e = std::make_unique<EngineImpl>(o);
  e->cm_interval_ticks = ticks_from_ns(1'000'000);
  e->now_tick = now_ticks();
  if (o.breakdown)
    for (auto& b : e->bd_gone) b = std::make_unique<Breakdown>(e->ns_per_tick);
  e->ns_per_tick = 1e9 / tick_hz();
  if (o.trace_every != 0)
    e->trace = std::make_unique<CallTrace>(o.trace_every, o.trace_capacity, e->ns_per_tick, now_ticks(), monotonic_ns());
  TERN_TRY(e->make_pools());
  e->rw_timeout_ticks = ticks_from_ns(uint64_t{o.server_rw_timeout_ms} * 1'000'000);
  // The longest a connection that is up goes between two looks of the
  // timers (ClientConn::refile_at): the shorter of the two keepalive times.
  if (o.keepalive_ms != 0)
    e->keepalive_look_ticks = ticks_from_ns(
        uint64_t{o.keepalive_idle_ms != 0 ? std::min(o.keepalive_ms, o.keepalive_idle_ms) : o.keepalive_ms} *
        1'000'000);
  // Telemetry: readable from outside the process when the host runs an
  // exporter (EAL's, or the Unix socket); costs nothing otherwise.
  auto src = telemetry::register_source(
      "engine", "",
      [](void* ctx, telemetry::Reply* out) {
        auto* eng = static_cast<const EngineImpl*>(ctx);
        out->add_stats(eng->fixed_view());
      },
      e.get());
  if (src) {
    e->tsrc = std::move(src).value();
    e->tel_id = e->tsrc.id();
  } else {
    TERN_LOG(kWarn, "engine", "no telemetry for this engine: %s", src.status().to_string().c_str());
  }
  return std::unique_ptr<Engine>(std::move(e));
}

ConnCore::ConnCore(const EngineOptions& o)
    : opt(o), requests(o.max_calls), srv_calls(std::max<uint32_t>(o.recv_buffers * 2 + 64, 256)),
      srv_call_cap(std::max<uint32_t>(o.recv_buffers * 2 + 64, 256)) {}

EngineImpl::EngineImpl(const EngineOptions& o) : ConnCore(o) { control = this; }

Status ConnCore::make_pools() {
  const EngineOptions& o = opt;
  auto a = mem::Arena::create({.size = o.arena_bytes, .name = "tern-engine"});
  if (!a) return a.status();
  arena = std::move(a).value();
#if defined(TERN_DEBUG) && TERN_DEBUG
  // Test builds: recycled buffers are poisoned, so that one reused while a
  // device or peer may still read it shows up as corrupted data.
  poison = true;
#endif
  send_bufs = std::make_unique<MsgBufPool>(arena.get(), o.inline_send, o.send_buffers, poison);
  recv_bufs = std::make_unique<MsgBufPool>(arena.get(), o.inline_recv, o.recv_buffers, poison);
  service.set_capacity(o.recv_buffers);
  send_bufs_low = ConnCore::three_quarters(send_bufs->max_count());
  srv_calls_low = ConnCore::three_quarters(srv_call_cap);
  const size_t block = pow2_at_least(std::max<size_t>({o.max_bulk, size_t{o.max_reply} + 256, o.max_long_call}));
  const size_t bulk_bytes = o.bulk_pool_bytes / block * block;
  auto* bulk_mem = static_cast<uint8_t*>(arena->carve(bulk_bytes, 4096));
  if (bulk_mem == nullptr)
    return make_error(Errc::kNoResources, "engine: the arena cannot hold a %zu-byte bulk pool", bulk_bytes);
  bulk = std::make_unique<BulkPool>(bulk_mem, bulk_bytes, 4096, block, poison);
  // The reserve peers beyond their share leave free: an eighth of the pool
  // by default, room for one largest call at least, half the pool at most.
  const size_t reserve = o.bulk_pool_reserve_bytes != 0 ? o.bulk_pool_reserve_bytes : bulk_bytes / 8;
  const size_t half = bulk_bytes / 2;
  shares = std::make_unique<BulkShares>(bulk_bytes, std::clamp(reserve, std::min(block, half), half), block);
  return Status::ok();
}

EngineImpl::~EngineImpl() {
  // Every outstanding call completes once, after its registrations are
  // fenced; then connections (which post nothing more), then the devices'
  // queues and registrations.
  // Out of any listen group first: no connection is handed to us from now on.
  for (auto& dc : devices)
    if (dc->member) dc->group->leave(dc->member);
  shutdown();
  conns.clear();
  for (auto& dc : devices) {
    if (dc->recv) dc->recv->release_all();
    dc->recv.reset();
    dc->srq.reset();
    dc->shared.reset();
    dc->scq.reset();
    dc->rcq.reset();
    dc->dev.reset();
  }
}

PdCtx::~PdCtx() {
  // Fast MRs and registrations before the PD they belong to.
  reg.reset();
  regions.clear();
  arena_mr.reset();
  pd.reset();
}

bool PdCtx::region_lkey(uint64_t a, uint64_t len, uint32_t* lkey) const {
  // Regions are sorted by address and do not overlap: the last one that
  // starts at or before a is the only candidate.
  auto it = std::upper_bound(regions.begin(), regions.end(), a, [](uint64_t x, const Region& r) { return x < r.addr; });
  if (it == regions.begin()) return false;
  const Region& r = *--it;
  if (len > r.len || a - r.addr > r.len - len) return false;
  *lkey = r.mr->lkey();
  return true;
}

Status PdCtx::add_region(void* addr, size_t len) {
  // Local only: no remote right, no usable rkey. A peer reaches this memory
  // only through a call's fast registration, and only until it is invalidated.
  auto mr = pd->reg_mr(addr, len, kAccessLocalWrite);
  if (!mr) return mr.status();
  Region r{reinterpret_cast<uint64_t>(addr), len, std::move(mr).value()};
  auto it = std::upper_bound(regions.begin(), regions.end(), r.addr,
                             [](uint64_t x, const Region& y) { return x < y.addr; });
  regions.insert(it, std::move(r));
  return Status::ok();
}

void* EngineImpl::alloc(size_t len, size_t align) { return arena->carve(len, align); }

Status EngineImpl::register_memory(void* addr, size_t len) {
  if (addr == nullptr || len == 0) return make_error(Errc::kInvalidArgument, "register_memory: empty range");
  auto a = reinterpret_cast<uint64_t>(addr);
  for (auto& [p, l] : user_regions_) {
    auto b = reinterpret_cast<uint64_t>(p);
    if (a < b + l && b < a + len)
      return make_error(Errc::kInvalidArgument, "register_memory: [%p, +%zu) overlaps a registered region", addr, len);
  }
  if (arena->contains(addr, 1) || arena->contains(static_cast<uint8_t*>(addr) + len - 1, 1))
    return make_error(Errc::kInvalidArgument, "register_memory: the engine's arena is registered already");
  for (auto& dc : devices) TERN_TRY(dc->shared->add_region(addr, len));
  for (auto& c : conns)
    if (c && c->own_pd) TERN_TRY(c->own_pd->add_region(addr, len));
  // Remembered for devices and connections opened later.
  user_regions_.push_back({addr, len});
  return Status::ok();
}

Result<std::unique_ptr<PdCtx>> EngineImpl::make_pd_ctx(DeviceCtx* dc) {
  const DeviceCaps& caps = dc->dev->caps();
  auto p = std::make_unique<PdCtx>();
  auto pd = dc->dev->alloc_pd();
  if (!pd) return pd.status();
  p->pd = std::move(pd).value();
  auto amr = p->pd->reg_mr(arena->base(), arena->size(), kAccessLocalWrite);
  if (!amr) return amr.status();
  p->arena_mr = std::move(amr).value();
  p->arena_lo = reinterpret_cast<uint64_t>(arena->base());
  p->arena_hi = p->arena_lo + arena->size();
  for (auto& [a, l] : user_regions_) TERN_TRY(p->add_region(a, l));
  switch (dc->chunk_reg) {
    case ChunkReg::kFastReg: {
      // Registration depth from the device, as frwr_query_device does.
      uint32_t depth = std::min(opt.frwr_depth, caps.max_fast_reg_depth);
      p->reg = std::make_unique<FrwrRegistrar>(p->pd.get(), depth, caps.fast_reg_page_size, opt.max_mrs,
                                               caps.fast_reg_zero_based, &engine_stats.rkeys_live);
      break;
    }
    case ChunkReg::kRegCache:
      p->reg = std::make_unique<RegCacheRegistrar>(p->pd.get(), 4096, opt.max_mrs, &engine_stats.rkeys_live);
      break;
    case ChunkReg::kNone:
      break;
  }
  if (p->reg) p->reg->share_stats(&reg_st);
  return p;
}

Result<DeviceCtx*> EngineImpl::device(std::string_view spec) {
  for (auto& dc : devices)
    if (dc->spec == spec) return dc.get();
  auto dc = std::make_unique<DeviceCtx>();
  dc->spec = std::string(spec);
  dc->index = static_cast<uint32_t>(devices.size());
  auto d = open_device(spec);
  if (!d) return d.status();
  dc->dev = std::move(d).value();
  const DeviceCaps& caps = dc->dev->caps();
  if (caps.fast_reg && opt.registration == EngineOptions::Registration::kAuto) {
    dc->chunk_reg = ChunkReg::kFastReg;
    dc->pd_per_conn = !caps.fast_reg_qp_bound;
  } else if (opt.trusted_peers) {
    dc->chunk_reg = ChunkReg::kRegCache;
    TERN_LOG(kWarn, "engine",
             "%s: chunks are registered with reg_mr and cached (%u entries), %s; registrations stay valid "
             "between calls (EngineOptions::trusted_peers) and remote invalidation is off",
             caps.name.c_str(), opt.max_mrs,
             caps.fast_reg ? "as EngineOptions::registration asks" : "the device has no fast registration");
  } else {
    dc->chunk_reg = ChunkReg::kNone;
    TERN_LOG(kInfo, "engine",
             "%s has no fast registration: calls that need chunks will be refused (the registration cache "
             "would need EngineOptions::trusted_peers); serving is unaffected",
             caps.name.c_str());
  }
  auto shared = make_pd_ctx(dc.get());
  if (!shared) return shared.status();
  dc->shared = std::move(shared).value();
  // Completion queues sized for every connection this engine may hold on
  // the device; the driver applies back-pressure rather than overrun.
  uint32_t cqe = std::min<uint32_t>(caps.max_cqe, 65536);
  auto scq = dc->dev->create_cq(cqe);
  if (!scq) return scq.status();
  auto rcq = dc->dev->create_cq(cqe);
  if (!rcq) return rcq.status();
  dc->scq = std::move(scq).value();
  dc->rcq = std::move(rcq).value();
  dc->offer_inv = opt.remote_invalidation && dc->chunk_reg == ChunkReg::kFastReg;
  // Clients on a device whose fast registrations are PD-wide keep a PD of
  // their own each, and a receive queue of their own with it: no client
  // here would use a shared receive queue, so it is made when the device
  // starts to serve (listen) -- made now, it would hold receive buffers
  // that no connection can ever use.
  if (!dc->pd_per_conn) make_shared_recv(dc.get());
  register_device_telemetry(tel_id, dc.get());
  devices.push_back(std::move(dc));
  return devices.back().get();
}

uint16_t ConnCore::add_queue(RecvQueue* q) {
  if (!free_queue_ids.empty()) {
    uint16_t id = free_queue_ids.back();
    free_queue_ids.pop_back();
    queues[id] = q;
    return id;
  }
  TERN_CHECK(queues.size() < UINT16_MAX, "receive queue ids exhausted");
  queues.push_back(q);
  return static_cast<uint16_t>(queues.size() - 1);
}

void ConnCore::remove_queue(uint16_t id) {
  for (RecvQueue*& q : to_post)
    if (q == queues[id]) q = nullptr;
  queues[id] = nullptr;
  free_queue_ids.push_back(id);
}

EngineMr* EngineImpl::registration_elsewhere(const ConnBase* me, const PdCtx* pd_ctx, uint32_t rkey) {
  for (auto& c : conns) {
    ClientConn* k = c ? c->as_client() : nullptr;
    if (k == nullptr || k == me || k->pd_ctx != pd_ctx) continue;
    if (EngineMr* m = k->live_registration(rkey); m != nullptr) return m;
  }
  return nullptr;
}

void EngineImpl::enter(ConnBase* c) {
  uint32_t s;
  if (!free_slots.empty()) {
    s = free_slots.back();
    free_slots.pop_back();
  } else {
    s = static_cast<uint32_t>(conns.size());
    conns.emplace_back();
  }
  c->slot = s;
  conns[s].reset(c);
  ++nconns;
  engine_stats.connections.add();
}

Result<Connection*> EngineImpl::connect(std::string_view spec) {
  if (held() >= opt.max_connections)
    return make_error(Errc::kNoResources, "engine: %u connections held already (EngineOptions::max_connections)",
                      held());
  auto dcr = device(spec);
  if (!dcr) return dcr.status();
  auto* c = new ClientConn(this, *dcr);
  enter(c);
  clients.push_back(c);
  Status s = c->setup_queues();
  uint8_t pdata[64];
  size_t n = wire::encode_pdata(pdata, sizeof pdata, opt.inline_send, opt.inline_recv, (*dcr)->offer_inv);
  if (s) s = (*dcr)->dev->connect(c->qp.get(), std::span<const uint8_t>(pdata, n));
  if (!s) {
    c->raise(ConnEvent::kSetupFailed);
    c->user_closed = true;  // never handed out: reclaimed from the next poll
    c->want_service();
    return s;
  }
  c->connect_deadline = now_ticks() + ticks_from_ns(uint64_t{opt.connect_timeout_ms} * 1'000'000);
  c->timer_due(c->connect_deadline);
  return static_cast<Connection*>(c);
}

void EngineImpl::reserve_credits(RecvQueue* q) {
  // A first credit kept for every connection the server may accept (up to
  // half the receive pool, so that grants can still grow).
  q->grants().set_reserve(std::min(opt.max_connections, q->target() / 2));
  // And credits a peer beyond its fair share may not borrow, so that a peer
  // arriving while another holds the rest is granted at once (credits.h):
  // by default two full grants, at most a quarter of the pool.
  const uint32_t lend = opt.credit_lend_reserve != 0 ? opt.credit_lend_reserve : 2 * opt.credits;
  q->grants().set_lend_reserve(std::min(lend, q->target() / 4));
}

void EngineImpl::make_shared_recv(DeviceCtx* dc) {
  // One pool of receive buffers for every connection on the device that
  // shares its PD, when it has a shared receive queue: a server's memory
  // for receives no longer grows with its connections, and credits are
  // granted from it.
  const DeviceCaps& caps = dc->dev->caps();
  if (dc->recv || caps.max_srq_wr == 0 || caps.max_srq_sge < 1) return;
  uint32_t depth = std::min(opt.recv_buffers, caps.max_srq_wr);
  auto srq = dc->dev->create_srq(dc->shared->pd.get(), depth, 1);
  if (!srq) {
    TERN_LOG(kWarn, "engine", "%s: no shared receive queue (%s): each connection posts its own receives",
             dc->spec.c_str(), srq.status().to_string().c_str());
    return;
  }
  dc->srq = std::move(srq).value();
  uint16_t qid = add_queue(nullptr);
  dc->recv = std::make_unique<RecvQueue>(recv_bufs.get(), depth, opt.credits, dc->srq.get(), nullptr, qid,
                                         dc->shared->arena_lkey());
  queues[qid] = dc->recv.get();
  // A first batch now; the queue grows with load (credits a server
  // grants, replies a client waits for) up to `depth`, from the
  // engine's receive buffers, which every device draws on.
  dc->recv->grow(std::min<uint32_t>(depth, 64));
  queue_needs_post(dc->recv.get());
}

Status EngineImpl::listen(std::string_view spec) {
  auto dcr = device(spec);
  if (!dcr) return dcr.status();
  if ((*dcr)->listening)
    return make_error(Errc::kBadState, "engine: already listening on %.*s", static_cast<int>(spec.size()),
                      spec.data());
  TERN_TRY((*dcr)->dev->listen());
  (*dcr)->listening = true;
  make_shared_recv(*dcr);
  if (RecvQueue* q = (*dcr)->recv.get()) reserve_credits(q);
  return Status::ok();
}

Status EngineImpl::listen(std::string_view spec, const std::shared_ptr<ListenGroup>& group) {
  if (group == nullptr) return listen(spec);
  auto g = std::static_pointer_cast<ListenGroupImpl>(group);  // ListenGroup::create() makes only these
  auto dcr = device(spec);
  if (!dcr) return dcr.status();
  DeviceCtx* dc = *dcr;
  if (dc->listening || dc->member)
    return make_error(Errc::kBadState, "engine: already listening on %.*s", static_cast<int>(spec.size()),
                      spec.data());
  bool first = false;
  auto m = g->join(spec, &first);
  if (!m) return m.status();
  if (first) {
    if (Status s = dc->dev->listen(); !s) {
      g->leave(*m);
      return s;
    }
    dc->listening = true;
  }
  dc->group = std::move(g);
  dc->member = std::move(*m);
  make_shared_recv(dc);
  if (RecvQueue* q = dc->recv.get()) reserve_credits(q);
  return Status::ok();
}

void EngineImpl::deal_request(DeviceCtx* dc, const CmEvent& ev) {
  std::shared_ptr<ListenMember> to = dc->group->next();
  if (to == nullptr || to == dc->member) {
    accept_request(dc, ev);
    return;
  }
  auto req = dc->dev->detach(ev.request);
  if (!req) {
    // A driver that cannot hand requests over: this engine serves them all.
    if (!dc->warned_handover) {
      dc->warned_handover = true;
      TERN_LOG(kWarn, "engine", "%s: cannot hand a connection to another engine of its listen group (%s): "
               "accepting every connection here", dc->spec.c_str(), req.status().to_string().c_str());
    }
    accept_request(dc, ev);
    return;
  }
  (void)dc->group->hand(to, std::move(*req));
}

int EngineImpl::adopt_requests(DeviceCtx* dc) {
  int n = 0;
  for (auto& r : dc->group->take(dc->member.get())) {
    ++n;
    auto req = dc->dev->adopt(std::move(r));
    if (!req) {
      TERN_LOG(kError, "engine", "%s: refusing a connection handed over by the listen group: %s", dc->spec.c_str(),
               req.status().to_string().c_str());
      engine_stats.connections_refused.add();
      continue;
    }
    CmEvent ev{CmEventType::kConnectRequest};
    ev.request = *req;
    ev.private_data = (*req)->private_data();
    accept_request(dc, ev);
  }
  return n;
}

void EngineImpl::handle(uint32_t prog, uint32_t vers, uint32_t proc, Handler h, void* ctx, Placer place) {
  TERN_REQUIRE(h != nullptr, "handler for %u/%u/%u is null", prog, vers, proc);
  handlers.set(HandlerEntry{prog, vers, proc, h, ctx, place, proc_counters(prog, vers, proc, true)});
}

void EngineImpl::add_poller(Poller fn, void* ctx, int wake_fd) {
  TERN_REQUIRE(fn != nullptr, "poller is null");
  pollers.push_back(HostPoller{fn, ctx, wake_fd});
}

void EngineImpl::accept_request(DeviceCtx* dc, const CmEvent& ev) {
  // A gateway's limits: a clean refusal and one line saying why, never a
  // connection that cannot be served. The reason goes to the client too
  // (wire::RejectReason), so that its error says which limit it met.
  // A copy: a driver's accept() may end the request (and its peer_host())
  // when it fails (the client gone), and the refusal's log line names it.
  const std::string peer = ev.request != nullptr ? ev.request->peer_host() : std::string();
  const char* who = peer.empty() ? "an unnamed peer" : peer.c_str();
  const char* refuse = nullptr;
  wire::RejectReason reason = wire::RejectReason::kUnspecified;
  const Admit a = admit(peer);
  if (a == Admit::kPeerLimit) {
    engine_stats.connections_refused.add();
    engine_stats.connections_refused_peer_limit.add();
    PeerConns::Entry* e = peers.find(peer);
    if (e != nullptr && !e->warned) {
      e->warned = true;
      TERN_LOG(kWarn, "engine",
               "%s: refusing connections of %s: it holds %u (EngineOptions::max_connections_per_peer); said once "
               "until one of its own is accepted again",
               dc->spec.c_str(), who, e->held);
    }
    uint8_t rj[wire::kRejectLen];
    size_t rn = wire::encode_reject(rj, sizeof rj, wire::RejectReason::kPeerLimit);
    (void)dc->dev->reject(ev.request, std::span<const uint8_t>(rj, rn));
    return;
  }
  if (a == Admit::kTableFull) {
    refuse = "max_connections reached and no idle connection of a peer over its fair share to reap";
    reason = wire::RejectReason::kTableFull;
  }
  if (refuse == nullptr && dc->recv && dc->recv->grants().free() == 0) {
    // The shared queue grows before a connection is refused for want of a
    // first credit.
    if (dc->recv->grow(16) > 0) {
      queue_needs_post(dc->recv.get());
    } else {
      refuse = "every receive buffer is granted (EngineOptions::recv_buffers)";
      reason = wire::RejectReason::kNoReceiveBuffers;
    }
  }
  if (refuse != nullptr) {
    engine_stats.connections_refused.add();
    if (!dc->warned_full) {
      dc->warned_full = true;
      TERN_LOG(kWarn, "engine", "%s: refusing connections (first: %s): %s (%u held); said once until one is "
               "accepted again",
               dc->spec.c_str(), who, refuse, held());
    }
    uint8_t rj[wire::kRejectLen];
    size_t rn = wire::encode_reject(rj, sizeof rj, reason);
    (void)dc->dev->reject(ev.request, std::span<const uint8_t>(rj, rn));
    return;
  }
  auto* c = new ServerConn(this, dc);
  enter(c);
  // Counted for its peer from now until it is destroyed (or reaped).
  c->admitted_peer = peer;
  c->peer_key = peer;
  c->in_peer_table = true;
  peers.add(peer);
  if (PeerConns::Entry* e = peers.find(peer)) e->warned = false;
  Status s = c->setup_queues();
  uint8_t pdata[64];
  size_t n = wire::encode_pdata(pdata, sizeof pdata, opt.inline_send, opt.inline_recv, dc->offer_inv);
  if (s && !c->rq->grants().admit(&c->grant, peer))
    s = make_error(Errc::kNoResources, "no receive buffer to grant the connection its first credit");
  if (s) {
    // Negotiated now from the client's offer; kEstablished confirms.
    wire::negotiate(ev.private_data, opt.inline_send, opt.inline_recv, dc->offer_inv, true, &c->inline_send,
                    &c->inline_recv, &c->remote_inv);
    // The first credit is granted with the accept: its receive must be
    // posted before it, not at the end of this pass (connection events are
    // handled after the pass's posts). A client may send the moment it
    // learns of the connection, and its Send would meet no receive: an RNR
    // wait (verbs: an RNR NAK and its timer) on every new connection.
    c->rq->post(&engine_stats.recvs_posted, &engine_stats.recv_batches);
    s = dc->dev->accept(ev.request, c->qp.get(), std::span<const uint8_t>(pdata, n));
  }
  if (!s) {
    // The client sees kRejected; the reason is ours to log. A client gone
    // before its accept (killed while connecting: kDisconnected) is not the
    // server's error, and a churn of them would flood the log at that level.
    if (s.code() == Errc::kDisconnected)
      TERN_LOG(kInfo, "engine", "refusing a connection of %s: %s", who, s.to_string().c_str());
    else
      TERN_LOG(kError, "engine", "refusing a connection of %s: %s", who, s.to_string().c_str());
    engine_stats.connections_refused.add();
    (void)dc->dev->reject(ev.request, {});
    // Reclaimed from the next poll, like a connect that failed at once:
    // nothing else would ever look at it, and it would hold its slot, its
    // QP, its place under max_connections and its first credit for good.
    c->raise(ConnEvent::kSetupFailed);
    c->want_service();
    return;
  }
  dc->warned_full = false;
}

namespace {

// What a server's refusal means for the client (wire::RejectReason): the
// errno says what to do -- EAGAIN: the server is full, try later; EDQUOT:
// this client holds its share already, close some of its own first. OK
// when the server said nothing we know (the driver's status then stands).
Status rejection(std::span<const uint8_t> pdata) {
  switch (wire::decode_reject(pdata)) {
    case wire::RejectReason::kTableFull:
      return make_sys_error(Errc::kNoResources, EAGAIN,
                            "the server refused the connection: its connection table is full "
                            "(its EngineOptions::max_connections) and no idle connection could be reaped for us");
    case wire::RejectReason::kPeerLimit:
      return make_sys_error(Errc::kNoResources, EDQUOT,
                            "the server refused the connection: this client holds as many connections as the server "
                            "allows one peer (its EngineOptions::max_connections_per_peer)");
    case wire::RejectReason::kNoReceiveBuffers:
      return make_sys_error(Errc::kNoResources, EAGAIN,
                            "the server refused the connection: every receive buffer it has is granted (its "
                            "EngineOptions::recv_buffers)");
    case wire::RejectReason::kUnspecified: break;
  }
  return Status::ok();
}

}  // namespace

int EngineImpl::poll_cm(DeviceCtx* dc) {
  CmEvent ev;
  int events = 0;
  if (dc->member && dc->member->pending.load(std::memory_order_acquire)) events += adopt_requests(dc);
  while (dc->dev->poll_cm(&ev)) {
    ++events;
    ConnBase* conn = nullptr;
    if (ev.qp != nullptr) {
      // A connection event names the QP, not the connection: find it by
      // number (QP numbers are per device).
      ConnBase* c = dc->conn_of(ev.qp->qp_num());
      if (c != nullptr && c->qp.get() == ev.qp) conn = c;
    }
    switch (ev.type) {
      case CmEventType::kConnectRequest:
        if (dc->group) deal_request(dc, ev);
        else accept_request(dc, ev);
        break;
      case CmEventType::kEstablished:
        if (conn != nullptr) conn->on_established(ev.private_data);
        break;
      case CmEventType::kRejected:
        if (conn != nullptr && conn->as_client() != nullptr) {
          // A Tern server says why; the client's error carries it.
          if (Status why = rejection(ev.private_data); !why.is_ok()) {
            conn->on_disconnected(std::move(why));
            break;
          }
        }
        [[fallthrough]];
      case CmEventType::kUnreachable:
      case CmEventType::kDisconnected: {
        if (conn == nullptr) break;
        Status why = ev.status.is_ok() ? make_error(Errc::kDisconnected, "%s", cm_event_name(ev.type)) : ev.status;
        if (ev.peer_fault) conn->protocol_error(std::move(why));
        else conn->on_disconnected(std::move(why));
        break;
      }
    }
  }
  return events;
}

}  // namespace tern::rpc
