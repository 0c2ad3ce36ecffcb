// Engine control path: memory, devices, connections and their CM events, the
// poll loop, and teardown after a connection loss.
#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_impl.h"
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
  }
  return "?";
}

namespace {
uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 2;
  while (p < v) p <<= 1;
  return p;
}
}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineOptions& o) {
  if (o.credits == 0 || o.credits > 1024)
    return make_error(Errc::kInvalidArgument, "engine: credits %u not in [1, 1024]", o.credits);
  if (o.inline_send < 1024 || o.inline_recv < 1024 || o.inline_send > (256u << 10) || o.inline_recv > (256u << 10))
    return make_error(Errc::kInvalidArgument, "engine: inline thresholds must be in [1 KiB, 256 KiB]");
  if (o.send_batch == 0 || o.max_bulk == 0 || o.max_mrs == 0 || o.frwr_depth == 0)
    return make_error(Errc::kInvalidArgument, "engine: send_batch, max_bulk, max_mrs and frwr_depth must be > 0");
  if (o.registration == EngineOptions::Registration::kRegCache && !o.trusted_peers)
    return make_error(Errc::kInvalidArgument,
                      "engine: the registration cache leaves chunk memory reachable by the peer after its calls; "
                      "it needs EngineOptions::trusted_peers");
  // An unknown TERN_LOG_LEVEL is the host's mistake to hear about.
  TERN_TRY(log_init());
  auto e = std::make_unique<EngineImpl>(o);
  e->cm_interval_ticks = ticks_from_ns(1'000'000);
  e->ns_per_tick = 1e9 / tick_hz();
  auto a = mem::Arena::create({.size = o.arena_bytes, .name = "tern-engine"});
  if (!a) return a.status();
  e->arena = std::move(a).value();
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

EngineImpl::~EngineImpl() {
  // Connections first (they post nothing more and release their pools), then
  // the devices' queues and registrations.
  conns.clear();
  for (auto& dc : devices) {
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
  pd.reset();
}

void* EngineImpl::alloc(size_t len, size_t align) { return arena->carve(len, align); }

uint8_t* EngineImpl::take_block(size_t size, size_t align) {
  for (size_t i = 0; i < spare.size(); ++i) {
    if (spare[i].first == size && reinterpret_cast<uintptr_t>(spare[i].second) % align == 0) {
      uint8_t* p = spare[i].second;
      spare[i] = spare.back();
      spare.pop_back();
      return p;
    }
  }
  return static_cast<uint8_t*>(arena->carve(size, align));
}

void EngineImpl::give_back(uint8_t* p, size_t size) { spare.emplace_back(size, p); }

uint8_t* Conn::block(size_t size, size_t align) {
  uint8_t* p = eng->take_block(size, align);
  if (p != nullptr) blocks.emplace_back(p, size);
  return p;
}

const Region* PdCtx::find(const void* p, uint64_t len) const {
  auto a = reinterpret_cast<uint64_t>(p);
  for (const Region& r : regions)
    if (a >= r.addr && len <= r.len && a - r.addr <= r.len - len) return &r;
  return nullptr;
}

Status PdCtx::add_region(void* addr, size_t len) {
  // Local only: no remote right, no usable rkey. A peer reaches this memory
  // only through a call's fast registration, and only until it is invalidated.
  auto mr = pd->reg_mr(addr, len, kAccessLocalWrite);
  if (!mr) return mr.status();
  regions.push_back(Region{reinterpret_cast<uint64_t>(addr), len, std::move(mr).value()});
  return Status::ok();
}

Status EngineImpl::register_memory(void* addr, size_t len) {
  if (addr == nullptr || len == 0) return make_error(Errc::kInvalidArgument, "register_memory: empty range");
  for (auto& dc : devices) TERN_TRY(dc->shared->add_region(addr, len));
  for (auto& c : conns)
    if (c->own_pd) TERN_TRY(c->own_pd->add_region(addr, len));
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
  TERN_TRY(p->add_region(arena->base(), arena->size()));
  for (auto& [a, l] : user_regions_) TERN_TRY(p->add_region(a, l));
  switch (dc->chunk_reg) {
    case ChunkReg::kFastReg: {
      // Registration depth from the device, as frwr_query_device does.
      uint32_t depth = std::min(opt.frwr_depth, caps.max_fast_reg_depth);
      p->reg = std::make_unique<FrwrRegistrar>(p->pd.get(), depth, caps.fast_reg_page_size, opt.max_mrs,
                                               caps.fast_reg_zero_based, &st.rkeys_live);
      break;
    }
    case ChunkReg::kRegCache:
      p->reg = std::make_unique<FrwrRegistrar>(p->pd.get(), 4096, opt.max_mrs, FrwrRegistrar::UseRegCache{},
                                               &st.rkeys_live);
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
  uint32_t cqe = std::min<uint32_t>(caps.max_cqe, 16384);
  auto scq = dc->dev->create_cq(cqe);
  if (!scq) return scq.status();
  auto rcq = dc->dev->create_cq(cqe);
  if (!rcq) return rcq.status();
  dc->scq = std::move(scq).value();
  dc->rcq = std::move(rcq).value();
  dc->offer_inv = opt.remote_invalidation && dc->chunk_reg == ChunkReg::kFastReg;
  devices.push_back(std::move(dc));
  return devices.back().get();
}

Result<Connection*> EngineImpl::connect(std::string_view spec) {
  auto dcr = device(spec);
  if (!dcr) return dcr.status();
  auto c = std::make_unique<Conn>(this, *dcr, false);
  TERN_TRY(c->setup_queues());
  uint8_t pdata[64];
  size_t n = wire::encode_pdata(pdata, sizeof pdata, opt.inline_send, opt.inline_recv, (*dcr)->offer_inv);
  TERN_TRY((*dcr)->dev->connect(c->qp.get(), std::span<const uint8_t>(pdata, n)));
  conns.push_back(std::move(c));
  return static_cast<Connection*>(conns.back().get());
}

Status EngineImpl::listen(std::string_view spec) {
  auto dcr = device(spec);
  if (!dcr) return dcr.status();
  if ((*dcr)->listening) return make_error(Errc::kBadState, "engine: already listening on %.*s",
                                           static_cast<int>(spec.size()), spec.data());
  TERN_TRY((*dcr)->dev->listen());
  (*dcr)->listening = true;
  return Status::ok();
}

void EngineImpl::handle(uint32_t prog, uint32_t vers, uint32_t proc, Handler h, void* ctx) {
  TERN_REQUIRE(h != nullptr, "handler for %u/%u/%u is null", prog, vers, proc);
  for (auto& e : handlers) {
    if (e.prog == prog && e.vers == vers && e.proc == proc) {
      e.h = h, e.ctx = ctx;
      return;
    }
  }
  handlers.push_back(HandlerEntry{prog, vers, proc, h, ctx, proc_counters(prog, vers, proc, true)});
}

const HandlerEntry* EngineImpl::find_handler(uint32_t prog, uint32_t vers, uint32_t proc, AcceptStat* stat,
                                             uint32_t* low, uint32_t* high) const {
  bool prog_known = false, vers_known = false;
  *low = UINT32_MAX, *high = 0;
  for (const auto& e : handlers) {
    if (e.prog != prog) continue;
    prog_known = true;
    *low = std::min(*low, e.vers), *high = std::max(*high, e.vers);
    if (e.vers != vers) continue;
    vers_known = true;
    if (e.proc == proc) return &e;
  }
  *stat = !prog_known ? AcceptStat::kProgUnavail : !vers_known ? AcceptStat::kProgMismatch : AcceptStat::kProcUnavail;
  return nullptr;
}

int EngineImpl::poll_cm(DeviceCtx* dc) {
  CmEvent ev;
  int events = 0;
  while (dc->dev->poll_cm(&ev)) {
    ++events;
    Conn* conn = nullptr;
    for (auto& c : conns)
      if (ev.qp != nullptr && c->qp.get() == ev.qp) conn = c.get();
    switch (ev.type) {
      case CmEventType::kConnectRequest: {
        auto c = std::make_unique<Conn>(this, dc, true);
        Status st = c->setup_queues();
        uint8_t pdata[64];
        size_t n = wire::encode_pdata(pdata, sizeof pdata, opt.inline_send, opt.inline_recv, dc->offer_inv);
        if (st) {
          // Negotiated now from the client's offer; kEstablished confirms.
          wire::negotiate(ev.private_data, opt.inline_send, opt.inline_recv, dc->offer_inv, true, &c->inline_send,
                          &c->inline_recv, &c->remote_inv);
          st = dc->dev->accept(ev.request, c->qp.get(), std::span<const uint8_t>(pdata, n));
        }
        if (!st) {
          // The client sees kRejected; the reason is ours to log.
          TERN_LOG(kError, "engine", "refusing a connection: %s", st.to_string().c_str());
          (void)dc->dev->reject(ev.request, {});
          break;
        }
        conns.push_back(std::move(c));
        break;
      }
      case CmEventType::kEstablished:
        if (conn != nullptr) conn->on_established(ev.private_data);
        break;
      case CmEventType::kRejected:
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

int EngineImpl::poll() {
  int work = 0;
  if (waiting.armed && !waiting.rechecking) work += finish_wait();
  Wc wc[32];
  for (auto& dcp : devices) {
    DeviceCtx* dc = dcp.get();
    // Send completions first: they free the calls and requests that new
    // receives will need.
    // QP numbers are per device: an engine with connections on two devices
    // (two shm sockets, two RDMA ports) has a QP 1 on each.
    int n = dc->scq->poll(wc, 32);
    for (int i = 0; i < n; ++i) {
      for (auto& c : conns) {
        if (c->dc == dc && c->qp && c->qp->qp_num() == wc[i].qp_num) {
          c->on_send_wc(wc[i]);
          break;
        }
      }
    }
    work += n;
    n = dc->rcq->poll(wc, 32);
    for (int i = 0; i < n; ++i) {
      for (auto& c : conns) {
        if (c->dc == dc && c->qp && c->qp->qp_num() == wc[i].qp_num) {
          c->on_recv_wc(wc[i]);
          break;
        }
      }
    }
    work += n;
  }
  // Connection events are the control path and cost system calls (pmd/shm
  // polls its sockets), so they are checked by time, not per pass: once a
  // millisecond is prompt for connects and disconnects and free for the
  // datapath. (Checking on every idle pass cost ~20 system calls per RPC.)
  uint64_t now = now_ticks();
  if (now - last_cm_tick >= cm_interval_ticks) {
    last_cm_tick = now;
    for (auto& dcp : devices) work += poll_cm(dcp.get());
  }
  ++polls;
  // Another thread wants a stats snapshot (telemetry): one relaxed load per pass.
  if (snapshot_wanted.load(std::memory_order_relaxed)) publish_snapshot();
  for (auto it = conns.begin(); it != conns.end();) {
    Conn* c = it->get();
    if (c->state == Conn::State::kReady) work += c->server ? c->serve_deferred() : c->flush_backlog();
    c->repost_recvs();
    if (c->state == Conn::State::kDraining) {
      if (!c->drained()) c->post_drain_markers();
      if (c->drained()) c->finish_teardown();
    }
    // Server-side connections are the engine's to reap; client ones belong to
    // the caller until the engine goes away.
    // A handler may still hold a call of a dead connection and reply later:
    // keep the connection until every call is back.
    if (c->state == Conn::State::kDead && ((c->server && c->calls_idle()) || (!c->server && c->user_closed))) {
      it = conns.erase(it);
      continue;
    }
    ++it;
  }
  return work;
}

// ---------------------------------------------------------------- connection set-up and teardown

Conn::Conn(EngineImpl* e, DeviceCtx* d, bool srv)
    : id(e->next_conn_id++), t_created(now_ticks()), eng(e), dc(d), server(srv), pdc(d->shared.get()) {}

Conn::~Conn() {
  if (state == State::kReady || state == State::kConnecting) (void)dc->dev->disconnect(qp.get());
  // Whatever the QP still holds is flushed by destroying it; the MRs of calls
  // that never finished are in an unknown state and are destroyed.
  for (auto& r : reqs)
    if (r.mrs != nullptr) pdc->reg->destroy(&r.mrs);
  // The QP is destroyed first: nothing can DMA into these blocks after it.
  qp.reset();
  own_pd.reset();  // after the QP, which was created in it
  for (auto& [p, size] : blocks) eng->give_back(p, size);
}

std::string Conn::peer_name() const {
  std::string who = qp ? qp->peer() : std::string();
  return std::string(server ? "client " : "server ") + (who.empty() ? "?" : who) + " (" + dc->spec + ")";
}

void Conn::protocol_error(Status why) {
  if (state == State::kDraining || state == State::kDead) return;
  eng->st.protocol_errors.add();
  TERN_LOG(kWarn, "engine", "conn %llu: dropping the connection to %s: %s", static_cast<unsigned long long>(id),
           peer_name().c_str(), why.message().c_str());
  on_disconnected(std::move(why));
}

ConnectionInfo Conn::info() const {
  return ConnectionInfo{inline_send, inline_recv, remote_inv, server ? eng->opt.credits : credits};
}

Status Conn::setup_queues() {
  const EngineOptions& o = eng->opt;
  const DeviceCaps& caps = dc->dev->caps();
  if (!server && dc->pd_per_conn) {
    // Fast registrations are PD-wide on this device: a PD of our own keeps
    // this connection's rkeys useless to every other peer.
    auto p = eng->make_pd_ctx(dc);
    if (!p) return p.status();
    own_pd = std::move(p).value();
    pdc = own_pd.get();
  }
  // Send queue: per call at most (read + write + reply chunks) REG_MRs and as
  // many LOCAL_INVs, plus the Send; the server adds RDMA READs/WRITEs. The
  // send context ring bounds unsignaled Sends; the SqBudget keeps the total
  // under the depth whatever the mix.
  uint32_t per_call = 2 * 3 * 4 + 2;
  uint32_t sq_depth = std::min<uint32_t>(caps.max_qp_wr, std::max<uint32_t>(64, o.credits * per_call));
  uint32_t rq_depth = std::min<uint32_t>(caps.max_qp_wr, o.credits + 2);
  QpInit qi;
  qi.pd = pdc->pd.get();
  qi.send_cq = dc->scq.get();
  qi.recv_cq = dc->rcq.get();
  qi.sq_depth = sq_depth;
  qi.rq_depth = rq_depth;
  qi.max_send_sge = std::min<uint32_t>(caps.max_send_sge, 2);
  qi.max_recv_sge = 1;
  auto q = dc->dev->create_qp(qi);
  if (!q) return q.status();
  qp = std::move(q).value();
  uint32_t ring_size = pow2_at_least(o.credits * 2 + o.send_batch + 2);
  ring = std::make_unique<SendCtxRing>(ring_size, std::min(o.send_batch, ring_size / 2));
  ring_seq.assign(ring_size, 0);
  sq = std::make_unique<SqBudget>(sq_depth);

  reps.resize(rq_depth);
  for (uint32_t i = 0; i < rq_depth; ++i) {
    reps[i].index = i;
    reps[i].cap = o.inline_recv;
    reps[i].buf = block(o.inline_recv, 64);
    if (reps[i].buf == nullptr) return make_error(Errc::kNoResources, "engine arena full (receive buffers)");
    to_repost.push_back(&reps[i]);
  }
  // Slack for delayed recycling (the 2026 xprtrdma patch set's lesson): a
  // call or request whose Send was unsignaled stays held by its Send owner
  // until a later signaled completion walks past it, so up to one signal
  // batch of them is held beyond what is in flight. Without that slack the
  // pool runs dry while the connection idles between batches.
  const uint32_t slack = o.send_batch + 1;
  if (server) {
    calls.create(o.credits + slack);
    ring_seq_reads_.assign(calls.size(), 0);
    for (uint32_t i = 0; i < calls.size(); ++i) {
      SrvCall& sc = calls[i];
      sc.conn = this;
      sc.index = i;
      sc.sendbuf = block(o.inline_send, 64);
      sc.bulk_buf_ = block(o.max_bulk, 4096);
      sc.reply_area = block(o.max_reply + 256, 4096);
      if (sc.sendbuf == nullptr || sc.bulk_buf_ == nullptr || sc.reply_area == nullptr)
        return make_error(Errc::kNoResources, "engine arena full (server call buffers; lower credits or max_bulk)");
    }
  } else {
    uint32_t n = o.credits + o.backlog + slack;
    reqs.create(n);
    // An xid carries its request's slot in its low bits, so a reply finds its
    // request without a lookup table; the rest is a sequence number, so a
    // late reply to an earlier use of the slot does not match.
    slot_bits = 1;
    while ((1u << slot_bits) < n) ++slot_bits;
    for (uint32_t i = 0; i < n; ++i) reqs[i].slot = i;
    // Send and reply-chunk buffers only for calls that can be in flight.
    for (uint32_t i = 0; i < n; ++i) {
      reqs[i].sendbuf = block(o.inline_send, 64);
      if (reqs[i].sendbuf == nullptr) return make_error(Errc::kNoResources, "engine arena full (send buffers)");
    }
  }
  repost_recvs();  // receives may be posted before the connection is up
  return Status::ok();
}

void Conn::on_established(std::span<const uint8_t> peer_pdata) {
  if (state != State::kConnecting) return;  // a server may learn it first from a receive
  if (!server)
    wire::negotiate(peer_pdata, eng->opt.inline_send, eng->opt.inline_recv, dc->offer_inv, false,
                    &inline_send, &inline_recv, &remote_inv);
  state = State::kReady;
  t_established = t_last = now_ticks();
  register_telemetry();
  TERN_LOG(kInfo, "engine", "conn %llu: connection to %s up: inline send %u recv %u, remote invalidation %s",
           static_cast<unsigned long long>(id), peer_name().c_str(), inline_send, inline_recv, remote_inv ? "on" : "off");
  if (!server && dc->chunk_reg == ChunkReg::kRegCache)
    TERN_LOG(kWarn, "engine",
             "conn %llu: connection to %s registers chunks through the registration cache: the peer can reach "
             "those pages after the calls that offered them, until they are evicted (trusted peers only)",
             static_cast<unsigned long long>(id), peer_name().c_str());
}

void Conn::on_disconnected(Status reason) {
  if (state == State::kDraining || state == State::kDead) return;
  why = std::move(reason);
  eng->st.disconnects.add();
  bool was_connecting = state == State::kConnecting;
  state = State::kDraining;
  // The engine may give up on a connection whose QP is still up (a post it
  // could not make): put the QP in error first, or the drain below would
  // never complete and MRs with a REG_MR in flight would be destroyed.
  if (qp->state() == QpState::kRts || qp->state() == QpState::kConnecting) (void)dc->dev->disconnect(qp.get());
  if (was_connecting || qp->state() != QpState::kError) {
    sq_drained = rq_drained = true;  // nothing was ever posted to the peer
  } else {
    post_drain_markers();
  }
  TERN_LOG(kInfo, "engine", "conn %llu: connection to %s lost: %s", static_cast<unsigned long long>(id),
           peer_name().c_str(), why.to_string().c_str());
}

void Conn::post_drain_markers() {
  // Drain as ib_drain_qp does: a WR posted to a QP in error is flushed after
  // everything before it, so its flush completion proves the queue is empty.
  // A full queue refuses the marker until flushes make room: retried from poll().
  int err = 0;
  if (!sq_marker && !sq_drained) {
    SendWr sw;
    sw.opcode = WrOpcode::kSend;
    sw.flags = kWrSignaled;
    sw.wr_id = make_wr_id(WrTag::kDrain, 0);
    sq_marker = qp->post_send(&sw, 1, &err) == 1;
  }
  if (!rq_marker && !rq_drained) {
    RecvWr rw;
    rw.wr_id = make_wr_id(WrTag::kDrain, 0);
    rq_marker = qp->post_recv(&rw, 1, &err) == 1;
  }
}

void Conn::close() {
  user_closed = true;
  if (state == State::kReady || state == State::kConnecting) {
    (void)dc->dev->disconnect(qp.get());
    on_disconnected(make_error(Errc::kDisconnected, "closed locally"));
  }
}

void Conn::finish_teardown() {
  // The QP is drained: no WR of ours is outstanding. Release the Send owners
  // of the unsignaled tail, then fail every call that did not finish.
  ring->release_all([&](void* owner) { release_send_owner(owner); });
  sq->retire_all();
  if (!server) {
    for (auto& r : reqs) {
      if (r.state == Request::State::kFree) continue;
      // MRs whose REG_MR or LOCAL_INV may have been flushed: never reuse them.
      if (r.mrs != nullptr) pdc->reg->destroy(&r.mrs);
      if (r.reply != nullptr) {
        r.reply->owner = nullptr;
        r.reply = nullptr;
      }
      r.send_owner = false;
      r.result = CallReply{CallStatus::kDisconnected, r.xid, {}, 0};
      if (r.state == Request::State::kBacklog || r.state == Request::State::kSent ||
          r.state == Request::State::kInvalidating)
        complete(&r);
    }
    backlog_head = backlog_tail = nullptr;
    backlog_len = 0;
    in_flight = 0;
  } else {
    deferred.clear();  // calls never started: the client fails them itself
    for (auto& sc : calls) {
      if (sc.state == SrvCall::State::kFree) continue;
      // A handler still holding the call may reply later; that reply is
      // refused, and the call is freed then.
      sc.send_owner = false;
      if (sc.rep != nullptr) {
        sc.rep->owner = nullptr;
        sc.rep = nullptr;
      }
      if (sc.state != SrvCall::State::kInHandler) {
        sc.handler_owner = false;
        maybe_free(&sc);
      }
    }
  }
  state = State::kDead;
}

}  // namespace tern::rpc
