// The functional tests' hand-made peer: lib/rawpeer's RawPeer (a peer that
// speaks RPC-over-RDMA by hand, through the driver interface and no engine,
// to play a misbehaving client or server against a Tern engine in the same
// process and thread), and what only the tests need beside it: LogCapture
// (what the engine said, through tern::set_log_sink) and the device specs
// of a test run.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "oncrpc/oncrpc.h"
#include "rawpeer/raw_peer.h"

namespace tern::test {

using rawpeer::plain_header;
using rawpeer::poll_until;
using rawpeer::put32;
using rawpeer::RawPeer;
using rawpeer::rdma_msg;
using rawpeer::Received;
using rawpeer::rpc_call;
using rawpeer::rpc_success;

// ---------------------------------------------------------------- logs

// Captures log lines (all levels) for the life of the object.
class LogCapture {
 public:
  LogCapture();
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Lines at warn or error that contain every one of `needles`.
  std::vector<std::string> warnings(std::initializer_list<std::string_view> needles = {}) const;
  // The same at any level up to `most` (info: what a driver said about it too).
  std::vector<std::string> lines(std::initializer_list<std::string_view> needles, LogLevel most) const;
  std::string dump() const;  // every captured line, for failure messages
  void clear();

 private:
  static void sink(void* ctx, const LogRecord& rec);
  mutable std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
  LogLevel saved_level_;
};

// True if `line` names `token` as a whole word-ish item ("qp 7" does not
// match inside "qp 71").
bool names(std::string_view line, std::string_view token);

// ---------------------------------------------------------------- device specs

// Over pmd/shm by default; TERN_RPC_DEVICE names another device spec without
// a port ("verbs:dev=rxe0,addr=169.254.77.1" in the VM stage), to which each
// call adds a port of its own. Every call returns a fresh address.
std::string fresh_spec(std::string_view tag);
void remove_spec(const std::string& spec);
bool on_shm();

}  // namespace tern::test
