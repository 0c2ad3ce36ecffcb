// The MOUNT v3 service (RFC 1813 Appendix I) over TCP, for the exports in
// force (published_exports.h; one Export is a table of one):
// what `mount -t nfs -o vers=3,mountport=M,mountproto=tcp` asks first, to
// turn the export's path into its root file handle. ONC RPC over TCP with
// record marking (RFC 5531 §11), on a thread of its own: it is the control
// path, a few calls per mount.
//
// Garbage gets what RFC 5531 says (GARBAGE_ARGS, PROC_UNAVAIL,
// PROG_UNAVAIL, PROG_MISMATCH, AUTH_ERROR); a record over 64 KiB is closed.
//
// No client can keep others from mounting (a slowloris holding every slot
// with a byte now and then): a record must arrive whole within
// record_ms of its first byte, however it trickles; a connection with no
// record under way goes after idle_ms; one client address holds at most
// max_per_address connections (its next one replaces its own oldest); and
// when all max_clients slots are taken, a newcomer replaces the least
// recently active connection of the address that holds the most. So an
// address over its share only ever waits for itself.
//
// MNT gives an export's root handle only to a client its list names (the
// TCP peer's address, client_spec.h), else MNT3ERR_ACCES; EXPORT lists every
// export with its client specifications, as showmount -e shows them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "nfsd/client_spec.h"
#include "nfsd/export.h"
#include "nfsd/export_table.h"
#include "nfsd/published_exports.h"
#include "nfsd/rpc_service.h"

namespace tern::nfsd {

struct MountdOptions {
  std::string addr = "0.0.0.0";  // IPv4 or IPv6 address to listen on
  uint16_t port = 20048;         // 0: any free port (port() says which)
  uint32_t record_ms = 5000;     // a record's deadline from its first byte
  uint32_t idle_ms = 30000;      // a connection with nothing under way
  uint32_t max_clients = 64;
  uint32_t max_per_address = 8;
};

class Mountd {
 public:
  // The exports `pub` holds at each call (it outlives the Mountd).
  static Result<std::unique_ptr<Mountd>> start(const PublishedExports& pub, const MountdOptions& opt);
  // One export (which outlives the Mountd).
  static Result<std::unique_ptr<Mountd>> start(const Export& exp, const MountdOptions& opt);
  Mountd(const Mountd&) = delete;
  Mountd& operator=(const Mountd&) = delete;

  uint16_t port() const { return svc_->port(); }
  // MNT calls answered with the root handle, and calls answered in all.
  uint64_t mounts() const { return mounts_.load(std::memory_order_relaxed); }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }
  // Connections closed for a record past its deadline (or idle), and
  // connections replaced to make room for another (over its address's
  // share, or the table full).
  uint64_t timed_out() const { return svc_->timed_out(); }
  uint64_t replaced() const { return svc_->replaced(); }

 private:
  explicit Mountd(const PublishedExports& pub) : pub_(pub) {}

  std::unique_ptr<PublishedExports> own_;  // start(const Export&)'s table of one
  const PublishedExports& pub_;
  std::atomic<uint64_t> mounts_{0}, calls_{0};
  std::unique_ptr<RpcService> svc_;  // last: stopped first, before what it reads
};

// One ONC RPC call to the MOUNT program, as bytes in and bytes out (the
// record without its marking): what the thread does with each record.
// Public for the tests. Returns false when nothing should be sent (a
// message that is not a call). `from` is the caller's address.
bool mountd_answer(const ExportTable& exports, const ClientAddr& from, std::span<const uint8_t> call,
                   std::vector<uint8_t>* reply, bool* mounted);
// The same for one export, asked from loopback.
bool mountd_answer(const Export& exp, std::span<const uint8_t> call, std::vector<uint8_t>* reply, bool* mounted);

}  // namespace tern::nfsd
