// One exported directory: its root, the key that signs its file handles,
// and the options that say who may do what in it.
//
// Export::open() checks the directory (its state directory must not lie
// inside it, where a client could read the key) and derives the export's
// handle key and id from the state directory's stored key and the export's
// identity: its canonical directory and its fsid option. Handles therefore
// stay valid across restarts of the same configuration, and a handle made
// for one export fails the tag of every other -- of this instance, of
// another instance (another stored key), or of this export re-pointed at
// another directory under the same fsid. That tag is all that keeps a
// client to its export: open_by_handle_at() opens any object of the file
// system. After open() an Export is read-only and shared by every engine
// thread.
//
// Handles resolve with open_by_handle_at(), which needs CAP_DAC_READ_SEARCH:
// tern-nfsd runs as root (docs/nfs-gateway.md).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "nfs/nfs3_types.h"
#include "nfsd/client_spec.h"
#include "nfsd/creds.h"
#include "nfsd/file_handle.h"
#include "nfsd/state_dir.h"

namespace tern::nfsd {

// What one client specification of an export allows the clients it matches.
struct ClientOptions {
  bool read_only = true;  // exports(5)'s default: ro
  SquashPolicy squash;
};

struct ClientRule {
  ClientSpec who;
  ClientOptions opt;
};

struct ExportOptions {
  std::string dir;        // the local directory served
  std::string name;       // the path clients mount (MOUNT's dirpath); "": dir
  // Only for open() without a StateDir: the state directory to lock and
  // take the key from ("": /var/lib/tern-nfsd).
  std::string state_dir;
  bool read_only = false;
  SquashPolicy squash;
  // fsid3 every object reports (at most 2^32-1, as exports(5)'s fsid=);
  // 0: the directory's device. Part of the export's identity.
  uint64_t fsid = 0;
  // Who may use the export, and how: a client uses the first rule that
  // matches it in exports(5)'s order (a host before a network before "*";
  // in the order written within a kind); a client no rule matches is
  // refused (MNT3ERR_ACCES, NFS3ERR_ACCES). Empty: one rule "*" with
  // read_only and squash above -- the --export DIR shortcut.
  std::vector<ClientRule> clients;
  // Where it was configured ("/etc/tern-nfsd/exports:3"), for messages.
  std::string origin;
};

class Export {
 public:
  // The export under `state`'s key (the instance's state directory,
  // shared by all its exports).
  static Result<std::unique_ptr<Export>> open(const ExportOptions& opt, std::shared_ptr<const StateDir> state);
  // The same with a state directory of its own, opened (and locked) from
  // opt.state_dir for as long as the Export lives: one export alone.
  static Result<std::unique_ptr<Export>> open(const ExportOptions& opt);
  ~Export();
  Export(const Export&) = delete;
  Export& operator=(const Export&) = delete;

  const ExportOptions& options() const { return opt_; }
  const std::string& name() const { return opt_.name; }
  const std::string& state_dir() const { return state_->path(); }
  // The id every handle of this export carries (file_handle.h).
  uint32_t id() const { return id_; }
  int root_fd() const { return root_fd_; }
  const nfs::Fh3& root_fh() const { return root_fh_; }
  uint64_t fsid() const { return fsid_; }
  // The rule a client uses (see ExportOptions::clients); nullptr: not listed.
  const ClientRule* rule_for(const ClientAddr& a) const;
  // The rules in the order they are tried.
  const std::vector<ClientRule>& rules() const { return rules_; }
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
  Export(const ExportOptions& opt, std::shared_ptr<const StateDir> state, const SipKey& key, uint32_t id);

  ExportOptions opt_;
  std::shared_ptr<const StateDir> state_;
  uint32_t id_;
  FhCodec codec_;
  int root_fd_ = -1;
  int mount_fd_ = -1;  // the root again, opened for reading: open_by_handle_at refuses an O_PATH one
  int mount_id_ = -1;
  dev_t root_dev_ = 0;
  ino_t root_ino_ = 0;
  uint64_t fsid_ = 0;
  nfs::Fh3 root_fh_;
  std::vector<ClientRule> rules_;
};

}  // namespace tern::nfsd
