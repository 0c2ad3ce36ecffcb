// Command-line values both tools parse alike (tern-perf, tern-nfs-read), so
// that the same flag means the same thing in the same unit everywhere:
// counts and byte sizes with K/M/G suffixes, durations in seconds unless a
// unit says otherwise, output files where "-" is stdout, and server
// addresses with an optional port, IPv6 in brackets. Header-only (JSON text
// from base/json.h, which both tools' libraries carry). Counts and
// durations are parsed in option_parser.h, which every program shares.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "base/json.h"
#include "option_parser.h"  // parse_count, parse_duration

namespace tern::apps {

// `s` as the inside of a JSON string literal (base/json.h).
using tern::json_escape;

// An output named on the command line: "-" is stdout (never closed), any
// other name a file opened now, before the work whose results it will hold,
// so that a bad path fails at once instead of after the run.
struct OutFile {
  std::string name;
  FILE* f = nullptr;
  bool is_stdout() const { return name == "-"; }
  // False (with *why set) when the file cannot be created.
  bool open(std::string* why) {
    if (is_stdout()) {
      f = stdout;
      return true;
    }
    f = std::fopen(name.c_str(), "w");
    if (f == nullptr) *why = "cannot write " + name + ": " + std::strerror(errno);
    return f != nullptr;
  }
  // Flushes and closes; false (with *why set) when the data did not reach it.
  bool close(std::string* why) {
    if (f == nullptr) return true;
    bool ok = std::fflush(f) == 0 && std::ferror(f) == 0;
    int e = errno;
    if (f != stdout && std::fclose(f) != 0 && ok) ok = false, e = errno;
    f = nullptr;
    if (!ok) *why = "cannot write " + name + ": " + std::strerror(e);
    return ok;
  }
};

// "HOST", "HOST:PORT", "[V6]", "[V6]:PORT", or a bare IPv6 address (two or
// more colons, no brackets: all of it is the address). False on an empty
// host, an unclosed bracket, or a port that is not 1..65535.
inline bool parse_host_port(std::string_view s, std::string* host, uint16_t* port) {
  std::string_view h = s, p;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) return false;
    h = s.substr(1, close - 1);
    std::string_view rest = s.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      p = rest.substr(1);
      if (p.empty()) return false;
    }
  } else if (size_t colon = s.find(':'); colon != std::string_view::npos && s.find(':', colon + 1) == s.npos) {
    h = s.substr(0, colon);  // exactly one colon: HOST:PORT
    p = s.substr(colon + 1);
    if (p.empty()) return false;
  }
  if (h.empty()) return false;
  if (!p.empty()) {
    std::string ps(p);
    uint64_t v;
    if (!parse_count(ps.c_str(), 65535, &v) || v == 0 || ps.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *port = static_cast<uint16_t>(v);
  }
  *host = std::string(h);
  return true;
}

}  // namespace tern::apps
