// pmd/verbs private classes: rdmadev.h on libibverbs + librdmacm, for any
// rdma-core device (rxe, mlx5 through its generic verbs, irdma, ...).
//
// Files, one concept each:
//   verbs_device.cc  opening (by device name or by address), caps, object creation
//   verbs_mem.cc     PD, long-lived MRs, FastMr = type-2 memory window (and its REG_MR builder)
//   verbs_qp.cc      QP state and posting: receives, the legacy ibv_post_send path, flushes
//   verbs_srq.cc     shared receive queues: ibv_create_srq, posting, their completions
//   verbs_wr_api.cc  posting a chain through the ibv_wr_* builder (one doorbell per chain)
//   verbs_cq.cc      extended-CQ polling and translation to tern Wc
//   verbs_cm.cc      rdma_cm: listen/connect/accept/reject/disconnect, events
//   verbs_events.cc  the device's asynchronous events (port, device and QP errors)
//   verbs_wait.cc    wait mode: the device's epoll set (completion channel, rdma_cm
//                    channel, async fds, an eventfd, a timerfd), arming, acking
//
// Work-request ids. Verbs hands back only a 64-bit wr_id, and only for
// signaled or failed WRs; tern needs the user's wr_id and the WR's opcode even
// for flushed WRs, and a completion must retire every earlier unsignaled WR.
// So every posted WR takes a slot in a per-QP shadow ring, and the wr_id given
// to verbs names the slot: [generation:16][qp index:15][recv:1][sequence:32].
// The CQ maps it back through the device's QP table in O(1), which also makes
// completions of a destroyed QP (rxe leaves them in the CQ) harmless.
//
// A receive posted to a shared receive queue belongs to no QP until a message
// takes it, so its wr_id names the SRQ instead: qp index kSrqQpIndex, the
// SRQ's generation, and [srq index:12][slot:20] in place of the sequence. The
// completion's qp_num says which QP it was.
//
// Drivers built on pmd/verbs (pmd/mlx5) include this header too; what they
// may replace is in verbs_hooks.h.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/devargs.h"
#include "base/stats.h"
#include "rdmadev/rdmadev.h"
#include "verbs/verbs_cm_reaper.h"
#include "verbs/verbs_hooks.h"

namespace tern::verbs {

using namespace tern::rdma;

class VerbsDevice;
class VerbsQp;
class VerbsCq;
class VerbsMwBuilder;

// ---------------------------------------------------------------- wr_id encoding

inline constexpr uint64_t encode_wr_id(uint16_t gen, uint32_t qp_index, bool recv, uint32_t seq) {
  return (uint64_t{gen} << 48) | (uint64_t{qp_index & 0x7fff} << 33) | (uint64_t{recv} << 32) | seq;
}
inline constexpr uint16_t wr_id_gen(uint64_t id) { return static_cast<uint16_t>(id >> 48); }
inline constexpr uint32_t wr_id_qp(uint64_t id) { return static_cast<uint32_t>(id >> 33) & 0x7fff; }
inline constexpr bool wr_id_recv(uint64_t id) { return (id >> 32) & 1; }
inline constexpr uint32_t wr_id_seq(uint64_t id) { return static_cast<uint32_t>(id); }
// QP index 0x7fff marks an SRQ receive (above), so a device has one QP less.
inline constexpr uint32_t kSrqQpIndex = 0x7fff;
inline constexpr uint32_t kMaxQpsPerDevice = kSrqQpIndex;
inline constexpr uint32_t kSrqSlotBits = 20;
inline constexpr uint32_t kMaxSrqsPerDevice = 1u << (32 - kSrqSlotBits);
inline constexpr uint32_t kMaxSrqWr = 1u << kSrqSlotBits;
inline constexpr uint64_t encode_srq_wr_id(uint16_t gen, uint32_t srq_index, uint32_t slot) {
  return encode_wr_id(gen, kSrqQpIndex, true, (srq_index << kSrqSlotBits) | slot);
}
inline constexpr bool wr_id_is_srq(uint64_t id) { return wr_id_recv(id) && wr_id_qp(id) == kSrqQpIndex; }
inline constexpr uint32_t wr_id_srq(uint64_t id) { return wr_id_seq(id) >> kSrqSlotBits; }
inline constexpr uint32_t wr_id_srq_slot(uint64_t id) { return wr_id_seq(id) & (kMaxSrqWr - 1); }

// ---------------------------------------------------------------- private data

// rdma_cm on IB/RoCE pads private data to the CM message's size (56 bytes in a
// REQ, 196 in a REP, 148 in a REJ), so the receiver cannot tell how much was
// sent. Tern's payload goes first (an RFC 8797 peer reads its 8 bytes at
// offset 0 as usual) and a 4-byte trailer at offset 52 carries the length.
inline constexpr uint32_t kCmRawPrivateData = 56;
inline constexpr uint32_t kMaxPrivateData = 52;
// Encodes into out[kCmRawPrivateData].
void encode_private_data(std::span<const uint8_t> in, uint8_t* out);
// Peer bytes: with a valid trailer, the payload it names; else all of them.
std::vector<uint8_t> decode_private_data(const void* p, size_t len);
// The peer's address without its port (Qp::peer_host, ConnRequest::peer_host).
std::string peer_host_of(rdma_cm_id* id);

// ---------------------------------------------------------------- memory

class VerbsPd final : public Pd {
 public:
  VerbsPd(VerbsDevice* dev, ibv_pd* pd) : dev_(dev), pd_(pd) {}
  ~VerbsPd() override;
  Result<std::unique_ptr<Mr>> reg_mr(void* addr, uint64_t length, uint32_t access) override;
  Result<std::unique_ptr<FastMr>> alloc_fast_mr(uint32_t max_depth) override;

  ibv_pd* pd() const { return pd_; }
  VerbsDevice* device() const { return dev_; }
  // The long-lived ibv_mr an lkey names (a bind WR needs the ibv_mr itself).
  ibv_mr* mr_of(uint32_t lkey) const { return mrs_.find(lkey); }
  const MrTable& mrs() const { return mrs_; }
  void add_mr(ibv_mr* mr) { mrs_.add(mr); }
  void remove_mr(ibv_mr* mr) { mrs_.remove(mr); }

 private:
  VerbsDevice* dev_;
  ibv_pd* pd_;
  MrTable mrs_;
};

class VerbsMr final : public Mr {
 public:
  VerbsMr(VerbsPd* pd, ibv_mr* mr, uint32_t access);
  ~VerbsMr() override;

 private:
  VerbsPd* pd_;
  ibv_mr* mr_;
};

// A FastMr is a type-2 memory window. Its rkey's index is the window's; the
// key byte is ours to choose at each bind (FastMr::bump_rkey == ibv_inc_rkey).
class VerbsFastMr final : public FastMr {
 public:
  VerbsFastMr(VerbsPd* pd, ibv_mw* mw, uint32_t max_depth);
  ~VerbsFastMr() override;
  ibv_mw* mw() const { return mw_; }
  VerbsPd* pd() const { return pd_; }
  // A QP this window was bound through; see VerbsQp::~VerbsQp.
  void note_bound(VerbsQp* qp);
  void forget_qp(VerbsQp* qp);
  // Replaces the window with a fresh one (releases any binding and its QP).
  void renew_window();
  // On rxe: a fresh window, so that no rkey a peer saw names a free one.
  bool retire() override;

 private:
  VerbsPd* pd_;
  ibv_mw* mw_;
  std::vector<VerbsQp*> bound_qps_;
};

// REG_MR as a type-2 window bind, for the ibv_wr_* path; plan() also serves
// the legacy ibv_post_send path.
class VerbsMwBuilder final : public RegMrBuilder {
 public:
  VerbsMwBuilder(VerbsQp* qp, VerbsPd* pd, uint64_t page_size) : qp_(qp), pd_(pd), page_(page_size) {}
  // The window and bind a kRegMr asks for, if this QP can post it: a window
  // of this PD, a range inside the MR `reg.lkey`, within the depth, under
  // the window's index. A window refuses nothing at post time on rxe, so the
  // driver refuses here what the device would only refuse later.
  bool plan(const SendWr& w, ibv_mw** mw, ibv_mw_bind_info* bind);
  int check(const SendWr& w) override;
  void build(ibv_qp_ex* qpx, const SendWr& w) override;
  void finish(bool posted) override;

 private:
  VerbsQp* qp_;
  VerbsPd* pd_;
  uint64_t page_;
  ibv_mw* mw_ = nullptr;  // the last check()'s plan
  ibv_mw_bind_info bind_{};
  struct Undo {
    ibv_mw* mw;
    uint32_t rkey;
  };
  std::vector<Undo> undo_;  // window keys to restore if the chain is not posted
};

// ---------------------------------------------------------------- completion queue

class VerbsCq final : public Cq {
 public:
  VerbsCq(VerbsDevice* dev, ibv_cq_ex* cq, uint32_t capacity) : dev_(dev), cq_(cq), cap_(capacity) {}
  ~VerbsCq() override;
  int poll(Wc* wc, int max) override;
  uint32_t capacity() const override { return cap_; }
  // ibv_req_notify_cq, and the flush-grace deadline of QPs in error.
  Status arm() override;
  // A completion event of this CQ was read from the channel: acked in
  // batches (ibv_ack_cq_events takes a lock), the rest before destruction.
  void note_event();

  ibv_cq* ibv() const { return ibv_cq_ex_to_cq(cq_); }
  // QPs in error with WRs the driver completes itself (see verbs_cq.cc).
  void add_pending(VerbsQp* qp);
  void remove_pending(VerbsQp* qp);

 private:
  int poll_pending(Wc* wc, int max);
  // Translates the current CQE, a receive of an SRQ; false to drop it.
  bool srq_completion(uint64_t id, Wc* w);

  VerbsDevice* dev_;
  ibv_cq_ex* cq_;
  uint32_t cap_;
  std::vector<VerbsQp*> pending_;
  uint32_t unacked_events_ = 0;
};

// ---------------------------------------------------------------- shared receive queue

struct VerbsSrqStats {
  Counter posted, completions, errors, full, doorbells;
};

// ibv_srq with a slot table for its receives' wr_ids. Messages on different
// QPs take receives in post order, but their completions may be polled from
// different CQs in any order, so slots are freed one by one (a free list),
// not retired in order as a QP's shadow ring is.
class VerbsSrq final : public Srq {
 public:
  VerbsSrq(VerbsDevice* dev, VerbsPd* pd, ibv_srq* srq, uint32_t depth, uint32_t max_sge, uint32_t index,
           uint16_t gen);
  ~VerbsSrq() override;
  int post_recv(const RecvWr* wrs, int n, int* err) override;
  uint32_t capacity() const override { return depth_; }
  uint32_t posted() const override { return depth_ - static_cast<uint32_t>(free_.size()); }
  StatsView stats() const override;

  ibv_srq* ibv() const { return srq_; }
  VerbsPd* pd() const { return pd_; }
  uint16_t gen() const { return gen_; }
  uint32_t index() const { return index_; }
  // A completion named `slot`: the user's wr_id, and the slot is free again.
  // False when the slot holds no receive (a stale or foreign completion).
  bool take(uint32_t slot, uint64_t* wr_id) {
    if (slot >= depth_ || !busy_[slot]) return false;
    busy_[slot] = 0;
    *wr_id = wr_ids_[slot];
    free_.push_back(slot);
    return true;
  }
  VerbsSrqStats& st() { return st_; }
  // QPs created with it (rdmadev.h: they go first).
  void attach() { ++qps_; }
  void detach() { --qps_; }

 private:
  VerbsDevice* dev_;
  VerbsPd* pd_;
  ibv_srq* srq_;
  uint32_t qps_ = 0;
  uint32_t depth_, max_sge_, index_;
  uint16_t gen_;
  std::vector<uint64_t> wr_ids_;  // per slot
  std::vector<uint8_t> busy_;     // per slot: posted, not yet completed
  std::vector<uint32_t> free_;    // free slots, the next one at the back
  std::vector<ibv_recv_wr> rwr_;  // scratch for a post_recv chain
  VerbsSrqStats st_;
};

// ---------------------------------------------------------------- queue pair

struct VerbsQpStats {
  Counter post_calls, doorbells, send_wrs, recv_wrs, bytes_out, completions, inline_sends;
  Counter reg_mr, local_inv, send_inv, remote_inv, errors, flushed, sw_flushed, sq_full, rq_full;
};

// Shadow of one work queue: user wr_id and opcode per posted WR, retired in order.
struct ShadowRing {
  struct Entry {
    uint64_t wr_id;
    WcOpcode opcode;
    bool signaled;
    bool sw;  // posted while the QP was in error: completed by the driver
  };
  std::vector<Entry> e;
  uint32_t mask = 0, head = 0, tail = 0, depth = 0;
  void init(uint32_t d);
  uint32_t used() const { return tail - head; }
  bool full() const { return used() >= depth; }
  Entry& at(uint32_t seq) { return e[seq & mask]; }
  // Takes the next slot for a WR; returns its sequence (the caller checked full()).
  uint32_t push(uint64_t wr_id, WcOpcode opcode, bool signaled, bool sw) {
    const uint32_t seq = tail++;
    at(seq) = Entry{wr_id, opcode, signaled, sw};
    return seq;
  }
  // True if seq is outstanding (posted, not retired).
  bool outstanding(uint32_t seq) const { return seq - head < tail - head; }
};

// Whether a SEND or RDMA WRITE of these SGEs goes inline (IBV_SEND_INLINE:
// the provider copies the bytes into the work queue entry at post time, so
// the device reads no buffer; on hardware one DMA read less per WR, eRPC's
// choice for small messages): at most `max_inline` bytes in all, and every
// SGE inside a registration of this PD under its own lkey. Inline, the
// device never looks at the lkey, so without that check a SEND from an
// unregistered or foreign buffer would succeed instead of failing as
// rdmadev.h says; and the copy touches only pinned, registered memory.
inline bool inline_fits(const MrTable& mrs, uint32_t max_inline, const Sge* sg, uint32_t n) {
  if (n == 0 || sg == nullptr) return false;
  uint64_t total = 0;
  for (uint32_t k = 0; k < n; ++k) {
    total += sg[k].length;
    if (total > max_inline) return false;
  }
  for (uint32_t k = 0; k < n; ++k) {
    const ibv_mr* m = mrs.find(sg[k].lkey);
    const uint64_t base = m != nullptr ? reinterpret_cast<uint64_t>(m->addr) : 0;
    if (m == nullptr || sg[k].addr < base || sg[k].addr - base > m->length ||
        sg[k].length > m->length - (sg[k].addr - base))
      return false;
  }
  return true;
}

// What posting a chain through the ibv_wr_* builder needs of its QP. Apart
// from VerbsQp so that a unit test can run post_send_wr_api() against a fake
// ibv_qp_ex: ibv_wr_* are inline forwards to its function pointers.
struct WrApiQueue {
  ibv_qp_ex* qpx = nullptr;
  ShadowRing* sq = nullptr;
  VerbsQpStats* st = nullptr;
  RegMrBuilder* reg = nullptr;  // nullptr: kRegMr is malformed here
  const MrTable* mrs = nullptr;  // the PD's registrations (inline_fits)
  uint32_t max_inline = 0;       // the QP's inline limit; 0: never inline
  uint32_t max_sge = 0;
  uint32_t qp_index = 0;
  uint16_t gen = 0;
  bool local_inv = false;  // LOCAL_INV is accepted
  bool send_inv = false;   // SEND_WITH_INV is accepted
};
// post_send's contract (rdmadev.h) for a QP in RTS: one ibv_wr_start ..
// ibv_wr_complete, so one doorbell; accepted from the front.
int post_send_wr_api(const WrApiQueue& q, const SendWr* wrs, int n, int* err);

class VerbsQp final : public Qp {
 public:
  // max_inline: what ibv_create_qp_ex granted (cap.max_inline_data).
  VerbsQp(VerbsDevice* dev, VerbsPd* pd, VerbsCq* scq, VerbsCq* rcq, const QpInit& init, ibv_qp* qp,
          uint32_t index, uint16_t gen, uint32_t max_inline);
  ~VerbsQp() override;

  int post_send(const SendWr* wrs, int n, int* err) override;
  int post_recv(const RecvWr* wrs, int n, int* err) override;
  QpState state() const override { return state_; }
  uint32_t qp_num() const override { return qp_->qp_num; }
  const QpInit& init() const override { return init_; }
  StatsView stats() const override;
  std::string peer() const override;
  std::string peer_host() const override;

  // Datapath helpers for VerbsCq.
  ShadowRing& sq() { return sq_; }
  ShadowRing& rq() { return rq_; }
  uint16_t gen() const { return gen_; }
  uint32_t index() const { return index_; }
  VerbsQpStats& st() { return st_; }
  // A completion with an error status: the QP is in error now (verbs semantics).
  void hw_error(WcStatus why);
  uint64_t error_since() const { return error_since_; }
  // QpInit::srq, or nullptr. A QP of an SRQ has no receive queue (rq() is
  // empty) and, once in error, holds back its send-queue flushes of WRs
  // posted after the error (drain markers) until the device says it will
  // take no more receives from the SRQ for it (IBV_EVENT_QP_LAST_WQE_REACHED,
  // verbs_events.cc) or the flush grace is over (verbs_cq.cc): rdmadev.h's
  // drain rule.
  VerbsSrq* srq() const { return srq_; }
  bool last_wqe_reached() const { return last_wqe_reached_; }
  void note_last_wqe_reached() { last_wqe_reached_ = true; }

  // Control path (verbs_cm.cc).
  ibv_qp* ibv() const { return qp_; }
  rdma_cm_id* cm_id() const { return cm_id_; }
  void set_cm_id(rdma_cm_id* id) { cm_id_ = id; }
  void set_state(QpState s) { state_ = s; }
  // Moves the QP to error: hardware ERR (flushes), tern kError, flush bookkeeping.
  void enter_error();
  Status to_rtr_rts(rdma_cm_id* id, uint8_t resp_res, uint8_t init_depth);
  std::vector<uint8_t>& peer_private() { return peer_private_; }
  std::vector<uint8_t>& my_private() { return my_private_; }
  bool active = false;               // the connecting (client) side
  bool disconnect_reported = false;  // kDisconnected is reported once per QP
  bool error_pending_cm = false;     // hw_error seen; poll_cm tells rdma_cm and the engine
  bool dreq_deferred = false;        // disconnected while the port was down; DREQ when it is up
  Status error_status;
  VerbsDevice* device() const { return dev_; }
  VerbsCq* send_cq() const { return scq_; }
  VerbsCq* recv_cq() const { return rcq_; }

 private:
  int post_send_legacy(const SendWr* wrs, int n, int* err);
  int flush_sends(const SendWr* wrs, int n, int* err);
  int flush_recvs(const RecvWr* wrs, int n, int* err);

  VerbsDevice* dev_;
  VerbsPd* pd_;
  VerbsCq* scq_;
  VerbsCq* rcq_;
  QpInit init_;
  ibv_qp* qp_;
  ibv_qp_ex* qpx_;
  uint32_t index_;
  uint16_t gen_;
  uint32_t max_inline_;
  QpState state_ = QpState::kInit;
  uint64_t error_since_ = 0;
  VerbsSrq* srq_ = nullptr;
  bool last_wqe_reached_ = false;
  rdma_cm_id* cm_id_ = nullptr;
  std::vector<uint8_t> peer_private_, my_private_;
  ShadowRing sq_, rq_;
  std::vector<ibv_recv_wr> rwr_;  // scratch for post_recv chains
  std::unique_ptr<RegMrBuilder> reg_;  // REG_MR: window bind, or the FastRegProvider's
  VerbsMwBuilder* mw_ = nullptr;       // reg_ when it binds windows (the legacy path needs it)
  WrApiQueue wq_;
  std::vector<VerbsFastMr*> bound_;  // windows bound through this QP
  VerbsQpStats st_;
  friend class VerbsFastMr;
};

// ---------------------------------------------------------------- asynchronous events

// What a device needs of one ibv_async_event, copied before it is acked
// (the QP it names may be destroyed right after the ack).
struct AsyncEvent {
  ibv_context* from = nullptr;
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  uint32_t qp_num = 0;  // QP events
  uint8_t port = 0;     // port events
};

// librdmacm opens one ibv_context per RDMA device for the whole process, and
// a context has one async_fd: every VerbsDevice on rxe0 in a process (a
// client and a server engine, or one per lcore) shares it, and an event read
// by one is gone for the others. So a device subscribes to the contexts it
// uses; whichever device drains a context (under one process-wide lock, the
// control path only) acks each event and copies it into every subscriber's
// inbox, and each device acts on its inbox from its own poll_cm.
void async_subscribe(ibv_context* ctx, VerbsDevice* dev);
void async_unsubscribe(ibv_context* ctx, VerbsDevice* dev);
// Drains ctx (non-blocking) and moves dev's inbox into *out.
// Copying events into another device's inbox also writes that device's
// wake fd (VerbsDevice::wake_fd), so that a host asleep on it learns of them.
void async_drain(ibv_context* ctx, VerbsDevice* dev, std::vector<AsyncEvent>* out);
// Events in dev's inbox from ctx, put there by another device's drain.
bool async_inbox_pending(ibv_context* ctx, VerbsDevice* dev);

struct VerbsDeviceStats {
  Counter async_events, port_err, port_active, device_fatal, qp_fatal, qp_req_err, qp_access_err, comm_est,
      addr_change, last_wqe_reached, other_events,
      // CM messages (REQ, REP, RTU, REJ, DREQ/DREP) not sent because the port
      // was down; of those, the times the port was found down before its
      // PORT_ERR event had come.
      cm_held, port_down_early,
      // Connection requests refused while the CM id reaper was full
      // (verbs_cm_reaper.h), and those of a peer holding its share of it.
      requests_refused_backlog, requests_refused_backlog_peer;
};

// ---------------------------------------------------------------- connections

class VerbsConnRequest final : public ConnRequest {
 public:
  VerbsConnRequest(VerbsDevice* dev, rdma_cm_id* id, std::vector<uint8_t> pdata, uint8_t resp_res,
                   uint8_t init_depth)
      : dev(dev), id(id), responder_resources(resp_res), initiator_depth(init_depth) {
    private_data_ = std::move(pdata);
  }
  void set_peer_host(std::string h) { peer_host_ = std::move(h); }
  // Rejects the request (unless accepted: id is then nullptr), as
  // VerbsDevice::drop_request says; a detached one itself.
  ~VerbsConnRequest() override;
  VerbsDevice* dev;  // nullptr while detached (VerbsDevice::detach)
  rdma_cm_id* id;
  // While detached, the id's own event channel: it is no longer on the
  // channel of a device whose thread polls it.
  rdma_event_channel* transit = nullptr;
  // From the REQ as the CM reports it to this end (ib_cm swaps the two):
  // responder_resources is the peer's initiator depth (RDMA Reads it may
  // have outstanding toward us), initiator_depth the peer's responder
  // resources (Reads we may have outstanding toward it).
  uint8_t responder_resources, initiator_depth;
};

struct VerbsConfig {
  std::string dev;      // device name (optional when addr is given)
  std::string addr;     // IPv4/IPv6 address to listen on / connect to
  uint16_t port = 20049;
  uint32_t fast_reg_depth = 4096;
  bool use_mw = true;   // mw=off: behave as a device without type-2 windows
  // RC local ACK timeout exponent (4.096 us << n) for this device's
  // connections, through RDMA_OPTION_ID_ACK_TIMEOUT; -1: rdma_cm's own.
  int ack_timeout = -1;
  // SENDs and RDMA WRITEs of at most this many bytes go inline (inline_fits);
  // asked of each QP, and less when the device grants less. 0: never.
  // 256 holds a small RPC's call or reply with its RPC-over-RDMA header.
  uint32_t max_inline = 256;
};
// The spec keys of `verbs:` (dev, addr, port, depth, mw, ack_timeout), checked; messages
// name `driver`, so that drivers built on pmd/verbs take the same keys.
Result<VerbsConfig> parse_verbs_config(const DevArgs& a, const char* driver);

class VerbsDevice final : public Device {
 public:
  ~VerbsDevice() override;
  // `fr`: fast registration other than type-2 windows (pmd/mlx5), used if
  // its attach() succeeds; plain verbs otherwise.
  static Result<std::unique_ptr<Device>> open(const VerbsConfig& cfg, std::unique_ptr<FastRegProvider> fr = nullptr);

  const DeviceCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<Pd>> alloc_pd() override;
  Result<std::unique_ptr<Cq>> create_cq(uint32_t capacity) override;
  Result<std::unique_ptr<Qp>> create_qp(const QpInit& init) override;
  Result<std::unique_ptr<Srq>> create_srq(Pd* pd, uint32_t depth, uint32_t max_sge) override;
  Status listen() override;
  Status connect(Qp* qp, std::span<const uint8_t> private_data) override;
  Status accept(ConnRequest* req, Qp* qp, std::span<const uint8_t> private_data) override;
  Status reject(ConnRequest* req, std::span<const uint8_t> private_data) override;
  Result<std::unique_ptr<ConnRequest>> detach(ConnRequest* req) override;
  Result<ConnRequest*> adopt(std::unique_ptr<ConnRequest> req) override;
  Status disconnect(Qp* qp) override;
  bool poll_cm(CmEvent* ev) override;
  bool port_up() const override { return port_up_; }
  StatsView stats() const override;
  // Wait mode (verbs_wait.cc).
  int wait_fd() override;
  Status arm_wait() override;
  bool ack_wait() override;
  // The completion channel every CQ of this device reports to.
  ibv_comp_channel* comp_channel() const { return comp_; }
  // An eventfd only this process writes: set before async_subscribe and
  // closed after async_unsubscribe, so another device's async_drain (another
  // thread, under the subscription lock) may write it.
  int wake_fd() const { return wake_fd_; }
  // Makes wait_fd() readable (events the driver queued itself).
  void self_wake();
  // Armed CQs ask for a timer at `ns` (monotonic_ns) for the flush grace.
  void wake_at(uint64_t ns) {
    if (ns != 0 && (wake_at_ns_ == 0 || ns < wake_at_ns_)) wake_at_ns_ = ns;
  }

  // Where PDs, CQs and QPs are made; cm_ctx() is the context rdma_cm ids
  // resolve to. The same unless a FastRegProvider opened its own.
  ibv_context* ctx() const { return ctx_; }
  ibv_context* cm_ctx() const { return cm_ctx_; }
  FastRegProvider* fast_reg_provider() const { return fr_.get(); }
  uint8_t port_num() const { return port_num_; }
  // rxe reports IBV_WC_WITH_INV as bit 2 (IBV_WC_IP_CSUM_OK); see rxe-vm.md.
  bool inv_flag_quirk() const { return inv_flag_quirk_; }
  // rxe (Linux 6.1) dereferences a NULL QP when it invalidates a type-2
  // window that is free (already invalidated, or never bound) and whose rkey
  // matches: a peer's Send With Invalidate of a stale rkey panics the kernel
  // (measured in the VM). Windows are replaced after every invalidation.
  bool renew_windows() const { return renew_windows_; }
  // Post sends with ibv_post_send instead of the ibv_wr_* builder (rxe).
  bool legacy_post() const { return legacy_post_; }
  // legacy_post's ibv_send_wr list, built and posted within one post_send:
  // one per device (its QPs belong to one thread, rdmadev.h), as long as
  // its deepest send queue. One per QP was 104 KiB of each connection's
  // memory (832 WRs at the default credits), most of what an idle verbs
  // connection cost its server.
  ibv_send_wr* send_scratch() { return send_scratch_.data(); }
  // ibv_next_poll returning ENOENT has already ended the poll (rxe).
  bool next_poll_ends() const { return next_poll_ends_; }
  VerbsQp* qp_at(uint32_t index, uint16_t gen) const {
    if (index >= qps_.size()) return nullptr;
    VerbsQp* q = qps_[index];
    return q != nullptr && q->gen() == gen ? q : nullptr;
  }
  void forget_qp(VerbsQp* qp);
  VerbsSrq* srq_at(uint32_t index, uint16_t gen) const {
    if (index >= srqs_.size()) return nullptr;
    VerbsSrq* s = srqs_[index];
    return s != nullptr && s->gen() == gen ? s : nullptr;
  }
  void forget_srq(VerbsSrq* srq);
  // This device's QP with that number, or nullptr (destroyed, or another
  // device's on a shared context). O(1): SRQ receive completions need it.
  VerbsQp* qp_by_num(uint32_t qp_num) const {
    auto it = by_num_.find(qp_num);
    return it == by_num_.end() ? nullptr : it->second;
  }
  void queue_event(CmEvent ev) {
    events_.push_back(std::move(ev));
    if (armed_) self_wake();
  }
  // A receive completed on an accepted QP before its ESTABLISHED event.
  void established_by_receive(VerbsQp* qp);
  void note_qp_error(VerbsQp* qp);
  // No CM message may leave through a down port (verbs_cm.cc, "CM messages
  // wait for the port"): whether one may now. Also true once the device is
  // gone (nothing is left to wedge).
  bool cm_may_send(const char* what);
  // A DREQ (or the DREP answering one) waits for the port; see send_dreq.
  void send_dreq(VerbsQp* qp);
  // Destroys an id, or, when that would send a CM message (a REJ or a
  // DREQ) and the port is down, parks it until the port is up again (or
  // the device's end). Ids that never sent or received a REQ send nothing,
  // but are parked all the same: the driver does not track the CM's states.
  void destroy_cm_id(rdma_cm_id* id);
  void park_cm_id(rdma_cm_id* id);
  // Forgets `id` (its late events are dropped) and has the reaper destroy
  // it: rdma_destroy_id can block for as long as the CM holds the id
  // (verbs_cm_reaper.h), which the poll loop must not wait for.
  void reap_cm_id(rdma_cm_id* id);
  // Rejects a connection request nobody accepted and destroys its id; with
  // the port down, no REJ: the id is parked (its REJ goes when it is
  // destroyed, once the port is up).
  void drop_request(rdma_cm_id* id, std::span<const uint8_t> raw_pdata = {});
  void flush_deferred_cm();

 private:
  VerbsDevice(const VerbsConfig& cfg, std::unique_ptr<FastRegProvider> fr) : cfg_(cfg), fr_(std::move(fr)) {}
  Status init();
  void attach_fast_reg();
  VerbsQp* own_qp(Qp* qp);
  Status make_sockaddr(uint16_t port, sockaddr_storage* out) const;
  // The device and port rdma_cm would use to reach addr (a peer's address).
  Status resolve_remote(ibv_context** owner, uint8_t* port);
  // `ctx`: the id's context, read before the event was acked (after the ack
  // a reaped id may be gone, verbs_cm_reaper.h).
  void handle_event(const rdma_cm_event& e, void* ctx, std::vector<uint8_t> pdata);
  void handle_qp_errors();
  void fail_connect(VerbsQp* qp, CmEventType type, Status why, std::vector<uint8_t> pdata = {});
  void report_disconnected(VerbsQp* qp, Status why, bool peer_fault = false);
  // Every QP fails with `why`: the device is gone (removal, fatal error).
  void fail_all_qps(const Status& why);
  // verbs_events.cc: read and act on the device's asynchronous events.
  void poll_async();
  void handle_async(const AsyncEvent& e);
  void qp_async_error(VerbsQp* qp, ibv_event_type t);
  // kDisconnected when the port is down or the device gone (connect, listen).
  Status check_port(const char* what);
  // ack_timeout=N: applied to an id before its QP goes to RTS.
  void apply_ack_timeout(rdma_cm_id* id);
  // The completion channel and the wake eventfd, at open (CQs need the
  // channel when they are made); the epoll set and the timer on first use.
  Status init_wait();
  Status enable_wait();

  VerbsConfig cfg_;
  std::unique_ptr<FastRegProvider> fr_;  // closes its context after everything made on it
  DeviceCaps caps_;
  rdma_event_channel* channel_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_context* cm_ctx_ = nullptr;
  uint8_t port_num_ = 1;
  // addr is one of this machine's addresses (listen, or a loopback connect),
  // not only a peer's: connect then binds to it as the source.
  bool addr_is_local_ = true;
  uint8_t max_rd_atom_ = 0, max_init_rd_atom_ = 0;
  bool inv_flag_quirk_ = false;
  bool renew_windows_ = false;
  bool legacy_post_ = false;
  std::vector<ibv_send_wr> send_scratch_;  // legacy_post only (send_scratch())
  bool next_poll_ends_ = false;
  bool removed_ = false;
  bool reaper_full_warned_ = false;  // once per time the reaper's backlog is full
  bool reaper_peer_warned_ = false;  // once per time a peer is refused for its share of the backlog
  bool port_up_ = true;
  VerbsDeviceStats dst_;
  rdma_cm_id* listen_id_ = nullptr;
  std::vector<VerbsQp*> qps_;      // by index; nullptr = free
  std::vector<uint16_t> gens_;     // per index, bumped on reuse
  std::unordered_map<uint32_t, VerbsQp*> by_num_;  // the same QPs by qp_num
  std::vector<VerbsSrq*> srqs_;    // by index; nullptr = free
  std::vector<uint16_t> srq_gens_;
  std::vector<VerbsQp*> errored_;  // QPs whose CQ saw an error, for poll_cm
  std::vector<std::unique_ptr<VerbsConnRequest>> requests_;
  std::vector<rdma_cm_id*> parked_ids_;
  CmReaper reaper_;  // stopped first in the destructor: it needs channel_
  std::deque<CmEvent> events_;

  // Wait mode.
  ibv_comp_channel* comp_ = nullptr;  // non-blocking
  int wake_fd_ = -1;
  int epfd_ = -1;
  int timer_fd_ = -1;
  uint64_t timer_at_ns_ = 0;  // what timer_fd_ is set to; 0: disarmed
  uint64_t wake_at_ns_ = 0;   // deadlines the CQs asked for since the last ack
  bool woken_ = false;        // we wrote wake_fd_ since the last ack
  bool armed_ = false;        // between arm_wait() and ack_wait()
};

}  // namespace tern::verbs
