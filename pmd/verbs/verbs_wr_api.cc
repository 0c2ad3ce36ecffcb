// pmd/verbs: posting one send chain through the ibv_wr_* builder, as one
// ibv_wr_start .. ibv_wr_complete sequence (one doorbell). REG_MR is built by
// the QP's RegMrBuilder (a window bind, or a FastRegProvider's UMR); every
// other opcode is built here. Each WR takes a shadow-ring slot first, so a
// full queue is known before anything is posted (verbs_internal.h).
#include <cerrno>

#include "rdmadev/rdmadev_driver.h"
#include "verbs/verbs_internal.h"

namespace tern::verbs {

namespace {

// The WR's data: inline (copied now, see inline_fits) or as SGEs.
void set_data(const WrApiQueue& q, ibv_qp_ex* qpx, const SendWr& w) {
  if (q.max_inline != 0 && q.mrs != nullptr && inline_fits(*q.mrs, q.max_inline, w.sg_list, w.num_sge)) {
    ibv_data_buf buf[4];
    if (w.num_sge <= 4) {
      for (uint32_t k = 0; k < w.num_sge; ++k)
        buf[k] = ibv_data_buf{reinterpret_cast<void*>(w.sg_list[k].addr), w.sg_list[k].length};
      ibv_wr_set_inline_data_list(qpx, w.num_sge, buf);
      q.st->inline_sends.add();
      return;
    }
  }
  ibv_wr_set_sge_list(qpx, w.num_sge, reinterpret_cast<const ibv_sge*>(w.sg_list));
}

}  // namespace

int post_send_wr_api(const WrApiQueue& q, const SendWr* wrs, int n, int* err) {
  ShadowRing& sq = *q.sq;
  VerbsQpStats& st = *q.st;
  ibv_qp_ex* qpx = q.qpx;
  const uint32_t start = sq.tail;
  int i = 0;
  *err = 0;
  ibv_wr_start(qpx);
  for (; i < n; ++i) {
    const SendWr& w = wrs[i];
    if (sq.full()) {
      *err = EAGAIN;
      st.sq_full.add();
      break;
    }
    const bool has_sge = w.opcode != WrOpcode::kRegMr && w.opcode != WrOpcode::kLocalInv;
    if (has_sge && (w.num_sge > q.max_sge || (w.num_sge > 0 && w.sg_list == nullptr))) {
      *err = EINVAL;
      break;
    }
    if (w.opcode == WrOpcode::kRegMr) {
      const int e = q.reg != nullptr ? q.reg->check(w) : EINVAL;
      if (e != 0) {
        *err = e;
        break;
      }
    } else if ((w.opcode == WrOpcode::kLocalInv && !q.local_inv) ||
               (w.opcode == WrOpcode::kSendWithInv && !q.send_inv)) {
      *err = EINVAL;
      break;
    }
    const bool signaled = (w.flags & kWrSignaled) != 0;
    const uint32_t seq = sq.push(w.wr_id, wc_opcode_for(w.opcode), signaled, false);
    const auto* sg = reinterpret_cast<const ibv_sge*>(w.sg_list);
    qpx->wr_id = encode_wr_id(q.gen, q.qp_index, false, seq);
    qpx->wr_flags = signaled ? IBV_SEND_SIGNALED : 0;
    switch (w.opcode) {
      case WrOpcode::kSend:
        ibv_wr_send(qpx);
        set_data(q, qpx, w);
        break;
      case WrOpcode::kSendWithInv:
        ibv_wr_send_inv(qpx, w.invalidate_rkey);
        set_data(q, qpx, w);
        st.send_inv.add();
        break;
      case WrOpcode::kRdmaWrite:
        ibv_wr_rdma_write(qpx, w.rkey, w.remote_addr);
        set_data(q, qpx, w);
        break;
      case WrOpcode::kRdmaRead:
        ibv_wr_rdma_read(qpx, w.rkey, w.remote_addr);
        ibv_wr_set_sge_list(qpx, w.num_sge, sg);
        break;
      case WrOpcode::kRegMr:
        q.reg->build(qpx, w);
        st.reg_mr.add();
        break;
      case WrOpcode::kLocalInv:
        ibv_wr_local_inv(qpx, w.invalidate_rkey);
        st.local_inv.add();
        break;
    }
    if (has_sge)
      for (uint32_t k = 0; k < w.num_sge; ++k) st.bytes_out.add(w.sg_list[k].length);
  }
  if (i == 0) {
    ibv_wr_abort(qpx);
    if (q.reg != nullptr) q.reg->finish(false);
    return 0;
  }
  if (int rc = ibv_wr_complete(qpx); rc != 0) {
    // Nothing of the chain was posted: give the slots back, undo keys.
    sq.tail = start;
    if (q.reg != nullptr) q.reg->finish(false);
    *err = rc == ENOMEM ? EAGAIN : rc;
    return 0;
  }
  if (q.reg != nullptr) q.reg->finish(true);
  st.doorbells.add();
  st.send_wrs.add(static_cast<uint64_t>(i));
  return i;
}

}  // namespace tern::verbs
