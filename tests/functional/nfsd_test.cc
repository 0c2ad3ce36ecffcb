// tern-nfsd's NFSv3 server driven by a Tern client over pmd/shm
// (nfsd_fixture.h): every procedure against a real exported directory,
// checked against the directory itself; data through read chunks, write
// chunks and reply chunks; long calls; what nothing a client sends can
// reach (outside the export, other users' files, a read-only export);
// garbage; handles and the reply cache across a server restart.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "nfsd/export_table.h"
#include "nfsd_fixture.h"

namespace tern::nfsd::test {
namespace {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

uint8_t pat(uint32_t seed, size_t i) { return static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 9)); }

// The nfsstat3 every result starts with.
Nfs3Stat status_of(const Reply& r) {
  EXPECT_EQ(r.status, rpc::CallStatus::kOk) << rpc::call_status_name(r.status);
  if (r.results.size() < 4) return Nfs3Stat::kServerfault;
  return static_cast<Nfs3Stat>(uint32_t{r.results[0]} << 24 | uint32_t{r.results[1]} << 16 |
                               uint32_t{r.results[2]} << 8 | r.results[3]);
}

TEST_F(Nfsd, RootAttributesAndFileSystemInformation) {
  start();
  EXPECT_EQ(call(Nfs3Proc::kNull, {}).status, rpc::CallStatus::kOk);
  GetattrRes g = getattr(root_);
  ASSERT_EQ(g.status, Nfs3Stat::kOk);
  EXPECT_EQ(g.attr.type, FileType::kDir);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(g.attr.fileid, st.st_ino);
  EXPECT_EQ(g.attr.mode, 0777u);
  FsinfoRes fi = op<FsinfoRes>(Nfs3Proc::kFsinfo, FsArgs{root_});
  ASSERT_EQ(fi.status, Nfs3Stat::kOk);
  EXPECT_EQ(fi.rtmax, 1u << 20);
  EXPECT_EQ(fi.wtmax, 1u << 20);
  EXPECT_EQ(fi.properties & (kFsfLink | kFsfSymlink | kFsfCanSetTime), kFsfLink | kFsfSymlink | kFsfCanSetTime);
  FsstatRes fs = op<FsstatRes>(Nfs3Proc::kFsstat, FsArgs{root_});
  ASSERT_EQ(fs.status, Nfs3Stat::kOk);
  EXPECT_GT(fs.tbytes, 0u);
  EXPECT_GE(fs.tbytes, fs.fbytes);
  PathconfRes pc = op<PathconfRes>(Nfs3Proc::kPathconf, FsArgs{root_});
  ASSERT_EQ(pc.status, Nfs3Stat::kOk);
  EXPECT_GT(pc.name_max, 0u);
  EXPECT_LE(pc.name_max, 255u);
  AccessRes ac = op<AccessRes>(Nfs3Proc::kAccess, AccessArgs{root_, kAccessAll});
  ASSERT_EQ(ac.status, Nfs3Stat::kOk);
  EXPECT_EQ(ac.access, kAccessRead | kAccessLookup | kAccessModify | kAccessExtend | kAccessDelete);
}

// WRITE's data from a read chunk and READ's into a write chunk, 1 MiB each,
// byte for byte against the file itself; small ones inline; COMMIT.
TEST_F(Nfsd, DataGoesThroughChunksAndLandsInTheFile) {
  start();
  CreateRes c = create(root_, "data.bin");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  ASSERT_TRUE(c.obj && c.obj_attr);
  const Fh3 f = *c.obj;
  const uint32_t mib = 1u << 20;
  auto* out = static_cast<uint8_t*>(cli_->alloc(mib));
  auto* in = static_cast<uint8_t*>(cli_->alloc(mib));
  for (uint32_t i = 0; i < mib; ++i) out[i] = pat(1, i);
  WriteRes w = write(f, 0, {out, mib}, StableHow::kFileSync, true);
  ASSERT_EQ(w.status, Nfs3Stat::kOk);
  EXPECT_EQ(w.count, mib);
  EXPECT_EQ(w.committed, StableHow::kFileSync);
  ASSERT_TRUE(w.wcc.before && w.wcc.after);
  EXPECT_EQ(w.wcc.before->size, 0u);
  EXPECT_EQ(w.wcc.after->size, mib);
  // A small one inline, past the end: a hole, then the bytes.
  const Bytes small{'t', 'a', 'i', 'l'};
  WriteRes w2 = write(f, mib + 100, small, StableHow::kUnstable, false);
  ASSERT_EQ(w2.status, Nfs3Stat::kOk);
  EXPECT_EQ(w2.committed, StableHow::kUnstable);
  EXPECT_EQ(w2.verf, w.verf);
  Bytes disk = file_bytes("data.bin");
  ASSERT_EQ(disk.size(), mib + 104u);
  for (uint32_t i = 0; i < mib; ++i) ASSERT_EQ(disk[i], pat(1, i)) << "offset " << i;
  EXPECT_EQ(Bytes(disk.begin() + mib + 100, disk.end()), small);
  EXPECT_EQ(disk[mib + 50], 0);

  std::memset(in, 0xee, mib);
  ReadRes r = read(f, 0, mib, {in, mib}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_TRUE(r.data_in_chunk);
  EXPECT_EQ(r.count, mib);
  EXPECT_FALSE(r.eof);
  EXPECT_EQ(std::memcmp(in, out, mib), 0);
  // The end: a short READ with eof, then nothing past it.
  r = read(f, mib, mib, {in, mib}, nullptr);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_EQ(r.count, 104u);
  EXPECT_TRUE(r.eof);
  EXPECT_EQ(std::memcmp(in + 100, "tail", 4), 0);
  r = read(f, 4 * mib, 4096, {in, 4096}, nullptr);
  EXPECT_EQ(r.count, 0u);
  EXPECT_TRUE(r.eof);
  // Inline (no write chunk offered): what the kernel does for small reads.
  Bytes got;
  r = read(f, 10, 100, {}, &got);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  EXPECT_FALSE(r.data_in_chunk);
  ASSERT_EQ(got.size(), 100u);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(got[i], pat(1, 10 + i));
  CommitRes cm = op<CommitRes>(Nfs3Proc::kCommit, CommitArgs{f, 0, 0});
  ASSERT_EQ(cm.status, Nfs3Stat::kOk);
  EXPECT_EQ(cm.verf, w.verf);
  // Every READ through a chunk had its one rkey invalidated by the server's
  // Send With Invalidate.
  EXPECT_GE(server_->nfs->stats().read_chunk_replies.get(), 3u);
  EXPECT_GE(cli_->stats().remote_invalidations.get(), 4u);
  EXPECT_EQ(cli_->stats().rkeys_live.get(), 0u);
  // READ and WRITE of what is not a regular file.
  EXPECT_EQ(read(root_, 0, 10, {}, nullptr).status, Nfs3Stat::kIsdir);
  EXPECT_EQ(write(root_, 0, small, StableHow::kUnstable, false).status, Nfs3Stat::kIsdir);
}

TEST_F(Nfsd, TheNameSpaceAsTheDirectoryShowsIt) {
  start();
  CreateRes d = mkdir_(root_, "dir", 0750);
  ASSERT_EQ(d.status, Nfs3Stat::kOk);
  ASSERT_TRUE(d.obj);
  struct stat st;
  ASSERT_EQ(stat(path("dir").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(mkdir_(root_, "dir").status, Nfs3Stat::kExist);
  LookupRes l = lookup(root_, "dir");
  ASSERT_EQ(l.status, Nfs3Stat::kOk);
  EXPECT_EQ(l.obj, *d.obj) << "one object, one handle";
  EXPECT_EQ(lookup(root_, "nothing").status, Nfs3Stat::kNoent);

  const Fh3 dir = *d.obj;
  CreateRes a = create(dir, "a", 0600);
  ASSERT_EQ(a.status, Nfs3Stat::kOk);
  EXPECT_EQ(create(dir, "a").status, Nfs3Stat::kExist) << "GUARDED";
  EXPECT_EQ(create(dir, "a", 0644, CreateMode::kUnchecked).status, Nfs3Stat::kOk) << "UNCHECKED";
  RenameRes rn = op<RenameRes>(Nfs3Proc::kRename, RenameArgs{{dir, "a"}, {root_, "b"}});
  ASSERT_EQ(rn.status, Nfs3Stat::kOk);
  EXPECT_NE(access(path("b").c_str(), F_OK), -1);
  EXPECT_EQ(access(path("dir/a").c_str(), F_OK), -1);
  EXPECT_EQ(getattr(*a.obj).status, Nfs3Stat::kOk) << "a handle survives a rename";
  LinkRes ln = op<LinkRes>(Nfs3Proc::kLink, LinkArgs{*a.obj, {dir, "hard"}});
  ASSERT_EQ(ln.status, Nfs3Stat::kOk);
  ASSERT_TRUE(ln.attr);
  EXPECT_EQ(ln.attr->nlink, 2u);
  struct stat s1, s2;
  ASSERT_EQ(stat(path("b").c_str(), &s1), 0);
  ASSERT_EQ(stat(path("dir/hard").c_str(), &s2), 0);
  EXPECT_EQ(s1.st_ino, s2.st_ino);

  SymlinkArgs sa;
  sa.where = {dir, "sym"};
  sa.target = "../b";
  CreateRes sl = op<CreateRes>(Nfs3Proc::kSymlink, sa);
  ASSERT_EQ(sl.status, Nfs3Stat::kOk);
  ASSERT_TRUE(sl.obj && sl.obj_attr);
  EXPECT_EQ(sl.obj_attr->type, FileType::kLnk);
  char target[64] = {};
  ASSERT_EQ(readlink(path("dir/sym").c_str(), target, sizeof target - 1), 4);
  EXPECT_STREQ(target, "../b");
  ReadlinkRes rl = op<ReadlinkRes>(Nfs3Proc::kReadlink, ReadlinkArgs{*sl.obj});
  ASSERT_EQ(rl.status, Nfs3Stat::kOk);
  EXPECT_EQ(rl.target, "../b");
  EXPECT_EQ(op<ReadlinkRes>(Nfs3Proc::kReadlink, ReadlinkArgs{dir}).status, Nfs3Stat::kInval);

  MknodArgs mk;
  mk.where = {dir, "fifo"};
  mk.type = FileType::kFifo;
  mk.attr.set_mode = true;
  mk.attr.mode = 0600;
  ASSERT_EQ(op<CreateRes>(Nfs3Proc::kMknod, mk).status, Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("dir/fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  mk.where.name = "bad";
  mk.type = FileType::kLnk;
  EXPECT_EQ(op<CreateRes>(Nfs3Proc::kMknod, mk).status, Nfs3Stat::kBadtype);

  WccRes rd = op<WccRes>(Nfs3Proc::kRmdir, RemoveArgs{{root_, "dir"}});
  EXPECT_EQ(rd.status, Nfs3Stat::kNotempty);
  for (const char* n : {"hard", "sym", "fifo"}) {
    WccRes rm = op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{dir, n}});
    EXPECT_EQ(rm.status, Nfs3Stat::kOk) << n;
    ASSERT_TRUE(rm.wcc.before && rm.wcc.after);
  }
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{dir, "hard"}}).status, Nfs3Stat::kNoent);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{root_, "dir"}}).status, Nfs3Stat::kIsdir);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRmdir, RemoveArgs{{root_, "dir"}}).status, Nfs3Stat::kOk);
  EXPECT_EQ(access(path("dir").c_str(), F_OK), -1);
  EXPECT_EQ(getattr(dir).status, Nfs3Stat::kStale) << "a removed directory's handle is stale";
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{root_, "b"}}).status, Nfs3Stat::kOk);
  EXPECT_EQ(getattr(*a.obj).status, Nfs3Stat::kStale) << "so is a removed file's";
}

TEST_F(Nfsd, SetattrModeOwnerSizeAndTimes) {
  start();
  CreateRes c = create(root_, "f", 0644);
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  SetattrArgs a;
  a.obj = *c.obj;
  a.attr.set_mode = true, a.attr.mode = 04751;
  a.attr.set_uid = true, a.attr.uid = 1234;
  a.attr.set_gid = true, a.attr.gid = 567;
  a.attr.set_size = true, a.attr.size = 5000;
  a.attr.mtime_how = TimeHow::kClientTime, a.attr.mtime = {1000000, 5};
  a.attr.atime_how = TimeHow::kClientTime, a.attr.atime = {2000000, 6};
  WccRes r = op<WccRes>(Nfs3Proc::kSetattr, a);
  ASSERT_EQ(r.status, Nfs3Stat::kOk);
  struct stat st;
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 567u);
  EXPECT_EQ(st.st_size, 5000);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000);
  EXPECT_EQ(st.st_atim.tv_sec, 2000000);
  // chown clears setuid; the mode's other bits are as asked.
  EXPECT_EQ(st.st_mode & 0777, 0751u);
  ASSERT_TRUE(r.wcc.after);
  EXPECT_EQ(r.wcc.after->size, 5000u);
  // The ctime guard.
  a = SetattrArgs{};
  a.obj = *c.obj;
  a.attr.set_size = true, a.attr.size = 1;
  a.check_ctime = true, a.guard_ctime = {1, 1};
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, a).status, Nfs3Stat::kNotSync);
  a.guard_ctime = r.wcc.after->ctime;
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, a).status, Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1);
  // A size on a directory.
  a = SetattrArgs{};
  a.obj = root_;
  a.attr.set_size = true;
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, a).status, Nfs3Stat::kIsdir);
}

// What CREATE, MKDIR and SYMLINK set beyond the mode goes on after the
// object is made (ownership, size, times); an UNCHECKED CREATE of a file that
// is there sets only its size.
TEST_F(Nfsd, CreatingCallsSetTheirOtherAttributes) {
  start();
  nfs::nfs3::CreateArgs c;
  c.where = {root_, "f"};
  c.how = nfs::CreateMode::kGuarded;
  c.attr.set_mode = true, c.attr.mode = 0640;
  c.attr.set_uid = true, c.attr.uid = 1234;
  c.attr.set_gid = true, c.attr.gid = 567;
  c.attr.set_size = true, c.attr.size = 3000;
  c.attr.mtime_how = TimeHow::kClientTime, c.attr.mtime = {1000000, 5};
  ASSERT_EQ(op<nfs::nfs3::CreateRes>(Nfs3Proc::kCreate, c).status, Nfs3Stat::kOk);
  struct stat st;
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 567u);
  EXPECT_EQ(st.st_size, 3000);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // UNCHECKED on the same name: the file stays (owner kept), its size is set.
  c.how = nfs::CreateMode::kUnchecked;
  c.attr.uid = 4321;
  c.attr.size = 10;
  ASSERT_EQ(op<nfs::nfs3::CreateRes>(Nfs3Proc::kCreate, c).status, Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(st.st_uid, 1234u);

  nfs::nfs3::MkdirArgs m;
  m.where = {root_, "d"};
  m.attr.set_mode = true, m.attr.mode = 0750;
  m.attr.set_uid = true, m.attr.uid = 1234;
  m.attr.atime_how = TimeHow::kClientTime, m.attr.atime = {2000000, 6};
  ASSERT_EQ(op<nfs::nfs3::CreateRes>(Nfs3Proc::kMkdir, m).status, Nfs3Stat::kOk);
  ASSERT_EQ(stat(path("d").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_atim.tv_sec, 2000000);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
}

// 300 entries read back with READDIR in small pieces (cookies), and with
// READDIRPLUS in one reply that goes through the client's reply chunk.
TEST_F(Nfsd, ReaddirAndReaddirplusListEveryEntry) {
  start();
  std::set<std::string> want = {".", ".."};
  for (int i = 0; i < 300; ++i) {
    std::string n = "file-with-a-longish-name-" + std::to_string(i);
    int fd = ::open(path(n).c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    close(fd);
    want.insert(n);
  }
  std::set<std::string> seen;
  uint64_t cookie = 0;
  int calls = 0;
  for (bool eof = false; !eof; ++calls) {
    ASSERT_LT(calls, 200);
    Reply r = call(Nfs3Proc::kReaddir, enc(ReaddirArgs{root_, cookie, {}, 1024}));
    ASSERT_EQ(r.status, rpc::CallStatus::kOk);
    DirListDecoder d(r.results, false);
    ASSERT_TRUE(d.begin());
    ASSERT_EQ(d.status(), Nfs3Stat::kOk);
    DirEntry e;
    int n = 0;
    while (d.next(&e)) {
      EXPECT_TRUE(seen.insert(std::string(e.name)).second) << "twice: " << e.name;
      cookie = e.cookie;
      ++n;
    }
    ASSERT_TRUE(d.ok());
    EXPECT_GT(n, 0);
    EXPECT_LE(r.results.size(), 1024u);
    eof = d.eof();
  }
  EXPECT_EQ(seen, want);
  EXPECT_GT(calls, 10);

  Reply r = call(Nfs3Proc::kReaddirplus, enc(ReaddirplusArgs{root_, 0, {}, 65536, 128 * 1024}),
                 CallOpts{.max_results = 160 * 1024});
  ASSERT_EQ(r.status, rpc::CallStatus::kOk) << rpc::call_status_name(r.status);
  EXPECT_GT(r.results.size(), 4096u) << "more than fits inline: through the reply chunk";
  DirListDecoder d(r.results, true);
  ASSERT_TRUE(d.begin());
  std::set<std::string> plus;
  DirEntry e;
  Fh3 some;
  while (d.next(&e)) {
    plus.insert(std::string(e.name));
    if (e.name != "..") {
      ASSERT_TRUE(e.attr && e.fh) << e.name;
      EXPECT_EQ(e.attr->fileid, e.fileid);
    }
    if (e.name == "file-with-a-longish-name-7") some = *e.fh;
  }
  EXPECT_TRUE(d.eof());
  EXPECT_EQ(plus, want);
  EXPECT_EQ(getattr(some).status, Nfs3Stat::kOk) << "a handle from READDIRPLUS works";
  EXPECT_EQ(server_->eng->stats().reply_chunks.get(), 1u);
  // Too small for one entry; not a directory.
  EXPECT_EQ(status_of(call(Nfs3Proc::kReaddir, enc(ReaddirArgs{root_, 0, {}, 16}))), Nfs3Stat::kToosmall);
  EXPECT_EQ(status_of(call(Nfs3Proc::kReaddir, enc(ReaddirArgs{some, 0, {}, 4096}))), Nfs3Stat::kNotdir);
}

// A call larger than the inline threshold: RDMA_NOMSG through a
// position-zero read chunk (a SYMLINK with a 4000-byte target, as the Linux
// client sends it), and READLINK's reply through a reply chunk.
TEST_F(Nfsd, LongCallsAndLongReplies) {
  start();
  std::string target(4000, 'x');
  for (size_t i = 0; i < target.size(); i += 100) target[i] = '/';
  SymlinkArgs sa;
  sa.where = {root_, "long"};
  sa.target = target;
  const uint64_t long_calls = cli_->stats().long_calls.get();
  CreateRes sl = op<CreateRes>(Nfs3Proc::kSymlink, sa);
  ASSERT_EQ(sl.status, Nfs3Stat::kOk);
  EXPECT_EQ(cli_->stats().long_calls.get(), long_calls + 1);
  ReadlinkRes rl = op<ReadlinkRes>(Nfs3Proc::kReadlink, ReadlinkArgs{*sl.obj}, CallOpts{.max_results = 8192});
  ASSERT_EQ(rl.status, Nfs3Stat::kOk);
  EXPECT_EQ(rl.target, target);
  std::vector<char> disk(5000);
  ASSERT_EQ(readlink(path("long").c_str(), disk.data(), disk.size()), 4000);

  // As the Linux client sends a long SYMLINK: the path in a read chunk.
  auto* p = static_cast<uint8_t*>(cli_->alloc(4096));
  std::memcpy(p, target.data(), 3999);
  sa.where.name = "chunked";
  sa.target = std::string_view(reinterpret_cast<const char*>(p), 3999);
  Bytes args(512);
  xdr::XdrWriter w(args);
  encode_symlink_chunked(w, sa);
  args.resize(w.bytes_written());
  Reply r = call(Nfs3Proc::kSymlink, args, CallOpts{.bulk_send = {p, 3999}});
  CreateRes cr;
  ASSERT_EQ(r.status, rpc::CallStatus::kOk) << rpc::call_status_name(r.status);
  ASSERT_TRUE(decode(r.results, &cr));
  ASSERT_EQ(cr.status, Nfs3Stat::kOk);
  ASSERT_EQ(readlink(path("chunked").c_str(), disk.data(), disk.size()), 3999);
  EXPECT_EQ(std::string(disk.data(), 3999), target.substr(0, 3999));
  // READLINK's path through a write chunk when the client offers one.
  auto* back = static_cast<uint8_t*>(cli_->alloc(4096));
  r = call(Nfs3Proc::kReadlink, enc(ReadlinkArgs{*cr.obj}), CallOpts{.bulk_recv = {back, 4096}});
  ASSERT_EQ(r.status, rpc::CallStatus::kOk);
  ASSERT_EQ(r.bulk_len, 3999u);
  std::span<const uint8_t> chunk(back, r.bulk_len);
  ReadlinkRes rc;
  ASSERT_TRUE(decode(r.results, &rc, &chunk));
  EXPECT_TRUE(rc.data_in_chunk);
  EXPECT_EQ(rc.target, target.substr(0, 3999));
}

// Nothing outside the exported directory is reachable: not through "..",
// not through a symlink, not with a made-up handle, not with a handle of a
// directory that was moved out.
TEST_F(Nfsd, NothingOutsideTheExportIsReachable) {
  ASSERT_EQ(symlink("/etc", path("escape").c_str()), 0);
  ASSERT_EQ(mkdir(path("sub").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(path("sub/deeper").c_str(), 0755), 0);
  start();
  LookupRes up = lookup(root_, "..");
  ASSERT_EQ(up.status, Nfs3Stat::kOk);
  EXPECT_EQ(up.obj, root_) << "the root's parent is the root";
  LookupRes esc = lookup(root_, "escape");
  ASSERT_EQ(esc.status, Nfs3Stat::kOk);
  EXPECT_EQ(esc.obj_attr->type, FileType::kLnk) << "a symlink is itself, never followed";
  EXPECT_EQ(lookup(esc.obj, "passwd").status, Nfs3Stat::kNotdir);
  EXPECT_EQ(op<CreateRes>(Nfs3Proc::kMkdir, MkdirArgs{{esc.obj, "x"}, {}}).status, Nfs3Stat::kNotdir);
  EXPECT_EQ(read(esc.obj, 0, 100, {}, nullptr).status, Nfs3Stat::kInval);
  for (const char* bad : {"../x", "a/b", "/etc"}) {
    EXPECT_EQ(lookup(root_, bad).status, Nfs3Stat::kAccess) << bad;
    EXPECT_EQ(create(root_, bad).status, Nfs3Stat::kAccess) << bad;
  }
  EXPECT_EQ(create(root_, "..").status, Nfs3Stat::kExist);
  EXPECT_EQ(mkdir_(root_, ".").status, Nfs3Stat::kExist);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{root_, ".."}}).status, Nfs3Stat::kInval);
  EXPECT_EQ(op<RenameRes>(Nfs3Proc::kRename, RenameArgs{{root_, "sub"}, {root_, "../sub"}}).status, Nfs3Stat::kAccess);
  EXPECT_EQ(lookup(root_, std::string(256, 'n')).status, Nfs3Stat::kNametoolong);
  EXPECT_EQ(lookup(root_, std::string_view("a\0b", 3)).status, Nfs3Stat::kAccess);

  // ".." of a subdirectory is its parent, once proved to be beneath the root.
  LookupRes sub = lookup(root_, "sub");
  LookupRes deeper = lookup(sub.obj, "deeper");
  EXPECT_EQ(lookup(deeper.obj, "..").obj, sub.obj);
  EXPECT_EQ(lookup(sub.obj, "..").obj, root_);
  // Moved out of the export (by someone on the server): its ".." is refused.
  ASSERT_EQ(rename(path("sub").c_str(), (tmp_ + "/outside").c_str()), 0);
  EXPECT_EQ(lookup(deeper.obj, "..").status, Nfs3Stat::kAccess) << "its parent is outside now";
  EXPECT_EQ(lookup(sub.obj, "..").status, Nfs3Stat::kAccess);

  // Made-up handles: every change of a real one (in the export id it names
  // no export here: stale), and random bytes.
  Fh3 forged = root_;
  for (uint32_t i = 0; i < forged.len; ++i) {
    Fh3 f = root_;
    f.data[i] ^= 0x40;
    EXPECT_EQ(getattr(f).status, i >= 4 && i < 8 ? Nfs3Stat::kStale : Nfs3Stat::kBadhandle) << "byte " << i;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 50; ++i) {
    Fh3 f;
    f.len = rng() % 65;
    for (uint32_t k = 0; k < f.len; ++k) f.data[k] = static_cast<uint8_t>(rng());
    EXPECT_EQ(getattr(f).status, Nfs3Stat::kBadhandle);
    EXPECT_EQ(lookup(f, "x").status, Nfs3Stat::kBadhandle);
  }
}

TEST_F(Nfsd, CallersAreWhoTheySayAndNoMore) {
  start();
  rpc::AuthSys alice, bob;
  alice.machine = bob.machine = "c";
  alice.uid = 1001, alice.gid = 1001;
  bob.uid = 1002, bob.gid = 1002;
  const CallOpts as_alice{.auth = &alice}, as_bob{.auth = &bob};
  CreateRes c = create(root_, "alice", 0600, CreateMode::kGuarded, as_alice);
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  struct stat st;
  ASSERT_EQ(stat(path("alice").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1001u) << "created as the caller";
  EXPECT_EQ(st.st_gid, 1001u);
  const Bytes data{1, 2, 3};
  EXPECT_EQ(write(*c.obj, 0, data, StableHow::kFileSync, false, as_alice).status, Nfs3Stat::kOk);
  EXPECT_EQ(write(*c.obj, 0, data, StableHow::kFileSync, false, as_bob).status, Nfs3Stat::kAccess);
  EXPECT_EQ(read(*c.obj, 0, 3, {}, nullptr, as_bob).status, Nfs3Stat::kAccess);
  AccessRes ab = op<AccessRes>(Nfs3Proc::kAccess, AccessArgs{*c.obj, kAccessAll}, as_bob);
  EXPECT_EQ(ab.access, 0u);
  SetattrArgs ch;
  ch.obj = *c.obj;
  ch.attr.set_mode = true, ch.attr.mode = 0666;
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, ch, as_bob).status, Nfs3Stat::kPerm) << "only the owner chmods";
  // The owner may write its file whatever its mode (a descriptor it opened
  // before a chmod would let it).
  ch.attr.mode = 0444;
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, ch, as_alice).status, Nfs3Stat::kOk);
  EXPECT_EQ(write(*c.obj, 3, data, StableHow::kFileSync, false, as_alice).status, Nfs3Stat::kOk);
  EXPECT_EQ(file_bytes("alice").size(), 6u);
  // A directory of alice's: bob cannot add to it or remove from it.
  CreateRes d = mkdir_(root_, "adir", 0755, as_alice);
  ASSERT_EQ(d.status, Nfs3Stat::kOk);
  EXPECT_EQ(create(*d.obj, "bob", 0644, CreateMode::kGuarded, as_bob).status, Nfs3Stat::kAccess);
  ASSERT_EQ(create(*d.obj, "x", 0644, CreateMode::kGuarded, as_alice).status, Nfs3Stat::kOk);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{*d.obj, "x"}}, as_bob).status, Nfs3Stat::kAccess);
  EXPECT_EQ(access(path("adir/x").c_str(), F_OK), 0);
  // A device node needs root.
  MknodArgs mk;
  mk.where = {root_, "null"};
  mk.type = FileType::kChr;
  mk.major = 1, mk.minor = 3;
  EXPECT_EQ(op<CreateRes>(Nfs3Proc::kMknod, mk, as_bob).status, Nfs3Stat::kPerm);
}

TEST_F(Nfsd, RootIsSquashedByDefault) {
  ASSERT_EQ(mkdir(path("rootonly").c_str(), 0755), 0);
  start({}, /*no_root_squash=*/false);
  CreateRes c = create(root_, "by-root", 0644);
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  struct stat st;
  ASSERT_EQ(stat(path("by-root").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u) << "root from a client is nobody here";
  LookupRes ro = lookup(root_, "rootonly");
  EXPECT_EQ(create(ro.obj, "x").status, Nfs3Stat::kAccess);
}

// The identities the kernel treats specially (-1 is "no id" to setfsuid,
// setfsgid and setgroups) must not leave the thread that acts as callers
// half-switched. A call under each of them, to every procedure, between two
// calls of an ordinary user; the user's next call must still be that user
// and no one else: not root (it cannot create in root's 0755 directory or
// take root's file), not the failing call's ids (what it creates is its
// own). Before the fix a uid of -1 left the caller thread at fsuid 0 while
// it believed it acted as the previous caller: that caller's next call ran
// as root.
TEST_F(Nfsd, NoIdentityLeavesTheNextCallerWithAnotherIdentity) {
  ASSERT_EQ(mkdir(path("rootdir").c_str(), 0755), 0);
  int fd = ::open(path("secret").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(mkdir(path("sandbox").c_str(), 0777), 0);
  ASSERT_EQ(chmod(path("sandbox").c_str(), 0777), 0);
  start({}, /*no_root_squash=*/false);
  rpc::AuthSys alice;
  alice.machine = "c";
  alice.uid = 2000, alice.gid = 2000;
  const CallOpts as_alice{.auth = &alice};
  LookupRes rootdir = lookup(root_, "rootdir", as_alice);
  LookupRes secret = lookup(root_, "secret", as_alice);
  LookupRes sandbox = lookup(root_, "sandbox", as_alice);
  ASSERT_EQ(rootdir.status, Nfs3Stat::kOk);
  ASSERT_EQ(secret.status, Nfs3Stat::kOk);
  ASSERT_EQ(sandbox.status, Nfs3Stat::kOk);
  const Fh3 sb = sandbox.obj;
  CreateRes af = create(sb, "alices", 0666, CreateMode::kGuarded, as_alice);
  ASSERT_EQ(af.status, Nfs3Stat::kOk);
  const Fh3 fa = *af.obj;
  ASSERT_EQ(symlink("alices", path("sandbox/link").c_str()), 0);
  LookupRes ln = lookup(sb, "link", as_alice);
  ASSERT_EQ(ln.status, Nfs3Stat::kOk);

  struct Bad {
    const char* what;
    uint32_t uid, gid;
    std::vector<uint32_t> groups;
  };
  const Bad bads[] = {
      {"uid -1", kNoId, 3000, {3001}},
      {"gid -1", 3000, kNoId, {3001}},
      {"a group of -1", 3000, 3000, {3001, kNoId}},
      {"uid, gid and a group -1", kNoId, kNoId, {kNoId, 0}},
  };
  const Bytes three{1, 2, 3};
  uint32_t n = 0;
  for (const Bad& b : bads) {
    rpc::AuthSys bad;
    bad.machine = "c";
    bad.uid = b.uid, bad.gid = b.gid;
    bad.ngids = static_cast<uint32_t>(b.groups.size());
    for (size_t i = 0; i < b.groups.size(); ++i) bad.gids[i] = b.groups[i];
    const CallOpts as_bad{.auth = &bad};
    for (uint32_t p = 0; p < kNfs3ProcCount; ++p, ++n) {
      const auto proc = static_cast<Nfs3Proc>(p);
      SCOPED_TRACE(std::string(b.what) + ", " + nfs3_proc_name(proc));
      const std::string i = std::to_string(n);
      // Alice first: the caller thread acts as her.
      SetattrArgs mine;
      mine.obj = fa;
      mine.attr.set_mode = true, mine.attr.mode = 0666;
      ASSERT_EQ(op<WccRes>(Nfs3Proc::kSetattr, mine, as_alice).status, Nfs3Stat::kOk);
      // Then the call under no identity: whatever it answers.
      Bytes args;
      switch (proc) {
        case Nfs3Proc::kNull: break;
        case Nfs3Proc::kGetattr: args = enc(GetattrArgs{fa}); break;
        case Nfs3Proc::kSetattr: {
          SetattrArgs a;
          a.obj = fa;
          a.attr.set_uid = true, a.attr.uid = b.uid;
          a.attr.set_gid = true, a.attr.gid = b.gid;
          args = enc(a);
          break;
        }
        case Nfs3Proc::kLookup: args = enc(LookupArgs{{sb, "alices"}}); break;
        case Nfs3Proc::kAccess: args = enc(AccessArgs{fa, kAccessAll}); break;
        case Nfs3Proc::kReadlink: args = enc(ReadlinkArgs{ln.obj}); break;
        case Nfs3Proc::kRead: args = enc(ReadArgs{fa, 0, 16}); break;
        case Nfs3Proc::kWrite: {
          WriteArgs a;
          a.file = fa, a.count = 3, a.stable = StableHow::kFileSync, a.data = three;
          args = enc(a);
          break;
        }
        case Nfs3Proc::kCreate: {
          CreateArgs a;
          a.where = {sb, "c"};
          a.attr.set_mode = true, a.attr.mode = 0644;
          args = enc(a);
          break;
        }
        case Nfs3Proc::kMkdir: args = enc(MkdirArgs{{sb, "m"}, {}}); break;
        case Nfs3Proc::kSymlink: {
          SymlinkArgs a;
          a.where = {sb, "s"};
          a.target = "alices";
          args = enc(a);
          break;
        }
        case Nfs3Proc::kMknod: {
          MknodArgs a;
          a.where = {sb, "n"};
          a.type = FileType::kFifo;
          args = enc(a);
          break;
        }
        case Nfs3Proc::kRemove: args = enc(RemoveArgs{{sb, "c"}}); break;
        case Nfs3Proc::kRmdir: args = enc(RemoveArgs{{sb, "m"}}); break;
        case Nfs3Proc::kRename: args = enc(RenameArgs{{sb, "s"}, {sb, "s2"}}); break;
        case Nfs3Proc::kLink: args = enc(LinkArgs{fa, {sb, "h"}}); break;
        case Nfs3Proc::kReaddir: args = enc(ReaddirArgs{sb, 0, {}, 4096}); break;
        case Nfs3Proc::kReaddirplus: args = enc(ReaddirplusArgs{sb, 0, {}, 4096, 8192}); break;
        case Nfs3Proc::kFsstat:
        case Nfs3Proc::kFsinfo:
        case Nfs3Proc::kPathconf: args = enc(FsArgs{root_}); break;
        case Nfs3Proc::kCommit: args = enc(CommitArgs{fa, 0, 0}); break;
      }
      Reply r = call(proc, args, as_bad);
      ASSERT_TRUE(r.done);
      // Alice again: still alice, neither root nor the failed caller.
      EXPECT_EQ(create(rootdir.obj, "p" + i, 0644, CreateMode::kGuarded, as_alice).status, Nfs3Stat::kAccess)
          << "alice created in root's 0755 directory: she acted as root";
      SetattrArgs take;
      take.obj = secret.obj;
      take.attr.set_uid = true, take.attr.uid = 2000;
      EXPECT_NE(op<WccRes>(Nfs3Proc::kSetattr, take, as_alice).status, Nfs3Stat::kOk)
          << "alice took root's file";
      CreateRes q = create(sb, "q" + i, 0644, CreateMode::kGuarded, as_alice);
      ASSERT_EQ(q.status, Nfs3Stat::kOk);
      struct stat st;
      ASSERT_EQ(stat(path("sandbox/q" + i).c_str(), &st), 0);
      EXPECT_EQ(st.st_uid, 2000u) << "alice's file is not hers";
      EXPECT_EQ(st.st_gid, 2000u);
      // What the call under no identity made, it made with -1 squashed to
      // nobody (65534) and its valid ids as they were.
      for (const char* made : {"c", "m", "s", "n", "s2", "h"}) {
        if (lstat(path(std::string("sandbox/") + made).c_str(), &st) != 0) continue;
        if (std::string_view(made) == "h") {
          EXPECT_EQ(st.st_uid, 2000u);  // a link to alice's file
        } else {
          EXPECT_EQ(st.st_uid, b.uid == kNoId ? 65534u : b.uid) << made;
          EXPECT_EQ(st.st_gid, b.gid == kNoId ? 65534u : b.gid) << made;
        }
      }
      for (const char* made : {"c", "s", "n", "s2", "h"}) (void)unlink(path(std::string("sandbox/") + made).c_str());
      (void)rmdir(path("sandbox/m").c_str());
    }
  }
  struct stat st;
  ASSERT_EQ(stat(path("secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(access(path("rootdir/p0").c_str(), F_OK), -1);
}

TEST_F(Nfsd, AReadOnlyExportChangesNothing) {
  ASSERT_EQ(mkdir(path("d").c_str(), 0755), 0);
  int fd = ::open(path("f").c_str(), O_CREAT | O_WRONLY, 0666);
  ASSERT_EQ(::write(fd, "abc", 3), 3);
  close(fd);
  ExportOptions o;
  o.read_only = true;
  start(o);
  LookupRes f = lookup(root_, "f");
  ASSERT_EQ(f.status, Nfs3Stat::kOk);
  Bytes got;
  EXPECT_EQ(read(f.obj, 0, 3, {}, &got).status, Nfs3Stat::kOk);
  EXPECT_EQ(got, (Bytes{'a', 'b', 'c'}));
  EXPECT_EQ(write(f.obj, 0, Bytes{1}, StableHow::kFileSync, false).status, Nfs3Stat::kRofs);
  EXPECT_EQ(create(root_, "new").status, Nfs3Stat::kRofs);
  EXPECT_EQ(mkdir_(root_, "new").status, Nfs3Stat::kRofs);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{root_, "f"}}).status, Nfs3Stat::kRofs);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRmdir, RemoveArgs{{root_, "d"}}).status, Nfs3Stat::kRofs);
  EXPECT_EQ(op<RenameRes>(Nfs3Proc::kRename, RenameArgs{{root_, "f"}, {root_, "g"}}).status, Nfs3Stat::kRofs);
  EXPECT_EQ(op<LinkRes>(Nfs3Proc::kLink, LinkArgs{f.obj, {root_, "h"}}).status, Nfs3Stat::kRofs);
  SetattrArgs s;
  s.obj = f.obj;
  s.attr.set_mode = true;
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, s).status, Nfs3Stat::kRofs);
  AccessRes a = op<AccessRes>(Nfs3Proc::kAccess, AccessArgs{f.obj, kAccessAll});
  EXPECT_EQ(a.access & (kAccessModify | kAccessExtend | kAccessDelete), 0u);
  EXPECT_EQ(file_bytes("f"), (Bytes{'a', 'b', 'c'}));
}

// Two exports of one instance (one state directory, so one stored key), two
// directories of one file system, each served by a server of its own: a
// handle one export gave is refused by the other (NFS3ERR_STALE: it names
// another export), so a read-only export's file cannot be written through
// the read-write export's server, though open_by_handle_at() would open it.
// Before exports had their own key and id (the id was the device number)
// the WRITE went through.
TEST_F(Nfsd, AHandleOfOneExportIsRefusedByAnother) {
  ASSERT_EQ(mkdir(path("ro").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(path("rw").c_str(), 0777), 0);
  int fd = ::open(path("ro/f").c_str(), O_CREAT | O_WRONLY, 0666);
  ASSERT_EQ(::write(fd, "abc", 3), 3);
  close(fd);
  ExportOptions ro;
  ro.dir = path("ro");
  ro.read_only = true;
  start(ro);
  rpc::Connection* to_ro = conn_;
  ExportOptions rwo;
  rwo.dir = path("rw");
  rwo.squash.root_squash = false;
  auto rw = Export::open(rwo, state_dir_);
  ASSERT_TRUE(rw.is_ok()) << rw.status().to_string();
  EXPECT_NE((*rw)->id(), exp_->id());
  const std::string spec2 = next_spec();
  ServerConfig cfg;
  cfg.write_verf = new_write_verifier();
  auto rw_server = std::make_unique<ServerThread>(**rw, drc_.get(), cfg, spec2);
  rpc::Connection* to_rw = connect(spec2);
  ASSERT_NE(to_rw, nullptr);

  LookupRes f = lookup(root_, "f");
  ASSERT_EQ(f.status, Nfs3Stat::kOk);
  EXPECT_EQ(write(f.obj, 0, Bytes{'X'}, StableHow::kFileSync, false).status, Nfs3Stat::kRofs);
  conn_ = to_rw;
  EXPECT_EQ(write(f.obj, 0, Bytes{'X'}, StableHow::kFileSync, false).status, Nfs3Stat::kStale);
  auto* chunk = static_cast<uint8_t*>(cli_->alloc(4096));  // a WRITE through a read chunk, as the kernel sends one
  ASSERT_NE(chunk, nullptr);
  std::memset(chunk, 'X', 4096);
  EXPECT_EQ(write(f.obj, 0, {chunk, 4096}, StableHow::kFileSync, true).status, Nfs3Stat::kStale);
  SetattrArgs sa;
  sa.obj = f.obj;
  sa.attr.set_size = true;
  sa.attr.size = 0;
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kSetattr, sa).status, Nfs3Stat::kStale);
  EXPECT_EQ(op<WccRes>(Nfs3Proc::kRemove, RemoveArgs{{root_, "f"}}).status, Nfs3Stat::kStale);
  EXPECT_EQ(getattr(f.obj).status, Nfs3Stat::kStale);
  EXPECT_EQ(getattr((*rw)->root_fh()).status, Nfs3Stat::kOk) << "its own handles work";
  // And the other way round.
  conn_ = to_ro;
  EXPECT_EQ(getattr((*rw)->root_fh()).status, Nfs3Stat::kStale);
  EXPECT_EQ(file_bytes("ro/f"), (Bytes{'a', 'b', 'c'}));
  to_rw->close();
  rw_server.reset();
}

// Builds the rules of an export from "spec(opts)" pairs, the way the
// exports file would (exports_file.h has its own tests).
std::vector<ClientRule> rules(std::initializer_list<std::pair<const char*, ClientOptions>> list) {
  std::vector<ClientRule> out;
  for (const auto& [who, opt] : list) out.push_back(ClientRule{ClientSpec::parse(who).value(), opt});
  return out;
}

ClientOptions rw_root() {
  ClientOptions o;
  o.read_only = false;
  o.squash.root_squash = false;
  return o;
}

// Several exports in one server: each call's export is the one its handle
// names, with the options its list gives this client. The client here is a
// pmd/shm peer, which is loopback (127.0.0.1) to the lists: an export that
// lists only 10.0.0.0/8 refuses it every call (NFS3ERR_ACCES) though its
// handle is good; a read-only entry makes changes NFS3ERR_ROFS there while
// the next export takes them; a call whose two handles are of two exports
// is NFS3ERR_XDEV; FSSTAT and FSINFO answer for the export asked.
TEST_F(Nfsd, SeveralExportsEachWithItsClients) {
  for (const char* d : {"a", "b", "c"}) ASSERT_EQ(mkdir(path(d).c_str(), 0777), 0);
  int fd = ::open(path("c/f").c_str(), O_CREAT | O_WRONLY, 0666);
  ASSERT_EQ(::write(fd, "abc", 3), 3);
  close(fd);
  state_dir_ = StateDir::open(state_).value();
  std::vector<ExportOptions> list(3);
  list[0].dir = path("a");
  const std::string me = own_client_spec();  // localhost over pmd/shm
  list[0].clients = rules({{me.c_str(), rw_root()}});
  list[1].dir = path("b");
  list[1].clients = rules({{"10.0.0.0/8", rw_root()}});
  list[2].dir = path("c");
  list[2].name = "/c";
  ClientOptions ro = rw_root();
  ro.read_only = true;
  list[2].clients = rules({{"192.168.0.0/16", rw_root()}, {"*", ro}});
  auto table = ExportTable::open(list, state_dir_);
  ASSERT_TRUE(table.is_ok()) << table.status().to_string();
  const Fh3 a = (*table)->exports()[0]->root_fh(), b = (*table)->exports()[1]->root_fh(),
            c = (*table)->exports()[2]->root_fh();
  EXPECT_EQ((*table)->by_path("/c"), (*table)->exports()[2].get());
  PublishedExports pub(*table);
  drc_ = ReplyCache::open(state_dir_->reply_cache_path(), 256).value();
  ServerConfig cfg;
  cfg.write_verf = new_write_verifier();
  server_ = std::make_unique<ServerThread>(pub, drc_.get(), cfg, spec_);
  conn_ = connect(spec_);
  ASSERT_NE(conn_, nullptr);

  EXPECT_EQ(getattr(a).status, Nfs3Stat::kOk);
  CreateRes made = create(a, "new");
  ASSERT_EQ(made.status, Nfs3Stat::kOk);
  EXPECT_EQ(getattr(made.obj.value()).status, Nfs3Stat::kOk);
  // b does not list this client: every call with its handles is refused.
  EXPECT_EQ(getattr(b).status, Nfs3Stat::kAccess);
  EXPECT_EQ(lookup(b, "x").status, Nfs3Stat::kAccess);
  EXPECT_EQ(create(b, "nope").status, Nfs3Stat::kAccess);
  EXPECT_EQ(op<FsinfoRes>(Nfs3Proc::kFsinfo, FsArgs{b}).status, Nfs3Stat::kAccess);
  struct stat st;
  EXPECT_NE(stat(path("b/nope").c_str(), &st), 0);
  EXPECT_GE(server_->nfs->stats().refused.get(), 4u);
  // c gives this client its "*" entry: read-only.
  LookupRes f = lookup(c, "f");
  ASSERT_EQ(f.status, Nfs3Stat::kOk);
  EXPECT_EQ(write(f.obj, 0, Bytes{'X'}, StableHow::kFileSync, false).status, Nfs3Stat::kRofs);
  EXPECT_EQ(create(c, "nope").status, Nfs3Stat::kRofs);
  EXPECT_EQ(file_bytes("c/f"), (Bytes{'a', 'b', 'c'}));
  // Two exports in one call.
  EXPECT_EQ(op<RenameRes>(Nfs3Proc::kRename, RenameArgs{{a, "new"}, {c, "moved"}}).status, Nfs3Stat::kXdev);
  EXPECT_EQ(op<LinkRes>(Nfs3Proc::kLink, LinkArgs{f.obj, {a, "l"}}).status, Nfs3Stat::kXdev);
  EXPECT_EQ(stat(path("c/moved").c_str(), &st), -1);
  // FSINFO and FSSTAT per export; the attributes' fsid is the export's.
  FsinfoRes ia = op<FsinfoRes>(Nfs3Proc::kFsinfo, FsArgs{a});
  FsinfoRes ic = op<FsinfoRes>(Nfs3Proc::kFsinfo, FsArgs{c});
  ASSERT_EQ(ia.status, Nfs3Stat::kOk);
  ASSERT_EQ(ic.status, Nfs3Stat::kOk);
  ASSERT_TRUE(ia.attr && ic.attr);
  ASSERT_EQ(stat(path("a").c_str(), &st), 0);
  EXPECT_EQ(ia.attr->fileid, st.st_ino);
  ASSERT_EQ(stat(path("c").c_str(), &st), 0);
  EXPECT_EQ(ic.attr->fileid, st.st_ino) << "c's root, not a's";
  EXPECT_EQ(op<FsstatRes>(Nfs3Proc::kFsstat, FsArgs{c}).status, Nfs3Stat::kOk);
  // A handle naming no export of the table: stale.
  Fh3 other = a;
  other.data[4] ^= 1;
  EXPECT_EQ(getattr(other).status, Nfs3Stat::kStale);
  server_.reset();  // before `pub`, which it reads
}

// A reload (a new table published, as tern-nfsd does on SIGHUP) over the
// same connection: a client no longer listed gets NFS3ERR_ACCES, a removed
// export's handles NFS3ERR_STALE; the connection stays and needs no
// retransmission; putting the export back makes the same handles good
// again (the same key and id: the same directory and fsid), and the
// server dropped its cached descriptors at each switch.
TEST_F(Nfsd, AReloadTakesEffectOnTheSameConnection) {
  for (const char* d : {"a", "b"}) ASSERT_EQ(mkdir(path(d).c_str(), 0777), 0);
  state_dir_ = StateDir::open(state_).value();
  auto table_of = [&](std::vector<std::pair<const char*, const char*>> exports) {
    std::vector<ExportOptions> list;
    for (const auto& [dir, who] : exports) {
      ExportOptions o;
      o.dir = path(dir);
      o.clients = rules({{who, rw_root()}});
      list.push_back(std::move(o));
    }
    auto t = ExportTable::open(list, state_dir_);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    return t.is_ok() ? *t : nullptr;
  };
  const std::string me = own_client_spec();  // localhost over pmd/shm
  auto first = table_of({{"a", me.c_str()}, {"b", "*"}});
  ASSERT_NE(first, nullptr);
  const Fh3 a = first->exports()[0]->root_fh(), b = first->exports()[1]->root_fh();
  PublishedExports pub(first);
  ServerConfig cfg;
  cfg.write_verf = new_write_verifier();
  server_ = std::make_unique<ServerThread>(pub, nullptr, cfg, spec_);
  conn_ = connect(spec_);
  ASSERT_NE(conn_, nullptr);
  CreateRes f = create(a, "f");
  ASSERT_EQ(f.status, Nfs3Stat::kOk);
  EXPECT_EQ(getattr(b).status, Nfs3Stat::kOk);
  first.reset();  // the server keeps its own reference while it serves it

  pub.publish(table_of({{"a", "10.0.0.0/8"}}));
  Reply r = call(Nfs3Proc::kGetattr, enc(GetattrArgs{*f.obj}));
  EXPECT_EQ(status_of(r), Nfs3Stat::kAccess) << "no longer listed";
  EXPECT_EQ(r.retransmits, 0u);
  EXPECT_EQ(getattr(a).status, Nfs3Stat::kAccess);
  EXPECT_EQ(getattr(b).status, Nfs3Stat::kStale) << "removed";
  EXPECT_EQ(create(b, "g").status, Nfs3Stat::kStale);
  EXPECT_TRUE(conn_->ready());

  pub.publish(table_of({{"a", "*"}, {"b", me.c_str()}}));
  EXPECT_EQ(getattr(*f.obj).status, Nfs3Stat::kOk) << "the same handle, good again";
  EXPECT_EQ(getattr(b).status, Nfs3Stat::kOk);
  EXPECT_EQ(server_->nfs->stats().tables.get(), 2u);
  EXPECT_TRUE(conn_->ready());
  server_->halt();
  EXPECT_EQ(server_->nfs->fd_cache().size(), 2u) << "only what was opened since the last switch";
  server_.reset();  // before `pub`, which it reads
}

// pjdfstest chmod/12.t: a write by someone other than root clears
// set-user-ID, and set-group-ID when group execute is set, as a local write
// and knfsd do; root's write keeps them. (The server writes through its own
// descriptor, which kept CAP_FSETID: before the fix nothing was cleared.)
TEST_F(Nfsd, AWriteByAnotherUserClearsSetuidAndSetgid) {
  start();
  rpc::AuthSys nobody;
  nobody.machine = "c";
  nobody.uid = 65534, nobody.gid = 65534;
  const Bytes x{'x'};
  struct {
    const char* name;
    uint32_t mode, after_other, after_root;
  } cases[] = {
      {"suid", 04777, 0777, 04777},
      {"sgid", 02777, 0777, 02777},
      {"both", 06777, 0777, 06777},
      {"sgid-no-gx", 02767, 02767, 02767},  // no group execute: a mandatory-locking mark, kept
  };
  for (const auto& c : cases) {
    for (bool as_root : {false, true}) {
      const std::string name = std::string(c.name) + (as_root ? "-root" : "-other");
      CreateRes f = create(root_, name, 0644);
      ASSERT_EQ(f.status, Nfs3Stat::kOk);
      ASSERT_EQ(chmod(path(name).c_str(), c.mode), 0);
      const CallOpts o = as_root ? CallOpts{} : CallOpts{.auth = &nobody};
      WriteRes w = write(*f.obj, 0, x, StableHow::kFileSync, false, o);
      ASSERT_EQ(w.status, Nfs3Stat::kOk) << name;
      ASSERT_TRUE(w.wcc.after);
      const uint32_t want = as_root ? c.after_root : c.after_other;
      EXPECT_EQ(w.wcc.after->mode, want) << name;
      struct stat st;
      ASSERT_EQ(stat(path(name).c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 07777, want) << name;
      EXPECT_EQ(file_bytes(name), x) << name;
    }
  }
}

// Garbage gets GARBAGE_ARGS (or, when it happens to decode, an NFS error)
// and nothing else: the server keeps serving.
TEST_F(Nfsd, GarbageGetsRpcAndNfsErrorsOnly) {
  start();
  std::mt19937 rng(99);
  uint64_t garbage_answers = 0;
  for (uint32_t p = 1; p < kNfs3ProcCount; ++p) {
    for (int i = 0; i < 20; ++i) {
      Bytes junk(rng() % 200);
      for (uint8_t& b : junk) b = static_cast<uint8_t>(rng() % 4 == 0 ? rng() : 0);
      Reply r = call(static_cast<Nfs3Proc>(p), junk);
      ASSERT_TRUE(r.status == rpc::CallStatus::kGarbageArgs || r.status == rpc::CallStatus::kOk)
          << nfs3_proc_name(static_cast<Nfs3Proc>(p)) << ": " << rpc::call_status_name(r.status);
      if (r.status == rpc::CallStatus::kGarbageArgs) ++garbage_answers;
      else ASSERT_GE(r.results.size(), 4u);
    }
    // Truncated valid arguments.
    EXPECT_EQ(call(static_cast<Nfs3Proc>(p), Bytes{0, 0, 0}).status, rpc::CallStatus::kGarbageArgs);
  }
  EXPECT_GT(garbage_answers, 100u);
  EXPECT_EQ(server_->nfs->stats().garbage.get(), garbage_answers + kNfs3ProcCount - 1);
  EXPECT_EQ(call(static_cast<Nfs3Proc>(22), {}).status, rpc::CallStatus::kProcUnavail);
  EXPECT_EQ(call(Nfs3Proc::kNull, {}, CallOpts{.vers = 2}).status, rpc::CallStatus::kProgMismatch);
  EXPECT_EQ(call(Nfs3Proc::kNull, {}, CallOpts{.vers = 4}).status, rpc::CallStatus::kProgMismatch);
  // A WRITE whose read chunk is not where its data goes.
  CreateRes c = create(root_, "w");
  auto* buf = static_cast<uint8_t*>(cli_->alloc(4096));
  WriteArgs wa{*c.obj, 0, 4096, StableHow::kUnstable, {}, false};
  Bytes args(256);
  xdr::XdrWriter w(args);
  encode_write_chunked(w, wa);
  w.put_u32(0);  // a word more: the chunk's position (the end) is past where the data goes
  args.resize(w.bytes_written());
  EXPECT_EQ(call(Nfs3Proc::kWrite, args, CallOpts{.bulk_send = {buf, 4096}}).status, rpc::CallStatus::kGarbageArgs);
  EXPECT_EQ(file_bytes("w").size(), 0u);
  // Still serving.
  EXPECT_EQ(getattr(root_).status, Nfs3Stat::kOk);
  EXPECT_TRUE(conn_->ready());
}

// Handles stay valid across a restart (the key is in the state directory);
// the write verifier changes, so that a client sends its uncommitted writes
// again.
TEST_F(Nfsd, HandlesSurviveARestartAndTheWriteVerifierChanges) {
  start();
  CreateRes c = create(root_, "kept");
  ASSERT_EQ(c.status, Nfs3Stat::kOk);
  WriteRes w = write(*c.obj, 0, Bytes{1, 2, 3}, StableHow::kUnstable, false);
  ASSERT_EQ(w.status, Nfs3Stat::kOk);
  restart();
  GetattrRes g = getattr(*c.obj);
  ASSERT_EQ(g.status, Nfs3Stat::kOk);
  EXPECT_EQ(g.attr.size, 3u);
  CommitRes cm = op<CommitRes>(Nfs3Proc::kCommit, CommitArgs{*c.obj, 0, 0});
  ASSERT_EQ(cm.status, Nfs3Stat::kOk);
  EXPECT_NE(cm.verf, w.verf);
}

// The server dies after MKDIR's reply is recorded and before it is sent;
// the client reconnects to the next server and sends the call again with
// its xid; the next server finds the reply in the file its predecessor
// left and answers with it -- the directory is made once, and the client
// sees success. Without the reply cache the same retransmission fails with
// EXIST: the test guards that difference.
TEST_F(Nfsd, ARetransmissionAfterARestartIsAnsweredFromTheReplyCache) {
  for (bool with_drc : {true, false}) {
    SCOPED_TRACE(with_drc ? "with the reply cache" : "without it");
    ServerConfig cfg;
    cfg.crash_after_proc = static_cast<int>(Nfs3Proc::kMkdir);
    cfg.crash_after_n = 1;
    std::atomic<bool> died{false};
    cfg.on_crash = [](void* ctx) { static_cast<std::atomic<bool>*>(ctx)->store(true); };
    cfg.on_crash_ctx = &died;
    const std::string name = with_drc ? "made-once" : "made-twice";
    start({}, true, cfg, true);
    MkdirArgs a;
    a.where = {root_, name};
    a.attr.set_mode = true, a.attr.mode = 0755;
    Reply r;
    start_call(Nfs3Proc::kMkdir, enc(a), {}, &r);
    ASSERT_TRUE(wait([&] { return died.load(); }));
    struct stat st;
    ASSERT_EQ(stat(path(name).c_str(), &st), 0) << "the first copy ran";
    EXPECT_FALSE(r.done);
    // The next server: same address, same state directory.
    stop_instance();
    start({}, true, {}, with_drc);
    ASSERT_TRUE(wait([&] { return r.done; }, 20000)) << "the client never got an answer";
    ASSERT_EQ(r.status, rpc::CallStatus::kOk) << rpc::call_status_name(r.status);
    EXPECT_GE(r.retransmits, 1u) << "sent again to the next server";
    CreateRes res;
    ASSERT_TRUE(decode(r.results, &res));
    if (with_drc) {
      EXPECT_EQ(res.status, Nfs3Stat::kOk);
      ASSERT_TRUE(res.obj);
      EXPECT_EQ(getattr(*res.obj).status, Nfs3Stat::kOk);
      EXPECT_EQ(server_->nfs->stats().drc_replays.get(), 1u);
      EXPECT_EQ(drc_->hits_from_file(), 1u);
    } else {
      EXPECT_EQ(res.status, Nfs3Stat::kExist) << "run twice";
    }
    server_.reset();
  }
}

}  // namespace
}  // namespace tern::nfsd::test
