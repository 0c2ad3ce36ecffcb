// Server datapath, RDMA READ and WRITE (svc_rdma_rw.c's part): pulling a
// call's read chunks into where they belong, and pushing its bulk results
// into the client's write chunks and a long reply into its reply chunk.
// Each read chunk is one run of READs, one per segment; only the chain's
// last READ is signaled (send-queue ordering covers the others), and its
// completion moves the call on. WRITEs ride ahead of the reply's Send in
// one chain, unsignaled.
#include <algorithm>

#include "base/clock.h"
#include "engine/conn_core.h"
#include "engine/conn_datapath.h"
#include "engine/server_conn.h"
#include "engine/server_call_machine.h"

namespace tern::rpc {

using namespace tern::rdma;

ServerConn::Pull ServerConn::post_reads(SrvCall* sc) {
  WrChain& chain = core->chain;
  chain.clear();
  for (int c = 0; c < sc->chunks.nreads; ++c) {
    const ReadChunkSegs& rc = sc->chunks.reads[c];
    // An RDMA_NOMSG message first, alone: its handler decides where the
    // other chunks go. Then the others.
    const bool msg_chunk = rc.position == 0;
    if (sc->nomsg && (sc->msg_pulled == msg_chunk)) continue;
    if (rc.length() == 0) continue;
    uint32_t lkey = 0;
    const bool ok = pd_ctx->lkey_of(sc->read_dst[c], rc.length(), &lkey);
    TERN_CHECK(ok, "read chunk destination is not registered memory");
    uint64_t off = 0;
    for (int i = 0; i < rc.nsegs; ++i) {
      if (rc.segs[i].length == 0) continue;
      SendWr& w = chain.add_one_sge(WrOpcode::kRdmaRead, sc->read_dst[c] + off, rc.segs[i].length, lkey);
      w.remote_addr = rc.segs[i].offset;
      w.rkey = rc.segs[i].handle;
      off += rc.segs[i].length;
    }
  }
  if (chain.empty()) return Pull::kNothing;  // empty chunks: nothing to wait for
  if (!room(chain.size())) return Pull::kNoRoom;
  core->engine_stats.rdma_reads.add(static_cast<uint64_t>(chain.size()));
  if (!sc->nomsg || sc->msg_pulled) core->engine_stats.read_chunks.add();
  TERN_ASSERT(sc->state() == SrvState::kPulling);  // the machine entered it before asking for the pull
  // A refusal fails the connection; the drain frees the call. Posted, the
  // READs wait for the peer: the deadline runs from now.
  if (post(chain, SendCtxKind::kRead, sc->index) && core->rw_timeout_ticks != 0)
    core->rw_due.arm(sc, RwWait::kPull, now_ticks());
  return Pull::kPosted;
}

namespace {

// Appends RDMA WRITEs placing `len` bytes at `src` (under `lkey`) into the
// peer's segments in order, each taking what fits. Returns the bytes
// placed; out, if given, gets the segments with the lengths written.
uint64_t push_into(WrChain& chain, const uint8_t* src, uint64_t len, uint32_t lkey, const WriteChunkSegs& to,
                   WriteChunkSegs* out) {
  uint64_t done = 0;
  if (out != nullptr) out->nsegs = to.nsegs;
  for (int i = 0; i < to.nsegs; ++i) {
    uint64_t n = std::min<uint64_t>(to.segs[i].length, len - done);
    if (out != nullptr) out->segs[i] = RdmaSegment{to.segs[i].handle, static_cast<uint32_t>(n), to.segs[i].offset};
    if (n == 0) continue;
    SendWr& w = chain.add_one_sge(WrOpcode::kRdmaWrite, src + done, static_cast<uint32_t>(n), lkey);
    w.remote_addr = to.segs[i].offset;
    w.rkey = to.segs[i].handle;
    done += n;
  }
  return done;
}

}  // namespace

// The chunk lists as written, for the reply header: each write chunk's
// segments with the bytes placed in them, and the reply chunk's.
void written_chunks(const SrvCall* sc, ChunkLists* out) {
  out->clear();
  out->nwrites = sc->chunks.nwrites;
  for (int c = 0; c < sc->chunks.nwrites; ++c) {
    const WriteChunkSegs& to = sc->chunks.writes[c];
    uint64_t left = c < sc->nbulk ? sc->bulk_len[c] : 0;
    out->writes[c].nsegs = to.nsegs;
    for (int i = 0; i < to.nsegs; ++i) {
      uint64_t n = std::min<uint64_t>(to.segs[i].length, left);
      out->writes[c].segs[i] = RdmaSegment{to.segs[i].handle, static_cast<uint32_t>(n), to.segs[i].offset};
      left -= n;
    }
  }
  if (sc->long_len > 0) {
    out->has_reply = true;
    uint64_t left = sc->long_len;
    out->reply.nsegs = sc->chunks.reply.nsegs;
    for (int i = 0; i < sc->chunks.reply.nsegs; ++i) {
      const RdmaSegment& s = sc->chunks.reply.segs[i];
      uint64_t n = std::min<uint64_t>(s.length, left);
      out->reply.segs[i] = RdmaSegment{s.handle, static_cast<uint32_t>(n), s.offset};
      left -= n;
    }
  }
}

void ServerConn::add_reply_writes(SrvCall* sc, WrChain& chain) {
  // Bulk results into the client's write chunks, segment by segment.
  for (int c = 0; c < sc->nbulk && c < sc->chunks.nwrites; ++c)
    if (sc->bulk_len[c] > 0)
      push_into(chain, sc->bulk_src[c], sc->bulk_len[c], sc->bulk_lkey[c], sc->chunks.writes[c], nullptr);
  // A long reply into the reply chunk.
  if (sc->long_len > 0) push_into(chain, sc->staging, sc->long_len, pd_ctx->arena_lkey(), sc->chunks.reply, nullptr);
}

}  // namespace tern::rpc
