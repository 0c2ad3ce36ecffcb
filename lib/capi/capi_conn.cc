// tern_conn: connection state, client calls and their completions, over
// rpc::Connection. A call's C callback and credentials live in a pooled
// CallRecord from issue to completion.
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include "capi/capi_impl.h"

using namespace tern;
using tern::capi::fail_static;

namespace {

// The first version's tern_call ends here; a caller's struct must hold it all.
constexpr size_t kCallV1Size = offsetof(tern_call, ctx) + sizeof(void*);
// Version 2 added timeout_ns and no_retry.
constexpr size_t kCallV2Size = offsetof(tern_call, no_retry) + sizeof(bool);

static_assert(TERN_CONN_CONNECTING == static_cast<int>(rpc::ConnState::kConnecting));
static_assert(TERN_CONN_READY == static_cast<int>(rpc::ConnState::kReady));
static_assert(TERN_CONN_RECONNECTING == static_cast<int>(rpc::ConnState::kReconnecting));
static_assert(TERN_CONN_FAILED == static_cast<int>(rpc::ConnState::kFailed));
static_assert(TERN_CONN_CLOSED == static_cast<int>(rpc::ConnState::kClosed));

void state_trampoline(void* ctx, rpc::Connection*, rpc::ConnState from, rpc::ConnState to, const Status& why) {
  auto* c = static_cast<tern_conn*>(ctx);
  if (c->state_fn == nullptr) return;
  int err = why.is_ok() ? 0 : -capi::errno_for(why.code());
  if (!why.is_ok() && err == 0) err = -ENOTCONN;
  std::string text = why.is_ok() ? std::string() : why.to_string();
  c->state_fn(c->state_ctx, c, static_cast<tern_conn_state>(from), static_cast<tern_conn_state>(to), err,
              text.c_str());
}

// Completion of a call issued from C: the record goes back to the pool before
// the callback runs, so a callback that issues the next call reuses it.
void call_done_trampoline(void* ctx, const rpc::CallReply& r) {
  auto* rec = static_cast<capi::CallRecord*>(ctx);
  tern_call_done_fn done = rec->done;
  void* user = rec->ctx;
  rec->owner->give_back(rec);
  tern_call_reply reply;
  reply.status = static_cast<tern_call_status>(r.status);
  reply.xid = r.xid;
  reply.results = r.results.data();
  reply.results_len = r.results.size();
  reply.bulk_recv_len = r.bulk_recv_len;
  reply.retransmits = r.retransmits;
  done(user, &reply);
}

// Copies C credentials into the record; false if they break RFC 5531's limits
// (the C++ engine would truncate them silently; a C caller hears about it).
bool set_auth(capi::CallRecord* rec, const tern_auth_sys& a) {
  size_t n = a.machine == nullptr ? 0 : strnlen(a.machine, TERN_AUTH_SYS_MAX_MACHINE + 1);
  if (n > TERN_AUTH_SYS_MAX_MACHINE || a.ngids > TERN_AUTH_SYS_MAX_GIDS) return false;
  static_assert(TERN_AUTH_SYS_MAX_GIDS == sizeof(rpc::AuthSys::gids) / sizeof(uint32_t));
  rec->auth.stamp = a.stamp;
  rec->auth.machine.assign(a.machine == nullptr ? "" : a.machine, n);  // capacity reused from earlier calls
  rec->auth.uid = a.uid;
  rec->auth.gid = a.gid;
  rec->auth.ngids = a.ngids;
  for (uint32_t i = 0; i < a.ngids; ++i) rec->auth.gids[i] = a.gids[i];
  return true;
}

}  // namespace

extern "C" {

bool tern_conn_ready(const tern_conn* c) noexcept { return c->conn->ready(); }
bool tern_conn_failed(const tern_conn* c) noexcept { return c->conn->failed(); }
uint32_t tern_conn_outstanding(const tern_conn* c) noexcept { return c->conn->outstanding(); }

int tern_conn_error(const tern_conn* c, char* buf, size_t len) noexcept {
  if (buf != nullptr && len > 0) buf[0] = 0;
  if (c == nullptr) return -EINVAL;
  if (!c->conn->failed()) return 0;
  Status st = c->conn->error();
  if (buf != nullptr && len > 0) std::snprintf(buf, len, "%s", st.to_string().c_str());
  int e = capi::errno_for(st.code());
  return e == 0 ? -ENOTCONN : -e;  // failed without a recorded reason: still not connected
}

int tern_conn_info_get(const tern_conn* c, tern_conn_info* info) noexcept {
  if (c == nullptr || info == nullptr || info->size < sizeof(size_t))
    return fail_static(-EINVAL, "tern_conn_info_get: no connection or info, or info->size not set");
  rpc::ConnectionInfo ci = c->conn->info();
  tern_conn_info o;
  std::memset(&o, 0, sizeof o);
  o.size = info->size;
  o.inline_send = ci.inline_send;
  o.inline_recv = ci.inline_recv;
  o.credits = ci.credits;
  o.remote_invalidation = ci.remote_invalidation;
  // Only what the caller's struct has room for; fields it knows and this
  // library does not stay as they were.
  std::memcpy(static_cast<void*>(info), &o, info->size < sizeof o ? info->size : sizeof o);
  return 0;
}

tern_conn_state tern_conn_get_state(const tern_conn* c) noexcept {
  return static_cast<tern_conn_state>(c->conn->state());
}

const char* tern_conn_state_name(tern_conn_state s) noexcept {
  if (static_cast<int>(s) < TERN_CONN_CONNECTING || static_cast<int>(s) > TERN_CONN_CLOSED)
    return "unknown connection state";
  return rpc::conn_state_name(static_cast<rpc::ConnState>(s));
}

int tern_conn_on_state_change(tern_conn* c, tern_conn_state_fn fn, void* ctx) noexcept {
  if (c == nullptr) return fail_static(-EINVAL, "tern_conn_on_state_change: no connection");
  c->state_fn = fn;
  c->state_ctx = ctx;
  if (fn == nullptr) c->conn->on_state_change(nullptr, nullptr);
  else c->conn->on_state_change(&state_trampoline, c);
  return 0;
}

int tern_conn_cancel(tern_conn* c, uint32_t xid) noexcept {
  if (c == nullptr) return -EINVAL;
  return -c->conn->cancel(xid);
}

int tern_conn_call(tern_conn* c, const tern_call* call) noexcept { return tern_conn_call_xid(c, call, nullptr); }

int tern_conn_call_xid(tern_conn* c, const tern_call* call, uint32_t* xid) noexcept {
  if (call == nullptr || call->size < kCallV1Size || call->done == nullptr) return -EINVAL;
  if ((call->args == nullptr && call->args_len != 0) || (call->bulk_send == nullptr && call->bulk_send_len != 0) ||
      (call->bulk_recv == nullptr && call->bulk_recv_len != 0))
    return -EINVAL;
  rpc::Call rc;
  rc.prog = call->prog;
  rc.vers = call->vers;
  rc.proc = call->proc;
  rc.args = {static_cast<const uint8_t*>(call->args), call->args_len};
  rc.bulk_send = {static_cast<const uint8_t*>(call->bulk_send), call->bulk_send_len};
  rc.bulk_recv = {static_cast<uint8_t*>(call->bulk_recv), call->bulk_recv_len};
  rc.max_results = call->max_results;
  if (call->size >= kCallV2Size) {
    rc.timeout_ns = call->timeout_ns;
    rc.no_retry = call->no_retry;
  }
  capi::CallRecord* rec = c->owner->take_record();
  if (rec == nullptr) return -EAGAIN;
  if (call->auth != nullptr) {
    if (!set_auth(rec, *call->auth)) {
      c->owner->give_back(rec);
      return -EINVAL;
    }
    rc.auth = &rec->auth;
  }
  rec->done = call->done;
  rec->ctx = call->ctx;
  rc.done = &call_done_trampoline;
  rc.ctx = rec;
  int r = c->conn->call(rc, xid);
  if (r != 0) {
    c->owner->give_back(rec);
    return -r;
  }
  return 0;
}

void tern_conn_close(tern_conn* c) noexcept {
  if (c == nullptr) return;
  // Outstanding calls complete later through their records, which belong to
  // the engine: the handle can go now, and no state change may reach it.
  c->conn->on_state_change(nullptr, nullptr);
  c->conn->close();
  c->owner->conns.remove(c);
  delete c;
}

}  // extern "C"
