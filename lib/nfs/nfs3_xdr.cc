#include "nfs/nfs3_xdr.h"

namespace tern::nfs::xdr3 {

void put_fh(xdr::XdrWriter& w, const Fh3& fh) { w.put_opaque_var(fh.bytes()); }

bool get_fh(xdr::XdrReader& r, Fh3* fh) {
  std::span<const uint8_t> b = r.get_opaque_var(kFh3Size);
  if (!r.ok()) return false;
  return fh->assign(b);
}

void put_time(xdr::XdrWriter& w, const NfsTime3& t) {
  w.put_u32(t.seconds);
  w.put_u32(t.nseconds);
}

NfsTime3 get_time(xdr::XdrReader& r) {
  NfsTime3 t;
  t.seconds = r.get_u32();
  t.nseconds = r.get_u32();
  return t;
}

void put_fattr(xdr::XdrWriter& w, const Fattr3& a) {
  w.put_u32(static_cast<uint32_t>(a.type));
  w.put_u32(a.mode);
  w.put_u32(a.nlink);
  w.put_u32(a.uid);
  w.put_u32(a.gid);
  w.put_u64(a.size);
  w.put_u64(a.used);
  w.put_u32(a.rdev_major);
  w.put_u32(a.rdev_minor);
  w.put_u64(a.fsid);
  w.put_u64(a.fileid);
  put_time(w, a.atime);
  put_time(w, a.mtime);
  put_time(w, a.ctime);
}

bool get_fattr(xdr::XdrReader& r, Fattr3* a) {
  uint32_t type = r.get_u32();
  if (type < 1 || type > 7) r.fail();
  a->type = static_cast<FileType>(type);
  a->mode = r.get_u32();
  a->nlink = r.get_u32();
  a->uid = r.get_u32();
  a->gid = r.get_u32();
  a->size = r.get_u64();
  a->used = r.get_u64();
  a->rdev_major = r.get_u32();
  a->rdev_minor = r.get_u32();
  a->fsid = r.get_u64();
  a->fileid = r.get_u64();
  a->atime = get_time(r);
  a->mtime = get_time(r);
  a->ctime = get_time(r);
  return r.ok();
}

void put_post_op_attr(xdr::XdrWriter& w, const Fattr3* a) {
  w.put_bool(a != nullptr);
  if (a != nullptr) put_fattr(w, *a);
}

std::optional<Fattr3> get_post_op_attr(xdr::XdrReader& r) {
  if (!r.get_bool()) return std::nullopt;
  Fattr3 a;
  if (!get_fattr(r, &a)) return std::nullopt;
  return a;
}

void put_wcc(xdr::XdrWriter& w, const WccAttr* before, const Fattr3* after) {
  w.put_bool(before != nullptr);
  if (before != nullptr) {
    w.put_u64(before->size);
    put_time(w, before->mtime);
    put_time(w, before->ctime);
  }
  put_post_op_attr(w, after);
}

Wcc get_wcc(xdr::XdrReader& r) {
  Wcc c;
  if (r.get_bool()) {
    WccAttr b;
    b.size = r.get_u64();
    b.mtime = get_time(r);
    b.ctime = get_time(r);
    if (r.ok()) c.before = b;
  }
  c.after = get_post_op_attr(r);
  return c;
}

void put_post_op_fh(xdr::XdrWriter& w, const Fh3* fh) {
  w.put_bool(fh != nullptr);
  if (fh != nullptr) put_fh(w, *fh);
}

std::optional<Fh3> get_post_op_fh(xdr::XdrReader& r) {
  if (!r.get_bool()) return std::nullopt;
  Fh3 fh;
  if (!get_fh(r, &fh)) return std::nullopt;
  return fh;
}

namespace {

void put_set_time(xdr::XdrWriter& w, TimeHow how, const NfsTime3& t) {
  w.put_u32(static_cast<uint32_t>(how));
  if (how == TimeHow::kClientTime) put_time(w, t);
}

void get_set_time(xdr::XdrReader& r, TimeHow* how, NfsTime3* t) {
  uint32_t h = r.get_u32();
  if (h > 2) r.fail();
  *how = static_cast<TimeHow>(h);
  if (*how == TimeHow::kClientTime) *t = get_time(r);
}

}  // namespace

void put_sattr(xdr::XdrWriter& w, const Sattr3& s) {
  w.put_bool(s.set_mode);
  if (s.set_mode) w.put_u32(s.mode);
  w.put_bool(s.set_uid);
  if (s.set_uid) w.put_u32(s.uid);
  w.put_bool(s.set_gid);
  if (s.set_gid) w.put_u32(s.gid);
  w.put_bool(s.set_size);
  if (s.set_size) w.put_u64(s.size);
  put_set_time(w, s.atime_how, s.atime);
  put_set_time(w, s.mtime_how, s.mtime);
}

bool get_sattr(xdr::XdrReader& r, Sattr3* s) {
  if ((s->set_mode = r.get_bool())) s->mode = r.get_u32();
  if ((s->set_uid = r.get_bool())) s->uid = r.get_u32();
  if ((s->set_gid = r.get_bool())) s->gid = r.get_u32();
  if ((s->set_size = r.get_bool())) s->size = r.get_u64();
  get_set_time(r, &s->atime_how, &s->atime);
  get_set_time(r, &s->mtime_how, &s->mtime);
  return r.ok();
}

void put_verf(xdr::XdrWriter& w, const Verf3& v) { w.put_opaque_fixed(v.data); }

Verf3 get_verf(xdr::XdrReader& r) {
  Verf3 v;
  std::span<const uint8_t> b = r.get_opaque_fixed(kNfs3VerfSize);
  if (r.ok()) std::memcpy(v.data, b.data(), kNfs3VerfSize);
  return v;
}

}  // namespace tern::nfs::xdr3
