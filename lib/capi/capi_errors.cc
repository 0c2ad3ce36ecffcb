// Errors across the C boundary: C++ error kinds as negative errnos, the
// per-thread reason behind the last failure, and the names of return codes
// and call statuses.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "capi/capi_impl.h"

namespace tern::capi {

namespace {

// Per thread, like errno: engines run one per thread, and a failure's reason
// must not be overwritten by another engine's. A fixed buffer needs no
// allocation and no thread-exit destructor.
struct LastError {
  char text[512];
  const char* msg;  // text, or a static string
};
thread_local LastError t_last = {{0}, ""};

}  // namespace

int errno_for(Errc code) {
  switch (code) {
    case Errc::kOk: return 0;
    case Errc::kInvalidArgument: return EINVAL;
    case Errc::kUnsupported: return ENOTSUP;
    case Errc::kNoResources: return EAGAIN;
    case Errc::kDisconnected: return ENOTCONN;
    case Errc::kTimedOut: return ETIMEDOUT;
    case Errc::kRemoteError: return EPROTO;
    case Errc::kNotFound: return ENOENT;
    case Errc::kBadState: return EALREADY;
    case Errc::kInternal: return ENOTRECOVERABLE;
  }
  return ENOTRECOVERABLE;
}

int fail(const Status& st) {
  int e = errno_for(st.code());
  if (e == 0) e = ENOTRECOVERABLE;  // a failure reported as ok is Tern's bug
  std::snprintf(t_last.text, sizeof t_last.text, "%s", st.to_string().c_str());
  t_last.msg = t_last.text;
  return -e;
}

int fail_static(int neg_errno, const char* why) {
  t_last.msg = why;
  return neg_errno;
}

}  // namespace tern::capi

using namespace tern;

// The C enums are the C++ ones by value: conversions are casts.
static_assert(TERN_CALL_OK == static_cast<int>(rpc::CallStatus::kOk));
static_assert(TERN_CALL_DISCONNECTED == static_cast<int>(rpc::CallStatus::kDisconnected));
static_assert(TERN_CALL_PROG_UNAVAIL == static_cast<int>(rpc::CallStatus::kProgUnavail));
static_assert(TERN_CALL_PROG_MISMATCH == static_cast<int>(rpc::CallStatus::kProgMismatch));
static_assert(TERN_CALL_PROC_UNAVAIL == static_cast<int>(rpc::CallStatus::kProcUnavail));
static_assert(TERN_CALL_GARBAGE_ARGS == static_cast<int>(rpc::CallStatus::kGarbageArgs));
static_assert(TERN_CALL_SYSTEM_ERR == static_cast<int>(rpc::CallStatus::kSystemErr));
static_assert(TERN_CALL_DENIED == static_cast<int>(rpc::CallStatus::kDenied));
static_assert(TERN_CALL_RDMA_ERROR == static_cast<int>(rpc::CallStatus::kRdmaError));
static_assert(TERN_CALL_BAD_REPLY == static_cast<int>(rpc::CallStatus::kBadReply));
static_assert(TERN_CALL_TOO_LARGE == static_cast<int>(rpc::CallStatus::kTooLarge));
static_assert(TERN_CALL_NO_REGISTRATION == static_cast<int>(rpc::CallStatus::kNoRegistration));
static_assert(TERN_CALL_TIMED_OUT == static_cast<int>(rpc::CallStatus::kTimedOut));
static_assert(TERN_CALL_CANCELLED == static_cast<int>(rpc::CallStatus::kCancelled));

extern "C" {

uint32_t tern_c_api_version(void) noexcept { return TERN_C_API_VERSION; }

const char* tern_strerror(int rc) noexcept {
  switch (rc < 0 ? -rc : rc) {
    case 0: return "success";
    case EINVAL: return "invalid argument";
    case ENOTSUP: return "not supported by the device or configuration";
    case EAGAIN: return "resources exhausted for now: poll and retry";
    case ENOTCONN: return "not connected";
    case ETIMEDOUT: return "timed out";
    case EPROTO: return "the peer refused or broke the protocol";
    case ENOENT: return "not found";
    case EALREADY: return "not allowed in the object's current state";
    case EMSGSIZE: return "too large";
    case ENOTRECOVERABLE: return "internal error in Tern";
  }
  return "unknown error";
}

const char* tern_last_error(void) noexcept { return capi::t_last.msg; }

const char* tern_call_status_name(tern_call_status status) noexcept {
  if (static_cast<int>(status) < TERN_CALL_OK || static_cast<int>(status) > TERN_CALL_CANCELLED)
    return "unknown call status";
  return rpc::call_status_name(static_cast<rpc::CallStatus>(status));
}

}  // extern "C"
