#include "nfsd/sm_notifier.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <vector>

#include "base/log.h"
#include "nfs/nsm.h"
#include "nfsd/rpc_caller.h"
#include "nfsd/rpcbind_client.h"

namespace tern::nfsd {

namespace nsm = tern::nfs::nsm;
using Clock = std::chrono::steady_clock;

std::string local_host_name() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

Result<std::unique_ptr<SmNotifier>> SmNotifier::start(const SmNotifierOptions& opt) {
  std::unique_ptr<SmNotifier> n(new SmNotifier(opt));
  auto last = load_lock_holders(opt.path);
  LockHolders prev;
  if (last) {
    prev = std::move(*last);
  } else {
    // Its clients cannot be told; a state from the clock is still unlike
    // any number they can have seen from us.
    TERN_LOG(kWarn, "nlm", "%s: ignored (no client will be told to reclaim): %s", opt.path.c_str(),
             last.status().message().c_str());
    prev.state = static_cast<int32_t>(time(nullptr) & 0x3ffffffe);
  }
  n->state_ = next_running_state(prev.state);
  for (const LockHolder& h : prev.holders) {
    Entry& e = n->entries_[h.client];
    e.server = h.server;
    e.pending = true;
  }
  n->recorded_at_start_ = n->entries_.size();
  // The new number is on disk before any client can see it: a crash now
  // and a restart must not reuse it.
  if (Status s = save_lock_holders(opt.path, n->snapshot()); !s)
    return make_error(Errc::kInvalidArgument, "NLM: cannot keep the lock holders' record: %s", s.message().c_str());
  n->thread_ = std::thread([p = n.get()] { p->run(); });
  return n;
}

SmNotifier::~SmNotifier() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // Stopped: an even number, and every holder kept (their locks are gone
  // with this process; the next start tells them).
  LockHolders h;
  {
    std::lock_guard<std::mutex> g(mu_);
    h = snapshot();
  }
  h.state = state_ + 1;
  if (Status s = save_lock_holders(opt_.path, h); !s)
    TERN_LOG(kWarn, "nlm", "%s: %s", opt_.path.c_str(), s.to_string().c_str());
}

LockHolders SmNotifier::snapshot() const {
  LockHolders h;
  h.state = state_;
  for (const auto& [client, e] : entries_) h.holders.push_back({client, e.server});
  return h;
}

size_t SmNotifier::pending() const {
  std::lock_guard<std::mutex> g(mu_);
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(), [](const auto& kv) {
    return kv.second.pending;
  }));
}

void SmNotifier::hold(const std::string& client, const std::string& server) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = entries_.find(client);
    bool changed = false;
    if (it == entries_.end()) {
      if (entries_.size() >= kMaxLockHolders) {
        if (!full_warned_)
          TERN_LOG(kWarn, "nlm", "%zu lock holders recorded: %s (and others past it) will not be told to reclaim "
                   "after a restart", entries_.size(), client.c_str());
        full_warned_ = true;
        return;
      }
      it = entries_.emplace(client, Entry{}).first;
      changed = true;
    }
    Entry& e = it->second;
    e.live = true;
    if (e.server != server) {
      e.server = server;
      changed = true;
    }
    if (!changed) return;
    dirty_ = true;
  }
  cv_.notify_all();
}

void SmNotifier::let_go(const std::string& client) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = entries_.find(client);
    if (it == entries_.end() || !it->second.live) return;
    it->second.live = false;
    drop_if_done(it);
    if (!dirty_) return;
  }
  cv_.notify_all();
}

void SmNotifier::begin() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (begun_) return;
    begun_ = true;
    const auto now = Clock::now();
    deadline_ = now + opt_.window;
    for (auto& [client, e] : entries_) e.next_try = now;
  }
  cv_.notify_all();
}

void SmNotifier::forget(const std::string& client) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = entries_.find(client);
  if (it == entries_.end()) return;
  entries_.erase(it);
  dirty_ = true;
  cv_.notify_all();
}

void SmNotifier::drop_if_done(std::map<std::string, Entry>::iterator it) {
  if (it->second.live || it->second.pending) return;
  entries_.erase(it);
  dirty_ = true;
}

Status SmNotifier::notify(const std::string& client, const std::string& server, std::string* how) {
  auto peer = rpc_peer_ip(client, 0, RpcTransport::kDatagram);
  if (!peer) return peer.status();
  auto port = rpcbind_getport(peer->addr, nsm::kProgram, nsm::kVersion, false, opt_.client_rpcbind_port,
                              opt_.call_timeout_ms);
  if (!port) return make_error(port.status().code(), "its statd: %s", port.status().message().c_str());
  // Named as the client's lock manager knows us: the address it sent its
  // locks to (our host name when that is not known).
  const std::string me = server.empty() ? local_host_name() : server;
  *how = me;
  uint8_t buf[nsm::kMaxName + 16];
  xdr::XdrWriter w(buf);
  nsm::encode(w, nsm::StatChge{me, state_});
  if (!w.ok()) return make_error(Errc::kInvalidArgument, "host name too long");
  RpcCallOptions co;
  co.timeout_ms = opt_.call_timeout_ms;
  co.reserved_port = true;  // as sm-notify sends it
  // From that address too: statd also matches the sender's address.
  sockaddr_storage src{};
  if (auto s = rpc_peer_ip(server, 0, RpcTransport::kDatagram); s && s->addr.ss_family == peer->addr.ss_family) {
    src = s->addr;
    co.source = &src;
  }
  const RpcPeer to = rpc_peer_of(peer->addr, *port, RpcTransport::kDatagram);
  auto r = rpc_call(to, nsm::kProgram, nsm::kVersion, static_cast<uint32_t>(nsm::Proc::kNotify), w.written(), co);
  if (!r && co.source != nullptr && r.status().code() == Errc::kInvalidArgument) {
    // That address is no longer ours: the name alone must do.
    co.source = nullptr;
    r = rpc_call(to, nsm::kProgram, nsm::kVersion, static_cast<uint32_t>(nsm::Proc::kNotify), w.written(), co);
  }
  return r ? Status::ok() : r.status();
}

void SmNotifier::run() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    if (stopping_) return;
    if (dirty_) {
      dirty_ = false;
      LockHolders h = snapshot();
      g.unlock();
      Status s = save_lock_holders(opt_.path, h);
      if (!s) TERN_LOG(kWarn, "nlm", "%s: %s", opt_.path.c_str(), s.to_string().c_str());
      g.lock();
      continue;
    }
    if (!begun_) {
      cv_.wait(g);
      continue;
    }
    const auto now = Clock::now();
    // The next client due, and when the one after is.
    std::string due;
    auto wake = Clock::time_point::max();
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto cur = it++;
      Entry& e = cur->second;
      if (!e.pending) continue;
      if (now >= deadline_) {
        // Too late to reclaim anything: forgotten, said once.
        stats_.failed.fetch_add(1, std::memory_order_relaxed);
        TERN_LOG(kWarn, "nlm", "SM_NOTIFY to %s: not reached in %.1f s (%d tries; %s): it is not told its locks "
                 "died with the restart", cur->first.c_str(),
                 std::chrono::duration<double>(opt_.window).count(), e.tries, e.last_error.c_str());
        e.pending = false;
        drop_if_done(cur);
        continue;
      }
      if (e.next_try <= now && due.empty()) due = cur->first;
      else wake = std::min(wake, e.next_try);
    }
    if (dirty_) continue;
    if (due.empty()) {
      if (wake == Clock::time_point::max()) cv_.wait(g);
      else cv_.wait_until(g, std::min(wake, deadline_));
      continue;
    }
    Entry& e = entries_[due];
    const std::string server = e.server;
    const int tries = ++e.tries;
    g.unlock();
    std::string as;
    Status s = notify(due, server, &as);
    g.lock();
    auto it = entries_.find(due);
    if (it == entries_.end()) continue;
    if (s) {
      stats_.notified.fetch_add(1, std::memory_order_relaxed);
      // At the level of the log's other lock events ("released the locks
      // of"): what an admin looks for after a restart, one line a client.
      TERN_LOG(kWarn, "nlm", "SM_NOTIFY to %s: told (as %s, state %d, try %d) to reclaim its locks", due.c_str(),
               as.c_str(), state_, tries);
      it->second.pending = false;
      drop_if_done(it);
      continue;
    }
    auto backoff = opt_.first_backoff * (1 << std::min(tries - 1, 10));
    if (backoff > opt_.max_backoff) backoff = opt_.max_backoff;
    it->second.next_try = Clock::now() + backoff;
    it->second.last_error = s.to_string();
    TERN_LOG(kDebug, "nlm", "SM_NOTIFY to %s: %s (try %d)", due.c_str(), it->second.last_error.c_str(), tries);
  }
}

}  // namespace tern::nfsd
