// tern-meta-storm DIR [N]: a metadata storm on a directory (an NFS mount, in
// the rxe VM: tests/vm/nfs-metadata.sh), each phase over N names, timed on
// its own: create, stat, rename, link, symlink, readlink, unlink, mkdir,
// rmdir, fsstat (statvfs). One line per phase: "PHASE N SECONDS". A program
// rather than a shell loop because forking a tool per name costs
// milliseconds under TCG, more than the calls being measured.
//
// The client's caches would answer stat and readlink without a call, so
// the phases that read metadata first drop the kernel's dentry, inode and
// page caches (/proc/sys/vm/drop_caches, when writable: the VM runs as
// root); the calls each phase made are counted by the caller from the
// client's /proc/self/mountstats.
//
// Exit status 0 only when every system call succeeded.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string base;
long n = 1000;
int failures = 0;

std::string name(const char* kind, long i) { return base + "/" + kind + std::to_string(i); }

void fail(const char* what, const std::string& path) {
  if (failures++ < 5) std::fprintf(stderr, "tern-meta-storm: %s %s: %s\n", what, path.c_str(), std::strerror(errno));
}

void drop_caches() {
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return;
  (void)!write(fd, "3\n", 2);
  close(fd);
}

template <class F>
void phase(const char* label, bool cold, F&& one) {
  if (cold) drop_caches();
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; i++) one(i);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s %ld %.6f\n", label, n, s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tern-meta-storm DIR [N]\n");
    return 2;
  }
  base = argv[1];
  if (argc > 2) n = std::strtol(argv[2], nullptr, 10);
  if (n <= 0) return 2;
  // A fresh directory, so that every phase starts from the same state.
  base += "/storm." + std::to_string(getpid());
  if (mkdir(base.c_str(), 0755) != 0) {
    fail("mkdir", base);
    return 1;
  }
  char target[64];
  phase("create", false, [](long i) {
    std::string p = name("f", i);
    int fd = open(p.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return fail("create", p);
    close(fd);
  });
  phase("stat", true, [](long i) {
    struct stat st;
    std::string p = name("f", i);
    if (stat(p.c_str(), &st) != 0) fail("stat", p);
  });
  phase("rename", false, [](long i) {
    std::string from = name("f", i), to = name("g", i);
    if (rename(from.c_str(), to.c_str()) != 0) fail("rename", from);
  });
  phase("link", false, [](long i) {
    std::string from = name("g", i), to = name("h", i);
    if (link(from.c_str(), to.c_str()) != 0) fail("link", to);
  });
  phase("symlink", false, [&](long i) {
    std::snprintf(target, sizeof target, "g%ld", i);
    std::string p = name("s", i);
    if (symlink(target, p.c_str()) != 0) fail("symlink", p);
  });
  phase("readlink", true, [](long i) {
    char buf[64];
    std::string p = name("s", i);
    if (readlink(p.c_str(), buf, sizeof buf) <= 0) fail("readlink", p);
  });
  phase("unlink", false, [](long i) {
    for (const char* k : {"g", "h", "s"}) {
      std::string p = name(k, i);
      if (unlink(p.c_str()) != 0) fail("unlink", p);
    }
  });
  phase("mkdir", false, [](long i) {
    std::string p = name("d", i);
    if (mkdir(p.c_str(), 0755) != 0) fail("mkdir", p);
  });
  phase("rmdir", false, [](long i) {
    std::string p = name("d", i);
    if (rmdir(p.c_str()) != 0) fail("rmdir", p);
  });
  phase("fsstat", false, [](long) {
    struct statvfs sv;
    if (statvfs(base.c_str(), &sv) != 0) fail("statvfs", base);
  });
  if (rmdir(base.c_str()) != 0) fail("rmdir", base);
  if (failures) std::fprintf(stderr, "tern-meta-storm: %d calls failed\n", failures);
  return failures ? 1 : 0;
}
