#include "nfsd/reply_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/log.h"
#include "base/process_key.h"
#include "base/siphash.h"

namespace tern::nfsd {

namespace {

// Version 2 keeps the argument digests' key in the header (version 1's
// digests were unkeyed: such a file is started afresh).
constexpr char kMagic[8] = {'T', 'E', 'R', 'N', 'D', 'R', 'C', '2'};
constexpr uint32_t kHeaderSize = 4096;
// A fixed key: the check word tells a whole slot from a torn one, it is not
// a secret (the file is the server's own, mode 0600).
constexpr SipKey kCheckKey{0x7465726e64726331ull, 0x736c6f74636865ddull};

struct FileHeader {
  char magic[8];
  uint32_t slot_size;
  uint32_t slots;
  uint64_t digest_k0, digest_k1;  // random, made with the file
};

struct Slot {
  uint64_t check;  // 0: empty or being written
  uint64_t seq;
  uint64_t digest;
  uint32_t xid, prog, vers, proc;
  uint16_t peer_len, res_len;
  uint32_t pad;
  char peer[ReplyCache::kMaxPeer];
  uint8_t res[ReplyCache::kMaxResults];
};
static_assert(sizeof(Slot) == 512, "a reply cache slot is 512 bytes");

uint64_t check_of(const Slot& s) {
  const auto* b = reinterpret_cast<const uint8_t*>(&s);
  return siphash24(kCheckKey, {b + 8, sizeof(Slot) - 8}) | 1;
}

// Whether a slot, as the file has it now, is whole and records this very
// call: the full key, not only what the in-memory index believes.
bool slot_holds(const Slot& s, const ReplyKey& k) {
  return s.check != 0 && s.check == check_of(s) && s.peer_len == k.peer.size() && s.peer_len <= ReplyCache::kMaxPeer &&
         s.res_len <= ReplyCache::kMaxResults && std::memcmp(s.peer, k.peer.data(), s.peer_len) == 0 &&
         s.xid == k.xid && s.prog == k.prog && s.vers == k.vers && s.proc == k.proc && s.digest == k.digest;
}

Slot* slot_at(uint8_t* map, uint32_t i) { return reinterpret_cast<Slot*>(map + kHeaderSize + size_t{i} * sizeof(Slot)); }

}  // namespace

size_t ReplyCache::KeyHash::operator()(const ReplyKey& k) const {
  // Every field under the process's key: no client can choose xids or
  // arguments that share an index bucket.
  SipHasher h(process_key());
  h.update_u64(k.peer.size());
  h.update({reinterpret_cast<const uint8_t*>(k.peer.data()), k.peer.size()});
  h.update_u64(uint64_t{k.xid} << 32 | k.proc);
  h.update_u64(uint64_t{k.prog} << 32 | k.vers);
  h.update_u64(k.digest);
  return static_cast<size_t>(h.finish());
}

uint64_t ReplyCache::args_digest(std::span<const uint8_t> args) const { return siphash24(digest_key_, args); }

Result<std::unique_ptr<ReplyCache>> ReplyCache::open(const std::string& path, uint32_t slots) {
  if (slots == 0) return make_error(Errc::kInvalidArgument, "a reply cache of 0 slots");
  std::unique_ptr<ReplyCache> rc(new ReplyCache());
  rc->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (rc->fd_ < 0) return make_sys_error(Errc::kInvalidArgument, errno, "cannot open %s", path.c_str());
  rc->map_len_ = kHeaderSize + size_t{slots} * sizeof(Slot);
  struct stat st;
  if (fstat(rc->fd_, &st) != 0 || !S_ISREG(st.st_mode))
    return make_error(Errc::kInvalidArgument, "%s is not a regular file", path.c_str());
  bool fresh = static_cast<size_t>(st.st_size) != rc->map_len_;
  if (fresh && ftruncate(rc->fd_, 0) != 0)
    return make_sys_error(Errc::kInvalidArgument, errno, "cannot truncate %s", path.c_str());
  if (ftruncate(rc->fd_, static_cast<off_t>(rc->map_len_)) != 0)
    return make_sys_error(Errc::kNoResources, errno, "cannot size %s", path.c_str());
  void* m = mmap(nullptr, rc->map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, rc->fd_, 0);
  if (m == MAP_FAILED) return make_sys_error(Errc::kNoResources, errno, "cannot map %s", path.c_str());
  rc->map_ = static_cast<uint8_t*>(m);
  rc->slots_ = slots;
  rc->slot_keys_.resize(slots);
  rc->slot_used_.assign(slots, false);
  rc->free_.reserve(slots);
  auto* h = reinterpret_cast<FileHeader*>(rc->map_);
  if (!fresh && (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0 || h->slot_size != sizeof(Slot) ||
                 h->slots != slots))
    fresh = true;
  if (fresh) {
    std::memset(rc->map_, 0, rc->map_len_);
    std::memcpy(h->magic, kMagic, sizeof kMagic);
    h->slot_size = sizeof(Slot);
    h->slots = slots;
    const SipKey k = random_sip_key();
    h->digest_k0 = k.k0, h->digest_k1 = k.k1;
  }
  rc->digest_key_ = SipKey{h->digest_k0, h->digest_k1};
  // Every whole slot goes into the index and to its peer, oldest first.
  std::vector<std::pair<uint64_t, uint32_t>> held;  // (seq, slot)
  for (uint32_t i = 0; !fresh && i < slots; ++i) {
    const Slot& s = *slot_at(rc->map_, i);
    if (s.check == 0 || s.check != check_of(s) || s.peer_len > kMaxPeer || s.res_len > kMaxResults) continue;
    ReplyKey k{std::string(s.peer, s.peer_len), s.xid, s.prog, s.vers, s.proc, s.digest};
    auto [it, added] = rc->index_.try_emplace(k, Entry{static_cast<int64_t>(i), true});
    if (!added && slot_at(rc->map_, static_cast<uint32_t>(it->second.slot))->seq < s.seq)
      it->second = Entry{static_cast<int64_t>(i), true};  // the newer record of one call
    rc->slot_keys_[i] = std::move(k);
    rc->slot_used_[i] = true;
    ++rc->loaded_;
    rc->seq_ = std::max(rc->seq_, s.seq);
    held.emplace_back(s.seq, i);
  }
  std::sort(held.begin(), held.end());
  for (auto [seq, i] : held) rc->peer_for(rc->slot_keys_[i].peer)->slots.push_back(i);
  for (uint32_t i = slots; i-- > 0;)
    if (!rc->slot_used_[i]) rc->free_.push_back(i);
  for (auto& [id, p] : rc->peers_) p.rank = rc->rank_.update(p.rank, p.slots.size());
  return rc;
}

ReplyCache::~ReplyCache() {
  if (map_ != nullptr) munmap(map_, map_len_);
  if (fd_ >= 0) close(fd_);
}

ReplyCache::Found ReplyCache::begin(const ReplyKey& k, std::vector<uint8_t>* results) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(k);
  if (it == index_.end()) {
    ++misses_;
    index_.emplace(k, Entry{});
    return Found::kNew;
  }
  if (it->second.slot < 0) {
    ++in_progress_;
    return Found::kInProgress;
  }
  const Slot& s = *slot_at(map_, static_cast<uint32_t>(it->second.slot));
  if (!slot_holds(s, k)) {
    // The index says this slot holds the call, the file says otherwise:
    // someone else wrote it (another process mapping the same file, which
    // the state directory's lock is there to prevent) or it is torn. The
    // file is what a reply would come from, so it decides: a miss.
    index_.erase(it);
    ++misses_;
    index_.emplace(k, Entry{});
    return Found::kNew;
  }
  results->assign(s.res, s.res + s.res_len);
  ++hits_;
  if (it->second.from_file) ++file_hits_;
  return Found::kDone;
}

void ReplyCache::write_slot(uint32_t i, const ReplyKey& k, std::span<const uint8_t> results) {
  Slot* s = slot_at(map_, i);
  // Zeroed check first, set last: a death in between leaves a slot the next
  // open ignores. The fences keep the compiler from moving the stores across
  // (another process reads it only after this one is gone).
  s->check = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  Slot n{};
  n.seq = ++seq_;
  n.digest = k.digest;
  n.xid = k.xid, n.prog = k.prog, n.vers = k.vers, n.proc = k.proc;
  n.peer_len = static_cast<uint16_t>(k.peer.size());
  n.res_len = static_cast<uint16_t>(results.size());
  std::memcpy(n.peer, k.peer.data(), k.peer.size());
  if (!results.empty()) std::memcpy(n.res, results.data(), results.size());
  const uint64_t check = check_of(n);
  std::memcpy(reinterpret_cast<uint8_t*>(s) + 8, reinterpret_cast<const uint8_t*>(&n) + 8, sizeof(Slot) - 8);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s->check = check;
}

void ReplyCache::done(const ReplyKey& k, std::span<const uint8_t> results) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(k);
  if (it == index_.end()) return;
  if (results.size() > kMaxResults || k.peer.size() > kMaxPeer) {
    index_.erase(it);  // too large to keep: a retransmission runs again
    return;
  }
  const uint32_t i = take_slot(k.peer);
  write_slot(i, k, results);
  slot_keys_[i] = k;
  slot_used_[i] = true;
  Peer* p = peer_for(k.peer);
  p->slots.push_back(i);
  p->rank = rank_.update(p->rank, p->slots.size());
  // Taking the slot may have erased this very key (a slot it held before).
  index_[k] = Entry{static_cast<int64_t>(i), false};
}

ReplyCache::Peer* ReplyCache::peer_for(const std::string& id) {
  auto it = peers_.find(std::string_view(id));
  if (it == peers_.end()) {
    it = peers_.emplace(id, Peer{}).first;
    it->second.id = &it->first;
    it->second.rank = rank_.add(&it->second);
  }
  return &it->second;
}

uint32_t ReplyCache::take_slot(const std::string& inserting) {
  if (!free_.empty()) {
    const uint32_t i = free_.back();
    free_.pop_back();
    return i;
  }
  auto mine = peers_.find(std::string_view(inserting));
  const size_t active = peers_.size() + (mine == peers_.end() ? 1 : 0);
  Peer* v = mine != peers_.end() && evicts_its_own(mine->second.slots.size(), slots_, active) ? &mine->second
                                                                                               : rank_.most();
  const uint32_t i = v->slots.front();
  release_slot(v);
  return i;
}

void ReplyCache::release_slot(Peer* p) {
  const uint32_t i = p->slots.front();
  p->slots.pop_front();
  auto old = index_.find(slot_keys_[i]);
  if (old != index_.end() && old->second.slot == static_cast<int64_t>(i)) index_.erase(old);
  slot_used_[i] = false;
  if (p->slots.empty()) {
    rank_.remove(p->rank);
    peers_.erase(peers_.find(std::string_view(*p->id)));
  } else {
    p->rank = rank_.update(p->rank, p->slots.size());
  }
}

size_t ReplyCache::peer_slots(std::string_view peer) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.slots.size();
}

size_t ReplyCache::longest_chain() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t most = 0;
  for (size_t b = 0; b < index_.bucket_count(); ++b) most = std::max(most, index_.bucket_size(b));
  return most;
}

size_t ReplyCache::peers() const {
  std::lock_guard<std::mutex> g(mu_);
  return peers_.size();
}

void ReplyCache::forget(const ReplyKey& k) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(k);
  if (it != index_.end() && it->second.slot < 0) index_.erase(it);
}

uint64_t ReplyCache::hits() const {
  std::lock_guard<std::mutex> g(mu_);
  return hits_;
}
uint64_t ReplyCache::hits_from_file() const {
  std::lock_guard<std::mutex> g(mu_);
  return file_hits_;
}
uint64_t ReplyCache::in_progress_drops() const {
  std::lock_guard<std::mutex> g(mu_);
  return in_progress_;
}
uint64_t ReplyCache::misses() const {
  std::lock_guard<std::mutex> g(mu_);
  return misses_;
}

}  // namespace tern::nfsd
