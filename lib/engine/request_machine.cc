#include "engine/request_machine.h"

namespace tern::rpc {

const char* req_state_name(ReqState s) {
  switch (s) {
    case ReqState::kFree: return "free";
    case ReqState::kBacklog: return "backlog";
    case ReqState::kSent: return "sent";
    case ReqState::kInvalidating: return "invalidating";
    case ReqState::kOrphaned: return "orphaned";
    case ReqState::kCompleted: return "completed";
    case ReqState::kAbandoned: return "abandoned";
  }
  return "?";
}

}  // namespace tern::rpc
