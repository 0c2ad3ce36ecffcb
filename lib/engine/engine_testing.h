// For tests only: what the engine holds outside its pools right now, so a
// test can check that every request, receive buffer, send context, MR and
// bulk buffer came back exactly once (accounting), not only assert it.
#pragma once

#include <string>

#include "engine/engine.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc::testing {

struct Accounting {
  uint64_t requests_out = 0, srv_calls_out = 0, send_bufs_out = 0, recv_bufs_held = 0, bulk_blocks_out = 0,
           mrs_registered = 0, send_ctxs_in_use = 0;
  bool idle() const {
    return requests_out == 0 && srv_calls_out == 0 && send_bufs_out == 0 && recv_bufs_held == 0 &&
           bulk_blocks_out == 0 && mrs_registered == 0 && send_ctxs_in_use == 0;
  }
  std::string to_string() const;
};

// What `e` holds outside its pools.
Accounting accounting(const Engine& e);
// Whether recycled buffers are poisoned (test builds).
bool poisons(const Engine& e);
// Injects a driver fault (rdmadev.h's Fault) into the QP a connection runs
// on now, as the recovery tests and tern-soak break connections on purpose.
// kBadState when it has none (between reconnect attempts); kUnsupported
// from drivers without fault injection (pmd/shm has it).
Status inject_fault(Connection* c, const rdma::Fault& f);

}  // namespace tern::rpc::testing
