// A peer that speaks RPC-over-RDMA by hand, through the driver interface
// (lib/rdmadev) and no engine: it puts any bytes on the wire -- headers no
// codec would write, replies no server would send -- and shows exactly what
// came back (a message, the end of the connection, or nothing by a
// deadline). Both of Tern's hand-made peers are this one class: the
// functional tests' misbehaving client or server (tests/functional), and
// rpcrdma-torture's requester and responder (apps/torture).
//
// Not part of libtern and not installed: a static library of its own
// (tern_rawpeer_dep), because the installed torture tool and the tests
// (which may be built without the apps) both need it.
//
// Everything it does is driven by its caller: its waits run a pump (a
// callback: the engines under test in the same thread) so that both sides
// progress, and every wait has a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace tern::rawpeer {

// ---------------------------------------------------------------- wire helpers

void put32(std::vector<uint8_t>& v, uint32_t x);
// An RPC-over-RDMA message: h encoded, then body.
std::vector<uint8_t> rdma_msg(const rpcrdma::Header& h, std::span<const uint8_t> body = {});
// An ONC RPC call (AUTH_NONE) with args.
std::vector<uint8_t> rpc_call(uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc,
                              std::span<const uint8_t> args = {});
// An ONC RPC reply, MSG_ACCEPTED / SUCCESS, with results.
std::vector<uint8_t> rpc_success(uint32_t xid, std::span<const uint8_t> results = {});
// A header with no chunks.
rpcrdma::Header plain_header(uint32_t xid, uint32_t credit, rpcrdma::Proc proc = rpcrdma::Proc::kMsg);

// Calls pump() until pred() holds (true) or `ms` pass (false).
bool poll_until(const std::function<void()>& pump, const std::function<bool()>& pred, int ms);

// ---------------------------------------------------------------- the peer

struct Received {
  std::vector<uint8_t> bytes;
  bool with_inv = false;
  uint32_t inv_rkey = 0;
};

// The sizes of a peer's queues and buffers, and of the memory its device
// and siblings share.
struct PeerShape {
  uint32_t recvs = 32;
  uint32_t recv_buf = 16 * 1024;
  // One send buffer per send-queue slot: a buffer is reused only after the
  // WR that used it left the queue (a post succeeds only if there is room),
  // so a flood of unsignaled sends never overwrites a message not yet sent.
  uint32_t sq_depth = 256;
  uint32_t tx_slot = 16 * 1024;
  // The arena of open() (shared by siblings). Not larger than a use needs:
  // it is faulted in and zeroed by the kernel when created, and the tests
  // make a raw peer per case.
  size_t arena = 16u << 20;
};

class RawPeer {
 public:
  using Pump = std::function<void()>;
  static constexpr uint32_t kRecvBuf = PeerShape{}.recv_buf;
  static constexpr uint32_t kRecvs = PeerShape{}.recvs;

  explicit RawPeer(Pump pump = [] {}) : pump_(std::move(pump)) {}
  ~RawPeer();
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  // Opens the device behind `spec`, its PD, CQs and a QP with receives posted.
  Status open(std::string_view spec, uint32_t recvs = kRecvs);
  Status open(std::string_view spec, const PeerShape& shape);
  // Another QP on the same device, PD and memory (a listening raw server's
  // second connection: accept_one() on it takes the next request; a
  // requester's next connection). Its buffers are reused by the next
  // sibling of the same shape once it is destroyed. It may outlive this
  // object.
  Result<std::unique_ptr<RawPeer>> sibling(uint32_t recvs = kRecvs);
  Result<std::unique_ptr<RawPeer>> sibling(const PeerShape& shape);
  // Client: connects with RFC 8797 private data and waits until established
  // (pumping). kRemoteError when refused, kTimedOut when unanswered.
  Status connect(const rpcrdma::CmPrivateData& pd, int ms = 5000);
  // The same with raw private data bytes (none when empty).
  Status connect_raw(std::span<const uint8_t> pdata, int ms = 5000);
  // Server: listens, waits for one connection request and accepts it.
  Status listen();
  Status accept_one(const rpcrdma::CmPrivateData& pd, int ms = 5000);
  // Ends the connection from this side (a goodbye the other end sees).
  void disconnect();
  // The private data the peer sent (its request, or its accept).
  const std::vector<uint8_t>& peer_private() const { return peer_pdata_; }

  // Memory of the raw peer's own, registered local-only (for the life of
  // the device).
  uint8_t* buf(size_t len);
  // Offers [p, p+len) to the other end through a fast registration made on
  // this QP (REG_MR), as a client offers a chunk: returns the rkey, 0 if
  // refused.
  uint32_t offer(uint8_t* p, uint32_t len, uint32_t access);
  // Invalidates an rkey offer() made (LOCAL_INV), waiting for it.
  rdma::WcStatus revoke(uint32_t rkey, int ms = 2000);

  // Sends bytes (SEND, or SEND_WITH_INV of inv_rkey). Returns its status
  // once complete, or nullopt if it did not complete within ms (e.g. the
  // other end never posts a receive).
  std::optional<rdma::WcStatus> send(std::span<const uint8_t> bytes, uint32_t inv_rkey = 0, int ms = 2000);
  // Posts a signaled SEND without waiting for it: false when the QP refused
  // it (the connection is gone) or it is over the send buffer. A failed
  // completion later shows in send_failed().
  bool post(std::span<const uint8_t> bytes, uint32_t inv_rkey = 0);
  // Posts unsignaled, waiting for room in the send queue (floods).
  bool post_send(std::span<const uint8_t> bytes);
  // RDMA WRITE / READ against the other end's memory, waiting for the completion.
  rdma::WcStatus write(const uint8_t* src, uint32_t len, uint32_t rkey, uint64_t raddr, int ms = 2000);
  rdma::WcStatus read(uint8_t* dst, uint32_t len, uint32_t rkey, uint64_t raddr, int ms = 2000);
  // The next message received within ms (receives are reposted), or nullopt.
  std::optional<Received> recv(int ms = 1000);
  // Stops reposting receives (a peer that stops reading).
  void stop_reposting() { repost_ = false; }

  // Waits (pumping) until pred() holds; false after ms.
  bool wait(const std::function<bool()>& pred, int ms = 2000);
  // Pumps once and reads the queues.
  void poll() { poll_once(); }
  // The QP went to error (the other end dropped us, or we broke).
  bool in_error() const { return qp_ && qp_->state() == rdma::QpState::kError; }
  bool disconnected();  // a kDisconnected CM event arrived
  bool established() const { return established_; }
  // A SEND of ours completed in error.
  bool send_failed() const { return send_failed_; }
  // The connection is over, by whichever sign came first: a CM event, the
  // QP in error, a flushed receive.
  bool lost() const { return disconnected_ || recv_flushed_ || (established_ && in_error()); }

  rdma::Device* device() { return dev_; }
  rdma::Pd* pd() { return pd_; }
  rdma::Qp* qp() { return qp_.get(); }
  const rdma::DeviceCaps& caps() const { return dev_->caps(); }
  // How the engine names this peer in log lines: "qp N" (with our pid on shm).
  std::string id() const;
  const std::string& spec() const { return spec_; }

 private:
  void poll_once();
  void post_recv(uint32_t i);
  std::optional<rdma::WcStatus> wait_send(uint64_t wr_id, int ms);
  // Posts one signaled RDMA op through the next send buffer and waits for it.
  rdma::WcStatus rdma_op(rdma::WrOpcode op, uint8_t* slot, uint32_t len, uint32_t rkey, uint64_t raddr, int ms);
  uint8_t* next_tx_slot() { return tx_ + (tx_used_++ % shape_.sq_depth) * size_t{shape_.tx_slot}; }

  // What siblings share: the device (and its CM events), the PD, the memory.
  struct Shared {
    ~Shared();
    std::unique_ptr<mem::Arena> arena;
    std::unique_ptr<rdma::Device> dev;
    std::unique_ptr<rdma::Pd> pd;
    std::unique_ptr<rdma::Mr> mr;
    std::vector<RawPeer*> members;
    std::vector<rdma::CmEvent> requests;  // connection requests not yet taken
    // Buffers of destroyed members, by size, for the next member to reuse.
    std::vector<std::pair<size_t, uint8_t*>> spare;
    uint8_t* take(size_t len);
    // Reads the device's CM events: requests queue up, the rest go to the
    // member whose QP they name.
    void pump_cm();
  };
  Status make_qp(const PeerShape& shape);
  void on_cm(const rdma::CmEvent& ev);

  Pump pump_;
  std::string spec_;
  PeerShape shape_;
  std::shared_ptr<Shared> sh_;
  rdma::Device* dev_ = nullptr;
  rdma::Pd* pd_ = nullptr;
  rdma::Mr* mr_ = nullptr;
  mem::Arena* arena_ = nullptr;
  std::unique_ptr<rdma::Cq> scq_, rcq_;
  std::unique_ptr<rdma::Qp> qp_;
  std::vector<std::unique_ptr<rdma::FastMr>> fast_;
  uint8_t* rx_ = nullptr;
  uint8_t* tx_ = nullptr;
  size_t tx_used_ = 0;
  bool repost_ = true;
  bool disconnected_ = false;
  bool established_ = false;
  bool recv_flushed_ = false;
  bool send_failed_ = false;
  uint64_t next_wr_ = 1;
  std::vector<std::pair<uint64_t, rdma::WcStatus>> send_done_;
  std::vector<Received> inbox_;
  std::vector<uint8_t> peer_pdata_;
};

}  // namespace tern::rawpeer
