#include "engine/send_queue.h"

#include "base/check.h"

namespace tern::rpc {

using namespace tern::rdma;

SendQueue::Posted SendQueue::post(Qp* qp, uint32_t conn_slot, WrChain& chain, SendCtxKind kind, uint32_t obj,
                                  bool* signaled, int* err, bool signal) {
  TERN_ASSERT(!chain.empty() && room(chain.size()));
  const auto n = static_cast<uint32_t>(chain.size());
  uint64_t seq = budget_.post(n);
  uint32_t idx = ring_.acquire(kind, obj, seq, signaled, signal);
  const uint64_t id = make_wr_id(WrKind::kChain, conn_slot, idx);
  SendWr* w = chain.data();
  // Every WR carries the chain's wr_id: a failed unsignaled WR (which does
  // complete) then lands on its own chain's context.
  for (uint32_t i = 0; i < n; ++i) {
    w[i].wr_id = id;
    w[i].flags = 0;
  }
  if (*signaled) w[n - 1].flags = kWrSignaled;
  *err = 0;
  int took = qp->post_send(w, static_cast<int>(n), err);
  if (static_cast<uint32_t>(took) == n) return Posted::kOk;
  // Nothing after `took` was posted. If the last WR was not, no completion
  // will carry this context's own signal: it releases nobody.
  ring_.cancel(idx);
  return Posted::kRefused;
}

}  // namespace tern::rpc
