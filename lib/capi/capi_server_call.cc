// tern_server_call: a received call and its answer. The handle is the
// rpc::ServerCall itself.
#include <algorithm>
#include <cstring>
#include <string_view>

#include "capi/capi_impl.h"

using namespace tern;

static_assert(TERN_ACCEPT_SUCCESS == static_cast<int>(rpc::AcceptStat::kSuccess));
static_assert(TERN_ACCEPT_PROG_UNAVAIL == static_cast<int>(rpc::AcceptStat::kProgUnavail));
static_assert(TERN_ACCEPT_PROG_MISMATCH == static_cast<int>(rpc::AcceptStat::kProgMismatch));
static_assert(TERN_ACCEPT_PROC_UNAVAIL == static_cast<int>(rpc::AcceptStat::kProcUnavail));
static_assert(TERN_ACCEPT_GARBAGE_ARGS == static_cast<int>(rpc::AcceptStat::kGarbageArgs));
static_assert(TERN_ACCEPT_SYSTEM_ERR == static_cast<int>(rpc::AcceptStat::kSystemErr));

namespace {

rpc::ServerCall* cxx(tern_server_call* c) { return reinterpret_cast<rpc::ServerCall*>(c); }
const rpc::ServerCall* cxx(const tern_server_call* c) { return reinterpret_cast<const rpc::ServerCall*>(c); }

// A failed reply leaves its reason in tern_last_error(); formatting it costs
// only on failure.
int reply_status(const Status& st) { return st ? 0 : capi::fail(st); }

}  // namespace

extern "C" {

uint32_t tern_server_call_xid(const tern_server_call* c) noexcept { return cxx(c)->xid(); }
uint32_t tern_server_call_prog(const tern_server_call* c) noexcept { return cxx(c)->prog(); }
uint32_t tern_server_call_vers(const tern_server_call* c) noexcept { return cxx(c)->vers(); }
uint32_t tern_server_call_proc(const tern_server_call* c) noexcept { return cxx(c)->proc(); }
uint32_t tern_server_call_bulk_capacity(const tern_server_call* c) noexcept { return cxx(c)->bulk_capacity(); }

const uint8_t* tern_server_call_args(const tern_server_call* c, size_t* len) noexcept {
  auto a = cxx(c)->args();
  if (len != nullptr) *len = a.size();
  return a.data();
}

const uint8_t* tern_server_call_bulk(const tern_server_call* c, size_t* len) noexcept {
  auto b = cxx(c)->bulk();
  if (len != nullptr) *len = b.size();
  return b.data();
}

void* tern_server_call_bulk_buffer(tern_server_call* c, uint32_t len) noexcept {
  if (len > cxx(c)->bulk_capacity()) return nullptr;
  return cxx(c)->bulk_buffer(len).data();
}

int tern_server_call_reply(tern_server_call* c, const void* results, size_t results_len, const void* bulk,
                           size_t bulk_len) noexcept {
  if ((results == nullptr && results_len != 0) || (bulk == nullptr && bulk_len != 0)) return -EINVAL;
  return reply_status(cxx(c)->reply({static_cast<const uint8_t*>(results), results_len},
                                    {static_cast<const uint8_t*>(bulk), bulk_len}));
}

int tern_server_call_reply_error(tern_server_call* c, tern_accept_stat stat) noexcept {
  if (stat <= TERN_ACCEPT_SUCCESS || stat > TERN_ACCEPT_SYSTEM_ERR) return -EINVAL;
  return reply_status(cxx(c)->reply_error(static_cast<rpc::AcceptStat>(stat)));
}

void tern_server_call_drop(tern_server_call* c) noexcept { cxx(c)->drop(); }

size_t tern_server_call_peer_id(const tern_server_call* c, char* buf, size_t len) noexcept {
  std::string_view id = cxx(c)->peer_id();
  if (buf != nullptr && len > 0) {
    size_t n = std::min(id.size(), len - 1);
    std::memcpy(buf, id.data(), n);
    buf[n] = 0;
  }
  return id.size();
}

uint64_t tern_server_call_args_digest(const tern_server_call* c) noexcept { return cxx(c)->args_digest(); }

}  // extern "C"
