// SrvCall: a server call -- what the handler sees of it (ServerCall), and
// what the engine keeps for it from its receive until both its owners let
// go. Its life is a state machine of its own, in server_call_machine.h: the
// states, the table of allowed transitions, and enter(), the only writer of
// a call's state.
#pragma once

#include <cstdint>
#include <span>

#include "base/intrusive_list.h"
#include "engine/chunks.h"
#include "engine/conn_stats.h"
#include "engine/engine.h"
#include "engine/msg_buf.h"

namespace tern::rpc {

class ServerConn;
struct HandlerEntry;

// The states (server_call_machine.h); declared here without their values
// so that a call can hold one.
enum class SrvState : uint8_t;

// What a server call waits for its peer to do (rw_deadline.h).
enum class RwWait : uint8_t {
  kNone,
  kPull,  // execute the RDMA READs of its read chunks
  kPush,  // take the reply: the WRITEs into its write and reply chunks, and the Send
  kReply, // take the reply's Send (a reply with no bulk part, signaled)
};

class SrvCall final : public ServerCall {
 public:
  uint32_t xid() const override { return xid_; }
  uint32_t prog() const override { return prog_; }
  uint32_t vers() const override { return vers_; }
  uint32_t proc() const override { return proc_; }
  std::span<const uint8_t> args() const override { return args_; }
  std::span<const uint8_t> rpc_header() const override { return hdr_; }
  std::span<const uint8_t> bulk() const override;
  std::span<const ReadChunkData> read_chunks() const override { return {data_, static_cast<size_t>(ndata_)}; }
  uint32_t write_chunk_count() const override { return static_cast<uint32_t>(chunks.nwrites); }
  uint32_t write_chunk_capacity(uint32_t chunk) const override;
  std::span<uint8_t> write_chunk_buffer(uint32_t chunk, uint32_t len) override;
  Status reply(std::span<const uint8_t> results, std::span<const uint8_t> bulk) override;
  Status reply_chunks(std::span<const uint8_t> results, std::span<const std::span<const uint8_t>> bulk) override;
  Status reply_error(AcceptStat stat) override;
  void drop() override;
  std::string_view peer_id() const override;
  uint64_t args_digest() const override;

  // Its place in the machine (server_call_machine.h), written only by enter().
  SrvState state() const { return state_; }
  bool handler_owner = false;  // the handler side (the engine's, while pulling)
  bool send_owner = false;     // the Send side
  bool error_only = false;     // an RDMA_ERROR answer, not a call
  bool pull_waiting = false;   // its READs wait for send-queue room
  int answer = -1;             // >= 0: the engine answers it itself with this accept_stat (no handler runs)
  uint32_t answer_low = 0, answer_high = 0;
  uint32_t index = 0;          // in the engine's call table: send contexts and READ wr_ids name it
  ServerConn* conn = nullptr;
  uint32_t xid_ = 0, prog_ = 0, vers_ = 0, proc_ = 0;
  uint32_t wanted = 1;          // the credits its client asked for (RFC 8166 rdma_credit)
  // args_digest(), computed on first use: a duplicate request cache asks for
  // it when the call begins and again when it is answered, and the keyed
  // hash of a large argument costs more than the rest of the lookup.
  mutable uint64_t digest_ = 0;
  mutable bool digest_known_ = false;
  std::span<const uint8_t> args_;
  std::span<const uint8_t> hdr_;  // the ONC RPC call header, in the same buffer as args_
  MsgBuf* rep = nullptr;        // the receive holding the call's bytes, until its reply is encoded
  MsgBuf* sendbuf = nullptr;    // the reply message, until the Send side lets go
  bool nomsg = false;           // the call came in its position-zero read chunk
  bool msg_pulled = false;      // RDMA_NOMSG: the message is pulled and decoded
  uint32_t inv_rkey = 0;        // for Send With Invalidate, 0: none
  int ndata_ = 0;               // read chunks the handler sees (position zero excluded)
  uint8_t* staging = nullptr;   // bulk pool: a reply too large for inline, RDMA-written into the reply chunk
  bool pool_memory = false;     // it took (or tried to take) bulk-pool memory: drop_memory has work
  uint32_t staging_cap = 0;
  const HandlerEntry* handler = nullptr;
  // The reply as reply() encoded it, from which its chain is built (again,
  // if it had to wait for room): the message in sendbuf, a long reply's
  // body in staging, and the bulk data of each write chunk.
  uint32_t msg_len = 0;
  uint32_t long_len = 0;   // > 0: RDMA_NOMSG reply through the reply chunk
  int nbulk = 0;
  int reply_wrs = 0;       // WRs its chain takes
  uint64_t t_recv = 0;          // ticks when its message arrived, for the RTT
  // Breakdown stamps (ticks; 0 when not taken): read chunks pulled, handler
  // called, reply() called (breakdown.h).
  uint64_t ts_pulled = 0, ts_handler = 0, ts_replied = 0;
  ProcCounters* proc_counters = nullptr;   // the handler's procedure counters, or the engine's "unknown"
  // Waiting for memory: on its peer's queue (bulk_share.h), needing
  // pool_need bytes of the bulk pool. pool_bytes: what it holds of it now.
  ListLink<SrvCall> wait_link;
  bool waiting = false;
  size_t pool_need = 0, pool_bytes = 0;
  // Its peer has RDMA work of it to complete (rw_deadline.h): since when
  // (ticks), and which.
  ListLink<SrvCall> rw_link;
  uint64_t rw_since = 0;
  RwWait rw_what = RwWait::kNone;

 private:
  friend void enter(SrvCall* sc, SrvState to);
  SrvState state_{};  // kFree

 public:
  // Above: what a call without chunks reads or writes, in a few cache lines
  // (~5 of its ~46). Below: the chunk lists (whose counts come first, so a
  // call without chunks touches only their first line) and the per-chunk
  // arrays, which only a call with chunks reaches.
  ChunkLists chunks;            // as the client sent them
  // Where each read chunk is pulled to, and whether the engine's pool owns it.
  uint8_t* read_dst[kMaxReadChunks] = {};
  bool read_pooled[kMaxReadChunks] = {};
#if defined(TERN_DEBUG) && TERN_DEBUG
  // The reclaim check's own record (note_host_memory, debug builds only):
  // the Placer's buffers were reported when the handler answered. Kept
  // here, not by clearing read_dst, so that debug and release builds run
  // the engine on the same values.
  bool placer_noted = false;
#endif
  ReadChunkData data_[kMaxReadChunks];
  uint8_t* write_buf[kMaxWriteChunks] = {};  // bulk pool: result buffers (handlers without a Placer)
  // The reply's bulk data, one entry per write chunk (see msg_len above).
  const uint8_t* bulk_src[kMaxWriteChunks] = {};
  uint32_t bulk_len[kMaxWriteChunks] = {};
  uint32_t bulk_lkey[kMaxWriteChunks] = {};
};

}  // namespace tern::rpc
