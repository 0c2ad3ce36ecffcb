// The results of every NFSv3 procedure (RFC 1813 §3.3): a struct each,
// encoded by a server and decoded by a client. Each starts with the
// nfsstat3; which fields follow depends on it, as the RFC's unions say
// (a failed LOOKUP still carries the directory's attributes, a failed
// CREATE the directory's wcc_data, and so on).
//
// READ over RPC-over-RDMA (RFC 8166 §3.5.3, RFC 8267 §4.2): when the call
// offered a write chunk, the server RDMA-writes the data there and the
// inline READ3resok carries a "reduced" data item -- its length word, no
// bytes, no pad -- as Linux svcrdma does. ReadRes::data_in_chunk says which.
//
// READDIR and READDIRPLUS results are lists bounded by the client's byte
// counts; DirListEncoder adds entries while they fit and DirListDecoder
// walks them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "nfs3_types.h"
#include "nfs3_xdr.h"
#include "../xdr/xdr.h"

namespace tern::nfs::nfs3 {

using Wcc = xdr3::Wcc;

struct GetattrRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  Fattr3 attr;  // kOk
};
// SETATTR, REMOVE, RMDIR: a status and the object's (directory's) wcc_data.
struct WccRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  Wcc wcc;
};
struct LookupRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  Fh3 obj;                          // kOk
  std::optional<Fattr3> obj_attr;   // kOk
  std::optional<Fattr3> dir_attr;   // always
};
struct AccessRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  uint32_t access = 0;  // kOk
};
struct ReadlinkRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  std::string_view target;  // kOk
  // READLINK's path is DDP-eligible (RFC 8267 §4.2) as READ's data is:
  // encoding with data_in_chunk writes the reduced item (its length) and
  // the server puts the bytes into the call's write chunk.
  bool data_in_chunk = false;
};
struct ReadRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  uint32_t count = 0;  // kOk
  bool eof = false;
  // Encoding: the bytes to go inline, unless data_in_chunk (then only their
  // length, count, is encoded). Decoding: the inline bytes; empty and
  // data_in_chunk when the reply carried the reduced item.
  std::span<const uint8_t> data;
  bool data_in_chunk = false;
};
struct WriteRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  Wcc wcc;
  uint32_t count = 0;  // kOk
  StableHow committed = StableHow::kUnstable;
  Verf3 verf;
};
// CREATE, MKDIR, SYMLINK, MKNOD.
struct CreateRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fh3> obj;          // kOk
  std::optional<Fattr3> obj_attr;  // kOk
  Wcc dir_wcc;                     // always
};
struct RenameRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  Wcc from_wcc, to_wcc;
};
struct LinkRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  Wcc dir_wcc;
};
struct FsstatRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  uint64_t tbytes = 0, fbytes = 0, abytes = 0, tfiles = 0, ffiles = 0, afiles = 0;
  uint32_t invarsec = 0;
};
struct FsinfoRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  uint32_t rtmax = 0, rtpref = 0, rtmult = 0, wtmax = 0, wtpref = 0, wtmult = 0, dtpref = 0;
  uint64_t maxfilesize = 0;
  NfsTime3 time_delta;
  uint32_t properties = 0;
};
struct PathconfRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  std::optional<Fattr3> attr;
  uint32_t linkmax = 0, name_max = 0;
  bool no_trunc = true, chown_restricted = true, case_insensitive = false, case_preserving = true;
};
struct CommitRes {
  Nfs3Stat status = Nfs3Stat::kOk;
  Wcc wcc;
  Verf3 verf;  // kOk
};

// ---- encoding (server); check w.ok() after
void encode(xdr::XdrWriter& w, const GetattrRes& r);
void encode(xdr::XdrWriter& w, const WccRes& r);
void encode(xdr::XdrWriter& w, const LookupRes& r);
void encode(xdr::XdrWriter& w, const AccessRes& r);
void encode(xdr::XdrWriter& w, const ReadlinkRes& r);
void encode(xdr::XdrWriter& w, const ReadRes& r);
void encode(xdr::XdrWriter& w, const WriteRes& r);
void encode(xdr::XdrWriter& w, const CreateRes& r);
void encode(xdr::XdrWriter& w, const RenameRes& r);
void encode(xdr::XdrWriter& w, const LinkRes& r);
void encode(xdr::XdrWriter& w, const FsstatRes& r);
void encode(xdr::XdrWriter& w, const FsinfoRes& r);
void encode(xdr::XdrWriter& w, const PathconfRes& r);
void encode(xdr::XdrWriter& w, const CommitRes& r);

// ---- decoding (client). False: the reply is malformed (truncated, an
// unknown status or enum value).
bool decode(std::span<const uint8_t> in, GetattrRes* r);
bool decode(std::span<const uint8_t> in, WccRes* r);
bool decode(std::span<const uint8_t> in, LookupRes* r);
bool decode(std::span<const uint8_t> in, AccessRes* r);
// `chunk`: the bytes the server wrote into the call's write chunk, or
// nullptr when it offered none (then the path must be inline).
bool decode(std::span<const uint8_t> in, ReadlinkRes* r, std::span<const uint8_t>* chunk = nullptr);
// `chunk_len`: the bytes the server wrote into the call's write chunk
// (CallReply::bulk_recv_len), or -1 when the call offered none. With a
// chunk, the reply must carry the reduced item and count must equal it.
bool decode(std::span<const uint8_t> in, int64_t chunk_len, ReadRes* r);
bool decode(std::span<const uint8_t> in, WriteRes* r);
bool decode(std::span<const uint8_t> in, CreateRes* r);
bool decode(std::span<const uint8_t> in, RenameRes* r);
bool decode(std::span<const uint8_t> in, LinkRes* r);
bool decode(std::span<const uint8_t> in, FsstatRes* r);
bool decode(std::span<const uint8_t> in, FsinfoRes* r);
bool decode(std::span<const uint8_t> in, PathconfRes* r);
bool decode(std::span<const uint8_t> in, CommitRes* r);

// READDIR3res / READDIRPLUS3res, built entry by entry:
//
//   DirListEncoder e(w, plus, maxcount, dircount);
//   e.begin(Nfs3Stat::kOk, &dir_attr, verf);
//   while (more && e.add(fileid, name, cookie, &attr, &fh)) ...;
//   e.finish(eof_if_all_added);
//
// maxcount bounds the whole result (READDIR's count, READDIRPLUS's
// maxcount: RFC 1813 §3.3.16-17); dircount (READDIRPLUS only, 0: none)
// bounds the directory part of the entries (fileid, name, cookie). add()
// returns false, adding nothing, when the entry would pass either bound;
// finish() then ends the list with eof false. A failed status is begin()
// with its status and finish() writes nothing more.
class DirListEncoder {
 public:
  DirListEncoder(xdr::XdrWriter& w, bool plus, uint32_t maxcount, uint32_t dircount = 0)
      : w_(w), plus_(plus), maxcount_(maxcount), dircount_(dircount) {}
  void begin(Nfs3Stat status, const Fattr3* dir_attr, const Verf3& verf);
  // attr and fh (READDIRPLUS only) may be null: sent as absent.
  bool add(uint64_t fileid, std::string_view name, uint64_t cookie, const Fattr3* attr = nullptr,
           const Fh3* fh = nullptr);
  void finish(bool eof);
  uint32_t entries() const { return n_; }

 private:
  xdr::XdrWriter& w_;
  bool plus_;
  uint32_t maxcount_, dircount_;
  uint32_t dirbytes_ = 0;
  uint32_t n_ = 0;
  bool ok_status_ = false;
  size_t start_ = 0;
};

struct DirEntry {
  uint64_t fileid = 0;
  std::string_view name;
  uint64_t cookie = 0;
  std::optional<Fattr3> attr;  // READDIRPLUS
  std::optional<Fh3> fh;       // READDIRPLUS
};

class DirListDecoder {
 public:
  DirListDecoder(std::span<const uint8_t> in, bool plus);
  // The status, the directory's attributes and (kOk) the verifier; false
  // when malformed.
  bool begin();
  Nfs3Stat status() const { return status_; }
  const std::optional<Fattr3>& dir_attr() const { return dir_attr_; }
  const Verf3& verf() const { return verf_; }
  // The next entry: true with *e filled, false at the end of the list (then
  // eof() says whether the directory ended) or when malformed (ok() false).
  bool next(DirEntry* e);
  bool eof() const { return eof_; }
  bool ok() const { return r_.ok(); }

 private:
  xdr::XdrReader r_;
  bool plus_;
  Nfs3Stat status_ = Nfs3Stat::kOk;
  std::optional<Fattr3> dir_attr_;
  Verf3 verf_;
  bool done_ = false, eof_ = false;
};

}  // namespace tern::nfs::nfs3
