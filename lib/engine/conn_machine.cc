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

const char* conn_event_name(ConnEvent e) {
  switch (e) {
    case ConnEvent::kEstablished: return "established";
    case ConnEvent::kLost: return "lost";
    case ConnEvent::kDrained: return "drained";
    case ConnEvent::kSetupFailed: return "setup-failed";
    case ConnEvent::kClosed: return "closed";
    case ConnEvent::kGaveUp: return "gave-up";
    case ConnEvent::kPortDown: return "port-down";
    case ConnEvent::kAttempt: return "attempt";
    case ConnEvent::kAttemptFailed: return "attempt-failed";
  }
  return "?";
}

void ConnMachine::enter(ConnPhase to) {
  if (TERN_UNLIKELY(!machine_->allows(phase_, to))) conn_transition_refused(role_, phase_, to);
  const ConnPhase from = phase_;
  phase_ = to;
  entered(from);
}

// Where each event leads. The role's table then says whether it may: a
// server raising a client's event (kPortDown, kAttempt...) is refused like
// any other wrong transition.
void ConnMachine::raise(ConnEvent ev) {
  using P = ConnPhase;
  switch (ev) {
    case ConnEvent::kEstablished:
      enter(P::kReady);
      return;
    case ConnEvent::kLost:
      // Only a connection that was up comes back by itself: a first connect
      // that fails is the host's to retry (it may have the wrong address).
      enter(phase_ == P::kConnecting || !reconnect_wanted() ? P::kDraining : P::kDrainingToReconnect);
      return;
    case ConnEvent::kDrained:
      // Re-established only if nothing said otherwise while it drained
      // (close(), the engine's shutdown).
      enter(phase_ == P::kDrainingToReconnect && reconnect_wanted() ? P::kBackoff : P::kDead);
      return;
    case ConnEvent::kSetupFailed:
    case ConnEvent::kGaveUp:
      enter(P::kDead);
      return;
    case ConnEvent::kClosed:
      // Draining to reconnect: drains as before, and will not come back.
      // Between attempts: no QP to drain.
      enter(phase_ == P::kDrainingToReconnect ? P::kDraining : P::kDead);
      return;
    case ConnEvent::kPortDown:
      enter(P::kPortDown);
      return;
    case ConnEvent::kAttempt:
      enter(P::kReconnecting);
      return;
    case ConnEvent::kAttemptFailed:
      // Back to the backoff; from the backoff itself, nothing changes.
      if (phase_ == P::kPortDown) enter(P::kBackoff);
      return;
  }
}

void conn_transition_refused(const char* role, ConnPhase from, ConnPhase to) {
  TERN_CHECK(false, "%s connection: %s -> %s is not a transition of its machine (conn_machine.h)", role,
             conn_phase_name(from), conn_phase_name(to));
  __builtin_unreachable();
}

}  // namespace tern::rpc
