// A peer that speaks RPC-over-RDMA by hand, through the driver interface and
// no engine, to play a misbehaving client or server against a Tern engine in
// the same process and thread. Everything it does is driven by the test: its
// waits pump the engines under test (a callback) so that both sides progress.
//
// Also here: LogCapture (what the engine said, through tern::set_log_sink)
// and small encoders for hand-made RPC-over-RDMA messages.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "base/result.h"
#include "mem/arena.h"
#include "oncrpc/oncrpc.h"
#include "rdmadev/rdmadev.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace tern::test {

// ---------------------------------------------------------------- logs

// Captures log lines (all levels) for the life of the object.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Lines at warn or error that contain every one of `needles`.
  std::vector<std::string> warnings(std::initializer_list<std::string_view> needles = {}) const;
  // The same at any level up to `most` (info: what a driver said about it too).
  std::vector<std::string> lines(std::initializer_list<std::string_view> needles, LogLevel most) const;
  std::string dump() const;  // every captured line, for failure messages
  void clear();

 private:
  static void sink(void* ctx, const LogRecord& rec);
  mutable std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
  LogLevel saved_level_;
};

// True if `line` names `token` as a whole word-ish item ("qp 7" does not
// match inside "qp 71").
bool names(std::string_view line, std::string_view token);

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

// ---------------------------------------------------------------- device specs

// Over pmd/shm by default; TERN_RPC_DEVICE names another device spec without
// a port ("verbs:dev=rxe0,addr=169.254.77.1" in the VM stage), to which each
// call adds a port of its own. Every call returns a fresh address.
std::string fresh_spec(std::string_view tag);
void remove_spec(const std::string& spec);
bool on_shm();

// ---------------------------------------------------------------- the peer

struct Received {
  std::vector<uint8_t> bytes;
  bool with_inv = false;
  uint32_t inv_rkey = 0;
};

class RawPeer {
 public:
  using Pump = std::function<void()>;
  static constexpr uint32_t kRecvBuf = 16 * 1024;
  static constexpr uint32_t kRecvs = 32;

  explicit RawPeer(Pump pump) : pump_(std::move(pump)) {}
  ~RawPeer();

  // Opens the device behind `spec`, its PD, CQs and a QP with receives posted.
  Status open(std::string_view spec, uint32_t recvs = kRecvs);
  // Another QP on the same device, PD and memory (a listening raw server's
  // second connection: accept_one() on it takes the next request). The
  // sibling may outlive this object.
  Result<std::unique_ptr<RawPeer>> sibling(uint32_t recvs = kRecvs);
  // Client: connects with RFC 8797 private data (`pdata`, or ours if empty)
  // and waits until established (pumping).
  Status connect(const rpcrdma::CmPrivateData& pd, int ms = 5000);
  // Server: listens, waits for one connection request and accepts it.
  Status listen();
  Status accept_one(const rpcrdma::CmPrivateData& pd, int ms = 5000);
  // The private data the peer sent.
  const std::vector<uint8_t>& peer_private() const { return peer_pdata_; }

  // Memory of the raw peer's own, registered local-only.
  uint8_t* buf(size_t len);
  // Offers [p, p+len) to the other end through a fast registration made on
  // this QP (REG_MR), as a client offers a chunk: returns the rkey.
  uint32_t offer(uint8_t* p, uint32_t len, uint32_t access);
  // Invalidates an rkey offer() made (LOCAL_INV), waiting for it.
  rdma::WcStatus revoke(uint32_t rkey, int ms = 2000);

  // Sends bytes (SEND, or SEND_WITH_INV of inv_rkey). Returns its status
  // once complete, or nullopt if it did not complete within ms (e.g. the
  // other end never posts a receive).
  std::optional<rdma::WcStatus> send(std::span<const uint8_t> bytes, uint32_t inv_rkey = 0, int ms = 2000);
  // Posts without waiting (floods).
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
  // The QP went to error (the other end dropped us, or we broke).
  bool in_error() const { return qp_ && qp_->state() == rdma::QpState::kError; }
  bool disconnected();  // a kDisconnected CM event arrived

  rdma::Device* device() { return dev_; }
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

  // What siblings share: the device (and its CM events), the PD, the memory.
  struct Shared {
    ~Shared();
    std::unique_ptr<mem::Arena> arena;
    std::unique_ptr<rdma::Device> dev;
    std::unique_ptr<rdma::Pd> pd;
    std::unique_ptr<rdma::Mr> mr;
    std::vector<RawPeer*> members;
    std::vector<rdma::CmEvent> requests;  // connection requests not yet taken
    // Reads the device's CM events: requests queue up, the rest go to the
    // member whose QP they name.
    void pump_cm();
  };
  Status make_qp(uint32_t recvs);
  void on_cm(const rdma::CmEvent& ev);

  Pump pump_;
  std::string spec_;
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
  uint64_t next_wr_ = 1;
  std::vector<std::pair<uint64_t, rdma::WcStatus>> send_done_;
  std::vector<Received> inbox_;
  std::vector<uint8_t> peer_pdata_;
};

}  // namespace tern::test
