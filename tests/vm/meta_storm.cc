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
// STORM_PROBE=FILE (with STORM_PIDS="PID ...") also writes, per phase, what
// the whole guest and those processes' threads spent: the change of
// /proc/stat's cpu line (user, nice, system, idle, iowait, irq, softirq
// jiffies) and context switches, and per thread of the watched processes
// its CPU jiffies and voluntary/involuntary switches, so that the host can
// tell CPU per call from waiting per call (scripts/measure-nfs-metadata.sh
// --probe). STORM_HOOK=CMD runs CMD (through sh, outside the timed part)
// before and after each phase with STORM_PHASE and STORM_EDGE (begin, end)
// in its environment: e.g. to attach strace -c to a server for one phase.
//
// Exit status 0 only when every system call succeeded.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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

std::string slurp(const std::string& path) {
  std::string out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t r; (r = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(r));
  close(fd);
  return out;
}

struct ThreadUse {
  std::string comm;
  unsigned long long ticks = 0, vcs = 0, ivcs = 0;
};

struct Snapshot {
  std::vector<unsigned long long> cpu;  // /proc/stat's "cpu" line
  unsigned long long ctxt = 0;
  std::map<std::string, ThreadUse> threads;  // "pid/tid"
};

FILE* probe_out = nullptr;
std::vector<std::string> probe_pids;

Snapshot snapshot() {
  Snapshot s;
  std::istringstream st(slurp("/proc/stat"));
  for (std::string line; std::getline(st, line);) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "cpu")
      for (unsigned long long v; ls >> v;) s.cpu.push_back(v);
    else if (key == "ctxt")
      ls >> s.ctxt;
  }
  for (const std::string& pid : probe_pids) {
    const std::string dir = "/proc/" + pid + "/task";
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string t = dir + "/" + e->d_name;
      ThreadUse u;
      const std::string stat = slurp(t + "/stat");
      // comm is in parentheses and may hold spaces: the fields follow the last ')'.
      const size_t l = stat.find('('), r = stat.rfind(')');
      if (l == std::string::npos || r == std::string::npos) continue;
      u.comm = stat.substr(l + 1, r - l - 1);
      for (char& c : u.comm)
        if (c == ' ') c = '_';
      std::istringstream fs(stat.substr(r + 2));
      std::string f;
      for (int i = 3; i <= 15 && (fs >> f); ++i)
        if (i == 14 || i == 15) u.ticks += std::strtoull(f.c_str(), nullptr, 10);  // utime, stime
      std::istringstream ss(slurp(t + "/status"));
      for (std::string line; std::getline(ss, line);) {
        if (line.rfind("voluntary_ctxt_switches:", 0) == 0) u.vcs = std::strtoull(line.c_str() + 24, nullptr, 10);
        if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) u.ivcs = std::strtoull(line.c_str() + 27, nullptr, 10);
      }
      s.threads[pid + "/" + e->d_name] = u;
    }
    closedir(d);
  }
  return s;
}

void report(const char* label, const Snapshot& a, const Snapshot& b) {
  std::fprintf(probe_out, "%s system ctxt=%llu", label, b.ctxt - a.ctxt);
  static const char* kCpu[] = {"user", "nice", "system", "idle", "iowait", "irq", "softirq"};
  for (size_t i = 0; i < 7 && i < a.cpu.size() && i < b.cpu.size(); ++i)
    std::fprintf(probe_out, " %s=%llu", kCpu[i], b.cpu[i] - a.cpu[i]);
  std::fprintf(probe_out, "\n");
  for (const auto& [id, u] : b.threads) {
    auto it = a.threads.find(id);
    const ThreadUse was = it == a.threads.end() ? ThreadUse{} : it->second;
    if (u.ticks == was.ticks && u.vcs == was.vcs && u.ivcs == was.ivcs) continue;
    std::fprintf(probe_out, "%s thread %s %s ticks=%llu vcs=%llu ivcs=%llu\n", label, id.c_str(), u.comm.c_str(),
                 u.ticks - was.ticks, u.vcs - was.vcs, u.ivcs - was.ivcs);
  }
  std::fflush(probe_out);
}

void hook(const char* label, const char* edge) {
  const char* cmd = std::getenv("STORM_HOOK");
  if (cmd == nullptr || *cmd == '\0') return;
  setenv("STORM_PHASE", label, 1);
  setenv("STORM_EDGE", edge, 1);
  if (std::system(cmd) != 0) std::fprintf(stderr, "tern-meta-storm: hook %s %s failed\n", label, edge);
}

template <class F>
void phase(const char* label, bool cold, F&& one) {
  if (cold) drop_caches();
  hook(label, "begin");
  Snapshot before;
  if (probe_out != nullptr) before = snapshot();
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; i++) one(i);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (probe_out != nullptr) report(label, before, snapshot());
  hook(label, "end");
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
  if (const char* p = std::getenv("STORM_PROBE"); p != nullptr && *p != '\0') {
    probe_out = std::fopen(p, "w");
    if (probe_out == nullptr) {
      std::fprintf(stderr, "tern-meta-storm: %s: %s\n", p, std::strerror(errno));
      return 2;
    }
    std::istringstream ps(std::getenv("STORM_PIDS") ? std::getenv("STORM_PIDS") : "");
    for (std::string pid; ps >> pid;) probe_pids.push_back(pid);
    probe_pids.push_back(std::to_string(getpid()));  // the client's own calls run in its system time
  }
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
