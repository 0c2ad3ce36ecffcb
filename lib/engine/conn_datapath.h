// ConnBase's datapath steps that every message takes, inline: they use the
// connection and its core (conn_core.h) both, so they live here, above the
// two headers, rather than in connection.h (which names the core only by
// pointer). The rest of the shared datapath is in conn_datapath.cc.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "base/clock.h"
#include "engine/conn_core.h"
#include "engine/connection.h"
#include "engine/msg_buf.h"
#include "engine/receive_queue.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

// Every call's completion and every
// reply records its round trip.
inline void ConnBase::record_rtt(ProcCounters* proc_counters, uint64_t t0, bool error) {
  uint64_t now = now_ticks();
  t_last = core->now_tick = now;
  auto ns = static_cast<uint64_t>(static_cast<double>(now - t0) * core->ns_per_tick);
  const size_t bucket = Histogram::bucket_of(ns);  // once for both histograms
  rtt.record(ns, bucket);
  if (error) counters.errors.add();
  if (proc_counters != nullptr) {
    proc_counters->rtt.record(ns, bucket);
    if (error) proc_counters->errors.add();
  }
}

inline void ConnBase::on_receive(MsgBuf* buf, const rdma::Wc& wc) {
  if (TERN_UNLIKELY(wc.status != rdma::WcStatus::kSuccess || phase() != State::kReady) && !receive_unusual(buf, wc))
    return;
  buf->len = wc.byte_len;
  buf->wc_flags = wc.flags;
  buf->inv_rkey = wc.invalidated_rkey;
  counters.recvs.add();
  counters.bytes_received.add(wc.byte_len);
  t_last = core->now_tick;  // coarse: keepalive and idle time need no more
  on_message(buf);
}

inline void ConnBase::give_back(MsgBuf* buf) {
  TERN_ASSERT(buf->where == MsgBuf::Where::kHeld);
  RecvQueue* q = core->queues[buf->queue];
  TERN_ASSERT(q != nullptr);
  q->give_back(buf);
  // A queue of this connection's own is posted to only while its QP can
  // take receives; a QP in error would flush them straight back.
  if (q->shared() || qp_live()) core->queue_needs_post(q);
}

}  // namespace tern::rpc
