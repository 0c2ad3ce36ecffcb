#include "runtime/telemetry_export.h"

#include <rte_telemetry.h>

#include <climits>
#include <deque>
#include <mutex>

#include "base/log.h"
#include "telemetry/registry.h"

namespace tern::runtime {

namespace {

using telemetry::Reply;

// rte_tel_data's arrays hold one kind; ours are u64 or string arrays.
rte_tel_data* array_of(const Reply::Value& v) {
  rte_tel_data* a = rte_tel_data_alloc();
  if (a == nullptr) return nullptr;
  if (v.kind == Reply::Value::Kind::kU64Array) {
    rte_tel_data_start_array(a, RTE_TEL_U64_VAL);
    for (uint64_t x : v.ua) rte_tel_data_add_array_u64(a, x);
  } else {
    rte_tel_data_start_array(a, RTE_TEL_STRING_VAL);
    for (const auto& s : v.sa) rte_tel_data_add_array_string(a, s.c_str());
  }
  return a;
}

void to_rte(const Reply& r, rte_tel_data* d) {
  switch (r.shape()) {
    case Reply::Shape::kNone: return;  // DPDK answers {"cmd": null}
    case Reply::Shape::kList: {
      bool strings = !r.list().empty() && r.list()[0].kind == Reply::Value::Kind::kString;
      rte_tel_data_start_array(d, strings ? RTE_TEL_STRING_VAL : RTE_TEL_U64_VAL);
      for (const auto& v : r.list()) {
        if (strings)
          rte_tel_data_add_array_string(d, v.s.c_str());
        else
          rte_tel_data_add_array_u64(d, v.u);
      }
      return;
    }
    case Reply::Shape::kDict:
      rte_tel_data_start_dict(d);
      for (const auto& [name, v] : r.dict()) {
        switch (v.kind) {
          case Reply::Value::Kind::kU64: rte_tel_data_add_dict_u64(d, name.c_str(), v.u); break;
          case Reply::Value::Kind::kI64:
            // 22.11 has only 32-bit signed values; larger ones go as text.
            if (v.i >= INT_MIN && v.i <= INT_MAX)
              rte_tel_data_add_dict_int(d, name.c_str(), static_cast<int>(v.i));
            else
              rte_tel_data_add_dict_string(d, name.c_str(), std::to_string(v.i).c_str());
            break;
          case Reply::Value::Kind::kString: rte_tel_data_add_dict_string(d, name.c_str(), v.s.c_str()); break;
          case Reply::Value::Kind::kU64Array:
          case Reply::Value::Kind::kStringArray:
            if (rte_tel_data* a = array_of(v)) {
              if (rte_tel_data_add_dict_container(d, name.c_str(), a, 0) != 0) rte_tel_data_free(a);
            }
            break;
        }
      }
      return;
  }
}

int forward(const char* cmd, const char* params, rte_tel_data* d) {
  Reply r;
  if (!telemetry::run_command(cmd, params != nullptr ? params : "", &r)) return -1;
  to_rte(r, d);
  return 0;
}

void register_with_dpdk(void*, const std::string& cmd, const std::string& help) {
  // DPDK keeps the pointers it is given: the strings live as long as the process.
  // A deque never moves its elements, so the pointers stay good.
  static std::mutex mu;
  static auto* kept = new std::deque<std::string>();
  std::lock_guard<std::mutex> g(mu);
  for (size_t i = 0; i < kept->size(); i += 2)
    if ((*kept)[i] == cmd) return;
  const std::string& c = kept->emplace_back(cmd);
  const std::string& h = kept->emplace_back(help);
  int rc = rte_telemetry_register_cmd(c.c_str(), forward, h.c_str());
  if (rc != 0) TERN_LOG(kWarn, "runtime", "rte_telemetry_register_cmd(%s) failed: %d", cmd.c_str(), rc);
}

}  // namespace

void export_telemetry_to_eal() { telemetry::set_command_listener(register_with_dpdk, nullptr); }

}  // namespace tern::runtime
