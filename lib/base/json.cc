#include "base/json.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "base/check.h"

namespace tern {

void json_escape_to(std::string& out, std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
}

std::string json_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  json_escape_to(out, s);
  return out;
}

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  json_escape_to(out, s);
  out += '"';
  return out;
}

void JsonWriter::before_value() {
  if (open_.empty()) {
    TERN_REQUIRE(!wrote_, "JsonWriter: a second value after a whole one");
    return;
  }
  Expect& e = open_.back();
  switch (e) {
    case Expect::kValue: return;
    case Expect::kFirstItem: e = Expect::kItem; return;
    case Expect::kItem: out_ += style_ == Style::kSpaced ? ", " : ","; return;
    case Expect::kFirstKey:
    case Expect::kKey: TERN_REQUIRE(false, "JsonWriter: a value where a name is due"); return;
  }
}

void JsonWriter::after_value() {
  if (open_.empty()) {
    wrote_ = true;
    return;
  }
  if (open_.back() == Expect::kValue) open_.back() = Expect::kKey;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  TERN_REQUIRE(!open_.empty() && (open_.back() == Expect::kFirstKey || open_.back() == Expect::kKey),
               "JsonWriter: a name outside an object or twice in a row");
  if (open_.back() == Expect::kKey) out_ += style_ == Style::kSpaced ? ", " : ",";
  out_ += '"';
  json_escape_to(out_, name);
  out_ += style_ == Style::kSpaced ? "\": " : "\":";
  open_.back() = Expect::kValue;
  return *this;
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  open_.push_back(Expect::kFirstKey);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  TERN_REQUIRE(!open_.empty() && (open_.back() == Expect::kFirstKey || open_.back() == Expect::kKey),
               "JsonWriter: end_object() without its begin, or after a name");
  open_.pop_back();
  out_ += '}';
  after_value();
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  open_.push_back(Expect::kFirstItem);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  TERN_REQUIRE(!open_.empty() && (open_.back() == Expect::kFirstItem || open_.back() == Expect::kItem),
               "JsonWriter: end_array() without its begin");
  open_.pop_back();
  out_ += ']';
  after_value();
  return *this;
}

JsonWriter& JsonWriter::u64(uint64_t v) {
  before_value();
  char buf[24];
  std::snprintf(buf, sizeof buf, "%" PRIu64, v);
  out_ += buf;
  after_value();
  return *this;
}

JsonWriter& JsonWriter::i64(int64_t v) {
  before_value();
  char buf[24];
  std::snprintf(buf, sizeof buf, "%" PRId64, v);
  out_ += buf;
  after_value();
  return *this;
}

JsonWriter& JsonWriter::f64(double v, int decimals) {
  if (!std::isfinite(v)) return null();
  before_value();
  char buf[64];
  // Fixed places while they fit; a huge value in exponent form, not cut.
  if (std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  else
    std::snprintf(buf, sizeof buf, "%.15g", v);
  out_ += buf;
  after_value();
  return *this;
}

JsonWriter& JsonWriter::boolean(bool v) { return raw(v ? "true" : "false"); }

JsonWriter& JsonWriter::null() { return raw("null"); }

JsonWriter& JsonWriter::str(std::string_view v) {
  before_value();
  out_ += '"';
  json_escape_to(out_, v);
  out_ += '"';
  after_value();
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  after_value();
  return *this;
}

}  // namespace tern
