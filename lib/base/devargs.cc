#include "base/devargs.h"

#include <cctype>
#include <cstdlib>

namespace tern {

Result<DevArgs> DevArgs::parse(std::string_view spec) {
  DevArgs a;
  a.spec_ = std::string(spec);
  size_t colon = spec.find(':');
  a.driver_ = std::string(spec.substr(0, colon));
  if (a.driver_.empty())
    return make_error(Errc::kInvalidArgument, "device spec '%s' has no driver name (want name[:k=v,...])",
                      a.spec_.c_str());
  for (char c : a.driver_) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_')
      return make_error(Errc::kInvalidArgument, "device spec '%s': bad driver name", a.spec_.c_str());
  }
  if (colon == std::string_view::npos) return a;
  std::string_view rest = spec.substr(colon + 1);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t eq = item.find('=');
    if (eq == 0 || item.empty())
      return make_error(Errc::kInvalidArgument, "device spec '%s': empty key", a.spec_.c_str());
    std::string key(item.substr(0, eq));
    std::string val = eq == std::string_view::npos ? std::string() : std::string(item.substr(eq + 1));
    if (a.has(key))
      return make_error(Errc::kInvalidArgument, "device spec '%s': key '%s' given twice", a.spec_.c_str(),
                        key.c_str());
    a.kv_.emplace_back(std::move(key), std::move(val));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return a;
}

bool DevArgs::has(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return true;
  return false;
}

std::string DevArgs::get(std::string_view key, std::string_view def) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return v;
  return std::string(def);
}

Result<uint64_t> DevArgs::get_u64(std::string_view key, uint64_t def) const {
  if (!has(key)) return def;
  std::string v = get(key);
  char* end = nullptr;
  errno = 0;
  // strtoull accepts a sign and wraps "-1" to 2^64-1: a negative count or size
  // must be an error, not a huge value.
  unsigned long long n = std::strtoull(v.c_str(), &end, 0);
  if (end == v.c_str() || errno != 0 || v.find('-') != std::string::npos || v.find('+') != std::string::npos)
    return make_error(Errc::kInvalidArgument, "device spec '%s': %.*s=%s is not a number", spec_.c_str(),
                      static_cast<int>(key.size()), key.data(), v.c_str());
  uint64_t mul = 1;
  if (*end == 'k' || *end == 'K') mul = 1ull << 10, ++end;
  else if (*end == 'm' || *end == 'M') mul = 1ull << 20, ++end;
  else if (*end == 'g' || *end == 'G') mul = 1ull << 30, ++end;
  if (*end != '\0')
    return make_error(Errc::kInvalidArgument, "device spec '%s': %.*s=%s has trailing characters",
                      spec_.c_str(), static_cast<int>(key.size()), key.data(), v.c_str());
  if (n > UINT64_MAX / mul)
    return make_error(Errc::kInvalidArgument, "device spec '%s': %.*s=%s is too large", spec_.c_str(),
                      static_cast<int>(key.size()), key.data(), v.c_str());
  return static_cast<uint64_t>(n) * mul;
}

Status DevArgs::check_keys(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : kv_) {
    bool ok = false;
    for (auto kn : known) ok = ok || kn == k;
    if (!ok) {
      std::string list;
      for (auto kn : known) list += (list.empty() ? "" : ", ") + std::string(kn);
      return make_error(Errc::kInvalidArgument, "driver '%s' has no argument '%s' (known: %s)",
                        driver_.c_str(), k.c_str(), list.c_str());
    }
  }
  return Status::ok();
}

}  // namespace tern
