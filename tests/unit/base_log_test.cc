#include <gtest/gtest.h>

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

TEST(Log, LevelFiltersOutput) {
  LogLevel saved = log_level();
  set_log_level(LogLevel::kWarn);
  EXPECT_EQ(log_level(), LogLevel::kWarn);

  int evaluated = 0;
  auto count = [&] { return ++evaluated; };
  ::testing::internal::CaptureStderr();
  TERN_LOG(kInfo, "test", "hidden %d", count());
  TERN_LOG(kWarn, "test", "shown %d", 7);
  std::string out = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);

  EXPECT_EQ(evaluated, 0) << "arguments of a filtered-out line were evaluated";
  EXPECT_EQ(out, "tern warn test: shown 7\n");
}

struct Captured {
  std::vector<std::string> lines;
};

void capture(void* ctx, LogLevel level, const char* component, const char* line) {
  static_cast<Captured*>(ctx)->lines.push_back(std::to_string(static_cast<int>(level)) + " " + component + " " +
                                               line);
}

TEST(Log, SinkReceivesLinesInsteadOfStderr) {
  Captured got;
  LogLevel saved = log_level();
  set_log_level(LogLevel::kInfo);
  ::testing::internal::CaptureStderr();
  set_log_sink(capture, &got);
  TERN_LOG(kWarn, "engine", "peer %s: %d", "shm pid 7", 3);
  TERN_LOG(kDebug, "engine", "filtered by level before the sink");
  set_log_sink(nullptr, nullptr);
  TERN_LOG(kWarn, "engine", "back on stderr");
  std::string out = ::testing::internal::GetCapturedStderr();
  set_log_level(saved);
  ASSERT_EQ(got.lines.size(), 1u);
  EXPECT_EQ(got.lines[0], "1 engine peer shm pid 7: 3");
  EXPECT_EQ(out, "tern warn engine: back on stderr\n");
}

}  // namespace
}  // namespace tern
