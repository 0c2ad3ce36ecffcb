// SendQueue: the one path by which the engine posts work requests -- a
// call's REG_MRs and Send, a LOCAL_INV chain, a server's RDMA READs, a
// reply's RDMA WRITEs and Send, an RDMA_ERROR -- with one room check (the
// send-queue budget and a free send context) and one sequence store (the
// context remembers where in the queue its chain ended).
//
// Every WR of a chain carries the chain's wr_id: the connection's slot in
// the engine and the chain's context in the ring (wr_id.h), so a completion
// finds its connection and its object without a search.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "engine/send_ctx_ring.h"
#include "engine/sq_budget.h"
#include "engine/wr_chain.h"
#include "engine/wr_id.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

class SendQueue {
 public:
  SendQueue(uint32_t depth, uint32_t ring_size, uint32_t batch) : budget_(depth), ring_(ring_size, batch) {}

  // Whether a chain of n WRs can be posted now.
  bool room(int n) const { return !ring_.full() && budget_.room(static_cast<uint32_t>(n)); }

  enum class Posted : uint8_t {
    kOk,       // the QP took the whole chain
    kRefused,  // it took only part of it (or none): the connection is failing;
               // the chain's context was cancelled if its last WR was not taken
  };
  // Posts `chain` (room() checked first) for the object obj of `kind`;
  // *signaled says whether its last WR was signaled, *err why a refusal.
  // `signal` forces the last WR to be signaled.
  // Inline: it is on every call's and every reply's path.
  Posted post(rdma::Qp* qp, uint32_t conn_slot, WrChain& chain, SendCtxKind kind, uint32_t obj, bool* signaled,
              int* err, bool signal = false) {
    TERN_ASSERT(!chain.empty() && room(chain.size()));
    const auto n = static_cast<uint32_t>(chain.size());
    uint64_t seq = budget_.post(n);
    uint32_t idx = ring_.acquire(kind, obj, seq, signaled, signal);
    const uint64_t id = make_wr_id(WrKind::kChain, conn_slot, idx);
    rdma::SendWr* w = chain.data();
    // Every WR carries the chain's wr_id: a failed unsignaled WR (which does
    // complete) then lands on its own chain's context.
    for (uint32_t i = 0; i < n; ++i) {
      w[i].wr_id = id;
      w[i].flags = 0;
    }
    if (*signaled) w[n - 1].flags = rdma::kWrSignaled;
    *err = 0;
    int took = qp->post_send(w, static_cast<int>(n), err);
    if (TERN_LIKELY(static_cast<uint32_t>(took) == n)) return Posted::kOk;
    // Nothing after `took` was posted. If the last WR was not, no completion
    // will carry this context's own signal: it releases nobody.
    ring_.cancel(idx);
    return Posted::kRefused;
  }

  // A completion of one of our chains (successful or not): walks the ring
  // through its context, retiring the send-queue budget up to the walked
  // contexts' sequence; done(ctx, own) for each.
  template <typename Done>
  uint32_t complete(const rdma::Wc& wc, Done&& done) {
    uint64_t last_seq = 0;
    uint32_t n = ring_.complete_through(wr_id_value(wc.wr_id), [&](const SendCtx& c, bool own) {
      last_seq = c.seq;
      done(c, own);
    });
    if (n > 0) budget_.retire(last_seq);
    return n;
  }
  // Teardown, once the QP is drained: every context left (the unsignaled tail).
  template <typename Done>
  uint32_t release_all(Done&& done) {
    uint32_t n = ring_.release_all(done);
    budget_.retire_all();
    return n;
  }

  const SendCtxRing& ring() const { return ring_; }
  const SqBudget& budget() const { return budget_; }
  uint32_t contexts_in_use() const { return ring_.in_use(); }

 private:
  SqBudget budget_;
  SendCtxRing ring_;
};

}  // namespace tern::rpc
