// pmd/shm's listening socket as a client that waits for it sees it: the
// path appears only once the socket listens and has its mode, so a client
// that connects the moment the file exists is never refused (a script, a
// supervisor's readiness check or a test forking its peer before the
// server starts all wait for the path, then connect).
#include <gtest/gtest.h>
#include <dirent.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "rdmadev/rdmadev.h"

namespace tern::shm {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/tern-listen-XXXXXX";
    char* d = mkdtemp(tmpl);
    if (d != nullptr) path = d;
  }
  ~TempDir() {
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
          unlink((path + "/" + e->d_name).c_str());
      closedir(d);
    }
    rmdir(path.c_str());
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
      closedir(d);
    }
    return out;
  }
};

bool connects(const std::string& path) {
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  bool ok = ::connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  close(s);
  return ok;
}

// The socket file is never seen by its name before it listens: bind()
// would create it under that name (IN_CREATE), with nobody listening until
// listen(); it is made under another name and moved onto the path
// (IN_MOVED_TO), with its mode already set, and nothing else is left in the
// directory.
TEST(ShmListen, ThePathAppearsOnlyOnceTheSocketListens) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(in, 0);
  ASSERT_GE(inotify_add_watch(in, dir.path.c_str(), IN_CREATE | IN_MOVED_TO), 0);
  const std::string path = dir.path + "/srv";
  auto dev = rdma::open_device("shm:path=" + path + ",mode=0660");
  ASSERT_TRUE(dev) << dev.status().to_string();
  ASSERT_TRUE((*dev)->listen().is_ok());

  alignas(inotify_event) char buf[4096];
  ssize_t n = read(in, buf, sizeof buf);
  ASSERT_GT(n, 0) << "no event for the socket file";
  bool created_as_path = false, moved_to_path = false;
  for (char* p = buf; p < buf + n;) {
    auto* ev = reinterpret_cast<inotify_event*>(p);
    if (ev->len > 0 && std::strcmp(ev->name, "srv") == 0) {
      if (ev->mask & IN_CREATE) created_as_path = true;
      if (ev->mask & IN_MOVED_TO) moved_to_path = true;
    }
    p += sizeof(inotify_event) + ev->len;
  }
  close(in);
  EXPECT_FALSE(created_as_path) << "the socket was bound under its path: a client may find it before it listens";
  EXPECT_TRUE(moved_to_path);
  struct stat sb;
  ASSERT_EQ(lstat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISSOCK(sb.st_mode));
  EXPECT_EQ(sb.st_mode & 07777, 0660u);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"srv"});
  EXPECT_TRUE(connects(path));
  dev->reset();
  EXPECT_TRUE(dir.names().empty()) << "the socket file outlived its device";
}

// A path in a directory so deep that no sibling name fits in sun_path is
// bound directly, as before: it still listens and is removed with its
// device.
TEST(ShmListen, APathWithNoRoomForASiblingNameStillListens) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  sockaddr_un sa;
  // A directory whose name leaves room for a 2-byte file name and its zero.
  const std::string deep = dir.path + "/" + std::string(sizeof sa.sun_path - 5 - dir.path.size(), 'd');
  ASSERT_EQ(mkdir(deep.c_str(), 0700), 0);
  const std::string path = deep + "/s";
  auto dev = rdma::open_device("shm:path=" + path);
  ASSERT_TRUE(dev) << dev.status().to_string();
  ASSERT_TRUE((*dev)->listen().is_ok());
  EXPECT_TRUE(connects(path));
  dev->reset();
  struct stat sb;
  EXPECT_NE(lstat(path.c_str(), &sb), 0) << "the socket file outlived its device";
  EXPECT_EQ(rmdir(deep.c_str()), 0) << "something was left beside the socket";
}

}  // namespace
}  // namespace tern::shm
