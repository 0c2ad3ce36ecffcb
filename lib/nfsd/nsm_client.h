// tern-nfsd's client of the host's rpc.statd (NSM, program 100024): asks it
// to watch each host that takes a lock (SM_MON), naming a program of
// tern-nfsd's own to call when that host reboots, and to forget them all
// when tern-nfsd stops (SM_UNMON_ALL). statd then calls that program with
// the host's name, and the NLM server releases the host's locks
// (nlm_server.h).
//
// statd is found through the local rpcbind (UDP). Without statd, locks
// still work; a client that reboots keeps its locks until it sends FREE_ALL
// or tern-nfsd restarts — said once in the log.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "base/result.h"
#include "nfsd/rpc_caller.h"

namespace tern::nfsd {

struct NsmClientOptions {
  // statd's address; nullopt: ask the local rpcbind (127.0.0.1:111).
  std::optional<RpcPeer> statd;
  // What statd calls back (found through rpcbind on 127.0.0.1, over UDP):
  // nfs-utils' statd calls back program 100021 (NLM) only.
  uint32_t callback_prog = 100021;
  uint32_t callback_vers = 4;
  uint32_t callback_proc = 16;
  int timeout_ms = 3000;
};

class NsmClient {
 public:
  explicit NsmClient(NsmClientOptions opt) : opt_(std::move(opt)) {}
  // SM_MON of mon_name (an address or name statd can resolve), once per
  // name: later calls for the same name return at once.
  Status monitor(const std::string& mon_name);
  // SM_UNMON_ALL, when anything was monitored.
  Status unmonitor_all();
  size_t monitored() const { return monitored_.size(); }

 private:
  Result<std::vector<uint8_t>> call(uint32_t proc, std::span<const uint8_t> args);

  NsmClientOptions opt_;
  std::set<std::string> monitored_;
};

}  // namespace tern::nfsd
