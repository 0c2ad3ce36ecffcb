// For drivers only: how a driver plugs into open_device(). Include this from
// pmd/<name>/ and register with TERN_REGISTER_DRIVER; the engine never does.
#pragma once

#include <memory>

#include "base/devargs.h"
#include "rdmadev/rdmadev.h"

namespace tern::rdma {

class Driver {
 public:
  virtual ~Driver() = default;
  virtual const char* name() const = 0;
  // One line for `--help` listings: arguments and what they mean.
  virtual const char* usage() const = 0;
  virtual Result<std::unique_ptr<Device>> open(const DevArgs& args) = 0;
};

// Called from static constructors; the registry lives for the whole program.
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

// Registers a driver at program start. Driver objects sit in a static archive
// linked whole (see meson.build), so the constructor is never dropped.
#define TERN_REGISTER_DRIVER(cls)                                  \
  namespace {                                                      \
  __attribute__((constructor)) void tern_register_##cls() {        \
    static cls instance;                                           \
    ::tern::rdma::register_driver(&instance);                      \
  }                                                                \
  }
