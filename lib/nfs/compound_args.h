// COMPOUND4args (RFC 7530 §16.2), the arguments of NFSv4 procedure 1,
// encoded into a caller's buffer:
//
//   tag<>, minorversion, argarray<> of { opnum, op arguments }
//
// Operations are appended one by one; finish() fills in how many there are.
// Errors are sticky: the first one (the buffer is full, a name is too long,
// an operation follows a WRITE whose data goes in a chunk) is what finish()
// returns, so a caller builds a whole COMPOUND and checks once.
//
// RPC-over-RDMA (RFC 8166 §3.5.3, RFC 8267 §4.2): WRITE's data is
// DDP-eligible and travels in a read chunk instead of inline. Tern places
// the read chunk at the end of the inline arguments (lib/engine), so the
// inline part of such a WRITE ends right after its data length field, and it
// must be the COMPOUND's last operation: write_chunked() enforces both.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "../base/result.h"
#include "fattr4.h"
#include "nfs4_ops.h"
#include "nfs4_types.h"
#include "../xdr/xdr.h"

namespace tern::nfs {

// component4 names: Linux's NFS4_MAXNAMLEN; longer names are refused here
// rather than by the server (which would answer NFS4ERR_NAMETOOLONG).
inline constexpr uint32_t kMaxNameSize = 255;
// The tag is echoed by the server and means nothing to it.
inline constexpr uint32_t kMaxTagSize = 64;

class CompoundArgs {
 public:
  CompoundArgs(std::span<uint8_t> buf, std::string_view tag = {}, uint32_t minorversion = 0);

  void putrootfh();
  void putfh(const FileHandle& fh);
  void lookup(std::string_view name);
  void getfh();
  void getattr(AttrSet attrs);
  // READ4args. With RPC-over-RDMA the reply's data goes to the call's write
  // chunk; nothing about that is in the arguments.
  void read(const Stateid& stateid, uint64_t offset, uint32_t count);
  // WRITE4args with the data inline.
  void write(const Stateid& stateid, uint64_t offset, StableHow stable, std::span<const uint8_t> data);
  // WRITE4args whose len data bytes go in a read chunk: the arguments end at
  // the data length field, and no operation may follow.
  void write_chunked(const Stateid& stateid, uint64_t offset, StableHow stable, uint32_t len);
  void commit(uint64_t offset, uint32_t count);

  uint32_t num_ops() const { return nops_; }
  // The encoded arguments (a view into the buffer), or the first error:
  // kInvalidArgument for a name or tag too long or an operation after
  // write_chunked(), kNoResources when the buffer was too small.
  Result<std::span<const uint8_t>> finish();

 private:
  void op(Op o);
  void fail(Status s);

  std::span<uint8_t> buf_;
  xdr::XdrWriter w_;
  size_t numops_at_ = 0;
  uint32_t nops_ = 0;
  bool sealed_ = false;  // a chunked WRITE was the last operation
  Status err_;
};

}  // namespace tern::nfs
