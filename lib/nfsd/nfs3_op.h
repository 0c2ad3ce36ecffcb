// One NFSv3 call being served, as the procedure files see it: the call, who
// it acts as, where its results are encoded, and the bulk data (a READ's)
// that goes into the client's write chunk. Private to Nfs3Server.
#pragma once

#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "nfs/nfs3_types.h"
#include "nfsd/creds.h"
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
