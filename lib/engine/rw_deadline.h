// RwDeadlines: server calls whose progress is in their peer's hands. A pull
// (the RDMA READs of a call's read chunks) completes only when the peer's
// side executes them, and a push (the WRITEs into its write and reply
// chunks, then the reply's Send) only when the peer takes them; on pmd/shm
// literally so, since the peer's driver executes our READs and WRITEs when
// its host polls. Until then the call holds bulk pool memory that every
// other peer shares. A peer that stops progressing would hold it forever;
// so each such call is on this list from its post, and one that is still
// there after EngineOptions::server_rw_timeout_ms costs its connection: the
// connection is dropped through the usual path (the QP to error, its WRs
// flushed, the drain), and the memory comes back only when the drain proves
// that the device can no longer touch it.
//
// A plain reply's Send is on the list too when it is signaled: a peer that
// never takes its replies (posts no receive for them, or stops progressing
// its QP) holds no bulk memory, but holds the call, its send buffer and its
// connection's credits just as long -- and loses its grant the same way.
//
// The bound is the same for every call and calls are armed with the time of
// their post, so the list is in deadline order: arming appends, the timer
// looks only at the front, and a call leaves from anywhere in O(1).
#pragma once

#include <cstdint>

#include "base/intrusive_list.h"
#include "engine/server_call.h"

namespace tern::rpc {

class RwDeadlines {
 public:
  // sc's peer must now do `what` (posted at `now`, ticks).
  void arm(SrvCall* sc, RwWait what, uint64_t now) {
    if (list_.linked(sc)) list_.remove(sc);
    sc->rw_since = now;
    sc->rw_what = what;
    list_.push_back(sc);
  }
  // It did (or its connection is gone, or the call is freed).
  void disarm(SrvCall* sc) {
    if (!list_.linked(sc)) return;
    list_.remove(sc);
    sc->rw_what = RwWait::kNone;
  }
  // The call whose deadline comes first, or nullptr.
  SrvCall* first() const { return list_.front(); }
  bool empty() const { return list_.empty(); }

 private:
  IntrusiveList<SrvCall, &SrvCall::rw_link> list_;
};

}  // namespace tern::rpc
