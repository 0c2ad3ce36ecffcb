// COMPOUND4res (RFC 7530 §16.2), the results of NFSv4 procedure 1:
//
//   status, tag<>, resarray<> of { opnum, nfsstat4, [result if NFS4_OK] }
//
// A server runs the operations in order and stops at the first that fails;
// that operation's status is the last result and the COMPOUND's status. A
// client reads the results in the order it sent the operations, naming each:
// a result for another operation, a missing or malformed one, or a failed
// one that is not last is the server's mistake (kRemoteError). Decoding never
// allocates; file data, tags and strings are views into the results buffer.
//
// READ over RPC-over-RDMA (RFC 8166 §3.5.3, RFC 8267 §4.2): READ4resok's data
// is DDP-eligible. When the call offered a write chunk, the server RDMA-Writes
// the data bytes there and the inline reply carries a "reduced" data item:
// the length field stays, the bytes and their XDR pad are left out (Linux
// svcrdma: pcl_process_nonpayloads). The chunk's returned length must equal
// the data length.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "../base/result.h"
#include "fattr4.h"
#include "nfs4_ops.h"
#include "nfs4_status.h"
#include "nfs4_types.h"
#include "../xdr/xdr.h"

namespace tern::nfs {

// How many results a reply may say it holds: a bound on a peer-given count,
// far above any COMPOUND this client sends.
inline constexpr uint32_t kMaxResults = 1024;

// Where READ's data is: inline (no write chunk was offered) or in the call's
// write chunk, `chunk_len` bytes of it (CallReply::bulk_recv_len).
struct ReadData {
  bool in_chunk = false;
  uint32_t chunk_len = 0;
  static ReadData inline_data() { return {}; }
  static ReadData chunk(uint32_t len) { return {true, len}; }
};

struct Read4Res {
  bool eof = false;
  uint32_t count = 0;              // bytes of data
  std::span<const uint8_t> data;   // inline data; empty when it came in the chunk
};

struct Write4Res {
  uint32_t count = 0;  // bytes written
  StableHow committed = StableHow::kUnstable;
  Verifier verf;
};

class CompoundRes {
 public:
  // Reads status, tag and the result count. kRemoteError when truncated or
  // the count is over kMaxResults.
  static Result<CompoundRes> decode(std::span<const uint8_t> results);

  Nfs4Stat status() const { return status_; }
  std::string_view tag() const { return tag_; }
  uint32_t count() const { return count_; }

  // Each reads the next result, which must be for that operation. The value
  // is the operation's status; *out is written only for NFS4_OK. When the
  // server stopped before this operation (no results left and a failed
  // COMPOUND status), the value is the COMPOUND's status.
  Result<Nfs4Stat> putrootfh();
  Result<Nfs4Stat> putfh();
  Result<Nfs4Stat> lookup();
  Result<Nfs4Stat> getfh(FileHandle* out);
  Result<Nfs4Stat> getattr(Fattr4* out);
  Result<Nfs4Stat> read(ReadData where, Read4Res* out);
  Result<Nfs4Stat> write(Write4Res* out);
  Result<Nfs4Stat> commit(Verifier* out);

  // After the last result the caller expects: kRemoteError when results or
  // bytes are left over.
  Status finish() const;

 private:
  explicit CompoundRes(std::span<const uint8_t> b) : r_(b) {}
  // Reads the next result's opnum and status. *run: the result body follows.
  Result<Nfs4Stat> begin(Op op, bool* run);
  Status malformed(Op op) const;

  xdr::XdrReader r_;
  Nfs4Stat status_ = Nfs4Stat::kOk;
  std::string_view tag_;
  uint32_t count_ = 0;
  uint32_t next_ = 0;
  bool stopped_ = false;  // a failed result was read: nothing may follow
};

}  // namespace tern::nfs
