// The exports of one configuration of an instance: what a handle's export
// id names, what a MOUNT path names. Immutable once built; engines and
// MOUNT share it (published_exports.h swaps in the next one on a reload).
//
// A handle's export id picks the export (file_handle.h: bytes 4-7, read
// before the tag is checked with that export's key). An id that names no
// export of the table -- an export removed by a reload, or another
// instance's -- is NFS3ERR_STALE: the handle may have been good, it names
// nothing served here now.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"
#include "nfs/nfs3_types.h"
#include "nfsd/export.h"
#include "nfsd/state_dir.h"

namespace tern::nfsd {

class ExportTable {
 public:
  // Opens every export under `state`'s key. Refused whole, saying which
  // entry and why: an export that does not open, two entries for one
  // directory or one MOUNT path, two exports whose ids collide (one in
  // 2^32: change one's fsid).
  static Result<std::shared_ptr<const ExportTable>> open(const std::vector<ExportOptions>& exports,
                                                         const std::shared_ptr<const StateDir>& state);
  // A table of one export the caller keeps alive for as long as the table
  // (tests, and servers built around one Export).
  static std::shared_ptr<const ExportTable> of_one(const Export& exp);

  // The export a handle names, by the id in its header; nullptr when the
  // handle is too short to have one or names no export here.
  const Export* by_handle(const nfs::Fh3& fh) const;
  const Export* by_id(uint32_t id) const;
  // The export MOUNT's dirpath names: its name, or its directory; a
  // trailing slash is the same path.
  const Export* by_path(std::string_view path) const;
  std::span<const std::shared_ptr<const Export>> exports() const { return exports_; }
  size_t size() const { return exports_.size(); }

 private:
  ExportTable() = default;
  void index();

  std::vector<std::shared_ptr<const Export>> exports_;  // in the order configured
  std::vector<std::pair<uint32_t, const Export*>> by_id_;  // sorted by id
};

// The export id a handle carries, without checking its tag; false when it
// is not long enough to be one of ours.
bool handle_export_id(const nfs::Fh3& fh, uint32_t* id);

}  // namespace tern::nfsd
