// Observability: the engine's counters by name, per-connection and
// per-procedure snapshots (conn_stats.h), the JSON document telemetry reads,
// and the cross-thread snapshot hand-off.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "base/clock.h"
#include "base/json.h"
#include "engine/engine_impl.h"
#include "engine/engine_testing.h"
#include "engine/reg_cache_registrar.h"

namespace tern::rpc {

namespace {

LatencySummary summarize(const Histogram& h) {
  LatencySummary s;
  s.count = h.count();
  if (s.count == 0) return s;
  s.min = h.min(), s.mean = static_cast<uint64_t>(h.mean()), s.max = h.max();
  s.p50 = h.percentile(50), s.p90 = h.percentile(90), s.p99 = h.percentile(99), s.p999 = h.percentile(99.9);
  return s;
}

// A side's stages of b, in round-trip order (ConnectionStats::breakdown).
std::vector<std::pair<const char*, LatencySummary>> breakdown_rows(const Breakdown& b, bool server) {
  std::vector<std::pair<const char*, LatencySummary>> out;
  auto add = [&](Stage st) { out.emplace_back(stage_name(st), summarize(b.of(st))); };
  if (server)
    for (Stage st : kServerStages) add(st);
  else
    for (Stage st : kClientStages) add(st);
  return out;
}

void json_latency(JsonWriter& w, const char* name, const LatencySummary& l) {
  w.key(name).begin_object();
  w.u64("count", l.count).u64("min", l.min).u64("mean", l.mean).u64("p50", l.p50);
  w.u64("p90", l.p90).u64("p99", l.p99).u64("p999", l.p999).u64("max", l.max);
  w.end_object();
}

void json_view(JsonWriter& w, const char* name, const StatsView& v) {
  w.key(name).begin_object();
  for (const StatEntry& e : v) w.u64(e.name, e.counter->get());
  w.end_object();
}

}  // namespace

StatsView EngineImpl::stats_view() const {
  StatsView v = fixed_view();
  for (const auto& dc : devices) {
    const auto* rc = dynamic_cast<const RegCacheRegistrar*>(dc->shared->reg.get());
    if (const RegCache* c = rc != nullptr ? &rc->cache() : nullptr) {
      v.push_back({"reg_cache_hits", &c->stats().hits});
      v.push_back({"reg_cache_misses", &c->stats().misses});
      v.push_back({"reg_cache_evictions", &c->stats().evictions});
      break;  // one device's figures: engines use one device in practice
    }
  }
  return v;
}

StatsView EngineImpl::fixed_view() const {
  return {{"calls", &engine_stats.calls},
                 {"replies", &engine_stats.replies},
                 {"backlogged", &engine_stats.backlogged},
                 {"sends", &engine_stats.sends},
                 {"sends_signaled", &engine_stats.sends_signaled},
                 {"recvs_posted", &engine_stats.recvs_posted},
                 {"recv_batches", &engine_stats.recv_batches},
                 {"read_chunks", &engine_stats.read_chunks},
                 {"write_chunks", &engine_stats.write_chunks},
                 {"reply_chunks", &engine_stats.reply_chunks},
                 {"rdma_reads", &engine_stats.rdma_reads},
                 {"rdma_writes", &engine_stats.rdma_writes},
                 {"local_inv_chains", &engine_stats.local_inv_chains},
                 {"remote_invalidations", &engine_stats.remote_invalidations},
                 {"rdma_errors_sent", &engine_stats.rdma_errors_sent},
                 {"rdma_errors_received", &engine_stats.rdma_errors_received},
                 {"bad_headers", &engine_stats.bad_headers},
                 {"credit_waits", &engine_stats.credit_waits},
                 {"disconnects", &engine_stats.disconnects},
                 {"calls_deferred", &engine_stats.calls_deferred},
                 {"protocol_errors", &engine_stats.protocol_errors},
                 {"bad_replies", &engine_stats.bad_replies},
                 {"rkeys_live", &engine_stats.rkeys_live},
                 {"connections", &engine_stats.connections},
                 {"connections_refused", &engine_stats.connections_refused},
                 {"connections_refused_peer_limit", &engine_stats.connections_refused_peer_limit},
                 {"connections_reaped", &engine_stats.connections_reaped},
                 {"waiting_for_memory", &engine_stats.waiting_for_memory},
                 {"memory_waits", &engine_stats.memory_waits},
                 {"long_calls", &engine_stats.long_calls},
                 {"reconnects", &engine_stats.reconnects},
                 {"reconnect_attempts", &engine_stats.reconnect_attempts},
                 {"retransmits", &engine_stats.retransmits},
                 {"late_replies", &engine_stats.late_replies},
                 {"keepalive_probes", &engine_stats.keepalive_probes},
                 {"timer_visits", &engine_stats.timer_visits},
                 {"keepalive_failures", &engine_stats.keepalive_failures},
                 {"declared_dead", &engine_stats.declared_dead},
                 {"cancels", &engine_stats.cancels},
                 {"calls_dropped", &engine_stats.calls_dropped},
                 {"rw_timeouts", &engine_stats.rw_timeouts},
                 {"bulk_pool_in_use", &bulk->stats().in_use},
                 {"bulk_pool_high_water", &bulk->stats().high_water},
                 {"bulk_pool_empty", &bulk->stats().empty},
                 {"mrs_allocated", &reg_st.mrs_created},
                 {"mrs_destroyed", &reg_st.mrs_destroyed},
                 {"mrs_orphaned", &reg_st.mrs_orphaned},
                 {"out_of_mrs", &reg_st.out_of_mrs},
                 {"reg_wrs", &reg_st.reg_wrs},
                 {"local_inv_wrs", &reg_st.local_inv_wrs}};
}

StatsView conn_counters_view(const ConnCounters& c) {
  return {{"calls", &c.calls},
          {"replies", &c.replies},
          {"sends", &c.sends},
          {"recvs", &c.recvs},
          {"bytes_sent", &c.bytes_sent},
          {"bytes_received", &c.bytes_received},
          {"read_chunks", &c.read_chunks},
          {"write_chunks", &c.write_chunks},
          {"reply_chunks", &c.reply_chunks},
          {"read_chunk_bytes", &c.read_chunk_bytes},
          {"write_chunk_bytes", &c.write_chunk_bytes},
          {"reply_chunk_bytes", &c.reply_chunk_bytes},
          {"nomsg", &c.nomsg},
          {"errors", &c.errors},
          {"bad_xids", &c.bad_xids},
          {"bad_replies", &c.bad_replies},
          {"local_inv_chains", &c.local_inv_chains},
          {"remote_invalidations", &c.remote_invalidations},
          {"credit_waits", &c.credit_waits},
          {"backlog_depth", &c.backlog_depth},
          {"ring_full", &c.ring_full},
          {"retransmits", &c.retransmits},
          {"timeouts", &c.timeouts}};
}

void ConnBase::register_telemetry() {
  const std::string& tel_id = core->control->telemetry_id();
  if (tel_id.empty() || tsrc.registered()) return;
  peer_fixed = peer_name();
  auto src = telemetry::register_source(
      "conn", tel_id + "." + std::to_string(id),
      [](void* ctx, telemetry::Reply* out) {
        auto* c = static_cast<const ConnBase*>(ctx);
        out->add_u64("id", c->id);
        out->add_string("side", c->as_server() != nullptr ? "server" : "client");
        out->add_string("peer", c->peer_fixed);
        out->add_stats(conn_counters_view(c->counters));
        auto h = std::make_unique<Histogram>();
        c->rtt.merge_into(h.get());
        out->add_histogram("rtt", *h);
      },
      this);
  if (src) tsrc = std::move(src).value();
}

void register_device_telemetry(const std::string& engine_tel_id, DeviceCtx* dc) {
  if (engine_tel_id.empty() || dc->tsrc.registered()) return;
  auto src = telemetry::register_source(
      "device", engine_tel_id + "." + std::to_string(dc->index),
      [](void* ctx, telemetry::Reply* out) {
        // spec, the driver's name and the device's and SRQ's Counters: all
        // fixed while registered or relaxed atomics (registry.h's rule).
        // port_up() is left out: the engine's thread changes it unlocked.
        auto* d = static_cast<const DeviceCtx*>(ctx);
        out->add_u64("index", d->index);
        out->add_string("spec", d->spec);
        out->add_string("driver", d->dev->caps().name);
        out->add_stats(d->dev->stats());
        if (d->srq != nullptr) out->add_stats(d->srq->stats(), "srq_");
      },
      dc);
  if (src) dc->tsrc = std::move(src).value();
}

ProcCounters* ConnCore::proc_counters(uint32_t prog, uint32_t vers, uint32_t proc, bool server) {
  // prog and proc are 32 bits, vers in practice small: fold into one key
  // with the side; a collision only merges two procedures' figures.
  uint64_t key = (static_cast<uint64_t>(prog) << 32) ^ (static_cast<uint64_t>(vers) << 20) ^
                 (static_cast<uint64_t>(proc) << 1) ^ (server ? 1u : 0u);
  auto it = procs.find(key);
  if (it != procs.end()) return it->second.get();
  if (!server && procs.size() >= kMaxProcs) {
    // A client calling more procedures than we keep: the rest share one entry.
    if (unknown_proc == nullptr) unknown_proc = proc_counters(UINT32_MAX, UINT32_MAX, UINT32_MAX, false);
    return unknown_proc;
  }
  return control->add_proc_counters(key, prog, vers, proc, server);
}

ProcCounters* EngineImpl::add_proc_counters(uint64_t key, uint32_t prog, uint32_t vers, uint32_t proc, bool server) {
  auto made = std::make_unique<ProcCounters>();
  made->prog = prog, made->vers = vers, made->proc = proc, made->server = server;
  ProcCounters* p = made.get();
  procs.emplace(key, std::move(made));
  proc_order.push_back(p);
  if (!tel_id.empty()) {
    char id[96];
    std::snprintf(id, sizeof id, "%s.%u.%u.%u.%c", tel_id.c_str(), prog, vers, proc, server ? 's' : 'c');
    auto src = telemetry::register_source(
        "proc", id,
        [](void* ctx, telemetry::Reply* out) {
          auto* q = static_cast<const ProcCounters*>(ctx);
          out->add_u64("prog", q->prog);
          out->add_u64("vers", q->vers);
          out->add_u64("proc", q->proc);
          out->add_string("side", q->server ? "server" : "client");
          out->add_u64("ops", q->ops.get());
          out->add_u64("errors", q->errors.get());
          out->add_u64("bytes_sent", q->bytes_sent.get());
          out->add_u64("bytes_received", q->bytes_received.get());
          out->add_histogram("rtt", q->rtt);
        },
        p);
    if (src) p->tsrc = std::move(src).value();
  }
  return p;
}

ConnectionStats ConnBase::stats() const {
  ConnectionStats s;
  s.id = id;
  s.server = as_server() != nullptr;
  s.peer = peer_name();
  s.state = conn_phase_name(phase());
  uint64_t now = now_ticks();
  auto ns = [&](uint64_t ticks) { return static_cast<uint64_t>(static_cast<double>(ticks) * core->ns_per_tick); };
  if (t_established != 0) {
    s.connect_ns = ns(t_established - t_created);
    s.age_ns = ns(now - t_established);
  }
  s.idle_ns = t_last != 0 ? ns(now - t_last) : 0;
  s.outstanding = outstanding();
  s.credits = info().credits;
  for (const StatEntry& e : conn_counters_view(counters)) s.counters.emplace_back(e.name, e.counter->get());
  // The driver's counters for this QP. Their names live as long as the
  // driver's view (static strings in every driver).
  if (qp)
    for (const StatEntry& e : qp->stats()) s.counters.emplace_back(e.name, e.counter->get());
  {
    auto h = std::make_unique<Histogram>();  // 8 KiB: not on the stack
    rtt.merge_into(h.get());
    s.rtt = summarize(*h);
  }
  if (breakdown != nullptr) s.breakdown = breakdown_rows(*breakdown, s.server);
  return s;
}

std::vector<std::pair<const char*, LatencySummary>> EngineImpl::breakdown(bool server) const {
  if (!bd_gone[server]) return {};
  auto all = std::make_unique<Breakdown>(ns_per_tick);  // ~80 KiB: not on the stack
  all->merge(*bd_gone[server]);
  for (const auto& c : conns)
    if (c != nullptr && (c->as_server() != nullptr) == server && c->breakdown != nullptr) all->merge(*c->breakdown);
  return breakdown_rows(*all, server);
}

std::vector<ConnectionStats> EngineImpl::connection_stats() const {
  std::vector<ConnectionStats> v;
  v.reserve(conns.size());
  for (const auto& c : conns)
    if (c) v.push_back(c->stats());
  return v;
}

std::vector<ProcedureStats> EngineImpl::procedure_stats() const {
  std::vector<ProcedureStats> v;
  v.reserve(proc_order.size());
  for (const ProcCounters* p : proc_order) {
    ProcedureStats s;
    s.prog = p->prog, s.vers = p->vers, s.proc = p->proc, s.server = p->server;
    s.ops = p->ops.get(), s.errors = p->errors.get();
    s.bytes_sent = p->bytes_sent.get(), s.bytes_received = p->bytes_received.get();
    s.rtt = summarize(p->rtt);
    v.push_back(s);
  }
  return v;
}

std::string EngineImpl::stats_json() const {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  json_view(w, "engine", stats_view());
  w.key("devices").begin_array();
  for (const auto& dc : devices) {
    w.begin_object().str("spec", dc->spec).str("name", dc->dev->caps().name).boolean("port_up", dc->dev->port_up());
    json_view(w, "counters", dc->dev->stats());
    w.end_object();
  }
  w.end_array().key("connections").begin_array();
  for (const ConnectionStats& c : connection_stats()) {
    w.begin_object().u64("id", c.id).str("side", c.server ? "server" : "client").str("peer", c.peer);
    w.str("state", c.state).u64("connect_ns", c.connect_ns).u64("age_ns", c.age_ns).u64("idle_ns", c.idle_ns);
    w.u64("outstanding", c.outstanding).u64("credits", c.credits);
    w.key("counters").begin_object();
    for (auto& [name, val] : c.counters) w.u64(name, val);
    w.end_object();
    json_latency(w, "rtt_ns", c.rtt);
    w.end_object();
  }
  w.end_array().key("procedures").begin_array();
  for (const ProcedureStats& p : procedure_stats()) {
    w.begin_object().u64("prog", p.prog).u64("vers", p.vers).u64("proc", p.proc);
    w.str("side", p.server ? "server" : "client").u64("ops", p.ops).u64("errors", p.errors);
    w.u64("bytes_sent", p.bytes_sent).u64("bytes_received", p.bytes_received);
    json_latency(w, "rtt_ns", p.rtt);
    w.end_object();
  }
  w.end_array().end_object();
  return out;
}

std::string EngineImpl::trace_json() const {
  uint32_t eid = static_cast<uint32_t>(std::strtoul(tel_id.c_str(), nullptr, 10));
  if (trace == nullptr) return R"({"traceEvents": [], "displayTimeUnit": "ns"})";
  return trace->chrome_json(eid);
}

Status EngineImpl::write_trace(const std::string& path) const {
  std::string text = trace_json();
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return make_sys_error(Errc::kInvalidArgument, errno, "trace: cannot write %s", tmp.c_str());
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    return make_sys_error(Errc::kNoResources, e, "trace: cannot write %s", path.c_str());
  }
  return Status::ok();
}

std::string PoolAudit::to_string() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "requests out %" PRIu64 ", server calls out %" PRIu64 ", send buffers out %" PRIu64
                ", receive buffers held %" PRIu64 ", bulk blocks out %" PRIu64 ", MRs registered %" PRIu64
                ", send contexts in use %" PRIu64,
                requests_out, srv_calls_out, send_bufs_out, recv_bufs_held, bulk_blocks_out, mrs_registered,
                send_ctxs_in_use);
  return buf;
}

PoolAudit EngineImpl::audit() const {
  PoolAudit a;
  a.requests_out = requests.out();
  a.srv_calls_out = srv_calls.out();
  a.send_bufs_out = send_bufs->out();
  // Receive buffers are out of the pool while a queue owns them; held ones
  // are those a call or reply still has.
  for (uint32_t i = 0; i < recv_bufs->made(); ++i) {
    MsgBuf* b = const_cast<MsgBufPool&>(*recv_bufs).at(i);
    if (b->where == MsgBuf::Where::kHeld) ++a.recv_bufs_held;
  }
  a.bulk_blocks_out = bulk->blocks_out();
  a.mrs_registered = engine_stats.rkeys_live.get();
  for (const auto& c : conns)
    if (c && c->sq_) a.send_ctxs_in_use += c->sq().contexts_in_use();
  return a;
}

void EngineImpl::publish_snapshot() {
  // Cleared first: a request arriving while this one is built is served
  // by the next poll() rather than lost.
  snapshot_wanted.store(false, std::memory_order_relaxed);
  std::string j = stats_json();
  {
    std::lock_guard<std::mutex> g(snap_mu);
    snap_json = std::move(j);
    snap_ns = monotonic_ns();
    ++snap_seq;
  }
  snap_cv.notify_all();
}

std::string EngineImpl::stats_json_snapshot(int wait_ms) {
  std::unique_lock<std::mutex> g(snap_mu);
  uint64_t seq = snap_seq;
  snapshot_wanted.store(true, std::memory_order_relaxed);
  snap_cv.wait_for(g, std::chrono::milliseconds(wait_ms < 0 ? 0 : wait_ms), [&] { return snap_seq != seq; });
  if (snap_json.empty()) return {};
  // The document with its age: how long ago the engine's thread made it
  // (one more member before the top-level object's closing brace).
  std::string out = snap_json;
  out.pop_back();
  out += ",\"snapshot_age_ms\":" + std::to_string((monotonic_ns() - snap_ns) / 1'000'000) + "}";
  return out;
}

}  // namespace tern::rpc

namespace tern::rpc::testing {

std::string Accounting::to_string() const {
  PoolAudit a{requests_out, srv_calls_out, send_bufs_out, recv_bufs_held, bulk_blocks_out, mrs_registered,
              send_ctxs_in_use, 0};
  return a.to_string();
}

Accounting accounting(const Engine& e) {
  PoolAudit a = static_cast<const EngineImpl&>(e).audit();
  return Accounting{a.requests_out,     a.srv_calls_out,  a.send_bufs_out,   a.recv_bufs_held,
                    a.bulk_blocks_out, a.mrs_registered, a.send_ctxs_in_use};
}

bool poisons(const Engine& e) { return static_cast<const EngineImpl&>(e).poison; }

Status inject_fault(Connection* c, const rdma::Fault& f) {
  auto* k = static_cast<ClientConn*>(c);
  if (!k->qp || k->phase() != ConnBase::State::kReady)
    return make_error(Errc::kBadState, "conn %llu has no connected QP now", static_cast<unsigned long long>(k->id));
  return k->qp->inject_fault(f);
}

}  // namespace tern::rpc::testing
