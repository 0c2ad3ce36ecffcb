#include <algorithm>
#include <cstring>

#include "rdmadev/rdmadev_driver.h"

namespace tern::rdma {

namespace {
std::vector<Driver*>& drivers() {
  static std::vector<Driver*> d;
  return d;
}
}  // namespace

void register_driver(Driver* driver) {
  for (Driver* d : drivers()) TERN_CHECK(std::strcmp(d->name(), driver->name()) != 0, "driver '%s' registered twice", driver->name());
  drivers().push_back(driver);
}

std::vector<std::string> driver_names() {
  std::vector<std::string> names;
  for (Driver* d : drivers()) names.emplace_back(d->name());
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::unique_ptr<Device>> open_device(std::string_view spec) {
  auto args = DevArgs::parse(spec);
  if (!args) return args.status();
  for (Driver* d : drivers()) {
    if (args->driver() == d->name()) return d->open(*args);
  }
  std::string known;
  for (const auto& n : driver_names()) known += (known.empty() ? "" : ", ") + n;
  return make_error(Errc::kNotFound, "no driver '%s' in this build (drivers: %s)", args->driver().c_str(),
                    known.c_str());
}

}  // namespace tern::rdma
