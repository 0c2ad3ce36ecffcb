#include <gtest/gtest.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "base/log.h"

namespace tern {
namespace {

TEST(Log, LevelFromString) {
  const struct {
    const char* name;
    LogLevel level;
  } cases[] = {{"error", LogLevel::kError},
               {"warn", LogLevel::kWarn},
               {"info", LogLevel::kInfo},
               {"debug", LogLevel::kDebug}};
  for (const auto& c : cases) {
    LogLevel l = c.level == LogLevel::kError ? LogLevel::kDebug : LogLevel::kError;
    EXPECT_TRUE(log_level_from_string(c.name, &l)) << c.name;
    EXPECT_EQ(l, c.level) << c.name;
  }
}

TEST(Log, UnknownLevelLeavesOutputAlone) {
  for (const char* s : {"", "warning", "INFO", "trace", "debug "}) {
    LogLevel l = LogLevel::kInfo;
    EXPECT_FALSE(log_level_from_string(s, &l)) << "'" << s << "'";
    EXPECT_EQ(l, LogLevel::kInfo);
  }
}

// The stderr prefix: ISO-8601 UTC with microseconds, "tern", level, subsystem.
bool matches(const std::string& s, const std::string& re) { return std::regex_match(s, std::regex(re)); }

constexpr const char* kStamp = R"(20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-6][0-9]\.[0-9]{6}Z)";

TEST(Log, LevelFiltersOutput) {
  LogLevel saved = log_level();
  set_log_level(LogLevel::kWarn);
  EXPECT_EQ(log_level(), LogLevel::kWarn);

  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  TERN_LOG(kInfo, "test", "hidden %d", count());
  TERN_LOG_PEER(kDebug, "test", "pid 1", "hidden too %d", count());
  TERN_LOG(kWarn, "test", "shown %d", 7);
  std::string out = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);

  EXPECT_EQ(evaluated, 0) << "arguments of a filtered-out line were evaluated";
  EXPECT_TRUE(matches(out, std::string(kStamp) + " tern warn test: shown 7\n")) << out;
}

TEST(Log, StderrLinesCarryTimestampLevelSubsystemAndPeer) {
  LogLevel saved = log_level();
  set_log_level(LogLevel::kDebug);
  timespec before;
  clock_gettime(CLOCK_REALTIME, &before);
  ::testing::internal::CaptureStderr();
  TERN_LOG_PEER(kError, "engine", "pid 1234 uid 1000 qp 7", "lost %d calls", 3);
  TERN_LOG_PEER(kInfo, "shm", "", "no peer given");
  TERN_LOG(kDebug, "verbs", "plain");
  std::string out = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);
  EXPECT_TRUE(matches(out, std::string(kStamp) + " tern error engine \\[pid 1234 uid 1000 qp 7\\]: lost 3 calls\n" +
                                           kStamp + " tern info shm: no peer given\n" + kStamp +
                                           " tern debug verbs: plain\n"))
      << out;
  // The stamp is now, in UTC, to the second.
  char year_month_day_hour[32];
  tm t;
  gmtime_r(&before.tv_sec, &t);
  std::strftime(year_month_day_hour, sizeof year_month_day_hour, "%Y-%m-%dT%H:", &t);
  EXPECT_EQ(out.substr(0, std::strlen(year_month_day_hour)), year_month_day_hour) << out;
}

TEST(Log, FormatLogLineIsTheStderrForm) {
  LogRecord rec{LogLevel::kWarn, "engine", "10.0.0.2 qp 17", "credits exhausted",
                uint64_t{1700000000} * 1000000000u + 123456789u};
  char buf[256];
  size_t n = format_log_line(rec, buf, sizeof buf);
  EXPECT_STREQ(buf, "2023-11-14T22:13:20.123456Z tern warn engine [10.0.0.2 qp 17]: credits exhausted");
  EXPECT_EQ(n, std::strlen(buf));
  rec.peer = nullptr;
  format_log_line(rec, buf, sizeof buf);
  EXPECT_STREQ(buf, "2023-11-14T22:13:20.123456Z tern warn engine: credits exhausted");
  char tiny[8];
  EXPECT_EQ(format_log_line(rec, tiny, sizeof tiny), std::strlen(buf));  // wanted length, as snprintf
  EXPECT_STREQ(tiny, "2023-11");
}

struct Captured {
  std::vector<std::string> lines;
  std::vector<uint64_t> stamps;
};

void capture(void* ctx, const LogRecord& rec) {
  auto* c = static_cast<Captured*>(ctx);
  c->lines.push_back(std::to_string(static_cast<int>(rec.level)) + " " + rec.subsystem + " " +
                     (rec.peer != nullptr ? std::string("[") + rec.peer + "] " : std::string()) + rec.message);
  c->stamps.push_back(rec.realtime_ns);
}

TEST(Log, SinkReceivesRecordsInsteadOfStderr) {
  Captured got;
  LogLevel saved = log_level();
  set_log_level(LogLevel::kInfo);
  timespec t0, t1;
  ::testing::internal::CaptureStderr();
  set_log_sink(capture, &got);
  clock_gettime(CLOCK_REALTIME, &t0);
  TERN_LOG(kWarn, "engine", "peer %s: %d", "shm pid 7", 3);
  TERN_LOG_PEER(kInfo, "engine", "pid 7 uid 0 qp 2", "reconnected after %d ms", 12);
  TERN_LOG(kDebug, "engine", "filtered by level before the sink");
  clock_gettime(CLOCK_REALTIME, &t1);
  set_log_sink(nullptr, nullptr);
  TERN_LOG(kWarn, "engine", "back on stderr");
  std::string out = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);
  ASSERT_EQ(got.lines.size(), 2u);
  EXPECT_EQ(got.lines[0], "1 engine peer shm pid 7: 3");
  EXPECT_EQ(got.lines[1], "2 engine [pid 7 uid 0 qp 2] reconnected after 12 ms");
  uint64_t lo = static_cast<uint64_t>(t0.tv_sec) * 1000000000u + t0.tv_nsec;
  uint64_t hi = static_cast<uint64_t>(t1.tv_sec) * 1000000000u + t1.tv_nsec;
  for (uint64_t s : got.stamps) {
    EXPECT_GE(s, lo);
    EXPECT_LE(s, hi);
  }
  EXPECT_TRUE(matches(out, std::string(kStamp) + " tern warn engine: back on stderr\n")) << out;
}

// TERN_LOG_LEVEL is read once per process, so each case runs in a child
// process of its own (the threadsafe death-test style re-executes the test
// binary) with the variable set before anything logs.
class LogEnv : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(LogEnv, UnknownLevelIsAnErrorTheInitPathSees) {
  EXPECT_EXIT(
      {
        setenv("TERN_LOG_LEVEL", "verbose", 1);
        Status st = log_init();
        bool ok = !st.is_ok() && st.code() == Errc::kInvalidArgument &&
                  st.message().find("'verbose'") != std::string::npos && log_level() == LogLevel::kWarn &&
                  !log_init().is_ok();
        std::_Exit(ok ? 0 : 1);
      },
      // Nothing printed: the host that checks says it (and stops); a
      // "logging at warn" line besides would contradict its exit.
      ::testing::ExitedWithCode(0), "^$");
}

// A host that never calls log_init() gets one warning, at its first log
// call, saying what happens: it goes on at warn.
TEST_F(LogEnv, UnknownLevelWithoutInitIsOneWarning) {
  EXPECT_EXIT(
      {
        setenv("TERN_LOG_LEVEL", "verbose", 1);
        TERN_LOG(kInfo, "test", "not shown at warn");
        TERN_LOG(kWarn, "test", "shown");
        std::_Exit(log_level() == LogLevel::kWarn ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "^tern warn log: TERN_LOG_LEVEL='verbose' is not a log level \\(want error, warn, info or debug\\); "
      "logging at warn\n[^\n]* tern warn test: shown\n$");
}

TEST_F(LogEnv, KnownLevelIsApplied) {
  EXPECT_EXIT(
      {
        setenv("TERN_LOG_LEVEL", "debug", 1);
        bool ok = log_init().is_ok() && log_level() == LogLevel::kDebug;
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^$");
}

TEST_F(LogEnv, UnsetMeansWarn) {
  EXPECT_EXIT(
      {
        unsetenv("TERN_LOG_LEVEL");
        bool ok = log_init().is_ok() && log_level() == LogLevel::kWarn;
        std::_Exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "^$");
}

}  // namespace
}  // namespace tern
