// The server call's state machine, in one file: its states (who owns the
// call in each, and who may free it), the events that move it, the table
// of allowed transitions, and enter(), the only code that writes a call's
// state (SrvCall keeps it private and names enter() its friend). What each
// event does is ServerConn::process (server_call_machine.cc); the receive,
// read/write and reply files raise events and never change a state.
//
// A server call has two owners: the handler side, from the moment the call
// is received until the handler replies (the engine holds that side while
// it waits for memory and pulls read chunks), and the Send side, from the
// reply's post until a completion proves its Send (and the RDMA WRITEs
// before it) done. It returns to the engine's pool only when both have let
// go, and only then do its buffers go back: the device may read its send
// buffer, its bulk results and its reply staging until that completion.
//
//   kFree --kReceived--> kWaitMemory --memory--> kPulling
//     |                       |                        | kPulled
//     |                       +--memory--> kInHandler <+
//     |                                     |        |
//     |                            kReplied |        | kReplied, no room
//     |                                     v        v
//     +--kErrorAnswer-------------------> kSent <-- kReplyQueued
//                                           |   kRoom
//                                           +--kSendReleased--> kFree
// and back to kFree: a call with nothing posted (kWaitMemory, kReplyQueued)
// at its connection's loss, a pulling one at the drain, a handler's one by
// drop(); a handler's call whose connection is lost becomes kOrphaned, freed
// by its reply() or drop().
#pragma once

#include <cstdint>

#include "base/check.h"
#include "engine/state_table.h"
#include "engine/server_call.h"

namespace tern::rpc {

enum class SrvState : uint8_t {
  // In the engine's pool (SlabTable): nobody owns it, it holds nothing.
  // The receive side takes it out; one that never left kFree (a message
  // refused before it became a call) goes straight back, any other only
  // through free_call, which enters kFree.
  kFree,
  // Received and decoded: the engine holds the handler's side. It waits,
  // in its peer's queue (bulk_share.h), for what it needs from the shared
  // pools before anything else happens -- a send buffer for its reply, and
  // from the bulk pool its read chunks' destinations (unless the handler
  // places them), its write chunks' result buffers (handlers without a
  // Placer) and its reply-chunk staging. All or nothing, so that no two
  // waiting calls can each hold what the other needs. Nothing is posted:
  // its connection's loss frees it at once.
  kWaitMemory,
  // The engine holds the handler's side; the RDMA READs of its read chunks
  // are posted (of the position-zero chunk alone, first, for an RDMA_NOMSG
  // call), or wait for send-queue room (pull_waiting). Their completion
  // moves it on; the device may write its read destinations until then, so
  // only the drain of its connection may free it.
  kPulling,
  // The handler owns it until reply(), reply_error() or drop() (the
  // engine's own answers pass through here too). Only the handler may end
  // it: drop() frees it.
  kInHandler,
  // The reply is encoded into its buffers, its WRITEs and Send in its
  // chain, which waits for send-queue room (posted from poll()). Nobody
  // holds the handler's side any more and nothing is posted: its
  // connection's loss frees it at once.
  kReplyQueued,
  // The reply's chain is posted (or its post was refused). The Send side
  // holds it until a completion walks past its context: only that
  // completion, or the drain when the post was refused, frees it.
  kSent,
  // Its connection died while the handler held it: the handler still owns
  // it, reply() is refused and, like drop(), frees it.
  kOrphaned,
};
inline constexpr int kSrvStates = 7;
static_assert(static_cast<int>(SrvState::kOrphaned) + 1 == kSrvStates);
// SrvCall's state starts as SrvState{} (server_call.h declares the enum
// without its values): that must be kFree.
static_assert(SrvState{} == SrvState::kFree);

const char* srv_state_name(SrvState s);

enum class SrvEvent : uint8_t {
  kReceived,      // a call arrived (rep attached, header decoded): take its memory
  kMemory,        // its turn in the memory queue, or send-queue room to pull
  kPulled,        // its READ chain completed (status in the event's wc)
  kReplied,       // the reply is encoded (reply(), reply_error(), or the engine's own answer)
  kErrorAnswer,   // an RDMA_ERROR answer to a message that never became a call is encoded
  kDropped,       // the handler let go without an answer (drop(), or reply() to an orphan)
  kRoom,          // retry a queued reply's post
  kSendReleased,  // a send-queue completion walked past its reply's context
  kConnLost,      // its connection is lost (draining)
  kDrained,       // its connection's QP is drained
};

// kSrvTransitions[from][to]: whether a call may go from `from` to `to`.
// Anything else is the engine's bug -- a call freed twice, or freed while
// the device may still touch its memory, or answered twice.
inline constexpr bool kSrvTransitions[kSrvStates][kSrvStates] = {
    //              to: Free   WaitMem Pulling InHandl Queued Sent   Orphan
    /* kFree        */ {false, true,   false,  false,  false, true,  false},  // received; RDMA_ERROR answer
    /* kWaitMemory  */ {true,  false,  true,   true,   false, false, false},  // conn lost; memory: pull or handler
    /* kPulling     */ {true,  false,  false,  true,   false, false, false},  // drained; pulled
    /* kInHandler   */ {true,  false,  false,  false,  true,  true,  true},   // dropped; replied (no room; posted); lost
    /* kReplyQueued */ {true,  false,  false,  false,  false, true,  false},  // conn lost; room
    /* kSent        */ {true,  false,  false,  false,  false, false, false},  // its Send released (or drained)
    /* kOrphaned    */ {true,  false,  false,  false,  false, false, false},  // its handler replied or dropped it
};
inline constexpr Transitions<SrvState, kSrvStates> kSrvMachine{kSrvTransitions};

constexpr bool srv_may_enter(SrvState from, SrvState to) { return kSrvMachine.allows(from, to); }

// The table's shape, checked when it is compiled (state_table.h); a call
// goes round, back to kFree, where it started.
static_assert(transitions_sound(kSrvTransitions, static_cast<int>(SrvState::kFree), -1));
static_assert(every_state_used(kSrvTransitions, static_cast<int>(SrvState::kFree)));

// The one writer of a call's state. A transition the table does not allow
// is caught always, release builds included (TERN_CHECK, not TERN_ASSERT):
// it means a call is freed twice, or freed while the device may still read
// or write its buffers, or answered twice -- memory corruption that would
// otherwise surface far away, on another peer's call. The check is a
// shift of a constant and a branch, four times per plain RPC.
//
// The report is out of line and cold: what is inlined at each transition
// is the test alone.
[[noreturn, gnu::cold, gnu::noinline]] void srv_transition_refused(const SrvCall* sc, SrvState to);
[[gnu::always_inline]] inline void enter(SrvCall* sc, SrvState to) {
  if (TERN_UNLIKELY(!srv_may_enter(sc->state_, to))) srv_transition_refused(sc, to);
  note_transition(MachineKind::kServerCall, static_cast<int>(sc->state_), static_cast<int>(to));
  sc->state_ = to;
}

}  // namespace tern::rpc
