// One exported directory: its root, the key that signs its file handles,
// and the options that say who may do what in it.
//
// Export::open() checks the directory, creates the state directory
// (mode 0700, never inside the export, where a client could read the key)
// and the handle key in it on first use, and keeps both across restarts,
// so that a handle a client holds stays valid when tern-nfsd is restarted.
// After open() an Export is read-only and shared by every engine thread.
//
// Handles resolve with open_by_handle_at(), which needs CAP_DAC_READ_SEARCH:
// tern-nfsd runs as root (docs/nfs-gateway.md).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "nfs/nfs3_types.h"
#include "nfsd/creds.h"
#include "nfsd/file_handle.h"

namespace tern::nfsd {

struct ExportOptions {
  std::string dir;        // the local directory served
  std::string name;       // the path clients mount (MOUNT's dirpath); "": dir
  std::string state_dir;  // handle key and reply cache; "": /var/lib/tern-nfsd
  bool read_only = false;
  SquashPolicy squash;
  // fsid3 every object reports; 0: derived from the directory's device.
  uint64_t fsid = 0;
};

class Export {
 public:
  static Result<std::unique_ptr<Export>> open(const ExportOptions& opt);
  ~Export();
  Export(const Export&) = delete;
  Export& operator=(const Export&) = delete;

  const ExportOptions& options() const { return opt_; }
  const std::string& name() const { return opt_.name; }
  const std::string& state_dir() const { return opt_.state_dir; }
  int root_fd() const { return root_fd_; }
  const nfs::Fh3& root_fh() const { return root_fh_; }
  uint64_t fsid() const { return fsid_; }
  bool is_root(const struct stat& st) const { return st.st_dev == root_dev_ && st.st_ino == root_ino_; }
  // Whether the object is on the exported file system (not one mounted inside it).
  bool same_fs(const struct stat& st) const { return st.st_dev == root_dev_; }

  // The handle of the object `fd` refers to. kServerfault when the file
  // system's handle does not fit in 64 bytes; kAccess for an object on
  // another mount.
  nfs::Nfs3Stat handle_of(int fd, nfs::Fh3* out) const;
  // The same for `name` in directory `dirfd` (not following a symlink).
  nfs::Nfs3Stat handle_at(int dirfd, const char* name, nfs::Fh3* out) const;
  // An O_PATH descriptor for a handle: kBadhandle, kStale (the object is
  // gone), or kOk with *fd (the caller owns it). The thread must act as root.
  nfs::Nfs3Stat open_handle(const nfs::Fh3& fh, int* fd) const;

 private:
  explicit Export(const ExportOptions& opt, const SipKey& key, uint32_t id);

  ExportOptions opt_;
  FhCodec codec_;
  int root_fd_ = -1;
  int mount_fd_ = -1;  // the root again, opened for reading: open_by_handle_at refuses an O_PATH one
  int mount_id_ = -1;
  dev_t root_dev_ = 0;
  ino_t root_ino_ = 0;
  uint64_t fsid_ = 0;
  nfs::Fh3 root_fh_;
};

}  // namespace tern::nfsd
