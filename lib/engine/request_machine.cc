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

void req_transition_refused(ReqState from, ReqState to) {
  TERN_CHECK(req_transition_allowed(from, to),
             "request: %s -> %s is not a transition of the request machine (request_machine.h)",
             req_state_name(from), req_state_name(to));
  __builtin_unreachable();  // only called for a refused transition
}

}  // namespace tern::rpc
