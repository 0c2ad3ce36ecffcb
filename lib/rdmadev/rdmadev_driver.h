// For drivers only: how a driver plugs into open_device(). Include this from
// pmd/<name>/ and define the driver with TERN_BUILTIN_DRIVER (in-tree drivers)
// or register it with TERN_REGISTER_DRIVER (a program's own driver); the engine
// never does.
#pragma once

#include <memory>

#include "../base/devargs.h"
#include "rdmadev.h"

namespace tern::rdma {

class Driver {
 public:
  virtual ~Driver() = default;
  virtual const char* name() const = 0;
  // One line for `--help` listings: arguments and what they mean.
  virtual const char* usage() const = 0;
  virtual Result<std::unique_ptr<Device>> open(const DevArgs& args) = 0;
};

// Adds a driver to the registry, which lives for the whole program. The
// drivers built into the library are added on the registry's first use, so a
// program needs no call and no special link flags for them; this is for
// drivers a program brings itself.
void register_driver(Driver* driver);

// The completion opcode a send-queue WR reports (SEND_WITH_INV completes as a SEND).
inline WcOpcode wc_opcode_for(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithInv: return WcOpcode::kSend;
    case WrOpcode::kRdmaWrite: return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead: return WcOpcode::kRdmaRead;
    case WrOpcode::kRegMr: return WcOpcode::kRegMr;
    case WrOpcode::kLocalInv: return WcOpcode::kLocalInv;
  }
  return WcOpcode::kSend;
}

}  // namespace tern::rdma

// Defines the in-tree driver `name` (pmd/<name>/, listed in meson.build's
// tern_builtin_drivers). The registry calls tern::rdma::builtin_driver_<name>()
// itself (rdmadev/builtin_drivers.h, generated), so linking the registry pulls
// the driver's object file out of a static libtern.a: no static constructor
// for the linker to drop, no --whole-archive.
#define TERN_BUILTIN_DRIVER(name, cls)       \
  namespace tern::rdma {                     \
  Driver* builtin_driver_##name() {          \
    static cls instance;                     \
    return &instance;                        \
  }                                          \
  }

// Registers a program's own driver at start-up, from a static constructor in
// the program's object file (a constructor inside a static archive is dropped
// unless something else pulls its object in).
#define TERN_REGISTER_DRIVER(cls)                                  \
  namespace {                                                      \
  __attribute__((constructor)) void tern_register_##cls() {        \
    static cls instance;                                           \
    ::tern::rdma::register_driver(&instance);                      \
  }                                                                \
  }
