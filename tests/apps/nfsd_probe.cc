// A scripted NFSv3 client for tern-nfsd's app tests: MOUNT over TCP and
// NFS calls over one engine connection that lasts the whole run, so that a
// test can change the server (SIGHUP, a new exports file) between two
// commands and see what the same connection gets. Commands on stdin, one
// per line; one answer line on stdout for each:
//
//   mnt HOST PORT PATH   -> "mnt STAT HEX"          (MOUNT MNT; HEX: the handle, "-" if none)
//   exports HOST PORT    -> "exports DIR:SPEC,SPEC DIR:SPEC ..." (MOUNT EXPORT)
//   connect SPEC         -> "connect ok" or "connect failed ..."
//   getattr HEX          -> "getattr NFSSTAT"
//   write HEX            -> "write NFSSTAT"         (one byte, 'X' at offset 0, FILE_SYNC)
//   lookup HEX NAME      -> "lookup NFSSTAT HEX"
//   pwrite HEX OFF N SEED HOW -> "pwrite NFSSTAT COMMITTED VERF" (N bytes of pattern SEED at OFF;
//                           HOW: unstable, data or file; COMMITTED: the reply's, 0/1/2)
//   commit HEX           -> "commit NFSSTAT VERF"  (the whole file)
//   pread HEX OFF N SEED -> "pread NFSSTAT same", "pread NFSSTAT differ AT" (the first file
//                           offset whose byte is not pattern SEED's) or "pread NFSSTAT short GOT"
//   conn                 -> "conn ready RETRANSMITS" (the connection still the first one, and the
//                           retransmissions its calls needed so far: 0 when it never dropped)
//
// STAT and NFSSTAT are numbers (MNT3ERR_ACCES 13, NFS3ERR_STALE 70, ...).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "nfs/mount3.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs_program.h"
#include "oncrpc/oncrpc.h"

using namespace tern;
namespace m3 = tern::nfs::mount3;

namespace {

std::string hex(const nfs::Fh3& fh) {
  std::string s;
  char b[3];
  for (uint32_t i = 0; i < fh.len; ++i) {
    std::snprintf(b, sizeof b, "%02x", fh.data[i]);
    s += b;
  }
  return s.empty() ? "-" : s;
}

bool unhex(const std::string& s, nfs::Fh3* fh) {
  if (s.size() % 2 != 0 || s.size() / 2 > nfs::kFh3Size) return false;
  std::vector<uint8_t> b;
  for (size_t i = 0; i < s.size(); i += 2) b.push_back(static_cast<uint8_t>(std::stoul(s.substr(i, 2), nullptr, 16)));
  fh->assign(b);
  return true;
}

// One MOUNT call over TCP; the results (after the reply header), or empty.
std::vector<uint8_t> mount_call(const std::string& host, int port, uint32_t proc, const std::string& path) {
  std::vector<uint8_t> none;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (fd >= 0) close(fd);
    return none;
  }
  oncrpc::CallHeader h;
  h.xid = 0x5eed, h.prog = m3::kProgram, h.vers = m3::kVersion, h.proc = proc;
  std::vector<uint8_t> msg(4 + oncrpc::call_size(h) + 1100);
  size_t n = oncrpc::encode_call(h, std::span<uint8_t>(msg.data() + 4, msg.size() - 4));
  xdr::XdrWriter w(std::span<uint8_t>(msg.data() + 4 + n, msg.size() - 4 - n));
  if (proc == 1) m3::encode_dirpath(w, path);
  const uint32_t len = static_cast<uint32_t>(n + w.bytes_written());
  const uint32_t mark = 0x80000000u | len;
  msg[0] = static_cast<uint8_t>(mark >> 24), msg[1] = static_cast<uint8_t>(mark >> 16);
  msg[2] = static_cast<uint8_t>(mark >> 8), msg[3] = static_cast<uint8_t>(mark);
  msg.resize(4 + len);
  std::vector<uint8_t> in;
  if (write(fd, msg.data(), msg.size()) == static_cast<ssize_t>(msg.size())) {
    uint8_t buf[65536];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) {
      in.insert(in.end(), buf, buf + got);
      if (in.size() >= 4) {
        const uint32_t m = uint32_t{in[0]} << 24 | uint32_t{in[1]} << 16 | uint32_t{in[2]} << 8 | in[3];
        if (in.size() >= 4 + (m & 0x7fffffffu)) break;
      }
    }
  }
  close(fd);
  if (in.size() < 4) return none;
  std::span<const uint8_t> rec(in.data() + 4, in.size() - 4);
  oncrpc::ReplyHeader rh;
  auto r = oncrpc::decode_reply(rec, &rh);
  if (r.status != oncrpc::ReplyDecodeStatus::kOk || rh.accept != oncrpc::AcceptStat::kSuccess) return none;
  return std::vector<uint8_t>(rec.begin() + static_cast<std::ptrdiff_t>(r.header_len), rec.end());
}

struct Client {
  std::unique_ptr<rpc::Engine> eng;
  rpc::Connection* conn = nullptr;
  uint32_t retransmits = 0;

  bool wait(const std::function<bool()>& done) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      eng->poll();
      if (done()) return true;
    }
    return false;
  }
  // The nfsstat3 of a call, or -1 (no answer).
  long call(nfs::Nfs3Proc proc, const std::vector<uint8_t>& args, std::vector<uint8_t>* results = nullptr) {
    struct R {
      bool done = false;
      rpc::CallStatus st = rpc::CallStatus::kDisconnected;
      std::vector<uint8_t> res;
      uint32_t retransmits = 0;
    } r;
    rpc::AuthSys auth;
    auth.machine = "probe";
    rpc::Call c;
    c.prog = nfs::kNfsProgram, c.vers = nfs::kNfsV3, c.proc = static_cast<uint32_t>(proc);
    c.args = args;
    c.auth = &auth;
    c.ctx = &r;
    c.done = [](void* ctx, const rpc::CallReply& rep) {
      auto* p = static_cast<R*>(ctx);
      p->st = rep.status;
      p->res.assign(rep.results.begin(), rep.results.end());
      p->retransmits = rep.retransmits;
      p->done = true;
    };
    if (conn->call(c) != 0 || !wait([&] { return r.done; }) || r.st != rpc::CallStatus::kOk || r.res.size() < 4)
      return -1;
    retransmits += r.retransmits;
    if (results != nullptr) *results = r.res;
    return long{r.res[0]} << 24 | long{r.res[1]} << 16 | long{r.res[2]} << 8 | r.res[3];
  }
};

// The byte pattern SEED has at file offset `at`: differs from page to page
// and from seed to seed, so a page written by another seed, a stale page
// and zeros (a hole, a size the crash kept) all tell.
uint8_t pattern(uint32_t seed, uint64_t at) {
  const uint64_t x = (at + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t{seed} << 32 | seed) * 0xbf58476d1ce4e5b9ull;
  return static_cast<uint8_t>((x >> 29) ^ (x >> 47));
}

std::string verf_hex(const nfs::Verf3& v) {
  std::string s;
  char b[3];
  for (uint8_t c : v.data) {
    std::snprintf(b, sizeof b, "%02x", c);
    s += b;
  }
  return s;
}

template <typename A>
std::vector<uint8_t> enc(const A& a, size_t room = 4096) {
  std::vector<uint8_t> b(room);
  xdr::XdrWriter w(b);
  nfs::nfs3::encode(w, a);
  b.resize(w.bytes_written());
  return b;
}

}  // namespace

int main() {
  Client cli;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "mnt") {
      std::string host, path;
      int port = 0;
      in >> host >> port >> path;
      auto res = mount_call(host, port, 1, path);
      m3::MntRes m;
      if (res.empty() || !m3::decode(res, &m)) std::printf("mnt none -\n");
      else std::printf("mnt %u %s\n", static_cast<unsigned>(m.status), hex(m.fh).c_str());
    } else if (cmd == "exports") {
      std::string host;
      int port = 0;
      in >> host >> port;
      auto res = mount_call(host, port, 5, "");
      std::vector<m3::ExportEntry> list;
      std::string out = "exports";
      if (!res.empty() && m3::decode(res, &list)) {
        for (const auto& e : list) {
          out += ' ';
          out += e.dir;
          out += ':';
          for (size_t i = 0; i < e.groups.size(); ++i) {
            if (i > 0) out += ',';
            out += e.groups[i];
          }
        }
      } else {
        out += " none";
      }
      std::printf("%s\n", out.c_str());
    } else if (cmd == "connect") {
      std::string spec;
      in >> spec;
      rpc::EngineOptions o;
      o.arena_bytes = 16u << 20;
      auto e = rpc::Engine::create(o);
      if (!e) {
        std::printf("connect failed %s\n", e.status().to_string().c_str());
      } else {
        cli.eng = std::move(*e);
        auto c = cli.eng->connect(spec);
        if (!c) {
          std::printf("connect failed %s\n", c.status().to_string().c_str());
        } else {
          cli.conn = *c;
          cli.wait([&] { return cli.conn->ready() || cli.conn->failed(); });
          std::printf("connect %s\n", cli.conn->ready() ? "ok" : "failed");
        }
      }
    } else if (cmd == "getattr" || cmd == "write") {
      std::string h;
      in >> h;
      nfs::Fh3 fh;
      long st = -1;
      if (cli.conn != nullptr && unhex(h, &fh)) {
        if (cmd == "getattr") {
          st = cli.call(nfs::Nfs3Proc::kGetattr, enc(nfs::nfs3::GetattrArgs{fh}));
        } else {
          static const uint8_t x = 'X';
          nfs::nfs3::WriteArgs a;
          a.file = fh;
          a.offset = 0;
          a.count = 1;
          a.stable = nfs::StableHow::kFileSync;
          a.data = {&x, 1};
          st = cli.call(nfs::Nfs3Proc::kWrite, enc(a));
        }
      }
      std::printf("%s %ld\n", cmd.c_str(), st);
    } else if (cmd == "lookup") {
      std::string h, name;
      in >> h >> name;
      nfs::Fh3 fh;
      std::string out = "lookup -1 -";
      if (cli.conn != nullptr && unhex(h, &fh)) {
        std::vector<uint8_t> res;
        long st = cli.call(nfs::Nfs3Proc::kLookup, enc(nfs::nfs3::LookupArgs{{fh, name}}), &res);
        nfs::nfs3::LookupRes r;
        out = "lookup " + std::to_string(st) + " " +
              (st == 0 && nfs::nfs3::decode(res, &r) ? hex(r.obj) : std::string("-"));
      }
      std::printf("%s\n", out.c_str());
    } else if (cmd == "pwrite" || cmd == "pread" || cmd == "commit") {
      std::string h, how;
      uint64_t off = 0;
      uint32_t n = 0, seed = 0;
      in >> h;
      if (cmd != "commit") in >> off >> n >> seed;
      if (cmd == "pwrite") in >> how;
      nfs::Fh3 fh;
      std::string out = cmd + " -1";
      if (cli.conn != nullptr && unhex(h, &fh) && n <= (1u << 20)) {
        std::vector<uint8_t> res;
        if (cmd == "pwrite") {
          std::vector<uint8_t> data(n);
          for (uint32_t i = 0; i < n; ++i) data[i] = pattern(seed, off + i);
          nfs::nfs3::WriteArgs a;
          a.file = fh, a.offset = off, a.count = n, a.data = data;
          a.stable = how == "file"   ? nfs::StableHow::kFileSync
                     : how == "data" ? nfs::StableHow::kDataSync
                                     : nfs::StableHow::kUnstable;
          const long st = cli.call(nfs::Nfs3Proc::kWrite, enc(a, n + 512), &res);
          nfs::nfs3::WriteRes r;
          out = "pwrite " + std::to_string(st);
          if (st == 0 && nfs::nfs3::decode(res, &r))
            out += " " + std::to_string(static_cast<int>(r.committed)) + " " + verf_hex(r.verf);
        } else if (cmd == "commit") {
          const long st = cli.call(nfs::Nfs3Proc::kCommit, enc(nfs::nfs3::CommitArgs{fh, 0, 0}), &res);
          nfs::nfs3::CommitRes r;
          out = "commit " + std::to_string(st);
          if (st == 0 && nfs::nfs3::decode(res, &r)) out += " " + verf_hex(r.verf);
        } else {
          // READs of at most 2 KiB: their replies fit inline, no chunks needed.
          std::vector<uint8_t> got;
          long st = 0;
          while (st == 0 && got.size() < n) {
            const uint32_t ask = std::min<uint32_t>(2048, n - static_cast<uint32_t>(got.size()));
            st = cli.call(nfs::Nfs3Proc::kRead, enc(nfs::nfs3::ReadArgs{fh, off + got.size(), ask}), &res);
            nfs::nfs3::ReadRes r;
            if (st != 0) break;
            if (!nfs::nfs3::decode(res, -1, &r)) {
              st = -1;
              break;
            }
            got.insert(got.end(), r.data.begin(), r.data.end());
            if (r.eof || r.data.empty()) break;
          }
          out = "pread " + std::to_string(st);
          if (st == 0) {
            size_t i = 0;
            while (i < got.size() && got[i] == pattern(seed, off + i)) ++i;
            if (i < got.size()) out += " differ " + std::to_string(off + i);
            else if (got.size() < n) out += " short " + std::to_string(got.size());
            else out += " same";
          }
        }
      }
      std::printf("%s\n", out.c_str());
    } else if (cmd == "conn") {
      std::printf("conn %s %u\n", cli.conn != nullptr && cli.conn->ready() ? "ready" : "down", cli.retransmits);
    } else if (!cmd.empty()) {
      std::printf("unknown %s\n", cmd.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}
