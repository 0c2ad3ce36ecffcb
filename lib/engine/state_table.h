// What the engine's state machines share (request_machine.h,
// server_call_machine.h, conn_machine.h): a table of allowed transitions,
// written as rows -- from each state, the states it may go to -- and turned,
// when it is compiled, into the form enter() tests: for each target state,
// the set of states it may be entered from, as a bit mask. enter() with a
// constant target then tests one bit of a constant (one shift and one
// branch, as a hand-written mask would); with a table chosen at run time
// (a connection's role), one bit of a loaded byte.
//
// And the shape every machine's table must have, checked by static_assert
// where the table is written: nothing stays where it is, every state in use
// but the first is entered from somewhere, every state in use but the last
// is left for somewhere, and the last (when the machine has one) is left
// for nothing.
#pragma once

#include <cstdint>
#include <type_traits>

namespace tern::rpc {

// A test's view of the transitions the request and server-call machines
// take (tests/unit/call_machines_test.cc drives a ClientConn and a
// ServerConn over stubs and checks that together they take every table
// entry). Called from enter() only where the library was compiled with
// TERN_DEBUG (detail::debug_checks_compiled(), base/check.h): a release
// build has no watch and pays nothing. The connection machine needs none:
// its phase is read after each step (a step takes one transition).
enum class MachineKind : uint8_t { kRequest, kServerCall };
using TransitionWatch = void (*)(MachineKind machine, int from, int to);
// Not `detail`: code that includes this beside a `using namespace` of its
// own `detail` (bench/) would find two.
namespace machine_watch {
inline TransitionWatch g_transition_watch = nullptr;
}
// nullptr: none. Not thread-safe; tests only.
inline void watch_transitions(TransitionWatch w) { machine_watch::g_transition_watch = w; }
inline void note_transition([[maybe_unused]] MachineKind machine, [[maybe_unused]] int from,
                            [[maybe_unused]] int to) {
#if defined(TERN_DEBUG) && TERN_DEBUG
  if (machine_watch::g_transition_watch != nullptr) [[unlikely]]
    machine_watch::g_transition_watch(machine, from, to);
#endif
}

template <typename State, int N>
class Transitions {
  static_assert(N > 0 && N <= 32, "a state must fit a bit of the mask");

 public:
  using Rows = bool[N][N];
  using Mask = std::conditional_t<(N <= 8), uint8_t, uint32_t>;

  // rows[from][to]: whether a machine in `from` may enter `to`.
  constexpr explicit Transitions(const Rows& rows) : sources_{} {
    for (int to = 0; to < N; ++to)
      for (int from = 0; from < N; ++from)
        if (rows[from][to]) sources_[to] = static_cast<Mask>(sources_[to] | (1u << from));
  }

  constexpr bool allows(State from, State to) const {
    return ((sources_[static_cast<int>(to)] >> static_cast<int>(from)) & 1u) != 0;
  }
  // The states `to` may be entered from, one bit each.
  constexpr Mask sources(State to) const { return sources_[static_cast<int>(to)]; }

 private:
  Mask sources_[N];
};

// Whether some row enters s / whether s's row enters anything.
template <int N>
constexpr bool state_entered(const bool (&rows)[N][N], int s) {
  for (int f = 0; f < N; ++f)
    if (rows[f][s]) return true;
  return false;
}
template <int N>
constexpr bool state_left(const bool (&rows)[N][N], int s) {
  for (int t = 0; t < N; ++t)
    if (rows[s][t]) return true;
  return false;
}

// The shape every table has. `first`: where a machine starts; `last`: the
// state it ends in and never leaves, or -1 for a machine that goes round
// (a pooled object returns to where it started). A state no row enters and
// that is not `first` is not in use (a role's table leaves out the other
// role's states) and may have an empty row.
template <int N>
constexpr bool transitions_sound(const bool (&rows)[N][N], int first, int last) {
  for (int s = 0; s < N; ++s) {
    if (rows[s][s]) return false;
    const bool used = s == first || state_entered(rows, s);
    if (s == last) {
      if (state_left(rows, s)) return false;
    } else if (used && !state_left(rows, s)) {
      return false;
    }
  }
  return true;
}

// Every state is in use: entered from somewhere, or where the machine starts.
template <int N>
constexpr bool every_state_used(const bool (&rows)[N][N], int first) {
  for (int s = 0; s < N; ++s)
    if (s != first && !state_entered(rows, s)) return false;
  return true;
}

}  // namespace tern::rpc
