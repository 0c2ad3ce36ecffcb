// Connection admission: which peer may take a slot of the server's
// connection table (EngineOptions::max_connections, max_connections_per_peer,
// idle_reap_ms; docs/security.md, "Connections").
//
// A peer is Qp::peer_host() -- the client process on pmd/shm, its address on
// pmd/verbs -- known from the connection request itself
// (rdma::ConnRequest::peer_host), before anything is accepted. PeerConns
// counts the server connections each peer holds; EngineImpl::admit
// (engine_admission.cc) decides with it:
//   - a peer at max_connections_per_peer is refused;
//   - below max_connections everyone else is accepted (work-conserving: one
//     peer may hold the whole table while nobody else asks);
//   - at max_connections, a peer under its fair share (the table over the
//     peers holding connections, itself included) gets the slot of an idle
//     connection of the peer holding the most beyond its share, which is
//     closed through the ordinary loss path; else it is refused.
// The refusal's reason travels in the reject's private data
// (wire::RejectReason), so the client's error says which limit it met.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace tern::rpc {

class PeerConns {
 public:
  struct Entry {
    uint32_t held = 0;
    bool warned = false;  // its per-peer refusal was logged; again once one is accepted
  };
  void add(const std::string& peer) { ++map_[peer].held; }
  void remove(const std::string& peer) {
    auto it = map_.find(peer);
    if (it == map_.end()) return;
    if (--it->second.held == 0) map_.erase(it);  // the table holds only peers with connections
  }
  uint32_t held(const std::string& peer) const {
    auto it = map_.find(peer);
    return it == map_.end() ? 0 : it->second.held;
  }
  Entry* find(const std::string& peer) {
    auto it = map_.find(peer);
    return it == map_.end() ? nullptr : &it->second;
  }
  // Peers holding at least one connection.
  size_t peers() const { return map_.size(); }

 private:
  // At most one entry per connection held: no peer can grow it otherwise.
  std::unordered_map<std::string, Entry> map_;
};

}  // namespace tern::rpc
