// MOUNT over UDP, next to mountd.h's TCP service and on the same port:
// mount.nfs asks MOUNT over UDP unless given mountproto=tcp, and showmount
// asks version 1. Answers come from mountd_answer() (one set of answers
// for both transports); version 1 is answered as version 3 for the
// procedures whose encoding is the same in both (NULL, DUMP, UMNT,
// UMNTALL, EXPORT). Version 1's MNT returns a 32-byte handle that
// tern-nfsd's handles do not fit: PROC_UNAVAIL.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "nfsd/rpc_service.h"

namespace tern::nfsd {

class ExportTable;
class PublishedExports;
struct ClientAddr;

inline constexpr uint32_t kMountVersion1 = 1;

// One MOUNT call of version 1 or 3 (any other version: PROG_MISMATCH 1..3
// would be wrong, as only the procedures above exist in 1; mountd_answer's
// PROG_MISMATCH 3..3 is kept). Public for the tests.
// `from` is the datagram's source: MNT answers only a client the export lists.
bool mount_answer_v1_v3(const ExportTable& exports, const ClientAddr& from, std::span<const uint8_t> call,
                        std::vector<uint8_t>* reply);

// The UDP service on addr:port (the port MOUNT's TCP listener has), for the
// exports `pub` holds at each call (it outlives the service).
Result<std::unique_ptr<RpcService>> start_mount_udp(const PublishedExports& pub, const std::string& addr,
                                                    uint16_t port);

}  // namespace tern::nfsd
