#include "nfs/fattr4.h"

namespace tern::nfs {

AttrSet AttrSet::known() {
  return {Attr::kSupportedAttrs, Attr::kType,       Attr::kFhExpireType, Attr::kChange,       Attr::kSize,
          Attr::kLinkSupport,    Attr::kSymlinkSupport, Attr::kNamedAttr, Attr::kFsid,        Attr::kUniqueHandles,
          Attr::kLeaseTime,      Attr::kRdattrError, Attr::kFilehandle,   Attr::kFileid,       Attr::kMaxread,
          Attr::kMaxwrite,       Attr::kMode,       Attr::kNumlinks,     Attr::kOwner,        Attr::kOwnerGroup,
          Attr::kSpaceUsed,      Attr::kTimeAccess, Attr::kTimeMetadata, Attr::kTimeModify};
}

void put_bitmap4(xdr::XdrWriter& w, AttrSet s) {
  auto lo = static_cast<uint32_t>(s.bits());
  auto hi = static_cast<uint32_t>(s.bits() >> 32);
  uint32_t n = hi != 0 ? 2 : (lo != 0 ? 1 : 0);
  w.put_u32(n);
  if (n >= 1) w.put_u32(lo);
  if (n >= 2) w.put_u32(hi);
}

Status get_bitmap4(xdr::XdrReader& r, AttrSet* out) {
  uint32_t n = r.get_u32();
  if (!r.ok()) return make_error(Errc::kRemoteError, "bitmap4: truncated");
  if (n > kMaxBitmapWords) return make_error(Errc::kRemoteError, "bitmap4: %u words (at most %u)", n, kMaxBitmapWords);
  uint64_t bits = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t w = r.get_u32();
    if (i < 2) bits |= uint64_t{w} << (32 * i);
    else if (w != 0) return make_error(Errc::kRemoteError, "bitmap4: attribute %u and up are not known here", 32 * i);
  }
  if (!r.ok()) return make_error(Errc::kRemoteError, "bitmap4: truncated");
  *out = AttrSet::from_bits(bits);
  return Status::ok();
}

namespace {

bool get_bool(xdr::XdrReader& r) { return r.get_bool(); }

NfsTime get_nfstime4(xdr::XdrReader& r) {
  NfsTime t;
  t.seconds = static_cast<int64_t>(r.get_u64());
  t.nseconds = r.get_u32();
  return t;
}

// Reads the value of attribute a into out; a is one AttrSet::known() holds
// (decode_fattr4 refuses any other before it gets here).
void get_value(xdr::XdrReader& r, uint32_t a, Fattr4* out) {
  switch (static_cast<Attr>(a)) {
    case Attr::kSupportedAttrs: {
      // A nested bitmap4: attributes this codec does not know are fine here,
      // they are only listed, so read the words without refusing.
      uint32_t n = r.get_u32();
      if (n > kMaxBitmapWords) r.fail();
      uint64_t bits = 0;
      for (uint32_t i = 0; i < n && r.ok(); ++i) {
        uint32_t w = r.get_u32();
        if (i < 2) bits |= uint64_t{w} << (32 * i);
      }
      out->supported_attrs = AttrSet::from_bits(bits);
      return;
    }
    case Attr::kType: out->type = static_cast<FileType>(r.get_u32()); return;
    case Attr::kFhExpireType: out->fh_expire_type = r.get_u32(); return;
    case Attr::kChange: out->change = r.get_u64(); return;
    case Attr::kSize: out->size = r.get_u64(); return;
    case Attr::kLinkSupport: out->link_support = get_bool(r); return;
    case Attr::kSymlinkSupport: out->symlink_support = get_bool(r); return;
    case Attr::kNamedAttr: out->named_attr = get_bool(r); return;
    case Attr::kFsid:
      out->fsid.major = r.get_u64();
      out->fsid.minor = r.get_u64();
      return;
    case Attr::kUniqueHandles: out->unique_handles = get_bool(r); return;
    case Attr::kLeaseTime: out->lease_time = r.get_u32(); return;
    case Attr::kRdattrError: out->rdattr_error = r.get_u32(); return;
    case Attr::kFilehandle: {
      auto fh = r.get_opaque_var(kFhSize);
      if (r.ok()) out->filehandle.assign(fh);
      return;
    }
    case Attr::kFileid: out->fileid = r.get_u64(); return;
    case Attr::kMaxread: out->maxread = r.get_u64(); return;
    case Attr::kMaxwrite: out->maxwrite = r.get_u64(); return;
    case Attr::kMode: out->mode = r.get_u32(); return;
    case Attr::kNumlinks: out->numlinks = r.get_u32(); return;
    case Attr::kOwner: out->owner = r.get_string(kMaxOwnerSize); return;
    case Attr::kOwnerGroup: out->owner_group = r.get_string(kMaxOwnerSize); return;
    case Attr::kSpaceUsed: out->space_used = r.get_u64(); return;
    case Attr::kTimeAccess: out->time_access = get_nfstime4(r); return;
    case Attr::kTimeMetadata: out->time_metadata = get_nfstime4(r); return;
    case Attr::kTimeModify: out->time_modify = get_nfstime4(r); return;
  }
  r.fail();
}

}  // namespace

Status decode_fattr4(xdr::XdrReader& r, Fattr4* out) {
  AttrSet mask;
  TERN_TRY(get_bitmap4(r, &mask));
  std::span<const uint8_t> vals = r.get_opaque_var(r.remaining());
  if (!r.ok()) return make_error(Errc::kRemoteError, "fattr4: attr_vals truncated");
  if ((mask.bits() & ~AttrSet::known().bits()) != 0) {
    uint32_t a = static_cast<uint32_t>(__builtin_ctzll(mask.bits() & ~AttrSet::known().bits()));
    return make_error(Errc::kRemoteError, "fattr4: attribute %u is not one this client asked for or knows", a);
  }
  Fattr4 f;
  f.present = mask;
  xdr::XdrReader vr(vals);
  for (uint32_t a = 0; a < 64 && vr.ok(); ++a) {
    if (!mask.has(static_cast<Attr>(a))) continue;
    get_value(vr, a, &f);  // every bit left in mask is a known attribute
    if (!vr.ok()) return make_error(Errc::kRemoteError, "fattr4: value of attribute %u truncated or malformed", a);
  }
  if (vr.remaining() != 0)
    return make_error(Errc::kRemoteError, "fattr4: %zu bytes after the last attribute value", vr.remaining());
  *out = f;
  return Status::ok();
}

}  // namespace tern::nfs
