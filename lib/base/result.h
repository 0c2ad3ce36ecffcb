// Control-path error reporting: a code the caller can act on, the system errno
// that caused it (0 if none) and a message for humans. No exceptions anywhere in
// lib/ or pmd/; datapath calls return counts instead of these.
#pragma once

#include "cxx20.h"  // first: a clear error for C++17 consumers

#include <cerrno>
#include <cstdarg>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "check.h"

namespace tern {

// What the caller should do next, in the spirit of kj's four kinds, widened to
// the cases an RDMA control path meets.
enum class Errc : int {
  kOk = 0,
  kInvalidArgument,  // caller passed something wrong: fix the call
  kUnsupported,      // the device/driver cannot do this: pick another path
  kNoResources,      // out of memory, queue slots, MRs: retry later or size up
  kDisconnected,     // the connection or peer is gone: reconnect
  kTimedOut,         // nothing happened in time: retry or give up
  kRemoteError,      // the peer refused or misbehaved: report, maybe reconnect
  kNotFound,         // no such device/driver/object
  kBadState,         // object not in a state that allows this (e.g. QP not connected)
  kInternal,         // Tern's bug: report it
};

const char* errc_name(Errc c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Errc code, int sys_errno, std::string message)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool is_ok() const { return code_ == Errc::kOk; }
  explicit operator bool() const { return is_ok(); }
  Errc code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }
  // "kind: message"; with an errno, its kind: "permission denied: cannot open X (EACCES)".
  std::string to_string() const;

 private:
  Errc code_ = Errc::kOk;
  int errno_ = 0;
  std::string message_;
};

// printf-style constructors; the errno variant appends strerror.
Status make_error(Errc code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status make_sys_error(Errc code, int sys_errno, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Result(Status error) : v_(std::move(error)) {            // NOLINT
    TERN_ASSERT(!std::get<Status>(v_).is_ok());
  }

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }

  T& value() & {
    TERN_REQUIRE(is_ok(), "Result::value() on an error: %s", status().message().c_str());
    return std::get<0>(v_);
  }
  T&& value() && {
    TERN_REQUIRE(is_ok(), "Result::value() on an error: %s", status().message().c_str());
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }

  // The error; an ok Result yields an ok Status.
  Status status() const { return is_ok() ? Status() : std::get<Status>(v_); }
  Status take_status() && { return is_ok() ? Status() : std::get<Status>(std::move(v_)); }

 private:
  std::variant<T, Status> v_;
};

namespace detail {
inline Status to_status(const Status& s) { return s; }
template <typename T>
Status to_status(const Result<T>& r) { return r.status(); }
}  // namespace detail

}  // namespace tern

// Propagate a failed Status or Result<T> from the enclosing function (which
// returns Status or some Result<U>).
#define TERN_TRY(expr)                                          \
  do {                                                          \
    auto&& tern_try_v_ = (expr);                                \
    if (!tern_try_v_.is_ok()) return ::tern::detail::to_status(tern_try_v_); \
  } while (0)
