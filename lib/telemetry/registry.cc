#include "telemetry/registry.h"

#include "base/version.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "base/check.h"
#include "base/json.h"

namespace tern::telemetry {

namespace {

struct Entry {
  Provider fn;
  void* ctx;
};

struct Kind {
  std::map<std::string, Entry> sources;  // id -> provider, ordered for listing
};

struct Registry {
  std::mutex mu;
  std::map<std::string, Kind> kinds;
  CommandListener listener = nullptr;
  void* listener_ctx = nullptr;
};

Registry& reg() {
  static Registry r;
  return r;
}

// Set while a provider runs on this thread: calling back into the registry
// from there would deadlock, and is a provider's bug.
thread_local bool in_provider = false;

bool valid_kind(std::string_view k) {
  if (k.empty() || k.size() > 32) return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (c <= ' ' || c > '~' || c == ',' || c == '"' || c == '\\') return false;
  return true;
}

std::string list_cmd(const std::string& kind) { return "/tern/" + kind + "s"; }
std::string get_cmd(const std::string& kind) { return "/tern/" + kind; }

void announce(Registry& r, const std::string& kind) {
  if (r.listener == nullptr) return;
  r.listener(r.listener_ctx, list_cmd(kind), "ids of every " + kind + "; with ,PREFIX those named PREFIX.*");
  r.listener(r.listener_ctx, get_cmd(kind), "statistics of one " + kind + ": " + get_cmd(kind) + ",ID");
}

// Which kind a command names and whether it is the list form; false when
// none. Called with the lock held.
bool parse_cmd(Registry& r, std::string_view cmd, Kind** kind, bool* is_list) {
  constexpr std::string_view kPrefix = "/tern/";
  if (cmd.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string name(cmd.substr(kPrefix.size()));
  if (auto it = r.kinds.find(name); it != r.kinds.end()) {
    *kind = &it->second;
    *is_list = false;
    return true;
  }
  if (!name.empty() && name.back() == 's') {
    if (auto it = r.kinds.find(name.substr(0, name.size() - 1)); it != r.kinds.end()) {
      *kind = &it->second;
      *is_list = true;
      return true;
    }
  }
  return false;
}

}  // namespace

Source& Source::operator=(Source&& o) noexcept {
  if (this != &o) {
    reset();
    kind_ = std::move(o.kind_);
    id_ = std::move(o.id_);
    o.id_.clear();
  }
  return *this;
}

void Source::reset() {
  if (id_.empty()) return;
  TERN_REQUIRE(!in_provider, "telemetry: a provider unregistered a source");
  Registry& r = reg();
  std::lock_guard<std::mutex> g(r.mu);
  // Kinds stay once created: their commands may already be registered with
  // an exporter that cannot forget them (rte_telemetry).
  if (auto it = r.kinds.find(kind_); it != r.kinds.end()) it->second.sources.erase(id_);
  id_.clear();
}

Result<Source> register_source(std::string_view kind, std::string_view id, Provider fn, void* ctx) {
  if (!valid_kind(kind))
    return make_error(Errc::kInvalidArgument, "telemetry: kind '%.*s' is not [a-z0-9_]{1,32}",
                      static_cast<int>(kind.size()), kind.data());
  if (!id.empty() && !valid_id(id))
    return make_error(Errc::kInvalidArgument,
                      "telemetry: id '%.*s' must be 1-64 printable characters without ',', quotes or spaces",
                      static_cast<int>(id.size()), id.data());
  if (fn == nullptr) return make_error(Errc::kInvalidArgument, "telemetry: no provider");
  TERN_REQUIRE(!in_provider, "telemetry: a provider registered a source");
  Registry& r = reg();
  std::lock_guard<std::mutex> g(r.mu);
  std::string k(kind);
  bool new_kind = r.kinds.find(k) == r.kinds.end();
  Kind& kd = r.kinds[k];
  std::string name(id);
  if (name.empty()) {
    for (uint64_t n = 0;; ++n) {
      name = std::to_string(n);
      if (kd.sources.find(name) == kd.sources.end()) break;
    }
  } else if (kd.sources.find(name) != kd.sources.end()) {
    return make_error(Errc::kBadState, "telemetry: %s '%s' is already registered", k.c_str(), name.c_str());
  }
  kd.sources[name] = Entry{fn, ctx};
  if (new_kind) announce(r, k);
  Source s;
  s.kind_ = k;
  s.id_ = name;
  return s;
}

bool run_command(std::string_view cmd, std::string_view params, Reply* out) {
  TERN_REQUIRE(!in_provider, "telemetry: a provider ran a command");
  Registry& r = reg();
  if (cmd == "/") {
    out->start_list();
    for (const auto& c : commands()) out->append(c);
    return true;
  }
  if (cmd == "/info") {
    out->add_string("version", std::string("tern ") + tern_version());
    out->add_u64("pid", static_cast<uint64_t>(getpid()));
    out->add_u64("max_output_len", kMaxOutputLen);
    return true;
  }
  std::lock_guard<std::mutex> g(r.mu);
  if (cmd == "/help") {
    Kind* kind;
    bool is_list;
    if (!parse_cmd(r, params, &kind, &is_list)) return true;  // null: not a command
    std::string p(params);
    out->add_string(p, is_list ? "ids of every source of this kind; with ,PREFIX those named PREFIX.*"
                               : "statistics of one source: " + p + ",ID");
    return true;
  }
  Kind* kind;
  bool is_list;
  if (!parse_cmd(r, cmd, &kind, &is_list)) return false;
  if (is_list) {
    std::string prefix = params.empty() ? std::string() : std::string(params) + ".";
    out->start_list();  // none is "[]", not null
    for (const auto& [id, e] : kind->sources)
      if (id.compare(0, prefix.size(), prefix) == 0) out->append(id);
    return true;
  }
  auto it = kind->sources.find(std::string(params));
  if (it == kind->sources.end()) return true;  // null: no such id
  in_provider = true;
  it->second.fn(it->second.ctx, out);
  in_provider = false;
  return true;
}

std::string handle_request(std::string_view request) {
  size_t comma = request.find(',');
  std::string_view cmd = request.substr(0, comma);
  std::string_view params = comma == std::string_view::npos ? std::string_view() : request.substr(comma + 1);
  Reply reply;
  bool known = valid_name(cmd) && cmd[0] == '/' && run_command(cmd, params, &reply);
  // {"<cmd>": <reply>}, as rte_telemetry answers; a reply that would not
  // fit one message is replaced by a string that says so.
  auto answer = [&](auto&& value) {
    std::string out;
    JsonWriter w(out, JsonWriter::Style::kSpaced);
    w.begin_object().key(cmd);
    value(w);
    w.end_object();
    return out;
  };
  std::string out = answer([&](JsonWriter& w) { known ? w.raw(reply.json()) : w.null(); });
  if (out.size() > kMaxOutputLen) out = answer([](JsonWriter& w) { w.str("reply too large for one message"); });
  return out;
}

std::vector<std::string> commands() {
  Registry& r = reg();
  std::vector<std::string> v = {"/", "/help", "/info"};
  {
    std::lock_guard<std::mutex> g(r.mu);
    for (const auto& [k, kind] : r.kinds) {
      v.push_back(list_cmd(k));
      v.push_back(get_cmd(k));
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

void set_command_listener(CommandListener fn, void* ctx) {
  Registry& r = reg();
  std::lock_guard<std::mutex> g(r.mu);
  r.listener = fn;
  r.listener_ctx = ctx;
  for (const auto& [k, kind] : r.kinds) announce(r, k);
}

std::string info_json() {
  Reply info;
  run_command("/info", {}, &info);
  return info.json();
}

}  // namespace tern::telemetry
