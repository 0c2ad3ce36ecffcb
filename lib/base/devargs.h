// Driver selection strings, DPDK-style: "name" or "name:key=value,key=value",
// e.g. "shm:path=/run/tern.sock" or "verbs:dev=rxe0,port=1".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "result.h"

namespace tern {

class DevArgs {
 public:
  static Result<DevArgs> parse(std::string_view spec);

  const std::string& driver() const { return driver_; }
  const std::string& spec() const { return spec_; }
  bool has(std::string_view key) const;
  // Value of key, or def when absent.
  std::string get(std::string_view key, std::string_view def = {}) const;
  // Integer value of key (decimal, 0x hex, k/m/g suffixes), or def when absent.
  Result<uint64_t> get_u64(std::string_view key, uint64_t def) const;
  // Fails naming the first key not in `known`, so that typos are caught.
  Status check_keys(std::initializer_list<std::string_view> known) const;

 private:
  std::string spec_;
  std::string driver_;
  std::vector<std::pair<std::string, std::string>> kv_;
};

}  // namespace tern
