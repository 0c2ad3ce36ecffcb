#include "nfsd/lock_holders_file.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tern::nfsd {

namespace {

bool is_address(const std::string& s) {
  uint8_t b[16];
  return inet_pton(AF_INET, s.c_str(), b) == 1 || inet_pton(AF_INET6, s.c_str(), b) == 1;
}

Status write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_sys_error(Errc::kNoResources, errno, "write");
    off += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace

Result<LockHolders> load_lock_holders(const std::string& path) {
  LockHolders h;
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return h;
    return make_sys_error(Errc::kInvalidArgument, errno, "cannot read %s", path.c_str());
  }
  std::string line;
  int n = 0;
  bool have_state = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string what, a, b, extra;
    ls >> what >> a;
    if (what == "state" && !have_state && !(ls >> extra)) {
      char* end = nullptr;
      errno = 0;
      long v = std::strtol(a.c_str(), &end, 10);
      if (errno == 0 && end != a.c_str() && *end == '\0' && v >= 0 && v <= INT32_MAX) {
        h.state = static_cast<int32_t>(v);
        have_state = true;
        continue;
      }
    } else if (what == "holder" && is_address(a)) {
      ls >> b;
      if (!(ls >> extra) && (b.empty() || is_address(b)) && h.holders.size() < kMaxLockHolders) {
        h.holders.push_back({a, b});
        continue;
      }
    }
    return make_error(Errc::kInvalidArgument, "%s:%d: not a line tern-nfsd writes", path.c_str(), n);
  }
  return h;
}

Status save_lock_holders(const std::string& path, const LockHolders& h) {
  std::string s = "# tern-nfsd NSM state and lock holders (told to reclaim at start)\nstate " +
                  std::to_string(h.state) + "\n";
  for (const LockHolder& l : h.holders) s += "holder " + l.client + (l.server.empty() ? "" : " " + l.server) + "\n";
  const std::string tmp = path + ".new";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot create %s", tmp.c_str());
  Status w = write_all(fd, s);
  const bool synced = w && fsync(fd) == 0;
  const int e = errno;
  close(fd);
  if (!w) return make_error(w.code(), "cannot write %s: %s", tmp.c_str(), w.message().c_str());
  if (!synced) return make_sys_error(Errc::kNoResources, e, "cannot sync %s", tmp.c_str());
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return make_sys_error(Errc::kInvalidArgument, errno, "cannot rename %s", tmp.c_str());
  // The rename itself reaches the disk with the directory.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  return Status::ok();
}

int32_t next_running_state(int32_t last) {
  // Wraps to 1 at the top (after 2^30 restarts): statd only compares for
  // difference, and 1 is far behind any number a client can remember.
  if (last >= INT32_MAX - 2) return 1;
  return (last % 2 == 0) ? last + 1 : last + 2;
}

}  // namespace tern::nfsd
