#include "nfs/mount3.h"

#include "nfs/nfs3_xdr.h"

namespace tern::nfs::mount3 {

using xdr::XdrReader;
using xdr::XdrWriter;

const char* stat_name(Stat s) {
  switch (s) {
    case Stat::kOk: return "MNT3_OK";
    case Stat::kPerm: return "MNT3ERR_PERM";
    case Stat::kNoent: return "MNT3ERR_NOENT";
    case Stat::kIo: return "MNT3ERR_IO";
    case Stat::kAccess: return "MNT3ERR_ACCES";
    case Stat::kNotdir: return "MNT3ERR_NOTDIR";
    case Stat::kInval: return "MNT3ERR_INVAL";
    case Stat::kNametoolong: return "MNT3ERR_NAMETOOLONG";
    case Stat::kNotsupp: return "MNT3ERR_NOTSUPP";
    case Stat::kServerfault: return "MNT3ERR_SERVERFAULT";
  }
  return "unknown mountstat3";
}

bool decode_dirpath(std::span<const uint8_t> in, std::string_view* path) {
  XdrReader r(in);
  *path = r.get_string(kMaxPath);
  return r.ok();
}

void encode_dirpath(XdrWriter& w, std::string_view path) { w.put_string(path); }

void encode(XdrWriter& w, const MntRes& r) {
  w.put_u32(static_cast<uint32_t>(r.status));
  if (r.status != Stat::kOk) return;
  xdr3::put_fh(w, r.fh);
  w.put_u32(static_cast<uint32_t>(r.flavors.size()));
  for (uint32_t f : r.flavors) w.put_u32(f);
}

bool decode(std::span<const uint8_t> in, MntRes* r) {
  XdrReader x(in);
  r->status = static_cast<Stat>(x.get_u32());
  r->flavors.clear();
  if (r->status != Stat::kOk) return x.ok();
  xdr3::get_fh(x, &r->fh);
  uint32_t n = x.get_u32();
  if (n > kMaxListEntries) x.fail();
  for (uint32_t i = 0; i < n && x.ok(); ++i) r->flavors.push_back(x.get_u32());
  return x.ok();
}

void encode(XdrWriter& w, std::span<const ExportEntry> exports) {
  for (const ExportEntry& e : exports) {
    w.put_bool(true);
    w.put_string(e.dir);
    for (std::string_view g : e.groups) {
      w.put_bool(true);
      w.put_string(g);
    }
    w.put_bool(false);
  }
  w.put_bool(false);
}

bool decode(std::span<const uint8_t> in, std::vector<ExportEntry>* exports) {
  XdrReader x(in);
  exports->clear();
  while (x.get_bool()) {
    if (exports->size() >= kMaxListEntries) return false;
    ExportEntry e;
    e.dir = x.get_string(kMaxPath);
    while (x.get_bool()) {
      if (e.groups.size() >= kMaxListEntries) return false;
      e.groups.push_back(x.get_string(kMaxName));
    }
    if (!x.ok()) return false;
    exports->push_back(std::move(e));
  }
  return x.ok();
}

void encode(XdrWriter& w, std::span<const MountEntry> mounts) {
  for (const MountEntry& m : mounts) {
    w.put_bool(true);
    w.put_string(m.host);
    w.put_string(m.dir);
  }
  w.put_bool(false);
}

bool decode(std::span<const uint8_t> in, std::vector<MountEntry>* mounts) {
  XdrReader x(in);
  mounts->clear();
  while (x.get_bool()) {
    if (mounts->size() >= kMaxListEntries) return false;
    MountEntry m;
    m.host = x.get_string(kMaxName);
    m.dir = x.get_string(kMaxPath);
    if (!x.ok()) return false;
    mounts->push_back(m);
  }
  return x.ok();
}

}  // namespace tern::nfs::mount3
