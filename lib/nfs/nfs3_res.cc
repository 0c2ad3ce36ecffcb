#include "nfs/nfs3_res.h"

namespace tern::nfs::nfs3 {

using xdr::XdrReader;
using xdr::XdrWriter;
using namespace xdr3;

namespace {

const Fattr3* opt(const std::optional<Fattr3>& a) { return a ? &*a : nullptr; }

void put_wcc(XdrWriter& w, const Wcc& c) {
  xdr3::put_wcc(w, c.before ? &*c.before : nullptr, opt(c.after));
}

void put_status(XdrWriter& w, Nfs3Stat s) { w.put_u32(static_cast<uint32_t>(s)); }
Nfs3Stat get_status(XdrReader& r) { return static_cast<Nfs3Stat>(r.get_u32()); }

}  // namespace

void encode(XdrWriter& w, const GetattrRes& r) {
  put_status(w, r.status);
  if (r.status == Nfs3Stat::kOk) put_fattr(w, r.attr);
}

void encode(XdrWriter& w, const WccRes& r) {
  put_status(w, r.status);
  put_wcc(w, r.wcc);
}

void encode(XdrWriter& w, const LookupRes& r) {
  put_status(w, r.status);
  if (r.status == Nfs3Stat::kOk) {
    put_fh(w, r.obj);
    put_post_op_attr(w, opt(r.obj_attr));
  }
  put_post_op_attr(w, opt(r.dir_attr));
}

void encode(XdrWriter& w, const AccessRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  if (r.status == Nfs3Stat::kOk) w.put_u32(r.access);
}

void encode(XdrWriter& w, const ReadlinkRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  if (r.status != Nfs3Stat::kOk) return;
  if (r.data_in_chunk) w.put_u32(static_cast<uint32_t>(r.target.size()));
  else w.put_string(r.target);
}

void encode(XdrWriter& w, const ReadRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  if (r.status != Nfs3Stat::kOk) return;
  w.put_u32(r.count);
  w.put_bool(r.eof);
  if (r.data_in_chunk) w.put_u32(r.count);  // the reduced data item: its length, no bytes
  else w.put_opaque_var(r.data);
}

void encode(XdrWriter& w, const WriteRes& r) {
  put_status(w, r.status);
  put_wcc(w, r.wcc);
  if (r.status != Nfs3Stat::kOk) return;
  w.put_u32(r.count);
  w.put_u32(static_cast<uint32_t>(r.committed));
  put_verf(w, r.verf);
}

void encode(XdrWriter& w, const CreateRes& r) {
  put_status(w, r.status);
  if (r.status == Nfs3Stat::kOk) {
    put_post_op_fh(w, r.obj ? &*r.obj : nullptr);
    put_post_op_attr(w, opt(r.obj_attr));
  }
  put_wcc(w, r.dir_wcc);
}

void encode(XdrWriter& w, const RenameRes& r) {
  put_status(w, r.status);
  put_wcc(w, r.from_wcc);
  put_wcc(w, r.to_wcc);
}

void encode(XdrWriter& w, const LinkRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  put_wcc(w, r.dir_wcc);
}

void encode(XdrWriter& w, const FsstatRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  if (r.status != Nfs3Stat::kOk) return;
  for (uint64_t v : {r.tbytes, r.fbytes, r.abytes, r.tfiles, r.ffiles, r.afiles}) w.put_u64(v);
  w.put_u32(r.invarsec);
}

void encode(XdrWriter& w, const FsinfoRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  if (r.status != Nfs3Stat::kOk) return;
  for (uint32_t v : {r.rtmax, r.rtpref, r.rtmult, r.wtmax, r.wtpref, r.wtmult, r.dtpref}) w.put_u32(v);
  w.put_u64(r.maxfilesize);
  put_time(w, r.time_delta);
  w.put_u32(r.properties);
}

void encode(XdrWriter& w, const PathconfRes& r) {
  put_status(w, r.status);
  put_post_op_attr(w, opt(r.attr));
  if (r.status != Nfs3Stat::kOk) return;
  w.put_u32(r.linkmax);
  w.put_u32(r.name_max);
  w.put_bool(r.no_trunc);
  w.put_bool(r.chown_restricted);
  w.put_bool(r.case_insensitive);
  w.put_bool(r.case_preserving);
}

void encode(XdrWriter& w, const CommitRes& r) {
  put_status(w, r.status);
  put_wcc(w, r.wcc);
  if (r.status == Nfs3Stat::kOk) put_verf(w, r.verf);
}

// ---- decoding

bool decode(std::span<const uint8_t> in, GetattrRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  if (r->status == Nfs3Stat::kOk) get_fattr(x, &r->attr);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, WccRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->wcc = get_wcc(x);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, LookupRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  if (r->status == Nfs3Stat::kOk) {
    get_fh(x, &r->obj);
    r->obj_attr = get_post_op_attr(x);
  }
  r->dir_attr = get_post_op_attr(x);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, AccessRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  if (r->status == Nfs3Stat::kOk) r->access = x.get_u32();
  return x.ok();
}

bool decode(std::span<const uint8_t> in, ReadlinkRes* r, std::span<const uint8_t>* chunk) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  if (r->status != Nfs3Stat::kOk) return x.ok();
  if (chunk != nullptr && !chunk->empty()) {
    // The reduced item: the path's length, its bytes in the chunk.
    const uint32_t len = x.get_u32();
    if (!x.ok() || x.remaining() != 0 || len != chunk->size()) return false;
    r->target = std::string_view(reinterpret_cast<const char*>(chunk->data()), len);
    r->data_in_chunk = true;
    return true;
  }
  r->target = x.get_string(kNfs3MaxPath);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, int64_t chunk_len, ReadRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  if (r->status != Nfs3Stat::kOk) return x.ok();
  r->count = x.get_u32();
  r->eof = x.get_bool();
  uint32_t len = x.get_u32();
  if (!x.ok() || len != r->count) return false;
  r->data_in_chunk = chunk_len >= 0 && x.remaining() == 0;
  if (r->data_in_chunk) {
    r->data = {};
    return static_cast<uint64_t>(chunk_len) == len;
  }
  // Inline: a server may answer inline even when a chunk was offered (and
  // then writes nothing into it).
  if (chunk_len > 0) return false;
  r->data = x.get_opaque_fixed(len);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, WriteRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->wcc = get_wcc(x);
  if (r->status == Nfs3Stat::kOk) {
    r->count = x.get_u32();
    uint32_t c = x.get_u32();
    if (c > 2) x.fail();
    r->committed = static_cast<StableHow>(c);
    r->verf = get_verf(x);
  }
  return x.ok();
}

bool decode(std::span<const uint8_t> in, CreateRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  if (r->status == Nfs3Stat::kOk) {
    r->obj = get_post_op_fh(x);
    r->obj_attr = get_post_op_attr(x);
  }
  r->dir_wcc = get_wcc(x);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, RenameRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->from_wcc = get_wcc(x);
  r->to_wcc = get_wcc(x);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, LinkRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  r->dir_wcc = get_wcc(x);
  return x.ok();
}

bool decode(std::span<const uint8_t> in, FsstatRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  if (r->status != Nfs3Stat::kOk) return x.ok();
  r->tbytes = x.get_u64();
  r->fbytes = x.get_u64();
  r->abytes = x.get_u64();
  r->tfiles = x.get_u64();
  r->ffiles = x.get_u64();
  r->afiles = x.get_u64();
  r->invarsec = x.get_u32();
  return x.ok();
}

bool decode(std::span<const uint8_t> in, FsinfoRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  if (r->status != Nfs3Stat::kOk) return x.ok();
  r->rtmax = x.get_u32();
  r->rtpref = x.get_u32();
  r->rtmult = x.get_u32();
  r->wtmax = x.get_u32();
  r->wtpref = x.get_u32();
  r->wtmult = x.get_u32();
  r->dtpref = x.get_u32();
  r->maxfilesize = x.get_u64();
  r->time_delta = get_time(x);
  r->properties = x.get_u32();
  return x.ok();
}

bool decode(std::span<const uint8_t> in, PathconfRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->attr = get_post_op_attr(x);
  if (r->status != Nfs3Stat::kOk) return x.ok();
  r->linkmax = x.get_u32();
  r->name_max = x.get_u32();
  r->no_trunc = x.get_bool();
  r->chown_restricted = x.get_bool();
  r->case_insensitive = x.get_bool();
  r->case_preserving = x.get_bool();
  return x.ok();
}

bool decode(std::span<const uint8_t> in, CommitRes* r) {
  *r = {};
  XdrReader x(in);
  r->status = get_status(x);
  r->wcc = get_wcc(x);
  if (r->status == Nfs3Stat::kOk) r->verf = get_verf(x);
  return x.ok();
}

// ---- directory lists

void DirListEncoder::begin(Nfs3Stat status, const Fattr3* dir_attr, const Verf3& verf) {
  start_ = w_.bytes_written();
  put_status(w_, status);
  put_post_op_attr(w_, dir_attr);
  ok_status_ = status == Nfs3Stat::kOk;
  if (ok_status_) put_verf(w_, verf);
}

bool DirListEncoder::add(uint64_t fileid, std::string_view name, uint64_t cookie, const Fattr3* attr,
                         const Fh3* fh) {
  if (!ok_status_) return false;
  // entry3: value_follows, fileid, name, cookie; entryplus3 adds
  // post_op_attr and post_op_fh3. Then the list's end (a FALSE) and eof.
  const uint32_t dir = static_cast<uint32_t>(8 + xdr::opaque_var_size(name.size()) + 8);
  uint32_t size = 4 + dir;
  if (plus_) size += 4 + (attr ? kFattr3Size : 0) + 4 + (fh ? static_cast<uint32_t>(xdr::opaque_var_size(fh->len)) : 0);
  const size_t used = w_.bytes_written() - start_;
  if (used + size + 8 > maxcount_) return false;
  if (plus_ && dircount_ != 0 && dirbytes_ + dir > dircount_) return false;
  if (size + 8 > w_.remaining()) return false;
  w_.put_bool(true);
  w_.put_u64(fileid);
  w_.put_string(name);
  w_.put_u64(cookie);
  if (plus_) {
    put_post_op_attr(w_, attr);
    put_post_op_fh(w_, fh);
  }
  dirbytes_ += dir;
  ++n_;
  return true;
}

void DirListEncoder::finish(bool eof) {
  if (!ok_status_) return;
  w_.put_bool(false);
  w_.put_bool(eof);
}

DirListDecoder::DirListDecoder(std::span<const uint8_t> in, bool plus) : r_(in), plus_(plus) {}

bool DirListDecoder::begin() {
  status_ = get_status(r_);
  dir_attr_ = get_post_op_attr(r_);
  if (status_ == Nfs3Stat::kOk) verf_ = get_verf(r_);
  else done_ = true;
  return r_.ok();
}

bool DirListDecoder::next(DirEntry* e) {
  if (done_ || !r_.ok()) return false;
  if (!r_.get_bool()) {
    done_ = true;
    eof_ = r_.get_bool();
    return false;
  }
  e->fileid = r_.get_u64();
  e->name = r_.get_string(kNfs3MaxPath);
  e->cookie = r_.get_u64();
  e->attr.reset();
  e->fh.reset();
  if (plus_) {
    e->attr = get_post_op_attr(r_);
    e->fh = get_post_op_fh(r_);
  }
  if (!r_.ok()) {
    done_ = true;
    return false;
  }
  return true;
}

}  // namespace tern::nfs::nfs3
