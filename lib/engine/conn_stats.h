// Per-connection and per-procedure statistics: what xprtrdma's mountstats
// "xprt: rdma" and per-op lines show, kept by the engine's thread and read
// from any thread (telemetry, a host's monitor) as relaxed snapshots.
//
// Cost on the datapath: a handful of relaxed stores and one histogram
// bucket increment per call, no locks, no allocation. A procedure carries
// about 8 KiB of it (its histogram); a connection only its counters here,
// its round trips going to a histogram whose buckets are allocated as they
// are used (ConnBase::rtt, base/lazy_histogram.h).
#pragma once

#include <cstdint>

#include "base/histogram.h"
#include "base/stats.h"
#include "telemetry/registry.h"

namespace tern::rpc {

struct ConnCounters {
  Counter calls;            // client: calls accepted by call(); server: calls received
  Counter replies;          // client: replies matched to a call; server: replies sent
  Counter sends, recvs;     // messages posted / received on this connection
  Counter bytes_sent;       // inline message bytes (transport header included)
  Counter bytes_received;
  Counter read_chunk_bytes;   // bulk moved through read chunks (pulled by the server)
  Counter write_chunk_bytes;  // bulk moved through write chunks (pushed by the server)
  Counter reply_chunk_bytes;  // replies that came (or went) through a reply chunk
  Counter read_chunks, write_chunks, reply_chunks;
  Counter nomsg;            // RDMA_NOMSG messages (long calls / long replies)
  Counter errors;           // client: calls completed with a status other than ok;
                            // server: calls answered with an error or RDMA_ERROR
  Counter bad_xids;         // client: replies that named no call in flight
  Counter bad_replies;      // client: replies that failed their call (kBadReply)
  Counter local_inv_chains, remote_invalidations;
  Counter credit_waits;     // client: calls that waited for the server's grant
  Counter backlog_depth;    // client: sum over calls of the backlog they found (mountstats' bklog_u)
  Counter ring_full;        // the send-context ring was full (xprtrdma's empty_sendctx_q)
  Counter retransmits;      // calls sent again, same xid, after a reconnect
  Counter timeouts;         // calls ended by their deadline (kTimedOut)
};

// One procedure (prog, vers, proc), on one side. The client's RTT is
// call() to completion (queueing, transmission, server, invalidation); the
// server's is from the call's receive to its reply being posted (pulling
// the read chunk and the handler included).
struct ProcCounters {
  uint32_t prog = 0, vers = 0, proc = 0;
  bool server = false;
  Counter ops, errors, bytes_sent, bytes_received;
  Histogram rtt;
  telemetry::Source tsrc;  // "proc" source "<engine>.<prog>.<vers>.<proc>.<c|s>"
};

// ConnCounters by name, for StatsView readers (telemetry, snapshots).
StatsView conn_counters_view(const ConnCounters& c);

}  // namespace tern::rpc
