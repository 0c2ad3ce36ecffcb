#include "nfsd/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "base/log.h"

namespace tern::nfsd {

namespace {

struct RawHandle {
  struct file_handle h;
  unsigned char room[MAX_HANDLE_SZ];
};

}  // namespace

Export::Export(const ExportOptions& opt, std::shared_ptr<const StateDir> state, const SipKey& key, uint32_t id)
    : opt_(opt), state_(std::move(state)), id_(id), codec_(key, id) {}

Export::~Export() {
  if (root_fd_ >= 0) close(root_fd_);
  if (mount_fd_ >= 0) close(mount_fd_);
}

Result<std::unique_ptr<Export>> Export::open(const ExportOptions& opt) {
  if (opt.dir.empty()) return make_error(Errc::kInvalidArgument, "no directory to export");
  auto state = StateDir::open(opt.state_dir);
  if (!state) return state.status();
  return open(opt, std::move(*state));
}

Result<std::unique_ptr<Export>> Export::open(const ExportOptions& in, std::shared_ptr<const StateDir> state) {
  ExportOptions opt = in;
  if (opt.dir.empty()) return make_error(Errc::kInvalidArgument, "no directory to export");
  // Squashing to -1 would hand callers an id no thread can act as.
  if (opt.squash.anon_uid == kNoId || opt.squash.anon_gid == kNoId)
    return make_error(Errc::kInvalidArgument, "the anonymous uid and gid cannot be 4294967295 (-1)");
  char real[PATH_MAX];
  if (realpath(opt.dir.c_str(), real) == nullptr)
    return make_sys_error(Errc::kInvalidArgument, errno, "cannot export %s", opt.dir.c_str());
  opt.dir = real;
  if (opt.name.empty()) opt.name = opt.dir;
  if (opt.name.front() != '/') opt.name = "/" + opt.name;
  while (opt.name.size() > 1 && opt.name.back() == '/') opt.name.pop_back();
  if (opt.fsid > UINT32_MAX)
    return make_error(Errc::kInvalidArgument, "fsid %llu of %s: at most %u",
                      static_cast<unsigned long long>(opt.fsid), opt.dir.c_str(), UINT32_MAX);
  opt.state_dir = state->path();
  // A state directory inside the export would hand its key to every client.
  if (opt.state_dir == opt.dir || opt.state_dir.starts_with(opt.dir == "/" ? opt.dir : opt.dir + "/"))
    return make_error(Errc::kInvalidArgument,
                      "the state directory %s is inside the export %s, where clients could read its "
                      "handle key: put it elsewhere (--state-dir)",
                      opt.state_dir.c_str(), opt.dir.c_str());

  int fd = ::open(opt.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot open %s", opt.dir.c_str());
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return make_sys_error(Errc::kInvalidArgument, e, "cannot stat %s", opt.dir.c_str());
  }
  // The identity: what names this export across restarts. Not the device
  // number, which every export of one file system shares.
  const std::string identity = "dir=" + opt.dir + "\nfsid=" + std::to_string(opt.fsid);
  const uint64_t fsid = opt.fsid != 0 ? opt.fsid : static_cast<uint64_t>(st.st_dev);
  const SipKey key = state->export_key(identity);
  const uint32_t id = state->export_id(identity);
  std::unique_ptr<Export> ex(new Export(opt, std::move(state), key, id));
  if (opt.clients.empty()) {
    ClientRule anyone{ClientSpec::parse("*").value(), ClientOptions{opt.read_only, opt.squash}};
    ex->rules_.push_back(std::move(anyone));
  } else {
    // exports(5)'s precedence: hosts, then networks, then anyone; the
    // order written within each.
    ex->rules_ = opt.clients;
    std::stable_sort(ex->rules_.begin(), ex->rules_.end(), [](const ClientRule& a, const ClientRule& b) {
      return static_cast<int>(a.who.kind()) < static_cast<int>(b.who.kind());
    });
  }
  ex->root_fd_ = fd;
  ex->mount_fd_ = ::open(opt.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (ex->mount_fd_ < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot open %s", opt.dir.c_str());
  ex->root_dev_ = st.st_dev;
  ex->root_ino_ = st.st_ino;
  ex->fsid_ = fsid;
  RawHandle rh;
  rh.h.handle_bytes = MAX_HANDLE_SZ;
  if (name_to_handle_at(fd, "", &rh.h, &ex->mount_id_, AT_EMPTY_PATH) != 0)
    return make_sys_error(Errc::kUnsupported, errno,
                          "the file system of %s gives no file handles (name_to_handle_at): it cannot "
                          "be exported",
                          opt.dir.c_str());
  if (nfs::Nfs3Stat s = ex->handle_of(fd, &ex->root_fh_); s != nfs::Nfs3Stat::kOk)
    return make_error(Errc::kUnsupported, "the file system of %s has handles of %u bytes, more than %u",
                      opt.dir.c_str(), rh.h.handle_bytes, kMaxKernelHandle);
  // Probe: resolving a handle needs CAP_DAC_READ_SEARCH.
  int probe = -1;
  if (nfs::Nfs3Stat s = ex->open_handle(ex->root_fh_, &probe); s != nfs::Nfs3Stat::kOk)
    return make_sys_error(Errc::kInvalidArgument, errno,
                          "cannot open %s by its handle (open_by_handle_at needs CAP_DAC_READ_SEARCH: "
                          "run tern-nfsd as root)",
                          opt.dir.c_str());
  close(probe);
  // Clients send the mode they want (their umask applied): the server's
  // umask must not take more bits away. Process-wide, as umask is.
  umask(0);
  return ex;
}

const ClientRule* Export::rule_for(const ClientAddr& a) const {
  for (const ClientRule& r : rules_)
    if (r.who.matches(a)) return &r;
  return nullptr;
}

nfs::Nfs3Stat Export::handle_of(int fd, nfs::Fh3* out) const { return handle_at(fd, "", out); }

nfs::Nfs3Stat Export::handle_at(int dirfd, const char* name, nfs::Fh3* out) const {
  RawHandle rh;
  rh.h.handle_bytes = MAX_HANDLE_SZ;
  int mnt = -1;
  if (name_to_handle_at(dirfd, name, &rh.h, &mnt, *name == 0 ? AT_EMPTY_PATH : 0) != 0)
    return nfs::nfs3_stat_from_errno(errno);
  if (mount_id_ >= 0 && mnt != mount_id_) return nfs::Nfs3Stat::kAccess;
  KernelHandle kh;
  if (rh.h.handle_bytes > kMaxKernelHandle || rh.h.handle_type < 0) return nfs::Nfs3Stat::kServerfault;
  kh.type = static_cast<uint32_t>(rh.h.handle_type);
  kh.len = rh.h.handle_bytes;
  std::memcpy(kh.bytes, rh.h.f_handle, kh.len);
  return codec_.encode(kh, out) ? nfs::Nfs3Stat::kOk : nfs::Nfs3Stat::kServerfault;
}

nfs::Nfs3Stat Export::open_handle(const nfs::Fh3& fh, int* fd) const {
  KernelHandle kh;
  if (nfs::Nfs3Stat s = codec_.decode(fh, &kh); s != nfs::Nfs3Stat::kOk) return s;
  RawHandle rh;
  rh.h.handle_bytes = kh.len;
  rh.h.handle_type = static_cast<int>(kh.type);
  std::memcpy(rh.h.f_handle, kh.bytes, kh.len);
  int f = open_by_handle_at(mount_fd_, &rh.h, O_PATH | O_CLOEXEC);
  if (f < 0) {
    // ESTALE: the object is gone. Anything else on a handle we made (it
    // passed the tag) is the object's trouble, not the client's.
    return errno == ESTALE || errno == ENOENT ? nfs::Nfs3Stat::kStale : nfs::nfs3_stat_from_errno(errno);
  }
  *fd = f;
  return nfs::Nfs3Stat::kOk;
}

}  // namespace tern::nfsd
