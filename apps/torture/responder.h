// rpcrdma-torture's responder side: a torture *server* that answers a
// requester -- Tern's client engine, run in this process -- with every legal
// and illegal reply shape of RFC 8166 / RFC 8797 (RDMA_MSG, RDMA_NOMSG and
// RDMA_ERROR forms, other versions and procedures, other xids, credit grants
// of 0, huge or changing, reply and write chunks written short, long or not
// at all, Send With Invalidate of the right and wrong rkeys, truncated
// headers, the connection lost at every step of a call).
//
// Each case says what the client must do, and the runner checks the same
// things after every case on top of what the case checks: every call
// completes exactly once, with a status the case allows; the client's memory
// outside what a call offered is untouched (guard bytes around the offered
// chunk, and memory never offered); and at idle, once the connection is
// closed, no registration is reachable and no connection is held.
//
// The judgement needs the client's side (its completions, its counters), so
// the client is an engine in this process: the catalogue runs against Tern's
// client, over shm or any device the engine and the raw server can share.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "catalogue.h"
#include "engine/engine.h"
#include "rawpeer/raw_peer.h"

namespace tern::torture {

// The shapes of call the client issues: what each offers the responder.
enum class Shape : uint8_t {
  kPlain,  // inline call, no chunks
  kWrite,  // a write chunk (Call::bulk_recv, 64 KiB between guard bytes)
  kReply,  // a reply chunk (Call::max_results over the inline threshold)
  kRead,   // a read chunk (Call::bulk_send, 8 KiB)
  kLong,   // a long call: RDMA_NOMSG with the call in a position-zero read chunk
};
const char* shape_name(Shape s);

// One call the client issued and what became of it.
struct Pending {
  int completions = 0;  // must end at exactly 1
  rpc::CallReply reply{};
  std::vector<uint8_t> results;
  uint32_t xid = 0;
  Shape shape = Shape::kPlain;
  bool done() const { return completions > 0; }
};

// One call as the raw responder took it off the wire.
struct TakenCall {
  std::vector<uint8_t> bytes;
  rpcrdma::Header h;
  uint32_t xid = 0;
  // The first write chunk's first segment, the reply chunk's first segment,
  // the first read segment (0 handles when absent).
  rpcrdma::Segment write{}, reply{}, read{};
  uint64_t reply_room = 0;  // total length of the reply chunk
};

struct RespondConfig {
  std::string device = "shm";  // a device spec without an address: each case adds one
  int timeout_ms = 3000;       // the longest wait for one event
  int quiet_ms = 200;          // how long "nothing happens" is watched
};

// What a case asks of its connection.
struct RConnect {
  bool invalidate = true;      // the raw responder's private data says I (it may Send With Invalidate)
  bool client_inv = true;      // the client engine offers remote invalidation (EngineOptions)
  bool reconnect = false;      // the client engine reconnects after a loss
  uint32_t credits = 32;       // the client's most calls outstanding (EngineOptions::credits)
  int connections = 1;         // client connections to the raw responder (2: the two-requester cases)
};

class RCtx {
 public:
  static constexpr uint32_t kProg = 0x20000077, kVers = 1, kProc = 1;
  static constexpr uint32_t kChunk = 64 * 1024;
  static constexpr uint32_t kReadLen = 8192;
  static constexpr uint32_t kMaxResults = 16384;
  static constexpr uint8_t kGuard = 0xC1, kSecret = 0x5A;

  RCtx(const RespondConfig& cfg, const RConnect& how, std::string spec);
  ~RCtx();
  // Engine, raw responder, connections; false and *why when that fails.
  bool setup(std::string* why);

  const RespondConfig& cfg() const { return cfg_; }
  rpc::Engine& cli() { return *cli_; }
  rpc::Connection* conn(int i = 0) { return conns_[static_cast<size_t>(i)]; }
  rawpeer::RawPeer& srv(int i = 0) { return *srv_[static_cast<size_t>(i)]; }
  // The raw responder of connection i goes away at once (its QP destroyed):
  // an abrupt loss.
  void kill_srv(int i = 0) { srv_[static_cast<size_t>(i)].reset(); }
  // Accepts the client's next connection request (a reconnect) as
  // connection i's new responder.
  bool accept_again(int i = 0);
  void pump() { cli_->poll(); }
  bool wait(const std::function<bool()>& pred, int ms = -1);

  // Issues a call of shape s on connection i; nullptr if call() refused it.
  // A deadline (ns) makes an ignored call complete with kTimedOut.
  Pending* issue(Shape s, int i = 0, uint64_t timeout_ns = 0);
  // The next call the responder of connection i received, decoded (the
  // long call's message pulled from its chunk); nullopt after ms.
  std::optional<TakenCall> take(int i = 0, int ms = -1);
  // issue() then take(): nullopt (and *why) when either fails.
  std::optional<TakenCall> issue_take(Shape s, Pending** p, std::string* why, int i = 0);

  // Reply building. The RPC reply: accepted SUCCESS with 4 bytes of results
  // naming the xid (checked by want_ok), or `results`.
  std::vector<uint8_t> rpc_reply(uint32_t xid, std::span<const uint8_t> results = {}) const;
  // RDMA_MSG with the RPC reply inline; the call's write chunk returned
  // with `written` bytes when it offered one and written is set.
  std::vector<uint8_t> msg_reply(const TakenCall& tc, uint32_t credit = 8, std::optional<uint32_t> written = 0,
                                 std::span<const uint8_t> rpc = {});
  // Writes the RPC reply into the call's reply chunk and returns RDMA_NOMSG
  // reporting `claim` bytes there (default: what was written).
  std::vector<uint8_t> nomsg_reply(const TakenCall& tc, int srv = 0, std::optional<uint32_t> claim = {},
                                   uint32_t credit = 8);
  // Fills `n` bytes of the call's write chunk with a pattern (RDMA Write).
  bool fill_write(const TakenCall& tc, uint32_t n, int srv = 0);
  bool send(std::span<const uint8_t> bytes, uint32_t inv_rkey = 0, int srv = 0);

  // Judgements: nullopt when the call completed exactly once with one of
  // `allowed` (waiting up to the timeout), else why not.
  std::optional<std::string> want(Pending* p, std::initializer_list<rpc::CallStatus> allowed);
  // kOk with the results rpc_reply() sent for its xid.
  std::optional<std::string> want_ok(Pending* p);
  // After a message the client may drop, use or answer by dropping the
  // connection: within quiet_ms the call either completed (with one of
  // `allowed`) or the connection was lost (kDisconnected); else it is still
  // waiting, the connection is up, and the real reply completes it kOk.
  Verdict after_bad(Pending* p, const TakenCall& tc, std::initializer_list<rpc::CallStatus> allowed);
  // The client's memory around the offered chunk and never offered is intact.
  std::optional<std::string> memory_touched() const;
  // What the runner checks after every case: every call completed once (the
  // connections closed first when `close`), memory untouched, nothing
  // reachable or held at idle.
  std::optional<std::string> finish();

  uint8_t* offered() { return offered_; }
  std::string describe(const Pending* p) const;

 private:
  RespondConfig cfg_;
  RConnect how_;
  std::string spec_;
  std::unique_ptr<rpc::Engine> cli_;
  std::vector<rpc::Connection*> conns_;
  // The listening QP, never connected: it keeps the device (and the
  // listener) while connection responders come and go as its siblings.
  std::unique_ptr<rawpeer::RawPeer> home_;
  std::vector<std::unique_ptr<rawpeer::RawPeer>> srv_;
  std::vector<std::unique_ptr<Pending>> pendings_;
  uint8_t *region_ = nullptr, *offered_ = nullptr, *secret_ = nullptr, *send_buf_ = nullptr;
  std::vector<uint8_t> long_args_;
};

struct RCase {
  std::string id;
  std::string section;
  Level level;
  std::string requirement;  // what the client must do
  std::string expect;       // the outcomes that pass
  RConnect connect;
  std::function<Verdict(RCtx&)> run;
};

std::vector<RCase> responder_catalogue();
void add_responder_reply_cases(std::vector<RCase>& out);  // responder_cases.cc
void add_responder_loss_cases(std::vector<RCase>& out);   // responder_cases.cc

// Runs the responder catalogue against Tern's client; prints like the
// requester catalogue; 0 when no MUST case failed.
int run_responder(const RespondConfig& cfg, const std::vector<std::string>& globs, bool list, bool quiet,
                  const std::string& json);

}  // namespace tern::torture
