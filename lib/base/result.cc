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

// What a system errno says, as the kind of a line: the errno is the reason
// the call failed, so it names the failure rather than the Errc the caller
// acts on ("invalid argument: ... (Permission denied)" read as a contradiction).
// strerror's words, lower case, where they read well as a kind; shorter
// ones where they do not.
static std::string errno_kind(int e) {
  switch (e) {
    case EADDRINUSE: return "address in use";
    case EADDRNOTAVAIL: return "address not available";
    case EPERM: return "not permitted";
    case EEXIST: return "already exists";
    case ENOMEM: return "out of memory";
    case ETIMEDOUT: return "timed out";
    case EAGAIN: return "temporarily unavailable";
    case ENOSPC: return "no space left";
    default: break;
  }
  std::string k = std::strerror(e);
  if (!k.empty() && k[0] >= 'A' && k[0] <= 'Z' && !(k.size() > 1 && k[1] >= 'A' && k[1] <= 'Z'))
    k[0] = static_cast<char>(k[0] - 'A' + 'a');
  return k;
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  if (errno_ == 0) return std::string(errc_name(code_)) + ": " + message_;
  // "permission denied: cannot open /run/x.pid (EACCES)": the errno's name
  // for a search, its number where the C library has no name for it.
  std::string s = errno_kind(errno_);
  s += ": ";
  s += message_;
  char buf[48];
  const char* name = nullptr;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  name = strerrorname_np(errno_);
#endif
  if (name != nullptr)
    std::snprintf(buf, sizeof buf, " (%s)", name);
  else
    std::snprintf(buf, sizeof buf, " (errno %d)", errno_);
  s += buf;
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
