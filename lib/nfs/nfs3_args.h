// The arguments of every NFSv3 procedure (RFC 1813 §3.3): a struct each,
// decoded by a server from a call's arguments (views into the call's
// buffers: names, paths and data are not copied) and encoded by a client.
//
// Decoding returns false for arguments a server must answer GARBAGE_ARGS:
// truncated, a handle over 64 bytes, a name or path over kNfs3MaxPath, an
// enum value the protocol does not have. Values that decode but that the
// server refuses (an empty name, a name over 255 bytes) are its business,
// answered with an nfsstat3. Bytes left after the arguments are ignored, as
// Linux nfsd ignores them.
//
// RPC-over-RDMA (RFC 8166 §3.4.5, RFC 8267 §4): WRITE's data and SYMLINK's
// path are DDP-eligible. A client may send them in a read chunk whose
// position is where the item's bytes would be -- right after its length
// word, which stays inline (Linux's xprtrdma does this for any WRITE or
// SYMLINK too large to go inline) -- or inline with the rest. decode() of
// WriteArgs and SymlinkArgs takes the call's read chunks and finds the
// bytes in either place.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "../engine/engine.h"
#include "nfs3_types.h"
#include "../xdr/xdr.h"

namespace tern::nfs::nfs3 {

// diropargs3: a directory and a name in it.
struct DirOp {
  Fh3 dir;
  std::string_view name;
};

struct GetattrArgs {
  Fh3 obj;
};
struct SetattrArgs {
  Fh3 obj;
  Sattr3 attr;
  bool check_ctime = false;  // sattrguard3: apply only if the ctime is still guard_ctime
  NfsTime3 guard_ctime;
};
struct LookupArgs {
  DirOp what;
};
struct AccessArgs {
  Fh3 obj;
  uint32_t access = 0;
};
struct ReadlinkArgs {
  Fh3 link;
};
struct ReadArgs {
  Fh3 file;
  uint64_t offset = 0;
  uint32_t count = 0;
};
struct WriteArgs {
  Fh3 file;
  uint64_t offset = 0;
  uint32_t count = 0;
  StableHow stable = StableHow::kUnstable;
  std::span<const uint8_t> data;  // inline or in a read chunk
  bool data_in_chunk = false;
};
struct CreateArgs {
  DirOp where;
  CreateMode how = CreateMode::kUnchecked;
  Sattr3 attr;  // kUnchecked, kGuarded
  Verf3 verf;   // kExclusive
};
struct MkdirArgs {
  DirOp where;
  Sattr3 attr;
};
struct SymlinkArgs {
  DirOp where;
  Sattr3 attr;
  std::string_view target;  // inline or in a read chunk
  bool target_in_chunk = false;
};
struct MknodArgs {
  DirOp where;
  FileType type = FileType::kFifo;
  Sattr3 attr;                  // for kChr, kBlk, kSock, kFifo
  uint32_t major = 0, minor = 0;  // for kChr, kBlk
};
struct RemoveArgs {
  DirOp what;
};
struct RenameArgs {
  DirOp from, to;
};
struct LinkArgs {
  Fh3 file;
  DirOp link;
};
struct ReaddirArgs {
  Fh3 dir;
  uint64_t cookie = 0;
  Verf3 verf;
  uint32_t count = 0;
};
struct ReaddirplusArgs {
  Fh3 dir;
  uint64_t cookie = 0;
  Verf3 verf;
  uint32_t dircount = 0;
  uint32_t maxcount = 0;
};
struct FsArgs {  // FSSTAT, FSINFO, PATHCONF: the file system's root or any object in it
  Fh3 obj;
};
struct CommitArgs {
  Fh3 file;
  uint64_t offset = 0;
  uint32_t count = 0;
};

// ---- decoding (server)
bool decode(std::span<const uint8_t> in, GetattrArgs* a);
bool decode(std::span<const uint8_t> in, SetattrArgs* a);
bool decode(std::span<const uint8_t> in, LookupArgs* a);
bool decode(std::span<const uint8_t> in, AccessArgs* a);
bool decode(std::span<const uint8_t> in, ReadlinkArgs* a);
bool decode(std::span<const uint8_t> in, ReadArgs* a);
// `chunks`: the call's read chunks (ServerCall::read_chunks()), positions
// relative to the start of `in`. A chunk must sit exactly where the data's
// bytes begin and hold them (a client that counted the XDR pad in may hold
// up to three more); anywhere else, or more than one, and the call is
// garbage.
bool decode(std::span<const uint8_t> in, std::span<const rpc::ReadChunkData> chunks, WriteArgs* a);
bool decode(std::span<const uint8_t> in, CreateArgs* a);
bool decode(std::span<const uint8_t> in, MkdirArgs* a);
// As WRITE's data, SYMLINK's path may be in a read chunk.
bool decode(std::span<const uint8_t> in, std::span<const rpc::ReadChunkData> chunks, SymlinkArgs* a);
bool decode(std::span<const uint8_t> in, MknodArgs* a);
bool decode(std::span<const uint8_t> in, RemoveArgs* a);
bool decode(std::span<const uint8_t> in, RenameArgs* a);
bool decode(std::span<const uint8_t> in, LinkArgs* a);
bool decode(std::span<const uint8_t> in, ReaddirArgs* a);
bool decode(std::span<const uint8_t> in, ReaddirplusArgs* a);
bool decode(std::span<const uint8_t> in, FsArgs* a);
bool decode(std::span<const uint8_t> in, CommitArgs* a);

// ---- encoding (client); check w.ok() after
void encode(xdr::XdrWriter& w, const GetattrArgs& a);
void encode(xdr::XdrWriter& w, const SetattrArgs& a);
void encode(xdr::XdrWriter& w, const LookupArgs& a);
void encode(xdr::XdrWriter& w, const AccessArgs& a);
void encode(xdr::XdrWriter& w, const ReadlinkArgs& a);
void encode(xdr::XdrWriter& w, const ReadArgs& a);
// WRITE with its data inline.
void encode(xdr::XdrWriter& w, const WriteArgs& a);
// WRITE whose data goes in a read chunk: the arguments end with the data's
// length word; the chunk's position is w.bytes_written() afterwards.
void encode_write_chunked(xdr::XdrWriter& w, const WriteArgs& a);
void encode(xdr::XdrWriter& w, const CreateArgs& a);
void encode(xdr::XdrWriter& w, const MkdirArgs& a);
void encode(xdr::XdrWriter& w, const SymlinkArgs& a);
// SYMLINK whose path goes in a read chunk at the end (as for WRITE).
void encode_symlink_chunked(xdr::XdrWriter& w, const SymlinkArgs& a);
void encode(xdr::XdrWriter& w, const MknodArgs& a);
void encode(xdr::XdrWriter& w, const RemoveArgs& a);
void encode(xdr::XdrWriter& w, const RenameArgs& a);
void encode(xdr::XdrWriter& w, const LinkArgs& a);
void encode(xdr::XdrWriter& w, const ReaddirArgs& a);
void encode(xdr::XdrWriter& w, const ReaddirplusArgs& a);
void encode(xdr::XdrWriter& w, const FsArgs& a);
void encode(xdr::XdrWriter& w, const CommitArgs& a);

}  // namespace tern::nfs::nfs3
