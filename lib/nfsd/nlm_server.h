// NLM version 4 (program 100021) for tern-nfsd's export: the lock manager
// the Linux NFSv3 client talks to over TCP (or UDP) next to its NFS traffic
// over RDMA. On a thread of its own (an RpcService: the control path, never
// an engine thread), with a second thread for what it calls out — the
// client's NLM service (GRANTED, and the _RES answers of the _MSG forms),
// and the host's rpc.statd (SM_MON) — so that a slow or dead peer never
// stalls a lock call.
//
// What it does with each procedure:
//   TEST, LOCK, CANCEL, UNLOCK, NM_LOCK   on the LockTable (lock_table.h);
//                                         a blocked LOCK is granted later,
//                                         its client told with GRANTED
//   TEST_MSG .. UNLOCK_MSG                the same, the result sent back as
//                                         a call of the matching _RES
//   GRANTED_RES and the other _RES        accepted and ignored (we send
//                                         GRANTED, not GRANTED_MSG)
//   GRANTED, GRANTED_MSG                  NLM4_DENIED: no client lives here
//   SHARE, UNSHARE                        NLM4_FAILED: DOS share reservations
//                                         are not implemented
//   FREE_ALL                              releases the named host's locks
//   NSM_NOTIFY (16, private)              rpc.statd's "host rebooted"
//                                         callback, accepted from loopback
//                                         only: releases that host's locks
// statd calls back through 127.0.0.1 (the port rpcbind gives for NLM v4
// over UDP), so a service bound to another address also takes UDP on
// 127.0.0.1 at the same port.
//
// Every file handle is checked as NFS checks it (signed, the object still
// there): NLM4_STALE_FH otherwise. For grace_seconds after start only
// reclaims are granted (NLM4_DENIED_GRACE_PERIOD otherwise), so that clients
// of a previous tern-nfsd take back their locks before anyone else can;
// with a record of lock holders (NlmOptions::notify.path), those clients
// are told to (sm_notifier.h) once notify_clients() is called.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "nfs/nlm4.h"
#include "nfsd/lock_table.h"
#include "nfsd/nsm_client.h"
#include "nfsd/rpc_service.h"
#include "nfsd/sm_notifier.h"

namespace tern::nfsd {

class PublishedExports;

struct NlmOptions {
  std::string addr = "0.0.0.0";
  uint16_t port = 0;  // 0: any free port (registered with rpcbind)
  int grace_seconds = 90;
  // Monitor lock holders with the local rpc.statd.
  bool use_statd = true;
  NsmClientOptions nsm;  // the callback must stay NLM v4's NSM_NOTIFY
  // Where a client's rpcbind listens (tests run one on another port; the
  // notifier's own setting is replaced by this one).
  uint16_t client_rpcbind_port = 111;
  // The lock holders' record and how the restart is told to them; an empty
  // path: nothing kept, nobody told. Its window is made at least
  // grace_seconds.
  SmNotifierOptions notify;
  // Whether the client at `peer` may take a lock (exclusive or not) in the
  // file a handle names: NLM4_GRANTED for yes, else the status to answer --
  // NLM4_STALE_FH for a handle no export served now made (or whose object
  // is gone), NLM4_FAILED for a client the export's list does not name (as
  // knfsd's lockd answers what nfsd refuses), NLM4_ROFS for an exclusive
  // lock where the client's rule is read-only. Empty: the exports' check.
  std::function<nfs::nlm4::Stat(std::span<const uint8_t> fh, bool exclusive, const sockaddr_storage& peer)> check_fh;
};

struct NlmStats {
  std::atomic<uint64_t> calls{0}, granted{0}, denied{0}, blocked{0}, grace_denied{0}, callbacks{0},
      callback_failures{0}, freed_hosts{0}, reclaimed{0};
};

class NlmServer {
 public:
  // pub (the exports in force at each call; it outlives the server) may be
  // null when opt.check_fh is given (tests).
  static Result<std::unique_ptr<NlmServer>> start(const PublishedExports* pub, const NlmOptions& opt);
  // Stops both threads; SM_UNMON_ALL to statd.
  ~NlmServer();
  NlmServer(const NlmServer&) = delete;
  NlmServer& operator=(const NlmServer&) = delete;

  uint16_t port() const { return svc_->port(); }
  const sockaddr_storage& address() const { return svc_->address(); }
  const NlmStats& stats() const { return stats_; }
  bool in_grace() const;
  // Tells the clients that held locks before the restart to reclaim them:
  // call it once the service is where clients will look for it (after the
  // rpcbind registration), or they reclaim from the old port and fail.
  void notify_clients();
  // The notifier (null without a record): its NSM state and counters.
  const SmNotifier* notifier() const { return notifier_.get(); }
  // Locks held now (all files).
  size_t locks_held() const;

  // One call, as the service thread handles it; public for the tests.
  bool handle(const RpcRequest& req, std::vector<uint8_t>* reply);

 private:
  // Work for the callout thread.
  struct Job {
    enum class Kind : uint8_t {
      kMonitor,  // SM_MON the host at `peer` (its address as mon_name)
      kGranted,  // tell the waiter's client its lock is held
      kMsgRes,   // send `args` to the caller's NLM as procedure `proc`
    } kind;
    Waiter waiter;          // kGranted
    sockaddr_storage peer;  // kMonitor, kMsgRes
    std::string caller;     // kMonitor: the caller_name monitored
    bool tcp = true;
    uint32_t proc = 0;
    std::vector<uint8_t> args;
  };

  explicit NlmServer(const NlmOptions& opt);
  void callout_loop();
  void enqueue(Job j);
  void send_granted(const Waiter& w);
  void send_to_client_nlm(const sockaddr_storage& peer, const sockaddr_storage* local, bool tcp, uint32_t proc,
                          std::span<const uint8_t> args, bool* denied);
  void release_host(const std::string& host);
  // After `ip` let go of something: when none of the callers that locked
  // from it holds or waits for anything, the notifier forgets it.
  void settle_holder(const std::string& ip);
  void grant_waiters(std::vector<Waiter> granted);

  // The procedures' work, each returning its result.
  nfs::nlm4::TestRes do_test(const nfs::nlm4::TestArgs& a, const RpcRequest& req, std::string* holder_oh);
  nfs::nlm4::Stat do_lock(const nfs::nlm4::LockArgs& a, const RpcRequest& req, bool monitor);
  nfs::nlm4::Stat do_cancel(const nfs::nlm4::CancArgs& a, const RpcRequest& req);
  nfs::nlm4::Stat do_unlock(const nfs::nlm4::UnlockArgs& a, const RpcRequest& req);
  bool handle_nlm(const RpcRequest& req, uint32_t xid, uint32_t proc, std::span<const uint8_t> args,
                  std::vector<uint8_t>* reply);
  bool handle_nsm_notify(const RpcRequest& req, uint32_t xid, std::span<const uint8_t> args,
                         std::vector<uint8_t>* reply);

  NlmOptions opt_;
  std::chrono::steady_clock::time_point grace_end_;
  NlmStats stats_;

  mutable std::mutex mu_;  // the table and the maps below
  LockTable table_;
  // mon_name (a client's address) -> the caller_names that locked from it.
  std::map<std::string, std::set<std::string>> monitored_;

  std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread callout_;
  std::unique_ptr<NsmClient> nsm_;  // used on the callout thread only
  bool statd_warned_ = false;
  std::unique_ptr<SmNotifier> notifier_;  // set before the service starts
  std::unique_ptr<RpcService> svc_;
};

}  // namespace tern::nfsd
