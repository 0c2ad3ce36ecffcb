#include "engine/conn_machine.h"

namespace tern::rpc {

const char* conn_phase_name(ConnPhase p) {
  switch (p) {
    case ConnPhase::kConnecting: return "connecting";
    case ConnPhase::kReady: return "ready";
    case ConnPhase::kDraining: return "draining";
    case ConnPhase::kDead: return "dead";
    case ConnPhase::kDrainingToReconnect: return "draining-to-reconnect";
    case ConnPhase::kBackoff: return "backoff";
    case ConnPhase::kPortDown: return "port-down";
    case ConnPhase::kReconnecting: return "reconnecting";
  }
  return "?";
}

void conn_transition_refused(const char* role, ConnPhase from, ConnPhase to) {
  TERN_CHECK(false, "%s connection: %s -> %s is not a transition of its machine (conn_machine.h)", role,
             conn_phase_name(from), conn_phase_name(to));
  __builtin_unreachable();
}

}  // namespace tern::rpc
