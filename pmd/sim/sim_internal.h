// pmd/sim's objects: the device, its memory table, CQs and QPs. Everything
// is in one process and one thread; remote memory is reached by pointer
// after the owner's MR table allows it, as a NIC's responder would.
#pragma once

#include <algorithm>
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
inline constexpr uint32_t kMaxSrqWr = 4096;

class SimPd;
class SimDevice;
class SimQp;

// One row of a device's memory table: a long-lived registration or a fast MR.
// lkey/rkey = make_rkey(index, key).
struct MrEntry {
  bool in_use = false;
  bool fast = false;
  bool valid = false;  // fast: registered now
  // fast: a peer's Send With Invalidate ended the last registration and the
  // owner has not called FastMr::retire() since (rxe's window stays free
  // under the rkey the peer knew; REG_MR is refused until retired).
  bool remote_ended = false;
  uint8_t key = 0;
  uint32_t access = 0;
  uint64_t iova = 0, length = 0;
  uint32_t max_depth = 0;
  uint32_t qpn = 0;  // fast: the QP whose REG_MR made the registration
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
  bool retire() override;

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
  uint64_t due_ns = 0;  // Fault::kDelayCompletions: not offered before monotonic_ns() reaches it
  bool stale = false;   // its QP was destroyed before it was polled
};

class SimCq final : public Cq {
 public:
  SimCq(SimDevice* dev, uint32_t cap);
  ~SimCq() override;
  int poll(Wc* wc, int max) override;
  uint32_t capacity() const override { return cap_; }
  Status arm() override;
  void disarm() { armed_ = false; }
  void publish(const CqEntry& e);
  // The QP `qpn` is gone: its completions here retire nothing any more.
  void orphan(uint32_t qpn) {
    for (CqEntry& e : visible_)
      if (e.wc.qp_num == qpn) e.send = false, e.stale = true;
  }

 private:
  SimDevice* dev_;
  uint32_t cap_;
  bool armed_ = false;  // wait mode: the next publish wakes the device's fd
  std::deque<CqEntry> visible_;
};

// A receive posted to a QP's own queue or to an SRQ.
struct PendingRecv {
  uint64_t wr_id;
  Sge sg[kMaxSge];
  uint32_t num_sge;
};

// A shared receive queue: SENDs arriving on any QP made with it take its
// oldest receive (SimQp::recvs()). A QP in error flushes none of it.
class SimSrq final : public Srq {
 public:
  SimSrq(SimDevice* dev, const SimPd* pd, uint32_t cap, uint32_t max_sge)
      : dev_(dev), pd_(pd), cap_(cap), max_sge_(max_sge) {}
  int post_recv(const RecvWr* wrs, int n, int* err) override;
  uint32_t capacity() const override { return cap_; }
  uint32_t posted() const override { return static_cast<uint32_t>(rq_.size()); }
  StatsView stats() const override { return {{"posted", &st_posted_}, {"consumed", &st_consumed_}}; }
  SimDevice* dev() const { return dev_; }
  const SimPd* pd() const { return pd_; }
  std::deque<PendingRecv>& queue() { return rq_; }
  void consumed() { st_consumed_.add(); }

 private:
  SimDevice* dev_;
  const SimPd* pd_;
  uint32_t cap_, max_sge_;
  std::deque<PendingRecv> rq_;
  Counter st_posted_, st_consumed_;
};

// A connection request. Answered by accept() or reject() of the device that
// holds it (the listener, or the one that adopted it after a detach());
// destroyed unanswered -- detached and never adopted, or left on a device
// that goes away -- it refuses the client, as a listener that closes does.
class SimConnRequest final : public ConnRequest {
 public:
  SimConnRequest(std::weak_ptr<World> world, uint32_t client_qpn, std::vector<uint8_t> pdata, std::string host)
      : world_(std::move(world)), client_qpn_(client_qpn) {
    private_data_ = std::move(pdata);
    peer_host_ = std::move(host);
  }
  ~SimConnRequest() override;
  uint32_t client_qpn() const { return client_qpn_; }
  // The client QP's serial (World::new_qp_serial): its number may be reused.
  uint64_t client_serial = 0;
  const World* world() const { return world_.lock().get(); }
  void answered() { answered_ = true; }

 private:
  std::weak_ptr<World> world_;
  uint32_t client_qpn_;
  bool answered_ = false;
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
  uint64_t serial() const { return serial_; }
  const QpInit& init() const override { return init_; }
  std::string peer() const override;
  std::string peer_host() const override;
  StatsView stats() const override;
  Status inject_fault(const Fault& f) override;

  // ---- the scheduler's side (sim_world.cc): which events this QP offers
  bool sq_runnable() const;
  void run_sq();  // executes (or flushes) the head of the send queue
  bool has_send_cqe() const;
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
  // World::corrupt_next_key: the next remote key this QP names is stale.
  void corrupt_next_key() { corrupt_next_ = true; }
  // The receives a SEND to this QP takes: its SRQ's, or its own.
  std::deque<PendingRecv>& recvs() { return srq_ != nullptr ? srq_->queue() : rq_; }
  bool recv_available() { return !recvs().empty(); }
  void lose_next_ack() { lose_ack_ = true; }
  void duplicate_next_disconnect() { dup_disc_ = true; }
  void set_rnr_retry(uint32_t retries, uint64_t timer_ns) {
    rnr_retry_ = static_cast<int32_t>(retries), rnr_left_ = retries, rnr_timer_ns_ = timer_ns;
  }
  void retire_to(uint64_t seq) { if (seq + 1 > sq_retired_) sq_retired_ = seq + 1; }
  SimDevice* dev() const { return dev_; }
  SimPd* pd() const { return static_cast<SimPd*>(init_.pd); }
  // A WR of this QP not yet executed (or flushed) whose local SGEs overlap
  // [addr, addr + len) -- *what its opcode, *seq its place in the send
  // queue, as the trace shows them --, or a receive posted to it or to its
  // SRQ that does (*what says which): what the device may still read or
  // write there.
  bool covers(uint64_t addr, uint64_t len, const char** what, uint64_t* seq) const;

 private:
  struct PendingSend {
    SendWr wr;
    Sge sg[kMaxSge];
    uint64_t seq;
  };
  // Executes wr; kSuccess or the status its completion carries. On a
  // responder-side failure *peer_fault says the peer's QP fails too.
  WcStatus execute(PendingSend& p, bool* responder_failed, const char** why);
  WcStatus deliver_send(PendingSend& p, bool* responder_failed, const char** why);
  WcStatus garbage(PendingSend& p, bool* responder_failed, const char** why);
  void complete_send(const PendingSend& p, WcStatus st);
  bool wire_down() const;  // a port between this QP and its peer is down
  bool local_sges_ok(const PendingSend& p) const;
  void flush_recvs();

  SimDevice* dev_;
  QpInit init_;
  uint32_t qpn_;
  uint64_t serial_ = 0;
  QpState state_ = QpState::kInit;
  SimQp* peer_ = nullptr;
  uint32_t peer_qpn_ = 0;
  bool disc_reported_ = false;
  int64_t fail_after_ = -1;  // Fault::kFailAfterWrs
  bool corrupt_next_ = false;  // World::corrupt_next_key: the next remote key is stale
  bool garbage_next_ = false;  // Fault::kCorruptNextDesc: the responder cannot parse the next request
  uint64_t delay_ns_ = 0;      // Fault::kDelayCompletions
  bool lose_ack_ = false;      // World::lose_next_ack
  bool dup_disc_ = false;      // World::duplicate_next_disconnect
  int32_t rnr_retry_ = -1;     // World::rnr_retry; -1: retry for ever (the default)
  uint32_t rnr_left_ = 0;
  uint64_t rnr_timer_ns_ = 0;
  mutable uint64_t rnr_due_ns_ = 0;             // the next RNR retry of the head SEND
  mutable uint64_t rnr_noted_seq_ = ~uint64_t{0};  // the head SEND counted in rnr_waits
  SimSrq* srq_ = nullptr;
  std::deque<PendingSend> sq_;
  std::deque<PendingRecv> rq_;
  std::deque<CqEntry> send_cqes_, recv_cqes_;
  std::deque<CmAction> cm_;
  uint64_t sq_posted_ = 0, sq_retired_ = 0;
  Counter st_posted_, st_executed_, st_flushed_, st_sq_full_;
  mutable Counter st_rnr_;  // counted where the scheduler looks (sq_runnable)
};

class SimDevice final : public Device {
 public:
  SimDevice(std::shared_ptr<World> world, std::string addr);
  ~SimDevice() override;

  const DeviceCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<Pd>> alloc_pd() override;
  Result<std::unique_ptr<Cq>> create_cq(uint32_t capacity) override;
  Result<std::unique_ptr<Qp>> create_qp(const QpInit& init) override;
  Result<std::unique_ptr<Srq>> create_srq(Pd* pd, uint32_t depth, uint32_t max_sge) override;
  Status listen() override;
  Status connect(Qp* qp, std::span<const uint8_t> private_data) override;
  Status accept(ConnRequest* req, Qp* qp, std::span<const uint8_t> private_data) override;
  Status reject(ConnRequest* req, std::span<const uint8_t> private_data) override;
  Status disconnect(Qp* qp) override;
  bool poll_cm(CmEvent* ev) override;
  bool port_up() const override { return port_up_; }
  StatsView stats() const override { return {{"port_changes", &st_port_changes_}}; }
  Result<std::unique_ptr<ConnRequest>> detach(ConnRequest* req) override;
  Result<ConnRequest*> adopt(std::unique_ptr<ConnRequest> req) override;
  int wait_fd() override;
  Status arm_wait() override;
  bool ack_wait() override;

  void set_srq_depth(uint32_t depth);
  // World::link_down. link_is_down(): the wire's view, now; port_up(): the
  // host's, as of its last poll_cm().
  void link_down_until(uint64_t ns) { down_until_ = std::max(down_until_, ns); }
  bool link_is_down() const;
  World& world() { return *world_; }
  const std::shared_ptr<World>& world_ptr() const { return world_; }
  const std::string& host() const { return host_; }
  void report(CmEvent ev);
  // Wait mode. notify(): something is there for this device's poll calls
  // (an armed CQ got a completion, a CM event while armed): the fd becomes
  // readable. asleep(): the host armed and may be asleep, polling nobody,
  // so the world runs here, until something is there for this device or
  // nothing can run -- which is what would happen while it slept. Called by
  // arm_wait and by every post on an armed device.
  void notify();
  void asleep();
  void add_cq(SimCq* cq) { cqs_.push_back(cq); }
  void remove_cq(SimCq* cq) { cqs_.erase(std::remove(cqs_.begin(), cqs_.end(), cq), cqs_.end()); }
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
  // A remote access through `rkey` to [addr, addr+len) arriving at QP `qpn`
  // of `pd` (with qp_bound=1 a fast registration is reached only through
  // the QP whose REG_MR made it, as a type-2 memory window).
  bool remote_ok(const SimPd* pd, uint32_t qpn, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need);
  bool qp_bound() const { return caps_.fast_reg_qp_bound; }
  // A fast registration valid now (its rkey usable by a peer) overlapping
  // [addr, addr + len).
  bool fast_reg_covers(uint64_t addr, uint64_t len) const;
  // No other long-lived registration with remote access has exactly e's
  // range: a report of that range (a registration cache's eviction) is e's.
  bool sole_remote_mr_of_range(const MrEntry& e) const;
  void set_qp_bound(bool on) { caps_.fast_reg_qp_bound = on, caps_.remote_inv_qp_bound = on; }
  // A device with reg_mr only (fast_reg=0): no REG_MR or LOCAL_INV, no
  // remote invalidation; an engine then registers chunks through its
  // registration cache (trusted peers) or refuses calls that need them.
  void without_fast_reg() { caps_.fast_reg = false, caps_.max_fast_reg_depth = 0, caps_.remote_invalidation = false; }

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
  int wait_fd_ = -1;
  bool armed_ = false;     // arm_wait() and no ack_wait() since
  bool notified_ = false;  // the fd was made readable since the last ack_wait()
  bool running_ = false;   // asleep() is running the world (no re-entry)
  std::vector<SimCq*> cqs_;
  uint64_t down_until_ = 0;
  bool port_up_ = true;
  Counter st_port_changes_;
};

}  // namespace tern::sim
