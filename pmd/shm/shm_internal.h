// pmd/shm private classes. Control path: shm_device.cc (device, connection
// management), shm_ctl.cc (socket messages), shm_mem.cc (PD, MR table),
// shm_segments.cc (memory exported to and mapped from the peer). The queue
// pair, split as a NIC's RC engine is: shm_qp.cc (the object, its state,
// progress), shm_requester.cc (post and publish our WRs), shm_responder.cc
// (execute the peer's descriptors), shm_completer.cc (retire our WRs, flush).
// Queues: shm_cq.cc, shm_srq.cc (receive queues: a QP's own and the shared
// one). Wait mode: shm_wait.cc (the device's epoll set, WAKE messages,
// arming). Memory an idle QP gives back: shm_idle.cc. pcap=: shm_capture.cc.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/intrusive_list.h"
#include "base/stats.h"
#include "mem/segment.h"
#include "rdmadev/rdmadev.h"
#include "rdmadev/roce_pcap.h"
#include "shm/shm_layout.h"
#include "shm/shm_ring.h"

namespace tern::shm {

using namespace tern::rdma;

class ShmDevice;
class ShmQp;
class ShmSrq;

// Where a local SGE points, once its lkey has been checked: our own memory.
struct LocalSpan {
  uint8_t* p;
  uint32_t len;
};

// ---------------------------------------------------------------- memory

// One entry of a PD's MR table. The table is private to the owning process:
// a peer can name entries only through rkeys, which the owner checks here.
struct MrEntry {
  bool in_use = false;
  bool fast = false;    // a FastMr (registered by REG_MR), else a long-lived Mr
  bool valid = false;   // fast MRs: registered and not yet invalidated
  uint8_t key = 0;
  uint32_t access = 0;
  uint32_t max_depth = 0;  // fast MRs
  uint32_t qpn = 0;        // fast MRs: the QP whose REG_MR made the registration
  uint64_t iova = 0;
  uint64_t length = 0;
  uint8_t* host = nullptr;
  uint32_t seg = 0;        // index into ShmPd::segs_
  uint8_t* seg_base = nullptr;
};

class ShmPd final : public Pd {
 public:
  explicit ShmPd(ShmDevice* dev) : dev_(dev) { mrs_.emplace_back(); /* index 0: never valid */ }
  ~ShmPd() override;
  Result<std::unique_ptr<Mr>> reg_mr(void* addr, uint64_t length, uint32_t access) override;
  Result<std::unique_ptr<FastMr>> alloc_fast_mr(uint32_t max_depth) override;

  // Local SGE/lkey check: a valid entry with key, access and range; the host
  // pointer for addr, or nullptr. Inline: every post checks each SGE (a Send
  // and a receive per message, each side), and the call's own frame was ~5
  // of its ~40 instructions.
  const MrEntry* lookup_local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need) const {
    const MrEntry* e = lookup_key(lkey, need);
    return e != nullptr && covers(*e, addr, len) ? e : nullptr;
  }
  // Its two halves: the entry an lkey names if it is valid with the rights
  // `need`; and whether [addr, addr + len) lies inside an entry.
  const MrEntry* lookup_key(uint32_t lkey, uint32_t need) const {
    const uint32_t i = rkey_index(lkey);
    if (i == 0 || i >= mrs_.size()) return nullptr;
    const MrEntry& e = mrs_[i];
    if (!e.in_use || !e.valid || e.key != rkey_key(lkey) || (need & ~e.access) != 0) return nullptr;
    return &e;
  }
  static bool covers(const MrEntry& e, uint64_t addr, uint64_t len) {
    return addr >= e.iova && len <= e.length && addr - e.iova <= e.length - len;
  }
  // lookup_local(lkey, addr, len, 0) for a Send's source, with the key checks
  // of the lkey that last passed them remembered: a host's Sends name one
  // registration, and those checks (index, bounds, in use, valid, key) were
  // ~20 of a post's instructions. The range is checked every time against
  // the entry as it is now. Anything that changes the table -- a
  // registration made or destroyed, a fast MR registered or invalidated
  // (entry()), the table moved by its growth -- forgets the key first
  // (forget_key), so a stale lkey is looked up in full and refused.
  const MrEntry* lookup_source(uint32_t lkey, uint64_t addr, uint64_t len) {
    if (TERN_UNLIKELY(lkey != known_lkey_)) {
      const MrEntry* e = lookup_key(lkey, 0);
      if (e == nullptr) return nullptr;
      known_lkey_ = lkey;
      known_ = e;
    }
    return covers(*known_, addr, len) ? known_ : nullptr;
  }
  // Remote access check by the memory owner, for a request that arrived on
  // QP `qpn`: a fast MR registered through that QP (any QP of the PD when the
  // device is not QP-bound), or a long-lived MR registered with remote rights.
  // A long-lived MR without remote rights is never reachable, whatever key
  // the peer names.
  const MrEntry* lookup_remote(uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need, uint32_t qpn) const;
  // For a change to the entry: the remembered key is forgotten.
  MrEntry* entry(uint32_t index) {
    forget_key();
    return index < mrs_.size() ? &mrs_[index] : nullptr;
  }
  ShmDevice* device() const { return dev_; }
  const mem::Segment& segment(uint32_t i) const { return segs_[i]; }
  uint32_t alloc_index();
  void free_index(uint32_t index);

 private:
  void forget_key() { known_lkey_ = kNoKey; }

  ShmDevice* dev_;
  // lookup_source's: wider than an lkey, so that kNoKey matches none.
  static constexpr uint64_t kNoKey = ~uint64_t{0};
  uint64_t known_lkey_ = kNoKey;
  const MrEntry* known_ = nullptr;
  std::vector<MrEntry> mrs_;
  std::vector<uint32_t> free_;
  std::vector<mem::Segment> segs_;  // segments MRs live in; index = exported id
  friend class ShmMr;
  friend class ShmFastMr;
};

class ShmMr final : public Mr {
 public:
  ShmMr(ShmPd* pd, uint32_t index, uint8_t key, uint64_t addr, uint64_t len, uint32_t access);
  ~ShmMr() override;

 private:
  ShmPd* pd_;
  uint32_t index_;
};

class ShmFastMr final : public FastMr {
 public:
  ShmFastMr(ShmPd* pd, uint32_t index, uint32_t max_depth);
  ~ShmFastMr() override;
  uint32_t index() const { return rkey_index(rkey_); }

 private:
  ShmPd* pd_;
};

// ---------------------------------------------------------------- completion queue

class ShmCq final : public Cq {
 public:
  ShmCq(ShmDevice* dev, uint32_t capacity);
  ~ShmCq() override;
  int poll(Wc* wc, int max) override;
  uint32_t capacity() const override { return cap_; }
  // Wait mode (shm_wait.cc): arms every attached QP's doorbell, so that the
  // peers send a WAKE message when they give us work.
  Status arm() override;
  bool armed() const { return armed_; }
  void disarm() { armed_ = false; }
  // Tests only: no safety net, so that a lost notification shows as a hang
  // rather than a 10 ms delay.
  void disable_safety_net() { net_ticks_ = sweep_ticks_ = UINT64_MAX; }

  bool full() const { return count_ == cap_; }
  void push(const Wc& wc) {
    TERN_ASSERT(!full());
    uint32_t i = head_ + count_;  // < 2 * cap_: a subtraction, not a division, per completion
    if (i >= cap_) i -= cap_;
    ring_[i] = wc;
    ++count_;
  }
  // O(1) both: detach moves at most two QPs (safety_net's order kept).
  void attach(ShmQp* qp);
  void detach(ShmQp* qp);
  const std::vector<ShmQp*>& attached() const { return qps_; }
  // Tests: attached()[0, this) are the QPs the safety net's round has
  // looked at so far.
  size_t net_looked() const { return std::min(net_next_, qps_.size()); }

 private:
  // The safety net (docs/shm-driver.md): every kSafetyNetNs / slices
  // (kNetSlices, or more so that a slice is at most kNetLookMax QPs),
  // poll() looks at the next slice of the attached QPs, round robin, and
  // visits those no poll has visited since their last look. The watched
  // set's sweep keeps its own clock, every kSafetyNetNs / kNetSlices.
  void safety_net();

  ShmDevice* dev_;
  std::vector<Wc> ring_;
  uint32_t cap_;
  uint32_t head_ = 0, count_ = 0;
  std::vector<ShmQp*> qps_;  // attached
  // Each QP's visit count at the safety net's last look (by qps_ index):
  // per CQ, since a QP attached to two CQs is looked at by each.
  std::vector<uint32_t> net_seen_;
  uint32_t polls_ = 0;
  uint64_t net_tick_ = 0, net_ticks_ = 0;
  uint64_t sweep_tick_ = 0, sweep_ticks_ = 0;
  size_t net_next_ = 0;      // the safety net's next look starts at this QP
  bool armed_ = false;       // arm() until the device's ack_wait()
};

// ---------------------------------------------------------------- links (shm_link.cc)

// Our view of one link (ShmLink, shm_layout.h): its mapping, which half we
// read, and our QP at each slot. A server makes one per (client pid, client
// device token) and hands out its slots; a client maps each link a server
// sent it once (known by its inode) and takes the slot each ACCEPT names.
struct ShmPeerLink {
  ShmLink* map = nullptr;
  int fd = -1;        // server: the memfd sent with each ACCEPT; client: -1
  bool server = false;
  int peer_pid = -1;  // server: whose link this is
  uint64_t peer_token = 0;
  uint64_t dev = 0, ino = 0;  // client: which memfd
  std::vector<ShmQp*> slots;  // by slot; nullptr: none
  std::vector<uint32_t> free_slots;  // server: below slots.size(), reusable
  uint32_t used = 0;          // QPs attached
  ShmLinkHalf& in() { return map->half[server ? 0 : 1]; }
  ShmLinkHalf& out() { return map->half[server ? 1 : 0]; }
};

// ---------------------------------------------------------------- receive queues (shm_srq.cc)

// Posted receives, oldest first: a QP's own receive queue, or the one an SRQ
// holds for all its QPs. Lkeys are checked at post time against the PD; a
// receive that fails the check is kept with its status and fails the QP
// whose message lands in it, as verbs reports a bad receive.
class ShmRecvQueue {
 public:
  struct Entry {
    uint64_t wr_id;
    uint64_t capacity;  // bytes its SGEs hold
    WcStatus status;    // kSuccess, or why a message cannot land in it
    uint32_t num_sge;
    LocalSpan* sge;     // num_sge spans, in sges_
  };
  // Storage for `depth` receives of up to max_sge SGEs each.
  void init(uint32_t depth, uint32_t max_sge);
  bool empty() const { return head_ == tail_; }
  uint32_t size() const { return tail_ - head_; }
  uint32_t depth() const { return depth_; }
  // As Qp::post_recv (EAGAIN full, EINVAL malformed), checked against `pd`.
  // Inline (below): posting receives is on every RPC's path.
  inline int post(ShmPd* pd, const RecvWr* wrs, int n, int* err);
  Entry& front() { return entries_[head_slot_]; }
  void pop() {
    ++head_;
    if (++head_slot_ == depth_) head_slot_ = 0;
  }

 private:
  std::vector<Entry> entries_;
  std::vector<LocalSpan> sges_;
  uint32_t depth_ = 0, max_sge_ = 0;
  uint32_t head_ = 0, tail_ = 0;  // free-running
  // Their slots, wrapped by a compare: the depth is the host's choice, not
  // a power of two, and `% depth_` was a division (~25-40 cycles) on every
  // receive posted and every message landed.
  uint32_t head_slot_ = 0, tail_slot_ = 0;
};

inline int ShmRecvQueue::post(ShmPd* pd, const RecvWr* wrs, int n, int* err) {
  *err = 0;
  // The key checks of the last lkey that passed them, kept for the rest of
  // this post: a host's receive buffers come from one registration, so a
  // batch of them (a dozen to 30 per post in the engine) names one lkey,
  // and nothing can deregister or invalidate an MR while this loop runs
  // (the device's thread is the only one that does, and it is here). The
  // range check stays per SGE: one lkey covers many addresses, not all.
  // (A failed lookup is looked up again: known is nullptr then.)
  uint32_t known_lkey = 0;
  const MrEntry* known = nullptr;
  int i = 0;
  for (; i < n; ++i) {
    const RecvWr& wr = wrs[i];
    if (tail_ - head_ >= depth_) {
      *err = EAGAIN;
      break;
    }
    if (wr.num_sge > max_sge_ || (wr.num_sge != 0 && wr.sg_list == nullptr)) {
      *err = EINVAL;
      break;
    }
    Entry& r = entries_[tail_slot_];
    r.wr_id = wr.wr_id;
    r.status = WcStatus::kSuccess;
    r.num_sge = wr.num_sge;
    r.capacity = 0;
    // __attribute__: [[gnu::always_inline]] in this place would apply to the
    // lambda's type, and gcc ignored it.
    auto take = [&](uint32_t k) __attribute__((always_inline)) {
      const Sge& s = wr.sg_list[k];
      if (known == nullptr || s.lkey != known_lkey) {
        known = pd->lookup_key(s.lkey, kAccessLocalWrite);
        known_lkey = s.lkey;
      }
      if (known == nullptr || !ShmPd::covers(*known, s.addr, s.length)) {
        r.status = WcStatus::kLocProtErr;  // reported when a message lands in it, as verbs do
        r.sge[k] = {nullptr, 0};
        return;
      }
      r.sge[k] = {known->host + (s.addr - known->iova), s.length};
      r.capacity += s.length;
    };
    // One buffer per receive (the engine's) without the SGE loop, whose
    // registers the compiler spilled around it.
    if (wr.num_sge == 1)
      take(0);
    else
      for (uint32_t k = 0; k < wr.num_sge; ++k) take(k);
    ++tail_;
    if (++tail_slot_ == depth_) tail_slot_ = 0;
  }
  return i;
}

struct ShmSrqStats {
  // posted: receives accepted; consumed: receives a message landed in (or
  // that failed the QP it reached: a bad lkey); rnr_waits: times a SEND
  // found the SRQ empty and waited; returned: receives a message that broke
  // the rules was about to use, left in place for the other QPs.
  Counter posted, consumed, rnr_waits, returned;
};

// A shared receive queue (rdmadev.h's Srq): one ShmRecvQueue that every QP
// created with it takes its receives from, in post order whichever QP the
// message arrives on. It belongs to the device's thread like everything else
// there, so no locking; the QPs that use it are listed for the device's
// bookkeeping only.
class ShmSrq final : public Srq {
 public:
  ShmSrq(ShmDevice* dev, ShmPd* pd, uint32_t depth, uint32_t max_sge);
  ~ShmSrq() override;
  int post_recv(const RecvWr* wrs, int n, int* err) override;
  uint32_t capacity() const override { return q_.depth(); }
  uint32_t posted() const override { return q_.size(); }
  StatsView stats() const override;

  ShmDevice* device() const { return dev_; }
  ShmPd* pd() const { return pd_; }
  ShmRecvQueue& queue() { return q_; }
  ShmSrqStats& st() { return st_; }
  void attach(ShmQp* qp);
  void detach(ShmQp* qp);  // O(1); the last QP takes its place
  const std::vector<ShmQp*>& attached() const { return qps_; }
  // A SEND found the SRQ empty and waits: the next post must wake an armed
  // host (wait mode), for no peer will ring again for that SEND.
  void note_starved() {
    starved_ = true;
    st_.rnr_waits.add();
  }

 private:
  ShmDevice* dev_;
  ShmPd* pd_;
  ShmRecvQueue q_;
  std::vector<ShmQp*> qps_;
  bool starved_ = false;
  ShmSrqStats st_;
};

// ---------------------------------------------------------------- queue pair

struct ShmQpStats {
  Counter post_calls, doorbells, descs_out, descs_in, bytes_out, bytes_in;
  Counter reg_mr, local_inv, remote_inv, rnr_waits, ring_full, cq_full, flushed;
  Counter protection_errors, corrupt_descs, protocol_errors;
  Counter wakes_sent, wakes_received;  // wait mode: WAKE messages
  Counter sq_grows, idle_trims;        // memory: send queue array doublings, idle give-backs
  Counter visits;                      // progress() passes: what a poll spent on this QP (shm_link.cc)
  Counter watches, bits_skipped;       // watched QPs: times we started watching; posts the peer's watch spared a bit
  Counter cons_loads;                  // visits that loaded the peer's cons (the rest learned it from its SENDs)
  // Visits that executed inbound descriptors, by how many: 1, 2-3, 4-7,
  // 8-15, 16-31, 32 (a full burst). With descs_in and visits: how deep the
  // batches a poll finds are, and how many visits found none. A visit of
  // one (depth 1's every visit) counts nothing itself: [0] is descs_in
  // less the descriptors of the larger batches (multi_descs), worked out
  // when the stats are read, so the commonest visit pays one test.
  mutable Counter exec_batches[6];
  Counter multi_descs;
};

// Memory per connection (shm_idle.cc, docs/shm-driver.md). A send queue
// array is made this small at the first post and doubles on demand; a
// connected QP with nothing outstanding and no activity for kIdleTrimNs
// gives its memory back: the array is freed, and the slot pages of its outbound ring are
// returned to the system (the peer's driver does the same with its own).
// The device looks every kIdleSweepNs, from poll_cm and arm_wait.
inline constexpr uint32_t kSqInitial = 16;
inline constexpr uint64_t kIdleTrimNs = 1'000'000'000;
inline constexpr uint64_t kIdleSweepNs = 250'000'000;
// How often a CQ's poll looks at every QP attached to it, whatever the links
// say (ShmCq::safety_net), and visits those no poll visited since the last
// look: a bound on how long a QP can wait for news its peer never flagged
// (a peer that does not set bits, or news we forgot to queue), not a path
// the protocol relies on. An idle QP waits at most one period, one visited
// since its last look at most two (the look after the visit passes it).
// The looks are spread over the period in kNetSlices slices, so that a poll
// never walks a thousand QPs at once, and a busy QP (visited anyway) costs
// the net one comparison per period, not a visit.
inline constexpr uint64_t kSafetyNetNs = 10'000'000;
inline constexpr uint32_t kNetSlices = 8;
// At most this many looks per slice: a big CQ gets more, shorter slices
// (the period stays kSafetyNetNs). An eighth of a thousand-QP CQ at once
// (128 looks at lines of the peers' memory) was the p99 of every other
// connection's calls (docs/shm-driver.md, "The safety net").
inline constexpr uint32_t kNetLookMax = 8;
// Inbound descriptors a QP executes per visit (execute_inbound): past it
// the next poll comes back, so that one busy peer cannot hold the poll.
// kSharedBurst when the visit has other QPs with work too: a QP whose peer
// keeps a deep queue full (a flood) then adds one message to the poll, not
// its whole queue, ahead of the others' one call. Its messages would only
// wait in the engine anyway (one call per peer per turn while several have
// calls: lib/engine/peer_service.h), after costing the poll their execution
// and the lines its peer wrote from another core. Alone, a QP executes up
// to kExecBurst: one busy connection keeps its batches.
inline constexpr uint32_t kExecBurst = 32;
inline constexpr uint32_t kSharedBurst = 1;
// Watched QPs (shm_link.cc, "Watched QPs"): a device peeks at most this
// many QPs' next inbound slots on every CQ poll, so a poll stays O(active)
// at any number of connections. The safety net's clock (every kSafetyNetNs
// / kNetSlices) sweeps the set: a member that executed nothing since the
// last sweep is quiet, and may make room for a QP that found work; one
// quiet for kWatchQuietSweeps sweeps in a row is let go.
inline constexpr uint32_t kMaxWatched = 4;
inline constexpr uint32_t kWatchQuietSweeps = 8;
// Links a server makes for one client process (shm_link.cc): one per client
// device token, up to this many; past it the process's connections share.
inline constexpr uint32_t kMaxLinksPerPeer = 8;

// A connection event the device has queued for poll_cm. Linked into the
// device's queue (in order) and, when it names a QP, into that QP's list
// too, so that destroying the QP drops its events without walking everyone
// else's (ShmDevice::forget_qp).
struct ShmCmEvent {
  CmEvent ev;
  ShmQp* qp = nullptr;
  ListLink<ShmCmEvent> queued;
  ListLink<ShmCmEvent> of_qp;
};
using ShmCmEventsOfQp = IntrusiveList<ShmCmEvent, &ShmCmEvent::of_qp>;

class ShmQp final : public Qp {
  friend class ShmDevice;  // its ready list (visit_ready, unready), its events, its handshake

 public:
  ShmQp(ShmDevice* dev, ShmPd* pd, const QpInit& init, uint32_t qpn);
  ~ShmQp() override;

  int post_send(const SendWr* wrs, int n, int* err) override;  // shm_requester.cc
  int post_recv(const RecvWr* wrs, int n, int* err) override;  // shm_responder.cc
  QpState state() const override { return state_; }
  uint32_t qp_num() const override { return qpn_; }
  const QpInit& init() const override { return init_; }
  StatsView stats() const override;
  Status inject_fault(const Fault& f) override;

  // Datapath progress, driven by the CQs' poll() (shm_qp.cc): execute what
  // the peer sent, issue our pending WRs, retire completions (and flushes,
  // in error).
  void progress();
  // Work for the next poll of any CQ of our device, which visits only QPs
  // queued so (ShmDevice::run_ready). Called for local work (a post, an
  // error to flush, a completion held back by a full CQ) and for the peer's
  // news (its bit in our link). One list per device, not per CQ: a QP is
  // queued once and visited by whichever CQ polls first, and its
  // completions land in its own CQs whichever that is.
  inline void mark_active();
  // The same, for news that may have come through the peer's `cons` alone
  // (its bit, a WAKE, the safety net's look, a sleeping host's ack wait):
  // that visit loads `cons`, which visits otherwise leave alone while the
  // peer's SENDs carry its acks (complete_sends).
  void look_at_cons() {
    cons_look_ = true;
    mark_active();
  }
  // Visits so far (wrapping): the safety net's looks (ShmCq::safety_net)
  // compare it with what they saw last time.
  uint32_t visit_count() const { return visit_count_; }
  // Our index in `cq`'s, the SRQ's and the device's lists (scq_at_ above).
  uint32_t& at_in(const ShmCq* cq) { return cq == scq_ ? scq_at_ : rcq_at_; }
  uint32_t& srq_at() { return srq_at_; }
  uint32_t& dev_at() { return dev_at_; }
  // Links (shm_link.cc): our slot in the link, and setting our bit in the
  // peer's half.
  void attach_link(ShmPeerLink* link, uint32_t slot);
  void detach_link();
  inline void notify_peer();
  // Watched QPs (shm_link.cc): the seq word of our next inbound slot says
  // it is published (a peek: one load of a line that stays in our cache
  // until the peer writes it); our endpoint's watching word (the caller
  // fences after clearing it); whether the peer watches us, after the
  // StoreLoad fence that orders our seq stores before the load.
  bool inbound_published() const {
    return seq_word(&in_slots_[in_cons_ & slot_mask_]).load(std::memory_order_acquire) ==
           slot_seq(in_cons_, slot_shift_);
  }
  void set_watching(bool on) {
    watched_ = on;
    if (on) st_.watches.add();
    if (my_ep_ != nullptr && !vanished_) my_ep_->watching.store(on ? 1u : 0u, std::memory_order_relaxed);
  }
  inline bool peer_watching();
  // After a descriptor is published: our bit (notify_peer), unless the
  // peer watches the connection, and a WAKE check at our next visit.
  inline void note_published();

  // Control path, called by the device (shm_device.cc). The connection
  // area (shm_qp.cc):
  Status attach_area(int area_fd, bool is_client, uint32_t ring_slots, size_t area_len);
  // The connection's socket (shm_ctl.cc): takes it and learns who is at its
  // other end.
  void set_socket(int fd);
  // The peer's QP number, from its hello or accept message.
  void set_peer_qpn(uint32_t qpn) { peer_qpn_ = qpn; }
  // "pid 1234 uid 1000 qp 7": the process and the QP at the other end (shm_ctl.cc).
  std::string peer() const override;
  std::string peer_host() const override;
  int socket_fd() const { return sock_; }
  void set_state(QpState s) {
    state_ = s;
    mark_active();
  }
  ShmDevice* device() const { return dev_; }
  // Reads queued control messages (shm_ctl.cc); false when the peer is gone
  // or broke the protocol.
  bool drain_ctl();
  // Leaving RTS (shm_qp.cc).
  void enter_error(Status why);
  void disconnect_gracefully();
  void peer_vanished(Status why);

  // Wait mode (shm_wait.cc). arm_doorbell: our wait word asks the peer for a
  // WAKE message (the caller fences after arming all its QPs); disarm: it no
  // longer does. ring_peer: after we stored something the peer may wait for
  // (a descriptor, its consumer index, our state), a WAKE if it is armed.
  void arm_doorbell();
  void disarm();
  void ring_peer();
  // Acks (shm_link.cc, "Acks"): owes_ack: we executed a descriptor the peer
  // flagged and owe it our bit and a WAKE check, which our next post to the
  // QP carries or the device sends by itself a poll later (ShmDevice::
  // age_owed). awaits_ack: one of our flagged descriptors is not retired
  // yet (wait mode looks at such QPs when the host wakes, ShmDevice::
  // ack_wait, in case the peer's ack never comes on its own).
  bool owes_ack() const { return ack_owed_; }
  bool awaits_ack() const {
    return state_ == QpState::kRts && static_cast<int32_t>(out_done_ - flagged_end_) < 0;
  }
  // When the next held-back completion (Fault::kDelayCompletions) is due,
  // in monotonic_ns(); 0 if none.
  uint64_t delay_deadline_ns() const;

  // Control path (shm_idle.cc): called by the device's idle sweep. Notes
  // activity, or gives memory back once the QP has been idle long enough.
  void trim_if_idle(uint64_t now_ns);

 private:
  // One send-queue WR, from post until its completion is retired. Kept
  // small (~300 bytes): a busy QP holds as many as it has outstanding.
  struct SqEntry {
    struct RegFields {
      uint32_t index, rkey, lkey, access;
      uint64_t addr, length;
    };
    uint64_t wr_id;
    uint64_t issue_tick;
    uint32_t byte_len;
    uint32_t ring_index;
    uint32_t cap_psn;    // kRdmaRead under pcap=: the request's PSN, for its response
    uint32_t num_local;  // kRdmaRead: sink SGEs; inline Send: source SGEs (local_sge)
    WcOpcode opcode;
    WcStatus status;     // kSuccess, or the error found at post/issue time
    bool signaled;
    bool remote;         // occupies a ring descriptor
    bool inline_msg;     // a Send whose message goes in its descriptor (kDescInline)
    bool issued;         // executed (local) or published (remote)
    union {
      // Remote ops: what goes into the ring, our private copy. A READ
      // publishes no SGEs (its SGEs are our sink, nobody else's business),
      // nor does an inline Send (its message is copied into the slot): their
      // sge[] holds the local list instead (local_sge), and only the header
      // is copied into the ring (issue()).
      ShmDesc desc;
      RegFields reg;      // kRegMr
      uint32_t inv_rkey;  // kLocalInv
    };
  };
  struct PeerSeg {
    const uint8_t* base = nullptr;
    uint64_t length = 0;
  };

  // A READ's k-th sink SGE, or an inline Send's k-th source, kept in its
  // descriptor's unpublished sge[].
  static void set_local(SqEntry* e, uint32_t k, uint8_t* p, uint32_t len) {
    e->desc.sge[k] = ShmSge{0, len, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))};
  }
  static LocalSpan local_sge(const SqEntry& e, uint32_t k) {
    return {reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(e.desc.sge[k].offset)), e.desc.sge[k].length};
  }

  // Requester (shm_requester.cc).
  WcStatus build_send_entry(const SendWr& wr, SqEntry* e);
  // A single-SGE Send of up to kMaxInline bytes with nothing queued ahead of
  // it, published at once; false (nothing done) when it is not that case.
  bool post_inline_send(const SendWr& wr);
  [[gnu::always_inline]] inline bool inline_send(const SendWr& wr);
  // post_send for anything but one such Send (and for one that failed a
  // check there): the loop over the WRs.
  [[gnu::noinline]] int post_general(const SendWr* wrs, int n, int* err);
  // post_send's commonest post, one Send that may take the inline path.
  [[gnu::noinline]] int post_one_inline(const SendWr& wr, int* err);
  // The send queue array is full but the QP's depth allows more: double it.
  void grow_sq();
  // Publishes what waits in the send queue; true if it published any descriptor.
  bool issue();
  bool issue_local(SqEntry* e);

  // Responder (shm_responder.cc).
  void execute_inbound();
  enum class Exec { kDone, kWait, kFailed };
  // d: the descriptor at ring index `index`, copied out of `slot`.
  Exec execute_one(const ShmDesc& d, const ShmDesc* slot, uint32_t index);
  // The commonest descriptor -- an inline SEND whose message fits the first
  // buffer of the next receive -- landed without execute_one's general
  // copies and branches; false (nothing done) for anything else, which
  // execute_one then copies out and checks in full. *flags: its flags.
  bool land_inline_send(const ShmDesc* slot, uint16_t* flags, uint32_t* acked, uint32_t* length);
  // What a visit executed, into the counters once: n descriptors, of them
  // those land_inline_send landed (landed: their count << 32 | their bytes;
  // the general path counts its own bytes and SRQ receives), and the
  // batch's size (2..kExecBurst: bucket 1..5; one alone is worked out when
  // the stats are read, ShmQpStats::exec_batches).
  void count_executed(uint32_t n, uint64_t landed) {
    st_.descs_in.add(n);
    st_.bytes_in.add(static_cast<uint32_t>(landed));
    if (srq_ != nullptr) srq_->st().consumed.add(landed >> 32);
    static_assert(kExecBurst == 32, "exec_batches' last bucket is a full burst");
    if (n > 1) {
      st_.exec_batches[31u - static_cast<uint32_t>(__builtin_clz(n))].add();
      st_.multi_descs.add(n);
    }
  }
  Exec execute_send(const ShmDesc& d, const uint8_t* const* src, const uint32_t* len, uint32_t n, uint32_t index,
                    bool from_peer_memory);
  void reject_inbound(uint32_t index, WcStatus status, const char* why);

  // Completer (shm_completer.cc). complete_sends: with WRs outstanding
  // (progress() checks), what the peer executed retired; load_cons: the
  // peer's cons, checked, given what we know; acked_outside: a SEND's
  // `acked` outside [out_done_, out_prod_] (out of line: the rare cases).
  void complete_sends();
  // What complete_sends would do nothing about: no news since the last
  // retirement (nothing known executed past out_done_, no cause to load
  // cons, no room wanted), every WR outstanding published (no failure or
  // unissued WR queued) and none local -- so each is a descriptor the peer
  // has not executed, and none waits behind it for a revisit.
  bool waits_on_peer() const {
    return peer_acked_ == out_done_ && !cons_look_ && state_ == QpState::kRts && sq_next_ == sq_tail_ &&
           out_prod_ - out_done_ < cons_room_ && sq_tail_ - sq_head_ < sq_look_ &&
           static_cast<uint32_t>(local_end_ - sq_head_ - 1) >= static_cast<uint32_t>(sq_tail_ - sq_head_) &&
           delay_ticks_ == 0;
  }
  [[gnu::noinline]] uint32_t load_cons(uint32_t known);
  [[gnu::noinline]] void acked_outside(uint32_t said);
  bool copy_read_response(SqEntry& e);
  void flush_recvs();
  bool push_wc(ShmCq* cq, const Wc& wc);

  // Segments (shm_segments.cc): ours sent to the peer before first use, the
  // peer's looked up (and mapped from a "segment" message, once per index).
  bool export_segment(uint32_t seg);
  const PeerSeg* peer_segment(uint32_t seg, uint64_t off, uint64_t len);
  Status map_peer_segment(const ShmMsg& m, int fd);

  // State (shm_qp.cc).
  // reads_fenced (shm_layout.h): ours, set once our QP leaves RTS; the peer's, read.
  void fence_reads();
  bool peer_reads_fenced() const {
    return peer_ep_ != nullptr && peer_ep_->reads_fenced.load(std::memory_order_acquire) != 0;
  }
  // The peer broke the protocol: one log line naming it, then the QP goes to
  // error (the peer sees a disconnect; nothing of ours is touched).
  void protocol_error(Status why);
  void write_own_state(uint32_t st);

  // pcap= (rdmadev/roce_pcap.h, shm_capture.cc): what we published, what we
  // executed, and what a READ of ours brought back.
  RocePcap::Flow& cap_flow();
  void capture_issued(SqEntry& e);
  void capture_executed(const ShmDesc& d, const uint8_t* const* src, const uint32_t* len, uint32_t n,
                        const MrEntry* read_mr);
  void capture_read_response(const SqEntry& e);

  ShmDevice* dev_;
  ShmPd* pd_;
  ShmCq* scq_;
  ShmCq* rcq_;
  QpInit init_;
  uint32_t qpn_;
  QpState state_ = QpState::kInit;
  int sock_ = -1;
  int peer_pid_ = -1, peer_uid_ = -1;
  uint32_t peer_qpn_ = 0;
  bool is_client_ = false;
  bool error_event_sent_ = false;
  bool peer_gone_ = false;     // no more shared-memory writes of ours are read
  bool vanished_ = false;      // kDropConnection: we stop writing shared state
  bool peer_fault_ = false;    // we dropped the peer for breaking the protocol (CmEvent::peer_fault)

  // Wait mode.
  uint32_t wait_gen_ = 0;      // our wait word, less its armed bit
  uint32_t rung_gen_ = 0;      // the peer's armed wait word we last sent a WAKE for
  bool ring_due_ = false;      // stored something the peer may wait for; ring_peer() soon
  // Since ring_peer() last ran: a post's note found the peer watching
  // (skipped_since_ring_), and descriptors published after it left their
  // note to ring_peer() (note_deferred_). See note_published.
  bool skipped_since_ring_ = false;
  bool note_deferred_ = false;
  // Links: our bit in the peer's half, set by notify_peer() (and ring_peer());
  // notify_summary_ is null for a slot of word 0, which has no summary bit.
  ShmPeerLink* link_ = nullptr;
  uint32_t link_slot_ = 0;
  std::atomic<uint64_t>* notify_word_ = nullptr;
  std::atomic<uint64_t>* notify_summary_ = nullptr;
  uint64_t notify_bit_ = 0, notify_sum_bit_ = 0;
  bool notify_due_ = false;    // the peer's consumer index advanced: set our bit soon
  // A locked RMW of ours (notify_peer's fetch_or) came after the last store
  // the peer may wait for (a seq word, its cons, our state): on x86 it was
  // the full barrier ring_peer needs before it loads the peer's wait word.
  bool ordered_ = false;
  // We stored the peer's cons past a descriptor it flagged, and its bit and
  // a WAKE check are still owed (owes_ack above). owed_link_: on one of
  // the device's two owed lists (ShmDevice::owe_ack), owed_list_ says
  // which, so that a QP going away leaves it in O(1) (ShmDevice::unready).
  bool ack_owed_ = false;
  uint8_t owed_list_ = 0;
  ListLink<ShmQp> owed_link_;
  // Ring index past the newest descriptor we published flagged (awaits_ack).
  uint32_t flagged_end_ = 0;
  uint32_t visit_count_ = 0;   // progress() passes (visit_count())
  // On the device's ready list or cut list (ShmDevice::enqueue_ready):
  // singly linked by next_ready_, pushed at the head, so a push stays two
  // stores and a visit a walk. ready_pprev_ points at whatever points at
  // us (the list's head or the QP before us), so a QP going away leaves
  // the list in O(1) (ShmDevice::unready); non-null means queued.
  ShmQp* next_ready_ = nullptr;
  ShmQp** ready_pprev_ = nullptr;
  // In the device's watched set (ShmDevice::watch), at watched_[watch_slot_];
  // in_cons_ at the last sweep, and how many sweeps in a row found it there.
  bool watched_ = false;
  uint8_t watch_slot_ = 0;
  uint8_t watch_quiet_ = 0;
  uint32_t watch_seen_ = 0;
  // Send-queue index past the last local WR issued (REG_MR, LOCAL_INV): one
  // behind a remote WR the peer has not executed completes only when we see
  // its consumer index move, which it tells us only for descriptors flagged
  // kDescAckWanted (complete_sends).
  uint32_t local_end_ = 0;
  bool revisit_ = false;       // this progress() stopped with work left that no peer will tell us of
  bool rq_starved_ = false;    // a SEND found our own receive queue empty and waits (post_recv)

  // Connection area (shared).
  uint8_t* area_ = nullptr;
  size_t area_len_ = 0;
  ShmEndpoint* my_ep_ = nullptr;
  ShmEndpoint* peer_ep_ = nullptr;
  ShmRing* out_ = nullptr;
  ShmRing* in_ = nullptr;
  ShmDesc* out_slots_ = nullptr;
  ShmDesc* in_slots_ = nullptr;
  uint32_t slots_ = 0, slot_mask_ = 0, slot_shift_ = 0;

  // Outbound ring, local copies.
  uint32_t out_prod_ = 0;   // next index we publish
  uint32_t out_done_ = 0;   // below: retired by complete_sends(); slots reusable
  uint32_t final_cons_ = 0; // peer's cons frozen when we entered error
  // Acks (complete_sends): the newest consumer index of our ring the peer
  // told us of, in [out_done_, out_prod_], from `cons` or a SEND's `acked`
  // (execute_inbound), and whether news came that only `cons` may carry
  // (look_at_cons).
  uint32_t peer_acked_ = 0;
  bool cons_look_ = false;
  // complete_sends loads cons once this many descriptors (a quarter of the
  // ring) or send-queue entries (three quarters of the array) are not
  // known retirable.
  uint32_t cons_room_ = 0, sq_look_ = 0;
  bool peer_err_valid_ = false;
  uint32_t peer_err_index_ = 0;
  WcStatus peer_err_status_ = WcStatus::kSuccess;
  // Inbound ring.
  uint32_t in_cons_ = 0;

  // Send queue: [sq_head_, sq_next_) issued, [sq_next_, sq_tail_) waiting.
  // Entry i is sq_[i & sq_mask_]. The array is made at kSqInitial entries
  // by the first post and doubles when a post finds it full (grow_sq), up to
  // sq_depth rounded up to a power of two; an idle QP frees it (trim_if_idle).
  std::unique_ptr<SqEntry[]> sq_;
  uint32_t sq_cap_ = 0, sq_mask_ = 0, sq_head_ = 0, sq_next_ = 0, sq_tail_ = 0;
  // min(sq_cap_, sq_depth): post_send's one comparison per WR; at it the
  // queue is either full (EAGAIN) or the array must grow.
  uint32_t sq_limit_ = 0;
  // Receives: our own queue (rq_), or the SRQ's (QpInit::srq; rq_ stays
  // empty then). recv_ is the one inbound SENDs take from.
  ShmRecvQueue rq_;
  ShmSrq* srq_ = nullptr;
  ShmRecvQueue* recv_ = nullptr;
  // Our index in each vector that lists us (each CQ's, the SRQ's, the
  // device's): a destroy takes us out of each in O(1), the last entry moving
  // into our place, where searching cost by how many QPs share it (at 10,000
  // connections, churning, each destroy walked them all).
  uint32_t scq_at_ = 0, rcq_at_ = 0, srq_at_ = 0, dev_at_ = 0;
  // Control path, for the same reason: on the device's list of QPs that
  // connect() started (read_connecting walks only those), and our events
  // still queued for poll_cm.
  ListLink<ShmQp> connecting_link_;
  ShmCmEventsOfQp cm_events_;

  std::vector<PeerSeg> peer_segs_;
  std::vector<uint8_t> exported_;  // per PD segment: sent to the peer

  // Idle trimming (shm_idle.cc): what the last sweep saw, and since when.
  uint32_t seen_tail_ = 0, seen_prod_ = 0, seen_cons_ = 0;
  uint64_t active_ns_ = 0;
  bool trimmed_ = true;  // nothing to give back until something happens

  // Faults.
  int64_t fail_after_ = -1;
  uint64_t delay_ticks_ = 0;
  bool corrupt_next_ = false;
  // Every WR takes post_send's general path: a fault was injected (for
  // good: the general path does what the inline one does, slower), the
  // device captures, or the QP allows no SGE. One test per post instead
  // of five.
  bool general_only_ = false;

  RocePcap* pcap_ = nullptr;  // the device's capture, if pcap= was given
  RocePcap::Flow cap_;

  ShmQpStats st_;
};

// ---------------------------------------------------------------- connections

class ShmConnRequest final : public ConnRequest {
 public:
  ShmConnRequest(int sock, int area_fd, uint32_t ring_slots, uint64_t area_size, uint32_t peer_qpn,
                 std::vector<uint8_t> pdata, std::string peer, uint64_t peer_token = 0)
      : sock(sock), area_fd(area_fd), ring_slots(ring_slots), area_size(area_size), peer_qpn(peer_qpn),
        peer_token(peer_token) {
    private_data_ = std::move(pdata);
    peer_host_ = std::move(peer);
  }
  ~ShmConnRequest() override;
  int sock;
  int area_fd;
  uint32_t ring_slots;
  uint64_t area_size;
  uint32_t peer_qpn;
  uint64_t peer_token;  // the client device's (hello): links are per (pid, token)
};

// Receives one shared receive queue holds at most (caps().max_srq_wr): a
// server's one pool for all its connections, so deeper than a QP's queue.
inline constexpr uint32_t kMaxSrqWr = 1u << 16;

struct ShmDeviceConfig {
  std::string path;
  uint32_t ring_slots = 512;
  uint32_t fast_reg_depth = 256;
  uint32_t max_qp_wr = 4096;
  uint32_t max_cqe = 65536;
  // Fast registrations usable only through the QP that made them (type-2
  // window semantics). qp_bound=0 gives MR semantics (any QP of the PD), to
  // test what the engine does for devices like mlx5.
  bool qp_bound = true;
  // fast_reg=0: a device without fast registration (no REG_MR, LOCAL_INV or
  // Send With Invalidate), like verbs on a device without memory windows,
  // so that what the engine does there runs in CI too.
  bool fast_reg = true;
  // inv_qp_check=0: a Send With Invalidate may invalidate a registration of
  // any QP of the PD, as rxe's does, so the engine's answer to that runs in
  // CI too (READ and WRITE stay QP-bound).
  bool inv_qp_check = true;
  // pcap=FILE: every SEND, RDMA WRITE and RDMA READ of this device's QPs,
  // both directions, as RoCEv2 frames (rdmadev/roce_pcap.h).
  std::string pcap;
  // A socket that has not sent its hello within this long is dropped, and
  // at most max_pending sockets wait for theirs: a peer that connects and
  // says nothing must not hold our descriptors.
  uint32_t hello_timeout_ms = 1000;
  uint32_t max_pending = 64;
  // Who may connect (mode=, group=): the listening socket's permission bits
  // and group, applied before listen(); -1 leaves the umask's mode and our
  // group. Connecting to a socket needs write permission on it.
  int socket_mode = -1;
  int64_t socket_gid = -1;
  std::string group;  // as given, for messages
};

class ShmDevice final : public Device {
 public:
  explicit ShmDevice(const ShmDeviceConfig& cfg);
  ~ShmDevice() override;
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
  // SRQs alive, for the destructor's check (shm_srq.cc keeps it).
  void srq_made() { ++srqs_; }
  void srq_gone() { --srqs_; }
  // Wait mode (shm_wait.cc).
  int wait_fd() override;
  Status arm_wait() override;
  bool ack_wait() override;

  void queue_event(CmEvent ev);
  void forget_qp(ShmQp* qp);
  // Tests: QPs and queued events the connection-management paths (connect,
  // accept, disconnect, poll_cm's read of handshakes, a destroy) have looked
  // at so far; what follows the work, not the QPs the device holds.
  uint64_t cm_looked_at() const { return cm_looked_; }
  // The QP whose connection socket is fd (or nullptr): an epoll event to
  // its QP in O(1).
  void own_fd(int fd, ShmQp* qp) {
    if (fd < 0) return;
    if (by_fd_.size() <= static_cast<size_t>(fd)) by_fd_.resize(static_cast<size_t>(fd) + 1, nullptr);
    by_fd_[static_cast<size_t>(fd)] = qp;
  }
  // Links (shm_link.cc). collect_activity: every link's half we read,
  // exchanged; the QPs flagged there are queued on their CQs. The common
  // case -- no link has news -- is one load per link, inline.
  void collect_activity() {
    for (const LinkIn& l : link_in_)
      if (TERN_UNLIKELY((l.half->summary.load(std::memory_order_relaxed) |
                         l.half->words[0].load(std::memory_order_relaxed)) != 0)) {
        collect_links();
        return;
      }
  }
  void collect_links();
  // A CQ's poll: the QPs with news in our links, and those with local work,
  // progressed (shm_link.cc). Inline: with nothing to do, one load per link
  // and one test.
  // `cq` is the CQ being polled: a QP cut short waits for that CQ's next
  // poll (cut_head_).
  void run_ready(const void* cq) {
    if (TERN_UNLIKELY(!owed_[0].empty() || !owed_[1].empty())) age_owed();
    if (TERN_UNLIKELY(cut_head_ != nullptr) && (cq == cut_cq_ || ++cut_polls_ > 2)) take_cut();
    collect_activity();
    if (nwatched_ != 0) peek_watched();
    if (ready_head_ != nullptr) visit_ready(cq);
  }
  // Watched QPs (shm_link.cc, "Watched QPs"). watch: a QP that just
  // executed inbound descriptors joins the set if it has room (or a stale
  // member makes room); peek_watched: each member's next slot, queued if
  // published; unwatch: a member leaves (its word cleared, fenced, and its
  // slot peeked once more); drop_watch: one that leaves with a visit of its
  // own still to come (an error, a wait for a receive) or going away.
  struct Watched {
    const uint32_t* seq;
    uint32_t want;
    ShmQp* qp;
  };
  void watch(ShmQp* qp) {
    if (nwatched_ < kMaxWatched) {
      watch_at(nwatched_++, qp);
      return;
    }
    watch_full(qp);
  }
  void watch_full(ShmQp* qp);
  // Inline, and no more than a load and a comparison per member while
  // nothing comes: a CQ poll makes it, several per RPC on each side.
  void peek_watched() {
    for (const Watched *w = watched_, *end = w + nwatched_; w != end; ++w)
      if (TERN_UNLIKELY(std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(w->seq)).load(std::memory_order_acquire) ==
                        w->want) &&
          w->qp->ready_pprev_ == nullptr)
        enqueue_ready(w->qp);
  }
  // A member's next inbound slot, after its consumer index moved.
  void watch_next(ShmQp* qp) {
    Watched& w = watched_[qp->watch_slot_];
    w.seq = &qp->in_slots_[qp->in_cons_ & qp->slot_mask_].seq;
    w.want = slot_seq(qp->in_cons_, qp->slot_shift_);
  }
  void watch_at(uint32_t i, ShmQp* qp) {
    watched_[i].qp = qp;
    qp->watch_slot_ = static_cast<uint8_t>(i);
    qp->watch_quiet_ = 0;
    qp->watch_seen_ = qp->in_cons_;
    watch_next(qp);
    qp->set_watching(true);
  }
  // From the safety net's clock (ShmCq::safety_net): quiet members counted,
  // long-quiet ones let go.
  void sweep_watched();
  void remove_watched(uint32_t i) {
    watched_[i] = watched_[--nwatched_];
    watched_[i].qp->watch_slot_ = static_cast<uint8_t>(i);
  }
  void unwatch(uint32_t i);
  void drop_watch(ShmQp* qp);
  // Every member unwatched (tests: a consumer that keeps letting go).
  void unwatch_all() {
    while (nwatched_ != 0) unwatch(nwatched_ - 1);
  }
  uint32_t watched_qps() const { return nwatched_; }
  // Acks owed to peers (shm_link.cc, "Acks"): a QP that owes one is listed
  // once; each run_ready sends what the list made two polls ago still owes
  // and ages the newer list; arm_wait sends them all.
  void owe_ack(ShmQp* qp) {
    if (qp->owed_link_.linked) return;
    qp->owed_list_ = owed_new_;
    owed_[owed_new_].push_front(qp);
  }
  void age_owed();
  void send_all_owed();
  void visit_ready(const void* cq);
  // The QPs cut short, back on the ready list (first).
  void take_cut();
  // Inbound descriptors one QP executes in this visit (execute_inbound);
  // past it the next poll comes back for the rest (visit_ready says which).
  uint32_t exec_burst() const { return exec_burst_; }
  void enqueue_ready(ShmQp* qp) {
    ShmQp** head = TERN_UNLIKELY(cutting_) ? &cut_head_ : &ready_head_;
    link_ready(head, *head, qp);
    *head = qp;
    // Armed: the host may sleep before its next poll, and no peer will flag
    // this QP for it (local work, work left by a visit): wake it ourselves.
    if (TERN_UNLIKELY(armed_)) self_wake();
  }
  // Links `qp` before `head`, the first QP of the list whose head is
  // *head_slot; the caller stores qp there (collect_links keeps the head in
  // a register until its end).
  static void link_ready(ShmQp** head_slot, ShmQp* head, ShmQp* qp) {
    qp->next_ready_ = head;
    qp->ready_pprev_ = head_slot;
    if (head != nullptr) head->ready_pprev_ = &qp->next_ready_;
  }
  // A QP going away leaves the ready list and the owed lists.
  void unready(ShmQp* qp);
  // How many QPs the ready and cut lists hold (tests: a QP gone must not
  // be one).
  size_t ready_qps() const {
    size_t n = 0;
    for (const ShmQp* head : {ready_head_, cut_head_})
      for (const ShmQp* qp = head; qp != nullptr; qp = qp->next_ready_) ++n;
    return n;
  }
  // How many QPs the owed lists hold (tests: a QP gone must not be one).
  size_t owed_qps() const { return owed_[0].size() + owed_[1].size(); }
  // The QPs alive (tests: after any destroys, exactly those not destroyed).
  const std::vector<ShmQp*>& all_qps() const { return qps_; }
  // Server: a link of the peer at the other end of `sock` (made if none has
  // room) and a free slot in it, or nullptr.
  ShmPeerLink* link_for_accept(int sock, uint64_t peer_token, uint32_t* slot);
  // Client: the link an ACCEPT brought (mapped once per memfd), or an error.
  Result<ShmPeerLink*> link_for_connect(int fd);
  // No QP uses it any more.
  void drop_link(ShmPeerLink* link);
  // Every kIdleSweepNs: lets idle QPs give memory back (shm_idle.cc).
  void sweep_idle();
  const ShmDeviceConfig& config() const { return cfg_; }
  RocePcap* pcap() const { return pcap_.get(); }
  void set_pcap(std::unique_ptr<RocePcap> p) { pcap_ = std::move(p); }
  // Wait mode: between arm_wait() and ack_wait().
  bool armed() const { return armed_; }
  // Makes wait_fd() readable, for work only this process knows of (a WR
  // posted to an armed CQ, an event queued by the driver itself).
  void self_wake();
  // A socket joins / leaves the wait set (no-op until wait mode is on).
  void watch_fd(int fd);
  void unwatch_fd(int fd);

 private:
  void accept_new();
  void read_hellos();
  void read_connecting();
  void watch_established();
  ShmQp* qp_of_fd(int fd) const {
    return fd >= 0 && static_cast<size_t>(fd) < by_fd_.size() ? by_fd_[static_cast<size_t>(fd)] : nullptr;
  }
  ShmQp* own_qp(Qp* qp);
  Status enable_wait();

  ShmDeviceConfig cfg_;
  DeviceCaps caps_;
  uint32_t exec_burst_ = kExecBurst;
  bool shared_last_ = false;  // the last visit_ready had several QPs
  int listen_fd_ = -1;
  // The epoll set reported the listener readable (watch_established): only
  // then does accept_new() call accept4, which costs ~3 us finding nothing.
  bool listen_ready_ = true;
  uint32_t next_qpn_ = 1;
  uint32_t srqs_ = 0;
  uint64_t next_sweep_ns_ = 0;
  uint64_t token_ = 0;  // ours, in our hellos: a server's links are per (pid, token)
  std::vector<std::unique_ptr<ShmPeerLink>> links_;
  // Each link's half we read, and the link (for its slot table), side by
  // side for collect_activity's loop and collect_links.
  struct LinkIn {
    ShmLinkHalf* half;
    ShmPeerLink* link;
  };
  std::vector<LinkIn> link_in_;
  ShmQp* ready_head_ = nullptr;  // QPs with work, linked by ShmQp::next_ready_
  // The watched set, [0, nwatched_): each member's next inbound seq word
  // and the value that means published, kept up to date by its visits
  // (watch_next), so that a peek touches nothing else.
  Watched watched_[kMaxWatched] = {};
  uint32_t nwatched_ = 0;
  // QPs that a visit among several left with work (a burst cut short, by
  // ShmQp::next_ready_ too, still queued): they sit out the host's other
  // CQ polls until the CQ whose poll cut them is polled again -- a host
  // polls its send CQ and then its receive CQ per pass, and a flooding QP
  // visited in both executed two messages (and the lines its peer wrote on
  // another core) in a pass another connection's one message waited for.
  // A host that stops polling that CQ gets them at its third poll.
  ShmQp* cut_head_ = nullptr;
  const void* cut_cq_ = nullptr;  // compared only, never used
  uint32_t cut_polls_ = 0;
  bool cutting_ = false;  // in a visit among several: what is queued is cut
  // QPs that owe their peer an ack (owe_ack), linked by ShmQp::owed_link_:
  // owed_[owed_new_] those listed since the last run_ready, the other those
  // listed during the one before. The lists stay where they are (their
  // roles swap), so a QP's owed_list_ names its list for as long as it is
  // on it.
  using OwedList = IntrusiveList<ShmQp, &ShmQp::owed_link_>;
  OwedList owed_[2];
  uint8_t owed_new_ = 0;
  std::vector<ShmQp*> by_fd_;    // own_fd()
  std::vector<ShmQp*> qps_;
  struct Pending {
    int fd;
    uint64_t deadline_ns;  // dropped if no hello by then
  };
  std::vector<Pending> handshaking_;  // accepted sockets waiting for their hello
  // Sockets refused because max_pending waited for their hello: said once
  // (a warning) until one can be taken again, then counted in one line, so
  // a peer that floods connect() cannot flood the log too.
  uint64_t refused_pending_ = 0;
  std::vector<std::unique_ptr<ShmConnRequest>> requests_;
  // Queued for poll_cm, oldest first (ShmCmEvent; we own them).
  IntrusiveList<ShmCmEvent, &ShmCmEvent::queued> events_;
  // QPs whose connect() went out and whose answer read_connecting has not
  // taken yet (one that left kConnecting otherwise is dropped there).
  IntrusiveList<ShmQp, &ShmQp::connecting_link_> connecting_;
  uint64_t cm_looked_ = 0;  // cm_looked_at()
  std::unique_ptr<RocePcap> pcap_;

  // Wait mode: an epoll set of the listening socket, the sockets of
  // handshakes and connections, our own eventfd and a timerfd. Made by the
  // first wait_fd(); -1 before.
  int epfd_ = -1;
  int wake_fd_ = -1;          // eventfd only this process writes (self_wake)
  int timer_fd_ = -1;         // the next hello timeout or delayed completion
  uint64_t timer_at_ns_ = 0;  // what timer_fd_ is set to; 0: disarmed
  bool woken_ = false;        // wake_fd_ written since the last ack_wait
  bool armed_ = false;
};

// Inline (shm_link.cc says what the bits mean): 2-3 calls per RPC, from
// post_send and ring_peer, where the call's frame was most of its cost.
inline void ShmQp::notify_peer() {
  notify_due_ = false;
  if (notify_word_ == nullptr || vanished_) return;
  notify_word_->fetch_or(notify_bit_, std::memory_order_release);
  if (notify_summary_ != nullptr) notify_summary_->fetch_or(notify_sum_bit_, std::memory_order_release);
  ordered_ = true;
}

inline bool ShmQp::peer_watching() {
  // Not watching: we set the bit, whose locked RMW orders everything, and
  // a stale 0 costs only a bit the peer did not need. No fence for that.
  if (peer_ep_ == nullptr || peer_ep_->watching.load(std::memory_order_relaxed) == 0) return false;
  // Skipping the bit needs the word read after our seq stores (Dekker's
  // pair with ShmDevice::unwatch). On x86 a locked RMW of a line only we
  // touch (the stack's) is the full barrier, cheaper than mfence; either
  // waits for our stores, the published slot's line included, to drain.
#if defined(__x86_64__)
  asm volatile("lock orl $0, -4(%%rsp)" ::: "memory", "cc");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
  // Also the barrier ring_peer needs before it loads the wait word.
  ordered_ = true;
  return peer_ep_->watching.load(std::memory_order_relaxed) != 0;
}

inline void ShmQp::note_published() {
  // A burst of posts between two visits (a server's pass answering 32
  // calls, a client's 32 calls) needs one note, not one each: once a note
  // since the last ring_peer() found the peer watching, the peer's peek
  // finds what we publish after it, and the rest of the Dekker pair (the
  // fence, the second look at `watching`, our bit if it let go) is
  // ring_peer()'s at the visit ring_due_ brings -- the next CQ poll, which
  // every host makes before it sleeps. A plain load of the word first (the
  // line stays shared: the peer writes it only when it starts or stops
  // watching): a peer seen to have let go gets our bit now, as before. What
  // is left to the visit is a message published in the instant the peer
  // lets go (our load read the word set before its store, its last peek
  // ran before our seq store drained): found at our next CQ poll instead
  // of at once. What it saves: a locked instruction per message, which
  // waits for the published slot's line to leave our store buffer.
  if (ring_due_ && skipped_since_ring_ && peer_ep_ != nullptr &&
      peer_ep_->watching.load(std::memory_order_relaxed) != 0) {
    note_deferred_ = true;
    return;
  }
  ring_due_ = true;
  // An ack we owed (shm_link.cc, "Acks") rides on this: set after the cons
  // store it reports, the bit tells the peer both; a watching peer visits
  // the QP for the descriptor, whose `acked` word carries our cons.
  ack_owed_ = false;
  if (notify_word_ != nullptr && !vanished_ && peer_watching()) {
    st_.bits_skipped.add();
    skipped_since_ring_ = true;
    return;
  }
  notify_due_ = true;
  notify_peer();
}

inline void ShmQp::mark_active() {
  if (ready_pprev_ != nullptr) return;
  dev_->enqueue_ready(this);
}

// ---------------------------------------------------------------- control messages (shm_ctl.cc)

ShmMsg make_msg(ShmMsgType type);
// Sends one message with an optional fd. Returns 0 or an errno value.
int send_msg(int sock, const ShmMsg& m, int fd = -1);
// Non-blocking receive of one message (and fd, or -1). Returns 1 on a message,
// 0 when none is queued, -errno on error, -ECONNRESET when the peer is gone.
int recv_msg(int sock, ShmMsg* m, int* fd);
// A message read off the socket is peer input: magic, version, type and sizes.
bool msg_valid(const ShmMsg& m, ssize_t got);

}  // namespace tern::shm
