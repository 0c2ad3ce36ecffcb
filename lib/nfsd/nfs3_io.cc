// File data: READ, WRITE, COMMIT, READLINK.
//
// READ reads straight into the buffer the engine then RDMA-writes into the
// client's write chunk (ServerCall::bulk_buffer), and answers with the
// reduced data item; a READ that offered no chunk gets its data inline.
// WRITE writes from the read chunk the engine pulled (or the inline data).
//
// What waits for the device goes through the StorageQueue (storage_queue.h)
// and is answered from its completion: a READ the page cache cannot serve
// at once (it is tried with RWF_NOWAIT first, so cached data costs no
// hand-off; on tmpfs, which refuses RWF_NOWAIT, it is read at once), every WRITE, COMMIT's fsync. A FILE_SYNC or DATA_SYNC WRITE is
// written like an UNSTABLE one and then answered from its file's next sync,
// shared with the file's other stable WRITEs and COMMITs (the group commit,
// sync_batch.h): answered only once the data is durable. Every check
// (the export, the caller's squashed credential against the mode bits,
// read-only exports, set-user-ID removal) runs before anything is
// submitted, exactly as for a synchronous call: a denied call never
// reaches the queue.
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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

bool Nfs3Server::memory_backed(dev_t dev, int fd) {
  for (const auto& [d, mem] : memory_devs_)
    if (d == dev) return mem;
  struct statfs sf;
  const bool mem = fstatfs(fd, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
  // A handful of file systems per export table; past the bound, asked each time.
  if (memory_devs_.size() < 16) memory_devs_.emplace_back(dev, mem);
  return mem;
}

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
  if (a.offset < static_cast<uint64_t>(INT64_MAX) && count > 0) {
    // The page cache first, without waiting: data it holds is answered now.
    bool rest = true;
    if (cfg_.read_nowait && io_->asynchronous()) {
      iovec iov{buf.data(), count};
      ssize_t n;
      do n = preadv2(fd, &iov, 1, static_cast<off_t>(a.offset), RWF_NOWAIT);
      while (n < 0 && errno == EINTR);
      if (n > 0) got = static_cast<size_t>(n);
      if (n == static_cast<ssize_t>(count) || n == 0) {
        rest = false;  // all of it, or the end of the file
      } else if (n > 0) {
        // Part of it: the rest is past the end, or not cached.
        struct stat now;
        if (fstat(fd, &now) == 0 && a.offset + got >= static_cast<uint64_t>(now.st_size)) rest = false;
      } else if (errno == EOPNOTSUPP && memory_backed(st.st_dev, fd)) {
        // tmpfs cannot say whether a read would wait (RWF_NOWAIT is
        // EOPNOTSUPP there, on 6.18 too), but its data is memory, never a
        // device's (short of swap): read here, as before the queue, not
        // through an io_uring worker and a later pass (2x the instructions
        // of a cached READ; docs/nfs-gateway.md, "Cached READs").
        rest = false;
        while (got < count) {
          ssize_t m = pread(fd, buf.data() + got, count - got, static_cast<off_t>(a.offset + got));
          if (m < 0 && errno == EINTR) continue;
          if (m < 0) {
            r.status = nfs3_stat_from_errno(errno);
            break;
          }
          if (m == 0) break;
          got += static_cast<size_t>(m);
        }
      } else if (errno != EAGAIN && errno != EOPNOTSUPP) {
        r.status = nfs3_stat_from_errno(errno);
        rest = false;
      }
      if (!rest && r.status == Nfs3Stat::kOk) st_.read_nowait.add();
    }
    if (rest) {
      Pending* p = defer(op);
      p->offset = a.offset;
      p->chunk = chunk;
      p->have = static_cast<uint32_t>(got);
      if (!chunk) {
        // inline_ is the next call's: this one keeps its own.
        p->inl.assign(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(got));
        p->inl.resize(count);
        p->buf = p->inl.data();
      } else {
        p->buf = buf.data();
      }
      submit_io(op, p, StorageKind::kRead, fd, a.offset + got, p->buf + got, count - got, 0);
      return true;
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
  if (r.status == Nfs3Stat::kOk && !a.data.empty() &&
      (a.stable != StableHow::kUnstable || !cfg_.unstable_inline)) {
    // A stable WRITE with the group commit (sync_batch.h) is written as an
    // UNSTABLE one is, then waits for its file's next sync; without it,
    // the write itself syncs.
    const bool batched = a.stable != StableHow::kUnstable && syncs_ != nullptr;
    const int flags = batched                              ? 0
                      : a.stable == StableHow::kFileSync ? RWF_SYNC
                      : a.stable == StableHow::kDataSync ? RWF_DSYNC
                                                         : 0;
    // An UNSTABLE write lands in the page cache, but even that can wait:
    // for dirty-page throttling, a block allocation's metadata read, the
    // inode lock another write holds. Where the file system can say so
    // (RWF_NOWAIT; ext4's buffered writes cannot, and say EOPNOTSUPP, after
    // which it is not tried again), a write that would not wait is done at
    // once; every other goes through the queue like a stable one.
    ssize_t n = -1;
    if (a.stable == StableHow::kUnstable && write_nowait_) {
      iovec iov{const_cast<uint8_t*>(a.data.data()), a.data.size()};
      n = pwritev2(fd, &iov, 1, static_cast<off_t>(a.offset), RWF_NOWAIT);
      if (n < 0 && errno == EOPNOTSUPP) write_nowait_ = false;
    }
    if (n > 0) {
      // Some or all of it: a short write is said as such (the client sends the rest again).
      r.count = static_cast<uint32_t>(n);
      r.committed = a.stable;
      r.verf = cfg_.write_verf;
      st_.write_nowait.add();
      st_.write_bytes.add(static_cast<uint64_t>(n));
    } else {
      // Durable before the reply for FILE_SYNC and DATA_SYNC; in the page
      // cache before the reply for UNSTABLE, so that a COMMIT covers every
      // WRITE answered before it. The completion answers it.
      Pending* p = defer(op);
      p->stable = a.stable;
      p->before = *r.wcc.before;
      p->offset = a.offset;
      if (batched) {
        p->batched = true;
        p->file = SyncKey{st.st_dev, st.st_ino};
      }
      submit_io(op, p, StorageKind::kWrite, fd, a.offset, const_cast<uint8_t*>(a.data.data()), a.data.size(), flags);
      return true;
    }
  } else if (r.status == Nfs3Stat::kOk) {
    // Nothing to write; or UNSTABLE on the engine's thread, as before
    // (ServerConfig::unstable_inline: a benchmark's baseline).
    size_t done = 0;
    while (done < a.data.size()) {
      iovec iov{const_cast<uint8_t*>(a.data.data() + done), a.data.size() - done};
      ssize_t n = pwritev2(fd, &iov, 1, static_cast<off_t>(a.offset + done), 0);
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
    } else if (int fd = io_fd(e, false); fd < 0) {
      r.status = nfs3_stat_from_errno(errno);
    } else if (syncs_ != nullptr) {
      // Everything written before it (answered UNSTABLE WRITEs are in the
      // page cache) is durable once a sync of the file that starts after
      // now completes: the file's next one, shared with its stable WRITEs
      // and other COMMITs (sync_batch.h). It joins once its reservation
      // went through its peer's bound (finish_io), so that a client's
      // COMMITs start syncs no faster than its share allows; then the
      // answer.
      Pending* p = defer(op);
      p->before = *r.wcc.before;
      p->batched = true;
      p->file = SyncKey{st.st_dev, st.st_ino};
      submit_io(op, p, StorageKind::kReserve, fd, 0, nullptr, 0, 0);
      return true;
    } else {
      // The same with its own fsync.
      Pending* p = defer(op);
      p->before = *r.wcc.before;
      submit_io(op, p, StorageKind::kFsync, fd, 0, nullptr, 0, 0);
      return true;
    }
    r.verf = cfg_.write_verf;
    struct stat after;
    if (fstat(e->path_fd, &after) == 0) r.wcc.after = fattr(op, after);
  }
  encode(op.w, r);
  return true;
}

bool Nfs3Server::finish_io(Pending& p, const StorageReq& q, int64_t res) {
  const bool commit = p.proc == Nfs3Proc::kCommit;
  if (p.batched && (commit ? res == 0 : res > 0)) {
    // A stable WRITE's data is in the page cache (a COMMIT's reservation
    // went through): it joins its file's next sync and is answered from
    // that (finish_synced). A failed write is answered now.
    if (!commit) p.written = static_cast<uint32_t>(res);
    const SyncBatches::Waiter w{&Nfs3Server::on_synced, &p};
    const int err = syncs_->join(p.file, p.call->peer_id(), q.fd, commit || p.stable == StableHow::kFileSync, w);
    if (err == 0) return false;
    res = -err;
  }
  Op op(p.call, last_addr_, res_);
  op.exp = p.exp;
  struct stat after;
  const bool have_after = q.fd >= 0 && fstat(q.fd, &after) == 0;
  switch (p.proc) {
    case Nfs3Proc::kRead: {
      ReadRes r;
      // An error after part of it was read: the part (the client asks again).
      const size_t got = p.have + (res > 0 ? static_cast<size_t>(res) : 0);
      if (res < 0 && p.have == 0) r.status = nfs3_stat_from_errno(static_cast<int>(-res));
      if (have_after) r.attr = fattr(op, after);
      if (r.status == Nfs3Stat::kOk) {
        r.count = static_cast<uint32_t>(got);
        r.eof = have_after && p.offset + got >= static_cast<uint64_t>(after.st_size);
        st_.read_bytes.add(got);
        if (p.chunk) {
          r.data_in_chunk = true;
          op.bulk = std::span<const uint8_t>(p.buf, got);
          st_.read_chunk_replies.add();
        } else {
          r.data = std::span<const uint8_t>(p.buf, got);
        }
      }
      encode(op.w, r);
      break;
    }
    case Nfs3Proc::kWrite: {
      WriteRes r;
      r.wcc.before = p.before;
      if (res <= 0) {
        r.status = nfs3_stat_from_errno(res < 0 ? static_cast<int>(-res) : EIO);
        // RWF_SYNC's sync may have taken a writeback error (once per open
        // file): as for COMMIT below.
        if (res < 0 && p.stable != StableHow::kUnstable && !p.batched) cfg_.write_verf = new_write_verifier();
      } else {
        // A short write is said as such: the client sends the rest again.
        r.count = static_cast<uint32_t>(res);
        r.committed = p.stable;
        r.verf = cfg_.write_verf;
        st_.write_bytes.add(static_cast<uint64_t>(res));
      }
      if (have_after) r.wcc.after = fattr(op, after);
      encode(op.w, r);
      break;
    }
    default: {  // COMMIT
      CommitRes r;
      r.wcc.before = p.before;
      if (res < 0) {
        r.status = nfs3_stat_from_errno(static_cast<int>(-res));
        // The kernel says a writeback error once per open file: a later
        // COMMIT would succeed over the lost data. Clients resend what
        // they wrote UNSTABLE when the verifier changes.
        cfg_.write_verf = new_write_verifier();
      }
      r.verf = cfg_.write_verf;
      if (have_after) r.wcc.after = fattr(op, after);
      encode(op.w, r);
      break;
    }
  }
  reply_to(p.call, p.cached, p.key, op.w, op.bulk);
  return true;
}

void Nfs3Server::finish_synced(Pending& p, int fd, int err) {
  Op op(p.call, last_addr_, res_);
  op.exp = p.exp;
  // The kernel reports a writeback error once per open file, and this sync
  // took it: a later COMMIT of UNSTABLE data lost with it would succeed.
  // A new verifier makes clients send their uncommitted WRITEs again.
  if (err != 0) cfg_.write_verf = new_write_verifier();
  struct stat after;
  const bool have_after = fd >= 0 && fstat(fd, &after) == 0;
  if (p.proc == Nfs3Proc::kWrite) {
    WriteRes r;
    r.wcc.before = p.before;
    if (err != 0) {
      r.status = nfs3_stat_from_errno(err);
    } else {
      r.count = p.written;  // a short write is said as such
      r.committed = p.stable;
      r.verf = cfg_.write_verf;
      st_.write_bytes.add(p.written);
    }
    if (have_after) r.wcc.after = fattr(op, after);
    encode(op.w, r);
  } else {
    CommitRes r;
    r.wcc.before = p.before;
    if (err != 0) r.status = nfs3_stat_from_errno(err);
    r.verf = cfg_.write_verf;
    if (have_after) r.wcc.after = fattr(op, after);
    encode(op.w, r);
  }
  reply_to(p.call, p.cached, p.key, op.w, op.bulk);
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
