// The scheduler: which runnable event runs next, chosen by the world's
// seeded generator, and the virtual clock it advances.
#include "sim/sim_world.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "base/check.h"
#include "base/clock.h"
#include "base/process_key.h"
#include "base/reclaim_hook.h"
#include "sim/sim_internal.h"

namespace tern::sim {

namespace {

// Worlds by name. Weak: a world ends with its last device or holder.
std::mutex g_worlds_mu;
std::map<std::string, std::weak_ptr<World>, std::less<>>& worlds() {
  static std::map<std::string, std::weak_ptr<World>, std::less<>> m;
  return m;
}

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// What a step may run: an event a QP offers.
enum class Offer : uint8_t { kSq, kSendCqe, kRecvCqe, kCm, kLate };
const char* offer_name(Offer o) {
  switch (o) {
    case Offer::kSq: return "sq";
    case Offer::kSendCqe: return "scqe";
    case Offer::kRecvCqe: return "rcqe";
    case Offer::kCm: return "cm";
    case Offer::kLate: return "late";
  }
  return "?";
}

// The engine's pools report memory they take back (base/reclaim_hook.h):
// every live world looks whether its devices could still touch it.
// Raw pointers, each removed by its world's destructor: the check runs on
// every buffer an engine gives back, so it takes no reference and makes no
// copy (a weak_ptr per world and a vector cost a third of it).
std::vector<World*>& live_worlds() {
  static std::vector<World*> v;
  return v;
}

void on_reclaim(const void* p, size_t len, const char* pool) {
  std::lock_guard<std::mutex> g(g_worlds_mu);
  for (World* w : live_worlds()) w->check_reclaimed(p, len, pool);
}

}  // namespace

bool World::reclaim_checked() { return detail::debug_checks_compiled(); }

void World::remove_device(SimDevice* d) { devices_.erase(std::remove(devices_.begin(), devices_.end(), d), devices_.end()); }

void World::check_reclaimed(const void* p, size_t len, const char* pool) {
  const auto a = reinterpret_cast<uint64_t>(p);
  const char* what = nullptr;
  uint32_t qpn = 0;
  uint64_t seq = UINT64_MAX;
  for (SimQp* q : qps_)
    if (q->covers(a, len, &what, &seq)) {
      qpn = q->qp_num();
      break;
    }
  if (what == nullptr)
    for (SimDevice* d : devices_)
      if (d->fast_reg_covers(a, len)) {
        what = "a valid fast registration (its rkey usable by the peer)";
        break;
      }
  if (what == nullptr) return;
  ++c_.reclaimed_reachable;
  // No address in it: the words must be the same in any process.
  std::string by = what;
  if (seq != UINT64_MAX) by = "send WR " + std::to_string(seq) + " (" + by + "), not yet executed,";
  if (qpn != 0) by += " of qp " + std::to_string(qpn);
  std::string why =
      std::string("a ") + pool + " buffer of " + std::to_string(len) + " bytes given back while " + by + " covered it";
  note("reclaim-reachable ", why);
  if (reclaim_why_.empty()) reclaim_why_ = std::move(why);
}

World::World(std::string name, uint64_t seed) : name_(std::move(name)), seed_(seed) {
  // Once per process; it stays (a world checks only its own devices).
  static const bool hooked = (set_reclaim_hook(&on_reclaim), true);
  (void)hooked;
  // xoshiro256** seeded through splitmix64: the same sequence on every
  // machine (std:: distributions are not portable; draw_below is ours).
  uint64_t x = seed;
  for (auto& r : rng_) r = splitmix(x);
}

World::~World() {
  uninstall_clock();
  std::lock_guard<std::mutex> g(g_worlds_mu);
  auto& live = live_worlds();
  live.erase(std::remove(live.begin(), live.end(), this), live.end());
  auto it = worlds().find(name_);
  if (it != worlds().end() && it->second.expired()) worlds().erase(it);
}

std::shared_ptr<World> World::open(std::string_view name, uint64_t seed) {
  std::lock_guard<std::mutex> g(g_worlds_mu);
  auto it = worlds().find(name);
  if (it != worlds().end())
    if (auto w = it->second.lock()) return w;
  std::shared_ptr<World> w(new World(std::string(name), seed));
  worlds()[std::string(name)] = w;
  live_worlds().push_back(w.get());
  return w;
}

std::shared_ptr<World> World::find(std::string_view name) {
  std::lock_guard<std::mutex> g(g_worlds_mu);
  auto it = worlds().find(name);
  return it != worlds().end() ? it->second.lock() : nullptr;
}

uint64_t World::draw() {
  const uint64_t result = rotl(rng_[1] * 5, 7) * 9;
  const uint64_t t = rng_[1] << 17;
  rng_[2] ^= rng_[0];
  rng_[3] ^= rng_[1];
  rng_[1] ^= rng_[2];
  rng_[0] ^= rng_[3];
  rng_[2] ^= t;
  rng_[3] = rotl(rng_[3], 45);
  return result;
}

uint64_t World::draw_below(uint64_t n) {
  // Lemire's multiply-shift; the tiny bias does not matter here, the
  // determinism does.
  uint64_t v = static_cast<uint64_t>((static_cast<unsigned __int128>(draw()) * n) >> 64);
  if (tape_ != nullptr && tape_pos_ < tape_->size()) {
    const uint64_t t = (*tape_)[tape_pos_++];
    v = t < n ? t : t % n;
  }
  if (record_ != nullptr) record_->push_back(v);
  return v;
}

void World::advance(uint64_t ns) { now_ns_ += ns; }

void World::install_clock() {
  set_virtual_clock(&now_ns_);
  // The process's hash key too, from the seed: it picks a client's first
  // xids and the order of keyed tables, and a random one would make a
  // schedule replay differently in another process (a shrinker's child).
  uint64_t x = seed_ ^ 0x6b65792d6b65792dull;
  SipKey k;
  k.k0 = splitmix(x);
  k.k1 = splitmix(x);
  set_process_key_for_simulation(k);
  clock_installed_ = true;
}

void World::uninstall_clock() {
  if (!clock_installed_) return;
  set_virtual_clock(nullptr);
  clock_installed_ = false;
}

uint32_t World::add_qp(SimQp* qp) {
  if (recycle_qpns_) {
    // The lowest free number, kept in number order (qps_ is sorted).
    uint32_t n = 1;
    auto it = qps_.begin();
    for (; it != qps_.end() && (*it)->qp_num() == n; ++it) ++n;
    qps_.insert(it, qp);
    if (n >= next_qpn_) next_qpn_ = n + 1;
    return n;
  }
  qps_.push_back(qp);  // numbers grow, so the vector stays in number order
  return next_qpn_++;
}

void World::remove_qp(SimQp* qp) { qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end()); }

SimQp* World::qp_by_num(uint32_t qpn) const {
  auto it = std::lower_bound(qps_.begin(), qps_.end(), qpn, [](SimQp* q, uint32_t n) { return q->qp_num() < n; });
  return it != qps_.end() && (*it)->qp_num() == qpn ? *it : nullptr;
}

bool World::bind_listener(const std::string& addr, SimDevice* dev) {
  for (auto& l : listeners_)
    if (l.first == addr) return l.second == dev;
  listeners_.emplace_back(addr, dev);
  return true;
}

void World::unbind_listener(const std::string& addr, SimDevice* dev) {
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                  [&](const auto& l) { return l.first == addr && l.second == dev; }),
                   listeners_.end());
}

SimDevice* World::listener(const std::string& addr) const {
  for (const auto& l : listeners_)
    if (l.first == addr) return l.second;
  return nullptr;
}

// The oldest late completion that may be delivered now: one that waits
// for its number to be taken again only once it is. UINT32_MAX: none.
uint32_t World::deliverable_late() {
  for (uint32_t i = 0; i < late_.size(); ++i)
    if (!late_[i].until_reused || qp_by_num(late_[i].qpn) != nullptr) return i;
  return UINT32_MAX;
}

bool World::runnable() {
  if (deliverable_late() != UINT32_MAX) return true;
  for (SimQp* q : qps_)
    if (q->sq_runnable() || q->has_send_cqe() || q->has_recv_cqe() || q->has_cm()) return true;
  return false;
}

bool World::step() {
  // Every runnable event, in QP-number order; the generator picks one. Only
  // heads are offered, which is what keeps each QP's own order.
  struct Cand {
    SimQp* qp;
    Offer what;
  };
  Cand cands[64];
  uint32_t n = 0, seen = 0;
  auto offer = [&](SimQp* q, Offer o) {
    // Reservoir choice: any number of candidates in constant space.
    ++seen;
    if (n < 64) {
      cands[n++] = Cand{q, o};
    } else {
      uint64_t k = draw_below(seen);
      if (k < 64) cands[k] = Cand{q, o};
    }
  };
  for (SimQp* q : qps_) {
    if (q->sq_runnable()) offer(q, Offer::kSq);
    if (q->has_send_cqe()) offer(q, Offer::kSendCqe);
    if (q->has_recv_cqe()) offer(q, Offer::kRecvCqe);
    if (q->has_cm()) offer(q, Offer::kCm);
  }
  // The oldest late completion, once its number is taken again if it waits
  // for that (if it never is, its CQ's end drops it: as a device whose
  // host destroys the CQ first).
  const uint32_t late = deliverable_late();
  if (late != UINT32_MAX) offer(nullptr, Offer::kLate);
  if (n == 0) return false;
  const Cand c = cands[draw_below(n)];
  ++c_.events;
  // An event takes 0.1-1 us of simulated time.
  now_ns_ += 100 + draw_below(900);
  switch (c.what) {
    case Offer::kSq: c.qp->run_sq(); break;
    case Offer::kSendCqe: c.qp->publish_send(); break;
    case Offer::kRecvCqe: c.qp->publish_recv(); break;
    case Offer::kCm: c.qp->run_cm(); break;
    case Offer::kLate: {
      const LateRecv l = late_[late];
      late_.erase(late_.begin() + late);
      trace_event("late-rcqe", l.qpn, qp_by_num(l.qpn) != nullptr ? "recycled" : "free", 0);
      CqEntry e{rdma::Wc{l.wr_id, 0, 0, l.qpn, rdma::WcStatus::kWrFlushErr, rdma::WcOpcode::kRecv, 0, 0}, false, 0};
      e.stale = true;
      l.cq->publish(e);
      break;
    }
  }
  (void)offer_name;
  return true;
}

void World::drop_late(const SimCq* cq) {
  late_.erase(std::remove_if(late_.begin(), late_.end(), [cq](const LateRecv& l) { return l.cq == cq; }), late_.end());
}

void World::auto_progress(uint32_t scale) {
  if (auto_steps_ == 0) return;
  uint64_t k = draw_below(uint64_t{auto_steps_} * scale + 1);
  for (uint64_t i = 0; i < k; ++i)
    if (!step()) break;
}

SimQp* World::pick_connected_qp() {
  uint32_t n = 0;
  for (SimQp* q : qps_) n += q->state() == rdma::QpState::kRts && q->linked_peer() != nullptr;
  if (n == 0) return nullptr;
  uint64_t k = draw_below(n);
  for (SimQp* q : qps_)
    if (q->state() == rdma::QpState::kRts && q->linked_peer() != nullptr && k-- == 0) return q;
  return nullptr;
}

void World::fail_qp(SimQp* qp) {
  ++c_.faults;
  trace_event("fault-qp-error", qp->qp_num(), "", 0);
  qp->enter_error(make_error(Errc::kDisconnected, "sim: transport retry exceeded (injected)"), false, true);
}

void World::disconnect_qp(SimQp* qp) {
  ++c_.faults;
  trace_event("fault-disconnect", qp->qp_num(), "", 0);
  (void)qp->dev()->disconnect(qp);
}

void World::fail_qp_after(SimQp* qp, uint64_t wrs) {
  trace_event("fault-fail-after", qp->qp_num(), "wrs", wrs);
  (void)qp->inject_fault(rdma::Fault{rdma::Fault::Kind::kFailAfterWrs, wrs, 0});
}

void World::corrupt_next_key(SimQp* qp) {
  trace_event("fault-corrupt-key", qp->qp_num(), "", 0);
  qp->corrupt_next_key();
}

void World::lose_next_ack(SimQp* qp) {
  trace_event("fault-lose-ack", qp->qp_num(), "", 0);
  qp->lose_next_ack();
}

void World::link_down(SimQp* qp, uint64_t ns) {
  ++c_.faults;
  trace_event("fault-link-down", qp->qp_num(), "ns", ns);
  qp->dev()->link_down_until(now_ns_ + ns);
}

void World::duplicate_next_disconnect(SimQp* qp) {
  trace_event("fault-dup-disconnect", qp->qp_num(), "", 0);
  qp->duplicate_next_disconnect();
}

void World::rnr_retry(SimQp* qp, uint32_t retries, uint64_t timer_ns) {
  trace_event("fault-rnr-retry", qp->qp_num(), "retries", retries);
  qp->set_rnr_retry(retries, timer_ns);
}

namespace {

// A hash over the fields of a trace line (FNV-1a for strings): the hash is the same whether the
// line is kept (formatted) or not, and a schedule that keeps no trace
// formats nothing (a formatted line per event was most of the trace's cost).
inline uint64_t fnv_u64(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9E3779B97F4A7C15ull;  // a whole word at a time
  return h ^ (h >> 29);
}
inline uint64_t fnv_str(uint64_t h, std::string_view s) {
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return (h ^ 0xff) * 1099511628211ull;  // the end of a field
}

}  // namespace

void World::note(std::string_view line, std::string_view more) {
  trace_hash_ = fnv_str(fnv_str(fnv_u64(trace_hash_, now_ns_ - start_ns_), line), more);
  if (!keep_trace_) return;
  char head[48];
  std::snprintf(head, sizeof head, "%12llu ", static_cast<unsigned long long>(now_ns_ - start_ns_));
  std::string l = head;
  l.append(line).append(more);
  keep_line(std::move(l));
}

void World::event(const char* what, const char* key, uint32_t id, const char* detail, uint64_t value) {
  uint64_t h = fnv_str(fnv_str(fnv_u64(trace_hash_, now_ns_ - start_ns_), what), key);
  trace_hash_ = fnv_u64(fnv_str(fnv_u64(h, id), detail), value);
  if (!keep_trace_) return;
  char buf[200];
  std::snprintf(buf, sizeof buf, "%12llu %s %s=%u %s %llu", static_cast<unsigned long long>(now_ns_ - start_ns_),
                what, key, id, detail, static_cast<unsigned long long>(value));
  keep_line(buf);
}

void World::keep_line(std::string l) {
  if (trace_limit_ != 0 && trace_.size() >= trace_limit_) trace_.pop_front();
  trace_.push_back(std::move(l));
}

}  // namespace tern::sim
