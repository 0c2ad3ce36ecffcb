#include "nfsd/caller_thread.h"

#include "base/log.h"

namespace tern::nfsd {

CallerThread::CallerThread() : th_([this] { loop(); }) {}

CallerThread::~CallerThread() {
  {
    std::lock_guard<std::mutex> g(mu_);
    slot_ = Slot::kStop;
  }
  cv_.notify_all();
  th_.join();
}

nfs::Nfs3Stat CallerThread::run_raw(const Cred& c, nfs::Nfs3Stat (*fn)(void*), void* ctx) {
  std::unique_lock<std::mutex> g(mu_);
  cred_ = &c, fn_ = fn, ctx_ = ctx;
  slot_ = Slot::kJob;
  cv_.notify_all();
  cv_.wait(g, [this] { return slot_ == Slot::kDone; });
  slot_ = Slot::kIdle;
  ++jobs_;
  return result_;
}

void CallerThread::loop() {
  ThreadCreds creds;
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    cv_.wait(g, [this] { return slot_ == Slot::kJob || slot_ == Slot::kStop; });
    if (slot_ == Slot::kStop) return;
    // The job runs under the lock: the engine thread waits for it anyway,
    // and everything it touches is then ordered before the engine's next
    // look (the lock's release).
    Status s = creds.become(*cred_);
    if (!s) {
      TERN_LOG(kError, "nfsd", "%s", s.to_string().c_str());
      result_ = nfs::Nfs3Stat::kServerfault;
    } else {
      result_ = fn_(ctx_);
    }
    slot_ = Slot::kDone;
    cv_.notify_all();
  }
}

}  // namespace tern::nfsd
