#include "raw_peer.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace tern::test {

// ---------------------------------------------------------------- logs

LogCapture::LogCapture() : saved_level_(log_level()) {
  set_log_level(LogLevel::kInfo);
  set_log_sink(&LogCapture::sink, this);
}

LogCapture::~LogCapture() {
  set_log_sink(nullptr, nullptr);
  set_log_level(saved_level_);
}

void LogCapture::sink(void* ctx, const LogRecord& rec) {
  auto* self = static_cast<LogCapture*>(ctx);
  std::lock_guard<std::mutex> g(self->mu_);
  std::string peer = rec.peer != nullptr ? std::string(" [") + rec.peer + "]" : std::string();
  self->lines_.emplace_back(rec.level, std::string(rec.subsystem) + peer + ": " + rec.message);
}

std::vector<std::string> LogCapture::warnings(std::initializer_list<std::string_view> needles) const {
  return lines(needles, LogLevel::kWarn);
}

std::vector<std::string> LogCapture::lines(std::initializer_list<std::string_view> needles, LogLevel most) const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::string> out;
  for (const auto& [level, line] : lines_) {
    if (level > most) continue;
    bool all = true;
    for (std::string_view n : needles) all = all && names(line, n);
    if (all) out.push_back(line);
  }
  return out;
}

std::string LogCapture::dump() const {
  std::lock_guard<std::mutex> g(mu_);
  std::string s;
  for (const auto& [level, line] : lines_) s += "  [" + std::to_string(static_cast<int>(level)) + "] " + line + "\n";
  return s;
}

void LogCapture::clear() {
  std::lock_guard<std::mutex> g(mu_);
  lines_.clear();
}

bool names(std::string_view line, std::string_view token) {
  for (size_t at = line.find(token); at != std::string_view::npos; at = line.find(token, at + 1)) {
    size_t end = at + token.size();
    bool digit_after = end < line.size() && line[end] >= '0' && line[end] <= '9';
    if (!digit_after) return true;
  }
  return false;
}

// ---------------------------------------------------------------- device specs

bool on_shm() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  return dev == nullptr || *dev == 0 || std::string_view(dev) == "shm";
}

std::string fresh_spec(std::string_view tag) {
  static int n = 0;
  if (on_shm())
    return "shm:path=/tmp/tern-" + std::string(tag) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++) +
           ".sock";
  return std::string(std::getenv("TERN_RPC_DEVICE")) + ",port=" + std::to_string(20500 + n++);
}

void remove_spec(const std::string& spec) {
  if (spec.starts_with("shm:path=")) unlink(spec.c_str() + 9);
}

}  // namespace tern::test
