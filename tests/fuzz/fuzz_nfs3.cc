// NFSv3 (RFC 1813) and MOUNT v3 as a peer sends them: every procedure's
// arguments as tern-nfsd decodes them (WRITE's data and SYMLINK's path
// possibly in a read chunk), and every result and directory list as a
// client decodes them.
//
// Input layout (tests/fuzz/README.md; make_seeds.cc writes it):
//   byte 0: bit 7: results (a client's decoders) instead of arguments;
//           bit 6: a read chunk (arguments) or a write chunk (READ,
//           READLINK results): byte 1 is its length, taken from the end of
//           the input, and byte 2 x 4 its position (arguments);
//           bits 0..4: the procedure (% 22); 0 is MOUNT's (its dirpath,
//           mountres3, exports and mountlist decoders)
//   the rest: the arguments or results
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_check.h"
#include "nfs/mount3.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"

namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;
using Span = std::span<const uint8_t>;

void check_fh(const Fh3& fh) { FUZZ_CHECK(fh.len <= kFh3Size, "handle of %u bytes", fh.len); }
void check_name(std::string_view n, const uint8_t* base, size_t size) {
  FUZZ_CHECK(n.size() <= kNfs3MaxPath, "name of %zu bytes", n.size());
  FUZZ_CHECK_WITHIN(n, base, size);
}

void args(uint32_t proc, Span in, Span chunk, uint32_t pos, const uint8_t* base, size_t size) {
  tern::rpc::ReadChunkData rc{pos, chunk};
  std::span<const tern::rpc::ReadChunkData> chunks;
  if (!chunk.empty()) chunks = std::span(&rc, 1);
  switch (static_cast<Nfs3Proc>(proc)) {
    case Nfs3Proc::kGetattr: { GetattrArgs a; if (decode(in, &a)) check_fh(a.obj); break; }
    case Nfs3Proc::kSetattr: { SetattrArgs a; if (decode(in, &a)) check_fh(a.obj); break; }
    case Nfs3Proc::kLookup: { LookupArgs a; if (decode(in, &a)) check_name(a.what.name, base, size); break; }
    case Nfs3Proc::kAccess: { AccessArgs a; (void)decode(in, &a); break; }
    case Nfs3Proc::kReadlink: { ReadlinkArgs a; (void)decode(in, &a); break; }
    case Nfs3Proc::kRead: { ReadArgs a; (void)decode(in, &a); break; }
    case Nfs3Proc::kWrite: {
      WriteArgs a;
      if (decode(in, chunks, &a)) {
        FUZZ_CHECK(a.data.size() == a.count, "%zu bytes of data for count %u", a.data.size(), a.count);
        FUZZ_CHECK_WITHIN(a.data, base, size);
        if (a.data_in_chunk) FUZZ_CHECK_WITHIN(a.data, chunk.data(), chunk.size());
        else FUZZ_CHECK_WITHIN(a.data, in.data(), in.size());
      }
      break;
    }
    case Nfs3Proc::kCreate: { CreateArgs a; if (decode(in, &a)) check_name(a.where.name, base, size); break; }
    case Nfs3Proc::kMkdir: { MkdirArgs a; if (decode(in, &a)) check_name(a.where.name, base, size); break; }
    case Nfs3Proc::kSymlink: {
      SymlinkArgs a;
      if (decode(in, chunks, &a)) {
        check_name(a.where.name, base, size);
        check_name(a.target, base, size);
        if (a.target_in_chunk) FUZZ_CHECK_WITHIN(a.target, chunk.data(), chunk.size());
      }
      break;
    }
    case Nfs3Proc::kMknod: { MknodArgs a; if (decode(in, &a)) check_name(a.where.name, base, size); break; }
    case Nfs3Proc::kRemove:
    case Nfs3Proc::kRmdir: { RemoveArgs a; if (decode(in, &a)) check_name(a.what.name, base, size); break; }
    case Nfs3Proc::kRename: {
      RenameArgs a;
      if (decode(in, &a)) check_name(a.from.name, base, size), check_name(a.to.name, base, size);
      break;
    }
    case Nfs3Proc::kLink: { LinkArgs a; if (decode(in, &a)) check_name(a.link.name, base, size); break; }
    case Nfs3Proc::kReaddir: { ReaddirArgs a; (void)decode(in, &a); break; }
    case Nfs3Proc::kReaddirplus: { ReaddirplusArgs a; (void)decode(in, &a); break; }
    case Nfs3Proc::kCommit: { CommitArgs a; (void)decode(in, &a); break; }
    default: { FsArgs a; (void)decode(in, &a); break; }
  }
}

void results(uint32_t proc, Span in, Span chunk, bool with_chunk, const uint8_t* base, size_t size) {
  switch (static_cast<Nfs3Proc>(proc)) {
    case Nfs3Proc::kGetattr: { GetattrRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kSetattr:
    case Nfs3Proc::kRemove:
    case Nfs3Proc::kRmdir: { WccRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kLookup: { LookupRes r; if (decode(in, &r)) check_fh(r.obj); break; }
    case Nfs3Proc::kAccess: { AccessRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kReadlink: {
      ReadlinkRes r;
      if (decode(in, &r, with_chunk ? &chunk : nullptr)) check_name(r.target, base, size);
      break;
    }
    case Nfs3Proc::kRead: {
      ReadRes r;
      if (decode(in, with_chunk ? static_cast<int64_t>(chunk.size()) : -1, &r)) {
        FUZZ_CHECK_WITHIN(r.data, in.data(), in.size());
        if (!r.data_in_chunk) FUZZ_CHECK(r.data.size() == r.count, "%zu bytes for count %u", r.data.size(), r.count);
      }
      break;
    }
    case Nfs3Proc::kWrite: { WriteRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kCreate:
    case Nfs3Proc::kMkdir:
    case Nfs3Proc::kSymlink:
    case Nfs3Proc::kMknod: { CreateRes r; if (decode(in, &r) && r.obj) check_fh(*r.obj); break; }
    case Nfs3Proc::kRename: { RenameRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kLink: { LinkRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kReaddir:
    case Nfs3Proc::kReaddirplus: {
      DirListDecoder d(in, proc == static_cast<uint32_t>(Nfs3Proc::kReaddirplus));
      if (!d.begin()) break;
      DirEntry e;
      for (int n = 0; d.next(&e); ++n) {
        check_name(e.name, base, size);
        if (e.fh) check_fh(*e.fh);
        FUZZ_CHECK(n < 1 << 20, "a list that never ends");
      }
      break;
    }
    case Nfs3Proc::kFsstat: { FsstatRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kFsinfo: { FsinfoRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kPathconf: { PathconfRes r; (void)decode(in, &r); break; }
    case Nfs3Proc::kCommit: { CommitRes r; (void)decode(in, &r); break; }
    default: break;
  }
}

void mount(Span in, const uint8_t* base, size_t size) {
  std::string_view p;
  if (mount3::decode_dirpath(in, &p)) {
    FUZZ_CHECK(p.size() <= mount3::kMaxPath, "dirpath of %zu bytes", p.size());
    FUZZ_CHECK_WITHIN(p, base, size);
  }
  mount3::MntRes m;
  if (mount3::decode(in, &m)) {
    check_fh(m.fh);
    FUZZ_CHECK(m.flavors.size() <= mount3::kMaxListEntries, "%zu flavors", m.flavors.size());
  }
  std::vector<mount3::ExportEntry> ex;
  if (mount3::decode(in, &ex)) FUZZ_CHECK(ex.size() <= mount3::kMaxListEntries, "%zu exports", ex.size());
  std::vector<mount3::MountEntry> ml;
  if (mount3::decode(in, &ml)) FUZZ_CHECK(ml.size() <= mount3::kMaxListEntries, "%zu mounts", ml.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  const uint32_t proc = (sel & 0x1f) % kNfs3ProcCount;
  size_t off = 1;
  Span chunk;
  uint32_t pos = 0;
  const bool with_chunk = (sel & 0x40) != 0;
  if (with_chunk) {
    if (size < 3) return 0;
    const size_t len = data[1];
    pos = uint32_t{data[2]} * 4;
    off = 3;
    if (len > size - off) return 0;
    chunk = Span(data + size - len, len);
    size -= len;
  }
  Span in(data + off, size - off);
  if (proc == 0) mount(in, data, size);
  else if (sel & 0x80) results(proc, in, chunk, with_chunk, data, size + chunk.size());
  else args(proc, in, chunk, pos, data, size + chunk.size());
  return 0;
}
