#include "nfsd/export_table.h"

#include <algorithm>
#include <map>
#include <string>

#include "nfsd/file_handle.h"

namespace tern::nfsd {

bool handle_export_id(const nfs::Fh3& fh, uint32_t* id) {
  if (fh.len < kFhHeader + kFhTag || fh.data[0] != kFhVersion) return false;
  *id = uint32_t{fh.data[4]} << 24 | uint32_t{fh.data[5]} << 16 | uint32_t{fh.data[6]} << 8 | fh.data[7];
  return true;
}

void ExportTable::index() {
  by_id_.clear();
  for (const auto& e : exports_) by_id_.emplace_back(e->id(), e.get());
  std::sort(by_id_.begin(), by_id_.end());
}

Result<std::shared_ptr<const ExportTable>> ExportTable::open(const std::vector<ExportOptions>& exports,
                                                             const std::shared_ptr<const StateDir>& state) {
  std::shared_ptr<ExportTable> t(new ExportTable());
  std::map<std::string, std::string> dirs, names;  // -> origin
  std::map<uint32_t, std::string> ids;
  for (const ExportOptions& o : exports) {
    const std::string where = o.origin.empty() ? o.dir : o.origin;
    auto e = Export::open(o, state);
    if (!e) return make_error(e.status().code(), "%s: %s", where.c_str(), e.status().message().c_str());
    const Export& ex = **e;
    if (auto it = dirs.find(ex.options().dir); it != dirs.end())
      return make_error(Errc::kInvalidArgument, "%s: %s is exported already (%s)", where.c_str(),
                        ex.options().dir.c_str(), it->second.c_str());
    if (auto it = names.find(ex.name()); it != names.end())
      return make_error(Errc::kInvalidArgument, "%s: the MOUNT path %s is taken already (%s)", where.c_str(),
                        ex.name().c_str(), it->second.c_str());
    if (auto it = ids.find(ex.id()); it != ids.end())
      return make_error(Errc::kInvalidArgument,
                        "%s: %s has the same export id as %s (a 1-in-2^32 collision): give one of them an fsid=",
                        where.c_str(), ex.options().dir.c_str(), it->second.c_str());
    dirs[ex.options().dir] = where;
    names[ex.name()] = where;
    ids[ex.id()] = where;
    t->exports_.push_back(std::shared_ptr<const Export>(std::move(*e)));
  }
  t->index();
  return std::shared_ptr<const ExportTable>(std::move(t));
}

std::shared_ptr<const ExportTable> ExportTable::of_one(const Export& exp) {
  std::shared_ptr<ExportTable> t(new ExportTable());
  t->exports_.push_back(std::shared_ptr<const Export>(&exp, [](const Export*) {}));  // borrowed
  t->index();
  return t;
}

const Export* ExportTable::by_id(uint32_t id) const {
  auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::make_pair(id, static_cast<const Export*>(nullptr)));
  return it != by_id_.end() && it->first == id ? it->second : nullptr;
}

const Export* ExportTable::by_handle(const nfs::Fh3& fh) const {
  uint32_t id = 0;
  return handle_export_id(fh, &id) ? by_id(id) : nullptr;
}

const Export* ExportTable::by_path(std::string_view path) const {
  std::string p(path);
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  for (const auto& e : exports_)
    if (p == e->name() || p == e->options().dir) return e.get();
  return nullptr;
}

}  // namespace tern::nfsd
