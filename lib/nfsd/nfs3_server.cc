// Nfs3Server: the reply cache, and what every procedure shares (resolving
// handles, attributes, permissions, acting as the caller). The procedure
// table and the dispatch through it are in nfs3_procs.cc, the procedures
// themselves in nfs3_attr.cc, nfs3_io.cc, nfs3_names.cc and nfs3_dir.cc.
#include "nfsd/nfs3_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "base/log.h"
#include "nfs/nfs_program.h"
#include "nfsd/nfs3_op.h"

namespace tern::nfsd {

using namespace tern::nfs;

namespace {

// The results' buffer: the largest READDIR(PLUS) reply (FSINFO's dtpref is
// far below) or inline READ, with room for the rest of the reply.
constexpr uint32_t kMaxResults = 256u << 10;

}  // namespace

Verf3 new_write_verifier() {
  Verf3 v;
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
  uint32_t rnd = 0;
  if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof rnd)) rnd = static_cast<uint32_t>(getpid());
  const uint64_t x = ns ^ (uint64_t{rnd} << 32);
  std::memcpy(v.data, &x, sizeof x);
  return v;
}

Nfs3Server::Nfs3Server(const Export& exp, ReplyCache* drc, const ServerConfig& cfg)
    : table_(ExportTable::of_one(exp)), drc_(drc), cfg_(cfg), fds_(cfg.fd_cache),
      io_(StorageQueue::create(cfg.storage)), callers_(std::make_unique<CallerPool>(cfg.callers)),
      personas_(std::make_unique<PersonalityCache>(cfg.personalities, &Nfs3Server::unregister_personality, this)) {
  res_.resize(kMaxResults);
  dents_.resize(64u << 10);
  max_results_ = kMaxResults;
  if (cfg_.group_commit && io_->asynchronous()) syncs_ = std::make_unique<SyncBatches>(*io_);
}

Nfs3Server::Nfs3Server(const PublishedExports& pub, ReplyCache* drc, const ServerConfig& cfg)
    : pub_(&pub), drc_(drc), cfg_(cfg), fds_(cfg.fd_cache), io_(StorageQueue::create(cfg.storage)),
      callers_(std::make_unique<CallerPool>(cfg.callers)),
      personas_(std::make_unique<PersonalityCache>(cfg.personalities, &Nfs3Server::unregister_personality, this)) {
  table_ = pub.current(&gen_);
  res_.resize(kMaxResults);
  dents_.resize(64u << 10);
  max_results_ = kMaxResults;
  if (cfg_.group_commit && io_->asynchronous()) syncs_ = std::make_unique<SyncBatches>(*io_);
}

Nfs3Server::~Nfs3Server() {
  // Their completions answer calls through this server: before its members
  // go. A follow-up of either may start work on the other (a caller op on
  // the ring, then a SETATTR job on the pool), and a completion may make a
  // sync due (sync_batch.h), whose completion may make the next one due:
  // until nothing is left.
  for (;;) {
    callers_->drain();
    io_->drain();
    if (syncs_ != nullptr && syncs_->flush() > 0) continue;
    if (callers_->idle() && io_->idle()) break;
  }
}

void Nfs3Server::unregister_personality(void* ctx, int id) {
  static_cast<Nfs3Server*>(ctx)->io_->unregister_personality(id);
}

void Nfs3Server::follow_table() {
  if (pub_ == nullptr || pub_->generation() == gen_) return;
  table_ = pub_->current(&gen_);
  // Cached descriptors were opened for handles the old table accepted; a
  // removed or re-pointed export's must not outlive it. Reloads are rare:
  // dropping them all costs one open_by_handle_at per handle used next.
  fds_.clear();
  st_.tables.add();
}

void Nfs3Server::attach(rpc::Engine& eng) {
  for (uint32_t p = 0; p < kNfs3ProcCount; ++p) eng.handle(kNfsProgram, kNfsV3, p, &Nfs3Server::on_call, this);
  // Storage completions are reaped in the engine's own poll(), right after
  // the calls of that pass were served (their submissions go out together).
  if (io_->wake_fd() >= 0) eng.add_poller(&Nfs3Server::poll_storage, this, io_->wake_fd());
  eng.add_poller(&Nfs3Server::poll_callers, this, callers_->wake_fd());
}

int Nfs3Server::poll_storage(void* ctx) {
  auto* s = static_cast<Nfs3Server*>(ctx);
  // The engine runs this on every pass, most of them with no storage work
  // (a cached READ is answered at once and takes several passes): two
  // inline tests then, not the calls below.
  if (!s->io_->busy() && (s->syncs_ == nullptr || !s->syncs_->has_due())) return 0;
  int n = s->io_->poll();
  // The syncs this pass made due (the WRITEs it delivered, the COMMITs the
  // engine handled before this poller ran, files whose sync completed):
  // started now, submitted by a second poll of the queue.
  if (s->syncs_ != nullptr && s->syncs_->flush() > 0) n += 1 + s->io_->poll();
  return n;
}

int Nfs3Server::poll_callers(void* ctx) {
  CallerPool& p = *static_cast<Nfs3Server*>(ctx)->callers_;
  return p.busy() ? p.poll() : 0;  // inline when idle, as poll_storage
}

void Nfs3Server::on_call(void* ctx, rpc::ServerCall* c) { static_cast<Nfs3Server*>(ctx)->serve(c); }

void Nfs3Server::tick() {
  follow_table();
  st_.swept.add(fds_.sweep());
}

void Nfs3Server::reply_to(rpc::ServerCall* c, bool cached, const ReplyKey& key, const xdr::XdrWriter& w,
                          std::span<const uint8_t> bulk) {
  const auto proc = static_cast<Nfs3Proc>(c->proc());
  if (!w.ok()) {
    // Results larger than the buffer: a bound above was missed. Nothing
    // sensible to send but SYSTEM_ERR.
    TERN_LOG(kError, "nfsd", "%s results did not fit %u bytes", nfs3_proc_name(proc), max_results_);
    if (cached) drc_->forget(key);
    (void)c->reply_error(rpc::AcceptStat::kSystemErr);
    return;
  }
  std::span<const uint8_t> results = w.written();
  if (results.size() >= 4 && (results[0] | results[1] | results[2] | results[3]) != 0) st_.errors.add();
  if (cached) {
    drc_->done(key, results);
    if (cfg_.crash_after_proc == static_cast<int>(c->proc()) && ++crash_count_ == cfg_.crash_after_n) {
      TERN_LOG(kWarn, "nfsd", "--test-crash-after %s:%u: killing this process before the reply goes out",
               nfs3_proc_name(proc), crash_count_);
      if (cfg_.on_crash == nullptr) raise(SIGKILL);
      cfg_.on_crash(cfg_.on_crash_ctx);
      c->drop();
      return;
    }
  }
  (void)c->reply(results, bulk);
}

Nfs3Server::Pending* Nfs3Server::defer(Op& op) {
  auto* p = new Pending;
  p->srv = this;
  p->call = op.call;
  p->cached = op.cached;
  if (op.cached) p->key = std::move(*op.key);
  p->table = table_;
  p->exp = op.exp;
  p->proc = static_cast<Nfs3Proc>(op.call->proc());
  op.pending = true;
  return p;
}

void Nfs3Server::submit_io(Op& op, Pending* p, StorageKind kind, int fd, uint64_t off, uint8_t* buf, size_t len,
                           int flags) {
  StorageReq r;
  r.kind = kind;
  // The operation's own descriptor: the cache may close fd before it runs.
  r.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  r.offset = off;
  r.buf = buf;
  r.len = len;
  r.rw_flags = flags;
  r.done = &Nfs3Server::on_io;
  r.ctx = p;
  st_.storage_deferred.add();
  if (r.fd < 0) {  // out of descriptors: answered now, with what that means
    on_io(p, r, -errno);
    return;
  }
  io_->submit(op.call->peer_id(), r);
}

Nfs3Server::Pending* Nfs3Server::defer_as_caller(Op& op, Then then) {
  Pending* p = op.pend != nullptr ? op.pend : defer(op);
  op.pend = p;
  op.pending = true;
  p->cred = op.cred;
  p->read_only = op.read_only;
  p->then = std::move(then);
  return p;
}

void Nfs3Server::as_caller(Op& op, std::function<Nfs3Stat()> job, Then then) {
  Pending* p = defer_as_caller(op, std::move(then));
  st_.caller_deferred.add();
  callers_->submit(p->call->peer_id(), CallerJob{op.cred, std::move(job), &Nfs3Server::on_caller, p});
}

void Nfs3Server::as_caller_op(Op& op, std::shared_ptr<CallerOp> c, Then then) {
  const bool ring = cfg_.caller_ring && !personas_off_ && io_->runs_caller_ops();
  if (const int id = ring ? personas_->acquire(op.cred) : 0; id > 0) {
    Pending* p = defer_as_caller(op, std::move(then));
    p->cop = c;
    p->personality = id;
    StorageReq r;
    r.kind = StorageKind::kCallerOp;
    r.prep = [](const void* o, void* sqe) { static_cast<const CallerOp*>(o)->prep(sqe); };
    r.op = c.get();
    r.personality = static_cast<uint16_t>(id);
    r.done = &Nfs3Server::on_caller_op;
    r.ctx = p;
    st_.caller_ring.add();
    io_->submit(p->call->peer_id(), r);
    return;
  }
  // The pool, acting as the caller; there, the same identity registers the
  // personality its next calls use (only once that worker's switch to it
  // succeeded: the job runs only then).
  auto reg = std::make_shared<int>(0);
  StorageQueue* q = ring ? io_.get() : nullptr;
  as_caller(
      op,
      [c, reg, q] {
        const int rc = c->run_now();
        const Nfs3Stat s = rc == 0 ? Nfs3Stat::kOk : nfs3_stat_from_errno(-rc);
        if (q != nullptr) *reg = q->register_personality();
        return s;
      },
      [this, reg, c, then = std::move(then)](Op& op, Nfs3Stat s) {
        if (*reg > 0) {
          personas_->add(op.cred, *reg);
          st_.personalities.set(personas_->size());
        } else if (*reg < 0 && !personas_off_) {
          // Fail-closed: this identity's calls (and everyone's) stay on the
          // pool, acting as the caller there.
          personas_off_ = true;
          st_.personality_failed.add();
          TERN_LOG(kWarn, "nfsd", "io_uring_register_personality: %s; metadata calls stay on the caller pool",
                   strerror(-*reg));
        }
        then(op, s);
      });
}

void Nfs3Server::on_caller_op(void* ctx, const StorageReq& r, int64_t res) {
  (void)r;
  auto* p = static_cast<Pending*>(ctx);
  Nfs3Server* srv = p->srv;
  srv->personas_->release(std::exchange(p->personality, 0));
  p->cop.reset();
  srv->finish_caller(p, res < 0 ? nfs3_stat_from_errno(static_cast<int>(-res)) : Nfs3Stat::kOk);
}

void Nfs3Server::on_caller(void* ctx, Nfs3Stat s) {
  auto* p = static_cast<Pending*>(ctx);
  p->srv->finish_caller(p, s);
}

void Nfs3Server::finish_caller(Pending* p, Nfs3Stat s) {
  Op op(p->call, last_addr_, res_);
  op.exp = p->exp;
  op.read_only = p->read_only;
  op.cred = p->cred;
  op.cached = p->cached;
  op.key = &p->key;
  op.pend = p;
  Then k = std::move(p->then);
  k(op, s);
  if (op.pending) return;  // it went on in another job
  // The reply cache records it before the reply leaves (reply_to).
  reply_to(p->call, p->cached, p->key, op.w, op.bulk);
  delete p;
}

void Nfs3Server::on_io(void* ctx, const StorageReq& r, int64_t res) {
  auto* p = static_cast<Pending*>(ctx);
  if (p->srv->finish_io(*p, r, res)) delete p;
}

void Nfs3Server::on_synced(void* ctx, int fd, int err) {
  auto* p = static_cast<Pending*>(ctx);
  p->srv->finish_synced(*p, fd, err);
  delete p;
}

// ---------------------------------------------------------------- helpers

Nfs3Stat Nfs3Server::resolve(Op& op, const Fh3& fh, FdCache::Entry** e) {
  *e = nullptr;
  uint32_t id = 0;
  if (!handle_export_id(fh, &id)) return Nfs3Stat::kBadhandle;
  const Export* exp = table_->by_id(id);
  if (exp == nullptr) return Nfs3Stat::kStale;  // removed, or never ours
  if (op.exp == nullptr) {
    // The list is checked on every call, not only at MOUNT: a handle is a
    // capability anyone who learns it could present.
    const ClientRule* rule = exp->rule_for(op.addr);
    if (rule == nullptr) {
      st_.refused.add();
      return Nfs3Stat::kAccess;
    }
    op.exp = exp;
    op.read_only = rule->opt.read_only;
    op.cred = cred_from_call(op.call->rpc_header(), rule->opt.squash);
  } else if (op.exp != exp) {
    return Nfs3Stat::kXdev;
  }
  // A cached entry's handle passed this export's tag when it went in (or
  // was made here), and the cache is emptied when the table changes.
  if ((*e = fds_.find(fh)) != nullptr) return Nfs3Stat::kOk;
  int fd = -1;
  if (Nfs3Stat s = exp->open_handle(fh, &fd); s != Nfs3Stat::kOk) return s;
  *e = fds_.insert(fh, fd);
  return Nfs3Stat::kOk;
}

Nfs3Stat Nfs3Server::resolve_stat(Op& op, const Fh3& fh, FdCache::Entry** e, struct stat* st) {
  if (Nfs3Stat s = resolve(op, fh, e); s != Nfs3Stat::kOk) return s;
  if (fstat((*e)->path_fd, st) != 0) return nfs3_stat_from_errno(errno);
  if (st->st_nlink == 0) {
    // Removed since: its handle is stale (the descriptor kept it alive).
    fds_.erase(fh);
    *e = nullptr;
    return Nfs3Stat::kStale;
  }
  return Nfs3Stat::kOk;
}

int Nfs3Server::io_fd(FdCache::Entry* e, bool write) {
  if (e->io_fd >= 0 && (e->io_write || !write)) return e->io_fd;
  // Opened as the server (the caller's right to it is checked by may()),
  // through the O_PATH descriptor, so that it is the same object whatever
  // became of its name.
  char path[40];
  snprintf(path, sizeof path, "/proc/self/fd/%d", e->path_fd);
  int fd = ::open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOCTTY);
  if (fd < 0 && !write && errno == EACCES) fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return -1;
  fds_.close_fd(e->io_fd);  // (a job may hold it: fd_cache.h)
  e->io_fd = fd;
  e->io_write = write;
  return fd;
}

Fattr3 Nfs3Server::fattr(const Op& op, const struct stat& st) {
  Fattr3 a;
  switch (st.st_mode & S_IFMT) {
    case S_IFREG: a.type = FileType::kReg; break;
    case S_IFDIR: a.type = FileType::kDir; break;
    case S_IFBLK: a.type = FileType::kBlk; break;
    case S_IFCHR: a.type = FileType::kChr; break;
    case S_IFLNK: a.type = FileType::kLnk; break;
    case S_IFSOCK: a.type = FileType::kSock; break;
    default: a.type = FileType::kFifo; break;
  }
  a.mode = st.st_mode & 07777;
  a.nlink = static_cast<uint32_t>(st.st_nlink);
  a.uid = st.st_uid;
  a.gid = st.st_gid;
  a.size = static_cast<uint64_t>(st.st_size);
  a.used = static_cast<uint64_t>(st.st_blocks) * 512u;
  a.rdev_major = major(st.st_rdev);
  a.rdev_minor = minor(st.st_rdev);
  a.fsid = op.exp->fsid();
  a.fileid = st.st_ino;
  a.atime = {static_cast<uint32_t>(st.st_atim.tv_sec), static_cast<uint32_t>(st.st_atim.tv_nsec)};
  a.mtime = {static_cast<uint32_t>(st.st_mtim.tv_sec), static_cast<uint32_t>(st.st_mtim.tv_nsec)};
  a.ctime = {static_cast<uint32_t>(st.st_ctim.tv_sec), static_cast<uint32_t>(st.st_ctim.tv_nsec)};
  return a;
}

WccAttr Nfs3Server::wcc_attr(const struct stat& st) {
  WccAttr w;
  w.size = static_cast<uint64_t>(st.st_size);
  w.mtime = {static_cast<uint32_t>(st.st_mtim.tv_sec), static_cast<uint32_t>(st.st_mtim.tv_nsec)};
  w.ctime = {static_cast<uint32_t>(st.st_ctim.tv_sec), static_cast<uint32_t>(st.st_ctim.tv_nsec)};
  return w;
}

Nfs3Stat Nfs3Server::handle_and_cache(const Op& op, int fd, Fh3* fh) {
  Nfs3Stat s = op.exp->handle_of(fd, fh);
  if (s != Nfs3Stat::kOk) {
    close(fd);
    return s;
  }
  fds_.insert(*fh, fd);
  return Nfs3Stat::kOk;
}

bool Nfs3Server::may(const Op& op, const struct stat& st, int want) const {
  if (op.cred.uid == 0) {
    // Root reads and writes anything; it executes only what someone may.
    if ((want & 1) != 0 && !S_ISDIR(st.st_mode) && (st.st_mode & 0111) == 0) return false;
    return true;
  }
  uint32_t bits;
  if (st.st_uid == op.cred.uid) bits = (st.st_mode >> 6) & 7;
  else if (op.cred.in_group(st.st_gid)) bits = (st.st_mode >> 3) & 7;
  else bits = st.st_mode & 7;
  return (bits & static_cast<uint32_t>(want)) == static_cast<uint32_t>(want);
}

Nfs3Stat Nfs3Server::check_name(std::string_view name) {
  if (name.empty()) return Nfs3Stat::kInval;
  if (name.size() > kNfs3MaxName) return Nfs3Stat::kNametoolong;
  if (name == "." || name == "..") return Nfs3Stat::kExist;
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos) return Nfs3Stat::kAccess;
  return Nfs3Stat::kOk;
}

}  // namespace tern::nfsd
