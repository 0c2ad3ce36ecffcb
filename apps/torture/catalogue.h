// rpcrdma-torture's catalogue: cases generated from the rules of RFC 8166
// (RPC-over-RDMA Version 1) and RFC 8797 (its connection private data and
// remote invalidation), each tagged with the section it exercises and the
// requirement level the RFC gives the rule, each stating what the RFC lets
// the responder do and checking that it did one of those things.
//
// A case gets a fresh connection (it may break it) and drives the exchange
// through a Ctx; every wait is bounded, so a responder that never answers
// fails that case and the run goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "requester.h"
#include "rpcrdma/cm_private.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace tern::torture {

// RFC 2119 levels of the rule a case exercises. A MAY case checks that the
// responder survives a choice the RFC leaves to it (it answers, or refuses
// in a way the RFC allows, and never hangs).
enum class Level : uint8_t { kMust, kShould, kMay };
const char* level_name(Level l);

enum class Outcome : uint8_t { kPass, kFail, kSkip };
const char* outcome_name(Outcome r);

struct Verdict {
  Outcome result = Outcome::kPass;
  std::string seen;  // what the responder did (always filled, pass or fail)
  static Verdict pass(std::string s) { return {Outcome::kPass, std::move(s)}; }
  static Verdict fail(std::string s) { return {Outcome::kFail, std::move(s)}; }
  static Verdict skip(std::string s) { return {Outcome::kSkip, std::move(s)}; }
};

// An ONC RPC procedure of the responder's: prog, vers, proc.
struct Procedure {
  uint32_t prog = 0, vers = 0, proc = 0;
};

struct Config {
  std::string spec;  // device spec including the responder's address
  // A call every responder answers: NFSv3 NULL by default (RFC 1813), which
  // every NFS/RDMA server serves. Any RPC reply counts, accepted or not: the
  // catalogue judges the transport, not the program.
  Procedure call{100003, 3, 0};
  // A procedure whose results are its arguments (tern-perf --rpc's ECHO),
  // for large replies (reply chunks). Cases that need it skip without it.
  std::optional<Procedure> echo;
  int timeout_ms = 2000;  // the longest a case waits for one answer
  int quiet_ms = 300;     // how long "no answer" is watched before it counts as silence
  // Sleep between polls that found nothing (--jobs): several requesters
  // that spin would take the CPU the responder needs (in a VM it shares).
  int idle_us = 0;
};

// How a case's connection starts: RFC 8797 private data (ours by default).
struct Connect {
  // Raw private data bytes; nullopt = ours (Ctx::kOurs), empty = none.
  std::optional<std::vector<uint8_t>> pdata;
  // A refused connection is an outcome the case judges, not a failure.
  bool may_refuse = false;
};

class Ctx;
struct Case {
  std::string id;           // e.g. "vers/2/msg"
  std::string section;      // "RFC 8166 4.5.1"
  Level level;
  std::string requirement;  // what the RFC requires, in a sentence
  std::string expect;       // the outcomes that pass
  Connect connect;
  std::function<Verdict(Ctx&)> run;
  // Runs with no other case at once (--jobs): it connects a second
  // requester, or loads the responder beyond its own connection, so a case
  // beside it could see effects that are not its own (and be judged on them).
  bool alone = false;
};

// ---------------------------------------------------------------- wire building

// XDR words by hand: headers a codec would refuse to write (bad versions,
// unknown procs, truncations, too many segments) are the point.
struct Xdr {
  std::vector<uint8_t> b;
  Xdr& u32(uint32_t v) {
    uint8_t w[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
    b.insert(b.end(), w, w + 4);
    return *this;
  }
  Xdr& u64(uint64_t v) { return u32(uint32_t(v >> 32)).u32(uint32_t(v)); }
  Xdr& seg(const rpcrdma::Segment& s) { return u32(s.handle).u32(s.length).u64(s.offset); }
  Xdr& raw(std::span<const uint8_t> v) {
    b.insert(b.end(), v.begin(), v.end());
    return *this;
  }
};

// A transport header with unbounded lists (rpcrdma::Header caps them).
struct WireHeader {
  uint32_t xid = 0, vers = 1, credit = 32, proc = 0;
  std::vector<rpcrdma::ReadSegment> reads;
  std::vector<std::vector<rpcrdma::Segment>> writes;
  std::optional<std::vector<rpcrdma::Segment>> reply;
  std::vector<uint8_t> encode() const;
};

// ---------------------------------------------------------------- the context

class Ctx {
 public:
  Ctx(Session* session, std::unique_ptr<Requester>* rq, const Config* cfg, std::vector<uint8_t> sent_pdata,
      bool connected, std::string connect_error)
      : session_(session),
        slot_(rq),
        rq_(rq->get()),
        cfg_(cfg),
        sent_pdata_(std::move(sent_pdata)),
        connected_(connected),
        connect_error_(std::move(connect_error)) {}

  // Our private data: I set (we can take Send With Invalidate), we send up
  // to 4 KiB, we receive 1 KiB (RFC 8166's default: replies larger than
  // that need a reply chunk, which is what the reply-chunk cases test).
  static std::vector<uint8_t> ours(bool invalidate = true, uint32_t send = 4096, uint32_t recv = 1024);

  Requester& rq() { return *rq_; }
  const Config& cfg() const { return *cfg_; }
  bool connected() const { return connected_; }
  const std::string& connect_error() const { return connect_error_; }
  // What both ends may send inline, from our private data and the responder's.
  rpcrdma::InlineLimits limits() const;

  uint32_t xid() { return next_xid_++; }
  // The RPC call message of cfg().call (or `p`), with `pad` extra argument bytes.
  std::vector<uint8_t> rpc_call(uint32_t xid, size_t pad = 0) const;
  std::vector<uint8_t> rpc_call(const Procedure& p, uint32_t xid, std::span<const uint8_t> args) const;
  // RDMA_MSG of the configured call, no chunks.
  std::vector<uint8_t> plain_call(uint32_t xid, uint32_t credit = 32, size_t pad = 0) const;
  // The remote address to advertise for p inside a registration of p0.
  uint64_t remote(const uint8_t* p, const uint8_t* p0 = nullptr);

  // Registers chunk memory for the responder (rkey; 0 when refused).
  uint32_t offer(uint8_t* p, uint32_t len, uint32_t access) { return rq_->offer(p, len, access); }
  // Sends the RPC message `rpc` with header `h` (its xid and lists as
  // given): inline (RDMA_MSG) when it fits the threshold, else as a long
  // call -- RDMA_NOMSG with the message in a position-zero read chunk
  // (RFC 8166 3.5.3.1), whose rkey is added to *offered.
  bool send_call(WireHeader h, std::span<const uint8_t> rpc, std::vector<uint32_t>* offered);
  // Replaces the connection with a fresh one (our private data); false and
  // *why when the responder does not take it.
  bool reconnect(std::string* why);
  // A second requester connected to the same responder (our private data),
  // alive until the case ends: on this run's device and protection domain
  // (another connection of the same host), or with its own (`own_pd`:
  // another host, whose rkeys mean nothing on ours). nullptr and *why when
  // it cannot connect.
  Requester* second(bool own_pd, std::string* why);

  // Sends and waits for the first answer (message, disconnect, or silence after the timeout).
  Seen exchange(std::span<const uint8_t> msg, uint32_t inv_rkey = 0);
  // The next answer within ms (default: the timeout).
  Seen next(int ms = -1);

  // Judgements. Each returns nullopt when `s` is acceptable, else why not.
  // A reply to xid: RDMA_MSG (or RDMA_NOMSG with the reply in `reply_chunk`)
  // whose RPC message is a reply with that xid, granting at least one
  // credit (RFC 8166 3.3.1), within our inline threshold (3.3.2), and not
  // by Send With Invalidate of an rkey we did not offer in this call.
  std::optional<std::string> bad_reply(const Seen& s, uint32_t xid, const uint8_t* reply_chunk = nullptr,
                                       std::span<const uint32_t> offered = {});
  // The accept_stat of an inline RPC reply (0 SUCCESS), -1 when it is not
  // an accepted inline reply.
  int accept_stat(const Seen& s) const;
  // Whether the connection still carries a call: a plain call gets a reply.
  std::optional<std::string> not_alive();

  // Common verdicts.
  Verdict want_reply(const Seen& s, uint32_t xid, std::span<const uint32_t> offered = {},
                     const uint8_t* reply_chunk = nullptr);
  Verdict want_err_chunk(const Seen& s, uint32_t xid);
  // ERR_CHUNK, or the connection ended (the RFC lets a responder that cannot
  // parse a header drop the connection too when the fault is the transport's).
  Verdict want_err_chunk_or_gone(const Seen& s, uint32_t xid);
  // A reply, ERR_CHUNK, or a disconnect: anything but silence or garbage.
  Verdict want_any_answer(const Seen& s, uint32_t xid, std::span<const uint32_t> offered = {});
  // Nothing in quiet_ms, and then the connection still serves a call.
  Verdict want_silence_then_alive();

 private:
  Session* session_;
  std::unique_ptr<Requester>* slot_;
  Requester* rq_;
  const Config* cfg_;
  std::vector<uint8_t> sent_pdata_;
  bool connected_;
  std::string connect_error_;
  uint32_t next_xid_ = 0x7e570001;
  // second(): its session (when it has its own), then the requester, which
  // goes first.
  std::unique_ptr<Session> other_session_;
  std::unique_ptr<Requester> other_;
};

// ---------------------------------------------------------------- reports

// One case's result, as both catalogues (requester and responder) print it.
struct ReportRow {
  std::string id, section;
  Level level;
  std::string requirement, expect;
  Verdict verdict;
  double ms = 0;
};
// Whether an id matches one of the --case globs (all when none).
bool matches(const std::string& id, const std::vector<std::string>& globs);
// One line per case (failures also say what is required and expected);
// with quiet only failures.
void print_row(const ReportRow& r, bool quiet);
void print_list(const std::vector<ReportRow>& rows);
// The summary by level, and the JSON of every row to `json` (- for stdout,
// empty for none). 0 when no MUST case failed, 1 otherwise.
int report(const std::vector<ReportRow>& rows, const std::string& against, const std::string& json);

// The catalogue, by area (one file each).
void add_header_cases(std::vector<Case>& out);      // cases_header.cc: versions, procs, XDR, xids
void add_credit_cases(std::vector<Case>& out);      // cases_credits.cc
void add_inline_cases(std::vector<Case>& out);      // cases_inline.cc: RFC 8797 private data, thresholds
void add_chunk_cases(std::vector<Case>& out);       // cases_chunks.cc: read, write and reply chunks
void add_connection_cases(std::vector<Case>& out);  // cases_connection.cc: Send With Invalidate, connection loss
void add_two_requester_cases(std::vector<Case>& out);  // cases_two.cc: a second requester at once
std::vector<Case> catalogue();

}  // namespace tern::torture
