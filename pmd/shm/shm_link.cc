// pmd/shm links: how a poll finds the QPs with work in O(active), not by
// visiting every QP (docs/shm-driver.md, "Progress").
//
// A link (ShmLink, shm_layout.h) is one shared page of activity words
// between a server device and one client device of one process: the server
// makes it at the first accept of a connection from that (pid, device
// token), sends the memfd with every ACCEPT and names the connection's slot;
// the client maps it once. Each side sets the peer's bit for a connection
// after storing what the peer must act on -- a descriptor published, the
// peer's consumer index advanced, its endpoint state changed -- and each
// poll exchanges the half it reads and queues the QPs flagged there. The
// rest of a QP's work is local and queued by whoever makes it (a post, an
// error to flush, a completion a full CQ held back: ShmQp::mark_active).
//
// Why per link, not one page per server that every client writes: a bit is
// peer input, and a bit set in a shared page could name anyone's connection.
// In a link only the process the server gave it to (SO_PEERCRED's pid) can
// write, and its slots name only that process's connections: setting bits
// makes us visit its own QPs, leaving them clear stalls only its own.
//
// Ordering: the publisher's store (seq word, cons, state) comes before its
// fetch_or of the word, which comes before the fetch_or of the summary (both
// release; word 0 has no summary bit); the poller exchanges the summary, then
// the word (acquire), then visits. News that lands after the exchange sets the bit again for the next
// poll. Wait mode is unchanged (shm_wait.cc): the publisher sets the bit and
// then, after its fence, looks at the wait word; the poller's re-check after
// arming reads the summary, so either it sees the bit or the peer sees the
// armed word and sends a WAKE.
//
// Acks: a descriptor the peer flagged (kDescAckWanted: a signaled WR, a
// filling ring) asks for our bit and a WAKE check once our cons passes it.
// The cons store is made at once, but the bit waits: what a host receives
// it mostly answers before its next poll (a request's reply; at depth 1 a
// reply's next call), and the bit of that post -- set after the cons store
// -- tells the peer both; ring_peer's WAKE check follows at the visit the
// post queues. Sent on its own, the ack cost both sides a locked RMW pair
// (ours, the peer's exchange), a line transfer and a visit per message the
// peer signals, which at depth 1 is every reply. Where no post comes, the
// device sends it two CQ polls later (age_owed: a poll ages the list the
// previous one made, so it survives the rest of the pass that executed the
// descriptor, whose second CQ poll comes before the host has handled it),
// and every ack owed goes before the host arms to sleep (ShmCq::arm,
// arm_wait); a poll made while armed acks at once. A host that executes a
// flagged descriptor and then neither polls nor arms -- between synchronous
// calls -- leaves the bit unset until it comes back; its cons is stored,
// and the peer reads it at its next visit of the QP: in poll mode the
// safety net's (<= 2 x kSafetyNetNs), in wait mode the wake arm_wait sets a
// timer for while a flagged descriptor is not retired (ack_wait).
//
// Watched QPs: a QP whose visit executed inbound descriptors joins the
// device's watched set (kMaxWatched), whose members' next inbound seq words
// every CQ poll loads itself (peek_watched), and sets its endpoint's
// watching word; its peer's posts then skip the fetch_or (ShmQp::
// note_published). The link line moved twice per message between the
// cores; the slot's line moves anyway. Letting go is Dekker's pair: the
// producer stores the seq word, fences, loads `watching` (and sets the bit
// unless it is set); we clear `watching`, fence, and peek once more
// (unwatch). The safety net's clock sweeps the set (sweep_watched): a
// member that executed nothing for kWatchQuietSweeps sweeps is let go, and
// a quiet one makes room for a QP that found work. docs/shm-driver.md,
// "Watched QPs", says why each rule is there.
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "mem/memfd.h"
#include "shm/shm_internal.h"

namespace tern::shm {

void ShmDevice::collect_links() {
  // One RPC makes ~3 of these calls (the request; the reply, with the
  // request's consumption; the reply's consumption), mostly for one bit, so
  // the call's own overhead is much of its cost: the link table's bounds and
  // the ready list's head are kept in registers (a store through a QP
  // pointer could otherwise alias them and reload them per bit), and the
  // wake an armed device owes itself for what it queued (enqueue_ready) is
  // sent once, at the end: no call inside the loops, so few registers to
  // save around one.
  ShmQp* head = ready_head_;
  bool queued = false;
  for (const LinkIn *l = link_in_.data(), *end = l + link_in_.size(); l != end; ++l) {
    ShmLinkHalf* h = l->half;
    // Loads first: an idle link's line stays shared in our cache until the
    // peer writes it, where an exchange would take it from the peer each time.
    // Word 0 has no summary bit (shm_layout.h): looked at on its own, and
    // a summary bit 0 (a peer's, never ours) names nothing more.
    uint64_t sum = h->summary.load(std::memory_order_relaxed);
    if (sum != 0) sum = h->summary.exchange(0, std::memory_order_acq_rel) & ~uint64_t{1};
    if (h->words[0].load(std::memory_order_relaxed) != 0) sum |= 1;
    // The slot table, once per link.
    ShmQp* const* slot_qp = l->link->slots.data();
    const size_t nslots = l->link->slots.size();
    while (sum != 0) {
      const uint32_t j = static_cast<uint32_t>(__builtin_ctzll(sum));
      sum &= sum - 1;
      uint64_t w = h->words[j].exchange(0, std::memory_order_acq_rel);
      while (w != 0) {
        const uint32_t slot = j * 64 + static_cast<uint32_t>(__builtin_ctzll(w));
        w &= w - 1;
        // Peer-written: a slot we gave no QP of its is ignored.
        ShmQp* qp = slot < nslots ? slot_qp[slot] : nullptr;
        if (qp == nullptr) continue;
        // A bit may be an ack that no SEND of the peer's carries: the
        // visit reads cons (complete_sends), even if queued already.
        qp->cons_look_ = true;
        if (qp->ready_pprev_ != nullptr) continue;
        // ShmQp::mark_active, with the list head local.
        link_ready(&ready_head_, head, qp);
        head = qp;
        queued = true;
      }
    }
  }
  ready_head_ = head;
  if (TERN_UNLIKELY(queued && armed_)) self_wake();
}

void ShmDevice::visit_ready(const void* cq) {
  // The whole list, taken first: what a visit queues (a QP with work left,
  // one a visit made news for) waits for the next poll -- among several, the
  // next poll of this CQ (cut_head_).
  // The QPs of the list taken keep their ready_pprev_, still pointing into
  // it (at ready_head_ for the first): unready would follow it, but no QP
  // goes away during a visit (only the host destroys one), and each is off
  // (null) before its progress().
  ShmQp* qp = ready_head_;
  ready_head_ = nullptr;
  // Several QPs with work: each executes a share of its inbound queue, and
  // the rest comes back next poll (kSharedBurst). And the visit after such
  // a one too: a host polls a send CQ and then a receive CQ per pass, and a
  // QP cut short in the first would otherwise be alone in the second and
  // execute its whole queue in the same pass after all.
  const bool several = qp->next_ready_ != nullptr;
  exec_burst_ = several || shared_last_ ? kSharedBurst : kExecBurst;
  shared_last_ = several;
  if (several) {
    cutting_ = true;
    if (cut_head_ == nullptr) cut_cq_ = cq, cut_polls_ = 0;
  }
  while (qp != nullptr) {
    ShmQp* next = qp->next_ready_;
    qp->ready_pprev_ = nullptr;  // before progress(): what comes after queues it again
    qp->progress();
    qp = next;
  }
  cutting_ = false;
}

void ShmDevice::take_cut() {
  // Still among several when they were cut: even alone in this visit they
  // execute a shared burst (a QP cut short in the receive CQ's poll comes
  // back in the next pass's second poll, after the other connections'
  // messages of that pass were taken in its first, and would otherwise take
  // its whole queue there).
  shared_last_ = true;
  ShmQp* qp = cut_head_;
  cut_head_ = nullptr;
  while (qp != nullptr) {
    ShmQp* next = qp->next_ready_;
    link_ready(&ready_head_, ready_head_, qp);
    ready_head_ = qp;
    qp = next;
  }
}

void ShmDevice::age_owed() {
  // The older list is due: taken whole first, so that a QP that owes again
  // while it is rung goes on the newer list; the newer list becomes the
  // older, and the emptied one takes what is listed from now on.
  OwedList due;
  const uint8_t old = owed_new_ ^ 1;
  due.swap(owed_[old]);
  owed_new_ = old;
  while (ShmQp* qp = due.pop_front())
    if (qp->ack_owed_) qp->ring_peer();  // not carried by a post since
}

void ShmDevice::send_all_owed() {
  age_owed();
  age_owed();
}

void ShmDevice::watch_full(ShmQp* qp) {
  // The set is full: the member quiet longest makes room, if it executed
  // nothing since the last sweep; else the QP stays with the link (busy
  // members keep their places, so a flood of connections does not make the
  // set churn, each change a line the peer must fetch again).
  uint32_t stale = 0;
  for (uint32_t i = 1; i < nwatched_; ++i)
    if (watched_[i].qp->watch_quiet_ > watched_[stale].qp->watch_quiet_) stale = i;
  if (watched_[stale].qp->watch_quiet_ == 0) return;
  unwatch(stale);
  watch_at(nwatched_++, qp);
}

void ShmDevice::sweep_watched() {
  for (uint32_t i = 0; i < nwatched_;) {
    ShmQp* qp = watched_[i].qp;
    if (qp->in_cons_ != qp->watch_seen_) {
      qp->watch_seen_ = qp->in_cons_;
      qp->watch_quiet_ = 0;
    } else if (++qp->watch_quiet_ >= kWatchQuietSweeps) {
      unwatch(i);
      continue;
    }
    ++i;
  }
}

void ShmDevice::unwatch(uint32_t i) {
  ShmQp* qp = watched_[i].qp;
  remove_watched(i);
  qp->set_watching(false);
  // Dekker's pair with ShmQp::peer_watching: our cleared word before the
  // last peek. A producer that read the word set skipped the bit, and its
  // fence put its seq store ahead of that read: this peek sees it, or the
  // producer saw the word clear and set the bit.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (qp->inbound_published()) qp->mark_active();
}

void ShmDevice::drop_watch(ShmQp* qp) {
  if (!qp->watched_) return;
  remove_watched(qp->watch_slot_);
  qp->set_watching(false);
}

void ShmDevice::unready(ShmQp* qp) {
  drop_watch(qp);
  if (qp->owed_link_.linked) owed_[qp->owed_list_].remove(qp);
  if (qp->ready_pprev_ == nullptr) return;
  // Only the host destroys a QP, never from inside a poll: a visit's walk
  // holds the QPs it took, their back links pointing into the list as it
  // was (the first one's at the head, which this would catch).
  TERN_ASSERT(*qp->ready_pprev_ == qp, "shm: QP %u destroyed off the ready list it was queued on", qp->qp_num());
  // O(1): whatever points at us (a list head, the QP before us) points past
  // us, and the QP after us points back at that.
  *qp->ready_pprev_ = qp->next_ready_;
  if (qp->next_ready_ != nullptr) qp->next_ready_->ready_pprev_ = qp->ready_pprev_;
  qp->ready_pprev_ = nullptr;
}

ShmPeerLink* ShmDevice::link_for_accept(int sock, uint64_t peer_token, uint32_t* slot) {
  ucred cred{};
  socklen_t len = sizeof cred;
  const int pid = getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.pid : -1;
  ShmPeerLink* link = nullptr;
  ShmPeerLink* any_of_pid = nullptr;
  uint32_t of_pid = 0;
  for (const auto& l : links_) {
    if (!l->server || l->peer_pid != pid) continue;
    ++of_pid;
    const bool room = !l->free_slots.empty() || l->slots.size() < kLinkSlots;
    if (room && any_of_pid == nullptr) any_of_pid = l.get();
    if (room && l->peer_token == peer_token) {
      link = l.get();
      break;
    }
  }
  // The token is the peer's word: a process naming a new one per connection
  // would cost us a page and an fd each. Past kMaxLinksPerPeer it shares a
  // link it has, whose bits its devices then take from each other: its own
  // loss (the safety net's 10 ms), nobody else's.
  if (link == nullptr && of_pid >= kMaxLinksPerPeer) link = any_of_pid;
  if (link == nullptr) {
    auto fd = mem::create_sealed_memfd("tern-shm-link", kLinkSize, false);
    if (!fd) return nullptr;
    void* p = mmap(nullptr, kLinkSize, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
    if (p == MAP_FAILED) {
      close(*fd);
      return nullptr;
    }
    auto l = std::make_unique<ShmPeerLink>();
    l->map = static_cast<ShmLink*>(p);  // a fresh memfd: all zero, no news
    l->fd = *fd;
    l->server = true;
    l->peer_pid = pid;
    l->peer_token = peer_token;
    link = l.get();
    links_.push_back(std::move(l));
    link_in_.push_back(LinkIn{&link->in(), link});
  }
  if (!link->free_slots.empty()) {
    *slot = link->free_slots.back();
    link->free_slots.pop_back();
  } else {
    *slot = static_cast<uint32_t>(link->slots.size());
    link->slots.push_back(nullptr);
  }
  return link;
}

Result<ShmPeerLink*> ShmDevice::link_for_connect(int fd) {
  if (Status st = mem::check_peer_memfd(fd, kLinkSize); !st.is_ok())
    return make_error(Errc::kRemoteError, "shm: the server's link: %s", st.message().c_str());
  struct stat sb;
  if (fstat(fd, &sb) != 0) return make_sys_error(Errc::kInternal, errno, "shm: fstat of the server's link");
  for (const auto& l : links_)
    if (!l->server && l->dev == static_cast<uint64_t>(sb.st_dev) && l->ino == static_cast<uint64_t>(sb.st_ino))
      return l.get();
  void* p = mmap(nullptr, kLinkSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return make_sys_error(Errc::kNoResources, errno, "shm: mapping the server's link");
  auto l = std::make_unique<ShmPeerLink>();
  l->map = static_cast<ShmLink*>(p);
  l->dev = static_cast<uint64_t>(sb.st_dev);
  l->ino = static_cast<uint64_t>(sb.st_ino);
  links_.push_back(std::move(l));
  link_in_.push_back(LinkIn{&links_.back()->in(), links_.back().get()});
  return links_.back().get();
}

void ShmDevice::drop_link(ShmPeerLink* link) {
  for (auto it = links_.begin(); it != links_.end(); ++it) {
    if (it->get() != link) continue;
    link_in_.erase(std::find_if(link_in_.begin(), link_in_.end(), [&](const LinkIn& l) { return l.link == link; }));
    munmap(link->map, kLinkSize);
    if (link->fd >= 0) close(link->fd);
    links_.erase(it);
    return;
  }
}

void ShmQp::attach_link(ShmPeerLink* link, uint32_t slot) {
  if (link->slots.size() <= slot) link->slots.resize(slot + 1, nullptr);
  // A client's slot may still name a QP whose server side is gone (the
  // server reuses a slot once its QP there is destroyed; we may not have
  // noticed the hang-up yet): that QP has no more news to come, and it does
  // not clear the slot when it goes (detach_link).
  link->slots[slot] = this;
  ++link->used;
  link_ = link;
  link_slot_ = slot;
  ShmLinkHalf& out = link->out();
  notify_word_ = &out.words[slot / 64];
  notify_summary_ = slot < 64 ? nullptr : &out.summary;  // word 0: none (shm_layout.h)
  notify_bit_ = uint64_t{1} << (slot % 64);
  notify_sum_bit_ = uint64_t{1} << (slot / 64);
  mark_active();
}

void ShmQp::detach_link() {
  if (link_ == nullptr) return;
  ShmPeerLink* l = link_;
  link_ = nullptr;
  notify_word_ = nullptr;
  notify_summary_ = nullptr;
  if (l->slots[link_slot_] == this) {
    l->slots[link_slot_] = nullptr;
    if (l->server) l->free_slots.push_back(link_slot_);
  }
  if (--l->used == 0) dev_->drop_link(l);
}

}  // namespace tern::shm
