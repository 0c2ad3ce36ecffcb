// ListenGroup (engine.h): several engines, each on its own thread, serving
// one address. The first engine to listen() with the group listens on its
// device; every connection request it receives is dealt, in turn, to a
// member of the group. Its own turn it accepts as usual; another member's
// turn it detaches the request from its device (Device::detach) and puts it
// in that member's inbox, and the member -- in its next poll_cm, woken
// through its eventfd when it sleeps in wait mode -- adopts it on its own
// device (Device::adopt) and accepts it there, with its own queues,
// protection domain and memory. The connection is that engine's from then
// on: no engine ever touches another's objects.
//
// The inboxes are the only state shared between threads, under one mutex
// (the control path: one lock per connection request). A member that
// leaves (its engine is destroyed) takes no more requests; those waiting in
// its inbox are destroyed, which refuses them.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "rdmadev/rdmadev.h"

namespace tern::rpc {

struct ListenMember {
  ~ListenMember();
  int efd = -1;                      // eventfd: counts requests handed in
  std::atomic<bool> pending{false};  // the inbox has something (read without the lock)
  bool left = false;                 // under the group's mutex
  uint64_t dealt = 0;                // under the group's mutex
  std::deque<std::unique_ptr<rdma::ConnRequest>> inbox;  // under the group's mutex
  // Consumes the eventfd's count (wait mode); true if there was one.
  bool ack_wake();
};

class ListenGroupImpl final : public ListenGroup {
 public:
  std::vector<uint64_t> dealt() const override;

  // A new member for an engine listening on `spec`. *first: it is the one
  // that listens on the device. kInvalidArgument: another spec than the
  // group's.
  Result<std::shared_ptr<ListenMember>> join(std::string_view spec, bool* first);
  void leave(const std::shared_ptr<ListenMember>& m);
  // Whose turn the next request is (counted as dealt to it).
  std::shared_ptr<ListenMember> next();
  // Puts a detached request in m's inbox and wakes it; false (the request
  // is destroyed: refused) when m has left meanwhile.
  bool hand(const std::shared_ptr<ListenMember>& m, std::unique_ptr<rdma::ConnRequest> req);
  std::deque<std::unique_ptr<rdma::ConnRequest>> take(ListenMember* m);

 private:
  mutable std::mutex mu_;
  std::string spec_;
  std::vector<std::shared_ptr<ListenMember>> members_;  // in joining order, those that left included
  size_t turn_ = 0;
};

}  // namespace tern::rpc
