// File data: READ, WRITE, COMMIT, READLINK.
//
// READ reads straight into the buffer the engine then RDMA-writes into the
// client's write chunk (ServerCall::bulk_buffer), and answers with the
// reduced data item; a READ that offered no chunk gets its data inline.
// WRITE writes from the read chunk the engine pulled (or the inline data).
// FILE_SYNC and DATA_SYNC writes are synchronous (RWF_SYNC, RWF_DSYNC);
// UNSTABLE ones are left to COMMIT, which fsyncs.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "nfs/nfs3_args.h"
#include "nfsd/nfs3_op.h"

namespace tern::nfsd {

using namespace tern::nfs;
using namespace tern::nfs::nfs3;

namespace {

// Not a regular file: what READ and WRITE say about it.
Nfs3Stat not_regular(const struct stat& st) { return S_ISDIR(st.st_mode) ? Nfs3Stat::kIsdir : Nfs3Stat::kInval; }

}  // namespace

bool Nfs3Server::proc_read(Op& op) {
  ReadArgs a;
  if (!decode(op.call->args(), &a)) return false;
  ReadRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.file, &e, &st);
  const bool have = r.status == Nfs3Stat::kOk;
  if (r.status == Nfs3Stat::kOk && !S_ISREG(st.st_mode)) r.status = not_regular(st);
  // Owner override: the owner reads its file whatever the mode (nfsd's
  // NFSD_MAY_OWNER_OVERRIDE); others need read permission, or execute (a
  // client reads a program it runs).
  if (r.status == Nfs3Stat::kOk && st.st_uid != op.cred.uid && !may(op, st, 4) && !may(op, st, 1))
    r.status = Nfs3Stat::kAccess;
  int fd = -1;
  if (r.status == Nfs3Stat::kOk && (fd = io_fd(e, false)) < 0) r.status = nfs3_stat_from_errno(errno);
  if (r.status != Nfs3Stat::kOk) {
    if (have) r.attr = fattr(op, st);
    encode(op.w, r);
    return true;
  }
  const bool chunk = op.call->write_chunk_count() > 0;
  uint32_t count = std::min(a.count, cfg_.rtmax);
  std::span<uint8_t> buf;
  if (chunk) {
    count = std::min(count, op.call->write_chunk_capacity(0));
    buf = op.call->bulk_buffer(count);
    if (buf.size() < count) count = static_cast<uint32_t>(buf.size());
  } else {
    // Inline: the results must fit what the client receives; a client that
    // asks for more than that without a chunk gets RDMA_ERROR from the engine.
    count = std::min<uint32_t>(count, max_results_ - 512);
    if (inline_.size() < count) inline_.resize(count);
    buf = std::span<uint8_t>(inline_.data(), count);
  }
  size_t got = 0;
  if (a.offset < static_cast<uint64_t>(INT64_MAX)) {
    while (got < count) {
      ssize_t n = pread(fd, buf.data() + got, count - got, static_cast<off_t>(a.offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        r.status = nfs3_stat_from_errno(errno);
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
  }
  struct stat after;
  if (fstat(e->path_fd, &after) == 0) r.attr = fattr(op, after);
  if (r.status == Nfs3Stat::kOk) {
    r.count = static_cast<uint32_t>(got);
    r.eof = a.offset + got >= static_cast<uint64_t>(after.st_size);
    st_.read_bytes.add(got);
    if (chunk) {
      r.data_in_chunk = true;
      op.bulk = std::span<const uint8_t>(buf.data(), got);
      st_.read_chunk_replies.add();
    } else {
      r.data = std::span<const uint8_t>(buf.data(), got);
    }
  }
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_write(Op& op) {
  WriteArgs a;
  if (!decode(op.call->args(), op.call->read_chunks(), &a)) return false;
  WriteRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.file, &e, &st);
  if (r.status != Nfs3Stat::kOk) {
    encode(op.w, r);
    return true;
  }
  r.wcc.before = wcc_attr(st);
  int fd = -1;
  if (op.read_only) r.status = Nfs3Stat::kRofs;
  else if (!S_ISREG(st.st_mode)) r.status = not_regular(st);
  else if (st.st_uid != op.cred.uid && !may(op, st, 2)) r.status = Nfs3Stat::kAccess;  // owner override
  else if (a.offset > static_cast<uint64_t>(INT64_MAX) - a.data.size()) r.status = Nfs3Stat::kFbig;
  else if ((fd = io_fd(e, true)) < 0) r.status = nfs3_stat_from_errno(errno);
  if (r.status == Nfs3Stat::kOk && op.cred.uid != 0) {
    // A write by anyone but root takes set-user-ID away, and set-group-ID
    // where it means setgid execution (group execute set), as a local write
    // does (POSIX write(); knfsd's writes run without CAP_FSETID for such a
    // caller). The data goes in through the server's own descriptor, which
    // keeps CAP_FSETID, so the kernel would not do it: do it here, first,
    // as the kernel does before the data lands.
    mode_t kill = st.st_mode & S_ISUID;
    if ((st.st_mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)) kill |= S_ISGID;
    if (kill != 0 && fchmod(fd, st.st_mode & 07777 & ~kill) != 0) r.status = nfs3_stat_from_errno(errno);
  }
  if (r.status == Nfs3Stat::kOk) {
    const int flags = a.stable == StableHow::kFileSync ? RWF_SYNC : a.stable == StableHow::kDataSync ? RWF_DSYNC : 0;
    size_t done = 0;
    while (done < a.data.size()) {
      iovec iov{const_cast<uint8_t*>(a.data.data() + done), a.data.size() - done};
      ssize_t n = pwritev2(fd, &iov, 1, static_cast<off_t>(a.offset + done), flags);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // Some written: say so (the client sends the rest again).
        if (done == 0) r.status = nfs3_stat_from_errno(n < 0 ? errno : EIO);
        break;
      }
      done += static_cast<size_t>(n);
    }
    r.count = static_cast<uint32_t>(done);
    r.committed = a.stable;
    r.verf = cfg_.write_verf;
    st_.write_bytes.add(done);
  }
  struct stat after;
  if (fstat(e->path_fd, &after) == 0) r.wcc.after = fattr(op, after);
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_commit(Op& op) {
  CommitArgs a;
  if (!decode(op.call->args(), &a)) return false;
  CommitRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  r.status = resolve_stat(op, a.file, &e, &st);
  if (r.status == Nfs3Stat::kOk) {
    r.wcc.before = wcc_attr(st);
    if (!S_ISREG(st.st_mode)) {
      r.status = not_regular(st);
    } else {
      int fd = io_fd(e, false);
      if (fd < 0 || fsync(fd) != 0) r.status = nfs3_stat_from_errno(errno);
    }
    r.verf = cfg_.write_verf;
    struct stat after;
    if (fstat(e->path_fd, &after) == 0) r.wcc.after = fattr(op, after);
  }
  encode(op.w, r);
  return true;
}

bool Nfs3Server::proc_readlink(Op& op) {
  ReadlinkArgs a;
  if (!decode(op.call->args(), &a)) return false;
  ReadlinkRes r;
  FdCache::Entry* e = nullptr;
  struct stat st;
  char target[kNfs3MaxPath + 1];
  r.status = resolve_stat(op, a.link, &e, &st);
  if (r.status == Nfs3Stat::kOk) {
    r.attr = fattr(op, st);
    if (!S_ISLNK(st.st_mode)) {
      r.status = Nfs3Stat::kInval;
    } else {
      ssize_t n = readlinkat(e->path_fd, "", target, sizeof target);
      if (n < 0) r.status = nfs3_stat_from_errno(errno);
      else if (static_cast<size_t>(n) > kNfs3MaxPath) r.status = Nfs3Stat::kNametoolong;
      else r.target = std::string_view(target, static_cast<size_t>(n));
    }
  }
  // The path through the client's write chunk when it offered one (the
  // reduced item inline), as READ's data.
  if (r.status == Nfs3Stat::kOk && op.call->write_chunk_count() > 0 &&
      op.call->write_chunk_capacity(0) >= r.target.size()) {
    std::span<uint8_t> buf = op.call->bulk_buffer(static_cast<uint32_t>(r.target.size()));
    if (buf.size() == r.target.size()) {
      if (!buf.empty()) std::memcpy(buf.data(), r.target.data(), buf.size());
      op.bulk = buf;
      r.data_in_chunk = true;
    }
  }
  encode(op.w, r);
  return true;
}

}  // namespace tern::nfsd
