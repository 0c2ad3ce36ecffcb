// What the engine keeps per device (one per device spec it opened) and per
// protection domain.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "engine/listen_group.h"
#include "engine/receive_queue.h"
#include "engine/registrar.h"
#include "rdmadev/rdmadev.h"
#include "telemetry/registry.h"

namespace tern::rpc {

class ConnBase;

// How a client makes its call memory reachable by the server (chunks).
enum class ChunkReg : uint8_t {
  kFastReg,   // per-call fast registration, invalidated before the call completes
  kRegCache,  // cached reg_mr per chunk, reachable until evicted: trusted peers only
  kNone,      // neither is allowed: calls that need chunks are refused (ENOTSUP)
};

// Host memory registered with register_memory(), local only.
struct Region {
  uint64_t addr, len;
  std::unique_ptr<rdma::Mr> mr;
};

// A protection domain and what lives in it: the long-lived registrations
// (the arena, the host's memory), which are local only and give buffers
// their lkeys, and the registrar whose per-call fast registrations are the
// only memory a peer can reach. A device's connections share one when fast
// registrations are QP-bound (a window's rkey works only on its own QP); when
// they are PD-wide (mlx5 mkeys) each client connection gets its own, so that
// a server cannot use an rkey made for a call to another server.
struct PdCtx {
  std::unique_ptr<rdma::Pd> pd;
  std::unique_ptr<rdma::Mr> arena_mr;  // the engine's arena: every engine buffer's lkey
  uint64_t arena_lo = 0, arena_hi = 0;
  std::vector<Region> regions;         // the host's, sorted by address
  std::unique_ptr<Registrar> reg;      // null with ChunkReg::kNone
  ~PdCtx();
  uint32_t arena_lkey() const { return arena_mr->lkey(); }
  // The lkey of the registration holding [p, p+len), or false: the arena in
  // one range check, the host's regions by binary search.
  bool lkey_of(const void* p, uint64_t len, uint32_t* lkey) const {
    auto a = reinterpret_cast<uint64_t>(p);
    if (a >= arena_lo && len <= arena_hi - arena_lo && a - arena_lo <= arena_hi - arena_lo - len) {
      *lkey = arena_mr->lkey();
      return true;
    }
    return region_lkey(a, len, lkey);
  }
  // Registers [addr, addr+len) for local access only.
  Status add_region(void* addr, size_t len);

 private:
  bool region_lkey(uint64_t a, uint64_t len, uint32_t* lkey) const;
};

struct DeviceCtx {
  std::string spec;
  uint32_t index = 0;  // in EngineImpl::devices
  std::unique_ptr<rdma::Device> dev;
  std::unique_ptr<PdCtx> shared;  // server connections, and clients when registrations are QP-bound
  std::unique_ptr<rdma::Cq> scq, rcq;
  // The device's shared receive queue and the receive buffers posted to it
  // (null when the device has none: each connection has its own queue).
  std::unique_ptr<rdma::Srq> srq;
  std::unique_ptr<RecvQueue> recv;
  // Connections by QP number: a receive completion names its QP only.
  // The last one found is remembered: consecutive receives are mostly for
  // the same connection.
  std::unordered_map<uint32_t, ConnBase*> by_qpn;
  uint32_t last_qpn = UINT32_MAX;
  ConnBase* last_conn = nullptr;
  ConnBase* conn_of(uint32_t qpn) {
    if (qpn == last_qpn) return last_conn;
    auto it = by_qpn.find(qpn);
    ConnBase* c = it != by_qpn.end() ? it->second : nullptr;
    last_qpn = qpn, last_conn = c;
    return c;
  }
  void forget_qpn(uint32_t qpn) {
    by_qpn.erase(qpn);
    if (last_qpn == qpn) last_qpn = UINT32_MAX, last_conn = nullptr;
  }
  bool listening = false;
  // A listen group this device serves with other engines (listen_group.h):
  // the group, and this engine's place in it.
  std::shared_ptr<ListenGroupImpl> group;
  std::shared_ptr<ListenMember> member;
  bool member_waits = false;  // its eventfd is in the engine's wait-mode epoll set
  ChunkReg chunk_reg = ChunkReg::kFastReg;
  // Client connections get a PdCtx of their own (fast registrations are
  // PD-wide on this device).
  bool pd_per_conn = false;
  // RFC 8797 remote invalidation offered on this device's connections.
  bool offer_inv = false;
  bool warned_no_chunks = false;
  bool warned_full = false;
  bool warned_handover = false;
  // Telemetry kind "device", id "<engine>.<index>" (register_device_telemetry
  // in engine_stats.cc). Declared last, so unregistered first: its provider
  // reads `dev` and `srq`.
  telemetry::Source tsrc;
};

// Registers dc as a telemetry source once it is complete (its SRQ made).
void register_device_telemetry(const std::string& engine_tel_id, DeviceCtx* dc);

}  // namespace tern::rpc
