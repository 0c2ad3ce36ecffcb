// JSON string text, written one way everywhere Tern emits JSON (engine
// stats, telemetry replies, the tools' reports): quotes and backslashes
// escaped, \n \r \t by their short names, every other control character as
// \u00XX; other bytes pass as they are (names and paths are UTF-8 or opaque
// and are not re-encoded). Peer- or user-supplied text -- an export path, a
// device spec, a command line -- goes through here before it is placed in
// a document, so that it can never end a string or inject a field.
#pragma once

#include <string>
#include <string_view>

namespace tern {

// Appends the inside of a JSON string literal for s to out.
void json_escape_to(std::string& out, std::string_view s);

// The inside of the literal (for printf-style writers that add the quotes).
std::string json_escape(std::string_view s);

// The literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace tern
