#include "nfs/nfs3_args.h"

#include "nfs/nfs3_xdr.h"

namespace tern::nfs::nfs3 {

using xdr::XdrReader;
using xdr::XdrWriter;
using namespace xdr3;

namespace {

bool get_dirop(XdrReader& r, DirOp* d) {
  get_fh(r, &d->dir);
  d->name = r.get_string(kNfs3MaxPath);
  return r.ok();
}

void put_dirop(XdrWriter& w, const DirOp& d) {
  put_fh(w, d.dir);
  w.put_string(d.name);
}

// An opaque<> or string<> item that RFC 8267 makes DDP-eligible (WRITE's
// data, SYMLINK's path): its length word inline, its bytes either inline
// too or in the call's only read chunk, placed exactly where they begin
// (holding them, and at most their XDR pad besides). It must be the
// arguments' last item: a chunk anywhere else, or a second one, is garbage.
bool get_ddp_item(XdrReader& r, std::span<const rpc::ReadChunkData> chunks, uint32_t max,
                  std::span<const uint8_t>* data, bool* in_chunk) {
  const uint32_t len = r.get_u32();
  if (!r.ok() || len > max || chunks.size() > 1) return false;
  *in_chunk = false;
  if (chunks.size() == 1) {
    const rpc::ReadChunkData& c = chunks[0];
    if (c.position != r.position() || c.data.size() < len || c.data.size() > xdr::padded_size(len)) return false;
    *data = c.data.first(len);
    *in_chunk = true;
    return true;
  }
  *data = r.get_opaque_fixed(len);
  return r.ok();
}

StableHow get_stable(XdrReader& r) {
  uint32_t v = r.get_u32();
  if (v > 2) r.fail();
  return static_cast<StableHow>(v);
}

}  // namespace

bool decode(std::span<const uint8_t> in, GetattrArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->obj);
  return r.ok();
}

bool decode(std::span<const uint8_t> in, SetattrArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->obj);
  get_sattr(r, &a->attr);
  if ((a->check_ctime = r.get_bool())) a->guard_ctime = get_time(r);
  return r.ok();
}

bool decode(std::span<const uint8_t> in, LookupArgs* a) {
  *a = {};
  XdrReader r(in);
  return get_dirop(r, &a->what);
}

bool decode(std::span<const uint8_t> in, AccessArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->obj);
  a->access = r.get_u32();
  return r.ok();
}

bool decode(std::span<const uint8_t> in, ReadlinkArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->link);
  return r.ok();
}

bool decode(std::span<const uint8_t> in, ReadArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->file);
  a->offset = r.get_u64();
  a->count = r.get_u32();
  return r.ok();
}

bool decode(std::span<const uint8_t> in, std::span<const rpc::ReadChunkData> chunks, WriteArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->file);
  a->offset = r.get_u64();
  a->count = r.get_u32();
  a->stable = get_stable(r);
  if (!get_ddp_item(r, chunks, UINT32_MAX, &a->data, &a->data_in_chunk)) return false;
  // The data is count bytes (RFC 1813 §3.3.7).
  return a->data.size() == a->count;
}

bool decode(std::span<const uint8_t> in, CreateArgs* a) {
  *a = {};
  XdrReader r(in);
  get_dirop(r, &a->where);
  uint32_t how = r.get_u32();
  if (how > 2) r.fail();
  a->how = static_cast<CreateMode>(how);
  if (a->how == CreateMode::kExclusive) a->verf = get_verf(r);
  else get_sattr(r, &a->attr);
  return r.ok();
}

bool decode(std::span<const uint8_t> in, MkdirArgs* a) {
  *a = {};
  XdrReader r(in);
  get_dirop(r, &a->where);
  get_sattr(r, &a->attr);
  return r.ok();
}

bool decode(std::span<const uint8_t> in, std::span<const rpc::ReadChunkData> chunks, SymlinkArgs* a) {
  *a = {};
  XdrReader r(in);
  get_dirop(r, &a->where);
  get_sattr(r, &a->attr);
  if (!r.ok()) return false;
  std::span<const uint8_t> t;
  if (!get_ddp_item(r, chunks, kNfs3MaxPath, &t, &a->target_in_chunk)) return false;
  a->target = std::string_view(reinterpret_cast<const char*>(t.data()), t.size());
  return true;
}

bool decode(std::span<const uint8_t> in, MknodArgs* a) {
  *a = {};
  XdrReader r(in);
  get_dirop(r, &a->where);
  uint32_t type = r.get_u32();
  if (type < 1 || type > 7) r.fail();
  a->type = static_cast<FileType>(type);
  switch (a->type) {
    case FileType::kChr:
    case FileType::kBlk:
      get_sattr(r, &a->attr);
      a->major = r.get_u32();
      a->minor = r.get_u32();
      break;
    case FileType::kSock:
    case FileType::kFifo:
      get_sattr(r, &a->attr);
      break;
    default:
      break;  // void: the server answers NFS3ERR_BADTYPE
  }
  return r.ok();
}

bool decode(std::span<const uint8_t> in, RemoveArgs* a) {
  *a = {};
  XdrReader r(in);
  return get_dirop(r, &a->what);
}

bool decode(std::span<const uint8_t> in, RenameArgs* a) {
  *a = {};
  XdrReader r(in);
  get_dirop(r, &a->from);
  return get_dirop(r, &a->to);
}

bool decode(std::span<const uint8_t> in, LinkArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->file);
  return get_dirop(r, &a->link);
}

bool decode(std::span<const uint8_t> in, ReaddirArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->dir);
  a->cookie = r.get_u64();
  a->verf = get_verf(r);
  a->count = r.get_u32();
  return r.ok();
}

bool decode(std::span<const uint8_t> in, ReaddirplusArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->dir);
  a->cookie = r.get_u64();
  a->verf = get_verf(r);
  a->dircount = r.get_u32();
  a->maxcount = r.get_u32();
  return r.ok();
}

bool decode(std::span<const uint8_t> in, FsArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->obj);
  return r.ok();
}

bool decode(std::span<const uint8_t> in, CommitArgs* a) {
  *a = {};
  XdrReader r(in);
  get_fh(r, &a->file);
  a->offset = r.get_u64();
  a->count = r.get_u32();
  return r.ok();
}

// ---- encoding

void encode(XdrWriter& w, const GetattrArgs& a) { put_fh(w, a.obj); }

void encode(XdrWriter& w, const SetattrArgs& a) {
  put_fh(w, a.obj);
  put_sattr(w, a.attr);
  w.put_bool(a.check_ctime);
  if (a.check_ctime) put_time(w, a.guard_ctime);
}

void encode(XdrWriter& w, const LookupArgs& a) { put_dirop(w, a.what); }

void encode(XdrWriter& w, const AccessArgs& a) {
  put_fh(w, a.obj);
  w.put_u32(a.access);
}

void encode(XdrWriter& w, const ReadlinkArgs& a) { put_fh(w, a.link); }

void encode(XdrWriter& w, const ReadArgs& a) {
  put_fh(w, a.file);
  w.put_u64(a.offset);
  w.put_u32(a.count);
}

void encode(XdrWriter& w, const WriteArgs& a) {
  put_fh(w, a.file);
  w.put_u64(a.offset);
  w.put_u32(a.count);
  w.put_u32(static_cast<uint32_t>(a.stable));
  w.put_opaque_var(a.data);
}

void encode_write_chunked(XdrWriter& w, const WriteArgs& a) {
  put_fh(w, a.file);
  w.put_u64(a.offset);
  w.put_u32(a.count);
  w.put_u32(static_cast<uint32_t>(a.stable));
  w.put_u32(a.count);
}

void encode(XdrWriter& w, const CreateArgs& a) {
  put_dirop(w, a.where);
  w.put_u32(static_cast<uint32_t>(a.how));
  if (a.how == CreateMode::kExclusive) put_verf(w, a.verf);
  else put_sattr(w, a.attr);
}

void encode(XdrWriter& w, const MkdirArgs& a) {
  put_dirop(w, a.where);
  put_sattr(w, a.attr);
}

void encode(XdrWriter& w, const SymlinkArgs& a) {
  put_dirop(w, a.where);
  put_sattr(w, a.attr);
  w.put_string(a.target);
}

void encode_symlink_chunked(XdrWriter& w, const SymlinkArgs& a) {
  put_dirop(w, a.where);
  put_sattr(w, a.attr);
  w.put_u32(static_cast<uint32_t>(a.target.size()));
}

void encode(XdrWriter& w, const MknodArgs& a) {
  put_dirop(w, a.where);
  w.put_u32(static_cast<uint32_t>(a.type));
  switch (a.type) {
    case FileType::kChr:
    case FileType::kBlk:
      put_sattr(w, a.attr);
      w.put_u32(a.major);
      w.put_u32(a.minor);
      break;
    case FileType::kSock:
    case FileType::kFifo:
      put_sattr(w, a.attr);
      break;
    default:
      break;
  }
}

void encode(XdrWriter& w, const RemoveArgs& a) { put_dirop(w, a.what); }

void encode(XdrWriter& w, const RenameArgs& a) {
  put_dirop(w, a.from);
  put_dirop(w, a.to);
}

void encode(XdrWriter& w, const LinkArgs& a) {
  put_fh(w, a.file);
  put_dirop(w, a.link);
}

void encode(XdrWriter& w, const ReaddirArgs& a) {
  put_fh(w, a.dir);
  w.put_u64(a.cookie);
  put_verf(w, a.verf);
  w.put_u32(a.count);
}

void encode(XdrWriter& w, const ReaddirplusArgs& a) {
  put_fh(w, a.dir);
  w.put_u64(a.cookie);
  put_verf(w, a.verf);
  w.put_u32(a.dircount);
  w.put_u32(a.maxcount);
}

void encode(XdrWriter& w, const FsArgs& a) { put_fh(w, a.obj); }

void encode(XdrWriter& w, const CommitArgs& a) {
  put_fh(w, a.file);
  w.put_u64(a.offset);
  w.put_u32(a.count);
}

}  // namespace tern::nfs::nfs3
