#include "nfsd/exports_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <map>

namespace tern::nfsd {

namespace {

// One line of the file, continuations joined: its text and the number of
// the (first) physical line.
struct Line {
  std::string text;
  int number = 0;
};

std::vector<Line> logical_lines(std::string_view text) {
  std::vector<Line> out;
  Line cur;
  int n = 1;
  bool comment = false, quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (cur.number == 0) cur.number = n;
    if (c == '\n') {
      ++n;
      out.push_back(std::move(cur));
      cur = Line{};
      comment = quoted = false;
      continue;
    }
    if (comment) continue;
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {
      // A continuation: the next physical line belongs to this one.
      ++i;
      ++n;
      cur.text += ' ';
      continue;
    }
    if (c == '"') quoted = !quoted;
    if (c == '#' && !quoted) {
      comment = true;
      continue;
    }
    cur.text += c;
  }
  if (cur.number != 0) out.push_back(std::move(cur));
  return out;
}

// Splits at blanks outside double quotes; quotes stay in the words.
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::string w;
  bool quoted = false;
  for (char c : s) {
    if (c == '"') quoted = !quoted;
    if (!quoted && (c == ' ' || c == '\t' || c == '\r')) {
      if (!w.empty()) out.push_back(std::move(w));
      w.clear();
      continue;
    }
    w += c;
  }
  if (!w.empty()) out.push_back(std::move(w));
  return out;
}

// The path without its quotes and with \ooo escapes decoded.
bool unquote_path(const std::string& in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '"') continue;
    if (c == '\\') {
      int v = 0;
      for (size_t k = 1; k <= 3; ++k) {
        if (i + k >= in.size() || in[i + k] < '0' || in[i + k] > '7') return false;
        v = v * 8 + (in[i + k] - '0');
      }
      if (v == 0 || v > 255) return false;
      *out += static_cast<char>(v);
      i += 3;
      continue;
    }
    *out += c;
  }
  return true;
}

// knfsd options tern-nfsd cannot honour, each with why (so that the error
// says more than "unknown").
const char* unsupported_why(std::string_view o) {
  static const std::map<std::string_view, const char*> kWhy = {
      {"secure", "tern-nfsd does not check clients' source ports (RDMA connections have none): write insecure"},
      {"subtree_check", "tern-nfsd does no subtree checking: a handle is bound to its export by its tag"},
      {"crossmnt", "file systems mounted inside an export are not served"},
      {"nohide", "file systems mounted inside an export are not served"},
      {"wdelay", "write gathering is not done (WRITE is as the client's stable_how says)"},
      {"mountpoint", "not supported"},
      {"mp", "not supported"},
      {"refer", "referrals are NFSv4's"},
      {"replicas", "replicas are NFSv4's"},
      {"pnfs", "pNFS is NFSv4's"},
      {"security_label", "labels are NFSv4.2's"},
  };
  auto it = kWhy.find(o);
  return it == kWhy.end() ? nullptr : it->second;
}

// Applies one comma-separated option list to *o (and *fsid). "" or an
// error message.
std::string apply_options(std::string_view list, ClientOptions* o, uint64_t* fsid) {
  size_t p = 0;
  while (p <= list.size()) {
    size_t q = list.find(',', p);
    if (q == std::string_view::npos) q = list.size();
    const std::string_view opt = list.substr(p, q - p);
    p = q + 1;
    const size_t eq = opt.find('=');
    const std::string_view name = opt.substr(0, eq);
    const std::string_view val = eq == std::string_view::npos ? std::string_view() : opt.substr(eq + 1);
    uint32_t n = 0;
    if (opt.empty()) {
      return "an empty option";
    } else if (opt == "ro") {
      o->read_only = true;
    } else if (opt == "rw") {
      o->read_only = false;
    } else if (opt == "root_squash") {
      o->squash.root_squash = true;
    } else if (opt == "no_root_squash") {
      o->squash.root_squash = false;
    } else if (opt == "all_squash") {
      o->squash.all_squash = true;
    } else if (opt == "no_all_squash") {
      o->squash.all_squash = false;
    } else if (opt == "no_subtree_check" || opt == "insecure" || opt == "sync" || opt == "async" ||
               opt == "no_wdelay" || opt == "no_acl") {
      // What tern-nfsd does anyway (docs/nfs-gateway.md, "The exports file").
    } else if (name == "anonuid" || name == "anongid") {
      if (!parse_uint(val, UINT32_MAX - 1, &n)) return std::string(opt) + ": want a number (a uid or gid)";
      (name == "anonuid" ? o->squash.anon_uid : o->squash.anon_gid) = static_cast<uint32_t>(n);
    } else if (name == "sec") {
      // sec=sys, or a list of flavors of which sys is the only one served.
      size_t a = 0;
      while (a <= val.size()) {
        size_t b = val.find(':', a);
        if (b == std::string_view::npos) b = val.size();
        const std::string_view f = val.substr(a, b - a);
        if (f != "sys")
          return "sec=" + std::string(f.empty() ? "''" : f) +
                 ": tern-nfsd serves AUTH_SYS only (sec=sys); Kerberos (krb5, krb5i, krb5p) and other flavors "
                 "are not supported";
        a = b + 1;
      }
    } else if (name == "fsid") {
      if (!parse_uint(val, UINT32_MAX, &n) || n == 0)
        return std::string(opt) + ": want a number from 1 to 4294967295 (fsid=root and UUIDs are not supported)";
      if (*fsid != 0 && *fsid != n) return "fsid given twice with different values for one export";
      *fsid = n;
    } else if (const char* why = unsupported_why(name)) {
      return std::string(opt) + ": not supported: " + why;
    } else {
      return "unknown option '" + std::string(opt) + "'";
    }
  }
  return {};
}

}  // namespace

Result<std::vector<ExportOptions>> parse_exports(std::string_view text, const std::string& file) {
  std::vector<ExportOptions> out;
  std::map<std::string, std::string> seen;  // path -> where
  for (const Line& line : logical_lines(text)) {
    const std::vector<std::string> w = words(line.text);
    if (w.empty()) continue;
    const std::string where = file + ":" + std::to_string(line.number);
    auto bad = [&](const std::string& why) -> Status {
      return make_error(Errc::kInvalidArgument, "%s: %s", where.c_str(), why.c_str());
    };
    ExportOptions e;
    e.origin = where;
    if (!unquote_path(w[0], &e.dir)) return bad("bad escape in path " + w[0] + " (want \\ooo octal)");
    if (e.dir.empty() || e.dir.front() != '/') return bad("'" + w[0] + "' is not an absolute path");
    while (e.dir.size() > 1 && e.dir.back() == '/') e.dir.pop_back();
    e.name = e.dir;
    if (auto it = seen.find(e.dir); it != seen.end())
      return bad(e.dir + " is exported already at " + it->second + " (list all its clients on one line)");
    seen[e.dir] = where;
    ClientOptions defaults;  // exports(5)'s: ro, root_squash, anonymous 65534
    std::map<std::string, bool> clients_seen;
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string& t = w[i];
      if (t.front() == '-') {
        if (std::string m = apply_options(std::string_view(t).substr(1), &defaults, &e.fsid); !m.empty())
          return bad(m);
        continue;
      }
      if (t.front() == '(')
        return bad("options '" + t + "' with no client before them: knfsd would give them to every client; write "
                   "the client right before its options, with no space (*" + t + " for everyone)");
      const size_t paren = t.find('(');
      const std::string who = t.substr(0, paren);
      ClientRule r;
      r.opt = defaults;
      if (paren != std::string::npos) {
        if (t.back() != ')' || t.find('(', paren + 1) != std::string::npos)
          return bad("'" + t + "': want client(option,option,...)");
        if (std::string m = apply_options(std::string_view(t).substr(paren + 1, t.size() - paren - 2), &r.opt, &e.fsid);
            !m.empty())
          return bad(who + ": " + m);
      }
      auto spec = ClientSpec::parse(who);
      if (!spec) return bad(spec.status().message());
      if (clients_seen.count(who) != 0) return bad("client " + who + " is listed twice for " + e.dir);
      clients_seen[who] = true;
      r.who = std::move(*spec);
      e.clients.push_back(std::move(r));
    }
    if (e.clients.empty())
      return bad(e.dir + " lists no client (knfsd would export it to the world): write *(ro) for that");
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<ExportOptions>> read_exports_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot read the exports file %s", path.c_str());
  std::string text;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > (16u << 20)) {
      close(fd);
      return make_error(Errc::kInvalidArgument, "the exports file %s is over 16 MiB", path.c_str());
    }
  }
  const int e = errno;
  close(fd);
  if (n < 0) return make_sys_error(Errc::kInvalidArgument, e, "cannot read the exports file %s", path.c_str());
  return parse_exports(text, path);
}

}  // namespace tern::nfsd
