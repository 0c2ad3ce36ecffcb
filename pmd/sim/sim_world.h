// pmd/sim's world: the deterministic scheduler every simulated device,
// queue pair and completion queue of one simulation shares (docs/sim.md).
//
// Nothing a host posts to a simulated device happens at post time. A posted
// send WR waits in its QP's send queue; a completion waits in its QP's
// completion queue-to-be; a connection-manager action waits in its QP's CM
// queue. Each is an event, and the world's seeded generator picks which
// runnable event runs next. Within one QP the order is the RC service's: its
// send WRs execute in order, its send completions and its receive
// completions each appear in order, its CM events in order; across QPs and
// CQs anything goes. One seed, one thread, one order: the same seed replays
// the same schedule byte for byte (trace_hash()).
//
// The world runs events when a host polls (Cq::poll runs a few, poll_cm one:
// "auto" progress, so that any host works unchanged), or when a simulation
// calls step() itself. Time is virtual: every event advances now_ns() a
// little, advance() jumps it; install_clock() makes it the engine's clock.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tern::sim {

class SimQp;
class SimDevice;
class SimCq;

// Driver-side accounting that a simulation checks at the end of a schedule:
// every fast registration ends exactly once.
struct WorldCounters {
  uint64_t events = 0;            // events run
  uint64_t fast_regs = 0;         // REG_MR WRs that made a registration valid
  uint64_t local_invs = 0;        // LOCAL_INV WRs that ended a valid registration
  uint64_t remote_invs = 0;       // SEND_WITH_INVs that ended one at the receiver
  uint64_t destroyed_valid = 0;   // fast MRs destroyed while still registered
  uint64_t inv_of_invalid = 0;    // LOCAL_INVs of a registration already ended (a double invalidation)
  uint64_t stale_completions = 0; // completions polled after their QP was destroyed
  uint64_t stale_on_recycled = 0; // ... whose number a QP made since had by then
  uint64_t reg_unretired = 0;     // REG_MRs refused: a remote invalidation ended the MR's last one, no retire() since
  uint64_t remote_access_errors = 0;  // READ/WRITE refused by the owner's MR table
  uint64_t cq_overruns = 0;       // completions published to a full CQ
  uint64_t qp_errors = 0;         // QPs that went to error
  uint64_t flushed = 0;           // WRs completed with kWrFlushErr
  uint64_t faults = 0;            // faults injected through the world
  uint64_t rnr_waits = 0;         // SENDs that found no receive posted at their peer (each WR once)
  uint64_t rnr_naks = 0;          // RNR retries spent by QPs with a finite RNR retry count
  uint64_t acks_lost = 0;         // WRs executed at the responder and failed at the requester
  uint64_t link_failures = 0;     // WRs failed because a port was down
  uint64_t late_recvs = 0;        // SRQ receives a destroyed QP still held, completed after its end (late_receives)
  // Live QPs their host disconnected on a completion of a destroyed QP that
  // had their number (in the same poll): the host took it for theirs.
  uint64_t stale_acted_on = 0;
  // Memory an engine took back into a pool or handed back to its caller (base/reclaim_hook.h) while a WR
  // posted here and not yet executed named it, a receive posted here could
  // land in it, or a fast registration a peer holds the rkey of still
  // covered it: memory returned while a device or a peer could touch it.
  uint64_t reclaimed_reachable = 0;
  // Registrations still valid now.
  uint64_t live_regs() const { return fast_regs - local_invs - remote_invs - destroyed_valid; }
};

class World {
 public:
  // The world `name` of this process, made with `seed` if it does not exist
  // yet (an existing world keeps its seed). Devices opened with
  // "sim:world=<name>" join it; it lives while a device or a caller holds it.
  static std::shared_ptr<World> open(std::string_view name, uint64_t seed);
  // The world `name` if it exists.
  static std::shared_ptr<World> find(std::string_view name);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  const std::string& name() const { return name_; }
  uint64_t seed() const { return seed_; }

  // Runs one runnable event chosen by the seed; false when none is runnable.
  bool step();
  // Whether any event is runnable now.
  bool runnable();
  // Events each Cq::poll runs before it looks (0..max, drawn); 0 turns auto
  // progress off and leaves it all to step().
  void set_auto_steps(uint32_t max) { auto_steps_ = max; }

  // Virtual time in ns (starts at 1 s, so that no deadline is 0).
  uint64_t now_ns() const { return now_ns_; }
  void advance(uint64_t ns);
  // Virtual time that every Cq::poll adds (default 0: only events and
  // advance() move it). With it, a host that polls an idle world still
  // sees time pass -- as a count of its polls, not of real time -- so its
  // timers run without a simulation loop that jumps the clock (a
  // functional test over sim that installs the virtual clock).
  void set_poll_ns(uint64_t ns) { poll_ns_ = ns; }
  uint64_t poll_ns() const { return poll_ns_; }
  // Makes now_ns() the process's clock (base/clock.h set_virtual_clock)
  // until uninstall_clock() or the world's end, and sets the process's hash
  // key from the seed (base/process_key.h; it stays): before any engine.
  void install_clock();
  void uninstall_clock();

  // Draws from the world's generator (the simulation's own choices share it,
  // so one seed decides everything).
  uint64_t draw();
  uint64_t draw_below(uint64_t n);  // [0, n), n > 0
  bool chance(uint32_t per_mille) { return draw_below(1000) < per_mille; }

  // The schedule as a list of decisions (a shrinker's input, tests/sim):
  // every draw_below() result, in order. record_decisions(v) appends each
  // to *v; replay_decisions(v) takes each from *v while it lasts (a value
  // at or past its bound is taken modulo the bound) and from the generator
  // after it. The generator advances either way, so a replay that runs past
  // its list goes on as its seed would. nullptr: off.
  void record_decisions(std::vector<uint64_t>* out) { record_ = out; }
  void replay_decisions(const std::vector<uint64_t>* tape) { tape_ = tape, tape_pos_ = 0; }
  // Decisions taken from the replayed list so far.
  size_t decisions_replayed() const { return tape_pos_; }

  // Faults. A random QP that is connected, or nullptr.
  SimQp* pick_connected_qp();
  // The QP goes to error as if its transport failed (retry exceeded): its
  // outstanding WRs flush, both ends see kDisconnected.
  void fail_qp(SimQp* qp);
  // A graceful disconnect of the QP, as Device::disconnect.
  void disconnect_qp(SimQp* qp);
  // The QP fails (retry exceeded) before its next `wrs`+1-th send WR, which
  // may fall inside a chain (between a REG_MR and its SEND).
  void fail_qp_after(SimQp* qp, uint64_t wrs);
  // The QP's next RDMA READ, WRITE or SEND_WITH_INV names a stale key (its
  // key byte changed) or, for a READ or WRITE as often as not, a range past
  // its registration: the peer refuses it as a remote access (or invalid
  // request) error, as it would a buggy or malicious initiator's.
  void corrupt_next_key(SimQp* qp);
  // The QP's next SEND, READ or WRITE executes at the responder but its
  // acknowledgement is lost: the requester's WR fails (retry exceeded) and
  // its QP goes to error although the peer acted on it -- the peer served
  // a call its client will send again.
  void lose_next_ack(SimQp* qp);
  // The port of the QP's device goes down for `ns` of virtual time (and
  // comes back up by itself). While down: its WRs that need the wire fail
  // (retry exceeded), connect() and listen() fail, requests to it go
  // unanswered (kUnreachable); the host sees port_up() change through
  // poll_cm(). Connections idle through a short flap survive it.
  void link_down(SimQp* qp, uint64_t ns);
  // The QP's kDisconnected is reported twice: a late duplicate, as
  // connection managers deliver them (a driver bug or a recycled id at the
  // device level; the engine must not act on one twice).
  void duplicate_next_disconnect(SimQp* qp);
  // The QP's SENDs that find no receive at the peer retry `retries` times
  // `timer_ns` apart (RNR NAKs), then fail (retry exceeded) instead of
  // waiting for ever. A correct credit scheme never meets it.
  void rnr_retry(SimQp* qp, uint32_t retries, uint64_t timer_ns);

  // A QP of a shared receive queue destroyed while it held one of the
  // SRQ's receives -- a message being received when its host, having
  // polled its receive CQ empty, destroyed it -- completes that receive in
  // error on its receive CQ *after* the destroy, named by the destroyed
  // QP's number (which, recycled, may name a QP made since): a scheduled
  // event (half of them held until the number is taken again), per_mille
  // of such destroys (0: never, the default). rdmadev.h
  // lets a device deliver a destroyed QP's completions; the host must take
  // the buffer back and leave the connection that has the number alone.
  void late_receives(uint32_t per_mille) { late_recv_per_mille_ = per_mille; }
  uint32_t late_receives_per_mille() const { return late_recv_per_mille_; }

  // Wait mode: how many times a device's wait fd was made readable so far
  // (SimDevice::notify). A sleeper's fd that was quiet when this count was
  // N is quiet still while it is N: a host loop may skip asking the kernel
  // (poll(2): a system call per sleeper per turn was most of what wait
  // mode added to a schedule).
  uint64_t wakeups() const { return wakeups_; }
  void count_wakeup() { ++wakeups_; }

  // The schedule trace: every event, one line each, with virtual time
  // relative to the start. Kept in memory when keep_trace(true) (the last
  // `limit` lines; 0: all); its hash always, over the lines' fields, so
  // that it is the same whether they are kept or not: a simulation runs
  // without the trace and runs a failing seed again to print it.
  void keep_trace(bool on, size_t limit = 0) { keep_trace_ = on, trace_limit_ = limit; }
  bool keeps_trace() const { return keep_trace_; }
  // A line of the simulation's own (faults it chose), `line` then `more`.
  void note(std::string_view line, std::string_view more = {});
  // A line "what key=id detail value", formatted only when the trace is kept.
  void event(const char* what, const char* key, uint32_t id, const char* detail, uint64_t value);
  std::vector<std::string> trace() const { return {trace_.begin(), trace_.end()}; }
  uint64_t trace_hash() const { return trace_hash_; }

  const WorldCounters& counters() const { return c_; }
  WorldCounters& counters_mut() { return c_; }
  // The first memory returned while reachable (counters().reclaimed_reachable),
  // said in words; empty when none.
  const std::string& first_reclaim_violation() const { return reclaim_why_; }
  // Whether the engine's pools report what they take back in this build
  // (TERN_DEBUG: tests and debug builds); without, the check sees nothing.
  static bool reclaim_checked();

  // QP numbers: by default each new QP takes the next number, never used
  // before. Recycled: the lowest number no live QP has (as devices reuse
  // them), so a completion a destroyed QP left in a shared CQ names a QP
  // made since, and only its own bookkeeping tells the host it is stale.
  void recycle_qp_numbers(bool on) { recycle_qpns_ = on; }
  // A QP's identity for the driver's own references (a connection request's
  // client): unique for the world's life, unlike its number.
  uint64_t new_qp_serial() { return ++qp_serials_; }

  // ---- for the driver's objects
  uint32_t add_qp(SimQp* qp);
  void remove_qp(SimQp* qp);
  SimQp* qp_by_num(uint32_t qpn) const;
  bool bind_listener(const std::string& addr, SimDevice* dev);
  void unbind_listener(const std::string& addr, SimDevice* dev);
  SimDevice* listener(const std::string& addr) const;
  uint32_t next_device_index() { return next_dev_++; }
  void add_device(SimDevice* d) { devices_.push_back(d); }
  void remove_device(SimDevice* d);
  // [p, p + len) goes back to an engine's pool: counts and describes it
  // when a WR, a posted receive or a valid fast registration covers it.
  void check_reclaimed(const void* p, size_t len, const char* pool);
  void auto_progress(uint32_t scale);
  // late_receives: a completion for `cq`, published by a later step.
  struct LateRecv {
    SimCq* cq;
    uint64_t wr_id;
    uint32_t qpn;
    // Held back until a QP made since has its number (or nothing else can
    // run): the case where only the host's own bookkeeping tells it apart.
    bool until_reused;
  };
  void add_late(const LateRecv& l) { late_.push_back(l); }
  void drop_late(const SimCq* cq);
  uint32_t deliverable_late();
  // The live QP (its serial) whose number the completion a CQ poll just
  // handed out named although a destroyed QP left it; 0: none. A host that
  // disconnects it before its next CQ poll took the completion for its own.
  uint64_t stale_suspect = 0;
  void trace_event(const char* what, uint32_t qpn, const char* detail, uint64_t value) {
    event(what, "qp", qpn, detail, value);
  }

 private:
  World(std::string name, uint64_t seed);
  void keep_line(std::string l);

  std::string name_;
  uint64_t seed_;
  uint64_t rng_[4];
  std::vector<uint64_t>* record_ = nullptr;
  const std::vector<uint64_t>* tape_ = nullptr;
  size_t tape_pos_ = 0;
  uint64_t now_ns_ = 1'000'000'000;
  uint64_t start_ns_ = 1'000'000'000;
  uint32_t auto_steps_ = 3;
  uint64_t poll_ns_ = 0;
  uint64_t wakeups_ = 0;
  bool clock_installed_ = false;
  bool keep_trace_ = false;
  size_t trace_limit_ = 0;
  std::deque<std::string> trace_;  // a ring of trace_limit_ lines when limited
  uint64_t trace_hash_ = 1469598103934665603ull;
  WorldCounters c_;
  uint32_t next_qpn_ = 1;
  bool recycle_qpns_ = false;
  uint64_t qp_serials_ = 0;
  uint32_t next_dev_ = 0;
  // QPs by number: the order the scheduler looks at them in (never by address).
  std::vector<SimQp*> qps_;
  std::vector<std::pair<std::string, SimDevice*>> listeners_;
  std::vector<SimDevice*> devices_;
  std::string reclaim_why_;
  uint32_t late_recv_per_mille_ = 0;
  std::deque<LateRecv> late_;
};

}  // namespace tern::sim
