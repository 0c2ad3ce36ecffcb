// pmd/sim's objects: the device, its memory table, CQs and QPs. Everything
// is in one process and one thread; remote memory is reached by pointer
// after the owner's MR table allows it, as a NIC's responder would.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/stats.h"
#include "rdmadev/rdmadev.h"
#include "sim/sim_world.h"

namespace tern::sim {

using namespace tern::rdma;

inline constexpr uint32_t kMaxSge = 4;
inline constexpr uint32_t kMaxQpWr = 4096;
inline constexpr uint32_t kMaxCqe = 65536;
inline constexpr uint32_t kMaxFastRegDepth = 256;
inline constexpr uint32_t kMaxMessage = 1u << 20;  // largest SEND

class SimPd;
class SimDevice;

// One row of a device's memory table: a long-lived registration or a fast MR.
// lkey/rkey = make_rkey(index, key).
struct MrEntry {
  bool in_use = false;
  bool fast = false;
  bool valid = false;  // fast: registered now
  uint8_t key = 0;
  uint32_t access = 0;
  uint64_t iova = 0, length = 0;
  uint32_t max_depth = 0;
  const SimPd* pd = nullptr;
};

class SimPd final : public Pd {
 public:
  explicit SimPd(SimDevice* dev) : dev_(dev) {}
  Result<std::unique_ptr<Mr>> reg_mr(void* addr, uint64_t length, uint32_t access) override;
  Result<std::unique_ptr<FastMr>> alloc_fast_mr(uint32_t max_depth) override;
  SimDevice* dev() const { return dev_; }

 private:
  SimDevice* dev_;
};

class SimMr final : public Mr {
 public:
  SimMr(SimDevice* dev, uint32_t index, uint64_t addr, uint64_t len, uint32_t access, bool remote);
  ~SimMr() override;

 private:
  SimDevice* dev_;
  uint32_t index_;
};

class SimFastMr final : public FastMr {
 public:
  SimFastMr(SimDevice* dev, uint32_t index, uint32_t depth);
  ~SimFastMr() override;

 private:
  SimDevice* dev_;
  uint32_t index_;
};

// A completion as the CQ holds it: the send-queue position of a send-side
// completion retires the WRs up to it (the QP's slots free when it is polled).
struct CqEntry {
  Wc wc;
  bool send;
  uint64_t seq;
};

class SimCq final : public Cq {
 public:
  SimCq(SimDevice* dev, uint32_t cap) : dev_(dev), cap_(cap) {}
  int poll(Wc* wc, int max) override;
  uint32_t capacity() const override { return cap_; }
  void publish(const CqEntry& e);

 private:
  SimDevice* dev_;
  uint32_t cap_;
  std::deque<CqEntry> visible_;
};

class SimConnRequest final : public ConnRequest {
 public:
  SimConnRequest(uint32_t client_qpn, std::vector<uint8_t> pdata, std::string host) : client_qpn_(client_qpn) {
    private_data_ = std::move(pdata);
    peer_host_ = std::move(host);
  }
  uint32_t client_qpn() const { return client_qpn_; }

 private:
  uint32_t client_qpn_;
};

// A connection-manager action waiting in a QP's CM queue.
struct CmAction {
  enum class Kind : uint8_t {
    kRequest,   // client: the request reaches the listener (or nobody: kUnreachable)
    kDeliver,   // this QP's device reports `ev` (kEstablished moves the QP to RTS first)
    kLoseLink,  // the peer is gone: this QP goes to error (kDisconnected follows)
  };
  Kind kind;
  CmEvent ev;
  std::string addr;  // kRequest
};

class SimQp final : public Qp {
 public:
  SimQp(SimDevice* dev, const QpInit& init);
  ~SimQp() override;

  int post_send(const SendWr* wrs, int n, int* err) override;
  int post_recv(const RecvWr* wrs, int n, int* err) override;
  QpState state() const override { return state_; }
  uint32_t qp_num() const override { return qpn_; }
  const QpInit& init() const override { return init_; }
  std::string peer() const override;
  std::string peer_host() const override;
  StatsView stats() const override;
  Status inject_fault(const Fault& f) override;

  // ---- the scheduler's side (sim_world.cc): which events this QP offers
  bool sq_runnable() const;
  void run_sq();  // executes (or flushes) the head of the send queue
  bool has_send_cqe() const { return !send_cqes_.empty(); }
  bool has_recv_cqe() const { return !recv_cqes_.empty(); }
  void publish_send();
  void publish_recv();
  bool has_cm() const { return !cm_.empty(); }
  void run_cm();

  // ---- control (sim_device.cc)
  void queue_cm(CmAction a) { cm_.push_back(std::move(a)); }
  void set_state(QpState s) { state_ = s; }
  void link(SimQp* peer, SimPd* pd) { peer_ = peer, peer_qpn_ = peer->qpn_; (void)pd; }
  SimQp* linked_peer() const { return peer_; }
  void unlink() { peer_ = nullptr; }
  // To error: everything outstanding flushes; kDisconnected for this QP when
  // it was connected; the peer loses its link (scheduled) when tell_peer.
  void enter_error(Status why, bool peer_fault, bool tell_peer);
  // World::corrupt_next_key (not Fault::kCorruptNextDesc, whose garbage
  // descriptor is pmd/shm's own).
  void corrupt_next_key() { corrupt_next_ = true; }
  void retire_to(uint64_t seq) { if (seq + 1 > sq_retired_) sq_retired_ = seq + 1; }
  SimDevice* dev() const { return dev_; }
  SimPd* pd() const { return static_cast<SimPd*>(init_.pd); }

 private:
  struct PendingSend {
    SendWr wr;
    Sge sg[kMaxSge];
    uint64_t seq;
  };
  struct PendingRecv {
    uint64_t wr_id;
    Sge sg[kMaxSge];
    uint32_t num_sge;
  };

  // Executes wr; kSuccess or the status its completion carries. On a
  // responder-side failure *peer_fault says the peer's QP fails too.
  WcStatus execute(PendingSend& p, bool* responder_failed, const char** why);
  WcStatus deliver_send(PendingSend& p, bool* responder_failed, const char** why);
  void complete_send(const PendingSend& p, WcStatus st);
  void flush_recvs();

  SimDevice* dev_;
  QpInit init_;
  uint32_t qpn_;
  QpState state_ = QpState::kInit;
  SimQp* peer_ = nullptr;
  uint32_t peer_qpn_ = 0;
  bool disc_reported_ = false;
  int64_t fail_after_ = -1;  // Fault::kFailAfterWrs
  bool corrupt_next_ = false;  // Fault::kCorruptNextDesc: the next remote key is stale
  std::deque<PendingSend> sq_;
  std::deque<PendingRecv> rq_;
  std::deque<CqEntry> send_cqes_, recv_cqes_;
  std::deque<CmAction> cm_;
  uint64_t sq_posted_ = 0, sq_retired_ = 0;
  Counter st_posted_, st_executed_, st_rnr_, st_flushed_, st_sq_full_;
};

class SimDevice final : public Device {
 public:
  SimDevice(std::shared_ptr<World> world, std::string addr);
  ~SimDevice() override;

  const DeviceCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<Pd>> alloc_pd() override;
  Result<std::unique_ptr<Cq>> create_cq(uint32_t capacity) override;
  Result<std::unique_ptr<Qp>> create_qp(const QpInit& init) override;
  Status listen() override;
  Status connect(Qp* qp, std::span<const uint8_t> private_data) override;
  Status accept(ConnRequest* req, Qp* qp, std::span<const uint8_t> private_data) override;
  Status reject(ConnRequest* req, std::span<const uint8_t> private_data) override;
  Status disconnect(Qp* qp) override;
  bool poll_cm(CmEvent* ev) override;

  World& world() { return *world_; }
  const std::string& host() const { return host_; }
  void report(CmEvent ev) { events_.push_back(std::move(ev)); }
  // A destroyed QP's events not yet polled go with it (a host looks at the
  // QP an event names).
  void forget_qp(const Qp* qp);
  // A connection request reached this (listening) device.
  void request_arrived(uint32_t client_qpn, std::vector<uint8_t> pdata, const std::string& host);

  // The memory table.
  uint32_t add_entry(const MrEntry& e);
  void free_entry(uint32_t index);
  MrEntry* entry(uint32_t index) { return index < table_.size() && table_[index].in_use ? &table_[index] : nullptr; }
  // An SGE the local QP may use: a long-lived registration of `pd` with `need` rights.
  bool local_ok(const SimPd* pd, const Sge& s, uint32_t need);
  // A remote access through `rkey` to [addr, addr+len) for a QP of `pd`.
  bool remote_ok(const SimPd* pd, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need);

 private:
  std::shared_ptr<World> world_;
  DeviceCaps caps_;
  std::string addr_;
  std::string host_;
  bool listening_ = false;
  std::vector<MrEntry> table_;
  std::vector<uint32_t> free_;
  std::deque<CmEvent> events_;
  std::vector<std::unique_ptr<SimConnRequest>> requests_;
};

}  // namespace tern::sim
