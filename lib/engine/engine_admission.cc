// Connection admission (conn_admission.h): the per-peer limit, and the
// fairness rule that reaps an idle connection of the peer holding the most
// when the table is full and a peer under its fair share asks.
#include <cinttypes>

#include "base/clock.h"
#include "base/log.h"
#include "engine/engine_impl.h"

namespace tern::rpc {

EngineImpl::Admit EngineImpl::admit(const std::string& peer) {
  const uint32_t mine = peers.held(peer);
  if (opt.max_connections_per_peer != 0 && mine >= opt.max_connections_per_peer) return Admit::kPeerLimit;
  if (held() < opt.max_connections) return Admit::kYes;
  if (opt.idle_reap_ms != 0 && reap_for(peer, mine)) return Admit::kYes;
  return Admit::kTableFull;
}

bool EngineImpl::reap_for(const std::string& peer, uint32_t mine) {
  // The newcomer's fair share: the table split evenly over the peers that
  // hold connections, itself included. At or over it, it waits like anyone
  // else: taking a slot from another peer would only move the unfairness.
  const size_t npeers = peers.peers() + (mine == 0 ? 1 : 0);
  const uint32_t fair = static_cast<uint32_t>(opt.max_connections / npeers);
  if (mine >= fair) return false;
  // The victim: an idle connection of a peer over its share, the peer
  // holding the most first, then the connection idle longest. One walk of
  // the table, on the control path and only while it is full (a few
  // microseconds per thousand connections).
  const uint64_t now = now_ticks();
  const uint64_t idle_for = ticks_from_ns(uint64_t{opt.idle_reap_ms} * 1'000'000);
  ServerConn* victim = nullptr;
  uint32_t victim_held = 0;
  uint64_t victim_last = 0;
  for (auto& c : conns) {
    ServerConn* s = c ? c->as_server() : nullptr;
    if (s == nullptr) continue;
    if (!s->in_peer_table || !s->qp_live())
      continue;
    // A connection with calls in flight is not idle, however long since it
    // last received: its peer is waiting for us, not hoarding.
    if (!s->no_calls()) continue;
    const uint64_t last = std::max(s->t_created, s->t_last);
    if (now - last < idle_for) continue;
    const uint32_t h = peers.held(s->admitted_peer);
    if (h <= fair) continue;
    if (victim == nullptr || h > victim_held || (h == victim_held && last < victim_last)) {
      victim = s;
      victim_held = h;
      victim_last = last;
    }
  }
  if (victim == nullptr) return false;
  // Its slot is given up now (the drain finishes from a later poll): the
  // newcomer takes it at once.
  victim->reaped = true;
  ++reaping;
  peers.remove(victim->admitted_peer);
  victim->in_peer_table = false;
  engine_stats.connections_reaped.add();
  const auto idle_ms = static_cast<unsigned long long>(ns_from_ticks(now - victim_last) / 1e6);
  TERN_LOG(kInfo, "engine",
           "conn %llu: closing the idle connection of %s (idle %llu ms, its peer held %u of %u connections) to "
           "make room for %s, under its fair share of %u (EngineOptions::idle_reap_ms)",
           static_cast<unsigned long long>(victim->id), victim->admitted_peer.c_str(), idle_ms, victim_held,
           opt.max_connections, peer.empty() ? "an unnamed peer" : peer.c_str(), fair);
  victim->on_disconnected(make_error(Errc::kDisconnected,
                                     "reaped: idle for %llu ms while the connection table was full and another "
                                     "peer under its fair share connected (EngineOptions::idle_reap_ms)",
                                     idle_ms));
  return true;
}

void EngineImpl::server_gone(const std::string& peer, bool in_peer_table, bool reaped) {
  if (in_peer_table) peers.remove(peer);
  if (reaped) --reaping;
}

}  // namespace tern::rpc
