// A small ONC RPC service on a thread of its own: a TCP listener (RFC 5531
// §11 record marking) and a UDP socket on one address and port, every call
// handed to one function that returns the reply. tern-nfsd's control-path
// services run on it — NLM and NSM's callback (nlm_server.h), and MOUNT over
// UDP (mount.nfs asks MOUNT over UDP unless told mountproto=tcp) — never on
// an engine thread.
//
// Peers are bounded, and no client can keep the others out (a slowloris
// holding every slot with a byte now and then): a record over 64 KiB closes
// its connection, and so does a reply the socket cannot take at once (the
// peer is not reading); a record must arrive whole within record_ms of its
// first byte however it trickles; a connection with nothing under way goes
// after idle_ms; one client address holds at most max_per_address
// connections (its next one replaces its own oldest); and when all
// max_conns slots are taken, a newcomer replaces the least recently active
// connection of the address holding the most. So an address over its
// share only ever waits for itself.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "oncrpc/oncrpc.h"

namespace tern::nfsd {

// One call as it arrived.
struct RpcRequest {
  std::span<const uint8_t> msg;  // the whole RPC message (the record, or the datagram)
  sockaddr_storage peer{};       // who sent it
  sockaddr_storage local{};      // the address it came to (a TCP connection's own end; UDP: the bound one)
  bool tcp = false;
};

// An accepted reply to call `xid` (RFC 5531): the header with `st` (and,
// for PROG_MISMATCH, the versions low..high), then `results`, into *out.
void rpc_accepted(std::vector<uint8_t>* out, uint32_t xid, oncrpc::AcceptStat st, std::span<const uint8_t> results,
                  uint32_t low = 0, uint32_t high = 0);

// A call's ONC RPC header decoded (kCall: *h and *header_len filled), or
// what RFC 5531 answers instead -- RPC_MISMATCH, AUTH_ERROR, GARBAGE_ARGS
// for a header that does not decode -- already in *reply (kAnswered), or
// nothing to send (kNothing: not a call, or not worth an answer).
enum class RpcDecoded : uint8_t { kCall, kAnswered, kNothing };
RpcDecoded rpc_decode_call(std::span<const uint8_t> msg, oncrpc::CallHeader* h, size_t* header_len,
                           std::vector<uint8_t>* reply);

// Returns false when nothing should be sent back (not a call, or a
// procedure without a reply).
using RpcHandler = std::function<bool(const RpcRequest& req, std::vector<uint8_t>* reply)>;

struct RpcServiceOptions {
  std::string name = "rpc";      // for log lines ("NLM", "MOUNT")
  std::string addr = "0.0.0.0";  // IPv4 or IPv6 address
  uint16_t port = 0;             // 0: any free port (both sockets get the same one)
  bool tcp = true;
  bool udp = true;
  // UDP on 127.0.0.1 too, at the same port, when addr is another IPv4
  // address: for local callers that find the port through rpcbind and send
  // to loopback (rpc.statd's callbacks).
  bool loopback_udp = false;
  // Called on the service thread about once a second (timers: grace
  // periods, retries); may be empty.
  std::function<void()> tick;
  // The TCP side's bounds (above).
  uint32_t record_ms = 5000;
  uint32_t idle_ms = 300000;
  uint32_t max_conns = 64;
  uint32_t max_per_address = 8;
};

class RpcService {
 public:
  static Result<std::unique_ptr<RpcService>> start(const RpcServiceOptions& opt, RpcHandler handler);
  // Stops the thread and closes every socket.
  ~RpcService();
  RpcService(const RpcService&) = delete;
  RpcService& operator=(const RpcService&) = delete;

  uint16_t port() const { return port_; }
  // The bound address, port included (for rpcbind).
  const sockaddr_storage& address() const { return bound_; }
  bool has_tcp() const { return tcp_fd_ >= 0; }
  bool has_udp() const { return udp_fd_ >= 0; }
  bool has_loopback_udp() const { return lo_fd_ >= 0; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  // TCP connections closed for a record past its deadline (or idle), and
  // connections replaced to make room for another.
  uint64_t timed_out() const { return timed_out_.load(std::memory_order_relaxed); }
  uint64_t replaced() const { return replaced_.load(std::memory_order_relaxed); }

 private:
  RpcService() = default;
  void run();
  void serve_udp(int fd, const sockaddr_storage& local, std::vector<uint8_t>& dgram, std::vector<uint8_t>& reply);

  RpcServiceOptions opt_;
  RpcHandler handler_;
  int tcp_fd_ = -1;
  int udp_fd_ = -1;
  int lo_fd_ = -1;  // loopback_udp's socket
  int stop_fd_ = -1;
  uint16_t port_ = 0;
  sockaddr_storage bound_{};
  sockaddr_storage lo_addr_{};
  std::thread thread_;
  std::atomic<uint64_t> calls_{0}, timed_out_{0}, replaced_{0};
};

// Parses an IPv4/IPv6 address with a port into a socket address.
Result<sockaddr_storage> parse_ip(const std::string& addr, uint16_t port, socklen_t* len);

}  // namespace tern::nfsd
