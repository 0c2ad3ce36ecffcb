#include "nfsd/caller_pool.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fair_share.h"
#include "base/log.h"

namespace tern::nfsd {

CallerPool::CallerPool(const CallerPoolOptions& opt)
    : opt_(opt), peers_(opt.max_in_flight > 64 ? opt.max_in_flight : 64) {
  if (opt_.threads == 0) opt_.threads = 1;
  if (opt_.max_in_flight == 0) opt_.max_in_flight = 1;
  if (opt_.max_per_peer == 0) opt_.max_per_peer = 1;
  efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  // Without it the engine would not wake for a result while it sleeps: it
  // still finds results when it polls (busy mode, or the next call).
  if (efd_ < 0) TERN_LOG(kWarn, "nfsd", "caller pool: eventfd: %s", strerror(errno));
  workers_.reserve(opt_.threads);
  for (uint32_t i = 0; i < opt_.threads; ++i) workers_.emplace_back([this] { worker(); });
}

CallerPool::~CallerPool() {
  drain();
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  if (efd_ >= 0) close(efd_);
}

uint32_t CallerPool::share() const {
  const size_t s = fair_share(opt_.max_in_flight, peers_.active());
  return static_cast<uint32_t>(s < opt_.max_per_peer ? s : opt_.max_per_peer);
}

void CallerPool::submit(std::string_view peer, CallerJob job) {
  st_.submitted.add();
  Peer* p = peers_.get(peer);
  auto* j = new Job{std::move(job), p, nfs::Nfs3Stat::kOk};
  if (p->waiting.empty() && in_flight_ < opt_.max_in_flight && p->in_flight < share()) {
    start(j);
    return;
  }
  st_.queued.add();
  p->waiting.push_back(j);
  ++waiting_;
  if (!p->ready) p->ready = true, ready_.push_back(p);
}

void CallerPool::settle(Peer* p) {
  if (p->in_flight != 0 || !p->waiting.empty()) return;
  peers_.idle(p);  // kept for its next job (client_table.h)
}

void CallerPool::start(Job* j) {
  Peer* p = j->peer;
  ++p->in_flight;
  ++in_flight_;
  st_.in_flight.set(in_flight_);
  if (p->in_flight > st_.peer_peak.get()) st_.peer_peak.set(p->in_flight);
  {
    std::lock_guard<std::mutex> g(mu_);
    jobs_.push_back(j);
  }
  cv_.notify_one();
}

int CallerPool::start_ready() {
  int n = 0;
  // Round-robin: one job of each ready peer per turn, while the bounds allow.
  size_t turns = ready_.size();
  while (turns-- > 0 && in_flight_ < opt_.max_in_flight && !ready_.empty()) {
    Peer* p = ready_.front();
    ready_.pop_front();
    if (p->in_flight < share()) {
      Job* j = p->waiting.front();
      p->waiting.pop_front();
      --waiting_;
      start(j);
      ++n;
    }
    if (!p->waiting.empty()) ready_.push_back(p);
    else p->ready = false;
  }
  return n;
}

int CallerPool::poll() {
  int n = 0;
  if (ndone_.load(std::memory_order_acquire) != 0) {
    {
      std::lock_guard<std::mutex> g(mu_);
      delivering_.swap(done_);
      ndone_.store(0, std::memory_order_relaxed);
    }
    for (Job* j : delivering_) {
      Peer* p = j->peer;
      --p->in_flight;
      --in_flight_;
      st_.in_flight.set(in_flight_);
      st_.completed.add();
      // done() may submit again (a job continued in another): the peer
      // stays while it has work.
      j->j.done(j->j.ctx, j->res);
      settle(p);
      delete j;
      ++n;
    }
    delivering_.clear();
  }
  if (!ready_.empty()) n += start_ready();
  return n;
}

void CallerPool::drain() {
  while (!idle()) {
    if (poll() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void CallerPool::worker() {
  // Named for perf's --comm and /proc's task list: where a call's time goes.
  pthread_setname_np(pthread_self(), "tern-caller");
  ThreadCreds creds;
  for (;;) {
    Job* j = nullptr;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stop_, nothing left
      j = jobs_.front();
      jobs_.pop_front();
    }
    if (opt_.hold != nullptr)
      while (opt_.hold->load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (Status s = creds.become(j->j.cred); !s) {
      TERN_LOG(kError, "nfsd", "%s", s.to_string().c_str());
      j->res = nfs::Nfs3Stat::kServerfault;
    } else {
      j->res = j->j.fn();
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      done_.push_back(j);
      ndone_.fetch_add(1, std::memory_order_release);
    }
    if (efd_ >= 0) {
      const uint64_t one = 1;
      (void)!write(efd_, &one, sizeof one);
    }
  }
}

}  // namespace tern::nfsd
