// One NFSv3 call being served, as the procedure files see it: the call, who
// it acts as, where its results are encoded, and the bulk data (a READ's)
// that goes into the client's write chunk. Private to Nfs3Server.
#pragma once

#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "nfs/nfs3_types.h"
#include "nfsd/creds.h"
#include "nfsd/fd_cache.h"
#include "nfsd/nfs3_server.h"
#include "xdr/xdr.h"

namespace tern::nfsd {

struct Nfs3Server::Op {
  Op(rpc::ServerCall* c, const ClientAddr& a, std::vector<uint8_t>& buf) : call(c), addr(a), w(buf) {}
  rpc::ServerCall* call;
  ClientAddr addr;              // the caller's, matched against the export's list
  // Set by the first handle resolved (resolve()): the export it names, and
  // what that export's list allows this caller.
  const Export* exp = nullptr;
  bool read_only = true;
  Cred cred;                    // squashed as the export says; anonymous until then
  xdr::XdrWriter w;
  std::span<const uint8_t> bulk;
  // Set by serve() for a call the reply cache tracks; a procedure that
  // defers (Nfs3Server::defer) takes the key along, and sets pending.
  bool cached = false;
  ReplyKey* key = nullptr;
  bool pending = false;
  // The call's Pending once it was deferred (a job run as the caller may
  // continue in another).
  Pending* pend = nullptr;
};

// A call waiting for its storage operation (READ, a stable WRITE, COMMIT):
// what finish_io() needs to answer it from the completion. The call stays
// valid until it is answered, even when its connection is lost meanwhile
// (the engine frees it at reply()).
struct Nfs3Server::Pending {
  Nfs3Server* srv = nullptr;
  rpc::ServerCall* call = nullptr;
  bool cached = false;
  ReplyKey key;
  // The export the call resolved, kept alive across a reload.
  std::shared_ptr<const ExportTable> table;
  const Export* exp = nullptr;
  nfs::Nfs3Proc proc = nfs::Nfs3Proc::kNull;
  // READ: where the data goes, what was read at once (RWF_NOWAIT) before
  // the rest went asynchronous, and inline data's own buffer.
  uint64_t offset = 0;
  bool chunk = false;
  uint8_t* buf = nullptr;
  uint32_t have = 0;
  std::vector<uint8_t> inl;
  // WRITE and COMMIT; a batched one's file (sync_batch.h) and, for a
  // WRITE, the bytes written before it joined the sync.
  nfs::StableHow stable = nfs::StableHow::kUnstable;
  nfs::WccAttr before;
  bool batched = false;
  SyncKey file;
  uint32_t written = 0;
  // A job run as the caller (Nfs3Server::as_caller): who, and what follows.
  Cred cred;
  bool read_only = true;
  std::function<void(Op&, nfs::Nfs3Stat)> then;
  // A caller op on the storage ring (as_caller_op): its description, alive
  // until it completes, and the personality it was given.
  std::shared_ptr<const CallerOp> cop;
  int personality = 0;
};

// A name as the C string system calls take; only for names check_name()
// passed (at most 255 bytes, no NUL).
struct CName {
  char s[nfs::kNfs3MaxName + 1];
  explicit CName(std::string_view n) {
    const size_t len = n.size() < sizeof s ? n.size() : sizeof s - 1;
    std::memcpy(s, n.data(), len);
    s[len] = 0;
  }
};

}  // namespace tern::nfsd
