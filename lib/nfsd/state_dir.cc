#include "nfsd/state_dir.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tern::nfsd {

namespace {

constexpr const char* kKeyFile = "handle-key";
constexpr const char* kLockFile = "lock";

Status mkdirs(const std::string& path) {
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return make_sys_error(Errc::kInvalidArgument, errno, "cannot create %s", cur.c_str());
    i = j + 1;
  }
  return Status::ok();
}

// The stored key: 16 random bytes, made once and kept (0600) so that
// handles outlive the process.
Result<SipKey> load_key(const std::string& dir) {
  const std::string path = dir + "/" + kKeyFile;
  uint8_t b[16];
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    ssize_t n = read(fd, b, sizeof b);
    close(fd);
    if (n != static_cast<ssize_t>(sizeof b))
      return make_error(Errc::kInvalidArgument,
                        "%s is not a 16-byte key (remove it to make a new one; handles clients hold "
                        "then go stale)",
                        path.c_str());
  } else {
    if (errno != ENOENT) return make_sys_error(Errc::kInvalidArgument, errno, "cannot read %s", path.c_str());
    if (getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b))
      return make_sys_error(Errc::kInternal, errno, "getrandom");
    const std::string tmp = path + ".new";
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot create %s", tmp.c_str());
    bool ok = write(fd, b, sizeof b) == static_cast<ssize_t>(sizeof b) && fsync(fd) == 0;
    close(fd);
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0)
      return make_sys_error(Errc::kInvalidArgument, errno, "cannot write %s", path.c_str());
  }
  SipKey k;
  std::memcpy(&k.k0, b, 8);
  std::memcpy(&k.k1, b + 8, 8);
  return k;
}

// SipHash of label, NUL, identity, and one byte telling derived words apart.
uint64_t derive(const SipKey& key, std::string_view label, std::string_view identity, uint8_t which) {
  std::vector<uint8_t> m;
  m.reserve(label.size() + identity.size() + 2);
  m.insert(m.end(), label.begin(), label.end());
  m.push_back(0);
  m.insert(m.end(), identity.begin(), identity.end());
  m.push_back(which);
  return siphash24(key, m);
}

}  // namespace

Result<std::shared_ptr<const StateDir>> StateDir::open(const std::string& in) {
  const std::string want = in.empty() ? kDefaultStateDir : in;
  TERN_TRY(mkdirs(want));
  char real[PATH_MAX];
  if (realpath(want.c_str(), real) == nullptr)
    return make_sys_error(Errc::kInvalidArgument, errno, "state directory %s", want.c_str());
  std::shared_ptr<StateDir> s(new StateDir());
  s->path_ = real;
  // The lock first: the key and the reply cache are touched only by its holder.
  auto lock = LockFile::acquire(s->path_ + "/" + kLockFile, "the state directory " + s->path_, 0600);
  if (!lock) {
    Status st = lock.status();
    if (st.code() != Errc::kBadState) return st;
    return make_error(Errc::kBadState, "%s: give each instance its own --state-dir", st.message().c_str());
  }
  s->lock_ = std::move(*lock);
  TERN_TRY(s->lock_->write_pid());
  auto key = load_key(s->path_);
  if (!key) return key.status();
  s->key_ = *key;
  return std::shared_ptr<const StateDir>(std::move(s));
}

SipKey StateDir::export_key(std::string_view identity) const {
  return SipKey{derive(key_, "tern-nfsd export handle key", identity, 0),
                derive(key_, "tern-nfsd export handle key", identity, 1)};
}

uint32_t StateDir::export_id(std::string_view identity) const {
  return static_cast<uint32_t>(derive(key_, "tern-nfsd export id", identity, 0));
}

}  // namespace tern::nfsd
