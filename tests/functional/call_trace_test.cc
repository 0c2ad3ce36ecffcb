// The sampled per-call trace (EngineOptions::trace_every, call_trace.h): the
// client and server engines each sample one call in N; their Chrome
// trace-event files are loaded as JSON (trace_check.py) and every sampled
// call must have its stages in order with non-negative durations.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "rpc_fixture.h"

namespace tern::rpc {
namespace {

int check(const std::string& path, const char* side, int calls, int pulled = -1) {
  std::string cmd = std::string("python3 ") + TERN_SOURCE_ROOT "/tests/functional/trace_check.py " + path + " " + side +
                    " " + std::to_string(calls);
  if (pulled >= 0) {
    cmd += ' ';
    cmd += std::to_string(pulled);
  }
  return std::system(cmd.c_str());
}

// 40 calls: every 4th a read-chunk call (the server pulls it), the rest inline.
void traffic(Fixture& f) {
  auto* bulk = static_cast<uint8_t*>(f.cli->alloc(8192));
  for (int i = 0; i < 40; ++i) {
    Call c;
    std::vector<uint8_t> args(8, static_cast<uint8_t>(i));
    if (i % 4 == 3) {
      c.proc = kSum;
      c.bulk_send = std::span<const uint8_t>(bulk, 8192);
    } else {
      c.proc = kEcho;
      c.args = args;
    }
    ASSERT_EQ(f.call(c).reply.status, CallStatus::kOk);
  }
}

TEST(CallTrace, SampledCallsHaveTheirStagesInOrder) {
  EngineOptions so, co;
  so.trace_every = co.trace_every = 4;
  Fixture f(so, co);
  ASSERT_NO_FATAL_FAILURE(traffic(f));
  std::string cp = "/tmp/tern-trace-client-" + std::to_string(getpid()) + ".json";
  std::string sp = "/tmp/tern-trace-server-" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(f.cli->write_trace(cp).is_ok());
  ASSERT_TRUE(f.srv->write_trace(sp).is_ok());
  // One in 4 of 40 calls on each side; the server's samples are its 4th,
  // 8th, ... replies, which are exactly the read-chunk calls.
  EXPECT_EQ(check(cp, "client", 10), 0);
  EXPECT_EQ(check(sp, "server", 10, 10), 0);
  unlink(cp.c_str());
  unlink(sp.c_str());
}

TEST(CallTrace, RingKeepsTheNewestAndCountsTheRest) {
  EngineOptions so, co;
  co.trace_every = 2;
  co.trace_capacity = 8;
  Fixture f(so, co);
  ASSERT_NO_FATAL_FAILURE(traffic(f));
  std::string j = f.cli->trace_json();
  EXPECT_NE(j.find("\"sampled\":20"), std::string::npos) << j.substr(j.size() > 200 ? j.size() - 200 : 0);
  EXPECT_NE(j.find("\"dropped\":12"), std::string::npos);
  std::string cp = "/tmp/tern-trace-ring-" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(f.cli->write_trace(cp).is_ok());
  EXPECT_EQ(check(cp, "client", 8), 0);
  unlink(cp.c_str());
  // Off (the server here): a valid trace with no events.
  std::string sp = "/tmp/tern-trace-off-" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(f.srv->write_trace(sp).is_ok());
  EXPECT_EQ(check(sp, "server", 0), 0);
  unlink(sp.c_str());
}

}  // namespace
}  // namespace tern::rpc
