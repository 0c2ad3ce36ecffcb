#include "base/result.h"

#include <cstdio>
#include <cstring>

namespace tern {

const char* errc_name(Errc c) {
  switch (c) {
    case Errc::kOk: return "ok";
    case Errc::kInvalidArgument: return "invalid argument";
    case Errc::kUnsupported: return "unsupported";
    case Errc::kNoResources: return "no resources";
    case Errc::kDisconnected: return "disconnected";
    case Errc::kTimedOut: return "timed out";
    case Errc::kRemoteError: return "remote error";
    case Errc::kNotFound: return "not found";
    case Errc::kBadState: return "bad state";
    case Errc::kInternal: return "internal error";
  }
  return "unknown error";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string s = errc_name(code_);
  s += ": ";
  s += message_;
  if (errno_ != 0) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " (errno %d: %s)", errno_, std::strerror(errno_));
    s += buf;
  }
  return s;
}

static std::string vformat(const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  return buf;
}

Status make_error(Errc code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string m = vformat(fmt, ap);
  va_end(ap);
  return Status(code, 0, std::move(m));
}

Status make_sys_error(Errc code, int sys_errno, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string m = vformat(fmt, ap);
  va_end(ap);
  return Status(code, sys_errno, std::move(m));
}

}  // namespace tern
