// StorageQueue: the per-peer queues and bounds, and its three backends
// (io_uring, a worker pool, synchronous). See storage_queue.h.
#include "nfsd/storage_queue.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fair_share.h"
#include "base/log.h"

#if TERN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace tern::nfsd {

#if TERN_HAVE_LIBURING
struct StorageQueue::Uring {
  io_uring ring{};
  bool up = false;
  ~Uring() {
    if (up) io_uring_queue_exit(&ring);
  }
};
#else
struct StorageQueue::Uring {};
#endif

// Workers take slots from `jobs` and put them on `done`; the engine's thread
// collects `done` when `ndone` says there is something (no lock otherwise).
struct StorageQueue::Threads {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Slot*> jobs;
  std::vector<Slot*> done;
  std::atomic<uint32_t> ndone{0};
  bool stop = false;
  std::vector<std::thread> workers;
  ~Threads() {
    {
      std::lock_guard<std::mutex> g(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }
};

std::unique_ptr<StorageQueue> StorageQueue::create(const StorageOptions& opt) {
  return std::unique_ptr<StorageQueue>(new StorageQueue(opt));
}

StorageQueue::StorageQueue(const StorageOptions& opt)
    : opt_(opt), peers_(opt.max_in_flight > 64 ? opt.max_in_flight : 64) {
  if (opt_.max_in_flight == 0) opt_.max_in_flight = 1;
  if (opt_.max_per_peer == 0) opt_.max_per_peer = 1;
  if (opt_.threads == 0) opt_.threads = 1;
  if (opt_.mode == StorageOptions::Mode::kSync) return;
  efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd_ < 0) {
    TERN_LOG(kWarn, "nfsd", "storage: eventfd: %s; file I/O stays on the engine's thread", strerror(errno));
    return;
  }
  slots_.reserve(opt_.max_in_flight);
  held_.reserve(opt_.max_in_flight);
  delivering_.reserve(opt_.max_in_flight);
  for (uint32_t i = 0; i < opt_.max_in_flight; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    free_.push_back(slots_.back().get());
  }
  if (opt_.mode != StorageOptions::Mode::kThreads && start_uring()) return;
  start_threads();
}

StorageQueue::~StorageQueue() {
  drain();
  threads_.reset();
  uring_.reset();
  if (efd_ >= 0) close(efd_);
}

const char* StorageQueue::backend() const {
  switch (backend_) {
    case Backend::kUring: return "io_uring";
    case Backend::kThreads: return "threads";
    case Backend::kSync: return "sync";
  }
  return "?";
}

bool StorageQueue::start_uring() {
#if TERN_HAVE_LIBURING
  uring_ = std::make_unique<Uring>();
  unsigned entries = 1;
  while (entries < opt_.max_in_flight) entries <<= 1;
  int rc = io_uring_queue_init(entries, &uring_->ring, 0);
  if (rc < 0) {
    TERN_LOG(kWarn, "nfsd", "storage: io_uring unavailable (%s); using %u worker threads", strerror(-rc),
             opt_.threads);
    uring_.reset();
    return false;
  }
  uring_->up = true;
  if ((rc = io_uring_register_eventfd(&uring_->ring, efd_)) < 0) {
    TERN_LOG(kWarn, "nfsd", "storage: io_uring_register_eventfd: %s; using %u worker threads", strerror(-rc),
             opt_.threads);
    uring_.reset();
    return false;
  }
  // The work of every SQE here (IOSQE_ASYNC) runs on io_uring's "bounded"
  // workers, of which the kernel allows min(entries, 4 x CPUs) by default:
  // 8 on a 2-CPU host, which held a slow device to 8 operations in flight
  // whatever max_in_flight said (the rxe VM, reads on a 100 ms dm-delay
  // device: the same IOPS as knfsd's 8 threads). Allow the queue's own bound;
  // an older kernel without the call keeps its default.
  unsigned workers[2] = {opt_.max_in_flight, 0};  // bounded, unbounded (0: unchanged)
  if ((rc = io_uring_register_iowq_max_workers(&uring_->ring, workers)) < 0)
    TERN_LOG(kInfo, "nfsd", "storage: io_uring_register_iowq_max_workers: %s; the kernel's worker limit stays",
             strerror(-rc));
  backend_ = Backend::kUring;
  return true;
#else
  if (opt_.mode == StorageOptions::Mode::kUring)
    TERN_LOG(kWarn, "nfsd", "storage: built without liburing; using %u worker threads", opt_.threads);
  return false;
#endif
}

void StorageQueue::start_threads() {
  threads_ = std::make_unique<Threads>();
  Threads* t = threads_.get();
  const StorageOptions* o = &opt_;
  const int efd = efd_;
  for (uint32_t i = 0; i < opt_.threads; ++i)
    t->workers.emplace_back([t, o, efd] {
      pthread_setname_np(pthread_self(), "tern-storage");  // for perf --comm and /proc's task list
      for (;;) {
        Slot* s;
        {
          std::unique_lock<std::mutex> g(t->mu);
          t->cv.wait(g, [t] { return t->stop || !t->jobs.empty(); });
          if (t->jobs.empty()) return;
          s = t->jobs.front();
          t->jobs.pop_front();
        }
        s->res = run_now(*o, s->req);
        {
          std::lock_guard<std::mutex> g(t->mu);
          t->done.push_back(s);
          t->ndone.fetch_add(1, std::memory_order_release);
        }
        const uint64_t one = 1;
        (void)!write(efd, &one, sizeof one);
      }
    });
  backend_ = Backend::kThreads;
}

int64_t StorageQueue::run_now(const StorageOptions& opt, const StorageReq& r) {
  if (opt.fault != nullptr)
    if (int e = opt.fault(opt.fault_ctx, r); e != 0) return -e;
  for (;;) {
    ssize_t n = 0;
    switch (r.kind) {
      case StorageKind::kRead: n = pread(r.fd, r.buf, r.len, static_cast<off_t>(r.offset)); break;
      case StorageKind::kWrite: {
        iovec iov{r.buf, r.len};
        n = pwritev2(r.fd, &iov, 1, static_cast<off_t>(r.offset), r.rw_flags);
        break;
      }
      case StorageKind::kFsync: n = (r.rw_flags & kFsyncDataOnly) != 0 ? fdatasync(r.fd) : fsync(r.fd); break;
      case StorageKind::kCallerOp: return -EOPNOTSUPP;  // io_uring only: never given to another backend
      case StorageKind::kReserve: return 0;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? -errno : n;
  }
}

uint32_t StorageQueue::share() const {
  // Peers with work now: each waiting or running one.
  const size_t s = fair_share(opt_.max_in_flight, peers_.active());
  return static_cast<uint32_t>(s < opt_.max_per_peer ? s : opt_.max_per_peer);
}

void StorageQueue::submit(std::string_view peer, const StorageReq& r) {
  st_.submitted.add();
  if (backend_ == Backend::kSync) {
    if (opt_.hold != nullptr)
      while (opt_.hold->load(std::memory_order_acquire)) std::this_thread::yield();  // the slow device (tests)
    const int64_t res = run_now(opt_, r);
    st_.started.add();
    st_.reaped.add();
    if (res < 0) st_.failed.add();
    r.done(r.ctx, r, res);
    st_.completed.add();
    close(r.fd);
    return;
  }
  Peer* p = peers_.get(peer);
  if (p->waiting.empty() && in_flight_ < opt_.max_in_flight && p->in_flight < share()) {
    start(p, r);
    return;
  }
  st_.queued.add();
  p->waiting.push_back(r);
  ++waiting_;
  st_.waiting.set(waiting_);
  if (!p->ready) {
    p->ready = true;
    ready_.push_back(p);
  }
}

void StorageQueue::submit_shared(std::vector<std::string> peers, const StorageReq& r) {
  st_.submitted.add();
  Shared sh{std::move(peers), r};
  if (shared_.empty() && in_flight_ < opt_.max_in_flight) {
    start_shared(sh);
    return;
  }
  st_.queued.add();
  shared_.push_back(std::move(sh));
  ++waiting_;
  st_.waiting.set(waiting_);
}

void StorageQueue::start_shared(Shared& sh) {
  std::vector<Peer*> charged;
  charged.reserve(sh.peers.size());
  for (const std::string& id : sh.peers) {
    Peer* p = peers_.get(id);
    ++p->in_flight;
    if (p->in_flight > st_.peer_peak.get()) st_.peer_peak.set(p->in_flight);
    charged.push_back(p);
  }
  start(nullptr, sh.req, std::move(charged));
}

void StorageQueue::settle(Peer* p) {
  if (p->in_flight == 0 && p->waiting.empty()) {
    peers_.idle(p);  // kept for its next operation (client_table.h)
  } else if (!p->waiting.empty() && !p->ready) {
    p->ready = true;
    ready_.push_back(p);
  }
}

void StorageQueue::start(Peer* p, const StorageReq& r, std::vector<Peer*> shared) {
  Slot* s = free_.back();
  free_.pop_back();
  s->req = r;
  s->peer = p;
  s->shared = std::move(shared);
  s->res = 0;
  ++in_flight_;
  st_.in_flight.set(in_flight_);
  if (p != nullptr) {
    ++p->in_flight;
    if (p->in_flight > st_.peer_peak.get()) st_.peer_peak.set(p->in_flight);
  }
  if (r.kind == StorageKind::kReserve) {  // nothing to run: done, delivered from poll()
    held_.push_back(s);
    return;
  }
  st_.started.add();
#if TERN_HAVE_LIBURING
  if (backend_ == Backend::kUring) {
    if (opt_.fault != nullptr)
      if (int e = opt_.fault(opt_.fault_ctx, r); e != 0) {
        // Completed at once, delivered from poll() as any completion.
        s->res = -e;
        held_.push_back(s);
        return;
      }
    io_uring_sqe* sqe = io_uring_get_sqe(&uring_->ring);
    if (sqe == nullptr) {  // cannot happen: in flight <= entries; submit and retry
      (void)io_uring_submit(&uring_->ring);
      to_submit_ = io_uring_sq_ready(&uring_->ring);
      sqe = io_uring_get_sqe(&uring_->ring);
      if (sqe == nullptr) {  // the kernel took none: the call is answered with the error
        s->res = -EAGAIN;
        held_.push_back(s);
        return;
      }
    }
    switch (r.kind) {
      case StorageKind::kRead: io_uring_prep_read(sqe, r.fd, r.buf, static_cast<unsigned>(r.len), r.offset); break;
      case StorageKind::kWrite:
        io_uring_prep_write(sqe, r.fd, r.buf, static_cast<unsigned>(r.len), r.offset);
        sqe->rw_flags = r.rw_flags;
        break;
      case StorageKind::kFsync:
        io_uring_prep_fsync(sqe, r.fd, (r.rw_flags & kFsyncDataOnly) != 0 ? IORING_FSYNC_DATASYNC : 0);
        break;
      case StorageKind::kCallerOp:
        r.prep(r.op, sqe);
        // Without it the operation would run as the server: a caller op
        // never goes without its caller's personality.
        if (r.personality == 0) {
          io_uring_prep_nop(sqe);
          s->res = -EPERM;
          held_.push_back(s);
          st_.reaped.add();
          io_uring_sqe_set_data(sqe, nullptr);
          ++to_submit_;
          return;
        }
        sqe->personality = r.personality;
        break;
      case StorageKind::kReserve: break;  // never here: completed above
    }
    sqe->flags |= IOSQE_ASYNC;
    io_uring_sqe_set_data(sqe, s);
    ++to_submit_;
    return;
  }
#endif
  {
    std::lock_guard<std::mutex> g(threads_->mu);
    threads_->jobs.push_back(s);
  }
  threads_->cv.notify_one();
}

int StorageQueue::start_ready() {
  int n = 0;
  // Shared operations first: they answer calls whose own operations are
  // done, of peers that already paid their share for them.
  while (in_flight_ < opt_.max_in_flight && !shared_.empty()) {
    start_shared(shared_.front());
    shared_.pop_front();
    --waiting_;
    ++n;
  }
  // Round-robin over peers with waiting operations: one each per turn, a
  // peer at its share leaves the ring until one of its own completes.
  size_t turns = ready_.size();
  while (in_flight_ < opt_.max_in_flight && turns > 0 && !ready_.empty()) {
    Peer* p = ready_.front();
    ready_.pop_front();
    --turns;
    if (p->in_flight >= share()) {
      p->ready = false;
      continue;
    }
    StorageReq r = p->waiting.front();
    p->waiting.pop_front();
    --waiting_;
    start(p, r);
    ++n;
    if (!p->waiting.empty()) {
      ready_.push_back(p);
      ++turns;
    } else {
      p->ready = false;
    }
  }
  st_.waiting.set(waiting_);
  return n;
}

void StorageQueue::finish(Slot* s) {
  Peer* p = s->peer;
  StorageReq r = s->req;
  const int64_t res = s->res;
  std::vector<Peer*> shared;
  shared.swap(s->shared);
  --in_flight_;
  if (p != nullptr) --p->in_flight;
  for (Peer* q : shared) --q->in_flight;
  st_.in_flight.set(in_flight_);
  free_.push_back(s);
  if (res < 0) st_.failed.add();
  r.done(r.ctx, r, res);
  st_.completed.add();
  if (r.fd >= 0) close(r.fd);
  // After done, which may have queued more for them (a COMMIT's
  // reservation joins its file's sync): each one known until then.
  if (p != nullptr) settle(p);
  for (Peer* q : shared) settle(q);
}

int StorageQueue::deliver() {
  // Completions reaped into held_ first; delivered unless a test holds them.
  std::vector<Slot*>& got = held_;
#if TERN_HAVE_LIBURING
  if (backend_ == Backend::kUring) {
    io_uring_cqe* cqes[64];
    for (;;) {
      unsigned n = io_uring_peek_batch_cqe(&uring_->ring, cqes, 64);
      if (n == 0) break;
      for (unsigned i = 0; i < n; ++i) {
        Slot* s = static_cast<Slot*>(io_uring_cqe_get_data(cqes[i]));
        if (s == nullptr) continue;  // a refused caller op's no-op (start()): already held
        s->res = cqes[i]->res;
        got.push_back(s);
        st_.reaped.add();
      }
      io_uring_cq_advance(&uring_->ring, n);
    }
  }
#endif
  if (backend_ == Backend::kThreads && threads_->ndone.load(std::memory_order_acquire) != 0) {
    std::lock_guard<std::mutex> g(threads_->mu);
    got.insert(got.end(), threads_->done.begin(), threads_->done.end());
    st_.reaped.add(threads_->done.size());
    threads_->done.clear();
    threads_->ndone.store(0, std::memory_order_relaxed);
  }
  if (held_.empty()) return 0;
  // Both vectors keep their capacity: no allocation per pass.
  delivering_.swap(held_);
  if (opt_.hold != nullptr || opt_.hold_if != nullptr) {
    // Tests: what the "device" still holds stays in flight; a reservation
    // never went to the device.
    const bool all = opt_.hold != nullptr && opt_.hold->load(std::memory_order_acquire);
    size_t keep = 0;
    for (Slot* s : delivering_) {
      const bool held = s->req.kind != StorageKind::kReserve &&
                        (all || (opt_.hold_if != nullptr && opt_.hold_if(opt_.fault_ctx, s->req)));
      if (held) held_.push_back(s);
      else delivering_[keep++] = s;
    }
    delivering_.resize(keep);
  }
  for (Slot* s : delivering_) finish(s);
  const int n = static_cast<int>(delivering_.size());
  delivering_.clear();
  return n;
}

int StorageQueue::poll() {
  if (backend_ == Backend::kSync) return 0;
  int work = 0;
  if (in_flight_ > 0 || !held_.empty()) work += deliver();
  if (!ready_.empty() || !shared_.empty()) work += start_ready();
#if TERN_HAVE_LIBURING
  // What this pass prepared, in one system call. SQEs a failed submission
  // left in the ring (EAGAIN, EBUSY: the kernel short of memory or CQ room)
  // stay ready and go with the next pass's.
  if (backend_ == Backend::kUring && io_uring_sq_ready(&uring_->ring) > 0) {
    int rc = io_uring_submit(&uring_->ring);
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR)
      TERN_LOG(kError, "nfsd", "storage: io_uring_submit: %s", strerror(-rc));
    to_submit_ = io_uring_sq_ready(&uring_->ring);
  }
#endif
  return work;
}

int StorageQueue::register_personality() {
#if TERN_HAVE_LIBURING
  if (backend_ == Backend::kUring) return io_uring_register_personality(&uring_->ring);
#endif
  return -EOPNOTSUPP;
}

void StorageQueue::unregister_personality(int id) {
#if TERN_HAVE_LIBURING
  if (backend_ == Backend::kUring && id > 0) (void)io_uring_unregister_personality(&uring_->ring, id);
#else
  (void)id;
#endif
}

void StorageQueue::drain() {
  while (!idle()) {
    if (poll() > 0) continue;
    if (opt_.hold != nullptr && opt_.hold->load()) {
      std::this_thread::yield();
      continue;
    }
#if TERN_HAVE_LIBURING
    if (backend_ == Backend::kUring && in_flight_ > static_cast<uint32_t>(held_.size())) {
      io_uring_cqe* cqe = nullptr;
      (void)io_uring_wait_cqe(&uring_->ring, &cqe);
      continue;
    }
#endif
    std::this_thread::yield();
  }
}

}  // namespace tern::nfsd
