// One command-line parser for every program Tern builds (the tools in apps/,
// the measuring programs in bench/ and tests/), so that they all follow the
// same conventions (docs/tools.md, "Command lines"):
//
//   --opt=value and --opt value     both forms, for every option with a value
//   -s 64, -s64, -ah                short forms where a program has them;
//                                   flags bundle, a value may be attached
//   --                              ends the options: the rest are arguments
//   --help (-h unless taken)        generated from the same table that parses
//   an unknown option               "unknown option '--exprot'; did you mean
//                                   '--export'?" (edit distance)
//   a missing or bad value          names the option and what it expects;
//                                   numbers are range-checked, never atoi'd
//   repeated options                the last one wins (as getopt_long), except
//                                   options marked once(), where a second one
//                                   is an error (e.g. tern-nfsd's --export)
//   exit status                     2 for any usage error, 0 after --help
//
// Options are matched by their whole name: an abbreviation (--sec for
// --seconds) is not accepted, so that adding an option never changes what an
// existing command line means; the did-you-mean names the whole option.
//
// Header-only and standard C++ only, so that a program that links nothing of
// Tern's (bench/cacheline_rtt.cc) can use it. Control-path code for main():
// it reports errors by return value, never by exception.
#pragma once

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace tern::apps {

// A count or byte size: decimal digits with an optional binary suffix (K, M,
// G; any case). False on junk ("8x"), a sign, hex, or more than `max`.
inline bool parse_count(const char* s, uint64_t max, uint64_t* out) {
  if (s == nullptr || *s < '0' || *s > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  else if (*end == 'M' || *end == 'm') shift = 20, ++end;
  else if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (*end != '\0' || v > (max >> shift)) return false;
  *out = static_cast<uint64_t>(v) << shift;
  return true;
}

// A duration: a positive decimal number of seconds, or with a unit: "2",
// "2s", "500ms", "250us". False on junk, zero, a negative or a non-finite
// value, or over `max_s`.
inline bool parse_duration(const char* s, double max_s, double* out_s) {
  if (s == nullptr || *s == '\0') return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (errno != 0 || end == s || !std::isfinite(v)) return false;
  std::string_view unit(end);
  if (unit == "ms") v /= 1e3;
  else if (unit == "us") v /= 1e6;
  else if (!unit.empty() && unit != "s") return false;
  if (!(v > 0) || v > max_s) return false;
  *out_s = v;
  return true;
}

// A plain decimal integer in [min, max]: no suffix, no junk after it.
inline bool parse_integer(std::string_view s, int64_t min, int64_t max, int64_t* out) {
  if (s.empty()) return false;
  if (s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || end != s.data() + s.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

// A decimal number (3, 2.5, 1e3) in [min, max]; false on junk after it,
// NaN or infinity.
inline bool parse_real(std::string_view s, double min, double max, double* out) {
  std::string str(s);
  if (str.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(str.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < min || v > max) return false;
  *out = v;
  return true;
}

// Levenshtein distance between two option names, for the did-you-mean.
inline size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

class OptionParser {
 public:
  // Sets a value from its text; false when the text is not one (the parser
  // then says "option '--x' expects <expects>, not '<text>'", or `*why`
  // when the setter wrote one).
  using Setter = std::function<bool(std::string_view value, std::string* why)>;

  struct Option {
    std::string name;      // without "--"
    char short_name = 0;   // 0: none
    std::string metavar;   // empty: a flag, which takes no value
    std::string help;      // lines after the first start with '\n'
    std::string expects;   // for errors: "a number in [1, 64]"
    Setter set;
    bool once_only = false;
    bool seen = false;
    // Modifiers, chained after the call that added the option.
    Option& once() { return once_only = true, *this; }
    Option& shorthand(char c) { return short_name = c, *this; }
  };

  // What parse() found.
  enum class Outcome { kRun, kHelp, kVersion, kUsageError };

  // `synopsis` follows "usage: PROG " on the usage line and in --help.
  OptionParser(std::string prog, std::string synopsis) : prog_(std::move(prog)), synopsis_(std::move(synopsis)) {}

  // Text printed after the options in --help (signals, exit status, ...).
  void epilogue(std::string text) { epilogue_ = std::move(text); }
  // Adds --version, printing `text` (one line) to stdout.
  void version(std::string text) { version_ = std::move(text); }
  // Positional arguments: at most `max` (default none). Read them back
  // from args() after parse().
  void arguments(size_t min, size_t max) { min_args_ = min, max_args_ = max; }
  // A line of its own in --help between groups of options.
  void heading(std::string text) { rows_.push_back({std::move(text), -1}); }

  // A flag: sets *out to true (or to `to`).
  Option& flag(std::string name, std::string help, bool* out, bool to = true) {
    return add(std::move(name), "", std::move(help), "", [out, to](std::string_view, std::string*) {
      *out = to;
      return true;
    });
  }
  // A flag that runs `f`.
  Option& flag(std::string name, std::string help, std::function<void()> f) {
    return add(std::move(name), "", std::move(help), "", [f = std::move(f)](std::string_view, std::string*) {
      f();
      return true;
    });
  }
  // Any text.
  Option& text(std::string name, std::string metavar, std::string help, std::string* out) {
    return add(std::move(name), std::move(metavar), std::move(help), "a value", [out](std::string_view v, std::string*) {
      *out = std::string(v);
      return true;
    });
  }
  // A plain decimal integer in [min, max].
  template <typename T>
  Option& integer(std::string name, std::string metavar, std::string help, int64_t min, int64_t max, T* out) {
    std::string expects = "a whole number in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return add(std::move(name), std::move(metavar), std::move(help), std::move(expects),
               [out, min, max](std::string_view v, std::string*) {
                 int64_t n = 0;
                 if (!parse_integer(v, min, max, &n)) return false;
                 *out = static_cast<T>(n);
                 return true;
               });
  }
  // Comma-separated whole numbers in [min, max], between `min_n` and
  // `max_n` of them (CPU lists: "2,3").
  template <typename T>
  Option& integers(std::string name, std::string metavar, std::string help, int64_t min, int64_t max, size_t min_n,
                   size_t max_n, std::vector<T>* out) {
    std::string expects = (min_n == max_n ? std::to_string(min_n) : std::to_string(min_n) + " to " + std::to_string(max_n)) +
                          " comma-separated whole numbers in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    return add(std::move(name), std::move(metavar), std::move(help), std::move(expects),
               [out, min, max, min_n, max_n](std::string_view v, std::string*) {
                 std::vector<T> list;
                 for (size_t pos = 0; pos <= v.size();) {
                   size_t comma = std::min(v.find(',', pos), v.size());
                   int64_t n = 0;
                   if (!parse_integer(v.substr(pos, comma - pos), min, max, &n)) return false;
                   list.push_back(static_cast<T>(n));
                   pos = comma + 1;
                 }
                 if (list.size() < min_n || list.size() > max_n) return false;
                 *out = std::move(list);
                 return true;
               });
  }
  // A count or byte size with an optional K/M/G suffix, in [min, max].
  template <typename T>
  Option& count(std::string name, std::string metavar, std::string help, uint64_t min, uint64_t max, T* out) {
    std::string expects = "a count in [" + std::to_string(min) + ", " + std::to_string(max) + "] (K, M, G suffixes)";
    return add(std::move(name), std::move(metavar), std::move(help), std::move(expects),
               [out, min, max](std::string_view v, std::string*) {
                 uint64_t n = 0;
                 if (!parse_count(std::string(v).c_str(), max, &n) || n < min) return false;
                 *out = static_cast<T>(n);
                 return true;
               });
  }
  // A decimal number in [min, max] (a rate, a ratio).
  Option& real(std::string name, std::string metavar, std::string help, double min, double max, double* out) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "a number in [%g, %g]", min, max);
    return add(std::move(name), std::move(metavar), std::move(help), buf, [out, min, max](std::string_view v, std::string*) {
      return parse_real(v, min, max, out);
    });
  }
  // A positive duration up to `max_s` seconds: "2", "2s", "500ms", "250us".
  Option& duration(std::string name, std::string metavar, std::string help, double max_s, double* out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "a duration in (0, %g] s (2, 500ms, 250us)", max_s);
    return add(std::move(name), std::move(metavar), std::move(help), buf, [out, max_s](std::string_view v, std::string*) {
      return parse_duration(std::string(v).c_str(), max_s, out);
    });
  }
  // One of `choices`: *out gets its index.
  template <typename T>
  Option& choice(std::string name, std::string metavar, std::string help, std::vector<std::string> choices, T* out) {
    std::string expects = "one of";
    for (size_t i = 0; i < choices.size(); ++i) expects += (i == 0 ? " " : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    return add(std::move(name), std::move(metavar), std::move(help), std::move(expects),
               [out, choices = std::move(choices)](std::string_view v, std::string*) {
                 for (size_t i = 0; i < choices.size(); ++i)
                   if (v == choices[i]) return *out = static_cast<T>(i), true;
                 return false;
               });
  }
  // Anything else: `set` decides; `expects` says what it takes.
  Option& custom(std::string name, std::string metavar, std::string help, std::string expects, Setter set) {
    return add(std::move(name), std::move(metavar), std::move(help), std::move(expects), std::move(set));
  }

  // Parses argv[first..argc). Prints nothing: see run() for that.
  Outcome parse(int argc, char* const* argv, int first = 1) {
    args_.clear();
    error_.clear();
    for (Option& o : options_) o.seen = false;
    bool options_done = false;
    for (int i = first; i < argc; ++i) {
      std::string_view a = argv[i];
      if (options_done || a.size() < 2 || a[0] != '-') {
        args_.emplace_back(a);
        continue;
      }
      if (a == "--") {
        options_done = true;
        continue;
      }
      if (a[1] == '-') {  // --name or --name=value
        a.remove_prefix(2);
        size_t eq = a.find('=');
        std::string_view name = a.substr(0, eq);
        if (name == "help") return Outcome::kHelp;
        if (name == "version" && !version_.empty()) return Outcome::kVersion;
        Option* o = find(name);
        if (o == nullptr) return fail(unknown("--" + std::string(name)));
        if (o->metavar.empty()) {
          if (eq != std::string_view::npos) return fail("option '--" + o->name + "' takes no value");
          if (!apply(*o, "")) return Outcome::kUsageError;
          continue;
        }
        std::string_view v;
        if (eq != std::string_view::npos) {
          v = a.substr(eq + 1);
        } else {
          if (i + 1 >= argc) return fail("option '--" + o->name + "' needs a value: " + o->metavar + ", " + o->expects);
          v = argv[++i];
        }
        if (!apply(*o, v)) return Outcome::kUsageError;
        continue;
      }
      // -abc: flags bundled; the first option with a value takes the rest of
      // this argument, or the next one.
      for (size_t k = 1; k < a.size(); ++k) {
        char c = a[k];
        if (c == 'h' && !short_taken('h')) return Outcome::kHelp;
        Option* o = find_short(c);
        if (o == nullptr) {
          // "-export": a long option with one dash.
          if (k == 1 && a.size() > 2 && find(a.substr(1)) != nullptr)
            return fail("unknown option '" + std::string(a) + "'; did you mean '-" + std::string(a) + "'?");
          return fail(unknown(std::string{'-', c}));
        }
        if (o->metavar.empty()) {
          if (!apply(*o, "")) return Outcome::kUsageError;
          continue;
        }
        std::string_view v;
        if (k + 1 < a.size()) {
          v = a.substr(k + 1);
        } else {
          if (i + 1 >= argc)
            return fail("option '-" + std::string(1, c) + "' (--" + o->name + ") needs a value: " + o->metavar + ", " +
                        o->expects);
          v = argv[++i];
        }
        if (!apply(*o, v)) return Outcome::kUsageError;
        break;
      }
    }
    if (args_.size() > max_args_)
      return fail(max_args_ == 0 ? "unexpected argument '" + args_[0] + "'" : "unexpected argument '" + args_[max_args_] + "'");
    if (args_.size() < min_args_) return fail("missing arguments");
    return Outcome::kRun;
  }

  // Parses and does what the outcome asks: --help to stdout (returns 0),
  // --version (0), a usage error on stderr with the usage line (2); -1 when
  // the program should go on.
  int run(int argc, char* const* argv, int first = 1) {
    switch (parse(argc, argv, first)) {
      case Outcome::kRun: return -1;
      case Outcome::kHelp: print_help(stdout); return 0;
      case Outcome::kVersion: std::printf("%s\n", version_.c_str()); return 0;
      case Outcome::kUsageError: break;
    }
    return usage_error(error_);
  }

  // Says a usage error found after parsing (two options that do not go
  // together) the way parse errors are said; returns 2, the exit status.
  int usage_error(const std::string& what) const {
    std::fprintf(stderr, "%s: %s\n", prog_.c_str(), what.c_str());
    std::fprintf(stderr, "usage: %s %s   (--help lists the options)\n", prog_.c_str(), synopsis_.c_str());
    return 2;
  }

  void print_help(FILE* f) const {
    std::fprintf(f, "usage: %s %s\n", prog_.c_str(), synopsis_.c_str());
    for (const Row& r : rows_) {
      if (r.option < 0) {
        std::fprintf(f, "%s\n", r.heading.c_str());
        continue;
      }
      const Option& o = options_[static_cast<size_t>(r.option)];
      std::string left = "  ";
      left += o.short_name != 0 ? std::string("-") + o.short_name + ", " : "";
      left += "--" + o.name;
      if (!o.metavar.empty()) left += " " + o.metavar;
      std::string pad = left.size() < kHelpColumn - 1 ? std::string(kHelpColumn - left.size(), ' ') : "  ";
      std::string help = o.help;
      for (size_t p = 0; (p = help.find('\n', p)) != std::string::npos; p += kHelpColumn + 1)
        help.insert(p + 1, kHelpColumn, ' ');
      std::fprintf(f, "%s%s%s\n", left.c_str(), pad.c_str(), help.c_str());
    }
    std::fprintf(f, "  %s--help%s\n", short_taken('h') ? "" : "-h, ", version_.empty() ? "" : ", --version");
    if (!epilogue_.empty()) std::fprintf(f, "%s\n", epilogue_.c_str());
  }

  // After parse(): the message of a usage error, the positional arguments,
  // and whether an option was given.
  const std::string& error() const { return error_; }
  const std::vector<std::string>& args() const { return args_; }
  bool given(std::string_view name) const {
    for (const Option& o : options_)
      if (o.name == name) return o.seen;
    return false;
  }

 private:
  static constexpr size_t kHelpColumn = 26;

  struct Row {
    std::string heading;
    int option;  // index in options_; -1: a heading
  };

  Option& add(std::string name, std::string metavar, std::string help, std::string expects, Setter set) {
    Option o;
    o.name = std::move(name), o.metavar = std::move(metavar), o.help = std::move(help);
    o.expects = std::move(expects), o.set = std::move(set);
    options_.push_back(std::move(o));
    rows_.push_back({"", static_cast<int>(options_.size() - 1)});
    return options_.back();
  }

  Option* find(std::string_view name) {
    for (Option& o : options_)
      if (o.name == name) return &o;
    return nullptr;
  }
  Option* find_short(char c) {
    for (Option& o : options_)
      if (o.short_name == c) return &o;
    return nullptr;
  }
  bool short_taken(char c) const {
    for (const Option& o : options_)
      if (o.short_name == c) return true;
    return false;
  }

  bool apply(Option& o, std::string_view v) {
    std::string opt = "--" + o.name;
    if (o.seen && o.once_only) {
      error_ = "option '" + opt + "' given twice; it takes one " + (o.metavar.empty() ? "mention" : o.metavar);
      return false;
    }
    o.seen = true;
    std::string why;
    if (o.set(v, &why)) return true;
    error_ = "option '" + opt + "' " + (why.empty() ? "expects " + o.expects + ", not '" + std::string(v) + "'" : why);
    return false;
  }

  Outcome fail(std::string what) {
    error_ = std::move(what);
    return Outcome::kUsageError;
  }

  // "unknown option '--exprot'; did you mean '--export'?": the nearest
  // name within two edits (one for short names), or one that starts with
  // what was typed; nothing for a single letter.
  std::string unknown(const std::string& flag) const {
    std::string msg = "unknown option '" + flag + "'";
    std::string_view bare = std::string_view(flag).substr(flag.find_first_not_of('-'));
    if (bare.size() < 2) return msg;
    const Option* best = nullptr;
    size_t best_d = SIZE_MAX;
    for (const Option& o : options_) {
      size_t d = edit_distance(bare, o.name);
      size_t limit = std::min<size_t>(2, std::max<size_t>(1, o.name.size() / 3));
      if (d > limit && !std::string_view(o.name).starts_with(bare)) continue;
      if (d < best_d) best_d = d, best = &o;
    }
    if (best == nullptr) {
      if (bare.size() >= 3 && edit_distance(bare, "help") <= 2) return msg + "; did you mean '--help'?";
      return msg;
    }
    return msg + "; did you mean '--" + best->name + "'?";
  }

  std::string prog_, synopsis_, epilogue_, version_;
  std::vector<Option> options_;
  std::vector<Row> rows_;
  std::vector<std::string> args_;
  size_t min_args_ = 0, max_args_ = 0;
  std::string error_;
};

}  // namespace tern::apps
