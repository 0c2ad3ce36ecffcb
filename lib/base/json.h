// JSON string text, written one way everywhere Tern emits JSON (engine
// stats, telemetry replies, the tools' reports): quotes and backslashes
// escaped, \n \r \t by their short names, every other control character as
// \u00XX; other bytes pass as they are (names and paths are UTF-8 or opaque
// and are not re-encoded). Peer- or user-supplied text -- an export path, a
// device spec, a command line -- goes through here before it is placed in
// a document, so that it can never end a string or inject a field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tern {

// Appends the inside of a JSON string literal for s to out.
void json_escape_to(std::string& out, std::string_view s);

// The inside of the literal (for printf-style writers that add the quotes).
std::string json_escape(std::string_view s);

// The literal, quotes included.
std::string json_quote(std::string_view s);

// Appends one JSON value to a string: objects and arrays nest, the writer
// puts the commas and the colons, names and strings go through
// json_escape_to. Every JSON document Tern writes (engine stats, telemetry
// replies, the tools' reports) is built with it, so none can come out cut or
// with a stray comma. Misuse (a value where a name is due, an end without a
// begin) is the caller's bug: REQUIRE (always on; JSON is never on a
// datapath).
//
//   JsonWriter w(out);
//   w.begin_object().u64("calls", 3).key("devices").begin_array();
//   ...
//   w.end_array().end_object();
class JsonWriter {
 public:
  enum class Style : uint8_t {
    kCompact,  // {"a":1,"b":[1,2]}
    kSpaced,   // {"a": 1, "b": [1, 2]} (rte_telemetry's look)
  };
  explicit JsonWriter(std::string& out, Style style = Style::kCompact) : out_(out), style_(style) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  // In an object: the name of the value that follows.
  JsonWriter& key(std::string_view name);

  // Values: inside an array, or after key().
  JsonWriter& u64(uint64_t v);
  JsonWriter& i64(int64_t v);
  // A finite double with `decimals` places (NaN and infinities are written
  // as null: JSON has no spelling for them).
  JsonWriter& f64(double v, int decimals = 3);
  JsonWriter& boolean(bool v);
  JsonWriter& str(std::string_view v);
  JsonWriter& null();
  // A value that is already JSON text (a document built elsewhere).
  JsonWriter& raw(std::string_view json);

  // key(name) and the value, in one call.
  JsonWriter& u64(std::string_view name, uint64_t v) { return key(name).u64(v); }
  JsonWriter& i64(std::string_view name, int64_t v) { return key(name).i64(v); }
  JsonWriter& f64(std::string_view name, double v, int decimals = 3) { return key(name).f64(v, decimals); }
  JsonWriter& boolean(std::string_view name, bool v) { return key(name).boolean(v); }
  JsonWriter& str(std::string_view name, std::string_view v) { return key(name).str(v); }

  // True once every begin has had its end (a whole value written).
  bool complete() const { return open_.empty() && wrote_; }

 private:
  // What a nesting level expects next.
  enum class Expect : uint8_t {
    kFirstKey,    // an object just begun: a name, no comma
    kKey,         // an object after a value: a comma and a name
    kValue,       // after key(): the value, no comma
    kFirstItem,   // an array just begun: a value, no comma
    kItem,        // an array after a value: a comma and a value
  };
  void before_value();
  void after_value();
  std::string& out_;
  Style style_;
  bool wrote_ = false;
  std::vector<Expect> open_;
};

}  // namespace tern
