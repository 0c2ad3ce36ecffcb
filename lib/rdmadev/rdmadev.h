// Tern's verbs-like device interface: what the engine sees of an RDMA device,
// whichever driver (pmd/shm, pmd/verbs, pmd/mlx5) provides it.
//
// Control objects (Device, Pd, Mr, FastMr, Cq, Qp) are created through result
// types and owned by std::unique_ptr; destroy QPs before their CQs and PD, and
// everything before its Device. The datapath is three calls, each one indirect
// call per burst, never per work request:
//   Qp::post_send(chain)  a chain of send-queue WRs, posted together (one doorbell)
//   Qp::post_recv(chain)  a chain of receive WRs
//   Cq::poll(wc, max)     up to max completions
// A device and all objects made from it belong to one thread at a time (the
// engine's lcore): no call takes a lock, and none is safe to make concurrently.
//
// Semantics are the verbs' (IB spec, RC service), because the engine's
// correctness depends on them:
//  - the owner of memory validates every remote access against its MR table;
//    a bad rkey, range or access right is a remote access error for the
//    initiator and nothing is written;
//  - REG_MR and LOCAL_INV take effect in send-queue order; SEND_WITH_INV
//    invalidates its rkey at the receiver before the receive completes;
//  - unsignaled WRs produce no completion, but a completion means every earlier
//    WR on that send queue has completed;
//  - a WR that fails always produces a completion; after it the QP is in error
//    and every outstanding send and receive WR completes with kWrFlushErr, in
//    order; WRs posted to a QP in error are flushed the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../base/result.h"
#include "../base/stats.h"

namespace tern::rdma {

// ---------------------------------------------------------------- capabilities

struct DeviceCaps {
  std::string driver;             // "shm", "verbs", "mlx5"
  std::string name;               // device name, e.g. "shm0", "rxe0"
  uint32_t max_qp_wr = 0;         // send or receive queue depth limit
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_cqe = 0;
  uint32_t max_fast_reg_depth = 0;  // pages one REG_MR can map (0: no fast registration)
  uint32_t fast_reg_page_size = 4096;
  uint64_t max_mr_size = 0;
  uint32_t max_private_data = 0;  // bytes of connection private data
  bool fast_reg = false;            // REG_MR / LOCAL_INV work requests
  bool remote_invalidation = false; // SEND_WITH_INV accepted and honoured
  bool memory_windows = false;      // fast registration is done with type-2 windows
  // False when the device checks a remote access through a fast registration
  // against the long-lived MR under it, not the registered range (rxe's type-2
  // windows): accesses outside the registration but inside that MR succeed.
  bool fast_reg_bounds_enforced = true;
  // False when the device reports some errors with a generic completion status
  // instead of the specific one (rxe: LOC_QP_OP_ERR for a bad lkey, a receive
  // too small or a LOCAL_INV of a stale key; REM_OP_ERR at the sender of a
  // SEND the responder could not place). The WR still fails, later WRs flush
  // and the QP goes to error; only the status value is less telling.
  bool precise_error_status = true;
  // True when a fast registration's addresses start at 0 instead of at
  // reg.addr: the peer reaches byte k of the registered range at offset k
  // (mlx5 indirect mkeys are zero-based). Advertise 0 as its offset then.
  bool fast_reg_zero_based = false;
  // True when a fast registration can be used only through the QP whose
  // REG_MR made it, as type-2 memory windows are (pmd/verbs, pmd/shm): its
  // rkey is useless on every other connection, and a Send With Invalidate or
  // LOCAL_INV from another QP fails. False for MR-style fast registration
  // (FRWR, mlx5 UMR mkeys), which any QP of the PD can reach: a host that
  // must keep one peer away from another's calls then gives each connection
  // a PD of its own (the engine does).
  bool fast_reg_qp_bound = false;
  // True when a Send With Invalidate received on a QP can invalidate only a
  // registration made through that QP. False where the device invalidates
  // any registration of the PD the rkey names (mlx5 mkeys; rxe, which does
  // not check a type-2 window's QP for remote invalidation although it does
  // for READ and WRITE). The engine copes either way: an invalidation of
  // another connection's registration marks it invalid there, so it is
  // never invalidated again, and drops the sender.
  bool remote_inv_qp_bound = false;
  // Shared receive queues (Device::create_srq, QpInit::srq): how many
  // receives one can hold and SGEs per receive; 0 when the device has none.
  uint32_t max_srq_wr = 0;
  uint32_t max_srq_sge = 0;
};

// ---------------------------------------------------------------- memory

enum Access : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
};

// The key byte is the low 8 bits of an rkey; the rest names the MR.
inline constexpr uint32_t rkey_index(uint32_t rkey) { return rkey >> 8; }
inline constexpr uint8_t rkey_key(uint32_t rkey) { return static_cast<uint8_t>(rkey & 0xff); }
inline constexpr uint32_t make_rkey(uint32_t index, uint8_t key) { return (index << 8) | key; }

// A long-lived registration: lkey for local SGEs; rkey when remote access was
// asked, else 0. A registration without remote rights cannot be reached by any
// peer, whatever key it names: the engine registers all its long-lived memory
// that way and lets peers in only through per-call fast registrations.
class Mr {
 public:
  virtual ~Mr() = default;
  uint64_t addr() const { return addr_; }
  uint64_t length() const { return length_; }
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }
  uint32_t access() const { return access_; }

 protected:
  uint64_t addr_ = 0, length_ = 0;
  uint32_t lkey_ = 0, rkey_ = 0, access_ = 0;
};

// A fast-registration MR (FRWR; a type-2 window on verbs; an indirect mkey on
// mlx5). Registered by a kRegMr WR and invalidated by kLocalInv or by the
// peer's SEND_WITH_INV. Each registration must use a fresh rkey from
// bump_rkey(): the key byte changes so that a stale rkey can never reach the
// new registration.
class FastMr {
 public:
  virtual ~FastMr() = default;
  uint32_t max_depth() const { return max_depth_; }
  // The rkey of the current (or last) registration.
  uint32_t rkey() const { return rkey_; }
  // Advances the key byte and returns the rkey the next kRegMr must carry.
  uint32_t bump_rkey() {
    rkey_ = make_rkey(rkey_index(rkey_), static_cast<uint8_t>(rkey_key(rkey_) + 1));
    return rkey_;
  }
  // Its registration ended (invalidated, locally or by the peer) and it goes
  // back for reuse. A driver whose device mishandles the invalidation of an
  // MR that is already free replaces the object here, so that no rkey a peer
  // has seen names it any more (pmd/verbs on rxe, where that panics the
  // kernel). False: the MR is unusable now; destroy it.
  virtual bool retire() { return true; }

 protected:
  uint32_t max_depth_ = 0;
  uint32_t rkey_ = 0;
};

class Pd {
 public:
  virtual ~Pd() = default;
  // Registers [addr, addr+length) for the lifetime of the returned Mr.
  virtual Result<std::unique_ptr<Mr>> reg_mr(void* addr, uint64_t length, uint32_t access) = 0;
  // A fast-registration MR able to map up to max_depth pages per registration.
  virtual Result<std::unique_ptr<FastMr>> alloc_fast_mr(uint32_t max_depth) = 0;
};

// ---------------------------------------------------------------- work requests

struct Sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

enum class WrOpcode : uint8_t {
  kSend,
  kSendWithInv,  // SEND that invalidates `invalidate_rkey` at the receiver (RFC 8797)
  kRdmaWrite,
  kRdmaRead,
  kRegMr,        // fast registration of reg.mr over [reg.addr, reg.addr+reg.length)
  kLocalInv,     // invalidate `invalidate_rkey` (an MR of this PD)
};

enum WrFlags : uint8_t {
  kWrSignaled = 1u << 0,  // produce a completion on success
};

struct SendWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;  // kSend*, kRdmaWrite: source; kRdmaRead: sink
  uint32_t num_sge = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint8_t flags = 0;
  // kRdmaWrite / kRdmaRead: the peer's memory.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  // kSendWithInv / kLocalInv.
  uint32_t invalidate_rkey = 0;
  // kRegMr: map [addr, addr+length) of the long-lived registration `lkey`, at
  // iova = addr (iova = 0 if caps().fast_reg_zero_based), with `access`,
  // under `rkey` (from mr->bump_rkey()).
  struct {
    FastMr* mr = nullptr;
    uint64_t addr = 0;
    uint64_t length = 0;
    uint32_t lkey = 0;
    uint32_t access = 0;
    uint32_t rkey = 0;
  } reg;
};

struct RecvWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;
  uint32_t num_sge = 0;
};

// ---------------------------------------------------------------- completions

enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr,       // receive buffer too small, or a length over the limit
  kLocQpOpErr,      // malformed WR for this QP
  kLocProtErr,      // bad lkey / local range / local access right
  kWrFlushErr,      // the QP was in error when this WR's turn came
  kMwBindErr,       // REG_MR or LOCAL_INV on an MR in the wrong state or key
  kRemInvReqErr,    // the peer found the request invalid (e.g. its buffer too small)
  kRemAccessErr,    // the peer rejected an rkey, range or access right
  kRemOpErr,        // the peer could not execute the request
  kRetryExcErr,     // transport gone: peer vanished
  kGeneralErr,
};
const char* wc_status_name(WcStatus s);

enum class WcOpcode : uint8_t { kSend, kRdmaWrite, kRdmaRead, kRegMr, kLocalInv, kRecv };
const char* wc_opcode_name(WcOpcode op);

enum WcFlags : uint8_t {
  kWcWithInv = 1u << 0,  // a receive whose SEND_WITH_INV invalidated `invalidated_rkey`
};

struct Wc {
  uint64_t wr_id;
  uint32_t byte_len;          // receives: bytes received
  uint32_t invalidated_rkey;  // with kWcWithInv
  uint32_t qp_num;
  WcStatus status;
  WcOpcode opcode;            // valid for kSuccess; flushed WRs carry their own opcode
  uint8_t flags;
  uint8_t reserved;
};
static_assert(sizeof(Wc) == 24, "Wc is copied in bursts; keep it small");

class Cq {
 public:
  virtual ~Cq() = default;
  // Up to max completions into wc; returns how many. Drives the driver's progress.
  virtual int poll(Wc* wc, int max) = 0;
  virtual uint32_t capacity() const = 0;
  // Wait mode (see Device::wait_fd): asks that the device's wait fd become
  // readable when the next completion is added to this CQ, as
  // ibv_req_notify_cq does. Completions already in the CQ, or arriving while
  // it is armed but before the host polls, need not signal: poll once more
  // after arming, and sleep only if that finds nothing. One notification per
  // arm; Device::ack_wait disarms. kUnsupported without wait mode.
  virtual Status arm() { return make_error(Errc::kUnsupported, "this driver has no wait mode"); }
};

// ---------------------------------------------------------------- queue pairs

enum class QpState : uint8_t {
  kInit,        // created; receives may be posted
  kConnecting,  // connect() or accept() in progress
  kRts,         // connected: sends may be posted
  kError,       // everything outstanding is flushed; destroy and make a new QP
};
const char* qp_state_name(QpState s);

class Srq;

struct QpInit {
  Pd* pd = nullptr;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  uint32_t sq_depth = 128;
  uint32_t rq_depth = 128;
  uint32_t max_send_sge = 4;
  uint32_t max_recv_sge = 1;
  // Receives come from this shared receive queue (same device, same PD:
  // create_qp fails with kInvalidArgument otherwise) instead of the QP's own
  // receive queue: rq_depth and max_recv_sge are ignored and Qp::post_recv
  // fails with EINVAL, in every state. See Srq.
  Srq* srq = nullptr;
};

// Faults a driver can inject for tests (pmd/shm implements all of them).
struct Fault {
  enum class Kind : uint8_t {
    kFailAfterWrs,      // the QP goes to error after `count` more send WRs executed
    kDelayCompletions,  // hold send completions back for `delay_ns`
    kDropConnection,    // vanish as a dead peer would: no goodbye
    kCorruptNextDesc,   // the next descriptor this side sends is garbage
  };
  Kind kind;
  uint64_t count = 0;
  uint64_t delay_ns = 0;
};

// A shared receive queue (ibv_srq): receive buffers that every QP created
// with it (QpInit::srq) consumes, so a server holds one pool of receive
// buffers for all its connections instead of a queue per connection.
//  - A message arriving on any of those QPs takes the oldest posted receive
//    (FIFO across the SRQ); its completion goes to that QP's receive CQ with
//    that QP's qp_num and the receive's own wr_id.
//  - With no receive posted, a SEND waits (RNR, as for an empty receive
//    queue: the sender is held back, nothing fails) until one is posted.
//  - A QP going to error flushes none of the SRQ's receives: they stay for
//    the other QPs. A message that was being received on it when it failed
//    (its peer's too-large SEND, say) gives its receive back to the SRQ or
//    completes it in error on its CQ; the next messages of the other QPs
//    take the SRQ's receives from there, oldest first.
//  - Drain: once the flush completion of a send WR posted after the QP
//    entered the error state (a drain marker, as ib_drain_qp posts) has been
//    polled, no receive completion for that QP is added to its receive CQ
//    any more: those of the receives it did take are in that CQ by then
//    (poll it empty to have them all). Drain a QP of an SRQ this way before
//    destroying it: a device may drop the completions a destroyed QP left
//    in a CQ (mlx5 cleans them out), and their receives are then lost to
//    the SRQ for good. Completions it does not drop are delivered with the
//    destroyed QP's qp_num.
//  - Destroy every QP using an SRQ before the SRQ; receives still posted
//    when the SRQ is destroyed are dropped without completions (the caller
//    owns their buffers again).
//  - Wait mode: posting a receive that lets a waiting SEND land wakes an
//    armed host, as a QP's own post_recv does.
class Srq {
 public:
  virtual ~Srq() = default;
  // As Qp::post_recv: how many were accepted from the front; *err EAGAIN
  // when the SRQ is full, EINVAL for a malformed WR.
  virtual int post_recv(const RecvWr* wrs, int n, int* err) = 0;
  // Receives it can hold.
  virtual uint32_t capacity() const = 0;
  // Receives posted and not yet consumed.
  virtual uint32_t posted() const = 0;
  virtual StatsView stats() const { return {}; }
};

// Datapath error codes returned through post_*'s `err` out-parameter.
//   EAGAIN queue full; EINVAL malformed WR; ENOTCONN not connected.
class Qp {
 public:
  virtual ~Qp() = default;
  // Posts wrs[0..n) as one chain. Returns how many were accepted from the front;
  // on a short count *err says why (errno value) and nothing after it was posted.
  virtual int post_send(const SendWr* wrs, int n, int* err) = 0;
  virtual int post_recv(const RecvWr* wrs, int n, int* err) = 0;

  virtual QpState state() const = 0;
  virtual uint32_t qp_num() const = 0;
  virtual const QpInit& init() const = 0;
  // Who is at the other end, for log lines that must name a misbehaving peer:
  // "pid 1234 uid 1000" (shm), "169.254.77.1:20049" (verbs). Empty until the
  // connection is being set up; control path only.
  virtual std::string peer() const { return {}; }
  // The other end as it stays across its reconnects: its process on shm
  // ("pid 1234 uid 1000"), its address on verbs ("169.254.77.1"): what a
  // server's duplicate request cache keys on. Empty until connected.
  virtual std::string peer_host() const { return {}; }
  // Driver counters for this QP (descriptors, bytes, doorbells, rnr waits...).
  virtual StatsView stats() const = 0;
  virtual Status inject_fault(const Fault& f) {
    (void)f;
    return make_error(Errc::kUnsupported, "this driver has no fault injection");
  }
};

// ---------------------------------------------------------------- connections

// An incoming connection waiting for accept() or reject(); owned by the device.
class ConnRequest {
 public:
  virtual ~ConnRequest() = default;
  const std::vector<uint8_t>& private_data() const { return private_data_; }
  // Who asks, as Qp::peer_host() will name it once accepted ("pid 1234 uid
  // 1000" on shm, "169.254.77.1" on verbs): known before accept() so that a
  // server can decide by peer (per-peer connection limits). Empty when the
  // driver cannot tell.
  const std::string& peer_host() const { return peer_host_; }

 protected:
  std::vector<uint8_t> private_data_;
  std::string peer_host_;
};

enum class CmEventType : uint8_t {
  kConnectRequest,  // server: `request` wants a connection
  kEstablished,     // `qp` is connected; private_data is the peer's
  kRejected,        // client: the server refused; private_data is its reason
  kUnreachable,     // client: nobody listens there, or the handshake failed
  kDisconnected,    // `qp` lost its peer (goodbye, death or error); it is in error now
};
const char* cm_event_name(CmEventType t);

struct CmEvent {
  CmEventType type;
  Qp* qp = nullptr;
  ConnRequest* request = nullptr;
  std::vector<uint8_t> private_data;
  Status status;  // why, for kUnreachable / kDisconnected
  // kDisconnected: the driver dropped the connection because the peer broke
  // the rules (a malformed descriptor or control message, an access it had
  // no right to): status says how. Drivers log that at info; the host, which
  // knows the connection's purpose, says it once as a warning.
  bool peer_fault = false;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceCaps& caps() const = 0;

  virtual Result<std::unique_ptr<Pd>> alloc_pd() = 0;
  virtual Result<std::unique_ptr<Cq>> create_cq(uint32_t capacity) = 0;
  virtual Result<std::unique_ptr<Qp>> create_qp(const QpInit& init) = 0;
  // A shared receive queue of `depth` receives, each of up to max_sge SGEs,
  // for QPs of `pd` (caps().max_srq_wr == 0: kUnsupported).
  virtual Result<std::unique_ptr<Srq>> create_srq(Pd* pd, uint32_t depth, uint32_t max_sge) {
    (void)pd, (void)depth, (void)max_sge;
    return make_error(Errc::kUnsupported, "this driver has no shared receive queue");
  }

  // Server side: accept connections at the device's address.
  virtual Status listen() = 0;
  // Client side: start connecting `qp` to the device's address. Completion
  // arrives as kEstablished / kRejected / kUnreachable from poll_cm().
  virtual Status connect(Qp* qp, std::span<const uint8_t> private_data) = 0;
  virtual Status accept(ConnRequest* req, Qp* qp, std::span<const uint8_t> private_data) = 0;
  virtual Status reject(ConnRequest* req, std::span<const uint8_t> private_data) = 0;
  // Handing a connection request to another device of the same driver in
  // this process, opened with the same spec (another engine's, on another
  // thread: engine.h's ListenGroup). detach() takes `req`, which this
  // device reported and has not accepted or rejected, off the device: the
  // returned request belongs to no device and may move to another thread,
  // where destroying it refuses it. adopt() makes a detached request this
  // device's own, as if it had come in here: accept() or reject() it then.
  // kUnsupported when the driver cannot (a request then stays where it was);
  // kInvalidArgument when adopt() is given a request of another driver or
  // device (it is refused).
  virtual Result<std::unique_ptr<ConnRequest>> detach(ConnRequest* req) {
    (void)req;
    return make_error(Errc::kUnsupported, "this driver cannot hand a connection request over");
  }
  virtual Result<ConnRequest*> adopt(std::unique_ptr<ConnRequest> req) {
    (void)req;
    return make_error(Errc::kUnsupported, "this driver cannot take a connection request over");
  }
  // Graceful close: the peer sees kDisconnected; `qp` goes to error and flushes.
  virtual Status disconnect(Qp* qp) = 0;
  // Non-blocking: the next connection event, if any. Call it from the poll
  // loop; it is the control path (it may make system calls). It is also where
  // a driver reads the device's own asynchronous events (port up/down, device
  // and QP fatal errors), so port_up() and stats() change only through it.
  virtual bool poll_cm(CmEvent* ev) = 0;

  // Whether the device's port can carry traffic, as the device last said:
  // false from a port-down event (verbs: IBV_EVENT_PORT_ERR, or a port not
  // ACTIVE at open) until a port-up event, and for good once the device is
  // gone. Connections already up are not torn down by a port going down:
  // their WRs fail (retry exceeded, or whatever error the device gives) and
  // kDisconnected follows; connect() and listen() on a down port fail with
  // Errc::kDisconnected. A driver without a physical port (shm) says true.
  virtual bool port_up() const { return true; }
  // Driver counters of the device itself (asynchronous events, port changes,
  // QPs failed by the device), for tools and tests; empty if it has none.
  virtual StatsView stats() const { return {}; }

  // Wait mode: how a host sleeps instead of busy-polling (docs/driver-interface.md).
  //
  // wait_fd() is one file descriptor, owned by the device, that a host polls
  // or epolls for EPOLLIN (never reads): it becomes readable when something
  // is there for this device's poll calls -- a completion on a CQ armed with
  // Cq::arm(), an event for poll_cm() (connections, the device's own
  // asynchronous events, pmd/shm's sockets), or a deadline of the driver's
  // own (pmd/shm: a hello timeout; pmd/verbs: the flush grace of a QP in
  // error). -1 when the driver has no wait mode. The first call sets the
  // device up for waiting; until then it pays nothing for it.
  //
  // The protocol, one thread, as for everything else on a device:
  //   1. poll the CQs and poll_cm() until they find nothing;
  //   2. arm() every CQ, then arm_wait();
  //   3. poll the CQs once more: completions that came before the arm raise
  //      no notification. If it finds any, ack_wait() and go to 1;
  //   4. sleep on wait_fd() (poll/epoll, with the host's own timeout);
  //   5. ack_wait(); if it returns true, poll_cm(); go to 1.
  // WRs posted after step 2 are covered: their completions wake the fd.
  virtual int wait_fd() { return -1; }
  // Step 2: arms the driver's timers for its own deadlines, and makes the fd
  // readable at once when the driver already holds events for poll_cm().
  virtual Status arm_wait() { return make_error(Errc::kUnsupported, "this driver has no wait mode"); }
  // Step 5 (and after step 3 finds work): consumes what made the fd readable
  // and disarms every CQ and the driver's notifications. True when poll_cm()
  // may have something. Never blocks; harmless when nothing fired.
  virtual bool ack_wait() { return true; }
};

// ---------------------------------------------------------------- opening

// Opens a device by spec, e.g. "shm:path=/run/tern.sock", "verbs:dev=rxe0".
Result<std::unique_ptr<Device>> open_device(std::string_view spec);
// Names of the drivers linked into this program.
std::vector<std::string> driver_names();

}  // namespace tern::rdma
