// tern-nfsd's own sm-notify: what tells NLM clients to reclaim their locks
// after tern-nfsd (not the host) restarted. The host's sm-notify does this
// only at boot, and the locks lived in tern-nfsd's memory: without it a
// client of a restarted tern-nfsd believes it still holds locks nobody
// knows of.
//
// At start it takes the record of the last run (lock_holders_file.h),
// moves the NSM state number to the next odd one and writes it back
// before anything is served; then, on a thread of its own, it sends each
// recorded client's statd (found through the client's rpcbind, UDP)
// SM_NOTIFY: mon_name the address of ours the client locked through (what
// its lock manager monitors us as; the call also comes from that address,
// the other thing statd matches on), state the new number. The client's
// statd calls its lock manager back, which sends its locks again marked
// `reclaim` within the grace period (nlm_server.h). A client that does not
// answer is tried again after 1, 2, 4, ... (at most 15) seconds until the
// window ends (the grace period, at least 30 s); one log line per client
// says whether it was told.
//
// While running it keeps the record current for the next start: a client
// is added when it takes its first lock (hold), and leaves when it holds
// nothing any more (let_go) and has been notified (or the window passed):
// a client told to reclaim that has not yet done so stays. Writes happen on
// the thread too, coalesced, so that no lock call waits for the disk; a
// crash in the instant between a client's first lock and the write loses
// that one client's notification.
//
// Never on the NLM service thread: a call to a dead client waits out its
// timeout here and stalls nothing else.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/result.h"
#include "nfsd/lock_holders_file.h"

namespace tern::nfsd {

// This host's name (gethostname): what NSM calls it in SM_NOTIFY (my_name)
// and what NLM's GRANTED callbacks name as their caller.
std::string local_host_name();

struct SmNotifierOptions {
  std::string path;  // the record (StateDir::lock_holders_path())
  // How long to keep trying a silent client: its reclaims are refused
  // once the grace period is over anyway.
  std::chrono::milliseconds window{30000};
  uint16_t client_rpcbind_port = 111;  // tests run the client's elsewhere
  int call_timeout_ms = 2000;          // each of GETPORT and SM_NOTIFY
  // The first retry's delay, doubled each time up to max_backoff.
  std::chrono::milliseconds first_backoff{1000};
  std::chrono::milliseconds max_backoff{15000};
};

struct SmNotifyStats {
  std::atomic<uint64_t> notified{0}, failed{0};
};

class SmNotifier {
 public:
  // Reads and rewrites the record (kInvalidArgument when it cannot be
  // written: tern-nfsd would forget its clients) and starts the thread,
  // which keeps the record but tells nobody before begin(). An unreadable
  // record is said in the log and counts as empty.
  static Result<std::unique_ptr<SmNotifier>> start(const SmNotifierOptions& opt);
  // Starts telling the last run's clients (the window counts from here):
  // once our lock service is where they will look for it.
  void begin();
  // Stops the thread (waiting out a call under way) and writes the record
  // a last time, with the state made even: stopped.
  ~SmNotifier();
  SmNotifier(const SmNotifier&) = delete;
  SmNotifier& operator=(const SmNotifier&) = delete;

  // The NSM state number of this run.
  int32_t state() const { return state_; }
  const SmNotifyStats& stats() const { return stats_; }
  // How many clients from the last run are still to be told, and how many
  // there were at start.
  size_t pending() const;
  size_t recorded_at_start() const { return recorded_at_start_; }

  // A client at `client` took a lock through our address `server` (both
  // as text): recorded, if it was not.
  void hold(const std::string& client, const std::string& server);
  // The client holds nothing any more (unlocked, or its locks released).
  void let_go(const std::string& client);
  // The client rebooted (its statd said so): neither kept nor told.
  void forget(const std::string& client);

 private:
  struct Entry {
    std::string server;
    bool live = false;     // holds locks in this run
    bool pending = false;  // from the last run, not yet told
    int tries = 0;
    std::string last_error;  // of the last try, for the line saying it failed
    std::chrono::steady_clock::time_point next_try;
  };
  explicit SmNotifier(const SmNotifierOptions& opt) : opt_(opt) {}
  void run();
  Status notify(const std::string& client, const std::string& server, std::string* how);
  // Under mu_: the record as it should be on disk.
  LockHolders snapshot() const;
  void drop_if_done(std::map<std::string, Entry>::iterator it);

  SmNotifierOptions opt_;
  int32_t state_ = 0;
  size_t recorded_at_start_ = 0;
  SmNotifyStats stats_;
  std::chrono::steady_clock::time_point deadline_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Entry> entries_;  // by client address
  bool dirty_ = false;
  bool stopping_ = false;
  bool begun_ = false;
  bool full_warned_ = false;
  std::thread thread_;
};

}  // namespace tern::nfsd
