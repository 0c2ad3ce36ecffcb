// SyncBatches: one sync per file for the stable WRITEs and COMMITs that
// joined it. See sync_batch.h.
#include "nfsd/sync_batch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

namespace tern::nfsd {

SyncBatches::SyncBatches(StorageQueue& q) : q_(q) {}

SyncBatches::~SyncBatches() {
  // The owner flushes and drains until nothing is due or running, so every
  // waiter was answered; close what is still owned all the same.
  for (auto& [k, f] : files_)
    if (f.next_fd >= 0) close(f.next_fd);
}

int SyncBatches::join(const SyncKey& k, std::string_view peer, int fd, bool full, const Waiter& w) {
  File& f = files_[k];
  f.owner = this;
  f.key = k;
  if (f.next_fd < 0) {
    // The sync's own descriptor: the caller's is closed when its operation
    // completes, before the sync starts.
    f.next_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (f.next_fd < 0) {
      const int err = errno;
      if (f.next.empty() && !f.syncing) files_.erase(k);
      return err;
    }
  }
  if (std::find(f.next_peers.begin(), f.next_peers.end(), peer) == f.next_peers.end()) f.next_peers.emplace_back(peer);
  f.next.push_back(w);
  f.next_full |= full;
  make_due(&f);
  return 0;
}

void SyncBatches::make_due(File* f) {
  if (f->due || f->syncing || f->next.empty()) return;
  f->due = true;
  due_.push_back(f);
}

int SyncBatches::flush() {
  if (due_.empty()) return 0;
  std::vector<File*> now;
  now.swap(due_);
  for (File* f : now) start(f);
  const int n = static_cast<int>(now.size());
  // Keep the capacity (no allocation per pass) unless start() made more due.
  if (due_.empty()) {
    now.clear();
    due_.swap(now);
  }
  return n;
}

void SyncBatches::start(File* f) {
  f->due = false;
  StorageReq r;
  r.kind = StorageKind::kFsync;
  r.fd = f->next_fd;  // the queue's from here
  r.rw_flags = f->next_full ? 0 : kFsyncDataOnly;
  r.done = &SyncBatches::on_sync;
  r.ctx = f;
  f->running.swap(f->next);
  f->next.clear();
  f->next_full = false;
  f->next_fd = -1;
  f->syncing = true;
  st_.syncs.add();
  std::vector<std::string> peers;
  peers.swap(f->next_peers);
  q_.submit_shared(std::move(peers), r);
}

void SyncBatches::on_sync(void* ctx, const StorageReq& r, int64_t res) {
  File* f = static_cast<File*>(ctx);
  SyncBatches* self = f->owner;
  std::vector<Waiter> batch;
  batch.swap(f->running);
  f->syncing = false;
  const int err = res < 0 ? static_cast<int>(-res) : 0;
  if (err != 0) self->st_.failed.add();
  if (batch.size() > self->st_.largest.get()) self->st_.largest.set(batch.size());
  self->st_.waiters.add(batch.size());
  // What joined while this sync ran goes in the next, at the end of this pass.
  if (!f->next.empty()) {
    self->make_due(f);
  } else {
    const SyncKey k = f->key;
    self->files_.erase(k);
  }
  for (const Waiter& w : batch) w.done(w.ctx, r.fd, err);
}

}  // namespace tern::nfsd
