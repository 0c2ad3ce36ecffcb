// The client request's state machine: its states, the events that move it,
// and the one table of allowed transitions. A request's state is written
// only by ReqMachine::enter, which checks the table, so that a transition
// nobody designed (a completed call sent again, a free request answered) is
// caught where it happens instead of corrupting the pools later. The
// decisions -- which event moves a request where -- are ClientConn::process
// and the few helpers it calls (finish, abandon, requeue, retire_abandoned,
// maybe_free), all in request_machine.cc, the one file that calls enter();
// the call, reply, recovery and drain code raises events (process).
//
// A request has two owners (docs/engine.md, "Ownership and the
// invariants"): the RPC side, from call() until its callback has run, and
// the Send side, from the post of its Send until a completion proves that
// Send done. The state says which of them may still be holding it and who
// may give it back to the engine's table.
#pragma once

#include <cstdint>

#include "base/check.h"
#include "engine/state_table.h"

namespace tern::rpc {

enum class ReqState : uint8_t {
  // In the engine's table (SlabTable): owned by nobody, holds nothing (I5).
  // Only SlabTable::get takes it out, and call() or a keepalive probe
  // enters it into a backlog.
  kFree,
  // Accepted by call() and queued on its connection: waits for a credit, a
  // receive reservation, a send buffer, MRs, long-call staging or
  // send-queue room. Owner: the RPC side alone (no Send posted). Holds its
  // copied arguments and, at the backlog's head, what it has gathered so
  // far. Freed only through kCompleted (refused, expired, or the connection
  // failed for good).
  kBacklog,
  // REG_MRs and Send posted: waits for the reply. Owners: the RPC side and,
  // once the post succeeded, the Send side. Holds a credit, its xid's entry
  // in the connection's table, its send buffer and its registrations; the
  // server may read and write its chunks. Nothing may free it here: the
  // reply, an expiry (kAbandoned) or the connection's loss (kOrphaned) must
  // move it first.
  kSent,
  // The reply is attached (I2) and the LOCAL_INV chain for its
  // registrations is posted or waits for room: the chain's completion
  // completes the call (I3). Owners as in kSent, but the credit and the xid
  // are given back.
  kInvalidating,
  // Its connection was lost while it was sent or invalidating: it waits for
  // the QP to drain (nothing may touch its MRs before), then its MRs (state
  // unknown) are destroyed and it completes, or it is sent again on the new
  // connection (back to kBacklog, same xid).
  kOrphaned,
  // Completed: the callback has run and the RPC side has let go. Owner: the
  // Send side, if its Send is not yet known complete (the device may still
  // read its send buffer); whichever owner lets go last gives it back to
  // the table (ClientConn::maybe_free).
  kCompleted,
  // Timed out or cancelled while sent, with nothing registered: its caller
  // has its status and the RPC side has let go, but the server may still
  // answer. It keeps its credit, its receive reservation and its xid's
  // entry until that late reply (dropped and counted) or the drain; it
  // holds no memory of the caller's. Completes (kCompleted) when either
  // comes; never freed from here directly.
  kAbandoned,
};
inline constexpr int kReqStates = 7;
static_assert(static_cast<int>(ReqState::kAbandoned) + 1 == kReqStates, "a state the table has no row for");
const char* req_state_name(ReqState s);
// The report of a transition the table does not allow (a TERN_CHECK
// failure: aborts, release builds included). Only ReqMachine::enter calls it.
[[noreturn, gnu::cold, gnu::noinline]] void req_transition_refused(ReqState from, ReqState to);

// What happens to a request: the inputs of ClientConn::process
// (request_machine.cc), the only code that changes a request's state.
enum class ReqEvent : uint8_t {
  kAccepted,      // call() or a keepalive probe filled it in: it enters the backlog
  kSubmit,        // the backlog's head gets its turn: try to send it
  kPosting,       // send() has what the call needs and its chain encoded: posted next
  kReply,         // a reply matched its xid (attached as Request::reply; a reply it cannot
                  // use sets Request::result's status), or its LOCAL_INV chain found room
  kInvalidated,   // its LOCAL_INV chain completed successfully
  kSendReleased,  // a send-queue completion walked past its Send's context (or teardown did)
  kConnLost,      // its connection is lost (draining): a call in flight is orphaned
  kDrained,       // its connection's QP is drained: orphans are sent again, or fail
  kExpire,        // its deadline passed, or its caller cancelled it (Request::expire says which)
  kLateReply,     // the reply of an abandoned call came (its credit and xid already given back)
};

// kReqTransitions[from][to]: whether a request may go from `from` to `to`.
// Every write of a request's state is checked against it (always, release
// builds included: a wrong transition is a use-after-free in the making,
// and the check costs a test of a constant bit mask: state_table.h).
inline constexpr bool kReqTransitions[kReqStates][kReqStates] = {
    //               to: Free   Backlog Sent   Invalid Orphan Complet Abandon
    /* kFree         */ {false, true,   false, false,  false, false,  false},  // call() or a probe
    /* kBacklog      */ {false, false,  true,  false,  false, true,   false},  // posted; refused/expired/failed
    /* kSent         */ {false, false,  false, true,   true,  false,  true},   // reply; lost; expired unregistered
    /* kInvalidating */ {false, false,  false, false,  true,  true,   false},  // lost; fenced
    /* kOrphaned     */ {false, true,   false, false,  false, true,   false},  // sent again; completes at the drain
    /* kCompleted    */ {true,  false,  false, false,  false, false,  false},  // both owners let go
    /* kAbandoned    */ {false, false,  false, false,  false, true,   false},  // late reply or drain
};
inline constexpr Transitions<ReqState, kReqStates> kReqMachine{kReqTransitions};

constexpr bool req_transition_allowed(ReqState from, ReqState to) { return kReqMachine.allows(from, to); }

// The table's shape, checked when it is compiled (state_table.h), with
// every state in use and kFree reached only from kCompleted (both owners
// have let go: I4). A request goes round: back to kFree, where it started.
static_assert(transitions_sound(kReqTransitions, static_cast<int>(ReqState::kFree), -1));
static_assert(every_state_used(kReqTransitions, static_cast<int>(ReqState::kFree)));
static_assert(kReqMachine.sources(ReqState::kFree) == 1u << static_cast<int>(ReqState::kCompleted));

// A request's state. Request derives from it; only enter() writes it.
class ReqMachine {
 public:
  ReqState state() const { return state_; }

  // The one way a request changes state. A transition the table does not
  // allow is the engine's bug: TERN_CHECK (always on, even in release
  // builds), since a request in a state it should not be in is a double
  // completion or a freed request still in use -- never to be silent.
  // The test is inline (a bit of a constant, one branch); the report is
  // out of line and cold, so that the callers -- maybe_free above all --
  // stay small enough to be inlined on the call's path.
  void enter(ReqState to) {
    if (TERN_UNLIKELY(!kReqMachine.allows(state_, to))) req_transition_refused(state_, to);
    note_transition(MachineKind::kRequest, static_cast<int>(state_), static_cast<int>(to));
    state_ = to;
  }

 private:
  ReqState state_ = ReqState::kFree;
};

}  // namespace tern::rpc
