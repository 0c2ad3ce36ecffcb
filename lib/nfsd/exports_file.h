// The exports file, as knfsd's admins write it (exports(5)):
//
//   # comment
//   /srv/data   10.0.0.0/24(rw,no_root_squash) 10.0.1.7(ro) *(ro,all_squash,anonuid=1000)
//   /srv/pub    -ro,all_squash  192.168.0.0/16  localhost(rw)
//
// One export per line: its path (double quotes or \ooo octal escapes for
// unusual characters), then its clients, each with its options in
// parentheses right after it (no space); "-opts" after the path sets the
// defaults for the clients after it on that line. A backslash at the end
// of a line continues it; "#" starts a comment.
//
// Clients: "*", an address, address/prefix, "localhost" (client_spec.h).
// Options: ro (the default) and rw; root_squash (the default),
// no_root_squash, all_squash, no_all_squash; anonuid=N, anongid=N; sec=sys
// (the only flavor served); fsid=N (a number, one per export). Accepted
// because tern-nfsd behaves so anyway: no_subtree_check, insecure, sync,
// async, no_wdelay, no_acl (docs/nfs-gateway.md says what each means here). Everything else --
// an unknown option, an option tern-nfsd cannot honour (secure,
// subtree_check, crossmnt, sec=krb5, ...), a path given twice, a line with
// no client (knfsd would export it to the world), "host (opts)" with a
// space (knfsd would give the options to the world) -- is an error naming
// FILE:LINE, and the file is refused whole.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "nfsd/export.h"

namespace tern::nfsd {

// The exports of `text`, named `file` in messages. dir and name are the
// path as written; origin is "FILE:LINE".
Result<std::vector<ExportOptions>> parse_exports(std::string_view text, const std::string& file);
// The same from a file.
Result<std::vector<ExportOptions>> read_exports_file(const std::string& path);

}  // namespace tern::nfsd
