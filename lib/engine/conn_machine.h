// A connection's state machine: its phases, the events that move it, and
// one table of allowed transitions per role. A connection's phase is
// written only by ConnMachine::raise (conn_machine.cc), which chooses the
// phase an event leads to and enters it through the private enter(); that
// checks its role's table, so that a transition
// nobody designed (a dead connection brought back up, a server connection
// asked to reconnect, a drain skipped) is caught where it happens instead
// of surfacing later as a call completed twice or an MR released under a
// REG_MR still in flight.
//
// One enum for both roles, one table per role. The phases a client and a
// server connection share -- connecting, ready, draining, dead -- mean the
// same in both and are read by the shared code (the datapath, the drain,
// the engine's poll); a client adds the phases of re-establishing itself
// after a loss. The role's table is chosen when the connection is made
// (ClientConn and ServerConn pass theirs), so a server connection entering
// a client-only phase is refused like any other wrong transition, with no
// role flag anywhere.
//
// What is NOT a phase stays a fact beside it: close() was called
// (ConnBase::user_closed: the host let go, whatever the phase), remote
// invalidation was negotiated, the drain markers are posted, a server
// connection is counted in the admission table or was reaped. The host's
// view of a client connection (ConnState, engine.h) is derived from the
// phase and user_closed (ClientConn::state()), never stored.
//
//   client: kConnecting -> kReady -> kDraining -> kDead           (lost for good)
//                          kReady -> kDrainingToReconnect -> kBackoff (lost, reconnecting)
//           kBackoff <-> kPortDown -> kReconnecting -> kReady        (re-established)
//           kReconnecting -> kDrainingToReconnect                    (the attempt failed)
//           kBackoff, kPortDown -> kDead                             (gave up, closed)
//           close() in any live phase leads to kDraining (or kDead with no QP)
//   server: kConnecting -> kReady -> kDraining -> kDead
//
// Leaving kDead is the engine's reclaim: the object is destroyed (when the
// role's reclaimable() says so), so the machine has no state after it.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "engine/state_table.h"

namespace tern::rpc {

enum class ConnPhase : uint8_t {
  // Client: connect() sent, no answer yet; it was never up. Server:
  // accepted, not yet established (its kEstablished event or its first
  // receive establishes it). Nothing has been sent to the peer.
  kConnecting,
  // Established: calls flow.
  kReady,
  // Lost (the peer went, a protocol error, close(), a connect refused or
  // timed out, keepalive) and not coming back: the QP is in error and
  // flushes every WR; drain markers follow them (ib_drain_qp's way), and
  // nothing is released until their flush completions prove the queues
  // empty -- an MR whose REG_MR or LOCAL_INV is still in flight must not be
  // touched. Then kDead.
  kDraining,
  // Drained: every WR of ours has completed; the unsignaled Sends' owners
  // are released, the registrations of unfinished calls destroyed, and
  // every call completed once (kDisconnected). A client connection waits
  // for close(); a server connection for the handlers still holding its
  // calls. Then the engine reclaims it.
  kDead,
  // Client only: lost after having been up, with reconnecting wanted
  // (EngineOptions::reconnect, not closed, the engine not shutting down).
  // Drains as kDraining does; then the calls in flight are sent again on
  // the next QP (kBackoff) -- or fail, if by then close() or the engine's
  // shutdown said otherwise (kDead).
  kDrainingToReconnect,
  // Client only: drained, and its QP destroyed; a new one is made and
  // connected when the backoff (with jitter) says. Calls are accepted and
  // wait in the backlog. Gives up (kDead) past reconnect_give_up_ms.
  kBackoff,
  // Client only: as kBackoff, but the device's port is down: no attempt
  // (a connect whose request left as the port went down can wedge the
  // device's connection manager), the port is looked at again every
  // reconnect_min_ms, and the first attempt after it is up starts the
  // backoff from its floor.
  kPortDown,
  // Client only: a new QP's connect is under way after an outage. Like
  // kConnecting (nothing posted yet), but the host sees kReconnecting and a
  // failure here goes back to the backoff.
  kReconnecting,
};
inline constexpr int kConnPhases = 8;
static_assert(static_cast<int>(ConnPhase::kReconnecting) + 1 == kConnPhases, "a phase the tables have no row for");
const char* conn_phase_name(ConnPhase p);

using ConnTable = bool[kConnPhases][kConnPhases];

// kClientConnTransitions[from][to]: whether a client connection may go
// from `from` to `to`.
inline constexpr ConnTable kClientConnTransitions = {
    //                       to: Connect Ready  Drain  Dead   DrainRe Backoff PortDn Reconn
    /* kConnecting          */ {false, true,  true,  true,  false, false, false, false},  // up; lost; never set up
    /* kReady               */ {false, false, true,  false, true,  false, false, false},  // lost; lost, to reconnect
    /* kDraining            */ {false, false, false, true,  false, false, false, false},  // drained
    /* kDead                */ {false, false, false, false, false, false, false, false},  // reclaimed (destroyed)
    /* kDrainingToReconnect */ {false, false, true,  true,  false, true,  false, false},  // closed; shut down; drained
    /* kBackoff             */ {false, false, false, true,  false, false, true,  true},   // gave up; port down; attempt
    /* kPortDown            */ {false, false, false, true,  false, true,  false, true},   // gave up; refused; attempt
    /* kReconnecting        */ {false, true,  true,  false, true,  false, false, false},  // up; closed; attempt lost
};

// The same for a server connection: it never re-establishes itself (its
// client does, with a new connection).
inline constexpr ConnTable kServerConnTransitions = {
    //                       to: Connect Ready  Drain  Dead   DrainRe Backoff PortDn Reconn
    /* kConnecting          */ {false, true,  true,  true,  false, false, false, false},  // up; lost; accept failed
    /* kReady               */ {false, false, true,  false, false, false, false, false},  // lost
    /* kDraining            */ {false, false, false, true,  false, false, false, false},  // drained
    /* kDead                */ {false, false, false, false, false, false, false, false},  // reclaimed (destroyed)
    /* kDrainingToReconnect */ {false, false, false, false, false, false, false, false},
    /* kBackoff             */ {false, false, false, false, false, false, false, false},
    /* kPortDown            */ {false, false, false, false, false, false, false, false},
    /* kReconnecting        */ {false, false, false, false, false, false, false, false},
};

// What enter() tests (state_table.h): for each target phase, the phases it
// may be entered from, one bit each.
using ConnTransitions = Transitions<ConnPhase, kConnPhases>;
inline constexpr ConnTransitions kClientConnMachine{kClientConnTransitions};
inline constexpr ConnTransitions kServerConnMachine{kServerConnTransitions};

// The tables' shape, checked when they are compiled (state_table.h): a
// connection starts in kConnecting and ends in kDead. And kDead is reached
// only from a phase with no QP work left (a drain, a backoff, or a connect
// whose setup failed before anything was posted); a server never enters a
// client-only phase.
constexpr bool conn_table_sound(const ConnTable& t) {
  constexpr auto dead = static_cast<int>(ConnPhase::kDead);
  return transitions_sound(t, static_cast<int>(ConnPhase::kConnecting), dead) &&
         !t[static_cast<int>(ConnPhase::kReady)][dead] && !t[static_cast<int>(ConnPhase::kReconnecting)][dead];
}
static_assert(conn_table_sound(kClientConnTransitions));
static_assert(conn_table_sound(kServerConnTransitions));
static_assert(kServerConnMachine.sources(ConnPhase::kDrainingToReconnect) == 0 &&
              kServerConnMachine.sources(ConnPhase::kBackoff) == 0 &&
              kServerConnMachine.sources(ConnPhase::kPortDown) == 0 &&
              kServerConnMachine.sources(ConnPhase::kReconnecting) == 0);

// What happens to a connection: the inputs of ConnMachine::raise. The
// connection code (conn_lifecycle.cc, client_recovery.cc, the drain, the
// engine's connect and accept) says what happened; raise() alone decides
// the phase it leads to, from the phase and the role's facts.
enum class ConnEvent : uint8_t {
  kEstablished,    // the peer's answer to the connect or accept (or a server's first receive): up
  kLost,           // the peer went, a protocol error, close(), a connect refused or timed out
  kDrained,        // the drain proved the QP empty (or nothing was ever posted)
  kSetupFailed,    // connect() or accept() failed at once: never up, nothing posted, never handed out
  kClosed,         // close() between attempts (no QP to drain), or while draining to reconnect
  kGaveUp,         // no connection for reconnect_give_up_ms
  kPortDown,       // between attempts, the device's port is down
  kAttempt,        // a new QP's connect is under way
  kAttemptFailed,  // an attempt failed before it was under way (setup, or connect() refused)
};
const char* conn_event_name(ConnEvent e);

// The report of a transition the role's table does not allow (a TERN_CHECK
// failure: aborts, release builds included). Only ConnMachine::enter calls it.
[[noreturn, gnu::cold, gnu::noinline]] void conn_transition_refused(const char* role, ConnPhase from, ConnPhase to);

// A connection's phase. ConnBase derives from it; only raise() writes it.
class ConnMachine {
 public:
  // `machine`: the role's table (kClientConnMachine or kServerConnMachine);
  // `role`: its name in a refusal's report.
  ConnMachine(const ConnTransitions* machine, const char* role) : machine_(machine), role_(role) {}
  virtual ~ConnMachine() = default;
  ConnPhase phase() const { return phase_; }

  // The one way a connection changes phase: the phase `ev` leads to from
  // this one, entered (conn_machine.cc has the choices). Out of line:
  // events are rare, a few per connection's life, never per call.
  void raise(ConnEvent ev);

 protected:
  // After every transition: what the role does about it (a client tells
  // its host when the state it sees changed).
  virtual void entered(ConnPhase from) { (void)from; }
  // Whether a lost connection comes back by itself: never for a server (its
  // client makes a new one); a client says (ClientConn::reconnect_wanted).
  virtual bool reconnect_wanted() const { return false; }

 private:
  // A transition its role's table does not allow is the engine's bug:
  // TERN_CHECK, always on.
  void enter(ConnPhase to);

  ConnPhase phase_ = ConnPhase::kConnecting;
  const ConnTransitions* machine_;
  const char* role_;
};

}  // namespace tern::rpc
