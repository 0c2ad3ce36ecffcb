// Private to lib/capi: what the C handles are on the C++ side, and how a
// failed C++ Status becomes a negative errno plus tern_last_error() text.
//
// tern_engine and tern_conn are small wrappers; tern_server_call and
// tern_arena are the C++ objects themselves behind an opaque pointer. Only
// engine.h's public API is used, never the engine's internals.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/intrusive_list.h"
#include "base/result.h"
#include "engine/engine.h"
#include "tern/tern.h"

namespace tern::capi {

// The negative errno for a C++ error kind (the table in tern.h).
int errno_for(Errc code);

// Records why a control-path call failed (tern_last_error) and returns the
// negative errno to hand back.
int fail(const Status& st);
// The same for a reason that is a static string: no formatting, no allocation.
int fail_static(int neg_errno, const char* why);

// The engine's bookkeeping for one call issued from C: which C callback gets
// the completion, and the credentials the engine reads until the call is sent
// (a backlogged call is marshaled later). Pooled per engine: no allocation per
// call once the pool has grown to the calls in flight.
struct CallRecord {
  tern_call_done_fn done = nullptr;
  void* ctx = nullptr;
  tern_engine* owner = nullptr;
  ListLink<CallRecord> free_link;  // on its engine's free records
  rpc::AuthSys auth;
};

// One C handler registration: the trampoline's context.
struct HandlerRecord {
  uint32_t prog, vers, proc;
  tern_handler_fn fn;
  void* ctx;
};

}  // namespace tern::capi

struct tern_conn {
  tern::rpc::Connection* conn;
  tern_engine* owner;
  // The host's state-change callback (tern_conn_on_state_change).
  tern_conn_state_fn state_fn;
  void* state_ctx;
  // On the engine's list of open handles, to free what is left at destroy.
  tern::ListLink<tern_conn> link;
};

struct tern_engine {
  // A record for a new call, or nullptr when no memory is left for one.
  tern::capi::CallRecord* take_record();
  // The one given back last is taken first (still warm in cache).
  void give_back(tern::capi::CallRecord* r) { free_records.push_front(r); }

  std::vector<std::unique_ptr<tern::capi::HandlerRecord>> handlers;
  std::vector<std::unique_ptr<tern::capi::CallRecord[]>> record_blocks;
  tern::IntrusiveList<tern::capi::CallRecord, &tern::capi::CallRecord::free_link> free_records;
  tern::IntrusiveList<tern_conn, &tern_conn::link> conns;  // open handles (closed ones are freed at close)
  // The stats JSON documents a caller was told the size of but could not
  // take (its buffer was NULL or short). The sizing idiom -- ask with no
  // buffer, then call with n+1 bytes -- must hand over a whole document, yet
  // live counters and ages move between the two calls and can lengthen it;
  // so a short call keeps what it measured, and the next call whose buffer
  // holds that one gets it when a fresh one would not fit (copy_stats_json).
  // `held_json` is the engine thread's (tern_engine_stats_json is const for
  // its callers, hence mutable); the snapshot's is any thread's, so locked.
  mutable std::string held_json;
  std::mutex held_snapshot_mu;
  std::string held_snapshot;
  // Declared last, so destroyed first: its connections may still refer to
  // call records while they go away.
  std::unique_ptr<tern::rpc::Engine> engine;
};
